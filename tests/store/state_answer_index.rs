//! The index of an answer (docs/rules.md §5): a row's modify index, a missing row's
//! delete index, a denormalized plugin's or volume's largest index over the rows it was
//! built from. The property every blocking client relies on: whenever an answer
//! changes, its index moves past every index it answered before. The model test
//! (`state_model.rs`) checks it after every random command with [`Answers`]; the tests
//! here pin the cases by hand.

use crate::support::running;
use crate::support::volumes::*;
use schedstate::Table;
use schedstate::model::{ClientStatus, id};
use schedstate::state::{StateStore, StateView};

/// Every single-row answer of a state over the given ids: (what was asked, its index,
/// the answer as JSON).
pub struct Answers(Vec<(String, u64, String)>);

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("encode")
}

/// A row's answer: its modify index, or the table's delete index when it is missing.
fn row<T: serde::Serialize>(
    v: &StateView<'_>,
    table: Table,
    found: Option<T>,
    modify: impl Fn(&T) -> u64,
) -> (u64, String) {
    match &found {
        Some(r) => (modify(r), json(&found)),
        None => (v.delete_index(table), json(&found)),
    }
}

impl Answers {
    pub fn of(
        store: &StateStore,
        nodes: &[&str],
        allocs: &[&str],
        plugins: &[&str],
        volumes: &[(&str, &str)],
    ) -> Answers {
        let snap = store.snapshot();
        let v = snap.view();
        let mut out = Vec::new();
        for n in nodes {
            let (i, a) = row(&v, Table::Nodes, v.node(n), |r| r.modify_index);
            out.push((format!("node {n}"), i, a));
        }
        for a in allocs {
            let (i, s) = row(&v, Table::Allocs, v.alloc(a), |r| r.modify_index);
            out.push((format!("alloc {a}"), i, s));
        }
        for p in plugins {
            let (i, found) = v.csi_plugin_denormalized_indexed(p);
            out.push((format!("plugin {p}"), i, json(&found)));
        }
        for (ns, vol) in volumes {
            let (i, found) = v.csi_volume_denormalized_indexed(ns, vol);
            out.push((format!("volume {ns}/{vol}"), i, json(&found)));
        }
        Answers(out)
    }

    /// Panics unless every answer that changed from `before` to `self` moved its index
    /// up, and no index went down.
    #[track_caller]
    pub fn moved_from(&self, before: &Answers, what: &str) {
        for ((name, old_index, old), (_, new_index, new)) in before.0.iter().zip(&self.0) {
            assert!(
                new_index >= old_index,
                "{name}: index went back {old_index} → {new_index} after {what}"
            );
            if old != new {
                assert!(
                    new_index > old_index,
                    "{name} changed after {what} but its index stayed {old_index}:\n{old}\n{new}"
                );
            }
        }
    }
}

fn volume_answer(h: &H, vol: &str) -> u64 {
    h.store
        .snapshot()
        .view()
        .csi_volume_denormalized_indexed(NS, vol)
        .0
}

#[test]
fn a_volume_answers_with_its_plugin_and_claiming_allocations() {
    let mut h = cluster_with(&["vol-1"]);
    let claimed = h.claim(
        "vol-1",
        claim("a1", Mode::Write, Access::MultiNodeMultiWriter),
    );
    assert_eq!(volume_answer(&h, "vol-1"), claimed);
    // An allocation it does not look at moves the allocs table, not the answer.
    h.upsert_allocs(vec![running("a4", "n2")]);
    assert_eq!(volume_answer(&h, "vol-1"), claimed);
    // Its claiming allocation finishes: the answer (a repaired past claim) and its
    // index move.
    let mut done = running("a1", "n1");
    done.client_status = ClientStatus::Complete;
    let finished = h.upsert_allocs(vec![done]);
    let v = h.vol("vol-1");
    assert!(v.past_claims.contains_key(&id("a1")), "{v:?}");
    assert_eq!(volume_answer(&h, "vol-1"), finished);
    // It is deleted: the allocs table's delete index.
    let deleted = h.delete_allocs(&["a1"]);
    assert_eq!(volume_answer(&h, "vol-1"), deleted);
    // Its plugin changes (n2's node instance goes unhealthy): the plugin's index.
    let unhealthy = h.upsert_node(client("n2", &[node_fp(PLUGIN, "plug-n2", false)], &[]));
    assert_eq!(volume_answer(&h, "vol-1"), unhealthy);
    // A volume never registered: the volumes' delete index (none yet).
    let snap = h.store.snapshot();
    assert_eq!(
        snap.view().csi_volume_denormalized_indexed(NS, "nope"),
        (0, None)
    );
}

#[test]
fn a_plugin_answers_with_its_allocations_and_a_missing_one_with_the_delete() {
    let mut h = cluster();
    let answer = |h: &H| {
        h.store
            .snapshot()
            .view()
            .csi_plugin_denormalized_indexed(PLUGIN)
            .0
    };
    let before = answer(&h);
    // plug-n1 is one of its allocations: writing it moves the answer.
    let written = h.upsert_allocs(vec![running("plug-n1", "n1")]);
    assert_eq!(answer(&h), written);
    assert!(written > before);
    // a5 is not: the answer stays.
    h.upsert_allocs(vec![running("a5", "n2")]);
    assert_eq!(answer(&h), written);
    let deleted = h.delete_allocs(&["plug-n1"]);
    assert_eq!(answer(&h), deleted);
    // The plugin goes away with its last instance: the plugins' delete index.
    h.delete_nodes(&["n1"]);
    let gone = h.delete_nodes(&["n2"]);
    let snap = h.store.snapshot();
    let view = snap.view();
    assert_eq!(view.csi_plugin_denormalized_indexed(PLUGIN), (gone, None));
    assert_eq!(view.delete_index(Table::CsiPlugins), gone);
}
