//! Compaction: a consistent point cut while writers pause for an O(1) snapshot and a
//! new segment, then the snapshot written and what it covers removed, on a thread or
//! in the caller.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::DurableStore;
use crate::persist::data_dir::snapshot_name;
use crate::persist::error::{PersistError, Result};
use crate::persist::fs;
use crate::persist::recover::list;
use crate::persist::snapshot::write_snapshot;
use crate::persist::wal::{create_segment, segment_path};
use crate::state::StateSnapshot;

impl DurableStore {
    /// Writes a snapshot now and deletes the log it covers; waits for it.
    ///
    /// # Errors
    /// I/O errors writing the snapshot or removing old files.
    pub fn compact(&self) -> Result<()> {
        loop {
            // A background compaction may start between the wait and ours: then wait
            // for it too, and try again.
            self.wait_for_compaction()?;
            if let Some(result) = self.start_compaction(false) {
                return result;
            }
            std::thread::yield_now();
        }
    }

    /// Waits for a background compaction, if one is running, and returns its result.
    ///
    /// # Errors
    /// The compaction's error.
    pub fn wait_for_compaction(&self) -> Result<()> {
        let handle = self.inner.compactor.lock().take();
        match handle {
            Some(h) => h.join().unwrap_or(Err(PersistError::CompactionPanicked)),
            None => Ok(()),
        }
    }

    /// Cuts a consistent point — writers pause while the O(1) snapshot is taken and a
    /// new segment started — then writes the snapshot and removes what it covers,
    /// on a thread if `background`.
    /// Returns `None` if a compaction was already running (nothing started).
    pub(super) fn start_compaction(&self, background: bool) -> Option<Result<()>> {
        let inner = &self.inner;
        if inner.compacting.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(self.compact_now(background))
    }

    fn compact_now(&self, background: bool) -> Result<()> {
        let inner = &self.inner;
        let cut = (|| -> Result<(StateSnapshot, u64)> {
            let db = &inner.store;
            let (pause, _) = inner.store.pause_writes();
            let mut wal = inner.wal.lock();
            self.refuse_if_poisoned()?;
            // No more records go to this segment: cut its preallocated zeros.
            if let Err(e) = wal.seal() {
                drop(wal);
                drop(pause);
                self.fail_sync(&e);
                return Err(e);
            }
            // Everything logged is durable now: publish it, and release the writers
            // waiting for it, so that the snapshot holds exactly the log before the
            // new segment.
            if let Some(tip) = db.staged_tip() {
                db.publish_through(tip);
            }
            {
                let mut group = inner.group.state.lock();
                group.synced = group.synced.max((wal.seq(), wal.len()));
                inner.group.done.notify_all();
            }
            let snap = inner.store.snapshot();
            let seq = wal.seq() + 1;
            let next = match create_segment(&inner.dir, seq, snap.view().last_applied()) {
                Ok(next) => next,
                Err(e) => {
                    // The log goes on in the current segment, unless the new one could
                    // not be removed: records after it in the old one would be out of
                    // order for recovery.
                    if segment_path(&inner.dir, seq).exists() {
                        self.poison(&e);
                    }
                    return Err(e);
                }
            };
            // The new segment was created durable: the log is durable through its
            // header (what a failed fsync later cuts back to).
            {
                let mut group = inner.group.state.lock();
                group.synced = group.synced.max((next.seq(), next.len()));
            }
            *wal = next;
            *inner.logged.lock() = 0;
            drop(wal);
            drop(pause);
            Ok((snap, seq))
        })();
        let (snap, first_kept) = match cut {
            Ok(cut) => cut,
            Err(e) => {
                inner.compacting.store(false, Ordering::Release);
                return Err(e);
            }
        };
        let dir = inner.dir.clone();
        let flag = Arc::clone(&inner.compacting);
        let job = move || {
            let result = write_and_prune(&dir, &snap, first_kept);
            flag.store(false, Ordering::Release);
            if let Err(e) = &result {
                tracing::error!(error = %e, "compaction failed");
            }
            result
        };
        if background {
            // The slot stays locked from the join to the store of the new handle, so a
            // handle is never overwritten and `wait_for_compaction` and `Drop` always
            // see the running compaction.
            let mut slot = inner.compactor.lock();
            if let Some(h) = slot.take() {
                let _ = h.join();
            }
            match std::thread::Builder::new()
                .name("schedstate-compact".into())
                .spawn(job)
            {
                Ok(handle) => {
                    *slot = Some(handle);
                    Ok(())
                }
                Err(source) => {
                    inner.compacting.store(false, Ordering::Release);
                    Err(PersistError::Io {
                        path: inner.dir.clone(),
                        source,
                    })
                }
            }
        } else {
            job()
        }
    }
}

/// Writes the snapshot of `snap`, then removes older snapshots and the segments before
/// `first_kept`.
///
/// Any failure leaves the directory openable: until the new snapshot is in place (and
/// its directory fsynced) nothing is removed, and afterwards every file left over is
/// one recovery skips (an older snapshot, a segment the snapshot covers).
fn write_and_prune(dir: &Path, snap: &StateSnapshot, first_kept: u64) -> Result<()> {
    let index = snap.view().last_applied();
    let path = dir.join(snapshot_name(index));
    fs::write_atomically(&path, |out| write_snapshot(snap, out, &path).map(|_| ()))?;
    let listing = list(dir)?;
    for (i, old) in &listing.snapshots {
        if *i < index {
            fs::remove_file(old)?;
        }
    }
    for (seq, old) in &listing.segments {
        if *seq < first_kept {
            fs::remove_file(old)?;
        }
    }
    fs::sync_dir(dir)?;
    tracing::info!(index, "compacted");
    Ok(())
}
