//! Loading a whole state at once (restoring a snapshot): rows are gathered first,
//! then every map of every table is built bottom-up from its sorted keys
//! ([`PMap::from_sorted`]) instead of one root-to-leaf insert per row and index.
//!
//! At 2,000,000 rows the inserts spent most of a restore searching nodes and moving
//! keys inside them; sorting once and filling each node exactly once does neither.
//! The result is the state the same rows inserted one by one would give: a later
//! row with a primary key seen before replaces the earlier one, and a unique index
//! key held by two rows is refused.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::key_order::{common_prefix, head};
use super::pmap::PMap;
use super::schema::{Row, Table, TableDef};
use super::txn::WriteTxn;
use super::{Error, Key, Result};

/// A restore being loaded. Nothing is visible to readers, and nothing is built,
/// until [`finish`](Self::finish) hands back the restore transaction to check and
/// commit; dropping it leaves the database as it was (and releases the writer).
pub struct BulkLoad {
    txn: WriteTxn,
    /// Per table: the rows added, in order, with their primary keys.
    rows: Vec<Vec<(Key, Row)>>,
}

impl BulkLoad {
    pub(crate) fn new(txn: WriteTxn) -> BulkLoad {
        let tables = txn.root_tables();
        BulkLoad {
            txn,
            rows: (0..tables).map(|_| Vec::new()).collect(),
        }
    }

    /// Adds `row` to `table` (its indexes are computed when the maps are built).
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] for a handle of another schema, or a row without a
    /// primary key.
    pub fn insert<V: Any + Send + Sync>(&mut self, table: Table<V>, row: Arc<V>) -> Result<()> {
        let schema = self.txn.table_def(table.schema, table.id)?;
        let def: &TableDef = &schema.tables[table.id];
        let row: Row = row;
        let pk = def.primary_key(&row)?;
        self.rows[table.id].push((pk, row));
        Ok(())
    }

    /// Sets the index recorded for `table` (see [`WriteTxn::set_table_index`]).
    pub fn set_table_index<V>(&mut self, table: Table<V>, index: u64) {
        self.txn.set_table_index(table, index);
    }

    /// Builds every map from the rows added and returns the restore transaction
    /// holding them: reads through [`WriteTxn::view`] see the restored state, its
    /// commit publishes it.
    ///
    /// # Errors
    /// [`Error::UniqueViolation`] if two rows share a unique index key; nothing is
    /// published.
    pub fn finish(mut self) -> Result<WriteTxn> {
        let schema = Arc::clone(&self.txn.root_mut().schema);
        // The maps are independent of each other: built on as many threads as the
        // machine has cores (a restore is all a starting server does), each taking
        // the next map not yet built.
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        for (id, rows) in std::mem::take(&mut self.rows).into_iter().enumerate() {
            let def = &schema.tables[id];
            let rows = last_of_each_key(rows);
            let count = def.indexes.len() + 1;
            let next = AtomicUsize::new(0);
            let build = || {
                let mut built = Vec::new();
                loop {
                    let map = next.fetch_add(1, Ordering::Relaxed);
                    if map >= count {
                        return built;
                    }
                    built.push((map, build_map(def, map, &rows)));
                }
            };
            let mut maps: Vec<(usize, Result<PMap<Row>>)> = if workers > 1 && count > 1 {
                std::thread::scope(|scope| {
                    let helpers: Vec<_> = (1..workers.min(count))
                        .map(|_| scope.spawn(build))
                        .collect();
                    let mut maps = build();
                    for helper in helpers {
                        match helper.join() {
                            Ok(built) => maps.extend(built),
                            Err(panic) => std::panic::resume_unwind(panic),
                        }
                    }
                    maps
                })
            } else {
                build()
            };
            maps.sort_by_key(|(map, _)| *map);
            self.txn.root_mut().tables[id].maps = maps
                .into_iter()
                .map(|(_, map)| map)
                .collect::<Result<_>>()?;
        }
        Ok(self.txn)
    }
}

/// Map `map` of a table (0: the primary map) over its `rows`.
fn build_map(def: &TableDef, map: usize, rows: &[(Key, Row)]) -> Result<PMap<Row>> {
    match map {
        0 => Ok(PMap::from_sorted(
            rows.iter().map(|(k, r)| (k.as_bytes(), Arc::clone(r))),
        )),
        m => {
            let index = &def.indexes[m - 1];
            index_map(def, m, index.unique, &index.name, rows)
        }
    }
}

/// `rows` sorted by primary key, the last row added for each key kept (as an
/// insert that replaces would). Snapshots list rows in key order, so the sort is a
/// check of an ordered run.
fn last_of_each_key(mut rows: Vec<(Key, Row)>) -> Vec<(Key, Row)> {
    // Stable: rows with one key stay in the order they were added.
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.dedup_by(|later, kept| {
        let dup = later.0 == kept.0;
        if dup {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        dup
    });
    rows
}

/// The keys of one index over `rows` (each row's keys in one shared buffer, so
/// two million entries cost two allocations), sorted, then built into a map.
fn index_map(
    def: &TableDef,
    map: usize,
    unique: bool,
    name: &str,
    rows: &[(Key, Row)],
) -> Result<PMap<Row>> {
    let mut bytes: Vec<u8> = Vec::new();
    // The key's place in `bytes` and the row's in `rows`.
    let mut spans: Vec<(usize, usize, usize)> = Vec::with_capacity(rows.len());
    let mut keys = Vec::new();
    for (r, (_, row)) in rows.iter().enumerate() {
        keys.clear();
        def.map_keys(map, row, &mut keys);
        for k in &keys {
            let start = bytes.len();
            bytes.extend_from_slice(k.as_bytes());
            spans.push((start, bytes.len(), r));
        }
    }
    // Index keys share long prefixes (a namespace, a node id): sorting compares the
    // eight bytes after the prefix all of them share as one integer first, and the
    // rest of the keys only when those are equal.
    let first = spans.first().map_or(&[][..], |e| &bytes[e.0..e.1]);
    let shared = spans
        .iter()
        .map(|e| common_prefix(first, &bytes[e.0..e.1]))
        .min()
        .unwrap_or(0);
    let mut entries: Vec<Entry> = spans
        .into_iter()
        .map(|(start, end, row)| Entry {
            head: head(&bytes[(start + shared).min(end)..end]),
            start,
            end,
            row,
        })
        .collect();
    let key = |e: &Entry| &bytes[e.start..e.end];
    // Past the prefix all share (equal heads may still differ in length: padding).
    let rest = |e: &Entry| &bytes[(e.start + shared).min(e.end)..e.end];
    entries.sort_unstable_by(|a, b| {
        a.head
            .cmp(&b.head)
            .then_with(|| rest(a).cmp(rest(b)))
            .then(a.row.cmp(&b.row))
    });
    // Equal keys: from one row (an index listing a key twice), kept once; from two
    // rows of a unique index, refused. A non-unique index appends the primary key,
    // so two rows never share a key there.
    let mut kept: Vec<Entry> = Vec::with_capacity(entries.len());
    for e in entries {
        match kept.last() {
            Some(last) if key(last) == key(&e) => {
                if last.row != e.row && unique {
                    return Err(Error::UniqueViolation {
                        table: def.name.to_string(),
                        index: name.to_string(),
                        key: format!("{:?}", Key::from_encoded(key(&e))),
                    });
                }
                *kept.last_mut().expect("kept has a last entry") = e;
            }
            _ => kept.push(e),
        }
    }
    Ok(PMap::from_sorted(
        kept.iter().map(|e| (key(e), Arc::clone(&rows[e.row].1))),
    ))
}

/// One index key of one row: where the key lies in the keys' buffer, its first
/// eight bytes after the shared prefix (zero padded, big-endian: integer order is
/// byte order), and the row's place.
struct Entry {
    head: u64,
    start: usize,
    end: usize,
    row: usize,
}
