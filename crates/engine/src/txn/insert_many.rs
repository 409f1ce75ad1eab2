//! [`WriteTxn::insert_many`]: many rows of one table inserted as one batch.
//!
//! A command that writes thousands of rows (an allocation update of a whole batch of
//! nodes) inserted each into every map of its table from the root down: a search per
//! map per row, and a leaf shifted per key. Here the rows' keys are gathered per map,
//! sorted, and put in with [`PMap::insert_sorted`](crate::PMap::insert_sorted), which
//! visits each node once per batch; the rows they replace are looked up together
//! ([`PMap::get_many`](crate::PMap::get_many)). What the transaction holds after,
//! and what it records, is what a loop of [`WriteTxn::insert`] would give.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Record, WriteTxn};
use crate::key_order::sorted_order;
use crate::schema::{Row, Table, TableDef, TableId};
use crate::view::downcast;
use crate::{Key, Result};

/// Fewer rows go in one by one: a batch's gathering, sorting and merging costs more
/// than it saves when it reaches a handful of leaves (a node's two plugin instances).
const BATCH_MIN: usize = 8;

impl WriteTxn {
    /// Inserts or replaces each of `rows` in order, maintaining every index, as a loop
    /// of [`insert`](Self::insert) would, and returns what each replaced: `out[i]` is
    /// the row with `rows[i]`'s primary key just before `rows[i]` went in (an earlier
    /// row of the batch, for a key given twice).
    ///
    /// In a table without unique indexes the rows go in as one batch: each map of the
    /// table takes its keys sorted, in one walk down its tree. With a unique index, or
    /// fewer than eight rows, they are inserted one by one (each checked against the
    /// ones before it).
    ///
    /// # Errors
    /// As [`insert`](Self::insert): the first row refused stops the batch, with the rows
    /// before it inserted and nothing of it or after it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use schedstate_engine::{Db, Key, Schema};
    ///
    /// let mut schema = Schema::new();
    /// let t = schema.table("t", |r: &(String, u32)| Key::str(&r.0)).unwrap();
    /// let db = Db::new(schema);
    /// let mut txn = db.begin_write(1).unwrap();
    /// let rows = ["b", "a", "b"].iter().zip(1..).map(|(k, n)| Arc::new((k.to_string(), n)));
    /// let replaced = txn.insert_many(t, rows.collect()).unwrap();
    /// assert_eq!(replaced.iter().map(|r| r.as_ref().map(|r| r.1)).collect::<Vec<_>>(),
    ///            [None, None, Some(1)]);
    /// assert_eq!(txn.view().get(t, &Key::str("b")).unwrap().1, 3);
    /// ```
    pub fn insert_many<V: Any + Send + Sync>(
        &mut self,
        table: Table<V>,
        rows: Vec<Arc<V>>,
    ) -> Result<Vec<Option<Arc<V>>>> {
        let schema = self.table_def(table.schema, table.id)?;
        let def: &TableDef = &schema.tables[table.id];
        if rows.len() < BATCH_MIN || def.indexes.iter().any(|i| i.unique) {
            return rows.into_iter().map(|r| self.insert(table, r)).collect();
        }
        let mut rows: Vec<Row> = rows.into_iter().map(|r| r as Row).collect();
        let mut pks = Vec::with_capacity(rows.len());
        let mut refused = None;
        for row in &rows {
            match def.primary_key(row) {
                Ok(pk) => pks.push(pk),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        // The rows before the one refused go in; it and those after do not.
        rows.truncate(pks.len());
        let replaced = self.insert_batch(table.id, def, &pks, &rows);
        match refused {
            Some(e) => Err(e),
            None => Ok(replaced
                .iter()
                .map(|r| r.as_ref().and_then(downcast))
                .collect()),
        }
    }

    /// Whether this transaction has recorded no change to a key of `table` from
    /// `first` to `last`.
    fn no_change_between(&self, table: TableId, first: &Key, last: &Key) -> bool {
        self.changes
            .range((table, first.clone())..=(table, last.clone()))
            .next()
            .is_none()
    }

    /// The batch itself: `rows[i]` has primary key `pks[i]`; returns what each replaced.
    fn insert_batch(
        &mut self,
        table: usize,
        def: &TableDef,
        pks: &[Key],
        rows: &[Row],
    ) -> Vec<Option<Row>> {
        if rows.is_empty() {
            return Vec::new();
        }
        // The rows by key, each key's rows in their order: the last one stays.
        let order = sorted_order(pks);
        let groups: Vec<&[usize]> = order.chunk_by(|&a, &b| pks[a] == pks[b]).collect();
        let data = &self.root.tables[table];
        let mut stored = Vec::with_capacity(groups.len());
        let firsts: Vec<&[u8]> = groups.iter().map(|g| pks[g[0]].as_bytes()).collect();
        data.maps[0].get_many(&firsts, &mut stored);
        let olds: Vec<Option<Row>> = stored.iter().map(|r| r.cloned()).collect();
        drop(stored);

        // What each row replaced, and the change records, as one insert after the other
        // would make them (a row put over itself is no change). Where no savepoint
        // journals the records and none of this transaction's earlier changes lies
        // among the batch's keys, a key's records collapse to one (the stored row, the
        // last), gathered in key order and merged into the change set in one pass.
        let mut replaced: Vec<Option<Row>> = vec![None; rows.len()];
        let merge = self.journal.is_none()
            && groups.len() * 4 >= self.changes.len()
            && self.no_change_between(table, &pks[groups[0][0]], &pks[order[order.len() - 1]]);
        let mut merged = Vec::new();
        for (group, old) in groups.iter().zip(&olds) {
            let mut now = old.clone();
            let mut changed = false;
            for &i in *group {
                replaced[i].clone_from(&now);
                if now.as_ref().is_some_and(|n| Arc::ptr_eq(n, &rows[i])) {
                    continue;
                }
                changed = true;
                if !merge {
                    let after = Some(Arc::clone(&rows[i]));
                    self.record(table, pks[i].clone(), now.clone(), after);
                }
                now = Some(Arc::clone(&rows[i]));
            }
            if merge && changed && !self.restore {
                let last = *group.last().expect("a group has a row");
                merged.push(((table, pks[last].clone()), (old.clone(), now)));
            }
        }
        if !merged.is_empty() {
            // Sorted already: built bottom-up, then merged with the change set.
            let mut batch: BTreeMap<(TableId, Key), Record> = merged.into_iter().collect();
            self.changes.append(&mut batch);
        }

        // The keys whose row changes: the last row of each, over the stored one.
        let mut changed: Vec<(usize, Option<&Row>)> = Vec::with_capacity(groups.len());
        for (group, old) in groups.iter().zip(&olds) {
            let last = *group.last().expect("a group has a row");
            if !old.as_ref().is_some_and(|o| Arc::ptr_eq(o, &rows[last])) {
                changed.push((last, old.as_ref()));
            }
        }
        let maps = &mut self.root.tables[table].maps;
        // Every index key of each row in one pass over the rows (each row's fields
        // are read once, not once per index); per map: the keys, their rows, and the
        // keys the stored rows had and the new ones lack.
        let indexes = maps.len() - 1;
        let mut keys: Vec<Vec<Key>> = (0..indexes)
            .map(|_| Vec::with_capacity(changed.len()))
            .collect();
        let mut owners: Vec<Vec<usize>> = (0..indexes)
            .map(|_| Vec::with_capacity(changed.len()))
            .collect();
        let mut gone: Vec<Vec<Key>> = vec![Vec::new(); indexes];
        let mut old_keys = Vec::new();
        for &(i, old) in &changed {
            for m in 0..indexes {
                let start = keys[m].len();
                def.index_keys(m + 1, &rows[i], &pks[i], &mut keys[m]);
                owners[m].resize(keys[m].len(), i);
                if let Some(old) = old {
                    old_keys.clear();
                    def.index_keys(m + 1, old, &pks[i], &mut old_keys);
                    let new_keys = &keys[m][start..];
                    gone[m].extend(old_keys.drain(..).filter(|k| !new_keys.contains(k)));
                }
            }
        }
        for (m, map) in maps.iter_mut().skip(1).enumerate() {
            for k in &gone[m] {
                map.remove(k);
            }
            // Keys of different rows differ (a non-unique index ends its keys with the
            // primary key); a row listing one key twice gives it once.
            let (keys, owners) = (&keys[m], &owners[m]);
            let mut entries: Vec<(&Key, Row)> = Vec::with_capacity(keys.len());
            for k in sorted_order(keys) {
                if entries.last().is_none_or(|(last, _)| **last != keys[k]) {
                    entries.push((&keys[k], Arc::clone(&rows[owners[k]])));
                }
            }
            map.insert_sorted(entries);
        }
        let primary: Vec<(&Key, Row)> = changed
            .iter()
            .map(|&(i, _)| (&pks[i], Arc::clone(&rows[i])))
            .collect();
        maps[0].insert_sorted(primary);
        replaced
    }
}
