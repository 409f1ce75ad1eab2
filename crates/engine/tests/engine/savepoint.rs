//! Savepoints: a transaction holding several operations, each kept or undone alone.
//! Checked against a model: the same writes without the undone ones, in a
//! transaction of their own, must give the same rows, index entries and change set.

use std::collections::BTreeMap;

use proptest::prelude::*;
use schedstate_engine::{ChangeKind, Key, View, WriteTxn};

use crate::support::{Fixture, item, key};

/// One operation: put (id, group, n) or delete id.
#[derive(Clone, Debug)]
enum Op {
    Put(&'static str, &'static str, u64),
    Del(&'static str),
}

fn run(f: &Fixture, txn: &mut WriteTxn, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put(id, g, n) => {
                txn.insert(f.items, item(id, g, *n)).unwrap();
            }
            Op::Del(id) => {
                txn.delete(f.items, &key(id)).unwrap();
            }
        }
    }
}

type Summary = (
    Vec<(String, String, u64)>,
    Vec<String>,
    Vec<(String, ChangeKind)>,
);

/// The groups the tests file rows under: the scenarios' and the property test's.
const GROUPS: [&str; 5] = ["a", "b", "g0", "g1", "g2"];

/// Rows and the `group` index's view, as `view` sees them.
fn contents(f: &Fixture, view: &View<'_>) -> (Vec<(String, String, u64)>, Vec<String>) {
    let rows = view
        .iter(f.items)
        .map(|r| (r.id.clone(), r.group.clone(), r.n))
        .collect();
    let by_group = GROUPS
        .iter()
        .flat_map(|g| {
            view.index_eq(f.by_group, &Key::str(g))
                .map(|r| format!("{g}:{}", r.id))
                .collect::<Vec<_>>()
        })
        .collect();
    (rows, by_group)
}

/// Rows, the `group` index's view, and the commit's change set.
fn summary(f: &Fixture, changes: &[schedstate_engine::Change]) -> Summary {
    let snap = f.db.snapshot();
    let (rows, by_group) = contents(f, &snap.view());
    let changes = changes
        .iter()
        .map(|c| (format!("{:?}", c.key()), c.kind()))
        .collect();
    (rows, by_group, changes)
}

#[test]
fn each_group_of_writes_is_kept_or_undone_alone_and_the_change_set_follows() {
    // Before the batch, rows x and y exist.
    let base = |f: &Fixture| {
        f.put("x", "a", 1);
        f.put("y", "b", 1);
    };
    let groups: Vec<(Vec<Op>, bool)> = vec![
        (vec![Op::Put("p", "a", 1), Op::Put("x", "b", 2)], true),
        // Undone: touches a key a kept group wrote before and after it.
        (
            vec![Op::Put("p", "b", 9), Op::Del("y"), Op::Put("q", "a", 9)],
            false,
        ),
        (vec![Op::Put("p", "a", 3), Op::Del("x")], true),
        (vec![Op::Put("x", "a", 7)], false),
        (vec![Op::Put("r", "b", 4), Op::Put("r", "b", 5)], true),
        (vec![Op::Del("r")], false),
    ];

    let batched = Fixture::new();
    base(&batched);
    let mut txn = batched
        .db
        .begin_write(batched.db.last_applied() + 1)
        .unwrap();
    for (ops, keep) in &groups {
        let mark = txn.savepoint();
        run(&batched, &mut txn, ops);
        if !keep {
            txn.rollback_to(mark);
        }
    }
    let info = txn.commit().unwrap();

    let model = Fixture::new();
    base(&model);
    let mut txn = model.db.begin_write(model.db.last_applied() + 1).unwrap();
    for (ops, keep) in &groups {
        if *keep {
            run(&model, &mut txn, ops);
        }
    }
    let expected = txn.commit().unwrap();

    assert_eq!(
        summary(&batched, &info.changes),
        summary(&model, &expected.changes)
    );
    batched.db.snapshot().view().verify_indexes().unwrap();
    let kinds: BTreeMap<String, ChangeKind> =
        summary(&batched, &info.changes).2.into_iter().collect();
    assert!(
        !kinds.keys().any(|k| k.contains('q')),
        "an undone insert is in the change set"
    );
}

#[test]
fn nested_savepoints_roll_back_to_the_one_named() {
    let f = Fixture::new();
    let mut txn = f.db.begin_write(1).unwrap();
    txn.insert(f.items, item("a", "a", 1)).unwrap();
    let outer = txn.savepoint();
    txn.insert(f.items, item("b", "a", 1)).unwrap();
    let _inner = txn.savepoint();
    txn.insert(f.items, item("c", "a", 1)).unwrap();
    txn.rollback_to(outer);
    let info = txn.commit().unwrap();
    assert_eq!(info.changes.len(), 1);
    let snap = f.db.snapshot();
    assert!(snap.view().get(f.items, &key("a")).is_some());
    assert!(snap.view().get(f.items, &key("b")).is_none());
    assert!(snap.view().get(f.items, &key("c")).is_none());
}

fn arb_op() -> impl Strategy<Value = (bool, u16, u8, u64)> {
    // (delete?, id, group, n); ids from a range wide enough to split leaves.
    (prop::bool::weighted(0.3), 0u16..400, 0u8..3, 0u64..4)
}

fn apply_op(f: &Fixture, txn: &mut WriteTxn, (del, id, group, n): (bool, u16, u8, u64)) {
    let id = format!("i{id:03}");
    if del {
        txn.delete(f.items, &key(&id)).unwrap();
    } else {
        let group = format!("g{group}");
        txn.insert(f.items, item(&id, &group, n)).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Groups of writes, each kept or rolled back, on top of committed rows: after
    /// every group the transaction reads what a transaction holding only the kept
    /// groups reads, through the table and its index; the commits give the same rows,
    /// index entries and change set.
    #[test]
    fn rolled_back_groups_leave_what_the_kept_ones_alone_give(
        base in prop::collection::vec(arb_op(), 0..300),
        groups in prop::collection::vec(
            (prop::collection::vec(arb_op(), 1..40), prop::bool::weighted(0.6)),
            1..16,
        ),
    ) {
        let batched = Fixture::new();
        let model = Fixture::new();
        for f in [&batched, &model] {
            f.write(|txn| {
                for op in &base {
                    apply_op(f, txn, *op);
                }
            });
        }
        let mut txn = batched.db.begin_write(batched.db.last_applied() + 1).unwrap();
        let mut expected = model.db.begin_write(model.db.last_applied() + 1).unwrap();
        for (ops, keep) in &groups {
            let mark = txn.savepoint();
            for op in ops {
                apply_op(&batched, &mut txn, *op);
            }
            if *keep {
                for op in ops {
                    apply_op(&model, &mut expected, *op);
                }
            } else {
                txn.rollback_to(mark);
            }
            prop_assert_eq!(contents(&batched, &txn.view()), contents(&model, &expected.view()));
        }
        let info = txn.commit().unwrap();
        let expected = expected.commit().unwrap();
        prop_assert_eq!(
            summary(&batched, &info.changes),
            summary(&model, &expected.changes)
        );
        batched.db.snapshot().view().verify_indexes().unwrap();
    }
}
