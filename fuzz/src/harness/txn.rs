//! The `txn` target: the engine on its own. Random begins (some at stale indexes),
//! inserts, deletes, prefix deletes, commits, aborts (drops), held snapshots and whole
//! restores on a small table with a non-unique index and a unique multi-key index,
//! checked against a `BTreeMap` model after every step, together with
//! [`View::verify_indexes`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use schedstate::engine::{
    ChangeKind, Db, Error, Index, Key, KeyBuilder, Schema, Snapshot, Table, View,
};

use super::input::Input;

const IDS: [&str; 10] = ["a", "a1", "a10", "ab", "b", "b1", "ba", "c", "c\0", "d"];
/// "g1" and "g10": a lookup of "g1" must not see "g10" rows.
const GROUPS: [&str; 3] = ["g1", "g10", "g2"];
const TAGS: [&str; 4] = ["t1", "t10", "t2", "t3"];
const PREFIXES: [&str; 7] = ["", "a", "a1", "b", "c", "c\0", "e"];
/// Operations per input, at most.
const MAX_OPS: usize = 256;
/// Snapshots held at once.
const MAX_SNAPSHOTS: usize = 4;

/// A row. Equality of rows is by value; the engine stores a fresh `Arc` per insert.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    id: String,
    group: String,
    /// Unique across rows (each tag held by at most one row); a row may repeat one.
    tags: Vec<String>,
    n: u8,
}

/// One committed version in the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Version {
    rows: BTreeMap<String, Item>,
    table_index: u64,
    last_applied: u64,
}

struct Sut {
    db: Db,
    items: Table<Item>,
    by_group: Index<Item>,
    by_tag: Index<Item>,
}

fn sut() -> Sut {
    let mut schema = Schema::new();
    let items = schema
        .table("items", |r: &Item| Key::str(&r.id))
        .expect("table");
    let by_group = schema
        .index(items, "group", false, |r: &Item| Some(Key::str(&r.group)))
        .expect("index");
    let by_tag = schema
        .multi_index(items, "tag", true, |r: &Item| {
            r.tags.iter().map(|t| Key::str(t)).collect()
        })
        .expect("index");
    Sut {
        db: Db::new(schema),
        items,
        by_group,
        by_tag,
    }
}

fn item(inp: &mut Input<'_>) -> Item {
    Item {
        id: inp.pick(&IDS).to_string(),
        group: inp.pick(&GROUPS).to_string(),
        tags: (0..inp.below(4) / 2 + usize::from(inp.chance(10)))
            .map(|_| inp.pick(&TAGS).to_string())
            .collect(),
        n: inp.byte() % 4,
    }
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let s = sut();
    let mut committed = Version::default();
    // The open transaction, its working state, and the ids its writes touched.
    // Its view reports the committed indexes until it commits.
    let mut txn: Option<(schedstate::engine::WriteTxn, Version, BTreeSet<String>)> = None;
    let mut snapshots: Vec<(Snapshot, Version)> = Vec::new();

    for step in 0..MAX_OPS {
        if inp.is_empty() {
            break;
        }
        let op = inp.below(32);
        let committed_before = committed.last_applied;
        match (&mut txn, op) {
            (None, 0..=19) => {
                // Begin, at the next index mostly; sometimes stale or a jump.
                let last = committed.last_applied;
                let index = match inp.below(8) {
                    0 => last,
                    1 => last.saturating_sub(1),
                    2 => last + 1 + inp.below(100) as u64,
                    _ => last + 1,
                };
                match s.db.begin_write(index) {
                    Ok(t) => {
                        assert!(index > last, "began at stale index {index} after {last}");
                        assert_eq!(t.index(), index);
                        txn = Some((t, committed.clone(), BTreeSet::new()));
                    }
                    Err(Error::StaleIndex {
                        index: i,
                        last_applied,
                    }) => {
                        assert!(index <= last, "refused index {index} after {last}");
                        assert_eq!((i, last_applied), (index, last));
                    }
                    Err(e) => panic!("begin: {e}"),
                }
            }
            (None, 20..=23) => {
                // Replace the whole state (a snapshot restore): some of the committed
                // rows, at some last applied index (possibly lower than now).
                let last_applied = committed.last_applied + inp.below(5) as u64;
                let last_applied = last_applied.saturating_sub(inp.below(3) as u64);
                let table_index = last_applied.saturating_sub(inp.below(3) as u64);
                let keep: Vec<Item> = committed
                    .rows
                    .values()
                    .filter(|_| !inp.chance(25))
                    .cloned()
                    .collect();
                let mut r = s.db.begin_restore(last_applied);
                for row in &keep {
                    r.insert(s.items, Arc::new(row.clone()))
                        .expect("rows of a valid version");
                }
                r.set_table_index(s.items, table_index);
                let info = r.commit().expect("restore commit");
                assert!(info.changes.is_empty(), "a restore reports no changes");
                committed = Version {
                    rows: keep.into_iter().map(|r| (r.id.clone(), r)).collect(),
                    table_index,
                    last_applied,
                };
            }
            (Some((t, work, touched)), 0..=11) => {
                let row = item(&mut inp);
                let clash = row.tags.iter().find(|tag| {
                    work.rows
                        .values()
                        .any(|r| r.id != row.id && r.tags.contains(tag))
                });
                let got = t.insert(s.items, Arc::new(row.clone()));
                match (got, clash) {
                    (Ok(replaced), None) => {
                        let old = work.rows.insert(row.id.clone(), row.clone());
                        assert_eq!(replaced.map(|r| (*r).clone()), old, "insert {}", row.id);
                        touched.insert(row.id);
                    }
                    (Err(Error::UniqueViolation { table, index, .. }), Some(_)) => {
                        assert_eq!((table.as_str(), index.as_str()), ("items", "tag"));
                    }
                    (got, clash) => panic!("insert {row:?}: engine {got:?}, model clash {clash:?}"),
                }
            }
            (Some((t, work, touched)), 12..=16) => {
                let row_id = inp.pick(&IDS);
                let removed = t.delete(s.items, &Key::str(row_id)).expect("delete");
                let old = work.rows.remove(row_id);
                assert_eq!(removed.map(|r| (*r).clone()), old, "delete {row_id:?}");
                if old.is_some() {
                    touched.insert(row_id.to_string());
                }
            }
            (Some((t, work, touched)), 17..=18) => {
                let prefix = inp.pick(&PREFIXES);
                let count = t
                    .delete_prefix(s.items, KeyBuilder::new().str_prefix(prefix).as_bytes())
                    .expect("delete prefix");
                let doomed: Vec<String> = work
                    .rows
                    .keys()
                    .filter(|k| k.starts_with(prefix))
                    .cloned()
                    .collect();
                assert_eq!(count, doomed.len(), "delete prefix {prefix:?}");
                for k in doomed {
                    work.rows.remove(&k);
                    touched.insert(k);
                }
            }
            (Some(_), 19..=25) => {
                let (t, mut work, touched) = txn.take().expect("open");
                let index = t.index();
                let info = t.commit().expect("commit");
                assert_eq!(info.index, index);
                work.last_applied = index;
                // Every successful write stores a fresh row: a touched id present before
                // or after is a change; absent both times (insert then delete) is none.
                let mut want = Vec::new();
                for k in &touched {
                    let kind = match (committed.rows.get(k), work.rows.get(k)) {
                        (None, None) => continue,
                        (None, Some(_)) => ChangeKind::Insert,
                        (Some(_), Some(_)) => ChangeKind::Update,
                        (Some(_), None) => ChangeKind::Delete,
                    };
                    want.push((Key::str(k), kind));
                }
                let got: Vec<_> = info
                    .changes
                    .iter()
                    .map(|c| {
                        assert_eq!(c.table(), "items");
                        let id = c.key().decode_strs().expect("a string key").remove(0);
                        assert_eq!(
                            c.before::<Item>().map(|r| (*r).clone()).as_ref(),
                            committed.rows.get(&id),
                            "change before"
                        );
                        assert_eq!(
                            c.after::<Item>().map(|r| (*r).clone()).as_ref(),
                            work.rows.get(&id),
                            "change after"
                        );
                        (c.key().clone(), c.kind())
                    })
                    .collect();
                assert_eq!(got, want, "change set");
                if !want.is_empty() {
                    work.table_index = index;
                }
                committed = work;
            }
            (Some(_), 26..=27) => {
                // Abort: drop the transaction; nothing of it may show.
                txn = None;
            }
            (_, op) => {
                if op % 2 == 0 || snapshots.is_empty() {
                    snapshots.push((s.db.snapshot(), committed.clone()));
                    if snapshots.len() > MAX_SNAPSHOTS {
                        snapshots.remove(0);
                    }
                } else {
                    let (snap, version) = &snapshots[inp.below(snapshots.len())];
                    check_view(&s, snap.view(), version, "held snapshot", true);
                }
            }
        }
        // Readers see the committed version only, never the open transaction's writes;
        // the transaction reads its own writes.
        // Every read after every commit or restore, and every few operations inside a
        // transaction; rows, table index and index consistency after every operation.
        let full = committed.last_applied != committed_before || step % 4 == 0;
        check_view(&s, s.db.snapshot().view(), &committed, "committed", full);
        if let Some((t, work, _)) = &txn {
            check_view(&s, t.view(), work, "transaction", step % 4 == 0);
        }
    }
    drop(txn);
    check_view(
        &s,
        s.db.snapshot().view(),
        &committed,
        "committed at the end",
        true,
    );
    for (snap, version) in &snapshots {
        check_view(&s, snap.view(), version, "held snapshot at the end", true);
    }
}

fn ids<'a>(rows: impl Iterator<Item = &'a Item>) -> Vec<&'a str> {
    rows.map(|r| r.id.as_str()).collect()
}

/// The reads of `view` against the model version `m`: index consistency, indexes and
/// rows always, and with `full` every lookup, prefix scan and index query too.
fn check_view(s: &Sut, view: View<'_>, m: &Version, what: &str, full: bool) {
    if let Err(e) = view.verify_indexes() {
        panic!("{what}: {e}");
    }
    assert_eq!(view.last_applied(), m.last_applied, "{what}: last applied");
    assert_eq!(
        view.table_index(s.items),
        m.table_index,
        "{what}: table index"
    );
    assert_eq!(view.len(s.items), m.rows.len(), "{what}: len");
    let rows: Vec<Item> = view.iter(s.items).map(|r| (*r).clone()).collect();
    assert!(
        rows.iter().eq(m.rows.values()),
        "{what}: rows\n{rows:?}\n{:?}",
        m.rows
    );
    if !full {
        return;
    }
    for row_id in IDS {
        let got = view.get_value(s.items, &Key::str(row_id));
        assert_eq!(got, m.rows.get(row_id), "{what}: get {row_id:?}");
    }
    for prefix in PREFIXES {
        let got: Vec<_> = view
            .prefix(s.items, KeyBuilder::new().str_prefix(prefix).as_bytes())
            .borrowed()
            .map(|r| r.id.as_str())
            .collect();
        let want = ids(m.rows.values().filter(|r| r.id.starts_with(prefix)));
        assert_eq!(got, want, "{what}: prefix {prefix:?}");
    }
    for group in GROUPS {
        let got: Vec<_> = view
            .index_eq(s.by_group, &Key::str(group))
            .borrowed()
            .map(|r| r.id.as_str())
            .collect();
        let want = ids(m.rows.values().filter(|r| r.group == group));
        assert_eq!(got, want, "{what}: group {group}");
        let first = view.get_by(s.by_group, &Key::str(group));
        assert_eq!(
            first.as_ref().map(|r| r.id.as_str()),
            want.first().copied(),
            "{what}: first of group {group}"
        );
    }
    for tag in TAGS {
        let got = view.get_by(s.by_tag, &Key::str(tag));
        let holders: Vec<&Item> = m
            .rows
            .values()
            .filter(|r| r.tags.iter().any(|t| t == tag))
            .collect();
        assert!(holders.len() <= 1, "{what}: model tag {tag} held twice");
        assert_eq!(
            got.as_deref(),
            holders.first().copied(),
            "{what}: tag {tag}"
        );
        let all: Vec<_> = view.index_eq(s.by_tag, &Key::str(tag)).collect();
        assert_eq!(all.len(), holders.len(), "{what}: index_eq tag {tag}");
    }
    let indexed: Vec<_> = view
        .index_iter(s.by_group)
        .borrowed()
        .map(|r| (r.group.as_str(), r.id.as_str()))
        .collect();
    let mut want: Vec<_> = m
        .rows
        .values()
        .map(|r| (r.group.as_str(), r.id.as_str()))
        .collect();
    want.sort();
    assert_eq!(indexed, want, "{what}: group index order");
}
