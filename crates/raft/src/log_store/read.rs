//! Reading the log back: openraft's `RaftLogReader`, from the cache of decoded entries
//! or, for older ones, from their segment (a run of records with one read).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::Ordering;

use openraft::{RaftLogReader, StorageError, StorageIOError};
use schedstate::persist::PersistError;
use schedstate::persist::segment;

use super::{LogStore, Slot};
use crate::log_format::{RaftRecord, segment_name};
use crate::{Entry, NodeId, TypeConfig};

fn range_bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

/// The most record bytes of entries one replication RPC carries (at least one entry
/// whatever its size). openraft 0.9 gives every `AppendEntries` the heartbeat
/// interval (40 ms) to be answered and resends the same range at once when it is
/// not: a follower catching up from far behind was sent 512 entries (then the
/// most per RPC) of up to 32 commands each (16 MiB), which it could not take, write
/// and fsync in time, so the leader resent them over and over — a server restarted after a busy phase stood
/// still for 1–3 s before its first entry. One MiB is written and fsynced within a few
/// milliseconds here.
const REPLICATION_BATCH_BYTES: u64 = 1 << 20;

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let (start, end) = range_bounds(&range);
        self.entries(start, end, u64::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        self.entries(start, end, REPLICATION_BATCH_BYTES)
    }
}

impl LogStore {
    /// The entries of `[start, end)` held here, in order, stopping before the one that
    /// would take their record bytes past `max_bytes` (the first is always returned).
    pub(super) fn entries(
        &self,
        start: u64,
        end: u64,
        max_bytes: u64,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let log = self.shared.log.lock();
        let Some(first) = log.entries.front() else {
            return Ok(Vec::new());
        };
        let first = first.log_id.index;
        let from = (start.max(first) - first) as usize;
        let to = ((end.max(first) - first) as usize).min(log.entries.len());
        // How many to return: up to `max_bytes` of records, at least one.
        let mut count = 0;
        let mut bytes = 0u64;
        for slot in log.entries.range(from..to.max(from)) {
            bytes = bytes.saturating_add(slot.len);
            if bytes > max_bytes && count > 0 {
                break;
            }
            count += 1;
        }
        let mut out = Vec::with_capacity(count);
        let mut i = from;
        while i < from + count {
            let slot = &log.entries[i];
            if let Some(e) = &slot.entry {
                out.push(e.clone());
                i += 1;
                continue;
            }
            // Entries no longer cached are read back under the lock (a truncate or
            // purge cannot remove their file meanwhile): a run of them in one segment
            // with one read of the bytes they span (a new leader's first rounds send
            // followers older entries they already have, a batch per round, and a file
            // opened per entry held this lock, and with it the leader's own appends,
            // for milliseconds).
            let mut run_end = i + 1;
            let mut span_end = slot.offset + slot.len;
            while run_end < from + count {
                let next = &log.entries[run_end];
                if next.entry.is_some()
                    || next.seq != slot.seq
                    || next.offset != span_end
                    || span_end + next.len - slot.offset > READ_SPAN_BYTES
                {
                    break;
                }
                span_end += next.len;
                run_end += 1;
            }
            let run = log.entries.range(i..run_end);
            self.shared
                .disk_reads
                .fetch_add((run_end - i) as u64, Ordering::Relaxed);
            read_entries(
                &self.shared.dir,
                run,
                slot.offset,
                span_end - slot.offset,
                &mut out,
            )
            .map_err(|e| StorageError::from(StorageIOError::<NodeId>::read_logs(&e)))?;
            i = run_end;
        }
        Ok(out)
    }
}

/// The most bytes read back from a segment at once: a run of uncached entries longer
/// than this is read in several spans (an entry larger than it, alone).
const READ_SPAN_BYTES: u64 = 4 << 20;

/// Reads the entries of `run` (consecutive records of one segment, the first at
/// `offset`, `len` bytes in all) back with one read, appending them to `out`.
fn read_entries<'a>(
    dir: &Path,
    run: impl Iterator<Item = &'a Slot>,
    offset: u64,
    len: u64,
    out: &mut Vec<Entry>,
) -> Result<(), PersistError> {
    let mut run = run.peekable();
    let Some(first) = run.peek() else {
        return Ok(());
    };
    let path = dir.join(segment_name(first.seq));
    let span = segment::read_span(&path, offset, len)?;
    for slot in run {
        let at = (slot.offset - offset) as usize;
        let payload = segment::record_in(&span, at, &path, offset)?;
        out.push(decode_entry(&path, slot, payload)?);
    }
    Ok(())
}

/// The entry of `slot` from its record's payload, read back from `path`.
fn decode_entry(path: &Path, slot: &Slot, payload: &[u8]) -> Result<Entry, PersistError> {
    let record: RaftRecord = postcard::from_bytes(payload).map_err(|e| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset: slot.offset,
        reason: format!("record does not decode: {e}"),
    })?;
    if record.index != slot.log_id.index {
        return Err(PersistError::Corrupt {
            path: path.to_path_buf(),
            offset: slot.offset,
            reason: format!(
                "record of index {} where {} was written",
                record.index, slot.log_id.index
            ),
        });
    }
    Ok(record.into_entry())
}
