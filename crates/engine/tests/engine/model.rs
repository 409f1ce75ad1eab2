//! Model-based test of the engine: random sequences of begin / insert / delete /
//! commit / abort / snapshot, run against the engine and against plain `BTreeMap`s, and
//! compared after every step (rows, key order, prefix and range scans, both secondary
//! indexes, snapshot isolation, table indexes, `last_applied`, change sets).
//!
//! 64 cases of up to 40 transitions by default; `PROPTEST_CASES=5000 cargo test --test
//! engine_model` runs more (proptest applies the variable on top of the config below).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use schedstate_engine::{
    ChangeKind, Db, Error, Index, Key, KeyBuilder, Schema, Snapshot, Table, View, WriteTxn,
};

// Small pools, so that keys collide, prefixes overlap and unique tags clash.
const IDS: [&str; 12] = [
    "a", "a1", "a2", "ab", "b", "b1", "ba", "bb", "c", "c1", "ca", "d",
];
/// "g1" and "g10": an index lookup of "g1" must not see "g10" rows.
const GROUPS: [&str; 3] = ["g1", "g10", "g2"];
const TAGS: [&str; 4] = ["t1", "t2", "t3", "t4"];
const PREFIXES: [&str; 8] = ["", "a", "a1", "b", "bb", "c", "e", "g"];
const NOTE_IDS: [&str; 3] = ["x", "y", "z"];
/// Snapshots held at once (the oldest is released past this).
const MAX_SNAPSHOTS: usize = 4;

const ITEMS: usize = 0;
const NOTES: usize = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    id: String,
    group: String,
    tag: Option<String>,
    n: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    id: String,
    v: u64,
}

/// A row of either table, as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Row {
    Item(Item),
    Note(Note),
}

/// One committed version in the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Version {
    items: BTreeMap<String, Item>,
    notes: BTreeMap<String, Note>,
    items_index: u64,
    notes_index: u64,
    last_applied: u64,
}

/// The open transaction in the model.
#[derive(Debug, Clone)]
struct OpenTxn {
    index: u64,
    /// The working state: the committed version plus this transaction's writes.
    work: Version,
    /// Every (table, id) a successful write touched.
    touched: BTreeSet<(usize, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ExpectedChange {
    table: String,
    id: String,
    kind: ChangeKind,
    before: Option<Row>,
    after: Option<Row>,
}

/// What the last transition must have returned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Nothing,
    Stale {
        index: u64,
        last_applied: u64,
    },
    Begun {
        index: u64,
    },
    UniqueViolation {
        tag: String,
    },
    Inserted {
        replaced: Option<Item>,
    },
    Deleted {
        removed: Option<Item>,
    },
    DeletedPrefix {
        count: usize,
    },
    NotePut {
        replaced: Option<Note>,
    },
    NoteDeleted {
        removed: Option<Note>,
    },
    Committed {
        index: u64,
        changes: Vec<ExpectedChange>,
    },
}

#[derive(Debug, Clone)]
struct ModelState {
    committed: Version,
    txn: Option<OpenTxn>,
    snapshots: Vec<Version>,
    outcome: Outcome,
}

#[derive(Debug, Clone)]
enum Op {
    /// Begin at `last_applied + offset` (stale when `offset <= 0`).
    Begin {
        offset: i8,
    },
    Insert(Item),
    Delete(String),
    DeletePrefix(String),
    PutNote(Note),
    DeleteNote(String),
    Commit,
    /// Drop the transaction.
    Abort,
    TakeSnapshot,
    CheckSnapshot(usize),
}

struct Model;

fn item_strategy() -> impl Strategy<Value = Item> {
    (
        prop::sample::select(&IDS[..]),
        prop::sample::select(&GROUPS[..]),
        prop::option::weighted(0.5, prop::sample::select(&TAGS[..])),
        0..4u64,
    )
        .prop_map(|(id, group, tag, n)| Item {
            id: id.to_string(),
            group: group.to_string(),
            tag: tag.map(str::to_string),
            n,
        })
}

fn id_strategy(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(pool).prop_map(str::to_string)
}

impl ReferenceStateMachine for Model {
    type State = ModelState;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<ModelState> {
        Just(ModelState {
            committed: Version::default(),
            txn: None,
            snapshots: Vec::new(),
            outcome: Outcome::Nothing,
        })
        .boxed()
    }

    fn transitions(state: &ModelState) -> BoxedStrategy<Op> {
        let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![(1, Just(Op::TakeSnapshot).boxed())];
        if !state.snapshots.is_empty() {
            arms.push((
                1,
                (0..state.snapshots.len())
                    .prop_map(Op::CheckSnapshot)
                    .boxed(),
            ));
        }
        if state.txn.is_none() {
            arms.push((
                5,
                prop_oneof![1 => -2i8..=0, 4 => 1i8..=3]
                    .prop_map(|offset| Op::Begin { offset })
                    .boxed(),
            ));
        } else {
            arms.extend([
                (8, item_strategy().prop_map(Op::Insert).boxed()),
                (3, id_strategy(&IDS).prop_map(Op::Delete).boxed()),
                (1, id_strategy(&PREFIXES).prop_map(Op::DeletePrefix).boxed()),
                (
                    2,
                    (id_strategy(&NOTE_IDS), 0..3u64)
                        .prop_map(|(id, v)| Op::PutNote(Note { id, v }))
                        .boxed(),
                ),
                (1, id_strategy(&NOTE_IDS).prop_map(Op::DeleteNote).boxed()),
                (3, Just(Op::Commit).boxed()),
                (1, Just(Op::Abort).boxed()),
            ]);
        }
        Union::new_weighted(arms).boxed()
    }

    fn preconditions(state: &ModelState, op: &Op) -> bool {
        match op {
            Op::Begin { .. } => state.txn.is_none(),
            Op::TakeSnapshot => true,
            Op::CheckSnapshot(i) => *i < state.snapshots.len(),
            _ => state.txn.is_some(),
        }
    }

    fn apply(mut state: ModelState, op: &Op) -> ModelState {
        state.outcome = Outcome::Nothing;
        match op {
            Op::Begin { offset } => {
                let last_applied = state.committed.last_applied;
                let index = begin_index(last_applied, *offset);
                if index <= last_applied {
                    state.outcome = Outcome::Stale {
                        index,
                        last_applied,
                    };
                } else {
                    state.txn = Some(OpenTxn {
                        index,
                        work: state.committed.clone(),
                        touched: BTreeSet::new(),
                    });
                    state.outcome = Outcome::Begun { index };
                }
            }
            Op::Insert(item) => {
                let txn = state.txn.as_mut().expect("precondition");
                let clash = item.tag.as_ref().filter(|tag| {
                    txn.work
                        .items
                        .values()
                        .any(|r| r.id != item.id && r.tag.as_ref() == Some(*tag))
                });
                state.outcome = match clash {
                    Some(tag) => Outcome::UniqueViolation { tag: tag.clone() },
                    None => {
                        txn.touched.insert((ITEMS, item.id.clone()));
                        let replaced = txn.work.items.insert(item.id.clone(), item.clone());
                        Outcome::Inserted { replaced }
                    }
                };
            }
            Op::Delete(id) => {
                let txn = state.txn.as_mut().expect("precondition");
                let removed = txn.work.items.remove(id);
                if removed.is_some() {
                    txn.touched.insert((ITEMS, id.clone()));
                }
                state.outcome = Outcome::Deleted { removed };
            }
            Op::DeletePrefix(prefix) => {
                let txn = state.txn.as_mut().expect("precondition");
                let doomed: Vec<String> = txn
                    .work
                    .items
                    .keys()
                    .filter(|k| k.starts_with(prefix.as_str()))
                    .cloned()
                    .collect();
                for id in &doomed {
                    txn.work.items.remove(id);
                    txn.touched.insert((ITEMS, id.clone()));
                }
                state.outcome = Outcome::DeletedPrefix {
                    count: doomed.len(),
                };
            }
            Op::PutNote(note) => {
                let txn = state.txn.as_mut().expect("precondition");
                txn.touched.insert((NOTES, note.id.clone()));
                let replaced = txn.work.notes.insert(note.id.clone(), note.clone());
                state.outcome = Outcome::NotePut { replaced };
            }
            Op::DeleteNote(id) => {
                let txn = state.txn.as_mut().expect("precondition");
                let removed = txn.work.notes.remove(id);
                if removed.is_some() {
                    txn.touched.insert((NOTES, id.clone()));
                }
                state.outcome = Outcome::NoteDeleted { removed };
            }
            Op::Commit => {
                let txn = state.txn.take().expect("precondition");
                let old = &state.committed;
                let changes: Vec<ExpectedChange> = txn
                    .touched
                    .iter()
                    .filter_map(|(table, id)| {
                        let (name, before, after) = if *table == ITEMS {
                            (
                                "items",
                                old.items.get(id).cloned().map(Row::Item),
                                txn.work.items.get(id).cloned().map(Row::Item),
                            )
                        } else {
                            (
                                "notes",
                                old.notes.get(id).cloned().map(Row::Note),
                                txn.work.notes.get(id).cloned().map(Row::Note),
                            )
                        };
                        // Every successful write stores a fresh row, so any touched key
                        // present before or after is a change; absent both times
                        // (insert then delete) collapses to nothing.
                        let kind = match (&before, &after) {
                            (None, None) => return None,
                            (None, Some(_)) => ChangeKind::Insert,
                            (Some(_), Some(_)) => ChangeKind::Update,
                            (Some(_), None) => ChangeKind::Delete,
                        };
                        Some(ExpectedChange {
                            table: name.to_string(),
                            id: id.clone(),
                            kind,
                            before,
                            after,
                        })
                    })
                    .collect();
                let mut next = txn.work;
                if changes.iter().any(|c| c.table == "items") {
                    next.items_index = txn.index;
                }
                if changes.iter().any(|c| c.table == "notes") {
                    next.notes_index = txn.index;
                }
                next.last_applied = txn.index;
                state.committed = next;
                state.outcome = Outcome::Committed {
                    index: txn.index,
                    changes,
                };
            }
            Op::Abort => state.txn = None,
            Op::TakeSnapshot => {
                state.snapshots.push(state.committed.clone());
                if state.snapshots.len() > MAX_SNAPSHOTS {
                    state.snapshots.remove(0);
                }
            }
            Op::CheckSnapshot(_) => {}
        }
        state
    }
}

fn begin_index(last_applied: u64, offset: i8) -> u64 {
    last_applied.saturating_add_signed(i64::from(offset))
}

/// The system under test.
struct Sut {
    db: Db,
    items: Table<Item>,
    notes: Table<Note>,
    by_group: Index<Item>,
    by_tag: Index<Item>,
    txn: Option<WriteTxn>,
    snapshots: Vec<Snapshot>,
}

fn new_sut() -> Sut {
    let mut schema = Schema::new();
    let items = schema
        .table("items", |r: &Item| Key::str(&r.id))
        .expect("table");
    let by_group = schema
        .index(items, "group", false, |r: &Item| Some(Key::str(&r.group)))
        .expect("index");
    let by_tag = schema
        .index(items, "tag", true, |r: &Item| {
            r.tag.as_deref().map(Key::str)
        })
        .expect("index");
    let notes = schema
        .table("notes", |r: &Note| Key::str(&r.id))
        .expect("table");
    Sut {
        db: Db::new(schema),
        items,
        notes,
        by_group,
        by_tag,
        txn: None,
        snapshots: Vec::new(),
    }
}

fn ids<'a>(rows: impl Iterator<Item = &'a Item>) -> Vec<String> {
    rows.map(|r| r.id.clone()).collect()
}

/// Checks every read of `view` against the model version `m`.
fn check_view(sut: &Sut, view: View<'_>, m: &Version) {
    let items = sut.items;

    // Full iteration: same rows, in primary-key order; keys are the rows' keys.
    let rows: Vec<Item> = view.iter(items).map(|r| (*r).clone()).collect();
    let expected: Vec<Item> = m.items.values().cloned().collect();
    assert_eq!(rows, expected, "full iteration");
    assert_eq!(view.len(items), m.items.len());
    for (k, r) in view.iter(items).with_keys() {
        assert_eq!(k, Key::str(&r.id).as_bytes());
    }

    // Exact gets, present and absent.
    for id in IDS {
        let key = Key::str(id);
        assert_eq!(
            view.get(items, &key).as_deref(),
            m.items.get(id),
            "get {id:?}"
        );
        assert_eq!(view.get_value(items, &key), m.items.get(id));
    }

    // Prefix scans.
    for p in PREFIXES {
        let got = ids(view
            .prefix(items, KeyBuilder::new().str_prefix(p).as_bytes())
            .borrowed());
        let want: Vec<String> = m
            .items
            .keys()
            .filter(|k| k.starts_with(p))
            .cloned()
            .collect();
        assert_eq!(got, want, "prefix {p:?}");
    }

    // Range scans.
    let ranges: [(Bound<&str>, Bound<&str>); 4] = [
        (Bound::Included("a1"), Bound::Excluded("b1")),
        (Bound::Excluded("a"), Bound::Included("c")),
        (Bound::Unbounded, Bound::Excluded("b")),
        (Bound::Included("ba"), Bound::Unbounded),
    ];
    for (lo, hi) in ranges {
        let (klo, khi) = (lo.map(Key::str), hi.map(Key::str));
        let got = ids(view
            .range(
                items,
                klo.as_ref().map(|k| k.as_bytes()),
                khi.as_ref().map(|k| k.as_bytes()),
            )
            .borrowed());
        let want: Vec<String> = m
            .items
            .range::<str, _>((lo, hi))
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(got, want, "range {lo:?}..{hi:?}");
    }

    // Non-unique index: exactly the rows of the group, in primary-key order.
    for g in GROUPS {
        let key = Key::str(g);
        let got = ids(view.index_eq(sut.by_group, &key).borrowed());
        let want: Vec<String> = m
            .items
            .values()
            .filter(|r| r.group == g)
            .map(|r| r.id.clone())
            .collect();
        assert_eq!(got, want, "index_eq group {g:?}");
        assert_eq!(
            view.get_by(sut.by_group, &key).map(|r| r.id.clone()),
            want.first().cloned(),
            "get_by group {g:?}"
        );
    }
    // Index prefix "g1" covers "g1" and "g10", ordered by (group, id).
    let mut want: Vec<(String, String)> = m
        .items
        .values()
        .filter(|r| r.group.starts_with("g1"))
        .map(|r| (r.group.clone(), r.id.clone()))
        .collect();
    want.sort();
    let got: Vec<(String, String)> = view
        .index_prefix(sut.by_group, KeyBuilder::new().str_prefix("g1").as_bytes())
        .borrowed()
        .map(|r| (r.group.clone(), r.id.clone()))
        .collect();
    assert_eq!(got, want, "index_prefix g1");
    let mut want: Vec<(String, String)> = m
        .items
        .values()
        .map(|r| (r.group.clone(), r.id.clone()))
        .collect();
    want.sort();
    let got: Vec<(String, String)> = view
        .index_iter(sut.by_group)
        .borrowed()
        .map(|r| (r.group.clone(), r.id.clone()))
        .collect();
    assert_eq!(got, want, "index_iter group");

    // Unique conditional index: at most one holder per tag, untagged rows absent.
    for t in TAGS {
        let holders: Vec<&Item> = m
            .items
            .values()
            .filter(|r| r.tag.as_deref() == Some(t))
            .collect();
        assert!(holders.len() <= 1, "model broke uniqueness of {t:?}");
        let key = Key::str(t);
        assert_eq!(
            view.get_by(sut.by_tag, &key).as_deref(),
            holders.first().copied(),
            "get_by tag {t:?}"
        );
        let got: Vec<Item> = view
            .index_eq(sut.by_tag, &key)
            .map(|r| (*r).clone())
            .collect();
        let want: Vec<Item> = holders.into_iter().cloned().collect();
        assert_eq!(got, want, "index_eq tag {t:?}");
    }
    let mut want: Vec<(String, String)> = m
        .items
        .values()
        .filter_map(|r| r.tag.clone().map(|t| (t, r.id.clone())))
        .collect();
    want.sort();
    let got: Vec<(String, String)> = view
        .index_iter(sut.by_tag)
        .borrowed()
        .map(|r| {
            (
                r.tag.clone().expect("untagged row in tag index"),
                r.id.clone(),
            )
        })
        .collect();
    assert_eq!(got, want, "index_iter tag");

    // The second table.
    let notes: Vec<Note> = view.iter(sut.notes).map(|r| (*r).clone()).collect();
    assert_eq!(notes, m.notes.values().cloned().collect::<Vec<_>>());
    for id in NOTE_IDS {
        assert_eq!(
            view.get(sut.notes, &Key::str(id)).as_deref(),
            m.notes.get(id)
        );
    }

    // Table indexes and the last applied index.
    assert_eq!(view.table_index(items), m.items_index, "items table index");
    assert_eq!(
        view.table_index(sut.notes),
        m.notes_index,
        "notes table index"
    );
    assert_eq!(view.table_index_by_name("items"), Some(m.items_index));
    assert_eq!(view.table_index_by_name("notes"), Some(m.notes_index));
    assert_eq!(view.table_index_by_name("nope"), None);
    assert_eq!(view.latest_index(), m.items_index.max(m.notes_index));
    assert_eq!(view.last_applied(), m.last_applied, "last_applied");
}

fn as_item(r: Option<Arc<Item>>) -> Option<Item> {
    r.map(|r| (*r).clone())
}

struct EngineTest;

impl StateMachineTest for EngineTest {
    type SystemUnderTest = Sut;
    type Reference = Model;

    fn init_test(_: &ModelState) -> Sut {
        new_sut()
    }

    fn apply(mut sut: Sut, state: &ModelState, op: Op) -> Sut {
        let items = sut.items;
        match op {
            Op::Begin { offset } => {
                let index = begin_index(sut.db.last_applied(), offset);
                match (sut.db.begin_write(index), &state.outcome) {
                    (Ok(txn), Outcome::Begun { index: want }) => {
                        assert_eq!(txn.index(), *want);
                        sut.txn = Some(txn);
                    }
                    (
                        Err(Error::StaleIndex {
                            index,
                            last_applied,
                        }),
                        Outcome::Stale {
                            index: want_index,
                            last_applied: want_last,
                        },
                    ) => {
                        assert_eq!((index, last_applied), (*want_index, *want_last));
                    }
                    (got, want) => panic!("begin: engine {:?}, model {want:?}", got.err()),
                }
            }
            Op::Insert(item) => {
                let txn = sut.txn.as_mut().expect("precondition");
                let got = txn.insert(items, Arc::new(item));
                match (got, &state.outcome) {
                    (Ok(replaced), Outcome::Inserted { replaced: want }) => {
                        assert_eq!(&as_item(replaced), want);
                    }
                    (
                        Err(Error::UniqueViolation { table, index, key }),
                        Outcome::UniqueViolation { tag },
                    ) => {
                        assert_eq!(table, "items");
                        assert_eq!(index, "tag");
                        assert_eq!(key, format!("{:?}", Key::str(tag)));
                    }
                    (got, want) => panic!("insert: engine {got:?}, model {want:?}"),
                }
            }
            Op::Delete(id) => {
                let txn = sut.txn.as_mut().expect("precondition");
                let removed = txn.delete(items, &Key::str(&id)).expect("delete");
                assert_eq!(
                    Outcome::Deleted {
                        removed: as_item(removed)
                    },
                    state.outcome
                );
            }
            Op::DeletePrefix(prefix) => {
                let txn = sut.txn.as_mut().expect("precondition");
                let count = txn
                    .delete_prefix(items, KeyBuilder::new().str_prefix(&prefix).as_bytes())
                    .expect("delete_prefix");
                assert_eq!(Outcome::DeletedPrefix { count }, state.outcome);
            }
            Op::PutNote(note) => {
                let txn = sut.txn.as_mut().expect("precondition");
                let replaced = txn.insert(sut.notes, Arc::new(note)).expect("insert note");
                assert_eq!(
                    Outcome::NotePut {
                        replaced: replaced.map(|r| (*r).clone())
                    },
                    state.outcome
                );
            }
            Op::DeleteNote(id) => {
                let txn = sut.txn.as_mut().expect("precondition");
                let removed = txn.delete(sut.notes, &Key::str(&id)).expect("delete note");
                assert_eq!(
                    Outcome::NoteDeleted {
                        removed: removed.map(|r| (*r).clone())
                    },
                    state.outcome
                );
            }
            Op::Commit => {
                let txn = sut.txn.take().expect("precondition");
                let info = txn.commit().expect("commit");
                let changes: Vec<ExpectedChange> = info
                    .changes
                    .iter()
                    .map(|c| {
                        let id = c.key().decode_strs().expect("string key").remove(0);
                        assert_eq!(c.key(), &Key::str(&id));
                        let (before, after) = match c.table() {
                            "items" => (
                                as_item(c.before::<Item>()).map(Row::Item),
                                as_item(c.after::<Item>()).map(Row::Item),
                            ),
                            "notes" => (
                                c.before::<Note>().map(|r| Row::Note((*r).clone())),
                                c.after::<Note>().map(|r| Row::Note((*r).clone())),
                            ),
                            other => panic!("change in unknown table {other:?}"),
                        };
                        ExpectedChange {
                            table: c.table().to_string(),
                            id,
                            kind: c.kind(),
                            before,
                            after,
                        }
                    })
                    .collect();
                assert_eq!(
                    Outcome::Committed {
                        index: info.index,
                        changes
                    },
                    state.outcome
                );
            }
            Op::Abort => drop(sut.txn.take().expect("precondition")),
            Op::TakeSnapshot => {
                sut.snapshots.push(sut.db.snapshot());
                if sut.snapshots.len() > MAX_SNAPSHOTS {
                    sut.snapshots.remove(0);
                }
            }
            Op::CheckSnapshot(i) => {
                // A held snapshot keeps exactly the contents it had when taken.
                check_view(&sut, sut.snapshots[i].view(), &state.snapshots[i]);
            }
        }
        sut
    }

    fn check_invariants(sut: &Sut, state: &ModelState) {
        assert_eq!(sut.db.last_applied(), state.committed.last_applied);
        // Readers see the committed version only, never the open transaction's writes.
        check_view(sut, sut.db.snapshot().view(), &state.committed);
        // The transaction reads its own writes.
        if let (Some(txn), Some(model)) = (&sut.txn, &state.txn) {
            assert_eq!(txn.index(), model.index);
            check_view(sut, txn.view(), &model.work);
        }
        assert_eq!(sut.txn.is_some(), state.txn.is_some());
        assert_eq!(sut.snapshots.len(), state.snapshots.len());
    }
}

prop_state_machine! {
    #![proptest_config(Config::with_cases(64))]

    /// Random transaction sequences behave exactly like the `BTreeMap` model.
    #[test]
    fn engine_matches_btreemap_model(sequential 1..40 => EngineTest);
}

// ---- Focused examples of the rules the model checks. ----

fn item(id: &str, group: &str, tag: Option<&str>, n: u64) -> Arc<Item> {
    Arc::new(Item {
        id: id.to_string(),
        group: group.to_string(),
        tag: tag.map(str::to_string),
        n,
    })
}

#[test]
fn insert_then_delete_in_one_txn_collapses_and_keeps_table_index() {
    let sut = new_sut();
    let mut txn = sut.db.begin_write(3).unwrap();
    txn.insert(sut.items, item("a", "g1", None, 0)).unwrap();
    txn.commit().unwrap();

    let mut txn = sut.db.begin_write(5).unwrap();
    txn.insert(sut.items, item("b", "g1", Some("t1"), 0))
        .unwrap();
    txn.delete(sut.items, &Key::str("b")).unwrap();
    let info = txn.commit().unwrap();
    assert!(info.changes.is_empty(), "{:?}", info.changes);
    assert_eq!(info.index, 5);

    let snap = sut.db.snapshot();
    let view = snap.view();
    assert_eq!(
        view.table_index(sut.items),
        3,
        "nothing changed: index stays"
    );
    assert_eq!(view.last_applied(), 5, "the write was still accepted");
    assert!(view.get_by(sut.by_tag, &Key::str("t1")).is_none());
}

#[test]
fn change_kinds_are_collapsed_per_key() {
    let sut = new_sut();
    let mut txn = sut.db.begin_write(1).unwrap();
    txn.insert(sut.items, item("u", "g1", None, 0)).unwrap();
    txn.insert(sut.items, item("d", "g1", None, 0)).unwrap();
    txn.commit().unwrap();

    let mut txn = sut.db.begin_write(2).unwrap();
    txn.insert(sut.items, item("u", "g1", None, 1)).unwrap();
    txn.insert(sut.items, item("u", "g2", None, 2)).unwrap();
    txn.delete(sut.items, &Key::str("d")).unwrap();
    txn.insert(sut.items, item("i", "g1", None, 0)).unwrap();
    txn.insert(sut.items, item("i", "g1", None, 9)).unwrap();
    let info = txn.commit().unwrap();
    let summary: Vec<(String, ChangeKind)> = info
        .changes
        .iter()
        .map(|c| (c.key().decode_strs().unwrap().remove(0), c.kind()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("d".to_string(), ChangeKind::Delete),
            ("i".to_string(), ChangeKind::Insert),
            ("u".to_string(), ChangeKind::Update),
        ]
    );
    let u = &info.changes[2];
    assert_eq!(u.before::<Item>().unwrap().n, 0, "before = committed row");
    assert_eq!(u.after::<Item>().unwrap().n, 2, "after = last write");
    assert_eq!(info.changes[1].after::<Item>().unwrap().n, 9);
    assert!(info.changes[0].after::<Item>().is_none());
    assert!(u.before::<Note>().is_none(), "wrong type reads as None");
}

#[test]
fn unique_violation_leaves_txn_unchanged() {
    let sut = new_sut();
    let mut txn = sut.db.begin_write(1).unwrap();
    txn.insert(sut.items, item("a", "g1", Some("t1"), 0))
        .unwrap();
    txn.insert(sut.items, item("b", "g2", Some("t2"), 0))
        .unwrap();

    // "b" tries to take "t1" from "a": refused, "b" keeps its old row everywhere.
    let err = txn
        .insert(sut.items, item("b", "g1", Some("t1"), 7))
        .unwrap_err();
    assert!(matches!(err, Error::UniqueViolation { .. }), "{err:?}");
    let view = txn.view();
    assert_eq!(view.get(sut.items, &Key::str("b")).unwrap().n, 0);
    assert_eq!(view.get_by(sut.by_tag, &Key::str("t1")).unwrap().id, "a");
    assert_eq!(view.get_by(sut.by_tag, &Key::str("t2")).unwrap().id, "b");
    assert_eq!(view.index_eq(sut.by_group, &Key::str("g1")).count(), 1);

    // A row may keep its own tag when it is updated.
    txn.insert(sut.items, item("a", "g2", Some("t1"), 1))
        .unwrap();
    let info = txn.commit().unwrap();
    assert_eq!(info.changes.len(), 2);
}

#[test]
fn stale_index_is_rejected_and_nothing_is_published() {
    let sut = new_sut();
    assert!(matches!(
        sut.db.begin_write(0),
        Err(Error::StaleIndex {
            index: 0,
            last_applied: 0
        })
    ));
    let mut txn = sut.db.begin_write(10).unwrap();
    txn.insert(sut.items, item("a", "g1", None, 0)).unwrap();
    txn.commit().unwrap();
    for index in [9, 10] {
        match sut.db.begin_write(index) {
            Err(Error::StaleIndex {
                index: i,
                last_applied: 10,
            }) => assert_eq!(i, index),
            other => panic!("expected StaleIndex, got {:?}", other.err()),
        }
    }
    // The failed begins did not hold the writer, and published nothing.
    assert_eq!(sut.db.last_applied(), 10);
    let txn = sut.db.begin_write(11).unwrap();
    drop(txn);
    assert_eq!(
        sut.db.last_applied(),
        10,
        "an aborted txn publishes nothing"
    );
}
