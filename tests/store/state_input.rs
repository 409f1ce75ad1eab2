//! The input rules (docs/rules.md, "Input rules"): sizes and characters a command may
//! carry at all. A command that breaks one is refused with `InvalidInput` naming the
//! field, and nothing changes — not a row, not an index.

use crate::support::{Fp, alloc, canonical, node};
use schedstate::model::{ClientStatus, CsiVolume, DesiredStatus, Node};
use schedstate::state::{
    Command, MAX_ENTRIES, MAX_ID_BYTES, MAX_ITEMS, MAX_TEXT_BYTES, StateError, StateStore,
};

fn refused(store: &StateStore, index: u64, command: Command, field: &str) {
    let before = canonical(store);
    let last = store.snapshot().view().last_applied();
    let err = store.apply(index, &command).expect_err("refused");
    match &err {
        StateError::InvalidInput { field: f, .. } => assert!(f.contains(field), "{err}"),
        other => panic!("not an input error: {other}"),
    }
    assert_eq!(err.kind(), "InvalidInput");
    assert_eq!(
        command.check_input().unwrap_err(),
        err,
        "the check before proposing says the same"
    );
    assert_eq!(canonical(store), before);
    assert_eq!(store.snapshot().view().last_applied(), last);
    // The message shows a bounded part of the value, never all of it.
    assert!(err.to_string().len() < 400, "{}", err.to_string().len());
}

#[test]
fn ids_and_strings_have_length_caps() {
    let store = StateStore::new();
    store.upsert_node(1, node("n1").build()).unwrap();
    let long_id = "n".repeat(15 << 20);
    refused(
        &store,
        2,
        Command::UpsertNode {
            node: Node::new(long_id.as_str(), "host"),
        },
        "node id",
    );
    let just_long_enough = "n".repeat(MAX_ID_BYTES);
    store
        .upsert_node(2, Node::new(just_long_enough.as_str(), "host"))
        .unwrap();
    refused(
        &store,
        3,
        Command::UpsertNode {
            node: Node::new("n3", "h".repeat(MAX_TEXT_BYTES + 1)),
        },
        "node name",
    );
    let mut v = CsiVolume::new("default", "v1", "ebs");
    v.secrets
        .insert("key".into(), "s".repeat(MAX_TEXT_BYTES + 1));
    refused(
        &store,
        3,
        Command::RegisterCsiVolumes { volumes: vec![v] },
        "volume secrets",
    );
}

#[test]
fn control_characters_anywhere_and_whitespace_in_ids_are_refused() {
    let store = StateStore::new();
    let with_bad_plugin = node("n1").node(Fp::node("eb\u{7}s", "a1")).build();
    refused(
        &store,
        1,
        Command::UpsertNode {
            node: with_bad_plugin,
        },
        "csi_node_plugins",
    );
    refused(
        &store,
        1,
        Command::UpsertNode {
            node: Node::new("node 1", "host"),
        },
        "node id",
    );
    refused(
        &store,
        1,
        Command::UpsertNode {
            node: Node::new("n1", "host\r\nX-Injected: 1"),
        },
        "node name",
    );
    let mut a = alloc("a1", "n1", DesiredStatus::Run, ClientStatus::Running);
    a.task_group = "web\u{0}".into();
    refused(
        &store,
        1,
        Command::UpsertAllocs { allocs: vec![a] },
        "task_group",
    );
    // Any printable text is fine, whatever its script; spaces in names too.
    store
        .upsert_node(1, Node::new("nœud-α", "hôte numéro 1 — 東京"))
        .unwrap();
}

#[test]
fn lists_have_item_caps() {
    let store = StateStore::new();
    let ids: Vec<_> = (0..=MAX_ITEMS).map(|i| format!("a{i}").into()).collect();
    refused(&store, 1, Command::DeleteAllocs { ids }, "ids");
    let mut v = CsiVolume::new("default", "v1", "ebs");
    for i in 0..=MAX_ENTRIES {
        v.parameters.insert(format!("k{i}"), "v".into());
    }
    refused(
        &store,
        1,
        Command::RegisterCsiVolumes { volumes: vec![v] },
        "volume parameters",
    );
}
