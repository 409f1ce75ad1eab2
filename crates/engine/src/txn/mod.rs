//! Write transactions: one at a time, on a private copy of the root, published whole
//! on commit or dropped without a trace.

mod change;
mod insert_many;
mod publish;

pub use change::{Change, ChangeKind, CommitInfo};
pub(crate) use publish::Fire;

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::database::Shared;
use super::reclaim::{WriterLock, retire_all};
use super::root::Root;
use super::schema::{Row, Table, TableDef, TableId};
use super::view::{View, downcast};
use super::{Error, Key, Result};

/// The single write transaction in progress.
///
/// Reads through [`view`](Self::view) see the transaction's own writes. [`commit`]
/// publishes everything at once; dropping the transaction (or a panic while it is
/// open) discards everything and releases the writer lock.
///
/// [`commit`]: Self::commit
pub struct WriteTxn {
    shared: Arc<Shared>,
    writer: WriterLock,
    root: Root,
    index: u64,
    restore: bool,
    /// Per (table, primary key): the row before the transaction and the row now.
    changes: BTreeMap<(TableId, Key), Record>,
    /// Once a savepoint was taken: every change-set entry as it was before each
    /// `record`, newest last, so a rollback undoes only what followed its savepoint.
    journal: Option<Vec<Undo>>,
}

/// One key's entry of the change set: its row before the transaction, and now.
type Record = (Option<Row>, Option<Row>);

/// A change-set entry as it was before one write (`None`: absent).
type Undo = ((TableId, Key), Option<Record>);

/// A transaction's state as of [`WriteTxn::savepoint`]: a position in the
/// transaction's undo journal (and, in a restore transaction, which keeps no journal,
/// an O(1) copy of the persistent root).
pub struct Savepoint {
    root: Option<Root>,
    journal_len: usize,
}

/// Sets the row at primary key `key` of `table` from `now` back to `was`, index
/// entries included (a rollback: `was` held the key before, so no unique index can
/// refuse it).
fn put_back(root: &mut Root, table: TableId, key: &Key, now: Option<&Row>, was: Option<Row>) {
    let schema = Arc::clone(&root.schema);
    let def: &TableDef = &schema.tables[table];
    let data = &mut root.tables[table];
    let (mut old_keys, mut new_keys) = (Vec::new(), Vec::new());
    for map in 1..data.maps.len() {
        old_keys.clear();
        new_keys.clear();
        if let Some(now) = now {
            def.map_keys(map, now, &mut old_keys);
        }
        if let Some(was) = &was {
            def.map_keys(map, was, &mut new_keys);
        }
        let m = &mut data.maps[map];
        for k in old_keys.iter().filter(|k| !new_keys.contains(k)) {
            m.remove(k);
        }
        if let Some(was) = &was {
            for k in &new_keys {
                m.insert(k, Arc::clone(was));
            }
        }
    }
    match was {
        Some(was) => {
            data.maps[0].insert(key, was);
        }
        None => {
            data.maps[0].remove(key);
        }
    }
}

fn same_row(a: &Option<Row>, b: &Option<Row>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
        _ => false,
    }
}

impl WriteTxn {
    pub(crate) fn new(
        shared: Arc<Shared>,
        writer: WriterLock,
        root: Root,
        index: u64,
        restore: bool,
    ) -> WriteTxn {
        WriteTxn {
            shared,
            writer,
            root,
            index,
            restore,
            changes: BTreeMap::new(),
            journal: None,
        }
    }

    /// Marks the transaction's current state, to [`rollback_to`](Self::rollback_to)
    /// later: O(1). From the first savepoint on, every write journals the change-set
    /// entry it replaced; a rollback walks the journal back, putting each row it
    /// names back in the tables (with its index entries) as it was at the savepoint.
    /// So a batch of n operations with a savepoint each costs O(n), not O(n²), and
    /// the tables are not shared with the savepoint: a write after it changes the
    /// transaction's own nodes in place instead of copying their paths again (a copy
    /// of the root per savepoint made every command of a replicated batch re-copy the
    /// paths the commands before it had copied already).
    /// Lets one transaction hold several independent operations, each kept or undone
    /// on its own (a batch of commands where the rules refuse some).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use schedstate_engine::{Db, Key, Schema};
    ///
    /// let mut schema = Schema::new();
    /// let t = schema.table::<String, _>("t", |s| Key::str(s)).unwrap();
    /// let db = Db::new(schema);
    /// let mut txn = db.begin_write(1).unwrap();
    /// txn.insert(t, Arc::new("kept".to_string())).unwrap();
    /// let mark = txn.savepoint();
    /// txn.insert(t, Arc::new("undone".to_string())).unwrap();
    /// txn.rollback_to(mark);
    /// let info = txn.commit().unwrap();
    /// assert_eq!(info.changes.len(), 1);
    /// assert!(db.snapshot().view().get(t, &Key::str("undone")).is_none());
    /// ```
    pub fn savepoint(&mut self) -> Savepoint {
        let journal = self.journal.get_or_insert_with(Vec::new);
        Savepoint {
            // A restore records no changes (so no journal): it keeps the tables.
            root: self.restore.then(|| self.root.clone()),
            journal_len: journal.len(),
        }
    }

    /// Puts the transaction back in the state [`savepoint`](Self::savepoint) marked:
    /// every write since is undone, as if never made. The savepoint must come from
    /// this transaction (one from another transaction restores a foreign state).
    pub fn rollback_to(&mut self, savepoint: Savepoint) {
        let tables_kept = savepoint.root.is_some();
        if let Some(root) = savepoint.root {
            self.root = root;
        }
        let Some(journal) = &mut self.journal else {
            return;
        };
        // Newest first: when an entry is undone, the row its key holds in the tables
        // is the one that write put there (every later write to the key is undone
        // already), and the row to put back is the one the entry replaced.
        while journal.len() > savepoint.journal_len {
            let Some(((table, key), prior)) = journal.pop() else {
                break;
            };
            let entry = match &prior {
                Some(entry) => self.changes.insert((table, key.clone()), entry.clone()),
                None => self.changes.remove(&(table, key.clone())),
            };
            let Some((before, now)) = entry else {
                continue;
            };
            let was = match prior {
                Some((_, was)) => was,
                None => before,
            };
            if !tables_kept {
                put_back(&mut self.root, table, &key, now.as_ref(), was);
            }
        }
    }

    /// The log index this transaction commits at.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Reads of the transaction's current state, including its own writes.
    pub fn view(&self) -> View<'_> {
        View {
            root: &self.root,
            watch: None,
        }
    }

    /// How many tables the schema has (for the bulk loader).
    pub(crate) fn root_tables(&self) -> usize {
        self.root.tables.len()
    }

    /// The version being built (for the bulk loader, which sets whole maps).
    pub(crate) fn root_mut(&mut self) -> &mut Root {
        &mut self.root
    }

    pub(crate) fn table_def(&self, schema: u64, table: TableId) -> Result<Arc<super::Schema>> {
        if schema != self.root.schema.id || table >= self.root.schema.tables.len() {
            return Err(Error::ForeignHandle {
                table: format!("#{table}"),
            });
        }
        Ok(Arc::clone(&self.root.schema))
    }

    fn record(&mut self, table: TableId, key: Key, before: Option<Row>, after: Option<Row>) {
        if self.restore {
            return;
        }
        if let Some(journal) = &mut self.journal {
            let key = (table, key.clone());
            let prior = self.changes.get(&key).cloned();
            journal.push((key, prior));
        }
        self.changes
            .entry((table, key))
            .and_modify(|c| c.1 = after.clone())
            .or_insert((before, after));
    }

    /// Inserts or replaces the row with `row`'s primary key, maintaining every index.
    /// Returns the row it replaced.
    ///
    /// # Errors
    /// [`Error::UniqueViolation`] if a unique index key of `row` belongs to another
    /// row; [`Error::ForeignHandle`] for a handle of another schema. On error nothing
    /// was changed.
    pub fn insert<V: Any + Send + Sync>(
        &mut self,
        table: Table<V>,
        row: Arc<V>,
    ) -> Result<Option<Arc<V>>> {
        let schema = self.table_def(table.schema, table.id)?;
        let def: &TableDef = &schema.tables[table.id];
        let row: Row = row;
        let pk = def.primary_key(&row)?;
        let data = &self.root.tables[table.id];
        let old = data.maps[0].get(&pk).cloned();
        if let Some(old) = &old
            && Arc::ptr_eq(old, &row)
        {
            return Ok(downcast(old));
        }

        // Plan every index change before touching anything, so a unique violation
        // leaves the transaction as it was.
        let mut plans = Vec::with_capacity(def.indexes.len());
        for (i, index) in def.indexes.iter().enumerate() {
            let map = i + 1;
            let mut old_keys = Vec::new();
            if let Some(old) = &old {
                def.map_keys(map, old, &mut old_keys);
            }
            let mut new_keys = Vec::new();
            def.map_keys(map, &row, &mut new_keys);
            if index.unique {
                for k in &new_keys {
                    if old_keys.contains(k) {
                        continue;
                    }
                    if let Some(holder) = data.maps[map].get(k) {
                        let mut holder_pk = Vec::with_capacity(1);
                        def.map_keys(0, holder, &mut holder_pk);
                        if holder_pk.first() != Some(&pk) {
                            return Err(Error::UniqueViolation {
                                table: def.name.to_string(),
                                index: index.name.clone(),
                                key: format!("{k:?}"),
                            });
                        }
                    }
                }
            }
            plans.push((map, old_keys, new_keys));
        }

        let data = &mut self.root.tables[table.id];
        for (map, old_keys, new_keys) in plans {
            let m = &mut data.maps[map];
            for k in old_keys.iter().filter(|k| !new_keys.contains(k)) {
                m.remove(k);
            }
            for k in new_keys {
                m.insert(&k, Arc::clone(&row));
            }
        }
        data.maps[0].insert(&pk, Arc::clone(&row));
        self.record(table.id, pk, old.clone(), Some(row));
        Ok(old.as_ref().and_then(downcast))
    }

    /// Deletes the row with primary key `key`, maintaining every index. Returns it, or
    /// `None` if there was none (not an error).
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] for a handle of another schema.
    pub fn delete<V: Any + Send + Sync>(
        &mut self,
        table: Table<V>,
        key: &[u8],
    ) -> Result<Option<Arc<V>>> {
        let schema = self.table_def(table.schema, table.id)?;
        let def = &schema.tables[table.id];
        let data = &mut self.root.tables[table.id];
        let Some(old) = data.maps[0].remove(key) else {
            return Ok(None);
        };
        let pk = Key::from_encoded(key);
        let mut keys = Vec::new();
        for map in 1..data.maps.len() {
            keys.clear();
            def.map_keys(map, &old, &mut keys);
            for k in &keys {
                data.maps[map].remove(k);
            }
        }
        let out = downcast(&old);
        self.record(table.id, pk, Some(old), None);
        Ok(out)
    }

    /// Deletes every row whose primary key starts with `prefix`; returns how many.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] for a handle of another schema.
    pub fn delete_prefix<V: Any + Send + Sync>(
        &mut self,
        table: Table<V>,
        prefix: &[u8],
    ) -> Result<usize> {
        self.table_def(table.schema, table.id)?;
        let keys: Vec<Key> = self
            .view()
            .prefix(table, prefix)
            .with_keys()
            .map(|(k, _)| Key::from_encoded(&k.to_vec()))
            .collect();
        for k in &keys {
            self.delete(table, k)?;
        }
        Ok(keys.len())
    }

    /// In a restore transaction, sets the index recorded for `table`. Ignored in an
    /// ordinary transaction, where commits compute table indexes themselves.
    ///
    /// The table's delete index (see [`View::delete_index`]) is set to the same index:
    /// a snapshot does not record when rows were deleted, and the table index is at
    /// least as late as any delete before it, so answers built on it stay correct.
    pub fn set_table_index<V>(&mut self, table: Table<V>, index: u64) {
        if self.restore
            && table.schema == self.root.schema.id
            && let Some(slot) = self.root.table_index.get_mut(table.id)
        {
            *slot = index;
            if let Some(deleted) = self.root.delete_index.get_mut(table.id) {
                *deleted = index;
            }
        }
    }

    /// Publishes the transaction atomically, then wakes the watches of exactly the keys
    /// and ranges it changed (all watches for a restore), then releases the writer.
    ///
    /// # Errors
    /// None today: the index was validated when the transaction began and nobody else
    /// can write meanwhile. The `Result` leaves room for durable commits.
    pub fn commit(self) -> Result<CommitInfo> {
        let index = self.index;
        let (shared, writer, root, fire) = self.finish();
        let restore = fire.restore;
        // Staged versions under this one are published with it (their watches fire
        // first): readers never see a version without the ones before it.
        let (superseded, mut fires) = shared.publish(|staged| {
            let mut versions = staged.take_all();
            versions.push((Arc::new(root), fire));
            versions
        });
        drop(writer);
        // The old versions are not freed here: the thread a commit wakes is often
        // scheduled on the writer's core (the kernel's wake-affine placement) and runs
        // only once the writer returns, so frees here would add to every wake-up. They
        // are parked and freed by the next write before it takes the writer lock.
        // Except after a restore: the whole old state is garbage then, too much to keep
        // until a next write that may not come soon, and it woke every watch anyway.
        if restore {
            drop(superseded);
            shared.retired.drain();
        } else {
            retire_all(superseded);
        }
        let changes = fires.pop().map(|f| f.changes).unwrap_or_default();
        tracing::trace!(index, changes = changes.len(), "commit");
        Ok(CommitInfo { index, changes })
    }

    /// Commits without publishing: the new version is queued (see `staged.rs`) and the
    /// writer lock released; readers see it only once [`Db::publish_through`] reaches
    /// its sequence number, which this returns with what it changed. The next write
    /// builds on it.
    ///
    /// [`Db::publish_through`]: crate::Db::publish_through
    ///
    /// # Errors
    /// None yet; the `Result` keeps room for checks at commit time.
    pub fn stage(self) -> Result<(u64, CommitInfo)> {
        let index = self.index;
        let (shared, writer, root, fire) = self.finish();
        let seq = root.seq;
        let info = CommitInfo {
            index,
            changes: fire.changes.clone(),
        };
        shared.staged.lock().push(Arc::new(root), fire);
        drop(writer);
        Ok((seq, info))
    }

    /// The new version and what its publication must fire.
    fn finish(self) -> (Arc<Shared>, WriterLock, Root, Fire) {
        let WriteTxn {
            shared,
            writer,
            mut root,
            index,
            restore,
            changes: raw,
            journal: _,
        } = self;
        let schema = Arc::clone(&root.schema);
        let mut changes = Vec::with_capacity(raw.len());
        let mut changed_tables = vec![false; schema.tables.len()];
        let mut deleted_tables = vec![false; schema.tables.len()];
        let mut change_tables = Vec::with_capacity(raw.len());
        for ((table, key), (before, after)) in raw {
            if same_row(&before, &after) {
                continue;
            }
            changed_tables[table] = true;
            // Collapsed: a row inserted and deleted again in this transaction is no
            // delete (it is skipped above), so only rows that existed before count.
            deleted_tables[table] |= before.is_some() && after.is_none();
            change_tables.push(table);
            changes.push(Change {
                table: Arc::clone(&schema.tables[table].name),
                key,
                before,
                after,
            });
        }
        if !restore {
            for (slot, changed) in root.table_index.iter_mut().zip(&changed_tables) {
                if *changed {
                    *slot = index;
                }
            }
            for (slot, deleted) in root.delete_index.iter_mut().zip(&deleted_tables) {
                if *deleted {
                    *slot = index;
                }
            }
        }
        root.last_applied = index;
        root.seq += 1;
        let fire = Fire {
            restore,
            changed_tables,
            change_tables,
            changes,
        };
        (shared, writer, root, fire)
    }
}
