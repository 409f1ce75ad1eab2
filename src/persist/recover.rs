//! Recovery: what a data directory holds, loaded and checked — the newest snapshot,
//! then every log record after it, with ordering, gap and torn-tail checks. Changes no
//! file; `DurableStore::open` acts on what it reports.

use std::fs;
use std::path::{Path, PathBuf};

use crate::state::StateStore;

use super::data_dir::FileKind;
use super::error::{IoContext, PersistError, Result};
use super::snapshot::read_snapshot;
use super::wal::scan_segment;

/// A record cut short by a crash, removed when the store was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment.
    pub path: PathBuf,
    /// Where the torn record started (the file's new length).
    pub offset: u64,
    /// How many bytes were dropped.
    pub bytes: u64,
}

/// What opening a data directory found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpenReport {
    /// The index of the snapshot loaded, if there was one.
    pub snapshot_index: Option<u64>,
    /// How many log records were replayed on top of it.
    pub replayed: u64,
    /// The last applied index after recovery.
    pub last_applied: u64,
    /// A torn record removed from the end of the log (read-only opens report it but
    /// leave the file alone).
    pub torn_tail: Option<TornTail>,
    /// The log segments found, in order.
    pub segments: Vec<PathBuf>,
    /// Bytes of those segments up to the end of their last whole record (headers
    /// included): what the log holds. The segment being appended to is longer on
    /// disk, by the zeros preallocated after its records.
    pub log_bytes: u64,
    /// The directory and files that other users could read or write, made
    /// owner-only on open (read-only opens change nothing and leave this empty).
    pub permissions_fixed: Vec<PathBuf>,
}

/// The files of a data directory.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) snapshots: Vec<(u64, PathBuf)>,
    pub(crate) segments: Vec<(u64, PathBuf)>,
    pub(crate) temporaries: Vec<PathBuf>,
}

pub(crate) fn list(dir: &Path) -> Result<Listing> {
    let mut l = Listing::default();
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        match FileKind::of(&name) {
            FileKind::Snapshot { index } => l.snapshots.push((index, path)),
            FileKind::LogSegment { seq } => l.segments.push((seq, path)),
            FileKind::Temporary => l.temporaries.push(path),
            _ => {}
        }
    }
    l.snapshots.sort();
    l.segments.sort();
    Ok(l)
}

/// State recovered from a directory, before it is opened for writing.
pub(crate) struct Recovered {
    pub(crate) store: StateStore,
    pub(crate) report: OpenReport,
    /// The last segment: (seq, path, valid length, last index, torn header, written by
    /// an older format version).
    pub(crate) tail: Option<(u64, PathBuf, u64, u64, bool, bool)>,
    pub(crate) listing: Listing,
}

/// Loads the newest snapshot and replays the log after it. Changes no file.
pub(crate) fn recover(dir: &Path) -> Result<Recovered> {
    let listing = list(dir)?;
    let store = StateStore::new();
    let mut report = OpenReport::default();
    let mut snap_index = 0;
    if let Some((index, path)) = listing.snapshots.last() {
        let mut file = std::io::BufReader::with_capacity(1 << 20, fs::File::open(path).at(path)?);
        let header = read_snapshot(&mut file, path, &store)?;
        if header.last_applied != *index {
            return Err(PersistError::Corrupt {
                path: path.clone(),
                offset: 16,
                reason: format!(
                    "file name says index {index}, header says {}",
                    header.last_applied
                ),
            });
        }
        snap_index = *index;
        report.snapshot_index = Some(*index);
    }

    // The index of the last record seen in the log (before or after the snapshot):
    // records must increase strictly across all segments.
    let mut log_end: Option<u64> = None;
    let mut expected_seq: Option<u64> = None;
    let mut tail = None;
    let count = listing.segments.len();
    for (pos, (seq, path)) in listing.segments.iter().enumerate() {
        let is_last = pos + 1 == count;
        if let Some(expected) = expected_seq
            && *seq != expected
        {
            return Err(PersistError::MissingSegment {
                path: path.clone(),
                reason: format!("expected segment {expected}, found {seq}"),
            });
        }
        expected_seq = Some(seq + 1);
        let mut seg_end = log_end;
        // The index the segment's header says it starts after: no record of it may be
        // at or below (for the first segment nothing else bounds its first record).
        let starts_after = std::cell::Cell::new(0u64);
        // The header is checked before any record is replayed: a missing segment is
        // reported as such, not as the first record that fails to replay without it.
        let on_header = |header_seq: u64, prev_index: u64| -> Result<()> {
            if header_seq != *seq {
                return Err(PersistError::Corrupt {
                    path: path.clone(),
                    offset: 12,
                    reason: format!("header says segment {header_seq}, file name says {seq}"),
                });
            }
            // The first segment must start at or before the snapshot, each later one
            // exactly where the previous one ended.
            let gap = match log_end {
                None => prev_index > snap_index,
                Some(end) => prev_index != end,
            };
            if gap {
                return Err(PersistError::MissingSegment {
                    path: path.clone(),
                    reason: format!(
                        "segment starts after index {prev_index}, but the log before it ends at {}",
                        log_end.unwrap_or(snap_index)
                    ),
                });
            }
            starts_after.set(prev_index);
            Ok(())
        };
        let scan = scan_segment(path, is_last, on_header, |rec| {
            // Log indexes start at 1: no store writes index 0, so such a record is
            // forged or damaged, not "already in the snapshot" (which it would pass for
            // below, snapshot or not).
            if rec.index == 0 {
                return Err(PersistError::Corrupt {
                    path: path.clone(),
                    offset: rec.offset,
                    reason: "log index 0 (indexes start at 1)".into(),
                });
            }
            if rec.index <= starts_after.get() {
                return Err(PersistError::Corrupt {
                    path: path.clone(),
                    offset: rec.offset,
                    reason: format!(
                        "log index {} is not after index {}, where the segment's header says it starts",
                        rec.index,
                        starts_after.get()
                    ),
                });
            }
            if let Some(prev) = seg_end
                && rec.index <= prev
            {
                return Err(PersistError::Corrupt {
                    path: path.clone(),
                    offset: rec.offset,
                    reason: format!("log index {} does not follow {prev}", rec.index),
                });
            }
            seg_end = Some(rec.index);
            if rec.index <= snap_index {
                // Already in the snapshot (a compaction stopped before deleting).
                return Ok(());
            }
            let applied = if rec.legacy {
                store.apply_replayed_legacy(rec.index, &rec.command)
            } else {
                store.apply(rec.index, &rec.command)
            };
            applied.map_err(|source| PersistError::Replay {
                path: path.clone(),
                offset: rec.offset,
                index: rec.index,
                source: Box::new(source),
            })?;
            report.replayed += 1;
            Ok(())
        })?;
        log_end = Some(seg_end.unwrap_or(scan.prev_index));
        if scan.torn_bytes > 0 {
            report.torn_tail = Some(TornTail {
                path: path.clone(),
                offset: scan.valid_len,
                bytes: scan.torn_bytes,
            });
        }
        report.segments.push(path.clone());
        report.log_bytes += scan.valid_len;
        if is_last {
            let last = log_end.unwrap_or(snap_index).max(snap_index);
            let older = scan.version < super::wal::WAL_VERSION;
            tail = Some((
                *seq,
                path.clone(),
                scan.valid_len,
                last,
                scan.torn_header,
                older,
            ));
        }
    }
    report.last_applied = store.snapshot().view().last_applied();
    Ok(Recovered {
        store,
        report,
        tail,
        listing,
    })
}
