//! `WriteTxn::insert_many` against a loop of `WriteTxn::insert`: from the same
//! committed state, the same rows must give the same replaced rows, the same table
//! and index contents, the same change set, consistent indexes, and (after a
//! savepoint) the same state when rolled back. Batches repeat keys, put stored rows
//! back over themselves, move rows between groups, change their multi-index keys, and
//! follow earlier writes of their transaction.

use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use schedstate_engine::{ChangeKind, Db, Error, Index, Key, Schema, Table, View, WriteTxn};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    id: String,
    group: String,
    tags: Vec<String>,
    n: u64,
}

struct Fixture {
    db: Db,
    rows: Table<Row>,
    by_group: Index<Row>,
    by_tag: Index<Row>,
    /// A table with a unique index: its batches are inserted one by one.
    named: Table<Row>,
    by_name: Index<Row>,
}

const IDS: [&str; 10] = ["a", "a1", "ab", "b", "b1", "c", "c0", "d", "e", "ee"];
const GROUPS: [&str; 4] = ["g", "g1", "g10", "h"];
const TAGS: [&str; 3] = ["t1", "t2", "x"];

fn fixture() -> Fixture {
    let mut schema = Schema::new();
    let rows = schema
        .table("rows", |r: &Row| Key::str(&r.id))
        .expect("table");
    let by_group = schema
        .index(rows, "group", false, |r: &Row| Some(Key::str(&r.group)))
        .expect("index");
    let by_tag = schema
        .multi_index(rows, "tag", false, |r: &Row| {
            r.tags.iter().map(|t| Key::str(t)).collect()
        })
        .expect("index");
    let named = schema
        .table("named", |r: &Row| Key::str(&r.id))
        .expect("table");
    let by_name = schema
        .index(named, "name", true, |r: &Row| Some(Key::str(&r.group)))
        .expect("index");
    Fixture {
        db: Db::new(schema),
        rows,
        by_group,
        by_tag,
        named,
        by_name,
    }
}

fn row() -> impl Strategy<Value = Row> {
    (
        select(&IDS[..]),
        select(&GROUPS[..]),
        vec(select(&TAGS[..]), 0..3),
        0..3u64,
    )
        .prop_map(|(id, group, tags, n)| Row {
            id: id.to_string(),
            group: group.to_string(),
            tags: tags.into_iter().map(String::from).collect(),
            n,
        })
}

/// A row of the batch: a new one, or (by position) one of the stored rows, put back
/// as the very same `Arc`.
#[derive(Debug, Clone)]
enum Pick {
    New(Row),
    Stored(usize),
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![4 => row().prop_map(Pick::New), 1 => any::<usize>().prop_map(Pick::Stored)]
}

/// Everything observable of both tables: rows, and each index's entries per key.
fn contents(f: &Fixture, view: &View<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for (table, index, name) in [(f.rows, f.by_group, "group"), (f.named, f.by_name, "name")] {
        out.extend(view.iter(table).map(|r| format!("{r:?}")));
        for g in GROUPS {
            let ids: Vec<String> = view
                .index_eq(index, &Key::str(g))
                .map(|r| r.id.clone())
                .collect();
            out.push(format!("{name} {g}: {ids:?}"));
        }
    }
    for t in TAGS {
        let ids: Vec<String> = view
            .index_eq(f.by_tag, &Key::str(t))
            .map(|r| r.id.clone())
            .collect();
        out.push(format!("tag {t}: {ids:?}"));
    }
    view.verify_indexes().expect("indexes consistent");
    out
}

type Outcome = (
    Vec<Option<Row>>,
    Result<(), String>,
    Vec<String>,
    Vec<(String, String, ChangeKind, Option<Row>, Option<Row>)>,
);

/// Applies `batch` to `table` in a transaction over `f`'s committed state, with
/// `insert_many` or with a loop of `insert`, and commits.
fn apply(f: &Fixture, table: Table<Row>, prior: &[Row], batch: &[Arc<Row>], many: bool) -> Outcome {
    let mut txn = f.db.begin_write(f.db.last_applied() + 1).expect("begin");
    // Earlier writes of the same transaction, whose change records the batch's
    // must continue.
    for r in prior {
        let _ = txn.insert(table, Arc::new(r.clone()));
    }
    let (replaced, result) = if many {
        match txn.insert_many(table, batch.to_vec()) {
            Ok(r) => (r, Ok(())),
            Err(e) => (Vec::new(), Err(e.to_string())),
        }
    } else {
        looped(&mut txn, table, batch)
    };
    let replaced = replaced.iter().map(|r| r.as_deref().cloned()).collect();
    let info = txn.commit().expect("commit");
    let changes = info
        .changes
        .iter()
        .map(|c| {
            let (before, after) = (c.before::<Row>(), c.after::<Row>());
            let key = format!("{:?}", c.key());
            (
                c.table().to_string(),
                key,
                c.kind(),
                before.as_deref().cloned(),
                after.as_deref().cloned(),
            )
        })
        .collect();
    let view = f.db.snapshot();
    (replaced, result, contents(f, &view.view()), changes)
}

/// `insert` per row, stopping at the first error; on error, no replaced rows (as
/// `insert_many` returns none then).
fn looped(
    txn: &mut WriteTxn,
    table: Table<Row>,
    batch: &[Arc<Row>],
) -> (Vec<Option<Arc<Row>>>, Result<(), String>) {
    let mut replaced = Vec::new();
    for r in batch {
        match txn.insert(table, Arc::clone(r)) {
            Ok(old) => replaced.push(old),
            Err(e) => return (Vec::new(), Err(e.to_string())),
        }
    }
    (replaced, Ok(()))
}

/// Two fixtures holding `stored` in both tables, committed at index 1; the stored
/// rows' `Arc`s (one list, shared by both fixtures).
fn seeded(stored: &[Row]) -> (Fixture, Fixture, Vec<Arc<Row>>) {
    let arcs: Vec<Arc<Row>> = stored.iter().cloned().map(Arc::new).collect();
    let seed = |f: &Fixture| {
        let mut txn = f.db.begin_write(1).expect("begin");
        for r in &arcs {
            txn.insert(f.rows, Arc::clone(r)).expect("seed");
            // The unique table refuses clashing names: keep what it takes.
            let _ = txn.insert(f.named, Arc::clone(r));
        }
        txn.commit().expect("commit");
    };
    let (a, b) = (fixture(), fixture());
    seed(&a);
    seed(&b);
    (a, b, arcs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn insert_many_matches_a_loop_of_inserts(
        stored in vec(row(), 0..12),
        picks in vec(pick(), 0..24),
        prior in vec(row(), 0..4),
        unique_table in any::<bool>(),
    ) {
        let (batched, looped_f, arcs) = seeded(&stored);
        let batch: Vec<Arc<Row>> = picks
            .iter()
            .map(|p| match p {
                Pick::New(r) => Arc::new(r.clone()),
                Pick::Stored(i) if !arcs.is_empty() => Arc::clone(&arcs[i % arcs.len()]),
                Pick::Stored(_) => Arc::new(stored.first().cloned().unwrap_or(Row {
                    id: "a".into(), group: "g".into(), tags: Vec::new(), n: 0,
                })),
            })
            .collect();
        let (tb, tl) = if unique_table {
            (batched.named, looped_f.named)
        } else {
            (batched.rows, looped_f.rows)
        };
        let got = apply(&batched, tb, &prior, &batch, true);
        let want = apply(&looped_f, tl, &prior, &batch, false);
        prop_assert_eq!(got, want);
    }

    /// A batch after a savepoint, rolled back, leaves the transaction as it was.
    #[test]
    fn a_rolled_back_batch_leaves_nothing(
        stored in vec(row(), 0..12),
        kept in vec(row(), 0..4),
        undone in vec(row(), 0..24),
    ) {
        let (f, reference, _) = seeded(&stored);
        let as_arcs = |rows: &[Row]| rows.iter().cloned().map(Arc::new).collect::<Vec<_>>();
        let mut txn = f.db.begin_write(2).expect("begin");
        txn.insert_many(f.rows, as_arcs(&kept)).expect("kept");
        let mark = txn.savepoint();
        txn.insert_many(f.rows, as_arcs(&undone)).expect("undone");
        txn.rollback_to(mark);
        let info = txn.commit().expect("commit");
        let mut want_txn = reference.db.begin_write(2).expect("begin");
        for r in as_arcs(&kept) {
            want_txn.insert(reference.rows, r).expect("insert");
        }
        let want_info = want_txn.commit().expect("commit");
        let kinds = |i: &schedstate_engine::CommitInfo| {
            i.changes.iter().map(|c| (format!("{:?}", c.key()), c.kind())).collect::<Vec<_>>()
        };
        prop_assert_eq!(kinds(&info), kinds(&want_info));
        prop_assert_eq!(
            contents(&f, &f.db.snapshot().view()),
            contents(&reference, &reference.db.snapshot().view())
        );
    }
}

#[test]
fn a_unique_violation_keeps_the_rows_before_it() {
    let f = fixture();
    let mut txn = f.db.begin_write(1).expect("begin");
    let named = |id: &str, name: &str| {
        Arc::new(Row {
            id: id.into(),
            group: name.into(),
            tags: Vec::new(),
            n: 0,
        })
    };
    let err = txn
        .insert_many(
            f.named,
            vec![
                named("a", "g"),
                named("b", "h"),
                named("c", "g"),
                named("d", "g1"),
            ],
        )
        .expect_err("c clashes with a");
    assert!(matches!(err, Error::UniqueViolation { .. }), "{err:?}");
    let view = txn.view();
    let ids: Vec<String> = view.iter(f.named).map(|r| r.id.clone()).collect();
    assert_eq!(ids, ["a", "b"]);
}
