//! Opening a log: the metadata read, every segment scanned, a torn tail cut off the
//! last one, the entries after the purge point kept, the flusher thread started.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, mpsc};

use parking_lot::{Condvar, Mutex};
use schedstate::persist::segment::{SegmentWriter, create_dir_all, remove_file_durably};
use schedstate::persist::{DirLock, PersistError};

use super::flusher::{Committed, FlushRequest, flush_loop};
use super::{Log, LogOpenReport, LogOptions, LogStore, Shared, Slot};
use crate::committed::{self, CommittedFile};
use crate::log_format::{RAFT_LOG_FORMAT, RAFT_LOG_VERSION, RaftMeta, segment_name};
use crate::log_scan::scan_log;

impl LogStore {
    /// Opens (or creates) the log in `dir`: reads the metadata, scans every segment,
    /// cuts a torn tail off the last one, and keeps the entries after the purge point.
    ///
    /// # Errors
    /// A [`PersistError`] naming the file and offset of any damage that is not a torn
    /// tail, a missing segment, or an I/O error.
    pub fn open(
        dir: &Path,
        options: LogOptions,
    ) -> Result<(LogStore, LogOpenReport), PersistError> {
        create_dir_all(dir)?;
        let permissions_fixed = schedstate::persist::make_owner_only(dir)?;
        for path in &permissions_fixed {
            tracing::warn!(path = %path.display(), "other users could read this; made it owner-only");
        }
        // One server per directory, across processes and within one.
        let lock = DirLock::acquire(dir)?;
        let meta = RaftMeta::read(dir)?.unwrap_or_default();
        // Positions: a record's position is its Raft index + 1 (a Raft log starts at
        // index 0, the initial membership), so position 0 means "nothing before".
        let purged = meta.last_purged().map_or(0, |l| l.index + 1);
        let scanned = scan_log(dir, purged)?;

        let mut report = LogOpenReport {
            permissions_fixed,
            ..LogOpenReport::default()
        };
        let mut segments = BTreeMap::new();
        let mut tail: Option<(u64, u64, u64)> = None; // (seq, valid_len, last index)
        let mut older = BTreeSet::new();
        for seg in &scanned.segments {
            report.torn_bytes += seg.scan.torn_bytes;
            if seg.scan.torn_header {
                // A crash while creating the segment: it never held a record.
                remove_file_durably(&seg.path)?;
                continue;
            }
            segments.insert(seg.seq, seg.scan.prev_index);
            if seg.scan.version < RAFT_LOG_VERSION {
                older.insert(seg.seq);
            }
            tail = Some((seg.seq, seg.scan.valid_len, seg.last));
        }
        let next_seq = scanned.segments.last().map_or(1, |s| s.seq + 1);
        let entries: VecDeque<Slot> = scanned
            .records
            .into_iter()
            .map(|r| {
                let entry = r.record.into_entry();
                Slot {
                    log_id: entry.log_id,
                    entry: Some(entry),
                    seq: r.seq,
                    offset: r.offset,
                    len: r.len,
                }
            })
            .collect();
        report.entries = entries.len() as u64;

        let writer = match tail {
            Some((seq, valid_len, last)) => {
                let mut w =
                    SegmentWriter::reopen(dir.join(segment_name(seq)), seq, valid_len, last)?;
                if report.torn_bytes > 0 {
                    w.cut_back(valid_len, last)?;
                    w.sync()?;
                }
                if older.contains(&seq) {
                    // An older format's segment is not appended to.
                    let next = SegmentWriter::create(
                        &RAFT_LOG_FORMAT,
                        dir.join(segment_name(seq + 1)),
                        seq + 1,
                        last,
                    )?;
                    segments.insert(seq + 1, last);
                    next
                } else {
                    w
                }
            }
            None => {
                let seq = next_seq;
                let w = SegmentWriter::create(
                    &RAFT_LOG_FORMAT,
                    dir.join(segment_name(seq)),
                    seq,
                    purged,
                )?;
                segments.insert(seq, purged);
                w
            }
        };

        let recovered_committed = committed::read(dir).and_then(|c| {
            let first = entries.front().map(|e| e.log_id.index)?;
            let found = c
                .index
                .checked_sub(first)
                .and_then(|pos| entries.get(pos as usize))
                .map(|e| e.log_id);
            if found == Some(c) {
                Some(c)
            } else {
                // Before the first entry (purged: the snapshot holds it), past the
                // last, or naming another entry: re-apply nothing beyond the snapshot.
                if c.index >= first {
                    tracing::warn!(committed = %c, "raft log: the committed pointer names no entry of the log; ignored");
                }
                None
            }
        });
        let (tx, rx) = mpsc::channel::<FlushRequest>();
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            options,
            log: Mutex::new({
                let mut log = Log {
                    entries,
                    cached_from: 0,
                    cached_bytes: 0,
                    segments,
                    older,
                    writer,
                    meta,
                    poisoned: None,
                };
                log.cached_bytes = log.entries.iter().map(|e| e.len).sum();
                log.evict(options.cache_bytes);
                log
            }),
            flusher: Mutex::new(Some(tx)),
            committed: Mutex::new(Committed {
                reported: recovered_committed,
                durable: recovered_committed,
            }),
            committed_file: Mutex::new(CommittedFile::open(dir, recovered_committed)),
            flushes: Mutex::new((0, 0)),
            flushed: Condvar::new(),
            appends: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            disk_reads: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("raft-log-flush".into())
            .spawn(move || flush_loop(&weak, &rx))
            .map_err(|source| PersistError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        Ok((
            LogStore {
                shared,
                lock: Arc::new(Mutex::new(Some(lock))),
            },
            report,
        ))
    }
}
