//! A bulk-loaded restore (`Db::begin_bulk_restore`) against the same rows inserted
//! one by one into a restore transaction: the same rows, every index agreeing with
//! them, the same answers through each index; a unique key held twice refused with
//! nothing published. A restore from another database of the same layout shares
//! its rows; one of another layout is refused.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::Config;
use schedstate_engine::{Db, Error, Index, Key, Schema, Table, View};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    id: String,
    group: String,
    /// Unique when present.
    code: Option<String>,
    /// Several keys per row, repeats allowed.
    tags: Vec<String>,
}

struct Fx {
    db: Db,
    rows: Table<Row>,
    by_group: Index<Row>,
    by_code: Index<Row>,
    by_tag: Index<Row>,
}

fn fx() -> Fx {
    let mut schema = Schema::new();
    let rows = schema
        .table("rows", |r: &Row| Key::str(&r.id))
        .expect("table");
    let by_group = schema
        .index(rows, "group", false, |r: &Row| Some(Key::str(&r.group)))
        .expect("index");
    let by_code = schema
        .index(rows, "code", true, |r: &Row| {
            r.code.as_deref().map(Key::str)
        })
        .expect("index");
    let by_tag = schema
        .multi_index(rows, "tag", false, |r: &Row| {
            r.tags.iter().map(|t| Key::str(t)).collect()
        })
        .expect("index");
    Fx {
        db: Db::new(schema),
        rows,
        by_group,
        by_code,
        by_tag,
    }
}

/// What a view answers, through the table and every index.
fn answers(fx: &Fx, view: View<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for r in view.iter(fx.rows) {
        out.push(format!("row {r:?}"));
    }
    for (name, index) in [
        ("group", fx.by_group),
        ("code", fx.by_code),
        ("tag", fx.by_tag),
    ] {
        for r in view.index_iter(index) {
            out.push(format!("{name} {}", r.id));
        }
    }
    out.push(format!("index {}", view.table_index(fx.rows)));
    out
}

/// Inserts `rows` one by one into a restore transaction: the answers, or `None`
/// if an insert was refused.
fn one_by_one(rows: &[Row]) -> Option<Vec<String>> {
    let fx = fx();
    let mut txn = fx.db.begin_restore(9);
    for r in rows {
        txn.insert(fx.rows, Arc::new(r.clone())).ok()?;
    }
    txn.set_table_index(fx.rows, 7);
    txn.commit().expect("commit");
    Some(answers(&fx, fx.db.snapshot().view()))
}

/// Loads `rows` in bulk: the answers, or the error.
fn in_bulk(rows: &[Row]) -> Result<Vec<String>, Error> {
    let fx = fx();
    let mut bulk = fx.db.begin_bulk_restore(9);
    for r in rows {
        bulk.insert(fx.rows, Arc::new(r.clone())).expect("insert");
    }
    bulk.set_table_index(fx.rows, 7);
    let txn = bulk.finish()?;
    txn.view()
        .verify_indexes()
        .expect("indexes agree with rows");
    txn.commit().expect("commit");
    let snap = fx.db.snapshot();
    snap.view()
        .verify_indexes()
        .expect("indexes agree with rows");
    Ok(answers(&fx, snap.view()))
}

fn row(id: &str, group: &str, code: Option<&str>, tags: &[&str]) -> Row {
    Row {
        id: id.into(),
        group: group.into(),
        code: code.map(Into::into),
        tags: tags.iter().map(|t| t.to_string()).collect(),
    }
}

#[test]
fn a_later_row_with_the_same_key_replaces_the_earlier_one() {
    let rows = [
        row("b", "g1", Some("x"), &["t1", "t1"]),
        row("a", "g2", None, &[]),
        row("b", "g3", Some("y"), &["t2"]),
        // "x" was given up by the row above.
        row("c", "g1", Some("x"), &["t1"]),
    ];
    let bulk = in_bulk(&rows).expect("bulk");
    assert_eq!(Some(bulk.clone()), one_by_one(&rows));
    assert!(bulk.contains(&"code c".to_string()), "{bulk:?}");
    assert!(!bulk.iter().any(|a| a.contains("g1") && a.contains("\"b\"")));
}

#[test]
fn a_unique_key_held_by_two_rows_is_refused_and_nothing_changes() {
    let fx = fx();
    let mut txn = fx.db.begin_write(1).expect("write");
    txn.insert(fx.rows, Arc::new(row("kept", "g", Some("k"), &[])))
        .expect("insert");
    txn.commit().expect("commit");

    let mut bulk = fx.db.begin_bulk_restore(9);
    for r in [row("a", "g", Some("x"), &[]), row("b", "g", Some("x"), &[])] {
        bulk.insert(fx.rows, Arc::new(r)).expect("insert");
    }
    match bulk.finish() {
        Err(Error::UniqueViolation { table, index, .. }) => {
            assert_eq!((table.as_str(), index.as_str()), ("rows", "code"));
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("two rows with one unique key were accepted"),
    }
    let now = fx.db.snapshot();
    assert_eq!(now.view().last_applied(), 1);
    let ids: Vec<String> = now.view().iter(fx.rows).map(|r| r.id.clone()).collect();
    assert_eq!(ids, ["kept"]);
    // The writer was released.
    assert!(fx.db.begin_write(2).is_ok());
}

#[test]
fn an_empty_load_replaces_everything_with_nothing() {
    let fx = fx();
    let mut txn = fx.db.begin_write(1).expect("write");
    txn.insert(fx.rows, Arc::new(row("old", "g", None, &["t"])))
        .expect("insert");
    txn.commit().expect("commit");
    fx.db
        .begin_bulk_restore(5)
        .finish()
        .expect("finish")
        .commit()
        .expect("commit");
    let now = fx.db.snapshot();
    assert_eq!(now.view().len(fx.rows), 0);
    assert_eq!(now.view().index_iter(fx.by_tag).count(), 0);
    assert_eq!(now.view().last_applied(), 5);
}

fn row_strategy() -> impl Strategy<Value = Row> {
    let pick = |pool: &'static [&'static str]| prop::sample::select(pool).prop_map(String::from);
    (
        pick(&["a", "b", "c", "d", "e", "f", "g", "h", "ab", "a\u{0}", ""]),
        pick(&["g1", "g2", "", "g1\u{0}"]),
        prop::option::of(pick(&["x", "y", "z", "xx"])),
        prop::collection::vec(pick(&["t1", "t2", "t", "t1t1"]), 0..4),
    )
        .prop_map(|(id, group, code, tags)| Row {
            id,
            group,
            code,
            tags,
        })
}

proptest! {
    #![proptest_config(Config::with_cases(128))]

    /// Whenever inserting the rows one by one succeeds, the bulk load gives the
    /// same state; whenever the bulk load refuses, so did an insert.
    #[test]
    fn bulk_matches_one_by_one(rows in prop::collection::vec(row_strategy(), 0..60)) {
        let expected = one_by_one(&rows);
        match (in_bulk(&rows), expected) {
            (Ok(got), Some(want)) => prop_assert_eq!(got, want),
            (Err(Error::UniqueViolation { .. }), None) => {}
            // A row that lost its unique key to a later replacement: refused one by
            // one, accepted in bulk (the final rows are consistent).
            (Ok(_), None) => {}
            (Err(e), Some(_)) => prop_assert!(false, "bulk refused what inserts took: {}", e),
            (Err(e), None) => prop_assert!(false, "unexpected error {}", e),
        }
    }

}

proptest! {
    #![proptest_config(Config::with_cases(12))]

    /// Many rows in random order, sorted and built into full nodes: every row is
    /// found through every index.
    #[test]
    fn large_loads_keep_every_index(n in 500usize..3000, seed in any::<u64>()) {
        let mut x = seed | 1;
        let mut next = move || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
        let rows: Vec<Row> = (0..n)
            .map(|i| {
                let r = next();
                Row {
                    id: format!("{:016x}", r),
                    group: format!("g{}", r % 17),
                    code: (i % 3 == 0).then(|| format!("c{i}")),
                    tags: (0..(r % 3)).map(|t| format!("t{}", (r >> t) % 5)).collect(),
                }
            })
            .collect();
        let got = in_bulk(&rows).expect("bulk");
        prop_assert_eq!(Some(got), one_by_one(&rows));
    }
}

#[test]
fn a_restore_from_another_database_shares_its_rows() {
    let (from, to) = (fx(), fx());
    let mut bulk = from.db.begin_bulk_restore(12);
    for r in [row("a", "g", Some("x"), &["t"]), row("b", "h", None, &[])] {
        bulk.insert(from.rows, Arc::new(r)).expect("insert");
    }
    bulk.set_table_index(from.rows, 11);
    bulk.finish().expect("finish").commit().expect("commit");
    let source = from.db.snapshot();

    to.db
        .begin_restore_from(&source)
        .expect("same layout")
        .commit()
        .expect("commit");
    let copy = to.db.snapshot();
    assert_eq!(answers(&to, copy.view()), answers(&from, source.view()));
    assert_eq!(copy.view().last_applied(), 12);
    let (a, b) = (
        source.view().get(from.rows, &Key::str("a")).expect("row"),
        copy.view().get(to.rows, &Key::str("a")).expect("row"),
    );
    assert!(Arc::ptr_eq(&a, &b), "rows are shared, not copied");
    // Writes go on from there, in the copy only.
    let mut txn = to.db.begin_write(13).expect("write");
    txn.delete(to.rows, &Key::str("a")).expect("delete");
    txn.commit().expect("commit");
    assert!(source.view().get(from.rows, &Key::str("a")).is_some());
    assert_eq!(to.db.snapshot().view().len(to.rows), 1);
}

#[test]
fn a_restore_from_a_database_of_another_layout_is_refused() {
    let mut schema = Schema::new();
    let rows = schema
        .table("rows", |r: &Row| Key::str(&r.id))
        .expect("table");
    schema
        .index(rows, "group", false, |r: &Row| Some(Key::str(&r.group)))
        .expect("index");
    let other = Db::new(schema);
    let to = fx();
    let mut txn = to.db.begin_write(1).expect("write");
    txn.insert(to.rows, Arc::new(row("kept", "g", None, &[])))
        .expect("insert");
    txn.commit().expect("commit");
    match to.db.begin_restore_from(&other.snapshot()) {
        Err(Error::ForeignHandle { table }) => assert_eq!(table, "rows"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a restore from another layout was taken"),
    }
    assert_eq!(to.db.snapshot().view().len(to.rows), 1);
    assert!(to.db.begin_write(2).is_ok());
}
