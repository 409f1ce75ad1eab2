//! Plugin derivation (docs/rules.md §4.1 upsert node, §3 CsiPlugin, §5 plugin reads and
//! denormalization), driven only through commands: plugins are created by upserting nodes
//! with fingerprints, as production does.

use std::sync::Arc;

use crate::support::names;
use schedstate::ChangeKind;
use schedstate::model::{AllocListStub, CsiInfo, CsiPlugin, NodeStatus, id};
use schedstate::state::{Command, InstanceKind, StateError, StateStore};

use crate::support::*;

// ---------------------------------------------------------------------------------
// Creation: only by a healthy fingerprint.
// ---------------------------------------------------------------------------------

#[test]
fn plugin_created_only_by_healthy_fingerprint() {
    let store = StateStore::new();
    let info = store
        .upsert_node(1, node("n1").node(Fp::node("ebs", "a1")).build())
        .expect("upsert");
    assert_eq!(
        plugin_changes(&info),
        [("ebs".to_string(), ChangeKind::Insert)]
    );

    let p = must_plugin(&store, "ebs");
    assert_eq!(&*p.id, "ebs");
    assert_eq!((p.create_index, p.modify_index), (1, 1));
    assert_eq!(counts(&p), (0, 0, 1, 1));
    assert_eq!(node_nodes(&p), ["n1"]);
    assert_eq!(
        *p.nodes.get("n1").expect("entry"),
        Fp::node("ebs", "a1").info()
    );
    assert_eq!(&*p.nodes.get("n1").expect("entry").alloc_id, "a1");
    assert!(p.allocations.is_empty(), "stored rows carry no alloc stubs");
    assert_eq!(plugins_index(&store), 1);
    assert_eq!(table_index(&store, names::NODES), 1);
    assert_eq!(last_applied(&store), 1);

    // A healthy controller fingerprint creates a plugin too.
    up(&store, 2, node("n2").ctrl(Fp::controller("nfs", "a2")));
    let nfs = must_plugin(&store, "nfs");
    assert_eq!((nfs.create_index, nfs.modify_index), (2, 2));
    assert_eq!(counts(&nfs), (1, 1, 0, 0));
    assert_eq!(plugins_index(&store), 2);
    // ebs untouched by the nfs write.
    assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &p));
}

#[test]
fn plugin_unhealthy_fingerprint_for_absent_plugin_creates_nothing() {
    let store = StateStore::new();
    let n1 = node("n1")
        .ctrl(Fp::controller("ebs", "a1").unhealthy())
        .node(Fp::node("ebs", "a1").unhealthy());
    let info = store.upsert_node(1, n1.clone().build()).expect("upsert");
    assert!(plugin_changes(&info).is_empty());
    assert!(plugin(&store, "ebs").is_none());
    assert_eq!(store.snapshot().view().csi_plugins().count(), 0);
    assert_eq!(plugins_index(&store), 0, "no plugin was written");
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), 0);
    // The node itself is stored as reported.
    let stored = store.snapshot().view().node("n1").expect("node stored");
    assert_eq!(stored.csi_controller_plugins, n1.0.csi_controller_plugins);
    assert_eq!(stored.csi_node_plugins, n1.0.csi_node_plugins);
    assert_eq!(table_index(&store, names::NODES), 1);
    assert_eq!(last_applied(&store), 1);

    // Another unhealthy report, from another node: still nothing.
    up(
        &store,
        2,
        node("n2").node(Fp::node("ebs", "a2").unhealthy()),
    );
    assert!(plugin(&store, "ebs").is_none());
    assert_eq!(plugins_index(&store), 0);

    // The first healthy report creates it, at its own index.
    up(&store, 3, node("n3").node(Fp::node("ebs", "a3")));
    let p = must_plugin(&store, "ebs");
    assert_eq!((p.create_index, p.modify_index), (3, 3));
    assert_eq!(counts(&p), (0, 0, 1, 1));
    assert_eq!(node_nodes(&p), ["n3"]);
    assert_eq!(plugins_index(&store), 3);
}

#[test]
fn plugin_existing_entry_going_unhealthy_is_updated() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1")),
    );
    up(&store, 2, node("n2").node(Fp::node("ebs", "a2")));
    assert_eq!(counts(&must_plugin(&store, "ebs")), (1, 1, 2, 2));

    // n1's node instance goes unhealthy: the entry stays, the healthy count drops.
    up(
        &store,
        3,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1").unhealthy()),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(counts(&p), (1, 1, 1, 2));
    let entry = p.nodes.get("n1").expect("entry kept");
    assert!(!entry.healthy);
    assert_eq!(entry.health_description, "unhealthy");
    assert_eq!((p.create_index, p.modify_index), (1, 3));
    assert_eq!(plugins_index(&store), 3);

    // Its controller too: expected stays.
    up(
        &store,
        4,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1").unhealthy())
            .node(Fp::node("ebs", "a1").unhealthy()),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(counts(&p), (0, 1, 1, 2));
    assert_eq!(p.modify_index, 4);

    // Every instance unhealthy: the plugin is not empty, so it stays.
    up(
        &store,
        5,
        node("n2").node(Fp::node("ebs", "a2").unhealthy()),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(counts(&p), (0, 1, 0, 2));
    assert_eq!(p.modify_index, 5);

    // And back to healthy.
    up(&store, 6, node("n2").node(Fp::node("ebs", "a2")));
    assert_eq!(counts(&must_plugin(&store, "ebs")), (0, 1, 1, 2));
}

#[test]
fn plugin_unhealthy_fingerprint_without_entry_records_no_instance() {
    let store = StateStore::new();
    up(&store, 1, node("n1").node(Fp::node("ebs", "a1")));
    up(
        &store,
        2,
        node("n2").ctrl(Fp::controller("ebs", "c2").unhealthy()),
    );
    up(
        &store,
        3,
        node("n3").node(Fp::node("ebs", "a3").unhealthy()),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(counts(&p), (0, 0, 1, 1));
    assert_eq!(node_nodes(&p), ["n1"]);
    assert!(controller_nodes(&p).is_empty());
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), 1);
}

// ---------------------------------------------------------------------------------
// Provider, version, controller_required.
// ---------------------------------------------------------------------------------

#[test]
fn plugin_provider_and_version_follow_fingerprints() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1").node(Fp::node("ebs", "a1").provider(PROVIDER, "1.0.0")),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(
        (p.provider.as_str(), p.version.as_str()),
        (PROVIDER, "1.0.0")
    );

    // The same node upgraded.
    up(
        &store,
        2,
        node("n1").node(Fp::node("ebs", "a1").provider(PROVIDER, "1.1.0")),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(p.version, "1.1.0");
    assert_eq!((p.create_index, p.modify_index), (1, 2));
    assert_eq!(plugins_index(&store), 2);

    // Another node's report, a controller this time, wins as the latest.
    up(
        &store,
        3,
        node("n2").ctrl(Fp::controller("ebs", "c2").provider("ebs.csi.example", "2.0.0")),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(
        (p.provider.as_str(), p.version.as_str()),
        ("ebs.csi.example", "2.0.0")
    );
    assert_eq!(p.modify_index, 3);

    // docs/rules.md §4.1: the plugin's provider and version are set from every
    // fingerprint applied to an existing plugin, even one too unhealthy to be recorded as
    // an instance.
    up(
        &store,
        4,
        node("n3").node(
            Fp::node("ebs", "a3")
                .unhealthy()
                .provider(PROVIDER, "3.0.0"),
        ),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(
        (p.provider.as_str(), p.version.as_str()),
        (PROVIDER, "3.0.0")
    );
    assert_eq!(p.modify_index, 4);
    assert_eq!(node_nodes(&p), ["n1"]);
}

#[test]
fn plugin_controller_required_set_by_last_controller_fingerprint() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1").ctrl(Fp::controller("ebs", "c1").requires_controller(true)),
    );
    assert!(must_plugin(&store, "ebs").controller_required);

    // The last controller fingerprint wins, whichever node sent it.
    up(
        &store,
        2,
        node("n2").ctrl(Fp::controller("ebs", "c2").requires_controller(false)),
    );
    let p = must_plugin(&store, "ebs");
    assert!(!p.controller_required);
    assert_eq!(p.modify_index, 2);

    // n1 re-sends its unchanged fingerprint: its entry does not change, but it is the
    // last controller fingerprint, so the plugin follows it.
    up(
        &store,
        3,
        node("n1").ctrl(Fp::controller("ebs", "c1").requires_controller(true)),
    );
    let p = must_plugin(&store, "ebs");
    assert!(p.controller_required);
    assert_eq!(p.modify_index, 3);
    assert_eq!(plugins_index(&store), 3);

    // An unhealthy controller fingerprint of an existing plugin is a controller
    // fingerprint too.
    up(
        &store,
        4,
        node("n3").ctrl(
            Fp::controller("ebs", "c3")
                .unhealthy()
                .requires_controller(false),
        ),
    );
    let p = must_plugin(&store, "ebs");
    assert!(!p.controller_required);
    assert_eq!(controller_nodes(&p), ["n1", "n2"]);
}

#[test]
fn plugin_controller_required_never_set_by_node_fingerprints() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1").ctrl(Fp::controller("ebs", "c1").requires_controller(true)),
    );
    up(
        &store,
        2,
        node("n2").node(Fp::node("ebs", "a2").requires_controller(false)),
    );
    let p = must_plugin(&store, "ebs");
    assert!(
        p.controller_required,
        "a node fingerprint changed controller_required"
    );
    assert_eq!(counts(&p), (1, 1, 1, 1));

    // A plugin created by a node fingerprint that says a controller is required does
    // not require one until a controller says so.
    up(
        &store,
        3,
        node("n3").node(Fp::node("nfs", "a3").requires_controller(true)),
    );
    assert!(!must_plugin(&store, "nfs").controller_required);
    up(
        &store,
        4,
        node("n3").node(Fp::node("nfs", "a3").requires_controller(false)),
    );
    up(
        &store,
        5,
        node("n4").node(Fp::node("nfs", "a4").requires_controller(true)),
    );
    assert!(!must_plugin(&store, "nfs").controller_required);
    up(
        &store,
        6,
        node("n5").ctrl(Fp::controller("nfs", "c5").requires_controller(true)),
    );
    assert!(must_plugin(&store, "nfs").controller_required);
}

// ---------------------------------------------------------------------------------
// Controller and node instances.
// ---------------------------------------------------------------------------------

#[test]
fn plugin_controller_and_node_instances_are_kept_per_kind() {
    let store = StateStore::new();
    up(&store, 1, node("n1").ctrl(Fp::controller("ebs", "c1")));
    up(&store, 2, node("n2").node(Fp::node("ebs", "a2")));
    up(&store, 3, node("n3").node(Fp::node("ebs", "a3")));
    up(
        &store,
        4,
        node("n4")
            .ctrl(Fp::controller("ebs", "c4").unhealthy())
            .node(Fp::node("ebs", "a4")),
    );
    let p = must_plugin(&store, "ebs");
    // n4's unhealthy controller report created no entry.
    assert_eq!(controller_nodes(&p), ["n1"]);
    assert_eq!(node_nodes(&p), ["n2", "n3", "n4"]);
    assert_eq!(counts(&p), (1, 1, 3, 3));
    let c = p.controllers.get("n1").expect("controller entry");
    assert!(c.controller_info.is_some() && c.node_info.is_none());
    assert_eq!(&*c.alloc_id, "c1");
    let n = p.nodes.get("n3").expect("node entry");
    assert!(n.node_info.is_some() && n.controller_info.is_none());
    assert_eq!(&*n.alloc_id, "a3");
    assert!(p.controllers.get("n2").is_none() && p.nodes.get("n1").is_none());
}

#[test]
fn plugin_fingerprint_with_both_halves_applies_to_both_maps() {
    let store = StateStore::new();
    let mono = Fp::both("ebs", "m1").requires_controller(true);
    up(&store, 1, node("n1").ctrl(mono.clone()).node(mono.clone()));
    let p = must_plugin(&store, "ebs");
    assert_eq!(controller_nodes(&p), ["n1"]);
    assert_eq!(node_nodes(&p), ["n1"]);
    assert_eq!(counts(&p), (1, 1, 1, 1));
    assert!(p.controller_required);
    assert_eq!(
        *p.controllers.get("n1").expect("controller"),
        mono.clone().info()
    );
    assert_eq!(*p.nodes.get("n1").expect("node"), mono.info());

    // Going unhealthy in both maps updates both entries.
    let sick = Fp::both("ebs", "m1").requires_controller(true).unhealthy();
    up(&store, 2, node("n1").ctrl(sick.clone()).node(sick));
    let p = must_plugin(&store, "ebs");
    assert_eq!(counts(&p), (0, 1, 0, 1));
    assert_eq!(p.modify_index, 2);
}

/// docs/rules.md §4.1: an entry of a node's controller map must carry a controller half,
/// an entry of its node map a node half, and a second half the fingerprint carries needs
/// an entry of the plugin in the other map (a monolith is filed in both); otherwise the
/// upsert is refused with `FingerprintHalves`. Each map's entry is applied as the
/// instance of that map's kind only.
#[test]
fn plugin_fingerprint_halves_must_match_their_maps() {
    let store = StateStore::new();
    up(&store, 1, node("n0").node(Fp::node("ebs", "a0")));
    let refused =
        |index: u64, n: NodeB, filed_in: InstanceKind, half: InstanceKind, carried: bool| {
            let err = assert_rejected(&store, index, &Command::UpsertNode { node: n.build() });
            match err {
                StateError::FingerprintHalves {
                    filed_in: f,
                    half: h,
                    carried: c,
                    ..
                } => assert_eq!((f, h, c), (filed_in, half, carried), "{err}"),
                other => panic!("expected FingerprintHalves, got {other}"),
            }
        };
    use InstanceKind::{Controller, Node as NodeKind};
    // Filed in a map without that map's half.
    refused(
        2,
        node("n1").node(Fp::controller("ebs", "c1")),
        NodeKind,
        NodeKind,
        false,
    );
    refused(
        2,
        node("n1").ctrl(Fp::node("ebs", "a1")),
        Controller,
        Controller,
        false,
    );
    // A half with no entry in the map of its kind: a monolith filed in one map only.
    refused(
        2,
        node("n1").node(Fp::both("ebs", "m1")),
        NodeKind,
        Controller,
        true,
    );
    refused(
        2,
        node("n1").ctrl(Fp::both("nfs", "m2")),
        Controller,
        NodeKind,
        true,
    );
    // A report with neither half names no instance at all.
    let bare = Fp(CsiInfo {
        plugin_id: id("ghost"),
        healthy: true,
        provider: PROVIDER.into(),
        ..Default::default()
    });
    refused(2, node("n1").node(bare), NodeKind, NodeKind, false);

    // Accepted: a monolith in both maps, and a controller and a monolith of one plugin.
    up(
        &store,
        2,
        node("n1")
            .ctrl(Fp::both("ebs", "m1"))
            .node(Fp::both("ebs", "m1")),
    );
    assert_eq!(counts(&must_plugin(&store, "ebs")), (1, 1, 2, 2));
    up(
        &store,
        3,
        node("n2")
            .ctrl(Fp::controller("ebs", "c2"))
            .node(Fp::both("ebs", "m2")),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(counts(&p), (2, 2, 3, 3));
    // Each map's entry is the instance of its kind: the controller entry of n2 is the
    // controller fingerprint, not the monolith's controller half.
    assert_eq!(
        &*p.controllers.get("n2").expect("controller").alloc_id,
        "c2"
    );
    assert_eq!(&*p.nodes.get("n2").expect("node").alloc_id, "m2");
    assert_invariants(&store);
}

#[test]
fn node_add_csi_plugin_files_fingerprints_where_their_halves_say() {
    use schedstate::model::{CsiControllerInfo, CsiNodeInfo, Node};
    let store = StateStore::new();
    let mut n = Node::new("n1", "client-1");
    n.add_csi_plugin(
        CsiInfo::controller_instance("ebs", "c1", CsiControllerInfo::default())
            .with_provider(PROVIDER, VERSION)
            .requiring_controller(true),
    )
    .add_csi_plugin(
        CsiInfo::node_instance("ebs", "a1", CsiNodeInfo::default())
            .with_provider(PROVIDER, VERSION),
    )
    .add_csi_plugin(
        CsiInfo::monolith_instance(
            "nfs",
            "m1",
            CsiControllerInfo::default(),
            CsiNodeInfo::default(),
        )
        .with_health(false, "probe failed"),
    );
    assert_eq!(n.csi_controller_plugins.len(), 2);
    assert_eq!(n.csi_node_plugins.len(), 2);
    store
        .upsert_node(1, n)
        .expect("a node built with add_csi_plugin is accepted");
    let ebs = must_plugin(&store, "ebs");
    assert_eq!(counts(&ebs), (1, 1, 1, 1));
    assert!(ebs.controller_required);
    // An unhealthy report never creates a plugin.
    assert!(plugin(&store, "nfs").is_none());
}

// ---------------------------------------------------------------------------------
// The removal sweep and empty plugins.
// ---------------------------------------------------------------------------------

#[test]
fn plugin_removal_sweep_dropping_controller_keeps_node_entry() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1"))
            .node(Fp::node("nfs", "f1")),
    );
    assert_eq!(counts(&must_plugin(&store, "ebs")), (1, 1, 1, 1));
    let nfs = must_plugin(&store, "nfs");

    // The controller fingerprint disappears: only the controller entry goes.
    let info = store
        .upsert_node(
            2,
            node("n1")
                .node(Fp::node("ebs", "a1"))
                .node(Fp::node("nfs", "f1"))
                .build(),
        )
        .expect("upsert");
    assert_eq!(
        plugin_changes(&info),
        [("ebs".to_string(), ChangeKind::Update)]
    );
    let p = must_plugin(&store, "ebs");
    assert!(controller_nodes(&p).is_empty());
    assert_eq!(node_nodes(&p), ["n1"]);
    assert_eq!(counts(&p), (0, 0, 1, 1));
    assert_eq!((p.create_index, p.modify_index), (1, 2));
    assert_eq!(plugins_index(&store), 2);
    // The other plugin on the node is untouched.
    assert!(Arc::ptr_eq(&must_plugin(&store, "nfs"), &nfs));

    // And the other way round: the controller is back, the node fingerprint goes.
    up(
        &store,
        3,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("nfs", "f1")),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(controller_nodes(&p), ["n1"]);
    assert!(node_nodes(&p).is_empty());
    assert_eq!(p.modify_index, 3);
    assert!(Arc::ptr_eq(&must_plugin(&store, "nfs"), &nfs));
}

#[test]
fn plugin_removal_sweep_node_with_empty_maps_removes_all_its_instances() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1"))
            .node(Fp::node("nfs", "f1")),
    );
    up(&store, 2, node("n2").node(Fp::node("ebs", "a2")));
    let info = store.upsert_node(3, node("n1").build()).expect("upsert");
    assert_eq!(
        plugin_changes(&info),
        [
            ("ebs".to_string(), ChangeKind::Update),
            ("nfs".to_string(), ChangeKind::Delete)
        ]
    );
    let p = must_plugin(&store, "ebs");
    assert!(controller_nodes(&p).is_empty());
    assert_eq!(node_nodes(&p), ["n2"]);
    assert_eq!(counts(&p), (0, 0, 1, 1));
    assert_eq!((p.create_index, p.modify_index), (1, 3));
    assert!(plugin(&store, "nfs").is_none());
    assert_eq!(plugins_index(&store), 3);
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), 3);
}

#[test]
fn plugin_empty_plugin_deleted_in_same_write_and_never_reappears() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1")),
    );
    up(&store, 2, node("n9").node(Fp::node("other", "o9")));
    up_allocs(&store, 3, vec![running("c1", "n1"), running("a1", "n1")]);

    let info = store.upsert_node(4, node("n1").build()).expect("upsert");
    assert_eq!(
        plugin_changes(&info),
        [("ebs".to_string(), ChangeKind::Delete)]
    );
    let check_gone = |at: &str| {
        let snap = store.snapshot();
        let v = snap.view();
        assert!(v.csi_plugin("ebs").is_none(), "{at}: ebs reappeared");
        assert_eq!(v.csi_plugins_by_prefix("eb").count(), 0, "{at}");
        let all: Vec<String> = v.csi_plugins().map(|p| p.id.to_string()).collect();
        assert_eq!(all, ["other"], "{at}");
    };
    check_gone("after the emptying write");
    assert_eq!(
        plugins_index(&store),
        4,
        "the deletion bumps the table index"
    );

    // Nothing that follows brings it back, and nothing that follows touches the table.
    up(&store, 5, node("n1"));
    store
        .update_node_status(6, "n1", NodeStatus::Down)
        .expect("status");
    up_allocs(&store, 7, vec![stopped("c1", "n1"), stopped("a1", "n1")]);
    store.delete_allocs(8, &ids(&["c1", "a1"])).expect("gc");
    check_gone("after unrelated writes");
    assert_eq!(plugins_index(&store), 4);

    // An unhealthy report does not recreate it either.
    up(
        &store,
        9,
        node("n1").node(Fp::node("ebs", "a1").unhealthy()),
    );
    check_gone("after an unhealthy report");
    assert_eq!(plugins_index(&store), 4);

    // Only a new healthy report does, as a new plugin.
    up(&store, 10, node("n2").node(Fp::node("ebs", "a2")));
    let p = must_plugin(&store, "ebs");
    assert_eq!((p.create_index, p.modify_index), (10, 10));
    assert_eq!(counts(&p), (0, 0, 1, 1));
    assert_eq!(plugins_index(&store), 10);
}

#[test]
fn plugin_created_and_emptied_in_one_write_is_never_stored() {
    // One batch: the first report of n1 creates the plugin, the second (no
    // fingerprints) empties it again.
    let store = StateStore::new();
    let info = store
        .upsert_nodes(
            1,
            vec![
                node("n1").node(Fp::node("ghost", "a1")).build(),
                node("n1").build(),
            ],
        )
        .expect("batch");
    assert!(plugin(&store, "ghost").is_none());
    assert_eq!(plugins_index(&store), 0);
    assert!(plugin_changes(&info).is_empty(), "{info:?}");
    assert_invariants(&store);
}

// ---------------------------------------------------------------------------------
// Indexes.
// ---------------------------------------------------------------------------------

#[test]
fn plugin_modify_index_is_the_index_of_the_write_that_changed_it() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1")
            .node(Fp::node("ebs", "a1"))
            .node(Fp::node("nfs", "f1")),
    );
    let nfs = must_plugin(&store, "nfs");

    // Only ebs's fingerprint changes (a new alloc runs it).
    let info = store
        .upsert_node(
            2,
            node("n1")
                .node(Fp::node("ebs", "a1-new"))
                .node(Fp::node("nfs", "f1").at(50))
                .build(),
        )
        .expect("upsert");
    assert_eq!(
        plugin_changes(&info),
        [("ebs".to_string(), ChangeKind::Update)]
    );
    let ebs = must_plugin(&store, "ebs");
    assert_eq!((ebs.create_index, ebs.modify_index), (1, 2));
    assert_eq!(&*ebs.nodes.get("n1").expect("entry").alloc_id, "a1-new");
    assert!(Arc::ptr_eq(&must_plugin(&store, "nfs"), &nfs));
    assert_eq!(plugins_index(&store), 2);

    // Another node joins ebs.
    up(&store, 3, node("n2").node(Fp::node("ebs", "a2")));
    let ebs = must_plugin(&store, "ebs");
    assert_eq!((ebs.create_index, ebs.modify_index), (1, 3));
    assert_eq!(must_plugin(&store, "nfs").modify_index, 1);
    assert_eq!(plugins_index(&store), 3);
    assert_eq!(store.snapshot().view().latest_index(), 3);
}

#[test]
fn plugin_identical_refingerprint_changes_nothing() {
    let store = StateStore::new();
    let n1 = |t: u64| {
        node("n1")
            .ctrl(Fp::controller("ebs", "c1").at(t))
            .node(Fp::node("ebs", "a1").at(t))
            .node(Fp::node("nfs", "f1").unhealthy().at(t))
    };
    up(&store, 1, n1(100));
    up(&store, 2, node("n2").node(Fp::node("nfs", "f2")));
    let ebs = must_plugin(&store, "ebs");
    let nfs = must_plugin(&store, "nfs");
    let instances = table_index(&store, names::CSI_PLUGIN_INSTANCES);

    // The same reports, taken later.
    let info = store.upsert_node(3, n1(200).build()).expect("upsert");
    assert!(plugin_changes(&info).is_empty(), "{:?}", info);
    assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &ebs));
    assert!(Arc::ptr_eq(&must_plugin(&store, "nfs"), &nfs));
    assert_eq!(must_plugin(&store, "ebs").modify_index, 1);
    assert_eq!(plugins_index(&store), 2);
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), instances);
    // The node row itself is replaced, and the write is applied.
    let n = store.snapshot().view().node("n1").expect("node");
    assert_eq!((n.create_index, n.modify_index), (1, 3));
    assert_eq!(table_index(&store, names::NODES), 3);
    assert_eq!(last_applied(&store), 3);

    // Again, through `apply` with the raw command.
    ok(
        &store,
        4,
        Command::UpsertNode {
            node: n1(300).build(),
        },
    );
    assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &ebs));
    assert_eq!(plugins_index(&store), 2);
    assert_eq!(last_applied(&store), 4);
}

/// A monolith fingerprint (filed in both maps): re-sending it unchanged must not
/// rewrite the plugin.
#[test]
fn plugin_identical_refingerprint_of_monolith_changes_nothing() {
    let store = StateStore::new();
    let n1 = |t: u64| {
        node("n1")
            .ctrl(Fp::both("ebs", "m1").at(t))
            .node(Fp::both("ebs", "m1").at(t))
    };
    up(&store, 1, n1(100));
    let ebs = must_plugin(&store, "ebs");
    assert_eq!(counts(&ebs), (1, 1, 1, 1));

    let info = store.upsert_node(2, n1(200).build()).expect("upsert");
    assert!(
        plugin_changes(&info).is_empty(),
        "plugin rewritten by an identical report: {:?}",
        info
    );
    let now = must_plugin(&store, "ebs");
    assert_eq!(now.modify_index, 1, "plugin modify_index moved");
    assert_eq!(plugins_index(&store), 1, "csi_plugins table index moved");
    assert_eq!(*now, *ebs);
}

/// A rolling upgrade: the controller and node allocs on one node report different
/// versions. Each report is unchanged, so re-sending them must not rewrite the plugin
/// (which would wake every blocking plugin query on every client heartbeat).
#[test]
fn plugin_identical_refingerprint_with_per_kind_versions_changes_nothing() {
    let store = StateStore::new();
    let n1 = |t: u64| {
        node("n1")
            .ctrl(
                Fp::controller("ebs", "c1")
                    .provider(PROVIDER, "1.0.0")
                    .at(t),
            )
            .node(Fp::node("ebs", "a1").provider(PROVIDER, "1.1.0").at(t))
    };
    up(&store, 1, n1(100));
    let ebs = must_plugin(&store, "ebs");
    // Node fingerprints are applied after controller fingerprints: the node's wins.
    assert_eq!(ebs.version, "1.1.0");

    let info = store.upsert_node(2, n1(200).build()).expect("upsert");
    assert!(
        plugin_changes(&info).is_empty(),
        "plugin rewritten by an identical report: {:?}",
        info
    );
    let now = must_plugin(&store, "ebs");
    assert_eq!(now.modify_index, 1, "plugin modify_index moved");
    assert_eq!(plugins_index(&store), 1, "csi_plugins table index moved");
    assert_eq!(now.version, "1.1.0");
}

// ---------------------------------------------------------------------------------
// Reads: denormalize, exact ids, no mutation through a read.
// ---------------------------------------------------------------------------------

#[test]
fn plugin_denormalize_lists_distinct_allocs_newest_first() {
    let store = StateStore::new();
    up_allocs(&store, 1, vec![running("a1", "n1")]);
    up_allocs(&store, 2, vec![running("a2", "n3")]);
    up_allocs(&store, 3, vec![running("a3", "n2")]);
    // n1 runs a monolith alloc: two entries, one alloc.
    up(
        &store,
        4,
        node("n1")
            .ctrl(Fp::controller("ebs", "a1"))
            .node(Fp::node("ebs", "a1")),
    );
    up(&store, 5, node("n2").node(Fp::node("ebs", "a3")));
    up(&store, 6, node("n3").node(Fp::node("ebs", "a2")));
    up(&store, 7, node("n4").node(Fp::node("ebs", ""))); // unknown alloc
    up(&store, 8, node("n5").node(Fp::node("ebs", "gone"))); // never stored

    let snap = store.snapshot();
    let v = snap.view();
    let stored = v.csi_plugin("ebs").expect("plugin");
    let bytes_before = snap.canonical_bytes().expect("bytes");
    let d = v.denormalize_csi_plugin(&stored);
    let order: Vec<&str> = d.allocations.iter().map(|s| &*s.id).collect();
    assert_eq!(order, ["a3", "a2", "a1"]);
    for stub in &d.allocations {
        let a = v.alloc(&stub.id).expect("alloc");
        // The stub shares the stored row.
        assert!(Arc::ptr_eq(stub.allocation(), &a));
        assert_eq!(*stub, AllocListStub::new(a));
    }
    // Everything but the stubs is the stored plugin.
    let mut plain = d.clone();
    plain.allocations.clear();
    assert_eq!(plain, *stored);
    assert_eq!(counts(&d), (1, 1, 5, 5));

    // Twice gives the same; the stored row never changes.
    assert_eq!(v.denormalize_csi_plugin(&stored), d);
    assert_eq!(
        v.denormalize_csi_plugin(&d),
        d,
        "denormalizing a denormalized copy"
    );
    let again = store.snapshot().view().csi_plugin("ebs").expect("plugin");
    assert!(Arc::ptr_eq(&again, &stored));
    assert!(again.allocations.is_empty());
    assert_eq!(canonical(&store), bytes_before);

    // A newer write of a1 makes it the newest.
    up_allocs(&store, 9, vec![running("a1", "n1")]);
    let snap2 = store.snapshot();
    let d2 = snap2.view().denormalize_csi_plugin(&stored);
    let order: Vec<&str> = d2.allocations.iter().map(|s| &*s.id).collect();
    assert_eq!(order, ["a1", "a3", "a2"]);
    assert_eq!(d2.allocations[0].modify_index, 9);
    assert_eq!(d2.allocations[0].create_index, 1);
    // The older snapshot still answers with what it saw.
    assert_eq!(v.denormalize_csi_plugin(&stored), d);
}

#[test]
fn plugin_denormalize_skips_missing_and_empty_alloc_ids() {
    let store = StateStore::new();
    up(&store, 1, node("n1").node(Fp::node("ebs", "")));
    up(&store, 2, node("n2").ctrl(Fp::controller("ebs", "missing")));
    let p = must_plugin(&store, "ebs");
    let d = store.snapshot().view().denormalize_csi_plugin(&p);
    assert!(d.allocations.is_empty());
    assert_eq!(counts(&d), (1, 1, 1, 1));
}

#[test]
fn plugin_reads_never_mutate_the_store() {
    let store = StateStore::new();
    up_allocs(&store, 1, vec![running("a1", "n1")]);
    up(
        &store,
        2,
        node("n1")
            .ctrl(Fp::controller("ebs", "a1"))
            .node(Fp::node("ebs", "a1")),
    );
    let before = canonical(&store);
    let snap = store.snapshot();
    let v = snap.view();

    // A plugin: clone the Arc, make it unique, mutate everything.
    let original: Arc<CsiPlugin> = v.csi_plugin("ebs").expect("plugin");
    let mut mine = Arc::clone(&original);
    {
        let p = Arc::make_mut(&mut mine);
        p.provider = "mutated".into();
        p.version = "0".into();
        p.controller_required = false;
        p.controllers.remove("n1");
        p.nodes.insert(id("n9"), Fp::node("ebs", "x").info());
        p.modify_index = 999;
        p.allocations.push(Default::default());
    }
    // An instance inside it.
    let mut entry = Arc::clone(original.nodes.get("n1").expect("entry"));
    Arc::make_mut(&mut entry).healthy = false;
    // A denormalized copy.
    let mut d = v.denormalize_csi_plugin(&original);
    d.allocations.clear();
    d.nodes.remove("n1");
    // Node and alloc rows.
    let mut n = v.node("n1").expect("node");
    Arc::make_mut(&mut n).csi_controller_plugins.clear();
    let mut a = v.alloc("a1").expect("alloc");
    Arc::make_mut(&mut a).desired_status = schedstate::model::DesiredStatus::Stop;
    // Listings.
    for mut p in v.csi_plugins() {
        Arc::make_mut(&mut p).nodes.remove("n1");
    }

    let again = store.snapshot().view().csi_plugin("ebs").expect("plugin");
    assert!(Arc::ptr_eq(&again, &original));
    assert_eq!(again.provider, PROVIDER);
    assert_eq!(counts(&again), (1, 1, 1, 1));
    assert!(again.nodes.get("n1").expect("entry").healthy);
    assert!(again.allocations.is_empty());
    assert_eq!(
        store
            .snapshot()
            .view()
            .node("n1")
            .expect("node")
            .csi_controller_plugins
            .len(),
        1
    );
    assert_eq!(
        store
            .snapshot()
            .view()
            .alloc("a1")
            .expect("alloc")
            .desired_status,
        schedstate::model::DesiredStatus::Run
    );
    assert_eq!(canonical(&store), before);
}

#[test]
fn plugin_lookup_by_id_is_exact_prefix_is_separate() {
    let store = StateStore::new();
    up(&store, 1, node("n1").node(Fp::node("ebs", "a1")));
    up(&store, 2, node("n2").node(Fp::node("ebs2", "a2")));
    up(&store, 3, node("n3").node(Fp::node("efs", "a3")));
    let snap = store.snapshot();
    let v = snap.view();
    assert!(v.csi_plugin("eb").is_none());
    assert!(v.csi_plugin("e").is_none());
    assert!(v.csi_plugin("").is_none());
    assert!(v.csi_plugin("ebs2x").is_none());
    assert_eq!(&*v.csi_plugin("ebs").expect("exact").id, "ebs");
    assert_eq!(&*v.csi_plugin("ebs2").expect("exact").id, "ebs2");

    let prefix = |p: &str| -> Vec<String> {
        v.csi_plugins_by_prefix(p)
            .map(|p| p.id.to_string())
            .collect()
    };
    assert_eq!(prefix("eb"), ["ebs", "ebs2"]);
    assert_eq!(prefix("ebs"), ["ebs", "ebs2"]);
    assert_eq!(prefix("ebs2"), ["ebs2"]);
    assert_eq!(prefix("e"), ["ebs", "ebs2", "efs"]);
    assert_eq!(prefix(""), ["ebs", "ebs2", "efs"]);
    assert!(prefix("x").is_empty());
    let all: Vec<String> = v.csi_plugins().map(|p| p.id.to_string()).collect();
    assert_eq!(all, ["ebs", "ebs2", "efs"]);
    // Nodes and allocs too.
    assert!(v.node("n").is_none());
    assert!(v.alloc("a").is_none());
}
