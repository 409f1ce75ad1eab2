//! The fixture of the engine's watch and blocking-query tests: a table of items with a
//! non-unique `group` index, and a second, unrelated table.

use std::sync::Arc;
use std::time::Duration;

use schedstate_engine::{Db, Error, Index, Key, Schema, Table, WaitOutcome, WatchSet, WriteTxn};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: String,
    pub group: String,
    pub n: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Other {
    pub id: String,
    pub n: u64,
}

pub struct Fixture {
    pub db: Db,
    pub items: Table<Item>,
    pub by_group: Index<Item>,
    pub other: Table<Other>,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        let mut schema = Schema::new();
        let items = schema
            .table("items", |r: &Item| Key::str(&r.id))
            .expect("table");
        let by_group = schema
            .index(items, "group", false, |r: &Item| Some(Key::str(&r.group)))
            .expect("index");
        let other = schema
            .table("other", |r: &Other| Key::str(&r.id))
            .expect("table");
        Fixture {
            db: Db::new(schema),
            items,
            by_group,
            other,
        }
    }

    /// Commits `f` at the next log index; returns that index.
    pub fn write(&self, f: impl FnOnce(&mut WriteTxn)) -> u64 {
        let mut txn = loop {
            match self.db.begin_write(self.db.last_applied() + 1) {
                Ok(txn) => break txn,
                // Another writer took that index between the read and the lock.
                Err(Error::StaleIndex { .. }) => continue,
                Err(e) => panic!("begin_write: {e}"),
            }
        };
        f(&mut txn);
        txn.commit().expect("commit").index
    }

    /// Inserts or replaces item `id`.
    pub fn put(&self, id: &str, group: &str, n: u64) -> u64 {
        let items = self.items;
        self.write(|txn| {
            txn.insert(items, item(id, group, n)).expect("insert");
        })
    }

    /// Deletes item `id`.
    pub fn del(&self, id: &str) -> u64 {
        let items = self.items;
        self.write(|txn| {
            txn.delete(items, &Key::str(id)).expect("delete");
        })
    }

    /// Inserts or replaces row `id` of the other table.
    pub fn put_other(&self, id: &str, n: u64) -> u64 {
        let other = self.other;
        self.write(|txn| {
            txn.insert(
                other,
                Arc::new(Other {
                    id: id.to_string(),
                    n,
                }),
            )
            .expect("insert");
        })
    }
}

pub fn item(id: &str, group: &str, n: u64) -> Arc<Item> {
    Arc::new(Item {
        id: id.to_string(),
        group: group.to_string(),
        n,
    })
}

pub fn key(s: &str) -> Key {
    Key::str(s)
}

/// Registers `ws` (a zero wait does) and asserts it has not fired.
#[track_caller]
pub fn assert_quiet(ws: &WatchSet) {
    assert!(!ws.is_fired(), "watch set fired");
    assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::TimedOut);
}

/// Asserts `ws` has fired: a wait returns at once.
#[track_caller]
pub fn assert_fired(ws: &WatchSet) {
    assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::Changed);
    assert!(ws.is_fired());
}
