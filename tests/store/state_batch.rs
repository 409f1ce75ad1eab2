//! `StateStore::apply_batch`: several commands as one write, each kept or undone on
//! its own.

use std::sync::Arc;

use schedstate::model::{CsiInfo, CsiNodeInfo, Node, NodeStatus};
use schedstate::state::{Command, StateStore, Table};

fn node_with_plugin(id: &str, plugin: &str) -> Node {
    let mut n = Node::new(id, format!("host-{id}"));
    n.add_csi_plugin(CsiInfo::node_instance(
        plugin,
        format!("alloc-{id}"),
        CsiNodeInfo::default(),
    ));
    n
}

/// A node whose fingerprint is filed under a key naming another plugin: refused.
fn mismatched(id: &str) -> Node {
    let mut n = Node::new(id, "bad");
    let f = CsiInfo::node_instance("real", format!("alloc-{id}"), CsiNodeInfo::default());
    n.csi_node_plugins.insert("other".into(), Arc::new(f));
    n
}

#[test]
fn a_refused_command_in_a_batch_is_undone_whole_and_the_others_commit_at_one_index() {
    let store = StateStore::new();
    store.upsert_node(1, node_with_plugin("n0", "ebs")).unwrap();
    let outcome = store
        .apply_batch(
            5,
            [
                &Command::UpsertNode {
                    node: node_with_plugin("n1", "ebs"),
                },
                // Its first node is valid, its second refused: the first must not stay.
                &Command::UpsertNodes {
                    nodes: vec![node_with_plugin("half", "efs"), mismatched("n2")],
                },
                &Command::UpdateNodeStatus {
                    id: "n1".into(),
                    status: NodeStatus::Down,
                },
                &Command::UpdateNodeStatus {
                    id: "ghost".into(),
                    status: NodeStatus::Down,
                },
            ],
        )
        .unwrap();
    let kinds: Vec<Option<&str>> = outcome
        .results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind()))
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            Some("FingerprintMismatch"),
            None,
            Some("NodeNotFound")
        ]
    );
    assert_eq!(outcome.commit.as_ref().unwrap().index(), 5);

    let snap = store.snapshot();
    let view = snap.view();
    view.check_invariants().unwrap();
    assert!(
        view.node("half").is_none(),
        "a refused command left a write behind"
    );
    assert!(
        view.csi_plugin("efs").is_none(),
        "a refused command left a plugin behind"
    );
    // The third command saw the first: n1 exists and is down, written at index 5.
    let n1 = view.node("n1").unwrap();
    assert_eq!(
        (n1.status, n1.create_index, n1.modify_index),
        (NodeStatus::Down, 5, 5)
    );
    assert_eq!(view.csi_plugin("ebs").unwrap().nodes.len(), 2);
    assert_eq!(view.last_applied(), 5);
    assert_eq!(view.table_index(Table::Nodes), 5);
}

#[test]
fn a_batch_of_refusals_writes_nothing_and_a_stale_batch_is_refused_whole() {
    let store = StateStore::new();
    store.upsert_node(3, Node::new("n", "h")).unwrap();
    let before = store.snapshot().canonical_bytes().unwrap();
    let outcome = store
        .apply_batch(
            4,
            [&Command::UpdateNodeStatus {
                id: "ghost".into(),
                status: NodeStatus::Down,
            }],
        )
        .unwrap();
    assert!(outcome.commit.is_none());
    assert_eq!(store.snapshot().canonical_bytes().unwrap(), before);
    assert_eq!(store.snapshot().view().last_applied(), 3);

    let err = store
        .apply_batch(
            3,
            [&Command::UpsertNode {
                node: Node::new("m", "h"),
            }],
        )
        .unwrap_err();
    assert_eq!(err.kind(), "StaleIndex");
    assert_eq!(store.snapshot().canonical_bytes().unwrap(), before);
}

#[test]
fn a_batch_ends_in_the_state_its_accepted_commands_make_one_by_one_but_for_indexes() {
    // The same commands applied as a batch and one at a time (each at its own index)
    // accept and refuse the same ones and leave the same rows, indexes aside.
    let commands = [
        Command::UpsertNode {
            node: node_with_plugin("a", "ebs"),
        },
        Command::UpsertNode {
            node: node_with_plugin("b", "ebs"),
        },
        Command::UpsertNode {
            node: mismatched("c"),
        },
        Command::DeleteNodes {
            ids: vec!["a".into()],
        },
        Command::UpdateNodeDrain {
            id: "a".into(),
            drain: true,
        },
        Command::UpdateNodeEligibility {
            id: "b".into(),
            eligible: false,
        },
    ];
    let batched = StateStore::new();
    let outcome = batched.apply_batch(10, commands.iter()).unwrap();
    let single = StateStore::new();
    let mut singles = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        singles.push(single.apply(10 + i as u64, c).err().map(|e| e.kind()));
    }
    let batch_kinds: Vec<_> = outcome
        .results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind()))
        .collect();
    assert_eq!(batch_kinds, singles);
    let (b, s) = (batched.snapshot(), single.snapshot());
    let names = |v: &schedstate::state::StateView<'_>| {
        v.nodes()
            .map(|n| (n.id.to_string(), n.eligible, n.drain))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&b.view()), names(&s.view()));
    assert_eq!(
        b.view().csi_plugin("ebs").map(|p| p.nodes.len()),
        s.view().csi_plugin("ebs").map(|p| p.nodes.len())
    );
    b.view().check_invariants().unwrap();
}
