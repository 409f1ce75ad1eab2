//! Regressions found by the fuzz targets (`fuzz/`), and a replay of every committed fuzz
//! input.
//!
//! Each finding has a test here that reproduces it through the public API, and its
//! input is committed under `fuzz/seeds/<target>/`. `replay_committed_fuzz_inputs` runs
//! every committed input through the same harness code the fuzz targets use (compiled in
//! here with `#[path]`), so `cargo test` catches a regressed crash without cargo-fuzz or
//! libFuzzer. `fuzz/replay.sh` does the same with the real target binaries.

#[allow(dead_code)]
#[path = "../../fuzz/src/harness/mod.rs"]
mod harness;

use std::path::Path;
use std::sync::Arc;

use crate::support::names;
use crate::support::{TempDir, canonical, table_index};
use schedstate::Table;
use schedstate::model::{CsiControllerInfo, CsiInfo, CsiNodeInfo, Fingerprints, Node, id};
use schedstate::state::StateStore;

/// Every file under `fuzz/seeds/<target>/`, in name order.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().expect("a file name");
            let bytes = std::fs::read(&path).expect("read a seed");
            (name.to_string_lossy().into_owned(), bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn replay_committed_fuzz_inputs() {
    type Run = fn(&[u8]);
    let targets: [(&str, Run); 3] = [
        ("commands", harness::commands::run),
        ("txn", harness::txn::run),
        ("persist", harness::persist::run),
    ];
    for (target, run) in targets {
        let inputs = seeds(target);
        assert!(!inputs.is_empty(), "no committed inputs for {target}");
        for (name, bytes) in inputs {
            let result = std::panic::catch_unwind(|| run(&bytes));
            assert!(result.is_ok(), "fuzz/seeds/{target}/{name} fails");
        }
    }
}

fn controller(plugin: &str, alloc: &str) -> CsiInfo {
    CsiInfo {
        plugin_id: id(plugin),
        alloc_id: id(alloc),
        healthy: true,
        provider: "nfs.csi.k8s.io".into(),
        provider_version: "2.0".into(),
        requires_controller_plugin: true,
        controller_info: Some(CsiControllerInfo::default()),
        ..Default::default()
    }
}

fn node_with(
    node_id: &str,
    controllers: Vec<CsiInfo>,
    nodes: Vec<CsiInfo>,
    update_time: u64,
) -> Node {
    let map = |list: Vec<CsiInfo>| -> Fingerprints {
        list.into_iter()
            .map(|mut i| {
                i.update_time = update_time;
                (i.plugin_id.clone(), Arc::new(i))
            })
            .collect()
    };
    let mut n = Node::new(node_id, "client");
    n.csi_controller_plugins = map(controllers);
    n.csi_node_plugins = map(nodes);
    n
}

/// Found by `commands` (seed `fuzz/seeds/commands/instance-rewritten-by-heartbeat`).
///
/// A node files a controller fingerprint of plugin `ceph` (alloc `b2`) in its controller
/// map and a fingerprint with both halves (alloc `a1`) in its node map. When every
/// fingerprint applied all of its halves, the controller instance went to `b2`, then
/// back to `a1`, and on a heartbeat (the same report again) the derived instance row was
/// rewritten with an equal value: the commit reported a change of the instance table,
/// moved that table's index and woke its watches, for a write that changed nothing
/// there. Now each map's entry is the instance of its map's kind (the controller entry
/// is `b2`); the heartbeat must still change nothing but the node row.
#[test]
fn heartbeat_with_two_fingerprints_of_one_plugin_rewrites_no_instance_row() {
    let both = CsiInfo {
        node_info: Some(CsiNodeInfo {
            id: "i-a1".into(),
            max_volumes: 2,
            ..Default::default()
        }),
        ..controller("ceph", "a1")
    };
    let report = |t| node_with("n10", vec![controller("ceph", "b2")], vec![both.clone()], t);
    let store = StateStore::new();
    store.upsert_node(1, report(1)).expect("first report");
    let v = store.snapshot();
    let p = v.view().csi_plugin("ceph").expect("plugin");
    assert_eq!(
        &*p.controllers.get("n10").expect("controller").alloc_id,
        "b2"
    );
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), 1);

    let info = store.upsert_node(2, report(2)).expect("heartbeat");
    let tables: Vec<Table> = info.changes().map(|c| c.table()).collect();
    assert_eq!(tables, [Table::Nodes], "only the node row changes");
    let v = store.snapshot();
    assert_eq!(v.view().table_index(Table::CsiPlugins), 1);
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), 1);
    assert_eq!(v.view().check_invariants(), Ok(()));
}

/// Found by `commands` (seed `fuzz/seeds/commands/claim-sets-mode-held-claims-break`),
/// and by `tests/state_model.rs`.
///
/// Claims that ask for no access mode leave an in-use volume's mode unknown. A later
/// claim that asks for one set it without looking at the claims already held: a
/// single-node-reader-only volume ended with two readers (or a reader and a writer),
/// breaking the claim limits of its own mode. Such a claim is now counted in the mode it
/// would set, and refused as "max claims reached" when the held claims do not fit it.
#[test]
fn claim_setting_the_mode_of_an_in_use_volume_must_fit_the_held_claims() {
    use schedstate::model::{
        Allocation, CsiVolume, CsiVolumeAccessMode as Access, CsiVolumeAttachmentMode,
        CsiVolumeCapability, CsiVolumeClaim, CsiVolumeClaimMode as Mode,
    };
    use schedstate::state::StateError;

    // A node of plugin `p`, running allocs `allocs`, and a multi-node-multi-writer
    // volume `v` of `p`, at indexes 1 to 3.
    let volume_store = |allocs: &[&str]| {
        let store = StateStore::new();
        let fp = CsiInfo {
            plugin_id: id("p"),
            alloc_id: id("x"),
            healthy: true,
            node_info: Some(CsiNodeInfo::default()),
            ..Default::default()
        };
        store
            .upsert_node(1, node_with("n1", vec![], vec![fp], 1))
            .expect("node");
        let allocs = allocs
            .iter()
            .map(|a| Allocation {
                id: id(a),
                namespace: id("default"),
                node_id: id("n1"),
                ..Default::default()
            })
            .collect();
        store.upsert_allocs(2, allocs).expect("allocs");
        let mut vol = CsiVolume::new("default", "v", "p");
        vol.requested_capabilities = vec![CsiVolumeCapability {
            access_mode: Access::MultiNodeMultiWriter,
            attachment_mode: CsiVolumeAttachmentMode::FileSystem,
        }];
        store.register_csi_volumes(3, vec![vol]).expect("volume");
        store
    };
    let store = volume_store(&["a1", "a2", "a3"]);
    let claim = |a: &str, mode, access_mode| CsiVolumeClaim {
        alloc_id: id(a),
        node_id: id("n1"),
        mode,
        access_mode,
        ..Default::default()
    };

    // Two readers asking for no mode: in use, mode still unknown.
    store
        .claim_csi_volume(4, "default", "v", claim("a1", Mode::Read, Access::Unknown))
        .expect("first reader");
    store
        .claim_csi_volume(5, "default", "v", claim("a2", Mode::Read, Access::Unknown))
        .expect("second reader");
    let before = canonical(&store);

    // Single-node modes cannot hold two readers: refused, nothing changes.
    for (index, access) in [
        (6, Access::SingleNodeReaderOnly),
        (7, Access::SingleNodeWriter),
    ] {
        let got = store.claim_csi_volume(index, "default", "v", claim("a3", Mode::Read, access));
        assert!(
            matches!(got, Err(StateError::MaxClaimsReached { .. })),
            "{access:?}: {got:?}"
        );
        assert_eq!(canonical(&store), before);
    }
    // A multi-node mode can: taken, and it sets the mode.
    store
        .claim_csi_volume(
            8,
            "default",
            "v",
            claim("a3", Mode::Read, Access::MultiNodeReaderOnly),
        )
        .expect("a multi-node reader");
    let snap = store.snapshot();
    let v = snap.view().csi_volume("default", "v").expect("volume");
    assert_eq!(v.access_mode, Access::MultiNodeReaderOnly);
    assert_eq!(v.read_allocs.len(), 3);
    assert_eq!(snap.view().check_invariants(), Ok(()));
    // ...after which a writer is refused by the mode itself.
    let got = store.claim_csi_volume(9, "default", "v", claim("a1", Mode::Write, Access::Unknown));
    assert!(
        matches!(got, Err(StateError::Unschedulable { .. })),
        "{got:?}"
    );

    // A writer asking for no mode, then a single-node reader: refused too.
    let store2 = volume_store(&["a1", "a2"]);
    store2
        .claim_csi_volume(4, "default", "v", claim("a1", Mode::Write, Access::Unknown))
        .expect("writer");
    let got = store2.claim_csi_volume(
        5,
        "default",
        "v",
        claim("a2", Mode::Read, Access::SingleNodeReaderOnly),
    );
    assert!(
        matches!(got, Err(StateError::MaxClaimsReached { .. })),
        "{got:?}"
    );
    assert_eq!(store2.snapshot().view().check_invariants(), Ok(()));
}

/// Found by `persist` (seed `fuzz/seeds/persist/wal-first-record-at-index-0`): an
/// expectation of the harness, not a state bug.
///
/// Without a snapshot, recovery treated a first log record at index 0 as "already in the
/// snapshot" and skipped it silently, where applying the same command is refused (index 0
/// is never greater than the last applied index). No store ever writes such a record, so
/// only a forged or damaged log has one: recovery now refuses the log as corrupt, and the
/// command never takes effect.
#[test]
fn log_record_at_index_0_never_takes_effect() {
    use crate::support::persist::{craft_segment, seg_name};
    use schedstate::persist::{DurableStore, PersistError};
    use schedstate::state::Command;

    let records = [
        (
            0u64,
            Command::UpsertNode {
                node: Node::new("n-at-0", "forged"),
            },
        ),
        (
            1,
            Command::UpsertNode {
                node: Node::new("n1", "client"),
            },
        ),
    ];
    // Segment 1, nothing before it.
    let seg = craft_segment(1, 0, &records);
    let dir = TempDir::new("fuzz-regression-wal0");
    std::fs::write(dir.join(&seg_name(1)), &seg).expect("write");
    let opened = DurableStore::open_read_only(dir.path());
    match opened {
        Err(PersistError::Corrupt { offset, .. }) => assert_eq!(offset, 32, "the first record"),
        Err(e) => panic!("{e}"),
        Ok((store, report)) => panic!(
            "opened (n-at-0 present: {}): {report:?}",
            store.snapshot().view().node("n-at-0").is_some()
        ),
    }
}

/// Found by `persist` (seed `fuzz/seeds/persist/snapshot-forged-instance-map-length`).
///
/// A snapshot whose checksums are right but whose plugin row announces an instance map
/// of 2^40 entries: `imbl`'s `OrdMap` deserializer allocated a vector of the announced
/// length before reading a single entry, so the restore aborted the process ("memory
/// allocation of 315680096232 bytes failed") instead of refusing the file. Plugin
/// instance maps now deserialize entry by entry: the restore fails cleanly and the store
/// is left as it was.
#[test]
fn snapshot_with_a_forged_instance_map_length_is_refused_without_allocating() {
    use schedstate::model::CsiPlugin;
    use schedstate::persist::{SNAPSHOT_MAGIC, SNAPSHOT_VERSION, SnapshotHeader, TableHeader};

    // A plugin row with empty maps, then its controllers map length forged.
    let plugin = CsiPlugin::new("p", 1);
    let mut row = postcard::to_allocvec(&plugin).expect("encode");
    let at = postcard::to_allocvec(&("p", "", "", false))
        .expect("encode")
        .len();
    assert_eq!(row[at], 0, "the controllers map length");
    let forged = postcard::to_allocvec(&(1u64 << 40)).expect("varint");
    row.splice(at..=at, forged);

    let header = SnapshotHeader {
        last_applied: 1,
        tables: vec![TableHeader {
            name: names::CSI_PLUGINS.into(),
            index: 1,
            rows: 1,
        }],
    };
    let header = postcard::to_allocvec(&header).expect("encode");
    let mut image = Vec::new();
    image.extend_from_slice(SNAPSHOT_MAGIC);
    image.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    image.extend_from_slice(&u32::try_from(header.len()).expect("small").to_le_bytes());
    image.extend_from_slice(&header);
    let crc = crc32fast::hash(&image);
    image.extend_from_slice(&crc.to_le_bytes());
    let body_start = image.len();
    image.extend_from_slice(&u32::try_from(row.len()).expect("small").to_le_bytes());
    image.extend_from_slice(&row);
    let crc = crc32fast::hash(&image[body_start..]);
    image.extend_from_slice(&crc.to_le_bytes());

    let store = StateStore::new();
    store
        .upsert_node(1, Node::new("n1", "client"))
        .expect("some state");
    let before = store.snapshot();
    let err = store
        .restore_from(&mut image.as_slice())
        .expect_err("a row that does not decode");
    assert!(err.to_string().contains("does not decode"), "{err}");
    assert!(store.snapshot().raw().same_version(before.raw()));
}
