//! The registry of live watches: who waits on which key, prefix, range or table, and
//! the comparison that keeps a late registration from missing a commit.
//!
//! Commits look up the keys they changed here (under the database's registry lock) and
//! fire the signals they find; watch sets register and unregister here.
//!
//! A commit's cost must not grow with the number of waiters (every client of a cluster
//! keeps a blocking query open on its own allocations), so nothing here is scanned per
//! changed key. For each changed key of a map:
//! - exact keys: one hash lookup;
//! - prefixes (every `index_eq` of a non-unique index, every prefix scan): one hash
//!   lookup per distinct prefix *length* registered on the map, of the changed key's own
//!   prefix of that length — usually one length, the encoded index value;
//! - other ranges: a search of an interval tree, O(log n) per range found;
//! - whole tables: the list of the table, once per commit.
//!
//! Each is exact: a waiter fires only if a key it read (or a key inside a prefix or
//! range it read) changed.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use super::Key;
use super::intervals::Intervals;
use super::pmap::KeyRef;
use super::root::{Root, RowMap};
use super::schema::TableId;
use super::waiters::Waiters;
use super::watch::{Signal, WatchItem};

/// A range compared entry by entry on registration is capped at this many entries;
/// past it, a changed table counts as a changed range (a possible early wake, never a
/// missed one).
const RANGE_COMPARE_LIMIT: usize = 4096;

/// The watches on one map (primary or secondary index) of a table.
#[derive(Default)]
struct MapWatchers {
    /// Exact keys, present or absent.
    exact: HashMap<Key, Waiters>,
    /// Prefixes: a changed key fires the prefixes it starts with.
    prefixes: HashMap<Key, Waiters>,
    /// Number of distinct registered prefixes of each length: the lengths at which a
    /// changed key is cut to look its prefixes up.
    prefix_lens: BTreeMap<usize, usize>,
    /// Every other range.
    ranges: Intervals,
}

impl MapWatchers {
    fn fire_key(&self, key: &[u8]) {
        if let Some(list) = self.exact.get(key) {
            list.fire();
        }
        if !self.prefixes.is_empty() {
            for &len in self.prefix_lens.range(..=key.len()).map(|(len, _)| len) {
                if let Some(list) = key.get(..len).and_then(|p| self.prefixes.get(p)) {
                    list.fire();
                }
            }
        }
        if self.ranges.len() > 0 {
            self.ranges.for_each_containing(key, &mut |s| s.fire());
        }
    }

    fn add_prefix(&mut self, prefix: &Key, id: u64, signal: Arc<Signal>) {
        if let Some(list) = self.prefixes.get_mut(prefix.as_bytes()) {
            list.push(id, signal);
            return;
        }
        let mut list = Waiters::default();
        list.push(id, signal);
        self.prefixes.insert(prefix.clone(), list);
        *self.prefix_lens.entry(prefix.len()).or_default() += 1;
    }

    fn remove_prefix(&mut self, prefix: &Key, id: u64) -> bool {
        let Some(list) = self.prefixes.get_mut(prefix.as_bytes()) else {
            return false;
        };
        let removed = list.remove(id);
        if list.is_empty() {
            self.prefixes.remove(prefix.as_bytes());
            if let Some(n) = self.prefix_lens.get_mut(&prefix.len()) {
                *n -= 1;
                if *n == 0 {
                    self.prefix_lens.remove(&prefix.len());
                }
            }
        }
        removed
    }

    fn remove_exact(&mut self, key: &Key, id: u64) -> bool {
        let Some(list) = self.exact.get_mut(key.as_bytes()) else {
            return false;
        };
        let removed = list.remove(id);
        if list.is_empty() {
            self.exact.remove(key.as_bytes());
        }
        removed
    }

    fn fire_all(&self) {
        self.exact.values().for_each(Waiters::fire);
        self.prefixes.values().for_each(Waiters::fire);
        self.ranges.for_each(&mut |s| s.fire());
    }

    fn len(&self) -> usize {
        self.exact.values().map(Waiters::len).sum::<usize>()
            + self.prefixes.values().map(Waiters::len).sum::<usize>()
            + self.ranges.len()
    }
}

#[derive(Default)]
struct TableWatchers {
    whole: Waiters,
    maps: Vec<MapWatchers>,
    /// Registered items on this table, all kinds: a commit skips a table without any.
    count: usize,
}

/// Every live watch of one database, by table and map, guarded by the database's
/// registry lock. Commits fire from it after publishing their version.
#[derive(Default)]
pub(crate) struct Registry {
    next_id: u64,
    tables: Vec<TableWatchers>,
}

impl Registry {
    pub(crate) fn new(maps_per_table: impl Iterator<Item = usize>) -> Registry {
        Registry {
            next_id: 1,
            tables: maps_per_table
                .map(|n| TableWatchers {
                    whole: Waiters::default(),
                    maps: (0..n).map(|_| MapWatchers::default()).collect(),
                    count: 0,
                })
                .collect(),
        }
    }

    /// Whether any watch is registered on `table`.
    pub(crate) fn watches_table(&self, table: TableId) -> bool {
        self.tables.get(table).is_some_and(|t| t.count > 0)
    }

    /// Registers `items` under `signal`, unless the items already changed between
    /// `base` and `current`, in which case the signal fires and nothing is kept.
    ///
    /// Ids increase with every call: the waiter lists rely on it (`waiters.rs`).
    pub(crate) fn register(
        &mut self,
        base: &Root,
        current: &Root,
        items: &[WatchItem],
        signal: &Arc<Signal>,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if changed_since(base, current, items) {
            signal.fire();
            return id;
        }
        for item in items {
            let Some(t) = self.tables.get_mut(item_table(item)) else {
                continue;
            };
            let signal = Arc::clone(signal);
            match item {
                WatchItem::Table { .. } => t.whole.push(id, signal),
                WatchItem::Key { map, key, .. } => {
                    let Some(m) = t.maps.get_mut(*map) else {
                        continue;
                    };
                    match m.exact.get_mut(key.as_bytes()) {
                        Some(list) => list.push(id, signal),
                        None => {
                            let mut list = Waiters::default();
                            list.push(id, signal);
                            m.exact.insert(key.clone(), list);
                        }
                    }
                }
                WatchItem::Prefix { map, prefix, .. } => {
                    let Some(m) = t.maps.get_mut(*map) else {
                        continue;
                    };
                    m.add_prefix(prefix, id, signal);
                }
                WatchItem::Range { map, lo, hi, .. } => {
                    let Some(m) = t.maps.get_mut(*map) else {
                        continue;
                    };
                    m.ranges.insert(lo.clone(), hi.clone(), id, signal);
                }
            }
            t.count += 1;
        }
        id
    }

    /// Removes every registration of set `id` (the same `items` it registered).
    pub(crate) fn unregister(&mut self, id: u64, items: &[WatchItem]) {
        for item in items {
            let Some(t) = self.tables.get_mut(item_table(item)) else {
                continue;
            };
            let removed = match item {
                WatchItem::Table { .. } => t.whole.remove(id),
                WatchItem::Key { map, key, .. } => t
                    .maps
                    .get_mut(*map)
                    .is_some_and(|m| m.remove_exact(key, id)),
                WatchItem::Prefix { map, prefix, .. } => t
                    .maps
                    .get_mut(*map)
                    .is_some_and(|m| m.remove_prefix(prefix, id)),
                WatchItem::Range { map, lo, hi, .. } => t
                    .maps
                    .get_mut(*map)
                    .is_some_and(|m| m.ranges.remove(lo, hi, id)),
            };
            if removed {
                t.count = t.count.saturating_sub(1);
            }
        }
    }

    /// Fires the waiters of a changed key `key` of map `map` of `table`.
    pub(crate) fn fire_key(&self, table: TableId, map: usize, key: &[u8]) {
        if let Some(m) = self.tables.get(table).and_then(|t| t.maps.get(map)) {
            m.fire_key(key);
        }
    }

    /// Fires the whole-table waiters of a changed table.
    pub(crate) fn fire_table(&self, table: TableId) {
        if let Some(t) = self.tables.get(table) {
            t.whole.fire();
        }
    }

    /// Fires everything (the state was replaced).
    pub(crate) fn fire_all(&self) {
        for t in &self.tables {
            t.whole.fire();
            t.maps.iter().for_each(MapWatchers::fire_all);
        }
    }

    /// Number of registered items (for tests: dropped sets leave nothing behind).
    pub(crate) fn registered_items(&self) -> usize {
        self.tables
            .iter()
            .map(|t| t.whole.len() + t.maps.iter().map(MapWatchers::len).sum::<usize>())
            .sum()
    }
}

fn item_table(item: &WatchItem) -> TableId {
    match item {
        WatchItem::Key { table, .. }
        | WatchItem::Prefix { table, .. }
        | WatchItem::Range { table, .. }
        | WatchItem::Table { table } => *table,
    }
}

/// Whether anything `items` read in `base` differs in `current`.
fn changed_since(base: &Root, current: &Root, items: &[WatchItem]) -> bool {
    if base.epoch != current.epoch {
        return true;
    }
    if base.seq == current.seq {
        return false;
    }
    items.iter().any(|item| {
        let table = item_table(item);
        if base.table_index.get(table) == current.table_index.get(table) {
            return false;
        }
        match item {
            WatchItem::Table { .. } => true,
            WatchItem::Key { map, key, .. } => {
                match (base.map(table, *map), current.map(table, *map)) {
                    (Some(b), Some(c)) => match (b.get(key), c.get(key)) {
                        (None, None) => false,
                        (Some(x), Some(y)) => !Arc::ptr_eq(x, y),
                        _ => true,
                    },
                    _ => true,
                }
            }
            WatchItem::Prefix { map, prefix, .. } => {
                match (base.map(table, *map), current.map(table, *map)) {
                    (Some(b), Some(c)) => prefix_differs(b, c, prefix),
                    _ => true,
                }
            }
            WatchItem::Range { map, lo, hi, .. } => {
                match (base.map(table, *map), current.map(table, *map)) {
                    (Some(b), Some(c)) => range_differs(b, c, lo, hi),
                    _ => true,
                }
            }
        }
    })
}

fn prefix_differs(b: &RowMap, c: &RowMap, prefix: &[u8]) -> bool {
    let from: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(prefix), Bound::Unbounded);
    let left = b.range(from).take_while(|(k, _)| k.starts_with(prefix));
    let right = c.range(from).take_while(|(k, _)| k.starts_with(prefix));
    entries_differ(left, right)
}

fn range_differs(b: &RowMap, c: &RowMap, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let lo = lo.as_ref().map(Vec::as_slice);
    let hi = hi.as_ref().map(Vec::as_slice);
    entries_differ(b.range((lo, hi)), c.range((lo, hi)))
}

/// Whether two runs of entries differ (keys, or rows by pointer); past
/// `RANGE_COMPARE_LIMIT` entries they are taken to differ.
fn entries_differ<'a>(
    mut left: impl Iterator<Item = (KeyRef<'a>, &'a super::schema::Row)>,
    mut right: impl Iterator<Item = (KeyRef<'a>, &'a super::schema::Row)>,
) -> bool {
    for _ in 0..RANGE_COMPARE_LIMIT {
        match (left.next(), right.next()) {
            (None, None) => return false,
            (Some((k1, v1)), Some((k2, v2))) => {
                if k1 != k2 || !Arc::ptr_eq(v1, v2) {
                    return true;
                }
            }
            _ => return true,
        }
    }
    true
}
