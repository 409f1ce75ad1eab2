//! The `commands` target: a sequence of commands decoded from the input, applied to a
//! store, with every property of the state checked after every step.
//!
//! After each command:
//! - the new snapshot passes [`StateView::check_invariants`] and the read checks below;
//! - a rejected command left the store exactly as it was (same version, canonical
//!   bytes, table indexes) and a stale index was rejected as stale;
//! - an accepted command moved `last_applied` to its index, and moved the index of
//!   exactly the tables whose rows it changed (the commit's change set names the same
//!   tables);
//! - the snapshot taken before the command, and one held for several steps, still have
//!   the bytes they had.
//!
//! Now and then the store is restored from its own snapshot in place (which must change
//! nothing), so that later commands run on restored state. At the end: the accepted
//! commands replayed into a fresh store (directly and through their wire encoding) give
//! identical bytes, and so does a snapshot round trip (`snapshot_to` then
//! `restore_from`, into an empty and into a used store).

use std::collections::BTreeSet;
use std::sync::Arc;

use schedstate::Commit;
use schedstate::Table;
use schedstate::model::{CsiVolume, DesiredStatus};
use schedstate::state::{
    Command, PluginInstance, StateError, StateSnapshot, StateStore, StateView,
};

use super::generate::{Gen, NAMESPACES, NODES, PLUGINS, VOLUMES};
use super::input::Input;

/// Commands per input, at most.
pub const MAX_STEPS: usize = 256;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let store = StateStore::new();
    let mut generator = Gen::default();
    let mut accepted: Vec<(u64, Command)> = Vec::new();
    let mut held: Option<(StateSnapshot, Vec<u8>)> = None;
    for step in 0..MAX_STEPS {
        if inp.is_empty() {
            break;
        }
        if inp.chance(2) {
            // Replace the store's state with its own snapshot: nothing may change, and
            // every later command must behave as on the original (the final replay
            // into a store that never restored checks that).
            restore_in_place(&store);
        }
        let index = generator.index(&mut inp, store.snapshot().view().last_applied());
        let cmd = generator.command(&mut inp);
        if apply_checked(&store, index, &cmd).is_ok() {
            accepted.push((index, cmd));
        }
        if step % 8 == 0 {
            if let Some((snap, bytes)) = &held {
                assert_eq!(
                    &canonical(snap),
                    bytes,
                    "a snapshot held since step {} changed",
                    step.saturating_sub(8)
                );
            }
            let snap = store.snapshot();
            let bytes = canonical(&snap);
            held = Some((snap, bytes));
        }
    }
    check_final(&store, &accepted);
}

/// Restores `store` from its own snapshot and checks that nothing changed.
pub fn restore_in_place(store: &StateStore) {
    let before = store.snapshot();
    let bytes = canonical(&before);
    let mut image = Vec::new();
    store.snapshot_to(&mut image).expect("snapshot_to");
    store
        .restore_from(&mut image.as_slice())
        .expect("restore of a fresh snapshot");
    let after = store.snapshot();
    assert_eq!(
        canonical(&after),
        bytes,
        "restore in place changed the state"
    );
    if let Err(e) = after.view().check_invariants() {
        panic!("after a restore in place: {e}");
    }
    assert_eq!(
        canonical(&before),
        bytes,
        "restore changed an older snapshot"
    );
}

/// The canonical bytes of a snapshot.
pub fn canonical(snap: &StateSnapshot) -> Vec<u8> {
    snap.canonical_bytes().expect("canonical encoding")
}

/// The engine tables: the four of [`Table`] and the derived instance table.
const TABLES: [&str; 5] = ["nodes", "allocs", "csi_plugins", "csi_volumes", INSTANCES];
const INSTANCES: &str = "csi_plugin_instances";

/// The table index of an engine table by name (the derived one too).
fn engine_table_index(v: &StateView<'_>, name: &str) -> u64 {
    v.raw().table_index_by_name(name).unwrap_or(0)
}

/// The rows of every table (the four state tables and the derived instance table),
/// encoded, in [`TABLES`] order.
fn table_rows(v: &StateView<'_>) -> Vec<Vec<u8>> {
    let enc = |r: Result<Vec<u8>, postcard::Error>| r.expect("encode rows");
    let instances: Vec<Arc<PluginInstance>> = v.raw().iter(v.tables().instances).collect();
    vec![
        enc(postcard::to_allocvec(&v.nodes().collect::<Vec<_>>())),
        enc(postcard::to_allocvec(&v.allocs().collect::<Vec<_>>())),
        enc(postcard::to_allocvec(&v.csi_plugins().collect::<Vec<_>>())),
        enc(postcard::to_allocvec(&v.csi_volumes().collect::<Vec<_>>())),
        enc(postcard::to_allocvec(&instances)),
    ]
}

fn table_indexes(v: &StateView<'_>) -> Vec<u64> {
    TABLES.iter().map(|t| engine_table_index(v, t)).collect()
}

/// Applies `cmd` at `index` and checks every per-step property (see the module docs).
/// Panics on a broken one; returns what the store returned.
pub fn apply_checked(store: &StateStore, index: u64, cmd: &Command) -> Result<Commit, StateError> {
    let before = store.snapshot();
    let before_bytes = canonical(&before);
    let before_rows = table_rows(&before.view());
    let before_indexes = table_indexes(&before.view());
    let last_applied = before.view().last_applied();

    let result = store.apply(index, cmd);

    let after = store.snapshot();
    let av = after.view();
    if let Err(e) = av.check_invariants() {
        panic!(
            "after {} at {index} ({result:?}): {e}\ncommand: {cmd:?}",
            cmd.kind()
        );
    }
    check_reads(&av);
    assert_eq!(
        canonical(&before),
        before_bytes,
        "the snapshot taken before {} changed",
        cmd.kind()
    );
    let stale = index <= last_applied;
    match &result {
        Err(e) => {
            assert_eq!(
                stale,
                matches!(e, StateError::StaleIndex { .. }),
                "index {index} after {last_applied}: {e}"
            );
            assert!(
                after.raw().same_version(before.raw()),
                "rejected {} ({e}) published a version",
                cmd.kind()
            );
            assert_eq!(canonical(&after), before_bytes, "rejected {}", cmd.kind());
            assert_eq!(table_indexes(&av), before_indexes);
        }
        Ok(info) => {
            assert!(!stale, "{} accepted at stale index {index}", cmd.kind());
            assert_eq!(info.index(), index);
            assert_eq!(av.last_applied(), index);
            let after_rows = table_rows(&av);
            let after_indexes = table_indexes(&av);
            // The change set names rows of the four state tables (the derived instance
            // table is checked through its rows and index only).
            let changed: BTreeSet<&str> = info.changes().map(|c| c.table().name()).collect();
            for (i, table) in TABLES.iter().enumerate() {
                let rows_changed = before_rows[i] != after_rows[i];
                let want = if rows_changed {
                    index
                } else {
                    before_indexes[i]
                };
                assert_eq!(
                    after_indexes[i],
                    want,
                    "{} at {index}: table {table} (rows changed: {rows_changed})\n{cmd:?}",
                    cmd.kind()
                );
                assert!(
                    *table == INSTANCES || changed.contains(table) == rows_changed,
                    "{} at {index}: change set vs rows of {table}\n{cmd:?}",
                    cmd.kind()
                );
            }
        }
    }
    result
}

/// Read-side checks of one version: exact lookups never match a prefix, prefix and
/// index queries agree with full scans, denormalization is pure and follows docs/rules.md §5.
pub fn check_reads(v: &StateView<'_>) {
    let plugins: Vec<_> = v.csi_plugins().collect();
    for p in &plugins {
        let d1 = v.denormalize_csi_plugin(p);
        let d2 = v.denormalize_csi_plugin(p);
        assert_eq!(d1, d2, "plugin denormalize is not repeatable");
        let mut ids: Vec<_> = p
            .controllers
            .iter()
            .chain(p.nodes.iter())
            .map(|(_, i)| i.alloc_id.clone())
            .filter(|a| !a.is_empty() && v.alloc(a).is_some())
            .collect();
        ids.sort();
        ids.dedup();
        let mut got: Vec<_> = d1.allocations.iter().map(|s| s.id.clone()).collect();
        assert!(
            d1.allocations
                .windows(2)
                .all(|w| w[0].modify_index >= w[1].modify_index),
            "plugin {} stubs not newest first",
            p.id
        );
        got.sort();
        assert_eq!(got, ids, "plugin {} stubs", p.id);
    }
    for prefix in ["", "e", "ebs", "p", "p1", "x"] {
        let got: Vec<_> = v
            .csi_plugins_by_prefix(prefix)
            .map(|p| p.id.clone())
            .collect();
        let want: Vec<_> = plugins
            .iter()
            .filter(|p| p.id.starts_with(prefix))
            .map(|p| p.id.clone())
            .collect();
        assert_eq!(got, want, "plugins by prefix {prefix:?}");
    }
    for pid in PLUGINS {
        let got = v.csi_plugin(pid).map(|p| p.id.clone());
        let want = plugins.iter().find(|p| &*p.id == pid).map(|p| p.id.clone());
        assert_eq!(got, want, "plugin by id {pid}");
    }

    let allocs: Vec<_> = v.allocs().collect();
    for n in NODES {
        let got: Vec<_> = v.allocs_by_node(n).map(|a| a.id.clone()).collect();
        let want: Vec<_> = allocs
            .iter()
            .filter(|a| &*a.node_id == n)
            .map(|a| a.id.clone())
            .collect();
        assert_eq!(got, want, "allocs by node {n}");
        assert_eq!(
            v.node(n).map(|x| x.id.clone()),
            v.nodes().find(|x| &*x.id == n).map(|x| x.id.clone())
        );
    }

    let volumes: Vec<Arc<CsiVolume>> = v.csi_volumes().collect();
    for ns in NAMESPACES {
        for prefix in ["", "v", "v1"] {
            let got: Vec<_> = v
                .csi_volumes_by_prefix(ns, prefix)
                .map(|x| x.id.clone())
                .collect();
            let want: Vec<_> = volumes
                .iter()
                .filter(|x| &*x.namespace == ns && x.id.starts_with(prefix))
                .map(|x| x.id.clone())
                .collect();
            assert_eq!(got, want, "volumes of {ns} by prefix {prefix:?}");
        }
        for pid in PLUGINS {
            let got: Vec<_> = v
                .csi_volumes_by_plugin(ns, pid)
                .map(|x| x.id.clone())
                .collect();
            let want: Vec<_> = volumes
                .iter()
                .filter(|x| &*x.namespace == ns && &*x.plugin_id == pid)
                .map(|x| x.id.clone())
                .collect();
            assert_eq!(got, want, "volumes of {ns} by plugin {pid}");
        }
        for vid in VOLUMES {
            let stored = v.csi_volume(ns, vid);
            let want = volumes
                .iter()
                .find(|x| &*x.namespace == ns && &*x.id == vid);
            assert_eq!(stored.as_deref(), want.map(|x| &**x), "volume {ns}/{vid}");
            if let Some(stored) = stored {
                let d = v.csi_volume_denormalized(ns, vid).expect("present");
                assert_eq!(d, v.denormalize_csi_volume(&stored), "denormalize repeats");
                check_denormalized(v, &stored, &d);
            }
        }
    }
    for prefix in ["", "v1", "v2"] {
        let got: Vec<_> = v
            .csi_volumes_by_prefix_all(prefix)
            .map(|x| (x.id.clone(), x.namespace.clone()))
            .collect();
        let mut want: Vec<_> = volumes
            .iter()
            .filter(|x| x.id.starts_with(prefix))
            .map(|x| (x.id.clone(), x.namespace.clone()))
            .collect();
        want.sort();
        assert_eq!(got, want, "volumes by prefix {prefix:?} in all namespaces");
    }
    for n in NODES {
        let got: Vec<_> = v
            .csi_volumes_by_node(n)
            .iter()
            .map(|x| (x.namespace.clone(), x.id.clone()))
            .collect();
        let mut want = BTreeSet::new();
        for a in allocs.iter().filter(|a| &*a.node_id == n) {
            let live = a.desired_status == DesiredStatus::Run
                || a.client_status == schedstate::model::ClientStatus::Running;
            if !live {
                continue;
            }
            for r in &a.csi_volume_requests {
                if v.csi_volume(&a.namespace, &r.volume_id).is_some() {
                    want.insert((a.namespace.clone(), r.volume_id.clone()));
                }
            }
        }
        let want: Vec<_> = want.into_iter().collect();
        assert_eq!(got, want, "volumes by node {n}");
    }
}

/// A denormalized volume against docs/rules.md §5.
fn check_denormalized(v: &StateView<'_>, stored: &CsiVolume, d: &CsiVolume) {
    let at = format!("volume {}/{}", stored.namespace, stored.id);
    match v.csi_plugin(&stored.plugin_id) {
        Some(p) => {
            assert_eq!(d.provider, p.provider, "{at}");
            assert_eq!(d.provider_version, p.version, "{at}");
            assert_eq!(d.controller_required, p.controller_required, "{at}");
            assert_eq!(
                (
                    d.controllers_healthy,
                    d.controllers_expected,
                    d.nodes_healthy,
                    d.nodes_expected
                ),
                (
                    p.controllers_healthy(),
                    p.controllers_expected(),
                    p.nodes_healthy(),
                    p.nodes_expected()
                ),
                "{at}"
            );
            let schedulable =
                p.nodes_healthy() > 0 && (!p.controller_required || p.controllers_healthy() > 0);
            assert_eq!(d.schedulable, schedulable, "{at}");
        }
        None => {
            assert_eq!(d.provider, stored.provider, "{at}");
            assert_eq!(d.controller_required, stored.controller_required, "{at}");
            assert!(!d.schedulable && d.nodes_expected == 0 && d.controllers_expected == 0);
        }
    }
    // Past-claim repair: every claiming alloc gone or client-terminal has a past claim.
    for a in d.read_allocs.iter().chain(&d.write_allocs) {
        let alloc = v.alloc(a);
        if alloc.is_none_or(|x| x.client_terminal()) {
            assert!(d.past_claims.contains_key(a), "{at}: {a} not repaired");
        }
    }
    // Denormalization adds past claims and fills derived fields, nothing else.
    let mut back = d.clone();
    back.past_claims.clone_from(&stored.past_claims);
    back.provider.clone_from(&stored.provider);
    back.provider_version.clone_from(&stored.provider_version);
    back.controller_required = stored.controller_required;
    back.controllers_healthy = stored.controllers_healthy;
    back.controllers_expected = stored.controllers_expected;
    back.nodes_healthy = stored.nodes_healthy;
    back.nodes_expected = stored.nodes_expected;
    back.schedulable = stored.schedulable;
    assert_eq!(&back, stored, "{at}: denormalize changed a stored field");
    for (k, c) in &stored.past_claims {
        assert_eq!(
            d.past_claims.get(k),
            Some(c),
            "{at}: a past claim was rewritten"
        );
    }
}

/// The end-of-run checks: determinism of replay and snapshot round trips.
pub fn check_final(store: &StateStore, accepted: &[(u64, Command)]) {
    let snap = store.snapshot();
    let bytes = canonical(&snap);

    // Replay, directly and through the wire encoding (as a log would).
    let direct = StateStore::new();
    let wire = StateStore::new();
    for (index, cmd) in accepted {
        if let Err(e) = direct.apply(*index, cmd) {
            panic!("replay rejected {} at {index}: {e}", cmd.kind());
        }
        let encoded = postcard::to_allocvec(&(*index, cmd)).expect("encode command");
        let (i, decoded): (u64, Command) = postcard::from_bytes(&encoded).expect("decode");
        assert_eq!((i, &decoded), (*index, cmd), "wire round trip");
        wire.apply(i, &decoded)
            .expect("replay of a decoded command");
    }
    assert_eq!(
        canonical(&direct.snapshot()),
        bytes,
        "replay is not deterministic"
    );
    assert_eq!(canonical(&wire.snapshot()), bytes, "wire replay differs");

    // Snapshot round trip: into an empty store, and over a used one.
    let mut image = Vec::new();
    store.snapshot_to(&mut image).expect("snapshot_to");
    let restored = StateStore::new();
    restored
        .restore_from(&mut image.as_slice())
        .expect("restore of a fresh snapshot");
    let rs = restored.snapshot();
    assert_eq!(canonical(&rs), bytes, "snapshot round trip");
    if let Err(e) = rs.view().check_invariants() {
        panic!("restored state: {e}");
    }
    let instances = |s: &StateSnapshot| -> Vec<Arc<PluginInstance>> {
        s.view().raw().iter(s.view().tables().instances).collect()
    };
    assert_eq!(instances(&rs), instances(&snap), "rebuilt instance rows");
    assert_eq!(
        engine_table_index(&rs.view(), INSTANCES),
        rs.view().table_index(Table::CsiPlugins),
        "restored instance table index"
    );
    direct
        .restore_from(&mut image.as_slice())
        .expect("restore over a used store");
    assert_eq!(
        canonical(&direct.snapshot()),
        bytes,
        "restore over a used store"
    );

    // The restored store goes on exactly like the original.
    if let Some((_, cmd)) = accepted.first() {
        let next = snap.view().last_applied() + 1;
        let a = store.apply(next, cmd).map(|_| ());
        let b = restored.apply(next, cmd).map(|_| ());
        assert_eq!(a, b, "original and restored stores disagree");
        assert_eq!(
            canonical(&store.snapshot()),
            canonical(&restored.snapshot())
        );
    }
}
