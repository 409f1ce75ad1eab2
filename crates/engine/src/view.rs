//! Reads: exact lookups, prefix and range scans, whole-table iteration.
//!
//! A [`View`] reads one version — a [`Snapshot`](super::Snapshot) or the working state
//! of a [`WriteTxn`](super::WriteTxn). A view made with
//! [`Snapshot::watched`](super::Snapshot::watched) also records every key and range it
//! reads into a [`WatchSet`], so a blocking query can later wait for exactly those to
//! change.

use std::any::Any;
use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;

use super::key::prefix_successor;
use super::pmap::{Iter as MapIter, KeyRef};
use super::prefetch::prefetch;
use super::root::{Root, RowMap};
use super::schema::{Index, Row, Table, TableId};
use super::watch::{WatchItem, WatchSet};
use super::{IndexInconsistency, Key};

/// A read-only view of one database version.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub(crate) root: &'a Root,
    pub(crate) watch: Option<&'a WatchSet>,
}

/// Bounds of a scan over encoded keys.
type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

impl<'a> View<'a> {
    fn map(&self, schema: u64, table: TableId, map: usize) -> Option<&'a RowMap> {
        if schema != self.root.schema.id {
            return None;
        }
        self.root.map(table, map)
    }

    fn watch_key(&self, table: TableId, map: usize, key: &[u8]) {
        if let Some(ws) = self.watch {
            ws.add(
                WatchItem::Key {
                    table,
                    map,
                    key: Key::from_encoded(key),
                },
                table,
            );
        }
    }

    fn watch_range(&self, table: TableId, map: usize, range: &Range) {
        let Some(ws) = self.watch else {
            return;
        };
        // A range that is exactly "every key starting with p" is watched as that
        // prefix: found by lookup instead of in the interval tree.
        match range {
            (Bound::Unbounded, Bound::Unbounded) => return self.watch_prefix(table, map, &[]),
            (Bound::Included(lo), Bound::Excluded(hi))
                if prefix_successor(lo).is_some_and(|end| end.as_slice() == hi.as_slice()) =>
            {
                return self.watch_prefix(table, map, lo);
            }
            _ => {}
        }
        ws.add(
            WatchItem::Range {
                table,
                map,
                lo: range.0.clone(),
                hi: range.1.clone(),
            },
            table,
        );
    }

    /// Watches every key of the map that starts with `prefix`: the whole table for the
    /// empty prefix of the primary map, otherwise a prefix item (looked up by the
    /// changed key's own prefix, not scanned; see `registry.rs`).
    fn watch_prefix(&self, table: TableId, map: usize, prefix: &[u8]) {
        if let Some(ws) = self.watch {
            let item = if prefix.is_empty() && map == 0 {
                WatchItem::Table { table }
            } else {
                WatchItem::Prefix {
                    table,
                    map,
                    prefix: Key::from_encoded(prefix),
                }
            };
            ws.add(item, table);
        }
    }

    /// The row with primary key `key`, if any. Watches that key (present or absent).
    pub fn get<V: Any + Send + Sync>(&self, table: Table<V>, key: &[u8]) -> Option<Arc<V>> {
        self.get_ref(table, key).and_then(downcast)
    }

    /// Like [`get`](Self::get), borrowing the row instead of counting a reference.
    pub fn get_ref<V: Any + Send + Sync>(&self, table: Table<V>, key: &[u8]) -> Option<&'a Row> {
        self.watch_key(table.id, 0, key);
        self.map(table.schema, table.id, 0)?.get(key)
    }

    /// The rows with primary keys `keys`: calls `each(i, row)` for each in order, with
    /// what [`get`](Self::get) of `keys[i]` returns, and watches every key. For many
    /// keys of a large table it is faster than a `get` each: the lookups descend
    /// together so that their cache misses overlap (`pmap/batch.rs`), and each row is
    /// asked for a few turns before its own. Keys in ascending order do best.
    pub fn get_many<V: Any + Send + Sync, K: AsRef<[u8]>>(
        &self,
        table: Table<V>,
        keys: &[K],
        mut each: impl FnMut(usize, Option<Arc<V>>),
    ) {
        /// How many rows ahead of the one being handed out are asked for.
        const AHEAD: usize = 8;
        for k in keys {
            self.watch_key(table.id, 0, k.as_ref());
        }
        let Some(map) = self.map(table.schema, table.id, 0) else {
            (0..keys.len()).for_each(|i| each(i, None));
            return;
        };
        let mut rows = Vec::new();
        map.get_many(keys, &mut rows);
        let ask = |row: Option<&Row>| {
            if let Some(row) = row {
                // The row and, just before it, its reference counts.
                let p = Arc::as_ptr(row).cast::<u8>();
                prefetch(p.wrapping_sub(16));
                prefetch(p);
            }
        };
        rows.iter().take(AHEAD).for_each(|r| ask(*r));
        for (i, row) in rows.iter().enumerate() {
            if let Some(later) = rows.get(i + AHEAD) {
                ask(*later);
            }
            each(i, row.and_then(downcast));
        }
    }

    /// The row with primary key `key`, borrowed as its type.
    pub fn get_value<V: Any + Send + Sync>(&self, table: Table<V>, key: &[u8]) -> Option<&'a V> {
        self.get_ref(table, key)?.downcast_ref::<V>()
    }

    /// The row whose key in `index` is exactly `key`: the only one for a unique index,
    /// the one with the smallest primary key otherwise. Watches that index key.
    pub fn get_by<V: Any + Send + Sync>(&self, index: Index<V>, key: &[u8]) -> Option<Arc<V>> {
        if index.unique {
            self.watch_key(index.table, index.map, key);
            let map = self.map(index.schema, index.table, index.map)?;
            map.get(key).and_then(downcast)
        } else {
            self.index_eq(index, key).next()
        }
    }

    /// Every row of `table` in primary-key order. Watches the whole table.
    pub fn iter<V: Any + Send + Sync>(&self, table: Table<V>) -> Rows<'a, V> {
        self.scan(
            table.schema,
            table.id,
            0,
            (Bound::Unbounded, Bound::Unbounded),
        )
    }

    /// Rows whose primary key starts with `prefix`, in key order. Watches that range.
    pub fn prefix<V: Any + Send + Sync>(&self, table: Table<V>, prefix: &[u8]) -> Rows<'a, V> {
        self.scan_prefix(table.schema, table.id, 0, prefix)
    }

    /// Rows whose primary key lies within `(lo, hi)`, in key order. Watches that range.
    pub fn range<V: Any + Send + Sync>(
        &self,
        table: Table<V>,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Rows<'a, V> {
        let range = (lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec));
        self.scan(table.schema, table.id, 0, range)
    }

    /// Rows whose key in `index` is exactly `key` (for a non-unique index: every row
    /// with that value), in index order. Watches that index value: a commit wakes the
    /// watch only if it adds, changes or removes a row with that value.
    pub fn index_eq<V: Any + Send + Sync>(&self, index: Index<V>, key: &[u8]) -> Rows<'a, V> {
        if index.unique {
            self.watch_key(index.table, index.map, key);
            let row = self
                .map(index.schema, index.table, index.map)
                .and_then(|m| m.get_key_value(key));
            return Rows {
                inner: RowsInner::One(row),
                _row: PhantomData,
            };
        }
        self.scan_prefix(index.schema, index.table, index.map, key)
    }

    /// Rows whose key in `index` starts with `prefix`, in index order. Watches that
    /// range.
    pub fn index_prefix<V: Any + Send + Sync>(
        &self,
        index: Index<V>,
        prefix: &[u8],
    ) -> Rows<'a, V> {
        self.scan_prefix(index.schema, index.table, index.map, prefix)
    }

    /// Every row reachable through `index`, in index order. Watches the whole index.
    pub fn index_iter<V: Any + Send + Sync>(&self, index: Index<V>) -> Rows<'a, V> {
        self.scan(
            index.schema,
            index.table,
            index.map,
            (Bound::Unbounded, Bound::Unbounded),
        )
    }

    fn scan<V>(&self, schema: u64, table: TableId, map: usize, range: Range) -> Rows<'a, V> {
        self.watch_range(table, map, &range);
        let inner = match self.map(schema, table, map) {
            Some(m) => RowsInner::Range(m.range::<(Bound<&[u8]>, Bound<&[u8]>)>((
                as_ref_bound(&range.0),
                as_ref_bound(&range.1),
            ))),
            None => RowsInner::One(None),
        };
        Rows {
            inner,
            _row: PhantomData,
        }
    }

    /// A prefix scan is the range from the prefix to its successor. Its end is
    /// found in the leaf it starts in, mostly from the leaf's group numbers (an
    /// index's entries of one id share a group) or else with a second search there;
    /// the scan then never reads a key's bytes, only the values beside them. Checking
    /// each key for the prefix instead would read every key of the scan (an index
    /// entry is ~76 bytes: ten entries are twelve cache lines).
    fn scan_prefix<V>(
        &self,
        schema: u64,
        table: TableId,
        map: usize,
        prefix: &[u8],
    ) -> Rows<'a, V> {
        self.watch_prefix(table, map, prefix);
        let inner = match self.map(schema, table, map) {
            Some(m) => RowsInner::Range(m.prefix(prefix)),
            None => RowsInner::One(None),
        };
        Rows {
            inner,
            _row: PhantomData,
        }
    }

    /// Number of rows in `table` (not watched).
    pub fn len<V>(&self, table: Table<V>) -> usize {
        self.map(table.schema, table.id, 0).map_or(0, RowMap::len)
    }

    /// The log index of the last commit that changed `table` (0 if none did).
    pub fn table_index<V>(&self, table: Table<V>) -> u64 {
        if table.schema != self.root.schema.id {
            return 0;
        }
        self.root.table_index.get(table.id).copied().unwrap_or(0)
    }

    /// The log index of the last commit that deleted a row of `table` (0 if none
    /// did). An answer that found no row answers with it: the row's absence can only
    /// have begun at a delete, or before the table ever held it, and a later insert
    /// of it comes at a greater index. After a restore it is the table index the
    /// restore set (a snapshot does not record deletes; the table index is at least
    /// as late as any delete before it), so it is never earlier than the truth.
    pub fn delete_index<V>(&self, table: Table<V>) -> u64 {
        if table.schema != self.root.schema.id {
            return 0;
        }
        self.root.delete_index.get(table.id).copied().unwrap_or(0)
    }

    /// The log index of the last commit that changed the table called `name`, or
    /// `None` for an unknown name.
    pub fn table_index_by_name(&self, name: &str) -> Option<u64> {
        let pos = self
            .root
            .schema
            .tables
            .iter()
            .position(|t| &*t.name == name)?;
        self.root.table_index.get(pos).copied()
    }

    /// The largest table index.
    pub fn latest_index(&self) -> u64 {
        self.root.latest_index()
    }

    /// The log index of the last accepted write (moved even by writes that changed
    /// nothing).
    pub fn last_applied(&self) -> u64 {
        self.root.last_applied
    }

    /// Checks that every secondary index agrees with its table: each row is reachable
    /// through each of its index keys (as the very same row), no index holds an entry
    /// without its row, every row sits under its own primary key, and no table index
    /// exceeds the last applied index. Returns the first disagreement found. O(rows).
    ///
    /// # Errors
    /// The first [`IndexInconsistency`] found.
    pub fn verify_indexes(&self) -> Result<(), IndexInconsistency> {
        let root = self.root;
        let mut keys = Vec::new();
        for (t, def) in root.schema.tables.iter().enumerate() {
            let Some(data) = root.tables.get(t) else {
                return Err(IndexInconsistency::MissingTable {
                    table: def.name.to_string(),
                });
            };
            let table_index = root.table_index.get(t).copied().unwrap_or(0);
            if table_index > root.last_applied {
                return Err(IndexInconsistency::TableIndexAhead {
                    table: def.name.to_string(),
                    table_index,
                    last_applied: root.last_applied,
                });
            }
            let mut expected = vec![0usize; data.maps.len()];
            for (pk, row) in data.maps[0].iter() {
                keys.clear();
                def.map_keys(0, row, &mut keys);
                if keys.first().is_none_or(|k| pk != *k.as_bytes()) {
                    return Err(IndexInconsistency::MisplacedRow {
                        table: def.name.to_string(),
                        key: format!("{pk:?}"),
                    });
                }
                expected[0] += 1;
                for (map, count) in expected.iter_mut().enumerate().skip(1) {
                    keys.clear();
                    def.map_keys(map, row, &mut keys);
                    keys.sort_unstable();
                    keys.dedup();
                    for k in &keys {
                        match data.maps[map].get(k) {
                            Some(found) if Arc::ptr_eq(found, row) => {}
                            _ => {
                                return Err(IndexInconsistency::MissingEntry {
                                    table: def.name.to_string(),
                                    index: def.indexes[map - 1].name.to_string(),
                                    key: format!("{k:?}"),
                                    row: format!("{pk:?}"),
                                });
                            }
                        }
                    }
                    *count += keys.len();
                }
            }
            for (map, count) in expected.iter().enumerate() {
                if data.maps[map].len() != *count {
                    let index = match map {
                        0 => "(primary)".to_string(),
                        m => def.indexes[m - 1].name.to_string(),
                    };
                    return Err(IndexInconsistency::EntryCount {
                        table: def.name.to_string(),
                        index,
                        entries: data.maps[map].len(),
                        rows_account_for: *count,
                    });
                }
            }
        }
        Ok(())
    }
}

fn as_ref_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

pub(crate) fn downcast<V: Any + Send + Sync>(row: &Row) -> Option<Arc<V>> {
    Arc::clone(row).downcast::<V>().ok()
}

// The range variant is two cursors (~260 bytes); a `Rows` lives on the caller's stack
// for one scan, and boxing it would allocate on every scan.
#[allow(clippy::large_enum_variant)]
enum RowsInner<'a> {
    Range(MapIter<'a, Row>),
    One(Option<(KeyRef<'a>, &'a Row)>),
}

impl<'a> RowsInner<'a> {
    #[inline]
    fn next_entry(&mut self) -> Option<(KeyRef<'a>, &'a Row)> {
        match self {
            RowsInner::Range(r) => r.next(),
            RowsInner::One(r) => r.take(),
        }
    }

    /// The next row, without reading its key.
    #[inline]
    fn next_row(&mut self) -> Option<&'a Row> {
        match self {
            RowsInner::Range(r) => r.next_value(),
            RowsInner::One(r) => r.take().map(|(_, row)| row),
        }
    }
}

/// An iterator over rows of one type, in key order.
pub struct Rows<'a, V> {
    inner: RowsInner<'a>,
    _row: PhantomData<fn() -> V>,
}

impl<'a, V: Any + Send + Sync> Rows<'a, V> {
    /// Iterates `(encoded key, row)` pairs instead of rows, borrowing the keys (as
    /// the map stores them) and the rows.
    pub fn with_keys(mut self) -> impl Iterator<Item = (KeyRef<'a>, &'a V)> {
        std::iter::from_fn(move || self.inner.next_entry())
            .filter_map(|(k, r)| r.downcast_ref::<V>().map(|v| (k, v)))
    }

    /// Iterates borrowed rows instead of counted references: no reference count is
    /// touched, so a scan reads nothing of the rows it does not look at.
    pub fn borrowed(mut self) -> impl Iterator<Item = &'a V> {
        std::iter::from_fn(move || self.inner.next_row()).filter_map(|r| r.downcast_ref::<V>())
    }
}

impl<V: Any + Send + Sync> Iterator for Rows<'_, V> {
    type Item = Arc<V>;

    fn next(&mut self) -> Option<Arc<V>> {
        loop {
            let row = self.inner.next_row()?;
            if let Some(v) = downcast(row) {
                return Some(v);
            }
        }
    }
}
