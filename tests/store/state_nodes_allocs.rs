//! Node and allocation writes (docs/rules.md §4.1 upsert node, §4.2 delete nodes, §4.3
//! node status, drain and eligibility, §4.4 upsert allocs, §4.5 delete allocs), stale
//! indexes, failed writes, determinism, and a reference model of the plugin rules fed
//! generated command sequences. Driven only through commands.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::support::names;
use schedstate::ChangeKind;
use schedstate::Table;
use schedstate::model::{
    Allocation, ClientStatus, CsiInfo, DesiredStatus, Id, Node, NodeStatus, id,
};
use schedstate::state::{Command, InstanceKind, StateError, StateStore};

use crate::support::*;

/// A cluster used by many tests:
/// - n1: controller ebs (alloc c1), node ebs (a1), node nfs (f1);
/// - n2: node ebs (a2).
///
/// Allocs c1, a1, f1 (on n1) and a2 (on n2) are running, written at index 1; the nodes
/// at 2 and 3.
fn cluster() -> StateStore {
    let store = StateStore::new();
    up_allocs(
        &store,
        1,
        vec![
            running("c1", "n1"),
            running("a1", "n1"),
            running("f1", "n1"),
            running("a2", "n2"),
        ],
    );
    up(
        &store,
        2,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1"))
            .node(Fp::node("nfs", "f1")),
    );
    up(&store, 3, node("n2").node(Fp::node("ebs", "a2")));
    store
}

// ---------------------------------------------------------------------------------
// Upsert node.
// ---------------------------------------------------------------------------------

#[test]
fn node_upsert_keeps_create_index_and_sets_modify_index() {
    let store = StateStore::new();
    up(&store, 3, node("n1"));
    let n = store.snapshot().view().node("n1").expect("node");
    assert_eq!((n.create_index, n.modify_index), (3, 3));
    assert_eq!(table_index(&store, names::NODES), 3);

    let mut renamed = node("n1").build();
    renamed.name = "renamed".into();
    renamed.create_index = 100; // whatever the request says, the store decides
    renamed.modify_index = 200;
    store.upsert_node(7, renamed).expect("upsert");
    let n = store.snapshot().view().node("n1").expect("node");
    assert_eq!((n.create_index, n.modify_index), (3, 7));
    assert_eq!(n.name, "renamed");
    assert_eq!(table_index(&store, names::NODES), 7);
    assert_eq!(store.snapshot().view().latest_index(), 7);
}

#[test]
fn node_upsert_stores_the_node_as_sent() {
    let store = StateStore::new();
    let mut n = node("n1")
        .ctrl(Fp::controller("ebs", "c1"))
        .node(Fp::node("ebs", "a1").unhealthy())
        .build();
    n.status = NodeStatus::Initializing;
    n.drain = true;
    n.eligible = false;
    store.upsert_node(1, n.clone()).expect("upsert");
    let stored = store.snapshot().view().node("n1").expect("node");
    let mut expected = n;
    expected.create_index = 1;
    expected.modify_index = 1;
    assert_eq!(*stored, expected);
    let all: Vec<Id> = store
        .snapshot()
        .view()
        .nodes()
        .map(|n| n.id.clone())
        .collect();
    assert_eq!(all, ids(&["n1"]));
}

#[test]
fn node_ids_that_prefix_each_other_are_independent() {
    let store = StateStore::new();
    up(&store, 1, node("n1").node(Fp::node("ebs", "a1")));
    up(
        &store,
        2,
        node("n10")
            .node(Fp::node("ebs", "a10"))
            .ctrl(Fp::controller("ebs", "c10")),
    );
    up(&store, 3, node("n1"));
    let p = must_plugin(&store, "ebs");
    assert_eq!(node_nodes(&p), ["n10"]);
    assert_eq!(controller_nodes(&p), ["n10"]);
    up(&store, 4, node("n1").node(Fp::node("ebs", "a1")));
    store.delete_nodes(5, &ids(&["n1"])).expect("delete");
    let p = must_plugin(&store, "ebs");
    assert_eq!(node_nodes(&p), ["n10"]);
    assert_eq!(controller_nodes(&p), ["n10"]);
    assert!(store.snapshot().view().node("n10").is_some());
}

// ---------------------------------------------------------------------------------
// Delete nodes.
// ---------------------------------------------------------------------------------

#[test]
fn delete_nodes_empty_list_is_an_error() {
    let store = cluster();
    let err = assert_rejected(&store, 10, &Command::DeleteNodes { ids: vec![] });
    assert!(matches!(err, StateError::EmptyRequest { .. }), "{err:?}");
    assert!(store.delete_nodes(10, &[] as &[&str]).is_err());
}

#[test]
fn delete_nodes_unknown_id_is_an_error_naming_it_and_deletes_nothing() {
    let store = cluster();
    let err = assert_rejected(
        &store,
        10,
        &Command::DeleteNodes {
            ids: ids(&["n1", "nX", "n2"]),
        },
    );
    assert_eq!(err, StateError::NodeNotFound(id("nX")));
    assert!(err.to_string().contains("nX"), "{err}");
    // Nothing deleted: nodes and every plugin entry are still there.
    let snap = store.snapshot();
    assert!(snap.view().node("n1").is_some());
    assert!(snap.view().node("n2").is_some());
    assert_eq!(counts(&must_plugin(&store, "ebs")), (1, 1, 2, 2));
    assert!(plugin(&store, "nfs").is_some());
    // Unknown id alone, or a prefix of a real one.
    let err = assert_rejected(&store, 11, &Command::DeleteNodes { ids: ids(&["n"]) });
    assert_eq!(err, StateError::NodeNotFound(id("n")));
    // The next write can use the index the failed one asked for.
    store.delete_nodes(10, &ids(&["n2"])).expect("delete");
}

#[test]
fn delete_nodes_removes_both_kinds_of_entries() {
    let store = cluster();
    let info = store.delete_nodes(10, &ids(&["n1"])).expect("delete");
    assert_eq!(
        plugin_changes(&info),
        [
            ("ebs".to_string(), ChangeKind::Update),
            ("nfs".to_string(), ChangeKind::Delete)
        ]
    );
    assert!(store.snapshot().view().node("n1").is_none());
    let p = must_plugin(&store, "ebs");
    assert!(controller_nodes(&p).is_empty());
    assert_eq!(node_nodes(&p), ["n2"]);
    assert_eq!(counts(&p), (0, 0, 1, 1));
    assert_eq!((p.create_index, p.modify_index), (2, 10));
    assert!(plugin(&store, "nfs").is_none());
    assert_eq!(table_index(&store, names::NODES), 10);
    assert_eq!(plugins_index(&store), 10);
    // The allocations are not the node's to delete.
    assert_eq!(store.snapshot().view().allocs_by_node("n1").count(), 3);
}

#[test]
fn delete_nodes_deletes_emptied_plugins_and_bumps_table_index() {
    let store = cluster();
    let info = store.delete_nodes(10, &ids(&["n2", "n1"])).expect("delete");
    let changes = plugin_changes(&info); // in key order
    assert_eq!(
        changes,
        [
            ("ebs".to_string(), ChangeKind::Delete),
            ("nfs".to_string(), ChangeKind::Delete)
        ]
    );
    let snap = store.snapshot();
    assert_eq!(snap.view().csi_plugins().count(), 0);
    assert_eq!(snap.view().nodes().count(), 0);
    assert_eq!(plugins_index(&store), 10);
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), 10);
    // Gone for good.
    up_allocs(&store, 11, vec![stopped("c1", "n1")]);
    up(&store, 12, node("n3"));
    assert_eq!(store.snapshot().view().csi_plugins().count(), 0);
    assert_eq!(plugins_index(&store), 10);
}

#[test]
fn delete_nodes_without_plugin_entries_leaves_plugins_alone() {
    let store = cluster();
    up(
        &store,
        5,
        node("n3").node(Fp::node("ebs", "a3").unhealthy()),
    );
    let ebs = must_plugin(&store, "ebs");
    store.delete_nodes(6, &ids(&["n3"])).expect("delete");
    assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &ebs));
    assert_eq!(plugins_index(&store), 3);
    assert_eq!(table_index(&store, names::NODES), 6);
}

#[test]
fn delete_nodes_skips_plugins_that_no_longer_exist() {
    let store = StateStore::new();
    up(&store, 1, node("n1").node(Fp::node("ebs", "a1")));
    // The alloc stops: the plugin is emptied and deleted, the node row still lists it.
    up_allocs(&store, 2, vec![stopped("a1", "n1")]);
    assert!(plugin(&store, "ebs").is_none());
    assert!(
        store
            .snapshot()
            .view()
            .node("n1")
            .expect("node")
            .csi_node_plugins
            .contains_key("ebs")
    );
    store.delete_nodes(3, &ids(&["n1"])).expect("delete");
    assert!(plugin(&store, "ebs").is_none());
    assert_eq!(plugins_index(&store), 2);
}

// ---------------------------------------------------------------------------------
// Status, drain, eligibility.
// ---------------------------------------------------------------------------------

#[test]
fn update_node_status_drain_eligibility_touch_only_the_node() {
    let store = cluster();
    let ebs = must_plugin(&store, "ebs");
    let nfs = must_plugin(&store, "nfs");
    let plugins = plugins_index(&store);
    let instances = table_index(&store, names::CSI_PLUGIN_INSTANCES);
    let allocs = table_index(&store, names::ALLOCS);
    let before = store.snapshot().view().node("n1").expect("node");

    let info = store
        .update_node_status(10, "n1", NodeStatus::Down)
        .expect("status");
    assert!(
        info.changes().all(|c| c.table() == Table::Nodes),
        "{info:?}"
    );
    store.update_node_drain(11, "n1", true).expect("drain");
    ok(
        &store,
        12,
        Command::UpdateNodeEligibility {
            id: id("n1"),
            eligible: false,
        },
    );

    let n = store.snapshot().view().node("n1").expect("node");
    assert_eq!(n.status, NodeStatus::Down);
    assert!(n.drain);
    assert!(!n.eligible);
    assert_eq!((n.create_index, n.modify_index), (2, 12));
    assert_eq!(n.csi_controller_plugins, before.csi_controller_plugins);
    assert_eq!(n.csi_node_plugins, before.csi_node_plugins);
    assert_eq!(n.name, before.name);
    assert_eq!(table_index(&store, names::NODES), 12);

    // A down node keeps its plugin instances (the next fingerprint decides).
    assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &ebs));
    assert!(Arc::ptr_eq(&must_plugin(&store, "nfs"), &nfs));
    assert_eq!(plugins_index(&store), plugins);
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), instances);
    assert_eq!(table_index(&store, names::ALLOCS), allocs);
    // The other node is untouched.
    assert_eq!(
        store
            .snapshot()
            .view()
            .node("n2")
            .expect("node")
            .modify_index,
        3
    );
}

#[test]
fn update_node_to_the_same_value_moves_only_last_applied() {
    let store = cluster();
    let before = canonical(&store);
    store
        .update_node_status(10, "n1", NodeStatus::Ready)
        .expect("status");
    store.update_node_drain(11, "n1", false).expect("drain");
    store
        .update_node_eligibility(12, "n1", true)
        .expect("eligibility");
    assert_eq!(last_applied(&store), 12);
    let n = store.snapshot().view().node("n1").expect("node");
    assert_eq!(n.modify_index, 2);
    assert_eq!(table_index(&store, names::NODES), 3);
    // Only last_applied differs in the canonical encoding.
    assert_ne!(canonical(&store), before);
    let replay = cluster();
    replay
        .update_node_status(12, "n2", NodeStatus::Ready)
        .expect("no-op");
    assert_eq!(canonical(&store), canonical(&replay));
}

#[test]
fn update_node_unknown_node_is_an_error() {
    let store = cluster();
    for cmd in [
        Command::UpdateNodeStatus {
            id: id("nX"),
            status: NodeStatus::Down,
        },
        Command::UpdateNodeDrain {
            id: id("nX"),
            drain: true,
        },
        Command::UpdateNodeEligibility {
            id: id("nX"),
            eligible: false,
        },
        Command::UpdateNodeStatus {
            id: id("n"),
            status: NodeStatus::Down,
        },
    ] {
        let err = assert_rejected(&store, 10, &cmd);
        assert!(matches!(err, StateError::NodeNotFound(_)), "{err:?}");
        let StateError::NodeNotFound(named) = &err else {
            unreachable!()
        };
        let wanted = match &cmd {
            Command::UpdateNodeStatus { id, .. }
            | Command::UpdateNodeDrain { id, .. }
            | Command::UpdateNodeEligibility { id, .. } => id.clone(),
            _ => unreachable!(),
        };
        assert_eq!(*named, wanted);
    }
    assert!(store.update_node_drain(10, "nX", true).is_err());
}

// ---------------------------------------------------------------------------------
// Upsert allocs.
// ---------------------------------------------------------------------------------

#[test]
fn upsert_allocs_server_terminal_removes_exactly_its_instances() {
    let store = StateStore::new();
    up_allocs(
        &store,
        1,
        vec![
            running("c1", "n1"),
            running("a-old", "n1"),
            running("a-new", "n1"),
            running("a2", "n2"),
        ],
    );
    up(
        &store,
        2,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a-old")),
    );
    up(&store, 3, node("n2").node(Fp::node("ebs", "a2")));
    // A newer alloc now runs the node plugin on n1.
    up(
        &store,
        4,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a-new")),
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(&*p.nodes.get("n1").expect("entry").alloc_id, "a-new");

    // The old alloc stops: the newer instance stays, nothing changes.
    let info = store
        .upsert_allocs(5, vec![stopped("a-old", "n1")])
        .expect("upsert");
    assert!(plugin_changes(&info).is_empty());
    assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &p));
    assert_eq!(plugins_index(&store), 4);
    assert_eq!(table_index(&store, names::ALLOCS), 5);

    // The controller alloc stops: exactly the controller entry on n1 goes.
    let info = store
        .upsert_allocs(6, vec![stopped("c1", "n1")])
        .expect("upsert");
    assert_eq!(
        plugin_changes(&info),
        [("ebs".to_string(), ChangeKind::Update)]
    );
    let p = must_plugin(&store, "ebs");
    assert!(controller_nodes(&p).is_empty());
    assert_eq!(node_nodes(&p), ["n1", "n2"]);
    assert_eq!(counts(&p), (0, 0, 2, 2));
    assert_eq!((p.create_index, p.modify_index), (2, 6));
    assert_eq!(plugins_index(&store), 6);
    let a = store.snapshot().view().alloc("c1").expect("alloc");
    assert_eq!(a.desired_status, DesiredStatus::Stop);
    assert_eq!((a.create_index, a.modify_index), (1, 6));
}

#[test]
fn upsert_allocs_evict_is_server_terminal() {
    let store = cluster();
    up_allocs(
        &store,
        10,
        vec![alloc(
            "a2",
            "n2",
            DesiredStatus::Evict,
            ClientStatus::Running,
        )],
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(node_nodes(&p), ["n1"]);
    assert_eq!(p.modify_index, 10);
    assert_eq!(plugins_index(&store), 10);
}

#[test]
fn upsert_allocs_server_terminal_removes_only_on_its_own_node() {
    let store = StateStore::new();
    // Two nodes report an instance under the same alloc id; the alloc is on n1.
    up(&store, 1, node("n1").node(Fp::node("ebs", "x")));
    up(&store, 2, node("n2").node(Fp::node("ebs", "x")));
    up_allocs(&store, 3, vec![stopped("x", "n1")]);
    let p = must_plugin(&store, "ebs");
    assert_eq!(node_nodes(&p), ["n2"]);
    assert_eq!(p.modify_index, 3);
}

#[test]
fn upsert_allocs_alloc_ids_match_exactly() {
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1")
            .node(Fp::node("ebs", "a1"))
            .node(Fp::node("nfs", "a10"))
            .ctrl(Fp::controller("efs", "a")),
    );
    up_allocs(&store, 2, vec![stopped("a1", "n1")]);
    assert!(plugin(&store, "ebs").is_none());
    assert_eq!(counts(&must_plugin(&store, "nfs")), (0, 0, 1, 1));
    assert_eq!(counts(&must_plugin(&store, "efs")), (1, 1, 0, 0));
    assert_eq!(must_plugin(&store, "nfs").modify_index, 1);
}

#[test]
fn upsert_allocs_several_server_terminal_in_one_write_all_take_effect() {
    // The controller alloc and the node alloc of a plugin stop in one write.
    let store = StateStore::new();
    up(
        &store,
        1,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1")),
    );
    up(&store, 2, node("n2").node(Fp::node("nfs", "f2")));
    let info = store
        .upsert_allocs(3, vec![stopped("c1", "n1"), stopped("a1", "n1")])
        .expect("upsert");
    assert_eq!(
        plugin_changes(&info),
        [("ebs".to_string(), ChangeKind::Delete)]
    );
    assert!(plugin(&store, "ebs").is_none());
    assert_eq!(plugins_index(&store), 3);
    assert_eq!(must_plugin(&store, "nfs").modify_index, 2);

    // Node allocs of one plugin on several nodes, plus another plugin, in one write.
    let store = cluster();
    let info = store
        .upsert_allocs(
            10,
            vec![
                running("other", "n3"),
                stopped("a2", "n2"),
                stopped("f1", "n1"),
                alloc("a1", "n1", DesiredStatus::Evict, ClientStatus::Lost),
            ],
        )
        .expect("upsert");
    let changes = plugin_changes(&info); // in key order
    assert_eq!(
        changes,
        [
            ("ebs".to_string(), ChangeKind::Update),
            ("nfs".to_string(), ChangeKind::Delete)
        ]
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!(controller_nodes(&p), ["n1"]);
    assert!(node_nodes(&p).is_empty());
    assert_eq!(p.modify_index, 10);
    // Then the controller: the plugin goes.
    up_allocs(&store, 11, vec![stopped("c1", "n1")]);
    assert!(plugin(&store, "ebs").is_none());
    assert_eq!(plugins_index(&store), 11);
}

#[test]
fn upsert_allocs_client_terminal_alone_removes_nothing() {
    let store = cluster();
    let ebs = must_plugin(&store, "ebs");
    let nfs = must_plugin(&store, "nfs");
    for (i, status) in [
        ClientStatus::Complete,
        ClientStatus::Failed,
        ClientStatus::Lost,
    ]
    .into_iter()
    .enumerate()
    {
        let index = 10 + i as u64;
        let info = store
            .upsert_allocs(
                index,
                vec![
                    alloc("c1", "n1", DesiredStatus::Run, status),
                    alloc("a1", "n1", DesiredStatus::Run, status),
                    alloc("f1", "n1", DesiredStatus::Run, status),
                    alloc("a2", "n2", DesiredStatus::Run, status),
                ],
            )
            .expect("upsert");
        assert!(plugin_changes(&info).is_empty(), "{status:?}");
        assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &ebs), "{status:?}");
        assert!(Arc::ptr_eq(&must_plugin(&store, "nfs"), &nfs), "{status:?}");
        assert_eq!(plugins_index(&store), 3, "{status:?}");
        assert_eq!(table_index(&store, names::ALLOCS), index);
        let a = store.snapshot().view().alloc("a1").expect("alloc");
        assert_eq!(a.client_status, status);
    }
}

#[test]
fn upsert_allocs_plugin_change_bumps_csi_plugins_table_index() {
    // The Nomad bug: plugin changes made by alloc writes did not move the plugins
    // table index, so blocking plugin queries never woke.
    let store = cluster();
    assert_eq!(plugins_index(&store), 3);
    up_allocs(&store, 10, vec![stopped("a2", "n2")]);
    assert_eq!(plugins_index(&store), 10);
    assert_eq!(table_index(&store, names::ALLOCS), 10);
    assert_eq!(table_index(&store, names::CSI_PLUGIN_INSTANCES), 10);
    assert_eq!(store.snapshot().view().latest_index(), 10);
    assert_eq!(must_plugin(&store, "ebs").modify_index, 10);
}

#[test]
fn upsert_allocs_changing_no_plugin_leaves_csi_plugins_table_index_alone() {
    let store = cluster();
    let before = table_indexes(&store);
    // Running allocs, a stopped alloc that runs no plugin, a new alloc on a new node.
    up_allocs(
        &store,
        10,
        vec![
            running("a1", "n1"),
            stopped("web-1", "n1"),
            alloc("web-2", "n9", DesiredStatus::Evict, ClientStatus::Complete),
        ],
    );
    // A stopped alloc whose instance is already gone.
    up_allocs(&store, 11, vec![stopped("a2", "n2")]);
    up_allocs(&store, 12, vec![stopped("a2", "n2")]);
    let after = table_indexes(&store);
    for ((name, was), (_, now)) in before.iter().zip(&after) {
        match *name {
            names::ALLOCS => assert_eq!(*now, 12),
            names::CSI_PLUGINS | names::CSI_PLUGIN_INSTANCES => assert_eq!(*now, 11, "{name}"),
            _ => assert_eq!(now, was, "{name}"),
        }
    }
}

#[test]
fn upsert_allocs_keeps_create_index_and_sets_modify_index() {
    let store = StateStore::new();
    let mut a = running("a1", "n1");
    a.create_index = 77;
    a.modify_index = 88;
    up_allocs(&store, 4, vec![a]);
    let got = store.snapshot().view().alloc("a1").expect("alloc");
    assert_eq!((got.create_index, got.modify_index), (4, 4));
    up_allocs(
        &store,
        9,
        vec![alloc(
            "a1",
            "n1",
            DesiredStatus::Run,
            ClientStatus::Complete,
        )],
    );
    let got = store.snapshot().view().alloc("a1").expect("alloc");
    assert_eq!((got.create_index, got.modify_index), (4, 9));
    assert_eq!(got.client_status, ClientStatus::Complete);
    let by_node: Vec<Id> = store
        .snapshot()
        .view()
        .allocs_by_node("n1")
        .map(|a| a.id.clone())
        .collect();
    assert_eq!(by_node, ids(&["a1"]));
    let by_job = store
        .snapshot()
        .view()
        .allocs_by_job("default", "plugin-job")
        .count();
    assert_eq!(by_job, 1);
}

#[test]
fn upsert_allocs_empty_list_changes_nothing_but_last_applied() {
    let store = cluster();
    let indexes = table_indexes(&store);
    store.upsert_allocs(10, vec![]).expect("empty upsert");
    assert_eq!(table_indexes(&store), indexes);
    assert_eq!(last_applied(&store), 10);
}

#[test]
fn upsert_allocs_batch_with_a_bad_alloc_is_atomic() {
    let store = cluster();
    let err = assert_rejected(
        &store,
        10,
        &Command::UpsertAllocs {
            allocs: vec![stopped("c1", "n1"), stopped("a2", "n2"), running("", "n1")],
        },
    );
    assert!(
        matches!(
            err,
            StateError::MissingField {
                what: "allocation",
                field: "id"
            }
        ),
        "{err:?}"
    );
    assert_eq!(counts(&must_plugin(&store, "ebs")), (1, 1, 2, 2));
}

// ---------------------------------------------------------------------------------
// Delete allocs.
// ---------------------------------------------------------------------------------

#[test]
fn delete_allocs_missing_ids_skipped() {
    let store = cluster();
    store
        .delete_allocs(10, &ids(&["a1", "missing", "a2", "a"]))
        .expect("delete");
    let snap = store.snapshot();
    let left: Vec<Id> = snap.view().allocs().map(|a| a.id.clone()).collect();
    assert_eq!(left, ids(&["c1", "f1"]));
    assert_eq!(table_index(&store, names::ALLOCS), 10);

    // Only missing ids: accepted, changes nothing but last applied.
    let indexes = table_indexes(&store);
    store.delete_allocs(11, &ids(&["missing"])).expect("delete");
    store
        .delete_allocs(12, &[] as &[&str])
        .expect("empty delete");
    assert_eq!(table_indexes(&store), indexes);
    assert_eq!(last_applied(&store), 12);
}

#[test]
fn delete_allocs_leaves_plugins_unchanged() {
    let store = cluster();
    let ebs = must_plugin(&store, "ebs");
    let nfs = must_plugin(&store, "nfs");
    let info = store
        .delete_allocs(10, &ids(&["c1", "a1", "f1", "a2"]))
        .expect("delete");
    assert!(
        info.changes().all(|c| c.table() == Table::Allocs),
        "{info:?}"
    );
    assert!(Arc::ptr_eq(&must_plugin(&store, "ebs"), &ebs));
    assert!(Arc::ptr_eq(&must_plugin(&store, "nfs"), &nfs));
    assert_eq!(plugins_index(&store), 3);
    // The entries still name the allocs.
    assert_eq!(&*ebs.controllers.get("n1").expect("entry").alloc_id, "c1");
    // A later stop of a collected alloc still finds its instance.
    up_allocs(&store, 11, vec![stopped("a2", "n2")]);
    assert_eq!(node_nodes(&must_plugin(&store, "ebs")), ["n1"]);
}

#[test]
fn delete_allocs_then_plugin_denormalize_skips_the_missing_alloc() {
    let store = cluster();
    store.delete_allocs(10, &ids(&["a1"])).expect("delete");
    let snap = store.snapshot();
    let v = snap.view();
    let p = v.csi_plugin("ebs").expect("plugin");
    let d = v.denormalize_csi_plugin(&p);
    let mut got: Vec<&str> = d.allocations.iter().map(|s| &*s.id).collect();
    got.sort_unstable();
    assert_eq!(got, ["a2", "c1"]);
    assert_eq!(counts(&d), (1, 1, 2, 2));
    assert!(v.csi_plugin("ebs").expect("plugin").allocations.is_empty());
}

// ---------------------------------------------------------------------------------
// Stale indexes and failed writes.
// ---------------------------------------------------------------------------------

#[test]
fn stale_index_is_rejected_and_changes_nothing() {
    let fresh = StateStore::new();
    let err = assert_rejected(
        &fresh,
        0,
        &Command::UpsertNode {
            node: node("n1").build(),
        },
    );
    assert!(matches!(err, StateError::StaleIndex { .. }), "{err:?}");

    let store = cluster();
    let n4 = Command::UpsertNode {
        node: node("n4").node(Fp::node("ebs", "a4")).build(),
    };
    for index in [3, 2, 1, 0] {
        let err = assert_rejected(&store, index, &n4);
        assert_eq!(
            err,
            StateError::StaleIndex {
                index,
                last_applied: 3
            }
        );
    }
    let err = assert_rejected(&store, 3, &Command::DeleteNodes { ids: ids(&["n1"]) });
    assert!(matches!(err, StateError::StaleIndex { .. }), "{err:?}");
    assert!(store.upsert_allocs(2, vec![stopped("c1", "n1")]).is_err());
    assert_eq!(counts(&must_plugin(&store, "ebs")), (1, 1, 2, 2));
    assert!(store.snapshot().view().node("n4").is_none());
    // The next greater index is accepted.
    store.apply(4, &n4).expect("fresh index");
    assert_eq!(counts(&must_plugin(&store, "ebs")), (1, 1, 3, 3));
}

#[test]
fn failing_write_fingerprint_mismatch_leaves_store_unchanged() {
    let store = cluster();
    // Filed under another plugin's id, after valid fingerprints that would change things.
    let bad = node("n1")
        .node(Fp::node("ebs", "a1-new"))
        .ctrl(Fp::controller("ebs", "c1").unhealthy())
        .node_under("zzz", Fp::node("nfs", "f1"))
        .build();
    let err = assert_rejected(&store, 10, &Command::UpsertNode { node: bad });
    assert_eq!(
        err,
        StateError::FingerprintMismatch {
            node_id: id("n1"),
            key: id("zzz"),
            plugin_id: id("nfs"),
        }
    );
    // Filed under an empty key, in the controller map, by a new node.
    let bad = node("n5")
        .ctrl_under("", Fp::controller("ebs", "c5"))
        .build();
    let err = assert_rejected(&store, 10, &Command::UpsertNode { node: bad });
    assert!(
        matches!(err, StateError::FingerprintMismatch { .. }),
        "{err:?}"
    );
    // A fingerprint with an empty plugin id under a real key.
    let bad = node("n5").node_under("ebs", Fp::node("", "a5")).build();
    let err = assert_rejected(&store, 10, &Command::UpsertNode { node: bad });
    assert!(
        matches!(err, StateError::FingerprintMismatch { .. }),
        "{err:?}"
    );
    assert!(store.snapshot().view().node("n5").is_none());
}

#[test]
fn failing_write_missing_node_id_leaves_store_unchanged() {
    let store = cluster();
    let bad = node("").node(Fp::node("ebs", "a9")).build();
    let err = assert_rejected(&store, 10, &Command::UpsertNode { node: bad });
    assert_eq!(
        err,
        StateError::MissingField {
            what: "node",
            field: "id"
        }
    );
    let err = assert_rejected(&store, 10, &Command::DeleteNodes { ids: ids(&[""]) });
    assert_eq!(err, StateError::NodeNotFound(id("")));
}

#[test]
fn failing_write_node_not_found_leaves_store_unchanged() {
    let store = cluster();
    for cmd in [
        Command::DeleteNodes {
            ids: ids(&["n2", "n1", "ghost"]),
        },
        Command::UpdateNodeStatus {
            id: id("ghost"),
            status: NodeStatus::Disconnected,
        },
        Command::UpdateNodeDrain {
            id: id("ghost"),
            drain: true,
        },
        Command::UpdateNodeEligibility {
            id: id("ghost"),
            eligible: false,
        },
    ] {
        let err = assert_rejected(&store, 10, &cmd);
        assert_eq!(err, StateError::NodeNotFound(id("ghost")), "{}", cmd.kind());
    }
    // The store still accepts index 10.
    store.delete_nodes(10, &ids(&["n2"])).expect("delete");
}

// ---------------------------------------------------------------------------------
// Determinism and a reference model.
// ---------------------------------------------------------------------------------

const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n10", "n11"];
const PLUGINS: [&str; 3] = ["ebs", "ebs2", "nfs"];
const ALLOCS: [&str; 8] = ["a1", "a2", "a3", "a4", "a5", "a10", "a11", ""];

fn pick<'a>(rng: &mut fastrand::Rng, from: &[&'a str]) -> &'a str {
    from[rng.usize(..from.len())]
}

/// Generates one command. With `corners`, also monolith fingerprints filed in one map
/// only and controller/node fingerprints of one plugin on one node that disagree on
/// provider version (see the `identical_refingerprint` tests of `state_plugins.rs`).
fn gen_command(rng: &mut fastrand::Rng, corners: bool, sent: &mut BTreeMap<Id, Node>) -> Command {
    let some_node = |rng: &mut fastrand::Rng| id(pick(rng, &NODES));
    match rng.u32(..100) {
        // A heartbeat: a node re-sends its last report, taken later.
        0..=14 if !sent.is_empty() => {
            let which = rng.usize(..sent.len());
            let mut n = sent.values().nth(which).expect("in range").clone();
            let later = rng.u64(1000..2000);
            for info in n
                .csi_controller_plugins
                .values_mut()
                .chain(n.csi_node_plugins.values_mut())
            {
                Arc::make_mut(info).update_time = later;
            }
            Command::UpsertNode { node: n }
        }
        0..=44 => {
            let mut n = node(pick(rng, &NODES));
            for p in PLUGINS {
                let version = pick(rng, &["1.0", "1.1"]);
                let provider = pick(rng, &[PROVIDER, "ebs.csi.example"]);
                let requires = rng.bool();
                let fp = |f: Fp, rng: &mut fastrand::Rng| {
                    f.provider(provider, version)
                        .requires_controller(requires)
                        .healthy(rng.u32(..100) < 75)
                        .at(rng.u64(..1000))
                };
                match rng.u32(..10) {
                    0..=2 => {}
                    3 => n = n.ctrl(fp(Fp::controller(p, pick(rng, &ALLOCS)), rng)),
                    4..=5 => n = n.node(fp(Fp::node(p, pick(rng, &ALLOCS)), rng)),
                    6..=7 => {
                        let c = fp(Fp::controller(p, pick(rng, &ALLOCS)), rng);
                        let mut d = fp(Fp::node(p, pick(rng, &ALLOCS)), rng);
                        if corners && rng.bool() {
                            d = d.provider(provider, "2.0");
                        }
                        n = n.ctrl(c).node(d);
                    }
                    8 => {
                        let m = fp(Fp::both(p, pick(rng, &ALLOCS)), rng);
                        n = n.ctrl(m.clone()).node(m);
                    }
                    _ => {
                        let m = fp(Fp::both(p, pick(rng, &ALLOCS)), rng);
                        n = match (corners, rng.bool()) {
                            (false, _) => n.ctrl(m.clone()).node(m),
                            (true, true) => n.ctrl(m),
                            (true, false) => n.node(m),
                        };
                    }
                }
            }
            let n = n.build();
            sent.insert(n.id.clone(), n.clone());
            Command::UpsertNode { node: n }
        }
        45..=64 => {
            let count = rng.usize(1..=3);
            let allocs = (0..count)
                .map(|_| {
                    let desired = match rng.u32(..10) {
                        0..=3 => DesiredStatus::Stop,
                        4 => DesiredStatus::Evict,
                        _ => DesiredStatus::Run,
                    };
                    let client = match rng.u32(..5) {
                        0 => ClientStatus::Pending,
                        1 => ClientStatus::Running,
                        2 => ClientStatus::Complete,
                        3 => ClientStatus::Failed,
                        _ => ClientStatus::Lost,
                    };
                    let alloc_id = pick(rng, &ALLOCS[..7]);
                    alloc(alloc_id, pick(rng, &NODES), desired, client)
                })
                .collect();
            Command::UpsertAllocs { allocs }
        }
        65..=72 => Command::DeleteAllocs {
            ids: (0..rng.usize(..3))
                .map(|_| id(pick(rng, &ALLOCS)))
                .collect(),
        },
        73..=79 => Command::DeleteNodes {
            ids: (0..rng.usize(1..3)).map(|_| some_node(rng)).collect(),
        },
        80..=83 => Command::UpdateNodeStatus {
            id: some_node(rng),
            status: [
                NodeStatus::Ready,
                NodeStatus::Down,
                NodeStatus::Disconnected,
            ][rng.usize(..3)],
        },
        84..=87 => Command::UpdateNodeDrain {
            id: some_node(rng),
            drain: rng.bool(),
        },
        88..=91 => Command::UpdateNodeEligibility {
            id: some_node(rng),
            eligible: rng.bool(),
        },
        92..=94 => {
            let fp = Fp::node("ebs", "a1");
            Command::UpsertNode {
                node: node(pick(rng, &NODES)).node_under("nfs", fp).build(),
            }
        }
        95..=96 => Command::UpsertNode {
            node: node("").node(Fp::node("ebs", "a1")).build(),
        },
        _ => Command::DeleteNodes { ids: vec![] },
    }
}

/// A generated sequence of (index, command): indexes mostly increase by 1, sometimes
/// jump, sometimes repeat or go back (stale).
fn gen_sequence(seed: u64, len: usize, corners: bool) -> Vec<(u64, Command)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut index: u64 = 0;
    let mut sent = BTreeMap::new();
    (0..len)
        .map(|_| {
            index = match rng.u32(..20) {
                0 => index.saturating_sub(1),
                1 => index + 5,
                _ => index + 1,
            };
            (index, gen_command(&mut rng, corners, &mut sent))
        })
        .collect()
}

#[test]
fn determinism_two_stores_fed_same_commands_have_identical_bytes() {
    for seed in [1, 2, 3] {
        let seq = gen_sequence(seed, 200, true);
        let a = StateStore::new();
        let b = StateStore::new();
        // A third store fed the commands after a round trip through their encoding, as a
        // log replay would.
        let c = StateStore::new();
        let mut accepted = 0;
        for (step, (index, cmd)) in seq.iter().enumerate() {
            let ra = a.apply(*index, cmd).map(|_| ());
            let rb = b.apply(*index, cmd).map(|_| ());
            let wire = postcard::to_allocvec(cmd).expect("encode");
            let decoded: Command = postcard::from_bytes(&wire).expect("decode");
            assert_eq!(&decoded, cmd);
            let rc = c.apply(*index, &decoded).map(|_| ());
            assert_eq!(ra, rb, "seed {seed} step {step}");
            assert_eq!(ra, rc, "seed {seed} step {step}");
            accepted += usize::from(ra.is_ok());
            if step % 50 == 0 {
                assert_eq!(canonical(&a), canonical(&b), "seed {seed} step {step}");
            }
        }
        assert!(
            accepted > 100,
            "seed {seed}: only {accepted} writes accepted"
        );
        assert_eq!(canonical(&a), canonical(&b), "seed {seed}");
        assert_eq!(canonical(&a), canonical(&c), "seed {seed}");
        assert_eq!(table_indexes(&a), table_indexes(&b));
        assert!(a.snapshot().view().csi_plugins().count() > 0, "seed {seed}");
    }
}

/// The plugin rules of docs/rules.md §4, written as plainly as possible.
#[derive(Debug, Clone, Default)]
struct Model {
    last_applied: u64,
    nodes: BTreeSet<Id>,
    allocs: BTreeMap<Id, Allocation>,
    plugins: BTreeMap<Id, MPlugin>,
    plugins_index: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct MPlugin {
    provider: Id,
    version: Id,
    controller_required: bool,
    controllers: BTreeMap<Id, CsiInfo>,
    nodes: BTreeMap<Id, CsiInfo>,
    create_index: u64,
    modify_index: u64,
}

impl MPlugin {
    #[allow(clippy::type_complexity)]
    fn content(
        &self,
    ) -> (
        &Id,
        &Id,
        bool,
        &BTreeMap<Id, CsiInfo>,
        &BTreeMap<Id, CsiInfo>,
    ) {
        (
            &self.provider,
            &self.version,
            self.controller_required,
            &self.controllers,
            &self.nodes,
        )
    }

    fn is_empty(&self) -> bool {
        self.controllers.is_empty() && self.nodes.is_empty()
    }
}

impl Model {
    /// Applies a command; `Err` names the expected error (and changes nothing).
    fn apply(&mut self, index: u64, cmd: &Command) -> Result<(), String> {
        if index <= self.last_applied {
            return Err("stale".into());
        }
        let mut work = self.plugins.clone();
        match cmd {
            Command::UpsertNode { node } => self.upsert_node(&mut work, node)?,
            Command::DeleteNodes { ids } => {
                if ids.is_empty() {
                    return Err("empty".into());
                }
                if let Some(missing) = ids.iter().find(|i| !self.nodes.contains(*i)) {
                    return Err(format!("node-not-found:{missing}"));
                }
                for n in ids {
                    self.nodes.remove(n);
                    for p in work.values_mut() {
                        p.controllers.remove(n);
                        p.nodes.remove(n);
                    }
                }
            }
            Command::UpdateNodeStatus { id, .. }
            | Command::UpdateNodeDrain { id, .. }
            | Command::UpdateNodeEligibility { id, .. } => {
                if !self.nodes.contains(id) {
                    return Err(format!("node-not-found:{id}"));
                }
            }
            Command::UpsertAllocs { allocs } => {
                if allocs.iter().any(|a| a.id.is_empty()) {
                    return Err("missing-field".into());
                }
                for a in allocs {
                    self.allocs.insert(a.id.clone(), a.clone());
                    if !a.server_terminal() {
                        continue;
                    }
                    for p in work.values_mut() {
                        if p.controllers
                            .get(&a.node_id)
                            .is_some_and(|i| i.alloc_id == a.id)
                        {
                            p.controllers.remove(&a.node_id);
                        }
                        if p.nodes.get(&a.node_id).is_some_and(|i| i.alloc_id == a.id) {
                            p.nodes.remove(&a.node_id);
                        }
                    }
                }
            }
            Command::DeleteAllocs { ids } => {
                for i in ids {
                    self.allocs.remove(i);
                }
            }
            other => panic!("not generated: {other:?}"),
        }
        work.retain(|_, p| !p.is_empty());
        // Indexes: a plugin whose content changed takes this index; so does the table
        // when any plugin was inserted, changed or deleted.
        let mut table_changed = false;
        for (pid, p) in work.iter_mut() {
            match self.plugins.get(pid) {
                Some(old) if old.content() == p.content() => {
                    p.modify_index = old.modify_index;
                }
                Some(old) => {
                    p.create_index = old.create_index;
                    p.modify_index = index;
                    table_changed = true;
                }
                None => {
                    p.create_index = index;
                    p.modify_index = index;
                    table_changed = true;
                }
            }
        }
        table_changed |= self.plugins.keys().any(|k| !work.contains_key(k));
        if table_changed {
            self.plugins_index = index;
        }
        self.plugins = work;
        self.last_applied = index;
        Ok(())
    }

    fn upsert_node(&mut self, work: &mut BTreeMap<Id, MPlugin>, node: &Node) -> Result<(), String> {
        if node.id.is_empty() {
            return Err("missing-field".into());
        }
        let maps = [&node.csi_controller_plugins, &node.csi_node_plugins];
        if maps
            .iter()
            .any(|m| m.iter().any(|(k, i)| k.is_empty() || *k != i.plugin_id))
        {
            return Err("mismatch".into());
        }
        // Halves match maps: an entry has its map's half; a half it carries has an
        // entry in the map of that kind.
        let (ctrl, nodes) = (&node.csi_controller_plugins, &node.csi_node_plugins);
        let halves_ok = ctrl
            .iter()
            .all(|(k, i)| i.is_controller() && (!i.is_node() || nodes.contains_key(k)))
            && nodes
                .iter()
                .all(|(k, i)| i.is_node() && (!i.is_controller() || ctrl.contains_key(k)));
        if !halves_ok {
            return Err("halves".into());
        }
        self.nodes.insert(node.id.clone());
        let n = &node.id;
        let filed = maps
            .iter()
            .zip([true, false])
            .flat_map(|(m, is_ctrl)| m.values().map(move |i| (is_ctrl, i)));
        for (is_ctrl, info) in filed {
            if !work.contains_key(&info.plugin_id) {
                if !info.healthy {
                    continue;
                }
                let fresh = MPlugin {
                    provider: Id::new(),
                    version: Id::new(),
                    controller_required: false,
                    controllers: BTreeMap::new(),
                    nodes: BTreeMap::new(),
                    create_index: 0,
                    modify_index: 0,
                };
                work.insert(info.plugin_id.clone(), fresh);
            }
            let p = work.get_mut(&info.plugin_id).expect("present");
            p.provider.clone_from(&info.provider);
            p.version.clone_from(&info.provider_version);
            if is_ctrl {
                p.controller_required = info.requires_controller_plugin;
                if p.controllers.contains_key(n) || info.healthy {
                    p.controllers.insert(n.clone(), (**info).clone());
                }
            } else if p.nodes.contains_key(n) || info.healthy {
                p.nodes.insert(n.clone(), (**info).clone());
            }
        }
        for (pid, p) in work.iter_mut() {
            if !node.csi_controller_plugins.contains_key(pid) {
                p.controllers.remove(n);
            }
            if !node.csi_node_plugins.contains_key(pid) {
                p.nodes.remove(n);
            }
        }
        Ok(())
    }
}

fn error_tag(e: &StateError) -> String {
    match e {
        StateError::StaleIndex { .. } => "stale".into(),
        StateError::EmptyRequest { .. } => "empty".into(),
        StateError::MissingField { .. } => "missing-field".into(),
        StateError::FingerprintMismatch { .. } => "mismatch".into(),
        StateError::FingerprintHalves { .. } => "halves".into(),
        StateError::NodeNotFound(n) => format!("node-not-found:{n}"),
        other => format!("unexpected: {other:?}"),
    }
}

/// Compares the store with the model: plugins (content, counts, indexes), the plugins
/// table index, nodes, allocs, and the derived instance table.
fn check_against_model(store: &StateStore, model: &Model, at: &str) {
    let snap = store.snapshot();
    let v = snap.view();
    let stored: Vec<Id> = v.csi_plugins().map(|p| p.id.clone()).collect();
    let expected: Vec<Id> = model.plugins.keys().cloned().collect();
    assert_eq!(stored, expected, "{at}: plugin ids");
    let mut instances = BTreeSet::new();
    for (pid, m) in &model.plugins {
        let p = v.csi_plugin(pid).expect("listed");
        let entries = |map: &schedstate::model::PluginInstances| -> BTreeMap<Id, CsiInfo> {
            map.iter()
                .map(|(k, i)| (k.clone(), (**i).clone()))
                .collect()
        };
        assert_eq!(p.provider, m.provider, "{at}: {pid} provider");
        assert_eq!(p.version, m.version, "{at}: {pid} version");
        assert_eq!(
            p.controller_required, m.controller_required,
            "{at}: {pid} required"
        );
        assert_eq!(
            entries(&p.controllers),
            m.controllers,
            "{at}: {pid} controllers"
        );
        assert_eq!(entries(&p.nodes), m.nodes, "{at}: {pid} nodes");
        let healthy = |map: &BTreeMap<Id, CsiInfo>| map.values().filter(|i| i.healthy).count();
        assert_eq!(
            counts(&p),
            (
                healthy(&m.controllers),
                m.controllers.len(),
                healthy(&m.nodes),
                m.nodes.len()
            ),
            "{at}: {pid} counts"
        );
        assert!(!p.is_empty(), "{at}: {pid} stored empty");
        assert!(p.allocations.is_empty(), "{at}: {pid} stored with stubs");
        assert_eq!(
            (p.create_index, p.modify_index),
            (m.create_index, m.modify_index),
            "{at}: {pid} indexes"
        );
        for (n, i) in &m.controllers {
            instances.insert((
                n.clone(),
                InstanceKind::Controller,
                pid.clone(),
                i.alloc_id.clone(),
            ));
        }
        for (n, i) in &m.nodes {
            instances.insert((
                n.clone(),
                InstanceKind::Node,
                pid.clone(),
                i.alloc_id.clone(),
            ));
        }
    }
    assert_eq!(
        v.table_index(Table::CsiPlugins),
        model.plugins_index,
        "{at}: table index"
    );
    assert_eq!(v.last_applied(), model.last_applied, "{at}: last applied");
    let nodes: BTreeSet<Id> = v.nodes().map(|n| n.id.clone()).collect();
    assert_eq!(nodes, model.nodes, "{at}: nodes");
    let allocs: Vec<Id> = v.allocs().map(|a| a.id.clone()).collect();
    let expected: Vec<Id> = model.allocs.keys().cloned().collect();
    assert_eq!(allocs, expected, "{at}: allocs");
    // The derived instance rows mirror the plugin maps exactly.
    let rows: BTreeSet<_> = snap
        .view()
        .raw()
        .iter(store.reader().tables().instances)
        .map(|r| {
            (
                r.node_id.clone(),
                r.kind,
                r.plugin_id.clone(),
                r.alloc_id.clone(),
            )
        })
        .collect();
    assert_eq!(rows, instances, "{at}: instance rows");
}

fn run_model(seed: u64, len: usize, corners: bool) {
    let store = StateStore::new();
    let mut model = Model::default();
    for (step, (index, cmd)) in gen_sequence(seed, len, corners).into_iter().enumerate() {
        let at = format!("seed {seed} step {step} index {index} {}", cmd.kind());
        let before = canonical(&store);
        let expected = model.clone().apply(index, &cmd);
        let got = store.apply(index, &cmd);
        match (&expected, &got) {
            (Ok(()), Ok(_)) => {
                model.apply(index, &cmd).expect("same as the dry run");
            }
            (Err(want), Err(e)) => {
                assert_eq!(&error_tag(e), want, "{at}");
                assert_eq!(
                    canonical(&store),
                    before,
                    "{at}: failed write changed the store"
                );
            }
            _ => panic!("{at}: model {expected:?}, store {got:?}\n{cmd:?}"),
        }
        check_against_model(&store, &model, &at);
    }
}

#[test]
fn model_plugin_rules_match_a_reference_model() {
    for seed in 10..14 {
        run_model(seed, 300, false);
    }
}

#[test]
fn model_plugin_rules_match_a_reference_model_with_corner_fingerprints() {
    for seed in 20..24 {
        run_model(seed, 300, true);
    }
}

// ---------------------------------------------------------------------------------
// Upsert nodes (the batch form).
// ---------------------------------------------------------------------------------

fn batch_nodes() -> Vec<Node> {
    vec![
        node("n3").node(Fp::node("ebs", "a3")).build(),
        node("n4")
            .ctrl(Fp::controller("ebs", "c4"))
            .node(Fp::node("nfs", "f4"))
            .build(),
        // n1 drops its nfs instance; n2 reports ebs unhealthy.
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1"))
            .build(),
        node("n2").node(Fp::node("ebs", "a2").unhealthy()).build(),
    ]
}

#[test]
fn upsert_nodes_ends_where_the_same_upserts_one_by_one_end() {
    let batched = cluster();
    ok(
        &batched,
        4,
        Command::UpsertNodes {
            nodes: batch_nodes(),
        },
    );
    let single = cluster();
    for (i, n) in batch_nodes().into_iter().enumerate() {
        ok(&single, 4 + i as u64, Command::UpsertNode { node: n });
    }
    let view = |s: &StateStore| {
        let snap = s.snapshot();
        let v = snap.view();
        let mut out = Vec::new();
        for p in v.csi_plugins() {
            out.push((
                p.id.to_string(),
                counts(&p),
                controller_nodes(&p),
                node_nodes(&p),
            ));
        }
        let nodes: Vec<String> = v.nodes().map(|n| n.id.to_string()).collect();
        (out, nodes)
    };
    assert_eq!(view(&batched), view(&single));
    assert_invariants(&batched);
    // One write: every changed row carries the batch's index.
    let ebs = must_plugin(&batched, "ebs");
    assert_eq!(ebs.modify_index, 4);
    assert_eq!(counts(&ebs), (2, 2, 2, 3)); // n1, n3 healthy; n2 unhealthy
    assert_eq!(last_applied(&batched), 4);
}

#[test]
fn upsert_nodes_writes_each_plugin_once() {
    let store = cluster();
    let info = store
        .apply(
            4,
            &Command::UpsertNodes {
                nodes: batch_nodes(),
            },
        )
        .expect("batch");
    let plugin_rows = info
        .changes()
        .filter(|c| c.table() == Table::CsiPlugins)
        .count();
    // ebs and nfs changed; each appears once in the change set.
    assert_eq!(plugin_rows, 2);
}

#[test]
fn upsert_nodes_is_atomic_and_refuses_an_empty_batch() {
    let store = cluster();
    let mut nodes = batch_nodes();
    nodes.push(node("").build()); // the last one is bad: nothing of the batch lands
    let err = assert_rejected(&store, 4, &Command::UpsertNodes { nodes });
    assert!(
        matches!(err, StateError::MissingField { what: "node", .. }),
        "{err:?}"
    );
    assert!(store.snapshot().view().node("n3").is_none());

    let err = assert_rejected(&store, 4, &Command::UpsertNodes { nodes: Vec::new() });
    assert!(matches!(err, StateError::EmptyRequest { .. }), "{err:?}");
}

#[test]
fn upsert_nodes_with_the_same_node_twice_keeps_the_last_report() {
    let store = cluster();
    ok(
        &store,
        4,
        Command::UpsertNodes {
            nodes: vec![
                node("n5").node(Fp::node("ebs", "a5")).build(),
                node("n5").node(Fp::node("nfs", "f5")).build(),
            ],
        },
    );
    let n5 = store.snapshot().view().node("n5").expect("n5");
    assert_eq!(n5.create_index, 4);
    assert!(n5.csi_node_plugins.contains_key("nfs"));
    assert!(!node_nodes(&must_plugin(&store, "ebs")).contains(&"n5".to_string()));
    assert!(node_nodes(&must_plugin(&store, "nfs")).contains(&"n5".to_string()));
    assert_invariants(&store);
}

#[test]
fn owned_and_borrowed_commands_give_the_same_state() {
    let commands = || {
        vec![
            Command::UpsertAllocs {
                allocs: vec![
                    running("c1", "n1"),
                    running("a1", "n1"),
                    running("a2", "n2"),
                ],
            },
            Command::UpsertNodes {
                nodes: vec![
                    node("n1")
                        .ctrl(Fp::controller("ebs", "c1"))
                        .node(Fp::node("ebs", "a1"))
                        .build(),
                    node("n2").node(Fp::node("ebs", "a2")).build(),
                ],
            },
            Command::UpsertNode {
                node: node("n2").node(Fp::node("ebs", "a2").unhealthy()).build(),
            },
            Command::UpsertAllocs {
                allocs: vec![stopped("a1", "n1")],
            },
            Command::DeleteNodes { ids: ids(&["n2"]) },
        ]
    };
    let borrowed = StateStore::new();
    let owned = StateStore::new();
    for (i, cmd) in commands().into_iter().enumerate() {
        let index = i as u64 + 1;
        borrowed.apply(index, &cmd).expect("borrowed");
        owned.apply_owned(index, cmd).expect("owned");
    }
    assert_eq!(canonical(&borrowed), canonical(&owned));
    assert_invariants(&owned);
    // A refused owned command changes nothing either.
    let before = canonical(&owned);
    let bad = Command::UpsertAllocs {
        allocs: vec![running("x", "n1"), running("", "n1")],
    };
    assert!(owned.apply_owned(10, bad).is_err());
    assert_eq!(canonical(&owned), before);
}

// ---------------------------------------------------------------------------------
// Stop allocations.
// ---------------------------------------------------------------------------------

#[test]
fn stopping_an_alloc_is_an_upsert_of_desired_stop_and_takes_its_instances() {
    let store = cluster();
    store
        .apply(
            4,
            &Command::StopAllocs {
                ids: vec!["f1".into()],
            },
        )
        .unwrap();
    let snap = store.snapshot();
    let v = snap.view();
    let f1 = v.alloc("f1").unwrap();
    assert_eq!(f1.desired_status, schedstate::model::DesiredStatus::Stop);
    assert_eq!((f1.create_index, f1.modify_index), (1, 4));
    // nfs had only f1's instance: the plugin is gone with it; ebs is untouched.
    assert!(v.csi_plugin("nfs").is_none());
    assert_eq!(v.csi_plugin("ebs").unwrap().modify_index, 3);
    // Stopped again: no row changes, not even the alloc's modify index.
    store
        .apply(
            5,
            &Command::StopAllocs {
                ids: vec!["f1".into()],
            },
        )
        .unwrap();
    assert_eq!(store.snapshot().view().alloc("f1").unwrap().modify_index, 4);
    assert_eq!(store.snapshot().view().table_index(Table::Allocs), 4);
}

#[test]
fn stopping_an_unknown_alloc_stops_none() {
    let store = cluster();
    let before = canonical(&store);
    let err = store
        .apply(
            4,
            &Command::StopAllocs {
                ids: vec!["a1".into(), "ghost".into()],
            },
        )
        .unwrap_err();
    assert_eq!(err, StateError::AllocNotFound("ghost".into()));
    assert_eq!(canonical(&store), before);
    let err = store
        .apply(4, &Command::StopAllocs { ids: vec![] })
        .unwrap_err();
    assert_eq!(err.kind(), "EmptyRequest");
}

/// Rows decoded from one command share their repeated ids (`shared_ids.rs`): the
/// values are the same, only fewer heap copies stay behind.
#[test]
fn allocations_share_repeated_ids_with_each_other_their_node_and_their_old_row() {
    let store = StateStore::new();
    up(&store, 1, node("n1"));
    // Every field of every alloc is its own heap copy, as when decoded.
    up_allocs(
        &store,
        2,
        vec![
            running("x1", "n1"),
            running("x2", "n1"),
            running("y1", "n2"),
        ],
    );
    let view = store.snapshot();
    let view = view.view();
    let row = |id: &str| view.alloc(id).unwrap();
    let (x1, x2, y1) = (row("x1"), row("x2"), row("y1"));
    let node_id = view.node("n1").unwrap().id.clone();
    for other in [&x2, &y1] {
        assert!(Id::ptr_eq(&x1.namespace, &other.namespace));
        assert!(Id::ptr_eq(&x1.job_id, &other.job_id));
        assert!(Id::ptr_eq(&x1.task_group, &other.task_group));
    }
    assert!(Id::ptr_eq(&x1.node_id, &node_id), "the node row's copy");
    assert!(Id::ptr_eq(&x2.node_id, &node_id));
    assert_eq!((&*y1.node_id, &*y1.job_id), ("n2", "plugin-job"));

    // One alloc per command: an update shares with the row it replaces, a new alloc
    // its node id with the node's row.
    up_allocs(&store, 3, vec![stopped("y1", "n2")]);
    up_allocs(&store, 4, vec![running("z1", "n1")]);
    let view = store.snapshot();
    let view = view.view();
    let (y1_new, z1) = (view.alloc("y1").unwrap(), view.alloc("z1").unwrap());
    assert_eq!((y1_new.create_index, y1_new.modify_index), (2, 3));
    assert!(Id::ptr_eq(&y1_new.id, &y1.id));
    assert!(Id::ptr_eq(&y1_new.namespace, &y1.namespace));
    assert!(Id::ptr_eq(&y1_new.job_id, &y1.job_id));
    assert!(Id::ptr_eq(&y1_new.node_id, &y1.node_id));
    assert!(Id::ptr_eq(&z1.node_id, &node_id));
    assert_eq!(
        *y1_new,
        Allocation {
            create_index: 2,
            modify_index: 3,
            ..stopped("y1", "n2")
        }
    );
    assert_invariants(&store);
}

/// Across commands: a job id points at a stored allocation's of the same job, a new
/// node's id at an allocation's placed on it before it registered, a fingerprint's
/// allocation id at the allocation's row. The values are the same, fewer heap copies
/// stay behind.
#[test]
fn later_commands_share_job_node_and_alloc_ids_with_stored_rows() {
    let store = StateStore::new();
    up_allocs(&store, 1, vec![running("x1", "n9")]);
    // Several allocs in one command, then one alone: both ways of sharing.
    up_allocs(&store, 2, vec![running("x2", "n8"), running("x3", "n8")]);
    up_allocs(&store, 3, vec![running("x4", "n7")]);
    up(&store, 4, node("n9").node(Fp::node("ebs", "x1")));
    let snap = store.snapshot();
    let view = snap.view();
    let row = |id: &str| view.alloc(id).unwrap();
    let x1 = row("x1");
    for other in ["x2", "x3", "x4"] {
        assert!(Id::ptr_eq(&x1.job_id, &row(other).job_id), "{other}");
    }
    let n9 = view.node("n9").unwrap();
    assert!(Id::ptr_eq(&n9.id, &x1.node_id), "the alloc's copy");
    let fingerprint = n9.csi_node_plugins.get("ebs").unwrap();
    assert!(Id::ptr_eq(&fingerprint.alloc_id, &x1.id));
    assert_eq!(&*fingerprint.alloc_id, "x1");
    assert_invariants(&store);
}

/// A node written again with the same fingerprints keeps the stored copies (its
/// plugins hold them too); a changed or newly timed one is taken as sent.
#[test]
fn a_rewritten_node_keeps_its_identical_fingerprints() {
    let store = StateStore::new();
    let first = node("n1")
        .node(Fp::node("ebs", "a1").at(10))
        .node(Fp::node("nfs", "f1").at(10));
    up(&store, 1, first);
    let stored = store.snapshot().view().node("n1").unwrap();
    // Every part a fresh copy, as when decoded; nfs reported again later.
    let again = node("n1")
        .node(Fp::node("ebs", "a1").at(10))
        .node(Fp::node("nfs", "f1").at(11));
    up(&store, 2, again);
    let snap = store.snapshot();
    let view = snap.view();
    let row = view.node("n1").unwrap();
    assert_eq!(row.modify_index, 2);
    assert!(Id::ptr_eq(&row.id, &stored.id));
    let ebs = row.csi_node_plugins.get("ebs").unwrap();
    assert!(Arc::ptr_eq(
        ebs,
        stored.csi_node_plugins.get("ebs").unwrap()
    ));
    let plugin = view.csi_plugin("ebs").unwrap();
    assert!(Arc::ptr_eq(ebs, plugin.nodes.get("n1").unwrap()));
    let nfs = row.csi_node_plugins.get("nfs").unwrap();
    assert_eq!(nfs.update_time, 11);
    assert!(!Arc::ptr_eq(
        nfs,
        stored.csi_node_plugins.get("nfs").unwrap()
    ));
    assert_invariants(&store);
}
