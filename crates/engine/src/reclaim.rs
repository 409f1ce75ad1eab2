//! Who frees a superseded version: the writer, not the reader that let go of it last.
//!
//! A commit replaces the published root; the old root stays alive as long as some
//! snapshot (or watch set) holds it. Whoever drops the last reference frees every
//! tree node and row that only that version used — after a busy writer that is a few
//! dozen allocations per commit. If a reader pays for that, a point read that costs a
//! microsecond on its own costs ten: the frees run on the reader's thread and, with the
//! allocator's per-thread arenas, queue on the lock of the arena the writer is
//! allocating from at that very moment.
//!
//! So the last [`PinnedRoot`] of a version does not free it: it parks the version in
//! the database's retired list (one short lock, one push), and the next write frees
//! the list before it takes the writer lock, outside every critical section. A commit
//! parks the version it replaced the same way instead of freeing it: the thread it
//! just woke is often placed on the writer's core (the kernel's wake-affine choice)
//! and runs only once the writer returns, so frees at the end of a commit were paid
//! by every wake-up (`blocking_wake_many`: the commit's last 8 of 16 µs). A restore is
//! the exception: it frees the whole old state (and what was parked) at once. A
//! version parked when no write follows stays parked until the next write or an
//! explicit [`Db::reclaim`](super::Db::reclaim); what it holds is only what it does
//! not share with the current version.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

use parking_lot::{ArcMutexGuard, Mutex, RawMutex};

use super::database::Shared;
use super::root::Root;

/// A shared reference to one version that hands the version to the writer to free
/// when it is the last reference (see the module docs).
pub(crate) struct PinnedRoot(ManuallyDrop<Arc<Root>>);

impl PinnedRoot {
    pub(crate) fn new(root: Arc<Root>) -> PinnedRoot {
        PinnedRoot(ManuallyDrop::new(root))
    }
}

impl Clone for PinnedRoot {
    fn clone(&self) -> Self {
        PinnedRoot::new(Arc::clone(&self.0))
    }
}

impl Deref for PinnedRoot {
    type Target = Arc<Root>;
    #[inline]
    fn deref(&self) -> &Arc<Root> {
        &self.0
    }
}

impl Drop for PinnedRoot {
    fn drop(&mut self) {
        // SAFETY: the field is taken exactly once, here, and never used again.
        let arc = unsafe { ManuallyDrop::take(&mut self.0) };
        retire(arc);
    }
}

/// Drops one reference to a version; if it was the last, parks the version for the
/// writer to free (always, even when no write is in progress: the writer lock is free
/// between a busy writer's transactions, so freeing "when it is free" ran on readers
/// anyway). Only a version whose database is gone is freed here.
pub(crate) fn retire(arc: Arc<Root>) {
    let Some(root) = Arc::into_inner(arc) else {
        return; // someone else still reads this version
    };
    match root.shared.upgrade() {
        Some(shared) => shared.retired.park(root),
        None => drop(root), // the database is gone: nobody to hand it to
    }
}

/// [`retire`]s each of `versions` (the ones a commit or a publication replaced).
pub(crate) fn retire_all(versions: Vec<Arc<Root>>) {
    for root in versions {
        retire(root);
    }
}

/// Versions waiting for the writer to free them.
#[derive(Default)]
pub(crate) struct Retired {
    roots: Mutex<Vec<Root>>,
}

impl Retired {
    fn park(&self, root: Root) {
        self.roots.lock().push(root);
    }

    /// Frees every parked version. Called by the writer after releasing its lock, and
    /// by [`Db::reclaim`](super::Db::reclaim).
    pub(crate) fn drain(&self) {
        let roots = std::mem::take(&mut *self.roots.lock());
        drop(roots);
    }

    pub(crate) fn len(&self) -> usize {
        self.roots.lock().len()
    }
}

/// The writer lock of a database. Taking it first frees the retired versions, on the
/// writer's thread and outside the lock (see the module docs).
pub(crate) struct WriterLock {
    _guard: ArcMutexGuard<RawMutex, ()>,
}

impl WriterLock {
    /// Frees the retired versions, then waits for the writer lock of `shared`.
    pub(crate) fn acquire(shared: &Arc<Shared>) -> WriterLock {
        shared.retired.drain();
        WriterLock {
            _guard: shared.writer.lock_arc(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Db, Key, Schema, Snapshot, Table};

    type Kv = (String, u64);

    fn db() -> (Db, Table<Kv>) {
        let mut schema = Schema::new();
        let t = schema.table("kv", |r: &Kv| Key::str(&r.0)).expect("table");
        (Db::new(schema), t)
    }

    /// A snapshot of the current version, then a commit of `row` at `index` that
    /// supersedes it: the snapshot is now the only holder of the old version.
    fn superseded(db: &Db, t: Table<Kv>, index: u64, row: &Arc<Kv>) -> Snapshot {
        let old = db.snapshot();
        let mut txn = db.begin_write(index).expect("begin");
        txn.insert(t, Arc::clone(row)).expect("insert");
        txn.commit().expect("commit");
        old
    }

    fn row(key: &str) -> Arc<Kv> {
        Arc::new((key.to_string(), 1))
    }

    #[test]
    fn a_version_released_during_a_write_is_freed_by_the_next_write() {
        let (db, t) = db();
        let old = superseded(&db, t, 1, &row("a"));
        let mut txn = db.begin_write(2).expect("begin");
        drop(old);
        assert_eq!(db.retired_versions(), 1, "parked while the writer runs");
        txn.insert(t, row("b")).expect("insert");
        txn.commit().expect("commit");
        // With the version the commit replaced, which nothing else held.
        assert_eq!(
            db.retired_versions(),
            2,
            "not freed between a commit and its wakes"
        );
        drop(db.begin_write(3).expect("begin"));
        assert_eq!(db.retired_versions(), 0, "freed by the next write");
    }

    #[test]
    fn a_version_released_with_no_writer_waits_for_the_next_write_or_reclaim() {
        let (db, t) = db();
        drop(superseded(&db, t, 1, &row("a")));
        assert_eq!(db.retired_versions(), 1);
        db.reclaim();
        assert_eq!(db.retired_versions(), 0);
        // The current version is never parked, however many snapshots come and go.
        drop(db.snapshot());
        assert_eq!(db.retired_versions(), 0);
    }

    #[test]
    fn a_write_frees_what_was_parked_before_it_even_if_it_aborts() {
        let (db, t) = db();
        drop(superseded(&db, t, 1, &row("a")));
        assert_eq!(db.retired_versions(), 1);
        let txn = db.begin_write(2).expect("begin");
        assert_eq!(db.retired_versions(), 0);
        drop(txn);
        assert_eq!(db.retired_versions(), 0);
    }

    #[test]
    fn a_commit_parks_the_version_it_replaced() {
        let (db, t) = db();
        let a = row("a");
        drop(superseded(&db, t, 1, &a));
        db.reclaim();
        // No snapshot holds the current version: the commit that replaces it holds
        // its last reference, and parks it.
        let mut txn = db.begin_write(2).expect("begin");
        txn.delete(t, &Key::str("a")).expect("delete");
        txn.commit().expect("commit");
        assert_eq!(db.retired_versions(), 1);
        assert_eq!(Arc::strong_count(&a), 2, "parked, not yet freed");
        drop(db.begin_write(3).expect("begin"));
        assert_eq!(Arc::strong_count(&a), 1, "the next write freed it");
    }

    #[test]
    fn a_restore_frees_the_old_state_at_once() {
        let (db, t) = db();
        let a = row("a");
        drop(superseded(&db, t, 1, &a));
        db.reclaim();
        drop(superseded(&db, t, 2, &row("b")));
        assert_eq!(db.retired_versions(), 1);
        let mut restore = db.begin_restore(3);
        restore.insert(t, row("c")).expect("insert");
        restore.commit().expect("commit");
        assert_eq!(
            db.retired_versions(),
            0,
            "nothing left parked after a restore"
        );
        assert_eq!(Arc::strong_count(&a), 1, "the old state's rows are gone");
    }

    #[test]
    fn rows_of_a_parked_version_are_really_freed() {
        let (db, t) = db();
        let a = row("a");
        drop(superseded(&db, t, 1, &a));
        db.reclaim();
        let old = db.snapshot();
        let mut txn = db.begin_write(2).expect("begin");
        txn.delete(t, &Key::str("a")).expect("delete");
        drop(txn.commit().expect("commit"));
        assert_eq!(Arc::strong_count(&a), 2, "ours and the old version's");
        let txn = db.begin_write(3).expect("begin");
        drop(old);
        assert_eq!(Arc::strong_count(&a), 2, "parked, not yet freed");
        drop(txn);
        drop(db.begin_write(3).expect("begin"));
        assert_eq!(Arc::strong_count(&a), 1, "the writer freed the version");
    }

    #[test]
    fn nothing_parked_outlives_the_database() {
        let (db, t) = db();
        let a = row("a");
        drop(superseded(&db, t, 1, &a));
        let old = db.snapshot(); // holds `a`
        let mut txn = db.begin_write(2).expect("begin");
        txn.delete(t, &Key::str("a")).expect("delete");
        drop(txn.commit().expect("commit"));
        // Parked, then the last handle goes: the retired list goes with it.
        drop(old);
        assert_eq!(Arc::strong_count(&a), 2);
        drop(db);
        assert_eq!(Arc::strong_count(&a), 1);
    }

    #[test]
    fn a_snapshot_outliving_its_database_frees_its_version_itself() {
        let (db, t) = db();
        let a = row("a");
        let mut txn = db.begin_write(1).expect("begin");
        txn.insert(t, Arc::clone(&a)).expect("insert");
        txn.commit().expect("commit");
        let snap = db.snapshot();
        drop(db);
        assert_eq!(snap.view().get(t, &Key::str("a")).expect("row").1, 1);
        drop(snap);
        assert_eq!(Arc::strong_count(&a), 1);
    }
}
