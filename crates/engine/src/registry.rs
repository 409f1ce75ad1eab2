//! The registry of live watches: who waits on which key, range or table, and the
//! comparison that keeps a late registration from missing a commit.
//!
//! Commits look up the keys they changed here (under the database's registry lock) and
//! fire the signals they find; watch sets register and unregister here.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use super::Key;
use super::key::KeyBytes;
use super::root::{Root, RowMap};
use super::schema::TableId;
use super::watch::{Signal, WatchItem};

/// A range compared entry by entry on registration is capped at this many entries;
/// past it, a changed table counts as a changed range (a possible early wake, never a
/// missed one).
const RANGE_COMPARE_LIMIT: usize = 4096;

/// One registered waiter: the set's id (for removal) and its signal.
#[derive(Clone)]
struct Waiter {
    id: u64,
    signal: Arc<Signal>,
}

/// A watched range: its bounds and who waits on it.
type RangeWaiter = (Bound<Vec<u8>>, Bound<Vec<u8>>, Waiter);

#[derive(Default)]
struct MapWatchers {
    exact: HashMap<Key, Vec<Waiter>>,
    ranges: Vec<RangeWaiter>,
}

#[derive(Default)]
struct TableWatchers {
    whole: Vec<Waiter>,
    maps: Vec<MapWatchers>,
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
                    whole: Vec::new(),
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
        let waiter = Waiter {
            id,
            signal: Arc::clone(signal),
        };
        for item in items {
            let Some(t) = self.tables.get_mut(item_table(item)) else {
                continue;
            };
            t.count += 1;
            match item {
                WatchItem::Table { .. } => t.whole.push(waiter.clone()),
                WatchItem::Key { map, key, .. } => {
                    if let Some(m) = t.maps.get_mut(*map) {
                        m.exact.entry(key.clone()).or_default().push(waiter.clone());
                    }
                }
                WatchItem::Range { map, lo, hi, .. } => {
                    if let Some(m) = t.maps.get_mut(*map) {
                        m.ranges.push((lo.clone(), hi.clone(), waiter.clone()));
                    }
                }
            }
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
                WatchItem::Table { .. } => {
                    let n = t.whole.len();
                    t.whole.retain(|w| w.id != id);
                    n - t.whole.len()
                }
                WatchItem::Key { map, key, .. } => {
                    let Some(m) = t.maps.get_mut(*map) else {
                        continue;
                    };
                    let Some(list) = m.exact.get_mut(key) else {
                        continue;
                    };
                    let n = list.len();
                    list.retain(|w| w.id != id);
                    let removed = n - list.len();
                    if list.is_empty() {
                        m.exact.remove(key);
                    }
                    removed
                }
                WatchItem::Range { map, .. } => {
                    let Some(m) = t.maps.get_mut(*map) else {
                        continue;
                    };
                    let n = m.ranges.len();
                    m.ranges.retain(|(_, _, w)| w.id != id);
                    n - m.ranges.len()
                }
            };
            t.count = t.count.saturating_sub(removed);
        }
    }

    /// Fires the waiters of a changed key `key` of map `map` of `table`.
    pub(crate) fn fire_key(&self, table: TableId, map: usize, key: &[u8]) {
        let Some(t) = self.tables.get(table) else {
            return;
        };
        let Some(m) = t.maps.get(map) else {
            return;
        };
        if let Some(list) = m.exact.get(key) {
            for w in list {
                w.signal.fire();
            }
        }
        for (lo, hi, w) in &m.ranges {
            if !w.signal.is_fired() && in_range(key, lo, hi) {
                w.signal.fire();
            }
        }
    }

    /// Fires the whole-table waiters of a changed table.
    pub(crate) fn fire_table(&self, table: TableId) {
        if let Some(t) = self.tables.get(table) {
            for w in &t.whole {
                w.signal.fire();
            }
        }
    }

    /// Fires everything (the state was replaced).
    pub(crate) fn fire_all(&self) {
        for t in &self.tables {
            for w in &t.whole {
                w.signal.fire();
            }
            for m in &t.maps {
                m.exact.values().flatten().for_each(|w| w.signal.fire());
                m.ranges.iter().for_each(|(_, _, w)| w.signal.fire());
            }
        }
    }

    /// Number of registered items (for tests: dropped sets leave nothing behind).
    pub(crate) fn registered_items(&self) -> usize {
        self.tables
            .iter()
            .map(|t| {
                t.whole.len()
                    + t.maps
                        .iter()
                        .map(|m| m.ranges.len() + m.exact.values().map(Vec::len).sum::<usize>())
                        .sum::<usize>()
            })
            .sum()
    }
}

fn item_table(item: &WatchItem) -> TableId {
    match item {
        WatchItem::Key { table, .. }
        | WatchItem::Range { table, .. }
        | WatchItem::Table { table } => *table,
    }
}

pub(crate) fn in_range(key: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let above = match lo {
        Bound::Included(l) => key >= l.as_slice(),
        Bound::Excluded(l) => key > l.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(h) => key <= h.as_slice(),
        Bound::Excluded(h) => key < h.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
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
            WatchItem::Range { map, lo, hi, .. } => {
                match (base.map(table, *map), current.map(table, *map)) {
                    (Some(b), Some(c)) => range_differs(b, c, lo, hi),
                    _ => true,
                }
            }
        }
    })
}

fn range_differs(b: &RowMap, c: &RowMap, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let lo = lo.as_ref().map(|v| KeyBytes::new(v));
    let hi = hi.as_ref().map(|v| KeyBytes::new(v));
    let mut left = b.range::<_, KeyBytes>((lo, hi));
    let mut right = c.range::<_, KeyBytes>((lo, hi));
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
