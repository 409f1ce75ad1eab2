//! The database handle, its published version and its snapshots.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::bulk::BulkLoad;
use super::last_seen::{current_root, next_uid};
use super::reclaim::{PinnedRoot, Retired, WriterLock, retire_all};
use super::registry::Registry;
use super::root::Root;
use super::schema::Schema;
use super::staged::Staged;
use super::txn::WriteTxn;
use super::view::View;
use super::watch::{Signal, WatchItem, WatchSet};
use super::{Error, Result};

/// State shared by a database's handles, snapshots (weakly) and transactions.
pub(crate) struct Shared {
    /// The published version. Readers load it without locking.
    pub(crate) current: ArcSwap<Root>,
    /// The number of the published version, stored after each swap (see
    /// `last_seen.rs`: what lets a thread's next snapshot skip loading `current`).
    pub(crate) current_uid: AtomicU64,
    /// Held by the one write transaction in progress.
    pub(crate) writer: Arc<Mutex<()>>,
    /// Live watches. Commits fire under this lock after publishing; watch sets compare
    /// and register under it, so a commit is either seen by the comparison or fires the
    /// registration.
    pub(crate) registry: Mutex<Registry>,
    /// Superseded versions whose last reader (or the commit that replaced them) let
    /// go: the next write frees them before it takes its lock, so neither readers nor
    /// the threads a commit wakes wait for freeing.
    pub(crate) retired: Retired,
    /// Committed, not yet published versions (see `staged.rs`).
    pub(crate) staged: Mutex<Staged>,
}

impl Shared {
    pub(crate) fn register(&self, base: &Root, items: &[WatchItem], signal: &Arc<Signal>) -> u64 {
        let mut registry = self.registry.lock();
        let current = self.current.load();
        registry.register(base, &current, items, signal)
    }

    pub(crate) fn unregister(&self, id: u64, items: &[WatchItem]) {
        self.registry.lock().unregister(id, items);
    }
}

impl Drop for Shared {
    /// The last handle is gone: nothing will ever commit again, so wake every waiter
    /// instead of leaving it blocked until its deadline (or forever).
    fn drop(&mut self) {
        self.registry.get_mut().fire_all();
    }
}

/// An in-memory MVCC database: named tables on persistent maps, O(1) snapshots, one
/// writer at a time, exact watches.
///
/// `Db` is a cheap handle (clone it freely); every clone is the same database.
///
/// ```
/// use std::sync::Arc;
/// use schedstate_engine::{Db, Key, Schema};
///
/// let mut schema = Schema::new();
/// let kv = schema.table("kv", |r: &(String, u64)| Key::str(&r.0)).unwrap();
/// let db = Db::new(schema);
///
/// let before = db.snapshot();
/// let mut txn = db.begin_write(7).unwrap();
/// txn.insert(kv, Arc::new(("a".to_string(), 1))).unwrap();
/// txn.commit().unwrap();
///
/// assert!(before.view().get(kv, &Key::str("a")).is_none()); // snapshots never change
/// let now = db.snapshot();
/// assert_eq!(now.view().get(kv, &Key::str("a")).unwrap().1, 1);
/// assert_eq!(now.view().table_index(kv), 7);
/// ```
#[derive(Clone)]
pub struct Db {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let root = self.shared.current.load();
        f.debug_struct("Db")
            .field("tables", &root.schema.tables.len())
            .field("last_applied", &root.last_applied)
            .finish()
    }
}

impl Db {
    /// An empty database with the tables and indexes of `schema`.
    pub fn new(schema: Schema) -> Db {
        let schema = Arc::new(schema);
        let maps = schema.tables.iter().map(|t| t.indexes.len() + 1);
        let registry = Registry::new(maps);
        let shared = Arc::new_cyclic(|weak| Shared {
            current: ArcSwap::from_pointee(Root::empty(Arc::clone(&schema), weak.clone())),
            current_uid: AtomicU64::new(next_uid()),
            writer: Arc::new(Mutex::new(())),
            registry: Mutex::new(registry),
            retired: Retired::default(),
            staged: Mutex::new(Staged::default()),
        });
        Db { shared }
    }

    /// The current version, O(1). It never changes, whatever is committed later, and
    /// can be sent to and shared between threads.
    #[inline]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            root: PinnedRoot::new(current_root(&self.shared)),
        }
    }

    /// Begins the write transaction of log index `index`, waiting for the writer in
    /// progress (if any) to finish.
    ///
    /// # Errors
    /// [`Error::StaleIndex`] if `index` is not greater than the last applied index.
    pub fn begin_write(&self, index: u64) -> Result<WriteTxn> {
        let guard = WriterLock::acquire(&self.shared);
        let root = self.write_base();
        if index <= root.last_applied {
            return Err(Error::StaleIndex {
                index,
                last_applied: root.last_applied,
            });
        }
        Ok(WriteTxn::new(
            Arc::clone(&self.shared),
            guard,
            root,
            index,
            false,
        ))
    }

    /// Begins the write transaction of the next log index (one past the last applied
    /// one, staged versions included): for writers that let the database number their
    /// writes.
    pub fn begin_next_write(&self) -> WriteTxn {
        let guard = WriterLock::acquire(&self.shared);
        let root = self.write_base();
        let index = root.last_applied + 1;
        WriteTxn::new(Arc::clone(&self.shared), guard, root, index, false)
    }

    /// What the next write builds on: the newest staged version, or the published one.
    /// Called with the writer lock held.
    fn write_base(&self) -> Root {
        let staged = self.shared.staged.lock();
        match staged.tip() {
            Some(tip) => Root::clone(tip),
            None => Root::clone(&self.shared.current.load()),
        }
    }

    /// Publishes the staged versions up to the one with sequence number `seq` (see
    /// [`WriteTxn::stage`]) and fires their watches; returns the last applied index
    /// readers now see. Versions staged after `seq` stay staged.
    pub fn publish_through(&self, seq: u64) -> u64 {
        let (superseded, _) = self.shared.publish(|staged| staged.take_through(seq));
        retire_all(superseded);
        self.last_applied()
    }

    /// Drops every staged version: their writes will never be published. The next
    /// write builds on the published version.
    pub fn discard_staged(&self) {
        let _writer = WriterLock::acquire(&self.shared);
        let dropped = self.shared.staged.lock().take_all();
        drop(dropped);
    }

    /// The sequence number of the newest staged version, if any: what
    /// [`publish_through`](Self::publish_through) takes to publish everything staged so
    /// far.
    pub fn staged_tip(&self) -> Option<u64> {
        self.shared.staged.lock().tip().map(|root| root.seq)
    }

    /// How many versions are staged, not yet published.
    pub fn staged_len(&self) -> usize {
        self.shared.staged.lock().len()
    }

    /// Begins a transaction that *replaces* the whole state (restoring a snapshot).
    ///
    /// It starts empty; its commit publishes the rows inserted, the table indexes set
    /// with [`WriteTxn::set_table_index`] and `last_applied`, and fires every watch: the
    /// old state is abandoned.
    pub fn begin_restore(&self, last_applied: u64) -> WriteTxn {
        let guard = WriterLock::acquire(&self.shared);
        // A restore replaces everything, staged writes included.
        drop(self.shared.staged.lock().take_all());
        let current = self.shared.current.load();
        let mut root = Root::empty(Arc::clone(&current.schema), Arc::downgrade(&self.shared));
        root.seq = current.seq;
        root.epoch = current.epoch + 1;
        // Reads inside the restore (a check before it commits) see the version it
        // will publish.
        root.last_applied = last_applied;
        WriteTxn::new(Arc::clone(&self.shared), guard, root, last_applied, true)
    }

    /// Begins a restore loaded in bulk: rows are added to the returned [`BulkLoad`],
    /// whose [`finish`](BulkLoad::finish) builds every map at once and hands back
    /// the restore transaction ([`begin_restore`](Self::begin_restore)) to check
    /// and commit. The same state as inserting each row, built without a search per
    /// row and index.
    pub fn begin_bulk_restore(&self, last_applied: u64) -> BulkLoad {
        BulkLoad::new(self.begin_restore(last_applied))
    }

    /// Begins a restore whose state is `from`'s, a version of another database
    /// with the same layout (tables and indexes of the same names, in the same
    /// order): its maps are shared, not copied, so this is O(tables) whatever the
    /// rows. For a state loaded and checked elsewhere (a snapshot received from a
    /// leader, checked in a scratch store before it is installed).
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] naming the first table whose layout differs.
    pub fn begin_restore_from(&self, from: &Snapshot) -> Result<WriteTxn> {
        let src: &Root = &from.root;
        let mut txn = self.begin_restore(src.last_applied);
        let root = txn.root_mut();
        if let Some(table) = layout_difference(&root.schema, &src.schema) {
            return Err(Error::ForeignHandle { table });
        }
        root.tables = src.tables.clone();
        root.table_index = src.table_index.clone();
        root.delete_index = src.delete_index.clone();
        Ok(txn)
    }

    /// Waits for the write in progress, then keeps writers out until the returned guard
    /// is dropped, and hands over the version as of that moment. Readers are not
    /// affected. Used to cut a consistent point (a snapshot plus a log rotation).
    pub fn pause_writes(&self) -> (WritePause, Snapshot) {
        let guard = WriterLock::acquire(&self.shared);
        let snapshot = self.snapshot();
        (WritePause { _guard: guard }, snapshot)
    }

    /// Fires every registered watch (for example when the store is shut down), without
    /// changing the state.
    pub fn abandon(&self) {
        self.shared.registry.lock().fire_all();
    }

    /// The log index of the last accepted write.
    pub fn last_applied(&self) -> u64 {
        self.shared.current.load().last_applied
    }

    /// The schema this database was built with.
    pub fn schema(&self) -> Arc<Schema> {
        Arc::clone(&self.shared.current.load().schema)
    }

    /// Frees now the superseded versions whose last reader has let go, and those the
    /// last commit replaced. Never needed for correctness: every write frees them
    /// before it takes the writer lock (readers and commits hand them over instead of
    /// freeing them, so that garbage is never freed on a reader's thread nor between a
    /// commit and the wake-ups it caused). Useful before measuring memory, or after
    /// dropping an old snapshot of a database that no longer writes.
    pub fn reclaim(&self) {
        self.shared.retired.drain();
    }

    /// Number of superseded versions waiting to be freed (see [`reclaim`](Self::reclaim)).
    pub fn retired_versions(&self) -> usize {
        self.shared.retired.len()
    }

    /// Number of watch items currently registered (keys, ranges, tables) across all
    /// waiting watch sets. Diagnostic: dropped sets must bring it back to zero.
    pub fn registered_watches(&self) -> usize {
        self.shared.registry.lock().registered_items()
    }
}

/// Keeps writers out while held (see [`Db::pause_writes`]).
pub struct WritePause {
    _guard: WriterLock,
}

impl std::fmt::Debug for WritePause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WritePause")
    }
}

/// One committed version of the database: immutable, owned, `Send + Sync + 'static`.
#[derive(Clone)]
pub struct Snapshot {
    pub(crate) root: PinnedRoot,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("last_applied", &self.root.last_applied)
            .field("seq", &self.root.seq)
            .finish()
    }
}

impl Snapshot {
    /// Reads without watching.
    #[inline]
    pub fn view(&self) -> View<'_> {
        View {
            root: &self.root,
            watch: None,
        }
    }

    /// Reads that record what they read into `ws`.
    pub fn watched<'a>(&'a self, ws: &'a WatchSet) -> View<'a> {
        ws.set_base(&self.root);
        View {
            root: &self.root,
            watch: Some(ws),
        }
    }

    /// The log index of the last accepted write in this version.
    pub fn last_applied(&self) -> u64 {
        self.root.last_applied
    }

    /// What was attached to the database's schema, if it is a `T`
    /// ([`Schema::attach`]).
    #[inline]
    pub fn attached<T: std::any::Any>(&self) -> Option<&T> {
        self.root.schema.attached()
    }

    /// Whether two snapshots are the very same version.
    pub fn same_version(&self, other: &Snapshot) -> bool {
        Arc::ptr_eq(&self.root, &other.root)
    }
}

/// The first table of `a` laid out differently in `b` (name, index names and
/// uniqueness, in order), if any.
fn layout_difference(a: &Schema, b: &Schema) -> Option<String> {
    let index = |t: &crate::schema::TableDef| {
        t.indexes
            .iter()
            .map(|i| (i.name.clone(), i.unique))
            .collect::<Vec<_>>()
    };
    for (i, ta) in a.tables.iter().enumerate() {
        match b.tables.get(i) {
            Some(tb) if tb.name == ta.name && index(tb) == index(ta) => {}
            _ => return Some(ta.name.to_string()),
        }
    }
    (b.tables.len() > a.tables.len()).then(|| b.tables[a.tables.len()].name.to_string())
}
