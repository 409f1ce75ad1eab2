//! Volume registration, deregistration, denormalization, volume reads and the
//! `csi_volumes` table index (docs/rules.md §4.6, §4.7, §5).

use std::sync::Arc;

use crate::support::volumes::*;
use crate::support::*;
use schedstate::Table;
use schedstate::model::{ClientStatus, DesiredStatus, id};
use schedstate::state::{Command, StateError};

// ---------------------------------------------------------------------------------
// Register

#[test]
fn register_requires_id_namespace_and_plugin_id() {
    let mut h = cluster();
    let cases = [
        ("id", volume_in(NS, "", PLUGIN)),
        ("namespace", volume_in("", "vol-1", PLUGIN)),
        ("plugin id", volume_in(NS, "vol-1", "")),
    ];
    for (field, vol) in cases {
        let err = h.reject(&H::register_cmd(vec![vol]));
        assert!(
            matches!(err, StateError::MissingField { what: "volume", field: f } if f == field),
            "{field}: {err:?}"
        );
    }
    assert_eq!(h.store.snapshot().view().csi_volumes().count(), 0);
}

#[test]
fn register_requires_an_existing_plugin_and_names_it() {
    let mut h = cluster();
    let err = h.reject(&H::register_cmd(vec![volume_in(NS, "vol-1", "nfs")]));
    assert_eq!(err, StateError::PluginNotFound(id("nfs")));
    assert!(err.to_string().contains("nfs"), "{err}");
    // A plugin id that is only a prefix of an existing plugin is not that plugin.
    let err = h.reject(&H::register_cmd(vec![volume_in(NS, "vol-1", "eb")]));
    assert_eq!(err, StateError::PluginNotFound(id("eb")));
    assert!(!h.has_vol(NS, "vol-1"));
}

#[test]
fn register_copies_provider_and_controller_required_from_the_plugin() {
    let mut h = cluster();
    // A second plugin that needs no controller.
    h.upsert_node(client(
        "n3",
        &[with_provider(
            &node_fp("nfs", "plug-nfs", true),
            "nfs.csi.k8s.io",
            "4.0",
        )],
        &[],
    ));
    let mut req = volume("vol-1");
    req.provider = "caller-supplied".into();
    req.controller_required = false;
    let mut req_nfs = volume_in(NS, "vol-nfs", "nfs");
    req_nfs.controller_required = true;
    let i = h.register(vec![req, req_nfs]);

    let s = h.stored("vol-1");
    assert_eq!(s.provider, PROVIDER);
    assert!(
        s.controller_required,
        "ebs has a controller requiring itself"
    );
    assert_eq!((s.create_index, s.modify_index), (i, i));
    assert_eq!(s.external_id, "vol-0vol-1");
    assert_eq!(s.name, "vol-1 name");
    // Stored rows carry no denormalized fields.
    assert_eq!(s.provider_version, "");
    assert_eq!((s.nodes_healthy, s.nodes_expected), (0, 0));
    assert!(!s.schedulable);

    let n = h.stored("vol-nfs");
    assert_eq!(n.provider, "nfs.csi.k8s.io");
    assert!(!n.controller_required);
    assert_eq!(h.table_index(Table::CsiVolumes), i);
}

#[test]
fn register_new_volume_starts_unclaimed_whatever_the_request_carried() {
    let mut h = cluster();
    let mut req = volume("vol-1");
    req.read_allocs.insert(id("a1"));
    req.write_allocs.insert(id("a2"));
    req.read_claims.insert(
        id("a1"),
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    req.past_claims
        .insert(id("a3"), release("a3", Mode::Write, State::Unpublishing));
    req.access_mode = Access::SingleNodeWriter;
    req.attachment_mode = Attach::BlockDevice;
    req.create_index = 1;
    req.modify_index = 2;
    let i = h.register(vec![req]);
    let s = h.stored("vol-1");
    assert!(!s.has_claims(), "{s:?}");
    assert_eq!(s.access_mode, Access::Unknown);
    assert_eq!(s.attachment_mode, Attach::Unknown);
    assert_eq!((s.create_index, s.modify_index), (i, i));
}

#[test]
fn register_with_changed_external_id_is_volume_identity_changed() {
    let mut h = cluster_with(&["vol-1"]);
    let before = h.stored("vol-1");
    let mut req = volume("vol-1");
    req.external_id = "vol-0other".into();
    req.name = "renamed".into();
    let err = h.reject(&H::register_cmd(vec![req]));
    match &err {
        StateError::VolumeIdentityChanged {
            namespace,
            id,
            field,
            old,
            new,
        } => {
            assert_eq!((&**namespace, &**id, *field), (NS, "vol-1", "external id"));
            assert_eq!((old.as_str(), new.as_str()), ("vol-0vol-1", "vol-0other"));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("identity cannot be updated"),
        "{err}"
    );
    assert_eq!(h.stored("vol-1"), before);
}

#[test]
fn register_with_changed_plugin_id_is_volume_identity_changed() {
    let mut h = cluster_with(&["vol-1"]);
    h.upsert_node(client("n3", &[node_fp("nfs", "plug-nfs", true)], &[]));
    let before = h.stored("vol-1");
    let mut req = volume_in(NS, "vol-1", "nfs");
    req.name = "renamed".into();
    let err = h.reject(&H::register_cmd(vec![req]));
    assert!(
        matches!(&err, StateError::VolumeIdentityChanged { field: "plugin id", old, new, .. }
            if old == PLUGIN && new == "nfs"),
        "{err:?}"
    );
    assert_eq!(h.stored("vol-1"), before);
}

#[test]
fn register_when_the_plugin_provider_changed_is_volume_identity_changed() {
    // docs/rules.md §4.6: the identity (external id, plugin id, provider) must not change.
    let mut h = cluster_with(&["vol-1"]);
    h.upsert_node(client(
        "n2",
        &[with_provider(
            &node_fp(PLUGIN, "plug-n2", true),
            "ebs.example.com",
            "2.0",
        )],
        &[],
    ));
    let err = h.reject(&H::register_cmd(vec![volume("vol-1")]));
    assert!(
        matches!(&err, StateError::VolumeIdentityChanged { field: "provider", old, new, .. }
            if old == PROVIDER && new == "ebs.example.com"),
        "{err:?}"
    );
}

#[test]
fn register_same_identity_updates_user_fields_keeping_claims_and_create_index() {
    let mut h = cluster_with(&["vol-1"]);
    let created = h.stored("vol-1").create_index;
    let ci = h.claim(
        "vol-1",
        claim("a1", Mode::Write, Access::MultiNodeMultiWriter),
    );
    h.claim("vol-1", release("a1", Mode::Write, State::NodeDetached));
    let claimed = h.stored("vol-1");
    assert!(claimed.modify_index > ci);

    let mut req = volume("vol-1");
    req.name = "renamed".into();
    req.parameters.insert("iops".into(), "3000".into());
    req.secrets.insert("token".into(), "s3cr3t".into());
    req.context.insert("zone".into(), "eu-west-1a".into());
    req.mount_options = Some(schedstate::model::CsiMountOptions {
        fs_type: "ext4".into(),
        mount_flags: vec!["noatime".into()],
    });
    req.requested_capabilities
        .push(cap(Access::SingleNodeWriter, Attach::BlockDevice));
    // Claims and modes in the request are ignored for an existing volume.
    req.write_allocs.clear();
    req.access_mode = Access::SingleNodeReaderOnly;
    let i = h.register(vec![req.clone()]);

    let s = h.stored("vol-1");
    assert_eq!(s.name, "renamed");
    assert_eq!(s.parameters, req.parameters);
    assert_eq!(s.secrets, req.secrets);
    assert_eq!(s.context, req.context);
    assert_eq!(s.mount_options, req.mount_options);
    assert_eq!(s.requested_capabilities, req.requested_capabilities);
    assert_eq!(s.create_index, created);
    assert_eq!(s.modify_index, i);
    assert_eq!(h.table_index(Table::CsiVolumes), i);
    // Claims and in-use modes untouched.
    assert_eq!(s.write_allocs, claimed.write_allocs);
    assert_eq!(s.write_claims, claimed.write_claims);
    assert_eq!(s.past_claims, claimed.past_claims);
    assert_eq!(s.access_mode, Access::MultiNodeMultiWriter);
    assert_eq!(s.attachment_mode, Attach::FileSystem);
    assert_eq!(keys(&s.write_allocs), ["a1"]);
}

#[test]
fn register_batch_with_one_bad_volume_registers_none() {
    let mut h = cluster_with(&["vol-1"]);
    // Missing plugin last, first, and an identity change in the middle.
    let batches = [
        vec![
            volume("vol-2"),
            volume("vol-3"),
            volume_in(NS, "vol-4", "nfs"),
        ],
        vec![volume_in(NS, "vol-4", "nfs"), volume("vol-2")],
        vec![
            volume("vol-2"),
            {
                let mut v = volume("vol-1");
                v.external_id = "changed".into();
                v
            },
            volume("vol-3"),
        ],
        vec![volume("vol-2"), volume_in(NS, "", PLUGIN)],
    ];
    for batch in batches {
        h.reject(&H::register_cmd(batch));
        for v in ["vol-2", "vol-3", "vol-4"] {
            assert!(!h.has_vol(NS, v), "{v} registered by a failing batch");
        }
    }
}

#[test]
fn register_with_identical_fields_changes_nothing() {
    let mut h = cluster_with(&["vol-1"]);
    h.claim(
        "vol-1",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    let before = h.stored("vol-1");
    let vol_index = h.table_index(Table::CsiVolumes);
    let i = h.register(vec![volume("vol-1")]);
    let after = h.stored("vol-1");
    assert!(Arc::ptr_eq(&before, &after), "the row was rewritten");
    assert_eq!(after.modify_index, before.modify_index);
    assert_eq!(h.table_index(Table::CsiVolumes), vol_index);
    // The write was still accepted: the last applied index moved.
    assert_eq!(h.last_applied(), i);
}

#[test]
fn register_empty_batch_is_rejected() {
    let mut h = cluster();
    let err = h.reject(&H::register_cmd(vec![]));
    assert!(matches!(err, StateError::EmptyRequest { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------------
// Deregister

#[test]
fn deregister_takes_exact_ids_and_a_prefix_is_volume_not_found() {
    let mut h = cluster_with(&["vol-100"]);
    let err = h.reject(&H::deregister_cmd(NS, &["vol-1"], false));
    assert_eq!(
        err,
        StateError::VolumeNotFound {
            namespace: id(NS),
            id: id("vol-1"),
        }
    );
    // Same id in another namespace is not this volume either.
    let err = h.reject(&H::deregister_cmd("prod", &["vol-100"], false));
    assert!(matches!(err, StateError::VolumeNotFound { .. }), "{err:?}");
    assert!(h.has_vol(NS, "vol-100"));
    let i = h.apply(&H::deregister_cmd(NS, &["vol-100"], false));
    assert!(!h.has_vol(NS, "vol-100"));
    assert_eq!(h.table_index(Table::CsiVolumes), i);
}

#[test]
fn deregister_unknown_id_deletes_nothing() {
    let mut h = cluster_with(&["vol-1", "vol-2"]);
    for batch in [
        &["vol-1", "ghost"][..],
        &["ghost", "vol-1"],
        &["vol-1", "vol-2", "ghost"],
    ] {
        let err = h.reject(&H::deregister_cmd(NS, batch, false));
        assert_eq!(
            err,
            StateError::VolumeNotFound {
                namespace: id(NS),
                id: id("ghost"),
            }
        );
        assert!(h.has_vol(NS, "vol-1") && h.has_vol(NS, "vol-2"));
    }
    h.apply(&H::deregister_cmd(NS, &["vol-1", "vol-2"], false));
    assert_eq!(h.store.snapshot().view().csi_volumes().count(), 0);
}

#[test]
fn deregister_volume_in_use_is_volume_in_use() {
    let mut h = cluster_with(&["vol-r", "vol-w"]);
    h.claim(
        "vol-r",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    h.claim(
        "vol-w",
        claim("a2", Mode::Write, Access::MultiNodeMultiWriter),
    );
    for (vol, holder) in [("vol-r", "a1"), ("vol-w", "a2")] {
        for force in [false, true] {
            let err = h.reject(&H::deregister_cmd(NS, &[vol], force));
            assert_eq!(
                err,
                StateError::VolumeInUse {
                    namespace: id(NS),
                    id: id(vol),
                    alloc_id: id(holder),
                },
                "{vol} force={force}"
            );
        }
    }
}

#[test]
fn deregister_in_use_without_force_fails_even_when_allocs_are_terminal_or_gone() {
    let mut h = cluster_with(&["vol-1"]);
    h.claim(
        "vol-1",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    h.claim(
        "vol-1",
        claim("a2", Mode::Write, Access::MultiNodeMultiWriter),
    );
    h.upsert_allocs(vec![alloc(
        "a1",
        "n1",
        DesiredStatus::Stop,
        ClientStatus::Complete,
    )]);
    h.delete_allocs(&["a2"]);
    let err = h.reject(&H::deregister_cmd(NS, &["vol-1"], false));
    assert!(matches!(err, StateError::VolumeInUse { .. }), "{err:?}");
}

#[test]
fn deregister_force_succeeds_when_every_claiming_alloc_is_terminal_or_gone() {
    let mut h = cluster_with(&["vol-1"]);
    for (a, mode) in [
        ("a1", Mode::Read),
        ("a2", Mode::Read),
        ("a3", Mode::Write),
        ("a4", Mode::Write),
    ] {
        h.claim("vol-1", claim(a, mode, Access::MultiNodeMultiWriter));
    }
    h.upsert_allocs(vec![
        // Server-terminal only.
        stopped("a1", "n1"),
        // Client-terminal only.
        alloc("a2", "n1", DesiredStatus::Run, ClientStatus::Failed),
        alloc("a3", "n1", DesiredStatus::Evict, ClientStatus::Lost),
    ]);
    // a4 still running: force is not enough.
    let err = h.reject(&H::deregister_cmd(NS, &["vol-1"], true));
    assert_eq!(
        err,
        StateError::VolumeInUse {
            namespace: id(NS),
            id: id("vol-1"),
            alloc_id: id("a4"),
        }
    );
    // Gone counts as safe.
    h.delete_allocs(&["a4"]);
    let i = h.apply(&H::deregister_cmd(NS, &["vol-1"], true));
    assert!(!h.has_vol(NS, "vol-1"));
    assert_eq!(h.table_index(Table::CsiVolumes), i);
}

#[test]
fn deregister_force_with_running_claiming_alloc_fails() {
    let mut h = cluster_with(&["vol-1", "vol-2"]);
    h.claim(
        "vol-2",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    // The batch names a free volume first: nothing is deleted.
    let err = h.reject(&H::deregister_cmd(NS, &["vol-1", "vol-2"], true));
    assert!(
        matches!(&err, StateError::VolumeInUse { id: v, alloc_id, .. } if &**v == "vol-2" && &**alloc_id == "a1"),
        "{err:?}"
    );
    assert!(h.has_vol(NS, "vol-1"));
}

#[test]
fn deregister_with_only_past_claims_is_not_in_use() {
    // A volume whose claims were all freed is deregistered without force.
    let mut h = cluster_with(&["vol-1"]);
    h.claim(
        "vol-1",
        claim("a1", Mode::Write, Access::MultiNodeMultiWriter),
    );
    h.claim("vol-1", release("a1", Mode::Write, State::ReadyToFree));
    h.apply(&H::deregister_cmd(NS, &["vol-1"], false));
    assert!(!h.has_vol(NS, "vol-1"));
}

// ---------------------------------------------------------------------------------
// Volume denormalize

#[test]
fn volume_denormalize_with_plugin_copies_provider_counts_and_schedulable() {
    let mut h = cluster_with(&["vol-1"]);
    // A second controller that becomes unhealthy (it was healthy first, so it stays
    // recorded), and a third node instance that is unhealthy. No job runs the plugin,
    // so nothing is expected (docs/rules.md §4.10).
    h.upsert_node(client("n3", &[], &[ctrl_fp(PLUGIN, "plug-c3", true, true)]));
    h.upsert_node(client(
        "n3",
        &[],
        &[ctrl_fp(PLUGIN, "plug-c3", false, true)],
    ));
    h.upsert_node(client("n4", &[node_fp(PLUGIN, "plug-n4", true)], &[]));
    h.upsert_node(client("n4", &[node_fp(PLUGIN, "plug-n4", false)], &[]));

    let v = h.vol("vol-1");
    assert_eq!(v.provider, PROVIDER);
    assert_eq!(v.provider_version, VERSION);
    assert!(v.controller_required);
    assert_eq!((v.controllers_healthy, v.controllers_expected), (1, 0));
    assert_eq!((v.nodes_healthy, v.nodes_expected), (2, 0));
    assert!(v.schedulable);
}

#[test]
fn volume_denormalize_schedulable_needs_a_healthy_node_and_a_controller_when_required() {
    let mut h = H::new();
    // Node instance only, no controller required: schedulable.
    h.upsert_node(client("n1", &[node_fp(PLUGIN, "p1", true)], &[]));
    h.register(vec![volume("vol-1")]);
    let v = h.vol("vol-1");
    assert!(!v.controller_required);
    assert_eq!((v.controllers_healthy, v.controllers_expected), (0, 0));
    assert!(v.schedulable);

    // The plugin now reports it needs a controller; the only controller is unhealthy
    // (an unhealthy new report is not recorded, but it does set the requirement).
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "p1", true)],
        &[ctrl_fp(PLUGIN, "c1", false, true)],
    ));
    let v = h.vol("vol-1");
    assert!(v.controller_required);
    assert_eq!(v.controllers_healthy, 0);
    assert!(!v.schedulable);

    // Healthy controller: schedulable again.
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "p1", true)],
        &[ctrl_fp(PLUGIN, "c1", true, true)],
    ));
    assert!(h.vol("vol-1").schedulable);

    // No healthy node instance: not schedulable, whatever the controllers.
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "p1", false)],
        &[ctrl_fp(PLUGIN, "c1", true, true)],
    ));
    let v = h.vol("vol-1");
    assert_eq!((v.nodes_healthy, v.nodes_expected), (0, 0));
    assert_eq!((v.controllers_healthy, v.controllers_expected), (1, 0));
    assert!(!v.schedulable);
}

#[test]
fn volume_denormalize_without_plugin_keeps_provider_and_controller_required() {
    let mut h = H::new();
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "p1", true)],
        &[ctrl_fp(PLUGIN, "c1", true, true)],
    ));
    h.register(vec![volume("vol-1")]);
    assert!(h.vol("vol-1").schedulable);
    h.delete_nodes(&["n1"]);
    assert!(
        plugin(&h.store, PLUGIN).is_none(),
        "the empty plugin is deleted"
    );
    let v = h.vol("vol-1");
    assert_eq!(v.provider, PROVIDER);
    assert!(
        v.controller_required,
        "must not report 'no controller needed'"
    );
    assert_eq!(v.provider_version, "");
    assert_eq!((v.controllers_healthy, v.controllers_expected), (0, 0));
    assert_eq!((v.nodes_healthy, v.nodes_expected), (0, 0));
    assert!(!v.schedulable);
    // The stored row keeps them too.
    let s = h.stored("vol-1");
    assert_eq!(s.provider, PROVIDER);
    assert!(s.controller_required);
}

#[test]
fn volume_denormalize_without_plugin_after_a_claim_keeps_controller_required() {
    // The stored row written by a claim must also keep the last known requirement.
    let mut h = cluster_with(&["vol-1"]);
    h.claim(
        "vol-1",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    h.delete_nodes(&["n1", "n2"]);
    h.claim("vol-1", release("a1", Mode::Read, State::NodeDetached));
    let v = h.vol("vol-1");
    assert!(v.controller_required);
    assert_eq!(v.provider, PROVIDER);
    assert!(!v.schedulable);
    assert!(h.stored("vol-1").controller_required);
}

#[test]
fn volume_denormalize_repairs_past_claims_of_deleted_or_client_terminal_allocs() {
    let mut h = cluster_with(&["vol-1"]);
    let c1 = claim_full(
        "a1",
        Mode::Write,
        Access::MultiNodeMultiWriter,
        Attach::FileSystem,
        State::Taken,
    );
    let c2 = claim_full(
        "a2",
        Mode::Read,
        Access::MultiNodeMultiWriter,
        Attach::FileSystem,
        State::Taken,
    );
    h.claim("vol-1", c1.clone());
    h.claim("vol-1", c2.clone());
    h.claim(
        "vol-1",
        claim("a3", Mode::Read, Access::MultiNodeMultiWriter),
    );
    h.claim(
        "vol-1",
        claim("a4", Mode::Read, Access::MultiNodeMultiWriter),
    );
    h.delete_allocs(&["a1"]);
    h.upsert_allocs(vec![
        alloc("a2", "n1", DesiredStatus::Run, ClientStatus::Complete),
        // Server-terminal only: not repaired.
        stopped("a3", "n1"),
    ]);
    let stored = h.stored("vol-1");
    let bytes = h.bytes();

    let v = h.vol("vol-1");
    assert_eq!(keys(v.past_claims.keys()), ["a1", "a2"]);
    let p1 = &v.past_claims[&id("a1")];
    assert_eq!(
        *p1,
        schedstate::model::CsiVolumeClaim {
            state: State::Unpublishing,
            ..c1
        }
    );
    let p2 = &v.past_claims[&id("a2")];
    assert_eq!(
        *p2,
        schedstate::model::CsiVolumeClaim {
            state: State::Unpublishing,
            ..c2
        }
    );
    assert_eq!(p1.node_id, id("n1"));
    assert_eq!(p1.external_node_id, "i-a1");
    assert_eq!(p1.mode, Mode::Write);
    assert_eq!(p2.mode, Mode::Read);
    // Claims themselves are kept: the allocs still hold them until freed.
    assert_eq!(keys(&v.write_allocs), ["a1"]);
    assert_eq!(keys(&v.read_allocs), ["a2", "a3", "a4"]);

    // The stored row is unchanged by the read.
    assert!(stored.past_claims.is_empty());
    assert!(Arc::ptr_eq(&stored, &h.stored("vol-1")));
    assert_eq!(h.bytes(), bytes);
}

#[test]
fn volume_denormalize_synthesizes_a_past_claim_when_the_current_claim_is_missing() {
    // No command stores a claiming alloc without its claim, so the inconsistent row is
    // planted with a raw engine write (as a restored older snapshot could hold it).
    let mut h = cluster_with(&["vol-1"]);
    h.upsert_allocs(vec![alloc(
        "a2",
        "n2",
        DesiredStatus::Run,
        ClientStatus::Lost,
    )]);
    let mut row = (*h.stored("vol-1")).clone();
    row.read_allocs.insert(id("gone"));
    row.read_allocs.insert(id("a2"));
    row.read_allocs.insert(id("a3"));
    row.write_allocs.insert(id("gone-w"));
    let index = h.take();
    let mut txn = h.store.reader().db().begin_write(index).expect("write");
    txn.insert(h.store.reader().tables().volumes, Arc::new(row))
        .expect("insert");
    txn.commit().expect("commit");

    let v = h.vol("vol-1");
    assert_eq!(keys(v.past_claims.keys()), ["a2", "gone", "gone-w"]);
    let expect = |alloc_id: &str, node: &str, mode| schedstate::model::CsiVolumeClaim {
        alloc_id: id(alloc_id),
        node_id: id(node),
        mode,
        state: State::Unpublishing,
        ..Default::default()
    };
    assert_eq!(v.past_claims[&id("a2")], expect("a2", "n2", Mode::Read));
    assert_eq!(v.past_claims[&id("gone")], expect("gone", "", Mode::Read));
    assert_eq!(
        v.past_claims[&id("gone-w")],
        expect("gone-w", "", Mode::Write)
    );
    assert!(h.stored("vol-1").past_claims.is_empty());
}

#[test]
fn volume_denormalize_keeps_an_existing_past_claim() {
    let mut h = cluster_with(&["vol-1"]);
    h.claim(
        "vol-1",
        claim("a1", Mode::Write, Access::MultiNodeMultiWriter),
    );
    let step = release("a1", Mode::Write, State::ControllerDetached);
    h.claim("vol-1", step.clone());
    h.delete_allocs(&["a1"]);
    let v = h.vol("vol-1");
    assert_eq!(v.past_claims.get("a1"), Some(&step));
}

#[test]
fn volume_denormalize_never_changes_the_stored_row() {
    let mut h = cluster_with(&["vol-1"]);
    h.claim(
        "vol-1",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    h.delete_allocs(&["a1"]);
    let stored = h.stored("vol-1");
    let bytes = h.bytes();
    let snap = h.store.snapshot();
    let view = snap.view();
    let mut first = view.csi_volume_denormalized(NS, "vol-1").expect("volume");
    let again = view.denormalize_csi_volume(&stored);
    assert_eq!(first, again, "denormalize is deterministic");
    // Mutating a returned value does not reach the store.
    first.name = "mutated".into();
    first.read_allocs.clear();
    first.schedulable = false;
    first.past_claims.clear();
    let fresh = h.vol("vol-1");
    assert_eq!(fresh, again);
    assert_eq!(h.stored("vol-1"), stored);
    assert_eq!(h.bytes(), bytes);
    // Stored rows never carry the denormalized fields.
    assert_eq!(stored.provider_version, "");
    assert!(!stored.schedulable);
    assert_eq!(stored.nodes_expected, 0);
}

// ---------------------------------------------------------------------------------
// Reads

#[test]
fn volumes_by_namespace_and_id_prefix() {
    let mut h = cluster();
    h.register(vec![
        volume_in(NS, "data-1", PLUGIN),
        volume_in(NS, "data-2", PLUGIN),
        volume_in(NS, "logs", PLUGIN),
        volume_in("prod", "data-3", PLUGIN),
        volume_in("def", "data-9", PLUGIN),
    ]);
    let snap = h.store.snapshot();
    let v = snap.view();
    let got: Vec<_> = v.csi_volumes_by_prefix(NS, "data").collect();
    assert_eq!(vol_ids(&got), ["data-1", "data-2"]);
    let got: Vec<_> = v.csi_volumes_by_prefix(NS, "").collect();
    assert_eq!(vol_ids(&got), ["data-1", "data-2", "logs"]);
    // The namespace is matched exactly, not as a prefix.
    let got: Vec<_> = v.csi_volumes_by_prefix("def", "").collect();
    assert_eq!(vol_ids(&got), ["data-9"]);
    assert_eq!(v.csi_volumes_by_prefix("prod", "l").count(), 0);
    assert_eq!(v.csi_volumes_by_prefix("nope", "").count(), 0);
}

#[test]
fn volumes_by_id_prefix_across_namespaces() {
    let mut h = cluster();
    h.register(vec![
        volume_in(NS, "data-1", PLUGIN),
        volume_in("prod", "data-1", PLUGIN),
        volume_in("prod", "data-2", PLUGIN),
        volume_in(NS, "logs", PLUGIN),
    ]);
    let snap = h.store.snapshot();
    let v = snap.view();
    let got: Vec<(String, String)> = v
        .csi_volumes_by_prefix_all("data")
        .map(|v| (v.id.to_string(), v.namespace.to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("data-1".to_string(), NS.to_string()),
            ("data-1".to_string(), "prod".to_string()),
            ("data-2".to_string(), "prod".to_string()),
        ]
    );
    assert_eq!(v.csi_volumes_by_prefix_all("").count(), 4);
    assert_eq!(v.csi_volumes_by_prefix_all("x").count(), 0);
}

#[test]
fn volumes_by_plugin_id_within_a_namespace() {
    let mut h = cluster();
    h.upsert_node(client("n3", &[node_fp("nfs", "plug-nfs", true)], &[]));
    h.upsert_node(client("n4", &[node_fp("ebs-2", "plug-ebs2", true)], &[]));
    h.register(vec![
        volume_in(NS, "v1", PLUGIN),
        volume_in(NS, "v2", "nfs"),
        volume_in(NS, "v3", PLUGIN),
        volume_in(NS, "v4", "ebs-2"),
        volume_in("prod", "v5", PLUGIN),
    ]);
    let snap = h.store.snapshot();
    let v = snap.view();
    let got: Vec<_> = v.csi_volumes_by_plugin(NS, PLUGIN).collect();
    assert_eq!(vol_ids(&got), ["v1", "v3"]);
    let got: Vec<_> = v.csi_volumes_by_plugin("prod", PLUGIN).collect();
    assert_eq!(vol_ids(&got), ["v5"]);
    let got: Vec<_> = v.csi_volumes_by_plugin(NS, "nfs").collect();
    assert_eq!(vol_ids(&got), ["v2"]);
    // A plugin id prefix is not the plugin.
    assert_eq!(v.csi_volumes_by_plugin(NS, "eb").count(), 0);
    assert_eq!(v.csi_volumes_by_plugin("prod", "nfs").count(), 0);
}

#[test]
fn volumes_by_node_id_lists_volumes_of_live_allocs_and_skips_missing_ones() {
    let mut h = cluster();
    h.register(vec![
        volume("v-a"),
        volume("v-b"),
        volume("v-c"),
        volume("v-d"),
        volume("v-e"),
        volume("v-f"),
    ]);
    h.upsert_allocs(vec![
        // Desired run, client running; "v-missing" sorts before the others.
        requesting(running("a1", "n1"), &["v-b", "v-0missing", "v-a"]),
        // Desired stop but still client running: listed.
        requesting(stopped("a2", "n1"), &["v-c"]),
        // Desired run, client pending: listed.
        requesting(
            alloc("a3", "n1", DesiredStatus::Run, ClientStatus::Pending),
            &["v-d", "v-a"],
        ),
        // Desired stop and client complete: not listed.
        requesting(
            alloc("b1", "n1", DesiredStatus::Stop, ClientStatus::Complete),
            &["v-e"],
        ),
        // Another node.
        requesting(running("a4", "n2"), &["v-f"]),
    ]);
    let snap = h.store.snapshot();
    let v = snap.view();
    let got = v.csi_volumes_by_node("n1");
    assert_eq!(vol_ids(&got), ["v-a", "v-b", "v-c", "v-d"]);
    assert_eq!(vol_ids(&v.csi_volumes_by_node("n2")), ["v-f"]);
    assert!(v.csi_volumes_by_node("n9").is_empty());
    // A node id prefix is not the node.
    assert!(v.csi_volumes_by_node("n").is_empty());
}

#[test]
fn volume_by_id_is_exact_and_never_matches_a_prefix() {
    let mut h = cluster();
    h.register(vec![volume_in(NS, "vol-10", PLUGIN)]);
    let snap = h.store.snapshot();
    let v = snap.view();
    assert!(v.csi_volume_denormalized(NS, "vol-10").is_some());
    assert!(v.csi_volume_denormalized(NS, "vol-1").is_none());
    assert!(v.csi_volume_denormalized(NS, "vol-").is_none());
    assert!(v.csi_volume_denormalized(NS, "").is_none());
    assert!(v.csi_volume_denormalized("def", "vol-10").is_none());
    assert!(v.csi_volume(NS, "vol-1").is_none());
    // And the write paths are exact too.
    let err = h.claim_rejected(
        "vol-1",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    assert!(matches!(err, StateError::VolumeNotFound { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------------
// The csi_volumes table index

#[test]
fn table_index_csi_volumes_moves_with_every_volume_change_and_only_then() {
    let mut h = cluster();
    assert_eq!(h.table_index(Table::CsiVolumes), 0);
    let i = h.register(vec![volume("vol-1"), volume("vol-2")]);
    assert_eq!(h.table_index(Table::CsiVolumes), i);

    // Writes to other tables leave it alone, even when they change the plugin.
    h.upsert_node(client("n3", &[node_fp(PLUGIN, "plug-n3", true)], &[]));
    h.upsert_allocs(vec![running("a7", "n3")]);
    h.delete_allocs(&["a7"]);
    h.apply(&Command::UpdateNodeDrain {
        id: id("n3"),
        drain: true,
    });
    h.delete_nodes(&["n3"]);
    assert_eq!(h.table_index(Table::CsiVolumes), i);

    // Identical re-registration: no change.
    h.register(vec![volume("vol-1")]);
    assert_eq!(h.table_index(Table::CsiVolumes), i);

    // A claim changes it; re-claiming does not.
    let c = h.claim(
        "vol-1",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    assert_eq!(h.table_index(Table::CsiVolumes), c);
    h.claim(
        "vol-1",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    );
    assert_eq!(h.table_index(Table::CsiVolumes), c);

    // Release steps and gc claims change it.
    let r = h.claim("vol-1", release("a1", Mode::Read, State::Unpublishing));
    assert_eq!(h.table_index(Table::CsiVolumes), r);
    let g = h.claim("vol-1", gc_claim());
    assert_eq!(h.table_index(Table::CsiVolumes), g);

    // A user-field update changes it.
    let mut v2 = volume("vol-2");
    v2.name = "renamed".into();
    let u = h.register(vec![v2]);
    assert_eq!(h.table_index(Table::CsiVolumes), u);

    // Deregistration changes it.
    let d = h.apply(&H::deregister_cmd(NS, &["vol-2"], false));
    assert_eq!(h.table_index(Table::CsiVolumes), d);
    assert_eq!(h.store.snapshot().view().latest_index(), d);

    // Failing writes change nothing at all (checked byte for byte by `reject`).
    h.reject(&H::register_cmd(vec![volume_in(NS, "vol-3", "nfs")]));
    h.reject(&H::deregister_cmd(NS, &["vol-2"], false));
    h.reject(&H::deregister_cmd(NS, &["vol-1"], true));
    h.claim_rejected(
        "vol-1",
        claim("ghost", Mode::Read, Access::MultiNodeMultiWriter),
    );
    h.claim_rejected(
        "vol-9",
        claim("a2", Mode::Read, Access::MultiNodeMultiWriter),
    );
    assert_eq!(h.table_index(Table::CsiVolumes), d);
    assert_eq!(h.table_index(Table::CsiVolumes), d);
}

#[test]
fn failing_volume_writes_leave_canonical_bytes_identical() {
    let mut h = cluster_with(&["vol-1", "vol-2"]);
    h.claim("vol-1", claim("a1", Mode::Write, Access::SingleNodeWriter));
    let stale = h.last_applied();
    let before = h.bytes();
    // A stale index is refused by the engine.
    let err = h
        .store
        .register_csi_volumes(stale, vec![volume("vol-3")])
        .expect_err("stale index");
    assert!(matches!(err, StateError::StaleIndex { .. }), "{err:?}");
    assert_eq!(h.bytes(), before);
    // Every kind of rule violation (each checked by `reject`).
    let mut changed = volume("vol-1");
    changed.external_id = "x".into();
    h.reject(&H::register_cmd(vec![volume("vol-3"), changed]));
    h.reject(&H::deregister_cmd(NS, &["vol-2", "vol-1"], true));
    h.reject(&H::deregister_cmd(NS, &[], false));
    h.claim_rejected("vol-1", claim("a2", Mode::Write, Access::SingleNodeWriter));
    h.reject(&Command::ClaimCsiVolumes { claims: vec![] });
    assert_eq!(h.bytes(), before);
}
