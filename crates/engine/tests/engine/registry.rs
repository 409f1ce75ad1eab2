//! The watch registry at scale and against an oracle: index-value watches are exact
//! (a row moving into, inside or out of the value wakes them, nothing else does), many
//! waiters on many values cost a commit nothing, and a property test compares which
//! watch sets fired with a brute-force oracle over random watches and random commits,
//! late registrations included.
//!
//! The property test runs 64 cases by default; `PROPTEST_CASES=N` runs more.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::Config;
use schedstate_engine::{
    Db, Error, Index, Key, KeyBuilder, Schema, Table, View, WaitOutcome, WatchSet,
};

use crate::support::{Fixture, assert_fired, assert_quiet};

/// Registers `ws` now (a zero wait does); true if it fired at once.
fn register(ws: &WatchSet) -> bool {
    ws.wait_timeout(Duration::ZERO) == WaitOutcome::Changed
}

#[test]
fn index_value_watches_on_many_values_fire_exactly_their_own() {
    let fx = Fixture::new();
    const GROUPS: usize = 2000;
    fx.write(|txn| {
        for g in 0..GROUPS {
            for k in 0..3 {
                txn.insert(
                    fx.items,
                    crate::support::item(&format!("i{g}-{k}"), &format!("g{g}"), 0),
                )
                .expect("insert");
            }
        }
    });
    // Two sets per group, as two clients on one node.
    let snap = fx.db.snapshot();
    let sets: Vec<(usize, WatchSet)> = (0..GROUPS)
        .flat_map(|g| [g, g])
        .map(|g| {
            let ws = WatchSet::new();
            assert_eq!(
                snap.watched(&ws)
                    .index_eq(fx.by_group, &Key::str(&format!("g{g}")))
                    .count(),
                3
            );
            assert!(!register(&ws));
            (g, ws)
        })
        .collect();
    drop(snap);
    assert_eq!(fx.db.registered_watches(), 2 * GROUPS);

    // Each kind of change to one group, then a write to a group nobody watches.
    fx.put("i7-0", "g7", 1); // update inside g7
    fx.put("new-in-8", "g8", 0); // insert into g8
    fx.del("i9-0"); // delete from g9
    fx.put("i10-0", "g11", 0); // move g10 -> g11: both fire
    fx.put("lone", "g-nobody", 0);
    fx.put("also-lone", "g1x", 0); // "g1" is a prefix of "g1x" as text, not as a value
    let fired: BTreeSet<usize> = sets
        .iter()
        .filter(|(_, ws)| ws.is_fired())
        .map(|(g, _)| *g)
        .collect();
    assert_eq!(fired, BTreeSet::from([7, 8, 9, 10, 11]));
    for (g, ws) in &sets {
        assert_eq!(ws.is_fired(), fired.contains(g), "group {g}");
    }
    drop(sets);
    assert_eq!(fx.db.registered_watches(), 0);
}

#[test]
fn index_value_watch_ignores_primary_key_neighbours_and_other_indexes() {
    let fx = Fixture::new();
    fx.put("x", "g1", 0);
    fx.put("g1", "g2", 0); // a primary key equal to the watched value
    let snap = fx.db.snapshot();
    let ws = WatchSet::new();
    assert_eq!(
        snap.watched(&ws)
            .index_eq(fx.by_group, &Key::str("g1"))
            .count(),
        1
    );
    assert_quiet(&ws);
    fx.put("g1", "g2", 1); // the row whose *id* is g1
    fx.put("g10", "g3", 0);
    fx.put_other("g1", 0);
    assert_quiet(&ws);
    fx.put("y", "g1", 0);
    assert_fired(&ws);
}

#[test]
fn prefix_and_range_watches_are_exact_among_many() {
    let fx = Fixture::new();
    for id in ["a", "ab", "b", "ba", "c", "d"] {
        fx.put(id, "g", 0);
    }
    let snap = fx.db.snapshot();
    let prefix = |p: &str| {
        let ws = WatchSet::new();
        let _ = snap
            .watched(&ws)
            .prefix(fx.items, KeyBuilder::new().str_prefix(p).as_bytes())
            .count();
        assert!(!register(&ws));
        ws
    };
    let range = |lo: Bound<&str>, hi: Bound<&str>| {
        let (lo_k, hi_k) = (lo.map(Key::str), hi.map(Key::str));
        let ws = WatchSet::new();
        let _ = snap
            .watched(&ws)
            .range(
                fx.items,
                lo_k.as_ref().map(|k| k.as_bytes()),
                hi_k.as_ref().map(|k| k.as_bytes()),
            )
            .count();
        assert!(!register(&ws));
        ws
    };
    let pa = prefix("a");
    let pb = prefix("b");
    let r_b_c = range(Bound::Included("b"), Bound::Excluded("c"));
    let r_after_c = range(Bound::Excluded("c"), Bound::Unbounded);
    let r_to_a = range(Bound::Unbounded, Bound::Included("a"));
    let all = [&pa, &pb, &r_b_c, &r_after_c, &r_to_a];
    let fired = || all.iter().map(|ws| ws.is_fired()).collect::<Vec<_>>();

    fx.put("ba", "g", 1);
    assert_eq!(fired(), [false, true, true, false, false]);
    fx.put("c", "g", 1); // excluded by both ranges that touch it
    assert_eq!(fired(), [false, true, true, false, false]);
    fx.put("c0", "g", 0);
    assert_eq!(fired(), [false, true, true, true, false]);
    fx.put("a", "g", 1);
    assert_eq!(fired(), [true, true, true, true, true]);
}

#[test]
fn thousands_of_waiters_on_one_key_register_fire_and_leave() {
    let fx = Fixture::new();
    fx.put("hot", "g", 0);
    let snap = fx.db.snapshot();
    let sets: Vec<WatchSet> = (0..5000)
        .map(|_| {
            let ws = WatchSet::new();
            assert!(snap.watched(&ws).get(fx.items, &Key::str("hot")).is_some());
            assert!(!register(&ws));
            ws
        })
        .collect();
    // Half leave before the write, in an order unlike the registration order.
    let (stay, leave): (Vec<_>, Vec<_>) =
        sets.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    for (_, ws) in leave.into_iter().rev() {
        drop(ws);
    }
    assert_eq!(fx.db.registered_watches(), 2500);
    fx.put("hot", "g", 1);
    assert!(stay.iter().all(|(_, ws)| ws.is_fired()));
    drop(stay);
    assert_eq!(fx.db.registered_watches(), 0);
}

#[test]
fn a_registered_set_does_not_keep_the_version_it_read() {
    let fx = Fixture::new();
    let row = crate::support::item("a", "g1", 0);
    let items = fx.items;
    let kept = Arc::clone(&row);
    fx.write(move |txn| {
        txn.insert(items, kept).expect("insert");
    });
    let ws = WatchSet::new();
    {
        let snap = fx.db.snapshot();
        assert_eq!(
            snap.watched(&ws)
                .index_eq(fx.by_group, &Key::str("g2"))
                .count(),
            0
        );
    }
    assert!(!register(&ws));
    // Replace the row: only the version the set read still holds the old one.
    fx.put("a", "g1", 1);
    fx.db.reclaim();
    assert!(!ws.is_fired());
    assert_eq!(
        Arc::strong_count(&row),
        1,
        "the parked set pins the version it read"
    );
    // Reads through a registered set are not watched, and pin nothing either.
    let row1 = crate::support::item("a", "g1", 1);
    let kept = Arc::clone(&row1);
    fx.write(move |txn| {
        txn.insert(items, kept).expect("insert");
    });
    let snap = fx.db.snapshot();
    let _ = snap.watched(&ws).get(fx.items, &Key::str("a"));
    drop(snap);
    fx.put("a", "g1", 2);
    fx.db.reclaim();
    assert!(!ws.is_fired(), "a read after registration is not watched");
    assert_eq!(
        Arc::strong_count(&row1),
        1,
        "a read after registration pins"
    );
}

// ---- the property test ---------------------------------------------------------

const IDS: [&str; 10] = ["a", "a1", "a2", "ab", "b", "b1", "ba", "c", "c1", "d"];
/// "g1" and "g10": a watch on "g1" must not see "g10".
const GROUPS: [&str; 4] = ["g1", "g10", "g2", "h"];
const TAGS: [&str; 3] = ["t1", "t2", "t10"];
const UNIQUE: [&str; 3] = ["u1", "u2", "u3"];
const PREFIXES: [&str; 8] = ["", "a", "a1", "b", "g", "g1", "t", "x"];
const NOTES: [&str; 3] = ["a", "n1", "n2"];

#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    id: String,
    group: String,
    tags: Vec<String>,
    unique: Option<String>,
    /// Unique per write: two writes are never the same row.
    n: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    id: String,
    n: u64,
}

struct Db2 {
    db: Db,
    rows: Table<Row>,
    by_group: Index<Row>,
    by_tags: Index<Row>,
    by_unique: Index<Row>,
    notes: Table<Note>,
}

/// Map numbers as the engine numbers them: 0 primary, then indexes in order.
const PRIMARY: usize = 0;
const BY_GROUP: usize = 1;
const BY_TAGS: usize = 2;
const BY_UNIQUE: usize = 3;

fn db2() -> Db2 {
    let mut schema = Schema::new();
    let rows = schema
        .table("rows", |r: &Row| Key::str(&r.id))
        .expect("table");
    let by_group = schema
        .index(rows, "group", false, |r: &Row| Some(Key::str(&r.group)))
        .expect("index");
    let by_tags = schema
        .multi_index(rows, "tags", false, |r: &Row| {
            r.tags.iter().map(|t| Key::str(t)).collect::<Vec<_>>()
        })
        .expect("index");
    let by_unique = schema
        .index(rows, "unique", true, |r: &Row| {
            r.unique.as_deref().map(Key::str)
        })
        .expect("index");
    let notes = schema
        .table("notes", |n: &Note| Key::str(&n.id))
        .expect("table");
    Db2 {
        db: Db::new(schema),
        rows,
        by_group,
        by_tags,
        by_unique,
        notes,
    }
}

/// One read a watch set makes.
#[derive(Debug, Clone)]
enum Read {
    Get(&'static str),
    GetByUnique(&'static str),
    IndexEq(&'static str),
    IndexEqTags(&'static str),
    IndexPrefix(&'static str),
    Prefix(&'static str),
    /// A range that is exactly a prefix (the view watches it as one).
    RangeAsPrefix(&'static str),
    Range(Bound<&'static str>, Bound<&'static str>),
    IndexIter,
    Iter,
    Note(&'static str),
}

/// The model state: rows and notes by id.
#[derive(Debug, Clone, Default)]
struct State {
    rows: BTreeMap<String, Row>,
    notes: BTreeMap<String, Note>,
}

/// Every map of the state as the engine keys it: (table, map) -> key -> row id and
/// write number.
type Maps = BTreeMap<(usize, usize), BTreeMap<Vec<u8>, (String, u64)>>;

fn maps(s: &State) -> Maps {
    let mut m: Maps = BTreeMap::new();
    for r in s.rows.values() {
        let pk = Key::str(&r.id);
        let v = (r.id.clone(), r.n);
        let mut put = |map: usize, k: Vec<u8>| {
            m.entry((0, map)).or_default().insert(k, v.clone());
        };
        put(PRIMARY, pk.as_bytes().to_vec());
        let g = Key::builder()
            .key(Key::str(&r.group).as_bytes())
            .key(pk.as_bytes())
            .build();
        put(BY_GROUP, g.as_bytes().to_vec());
        for t in &r.tags {
            let k = Key::builder()
                .key(Key::str(t).as_bytes())
                .key(pk.as_bytes())
                .build();
            put(BY_TAGS, k.as_bytes().to_vec());
        }
        if let Some(u) = &r.unique {
            put(BY_UNIQUE, Key::str(u).as_bytes().to_vec());
        }
    }
    for nt in s.notes.values() {
        m.entry((1, PRIMARY))
            .or_default()
            .insert(Key::str(&nt.id).as_bytes().to_vec(), (nt.id.clone(), nt.n));
    }
    m
}

/// Keys whose entry differs between two states, per (table, map).
fn changed(a: &State, b: &State) -> BTreeMap<(usize, usize), BTreeSet<Vec<u8>>> {
    let (ma, mb) = (maps(a), maps(b));
    let empty = BTreeMap::new();
    let mut out: BTreeMap<(usize, usize), BTreeSet<Vec<u8>>> = BTreeMap::new();
    for tm in ma.keys().chain(mb.keys()) {
        let (x, y) = (ma.get(tm).unwrap_or(&empty), mb.get(tm).unwrap_or(&empty));
        for k in x.keys().chain(y.keys()) {
            if x.get(k) != y.get(k) {
                out.entry(*tm).or_default().insert(k.clone());
            }
        }
    }
    out
}

fn key_bound(b: Bound<&str>) -> Bound<Vec<u8>> {
    b.map(|s| Key::str(s).as_bytes().to_vec())
}

fn in_range(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    (match lo {
        Bound::Included(l) => k >= l.as_slice(),
        Bound::Excluded(l) => k > l.as_slice(),
        Bound::Unbounded => true,
    }) && (match hi {
        Bound::Included(h) => k <= h.as_slice(),
        Bound::Excluded(h) => k < h.as_slice(),
        Bound::Unbounded => true,
    })
}

fn str_prefix(p: &str) -> Vec<u8> {
    KeyBuilder::new().str_prefix(p).as_bytes().to_vec()
}

/// The smallest key above every key starting with `p` (None: no such key).
fn successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl Read {
    fn table(&self) -> usize {
        if matches!(self, Read::Note(_)) { 1 } else { 0 }
    }

    /// Whether the view records this read as a whole-table watch (every key of the
    /// primary map), after which the set records nothing more on that table.
    fn records_table(&self) -> bool {
        match self {
            Read::Iter | Read::Range(Bound::Unbounded, Bound::Unbounded) => true,
            Read::Prefix(p) => p.is_empty(),
            _ => false,
        }
    }

    /// Whether a change of these keys is a change of what this read read.
    fn hit(&self, ch: &BTreeMap<(usize, usize), BTreeSet<Vec<u8>>>) -> bool {
        let any = |map: usize, f: &dyn Fn(&[u8]) -> bool| {
            ch.get(&(self.table(), map))
                .is_some_and(|ks| ks.iter().any(|k| f(k)))
        };
        match self {
            Read::Get(id) | Read::Note(id) => any(PRIMARY, &|k| k == Key::str(id).as_bytes()),
            Read::GetByUnique(u) => any(BY_UNIQUE, &|k| k == Key::str(u).as_bytes()),
            Read::IndexEq(g) => any(BY_GROUP, &|k| k.starts_with(Key::str(g).as_bytes())),
            Read::IndexEqTags(t) => any(BY_TAGS, &|k| k.starts_with(Key::str(t).as_bytes())),
            Read::IndexPrefix(p) => any(BY_GROUP, &|k| k.starts_with(&str_prefix(p))),
            Read::Prefix(p) | Read::RangeAsPrefix(p) => {
                any(PRIMARY, &|k| k.starts_with(&str_prefix(p)))
            }
            Read::Range(lo, hi) => {
                let (lo, hi) = (key_bound(*lo), key_bound(*hi));
                any(PRIMARY, &|k| in_range(k, &lo, &hi))
            }
            Read::IndexIter => any(BY_GROUP, &|_| true),
            Read::Iter => any(PRIMARY, &|_| true),
        }
    }

    /// Reads through `v` (consuming every iterator).
    fn run(&self, d: &Db2, v: View<'_>) {
        match self {
            Read::Get(id) => _ = v.get(d.rows, &Key::str(id)),
            Read::GetByUnique(u) => _ = v.get_by(d.by_unique, &Key::str(u)),
            Read::IndexEq(g) => _ = v.index_eq(d.by_group, &Key::str(g)).count(),
            Read::IndexEqTags(t) => _ = v.index_eq(d.by_tags, &Key::str(t)).count(),
            Read::IndexPrefix(p) => _ = v.index_prefix(d.by_group, &str_prefix(p)).count(),
            Read::Prefix(p) => _ = v.prefix(d.rows, &str_prefix(p)).count(),
            Read::RangeAsPrefix(p) => {
                let lo = str_prefix(p);
                let hi = successor(&lo);
                let hi = hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                _ = v.range(d.rows, Bound::Included(&lo), hi).count();
            }
            Read::Range(lo, hi) => {
                let (lo, hi) = (key_bound(*lo), key_bound(*hi));
                _ = v
                    .range(
                        d.rows,
                        lo.as_ref().map(|k| k.as_slice()),
                        hi.as_ref().map(|k| k.as_slice()),
                    )
                    .count();
            }
            Read::IndexIter => _ = v.index_iter(d.by_group).count(),
            Read::Iter => _ = v.iter(d.rows).count(),
            Read::Note(id) => _ = v.get(d.notes, &Key::str(id)),
        }
    }
}

/// What a set with item limit `limit` watches for `reads`, as `WatchSet::add` records
/// it: per read, either the read itself or (past the limit) its whole table; a read on
/// a table already watched whole records nothing.
fn watched(reads: &[Read], limit: usize) -> Vec<(Read, bool)> {
    let mut whole: BTreeSet<usize> = BTreeSet::new();
    let mut count = 0;
    let mut out = Vec::new();
    for r in reads {
        let t = r.table();
        if whole.contains(&t) {
            continue;
        }
        count += 1;
        if count > limit {
            whole.insert(t);
            out.push((r.clone(), true));
        } else {
            if r.records_table() {
                whole.insert(t);
            }
            out.push((r.clone(), false));
        }
    }
    out
}

/// A registered set in the property test: its spec, what it watches, the set.
type LiveSet = (SetSpec, Vec<(Read, bool)>, WatchSet);

fn set_hit(items: &[(Read, bool)], ch: &BTreeMap<(usize, usize), BTreeSet<Vec<u8>>>) -> bool {
    items.iter().any(|(r, table)| {
        if *table {
            ch.iter()
                .any(|((t, _), ks)| *t == r.table() && !ks.is_empty())
        } else {
            r.hit(ch)
        }
    })
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        id: &'static str,
        group: &'static str,
        tags: Vec<&'static str>,
        unique: Option<&'static str>,
    },
    Del(&'static str),
    PutNote(&'static str),
    DelNote(&'static str),
}

/// Applies `ops` in one transaction to the engine and the model alike; a write the
/// unique index refuses must be refused by both.
fn commit(d: &Db2, s: &mut State, ops: &[Op], n: &mut u64) {
    let mut txn = d.db.begin_write(d.db.last_applied() + 1).expect("begin");
    for op in ops {
        *n += 1;
        match op {
            Op::Put {
                id,
                group,
                tags,
                unique,
            } => {
                let row = Row {
                    id: id.to_string(),
                    group: group.to_string(),
                    tags: tags.iter().map(ToString::to_string).collect(),
                    unique: unique.map(ToString::to_string),
                    n: *n,
                };
                let clash = row.unique.as_ref().is_some_and(|u| {
                    s.rows
                        .values()
                        .any(|r| r.id != row.id && r.unique.as_ref() == Some(u))
                });
                match txn.insert(d.rows, Arc::new(row.clone())) {
                    Ok(_) => {
                        assert!(!clash, "engine accepted a unique clash");
                        s.rows.insert(row.id.clone(), row);
                    }
                    Err(Error::UniqueViolation { .. }) => assert!(clash, "engine refused a write"),
                    Err(e) => panic!("insert: {e}"),
                }
            }
            Op::Del(id) => {
                txn.delete(d.rows, &Key::str(id)).expect("delete");
                s.rows.remove(*id);
            }
            Op::PutNote(id) => {
                let note = Note {
                    id: id.to_string(),
                    n: *n,
                };
                txn.insert(d.notes, Arc::new(note.clone()))
                    .expect("insert note");
                s.notes.insert(note.id.clone(), note);
            }
            Op::DelNote(id) => {
                txn.delete(d.notes, &Key::str(id)).expect("delete note");
                s.notes.remove(*id);
            }
        }
    }
    txn.commit().expect("commit");
}

fn pick<const N: usize>(pool: [&'static str; N]) -> impl Strategy<Value = &'static str> {
    proptest::sample::select(pool.to_vec())
}

fn bound_strategy() -> impl Strategy<Value = Bound<&'static str>> {
    prop_oneof![
        pick(IDS).prop_map(Bound::Included),
        pick(IDS).prop_map(Bound::Excluded),
        Just(Bound::Unbounded),
    ]
}

fn read_strategy() -> impl Strategy<Value = Read> {
    prop_oneof![
        3 => pick(IDS).prop_map(Read::Get),
        1 => pick(UNIQUE).prop_map(Read::GetByUnique),
        4 => pick(GROUPS).prop_map(Read::IndexEq),
        2 => pick(TAGS).prop_map(Read::IndexEqTags),
        1 => pick(PREFIXES).prop_map(Read::IndexPrefix),
        2 => pick(PREFIXES).prop_map(Read::Prefix),
        1 => pick(PREFIXES).prop_map(Read::RangeAsPrefix),
        3 => (bound_strategy(), bound_strategy()).prop_map(|(lo, hi)| Read::Range(lo, hi)),
        1 => Just(Read::IndexIter),
        1 => Just(Read::Iter),
        1 => pick(NOTES).prop_map(Read::Note),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            pick(IDS),
            pick(GROUPS),
            proptest::collection::vec(pick(TAGS), 0..3),
            proptest::option::of(pick(UNIQUE)),
        )
            .prop_map(|(id, group, tags, unique)| Op::Put { id, group, tags, unique }),
        3 => pick(IDS).prop_map(Op::Del),
        1 => pick(NOTES).prop_map(Op::PutNote),
        1 => pick(NOTES).prop_map(Op::DelNote),
    ]
}

/// A watch set: its reads, its item limit, and whether it registers only after the
/// first commit (read before it: the late-registration comparison must catch it).
#[derive(Debug, Clone)]
struct SetSpec {
    reads: Vec<Read>,
    limit: usize,
    late: bool,
}

fn set_strategy() -> impl Strategy<Value = SetSpec> {
    (
        proptest::collection::vec(read_strategy(), 1..4),
        prop_oneof![4 => Just(usize::MAX), 1 => 1..3usize],
        any::<bool>(),
    )
        .prop_map(|(reads, limit, late)| SetSpec { reads, limit, late })
}

proptest! {
    #![proptest_config(Config::with_cases(64))]

    /// Which sets fired, after each of two commits, is exactly what the oracle says:
    /// a set fires iff a key it read (exact, in a prefix or range, or its table) has
    /// a different entry after the commit; a set registered late fires at once iff
    /// that happened between its read and its registration.
    #[test]
    fn fired_sets_match_a_brute_force_oracle(
        initial in proptest::collection::vec(op_strategy(), 0..12),
        sets in proptest::collection::vec(set_strategy(), 1..24),
        first in proptest::collection::vec(op_strategy(), 0..5),
        second in proptest::collection::vec(op_strategy(), 0..5),
    ) {
        let d = db2();
        let mut s = State::default();
        let mut n = 0;
        commit(&d, &mut s, &initial, &mut n);

        let s0 = s.clone();
        let snap = d.db.snapshot();
        let live: Vec<LiveSet> = sets
            .into_iter()
            .map(|spec| {
                let ws = WatchSet::with_limit(spec.limit);
                for r in &spec.reads {
                    r.run(&d, snap.watched(&ws));
                }
                let items = watched(&spec.reads, spec.limit);
                if !spec.late {
                    assert!(!register(&ws), "fired before any commit: {spec:?}");
                }
                (spec, items, ws)
            })
            .collect();
        drop(snap);

        commit(&d, &mut s, &first, &mut n);
        let s1 = s.clone();
        let ch01 = changed(&s0, &s1);
        let mut fired = Vec::new();
        for (spec, items, ws) in &live {
            if spec.late {
                register(ws);
            }
            let want = set_hit(items, &ch01);
            prop_assert_eq!(ws.is_fired(), want, "after commit 1: {:?} changed {:?}", spec, ch01);
            fired.push(want);
        }

        commit(&d, &mut s, &second, &mut n);
        let ch12 = changed(&s1, &s);
        for ((spec, items, ws), before) in live.iter().zip(&fired) {
            let want = *before || set_hit(items, &ch12);
            prop_assert_eq!(ws.is_fired(), want, "after commit 2: {:?} changed {:?}", spec, ch12);
        }
        drop(live);
        prop_assert_eq!(d.db.registered_watches(), 0);
    }
}
