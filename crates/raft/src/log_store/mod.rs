//! The Raft log on disk: openraft's [`RaftLogStorage`] over the project's segment
//! framing. It is the only log a replicated server writes: the state machine's
//! durable record is this log plus its snapshots.
//!
//! - **append** writes the records (no fsync) and hands the flush to a flusher thread,
//!   which fsyncs once for everything appended since its last fsync and only then
//!   tells openraft the entries are durable. (openraft 0.9's core awaits each
//!   append's fsync before its next command, so an fsync on Raft's own task would
//!   save the two thread wake-ups per entry: 12–20 % more one-client commits in
//!   `raft_workload`, nothing at 16 or 64 clients, but a runtime worker held through
//!   every fsync, and fsyncs reached 300 ms on the test host. Measured twice and not
//!   kept; see BENCHMARKS.md, seventh pass.)
//! - **truncate** (a conflicting suffix) waits for pending flushes, removes later
//!   segments, cuts the segment holding the first removed entry at its offset, fsyncs.
//!   A crash in between leaves a prefix of the old log, which Raft tolerates (the
//!   follower had not acknowledged the new entries).
//! - **purge** records the purge point in the metadata file first, then removes the
//!   segments wholly before it; entries before the point that stay on disk (in a
//!   segment that also holds later ones) are skipped when the log is opened.
//! - the **vote** lives in the metadata file, written atomically and fsynced before
//!   `save_vote` returns.
//! - the **committed** log id openraft reports (`save_committed`) is written by the
//!   flusher thread to its own small file (`committed.rs`), clamped to what the log
//!   has made durable, after its next fsync or once the log has been quiet for
//!   20 ms; a restart reads it back (`read_committed`) and openraft re-applies the
//!   committed entries after the snapshot before the server serves, with or without
//!   a leader.
//!
//! The newest entries are also kept in memory, up to a budget of record bytes
//! ([`LogOptions::cache_bytes`]): replication and apply read recent entries without
//! touching the disk; older ones (a follower far behind, a restart's replay) are read
//! back from their segment, checksum checked. Every entry's position is kept, so a
//! read costs one seek.
//!
//! Here the types, the writes and openraft's `RaftLogStorage`; in `open.rs` the open
//! (scan, repair, the flusher started), in `flusher.rs` the flusher thread and the
//! committed pointer, in `read.rs` the reads (`RaftLogReader`, cache or segment).

mod flusher;
mod open;
mod read;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, StorageError, StorageIOError, Vote};
use parking_lot::{Condvar, Mutex};
use schedstate::persist::segment::{SegmentWriter, remove_file_durably, write_file_atomically};
use schedstate::persist::{DirLock, PersistError};

use crate::committed::CommittedFile;
use crate::log_format::{RAFT_LOG_FORMAT, RaftMeta, RaftRecord, meta_path, segment_name};
use crate::{Entry, NodeId, TypeConfig};
use flusher::{Committed, FlushRequest};

/// How the log is kept on disk.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    /// A segment is closed and a new one started once it holds this many bytes.
    pub segment_bytes: u64,
    /// Record bytes of the newest entries kept decoded in memory. A decoded entry
    /// takes two to three times its record bytes of heap (a row's struct and a heap
    /// string per id, where the record has a length byte and the characters): the
    /// default 256 KiB is about 0.5–0.75 MiB per server (1 MiB was 2–3 MiB, a sixth
    /// of the replicated benchmark's heap after its preload). At 64 writers an entry
    /// of 32 node upserts is ~32 KiB of records, so the cache still holds the eight
    /// newest while one is in flight.
    pub cache_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 << 20,
            cache_bytes: 256 << 10,
        }
    }
}

/// What opening a log found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOpenReport {
    /// Entries found after the purge point.
    pub entries: u64,
    /// Bytes of a torn tail cut off the last segment (a crash mid-append).
    pub torn_bytes: u64,
    /// The directory and files that other users could read or write, made
    /// owner-only on open.
    pub permissions_fixed: Vec<std::path::PathBuf>,
}

/// Counters of the log's work since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// `append` calls (each one batch of entries from openraft).
    pub appends: u64,
    /// Entries appended.
    pub entries: u64,
    /// fsyncs of appended entries (each covers every append since the one before).
    pub fsyncs: u64,
    /// Entries read back from their segment because the cache no longer held them
    /// (a follower far behind, a replay; in steady state, none).
    pub disk_reads: u64,
}

/// The Raft log of one server. Cheap to clone: clones share the log (openraft's log
/// reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
    /// The directory's exclusive lock, until [`LogStore::close`] or the last clone is
    /// dropped. Held by the handles only, not in `Shared`: the flusher thread briefly
    /// holds `Shared` after each fsync, and a directory must be free again the moment
    /// its last handle is gone.
    lock: Arc<Mutex<Option<DirLock>>>,
}

struct Shared {
    dir: PathBuf,
    options: LogOptions,
    log: Mutex<Log>,
    flusher: Mutex<Option<mpsc::Sender<FlushRequest>>>,
    /// The committed pointer: what openraft last reported, what the log had made
    /// durable at its last fsync. Locked before `committed_file` when both are.
    committed: Mutex<Committed>,
    /// The pointer's file (written in place, never fsynced: `committed.rs`).
    committed_file: Mutex<CommittedFile>,
    /// Flush requests sent and completed, for the barrier truncate and purge wait at.
    flushes: Mutex<(u64, u64)>,
    flushed: Condvar,
    appends: AtomicU64,
    entries: AtomicU64,
    fsyncs: AtomicU64,
    disk_reads: AtomicU64,
}

/// One entry after the purge point: where its record is, and the entry itself while
/// it is cached.
struct Slot {
    log_id: LogId<NodeId>,
    entry: Option<Entry>,
    seq: u64,
    offset: u64,
    len: u64,
}

struct Log {
    /// Entries after the purge point, contiguous.
    entries: VecDeque<Slot>,
    /// The cached entries are a suffix of `entries`, from this position on.
    cached_from: usize,
    /// Record bytes of the cached entries.
    cached_bytes: u64,
    /// Every segment on disk: sequence number → the position (Raft index + 1) of the
    /// record before its first one.
    segments: BTreeMap<u64, u64>,
    /// The segments of an older format version (read, never appended to).
    older: BTreeSet<u64>,
    writer: SegmentWriter,
    meta: RaftMeta,
    /// Why the log refuses writes (a failed fsync or cut).
    poisoned: Option<String>,
}

fn io_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_logs(&e).into()
}

fn poisoned_err(why: &str) -> StorageError<NodeId> {
    io_err(std::io::Error::other(format!(
        "the raft log is poisoned: {why}"
    )))
}

impl LogStore {
    /// Releases the directory's lock: the server using this log has stopped (its Raft
    /// is shut down), and another may open the directory. Appends after this fail.
    pub fn close(&self) {
        let mut log = self.shared.log.lock();
        log.poisoned.get_or_insert_with(|| "closed".into());
        drop(log);
        self.flush_barrier();
        // What openraft reported since the flusher last wrote the pointer.
        self.shared.record_committed();
        self.lock.lock().take();
    }

    /// The directory the log lives in.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// What the log has done since it was opened.
    pub fn stats(&self) -> LogStats {
        let s = &self.shared;
        LogStats {
            appends: s.appends.load(Ordering::Relaxed),
            entries: s.entries.load(Ordering::Relaxed),
            fsyncs: s.fsyncs.load(Ordering::Relaxed),
            disk_reads: s.disk_reads.load(Ordering::Relaxed),
        }
    }

    /// The id of the last entry appended (or purged, when none is held): what a
    /// candidate's log is compared by ([`crate::pre_vote`]).
    pub(crate) fn last_log_id(&self) -> Option<LogId<NodeId>> {
        let log = self.shared.log.lock();
        log.entries
            .back()
            .map(|e| e.log_id)
            .or_else(|| log.meta.last_purged())
    }

    /// The sequence numbers of the segments on disk.
    pub fn segment_seqs(&self) -> Vec<u64> {
        self.shared.log.lock().segments.keys().copied().collect()
    }

    /// Waits until every flush asked for so far is done.
    fn flush_barrier(&self) {
        let mut f = self.shared.flushes.lock();
        let target = f.0;
        while f.1 < target {
            self.shared.flushed.wait(&mut f);
        }
    }

    fn write_meta(&self, log: &Log) -> Result<(), PersistError> {
        write_file_atomically(&meta_path(&self.shared.dir), &log.meta.encode()?)
    }

    /// Closes the current segment (fsynced) and starts segment seq+1 after `prev`.
    fn roll(&self, log: &mut Log, prev: u64) -> Result<(), PersistError> {
        log.writer.seal()?;
        let seq = log.writer.seq() + 1;
        let w = SegmentWriter::create(
            &RAFT_LOG_FORMAT,
            self.shared.dir.join(segment_name(seq)),
            seq,
            prev,
        )?;
        log.segments.insert(seq, prev);
        log.writer = w;
        Ok(())
    }

    /// Starts a new segment whose first record will be `index`, and removes every
    /// older segment. Only for an empty log.
    fn restart_at(&self, log: &mut Log, index: u64) -> Result<(), PersistError> {
        self.roll(log, index)?;
        let current = log.writer.seq();
        let older: Vec<u64> = log.segments.range(..current).map(|(s, _)| *s).collect();
        for seq in older {
            remove_file_durably(&self.shared.dir.join(segment_name(seq)))?;
            log.segments.remove(&seq);
        }
        Ok(())
    }

    fn append_records(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StorageError<NodeId>> {
        let mut log = self.shared.log.lock();
        if let Some(why) = &log.poisoned {
            return Err(poisoned_err(why));
        }
        self.shared.appends.fetch_add(1, Ordering::Relaxed);
        for entry in entries {
            let index = entry.log_id.index;
            if index + 1 != log.writer.last_index() + 1 {
                // Only into an empty log (nothing yet, or everything purged: a
                // snapshot installed): the log then starts at this entry, in a new
                // segment, and the older segments (nothing in them is kept) go.
                if log.entries.is_empty() {
                    self.restart_at(&mut log, index).map_err(|e| {
                        log.poisoned = Some(e.to_string());
                        io_err(e)
                    })?;
                } else {
                    return Err(io_err(std::io::Error::other(format!(
                        "append of index {index} after position {}",
                        log.writer.last_index()
                    ))));
                }
            }
            let record = RaftRecord::from_entry(&entry);
            let offset = log.writer.len();
            let seq = log.writer.seq();
            if let Err(e) = log.writer.append(index + 1, |buf| {
                let taken = std::mem::take(buf);
                *buf = postcard::to_extend(&record, taken)?;
                Ok(())
            }) {
                if e.poisoned {
                    log.poisoned = Some(e.error.to_string());
                }
                return Err(io_err(e.error));
            }
            let len = log.writer.len() - offset;
            log.entries.push_back(Slot {
                log_id: entry.log_id,
                entry: Some(entry),
                seq,
                offset,
                len,
            });
            log.cached_bytes += len;
            log.evict(self.shared.options.cache_bytes);
            self.shared.entries.fetch_add(1, Ordering::Relaxed);
            if log.writer.len() >= self.shared.options.segment_bytes {
                let last = log.writer.last_index();
                if let Err(e) = self.roll(&mut log, last) {
                    log.poisoned = Some(e.to_string());
                    return Err(io_err(e));
                }
            }
        }
        Ok(())
    }
}

impl Log {
    /// Drops the oldest cached entries until the cache fits `budget` (the newest entry
    /// always stays).
    fn evict(&mut self, budget: u64) {
        while self.cached_bytes > budget && self.cached_from + 1 < self.entries.len() {
            let slot = &mut self.entries[self.cached_from];
            if slot.entry.take().is_some() {
                self.cached_bytes -= slot.len;
            }
            self.cached_from += 1;
        }
    }

    /// Removes the entries from position `pos` on.
    fn truncate_at(&mut self, pos: usize) {
        for slot in self.entries.range(pos..) {
            if slot.entry.is_some() {
                self.cached_bytes -= slot.len;
            }
        }
        self.entries.truncate(pos);
        self.cached_from = self.cached_from.min(self.entries.len());
    }

    /// Removes the first entry.
    fn pop_first(&mut self) {
        if let Some(slot) = self.entries.pop_front()
            && slot.entry.is_some()
        {
            self.cached_bytes -= slot.len;
        }
        self.cached_from = self.cached_from.saturating_sub(1);
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let log = self.shared.log.lock();
        let last_purged_log_id = log.meta.last_purged();
        let last_log_id = log.entries.back().map(|e| e.log_id).or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut log = self.shared.log.lock();
        let old = log.meta.clone();
        log.meta.set_vote(vote);
        if let Err(e) = self.write_meta(&log) {
            log.meta = old;
            return Err(StorageIOError::<NodeId>::write_vote(&e).into());
        }
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.shared.log.lock().meta.vote())
    }

    /// Remembers the committed log id; the flusher thread writes it out after its next
    /// fsync, or when the log has gone quiet (`flusher.rs`). Never waits for the
    /// disk, and wakes no thread.
    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        if let Some(committed) = committed {
            self.shared.committed.lock().reported = Some(committed);
        }
        Ok(())
    }

    /// The committed log id: at open (when openraft asks, to re-apply the entries
    /// up to it before the server starts) the one found on disk and checked against
    /// the log; later, the last one reported.
    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.shared.committed.lock().reported)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        self.append_records(entries)?;
        let sender = self.shared.flusher.lock().clone();
        match sender {
            Some(tx) => {
                self.shared.flushes.lock().0 += 1;
                if let Err(mpsc::SendError(cb)) = tx.send(callback) {
                    self.shared.flushes.lock().1 += 1;
                    cb.log_io_completed(Err(std::io::Error::other("the raft log flusher stopped")));
                }
            }
            None => callback.log_io_completed(Err(std::io::Error::other("the raft log is closed"))),
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.flush_barrier();
        let mut log = self.shared.log.lock();
        if let Some(why) = &log.poisoned {
            return Err(poisoned_err(why));
        }
        let Some(first) = log.entries.front() else {
            return Ok(());
        };
        let first = first.log_id.index;
        if log_id.index < first {
            return Err(io_err(std::io::Error::other(format!(
                "truncate at index {} before the first entry {first}",
                log_id.index
            ))));
        }
        let pos = (log_id.index - first) as usize;
        let Some((seq, offset)) = log.entries.get(pos).map(|e| (e.seq, e.offset)) else {
            return Ok(());
        };
        let cut = (|| -> Result<(), PersistError> {
            let later: Vec<u64> = log.segments.range(seq + 1..).map(|(s, _)| *s).collect();
            if log.writer.seq() != seq {
                let path = self.shared.dir.join(segment_name(seq));
                log.writer = SegmentWriter::reopen(path, seq, offset, log_id.index)?;
            }
            for s in later.into_iter().rev() {
                remove_file_durably(&self.shared.dir.join(segment_name(s)))?;
                log.segments.remove(&s);
            }
            log.writer.cut_back(offset, log_id.index)?;
            log.writer.sync()?;
            if log.older.contains(&seq) {
                // Cut back into an older format's segment: what follows goes to a
                // new segment of this build's format.
                let next = seq + 1;
                log.writer = SegmentWriter::create(
                    &RAFT_LOG_FORMAT,
                    self.shared.dir.join(segment_name(next)),
                    next,
                    log_id.index,
                )?;
                log.segments.insert(next, log_id.index);
            }
            Ok(())
        })();
        if let Err(e) = cut {
            log.poisoned = Some(e.to_string());
            return Err(io_err(e));
        }
        log.truncate_at(pos);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.flush_barrier();
        let mut log = self.shared.log.lock();
        if let Some(why) = &log.poisoned {
            return Err(poisoned_err(why));
        }
        if log
            .meta
            .last_purged()
            .is_some_and(|p| p.index >= log_id.index)
        {
            return Ok(());
        }
        let old = log.meta.clone();
        log.meta.last_purged = Some(crate::log_format::log_id_parts(&log_id));
        if let Err(e) = self.write_meta(&log) {
            log.meta = old;
            return Err(io_err(e));
        }
        while log
            .entries
            .front()
            .is_some_and(|e| e.log_id.index <= log_id.index)
        {
            log.pop_first();
        }
        let removed = (|| -> Result<(), PersistError> {
            if log.entries.is_empty() && log.writer.last_index() <= log_id.index + 1 {
                // Everything is purged: the log restarts after the purge point.
                self.roll(&mut log, log_id.index + 1)?;
            }
            // A segment can go once the next one starts at or before the purge point.
            let seqs: Vec<(u64, u64)> = log.segments.iter().map(|(s, p)| (*s, *p)).collect();
            for pair in seqs.windows(2) {
                let (seq, _) = pair[0];
                let (_, next_prev) = pair[1];
                if next_prev <= log_id.index + 1 {
                    remove_file_durably(&self.shared.dir.join(segment_name(seq)))?;
                    log.segments.remove(&seq);
                } else {
                    break;
                }
            }
            Ok(())
        })();
        if let Err(e) = removed {
            // The purge point is recorded; files left behind are skipped on open.
            tracing::warn!(error = %e, "raft log: removing purged segments failed");
        }
        Ok(())
    }
}

impl Drop for LogStore {
    /// The last handle, dropped without [`LogStore::close`], writes the pointer as
    /// `close` does, while it still holds the directory's lock. (Two last handles
    /// dropped at once may both skip it: the pointer is an optimisation of restarts.)
    fn drop(&mut self) {
        if Arc::strong_count(&self.lock) == 1 && self.lock.lock().is_some() {
            self.shared.record_committed();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The flusher thread holds only a weak reference; dropping the sender ends it.
        self.flusher.get_mut().take();
    }
}
