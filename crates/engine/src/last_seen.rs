//! The version a thread last took a snapshot of, remembered per thread so that the
//! next snapshot of an unchanged database costs one reference count.
//!
//! Loading an `Arc` out of the published cell safely takes more than counting it:
//! `ArcSwap::load_full` borrows a debt slot, re-reads the pointer, counts the `Arc` and
//! pays the debt back — three atomic read-modify-writes where the count alone is one.
//! Readers take snapshots far more often than writers publish (a point read through
//! the store takes one each), so most of those loads return the version the thread
//! loaded last time.
//!
//! Each published version gets a number no other version of any database in the
//! process ever gets (`Shared::current_uid`, stored after the version is swapped in).
//! A thread keeps the number it last saw and a `Weak` to that version. A snapshot reads
//! the number: if it is the one kept, the version is upgraded from the `Weak` (one
//! compare-and-swap on its count); otherwise, or if the upgrade fails, it is loaded
//! from the cell and kept.
//!
//! Why this is exact:
//! - The number is read *before* the cell on a miss, and a writer stores it *after*
//!   the swap (Release, read with Acquire). So the version kept is the numbered one or
//!   a newer one, never an older one: a snapshot can only ever be as fresh as a load
//!   of the cell at the moment the number was read.
//! - Once a commit returns, its number is stored, and every snapshot that starts later
//!   sees a number different from any kept before: it misses and loads the new version.
//! - Numbers are never reused (a process-wide counter), so a number kept for one
//!   database can never match another's, whichever database the thread reads next.
//!
//! A `Weak` keeps only the version's small allocation, not its tables: remembering a
//! version never keeps its rows alive (the reclamation in `reclaim.rs` is unchanged).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::database::Shared;
use super::root::Root;

/// The next number a published version gets. Starts at 1: 0 is never a version's.
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A number no version has had, for a version about to be published.
pub(crate) fn next_uid() -> u64 {
    NEXT_UID.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    /// The number of the version this thread last loaded, and that version.
    static LAST_SEEN: RefCell<(u64, Weak<Root>)> = const { RefCell::new((0, Weak::new())) };
}

/// The published version of `shared`, as a counted reference.
#[inline]
pub(crate) fn current_root(shared: &Shared) -> Arc<Root> {
    let uid = shared.current_uid.load(Ordering::Acquire);
    let remembered = LAST_SEEN.try_with(|last| {
        let last = last.borrow();
        if last.0 == uid {
            last.1.upgrade()
        } else {
            None
        }
    });
    if let Ok(Some(root)) = remembered {
        return root;
    }
    load_and_remember(shared, uid)
}

/// The slow path: loads the cell (read after `uid`, so at least as new) and remembers
/// it under `uid`.
#[cold]
fn load_and_remember(shared: &Shared, uid: u64) -> Arc<Root> {
    let root = shared.current.load_full();
    // A thread being torn down has no memo left: it just loads.
    let _ = LAST_SEEN.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = (uid, Arc::downgrade(&root));
        }
    });
    root
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Db, Key, Schema};

    fn db() -> (Db, crate::Table<(String, u64)>) {
        let mut schema = Schema::new();
        let kv = schema
            .table("kv", |r: &(String, u64)| Key::str(&r.0))
            .unwrap();
        (Db::new(schema), kv)
    }

    #[test]
    fn a_snapshot_after_a_commit_sees_it_even_when_the_thread_remembered_the_one_before() {
        let (db, kv) = db();
        for i in 1..=50u64 {
            let before = db.snapshot();
            assert_eq!(before.last_applied(), i - 1);
            let again = db.snapshot(); // the remembered version
            assert_eq!(again.last_applied(), i - 1);
            let mut txn = db.begin_write(i).unwrap();
            txn.insert(kv, Arc::new((format!("k{i}"), i))).unwrap();
            txn.commit().unwrap();
            let after = db.snapshot();
            assert_eq!(after.last_applied(), i);
            assert!(after.view().get(kv, &Key::str(&format!("k{i}"))).is_some());
            assert!(before.view().get(kv, &Key::str(&format!("k{i}"))).is_none());
        }
    }

    #[test]
    fn two_databases_read_on_one_thread_never_answer_for_each_other() {
        let (a, kv_a) = db();
        let (b, kv_b) = db();
        let mut txn = a.begin_write(7).unwrap();
        txn.insert(kv_a, Arc::new(("in-a".into(), 1))).unwrap();
        txn.commit().unwrap();
        for _ in 0..10 {
            let sa = a.snapshot();
            let sb = b.snapshot();
            assert_eq!(sa.last_applied(), 7);
            assert_eq!(sb.last_applied(), 0);
            assert!(sa.view().get(kv_a, &Key::str("in-a")).is_some());
            assert!(sb.view().get(kv_b, &Key::str("in-a")).is_none());
        }
        // A database dropped and another made in its place: nothing of the first is
        // answered for the second, whatever the thread remembers.
        drop(a);
        let (c, kv_c) = db();
        assert_eq!(c.snapshot().last_applied(), 0);
        assert!(c.snapshot().view().get(kv_c, &Key::str("in-a")).is_none());
    }

    #[test]
    fn remembering_a_version_does_not_keep_its_rows() {
        let (db, kv) = db();
        let row = Arc::new(("k".to_string(), 1u64));
        let mut txn = db.begin_write(1).unwrap();
        txn.insert(kv, Arc::clone(&row)).unwrap();
        txn.commit().unwrap();
        drop(db.snapshot()); // this thread now remembers version 1
        let mut txn = db.begin_write(2).unwrap();
        txn.delete(kv, &Key::str("k")).unwrap();
        txn.commit().unwrap();
        // The next write frees the versions retired meanwhile (see reclaim.rs).
        let txn = db.begin_write(3).unwrap();
        txn.commit().unwrap();
        assert_eq!(Arc::strong_count(&row), 1, "the row outlived every version");
    }
}
