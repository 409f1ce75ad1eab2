//! Reading the Raft log's segments, read-only: every segment of a directory in order,
//! each checked (header, sequence number, contiguity with the one before, record
//! checksums and indexes) and its records decoded. A torn tail of the last segment is
//! found and reported, not cut: [`LogStore::open`](crate::LogStore::open) repairs what
//! this finds, `inspect` only reports it.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use schedstate::persist::PersistError;
use schedstate::persist::segment::{Scan, scan_segment};

use crate::log_format::{
    RAFT_LOG_FORMAT, RaftRecord, decode_record, parse_segment_name, segment_name,
};

/// One segment as scanned.
#[derive(Debug, Clone)]
pub(crate) struct ScannedSegment {
    /// Its sequence number.
    pub seq: u64,
    /// Its path.
    pub path: PathBuf,
    /// What the scan found: the format version, the header's previous position, the
    /// valid length and a torn tail (or a torn header: a segment being created).
    pub scan: Scan,
    /// The position (Raft index + 1) of its last record, or its previous position if
    /// it holds none.
    pub last: u64,
    /// Records in it, the purged ones included.
    pub records: u64,
}

/// One record after the purge point and where it is.
#[derive(Debug, Clone)]
pub(crate) struct ScannedRecord {
    pub record: RaftRecord,
    /// The sequence number of its segment.
    pub seq: u64,
    /// Its offset in the segment.
    pub offset: u64,
    /// Its length in bytes (header included).
    pub len: u64,
}

/// Every segment of a log directory and the records after its purge point.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScannedLog {
    /// The segments in order; the last may have a torn header.
    pub segments: Vec<ScannedSegment>,
    /// The records after the purge point, contiguous.
    pub records: Vec<ScannedRecord>,
    /// Records at or before the purge point still on disk (in a segment that also
    /// holds later ones): skipped.
    pub purged_records: u64,
    /// The position the log starts after: the purge point, or where its first segment
    /// starts (an empty log may begin at any index, e.g. right after a snapshot).
    pub start: u64,
}

/// The sequence numbers of the segments in `dir`, in order.
pub(crate) fn segment_seqs(dir: &Path) -> Result<Vec<u64>, PersistError> {
    let io = |source| PersistError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut seqs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if let Some(seq) = entry.file_name().to_str().and_then(parse_segment_name) {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Scans every segment of the log in `dir` whose purge point is position `purged`
/// (the last purged Raft index + 1, or 0). Reads only.
///
/// # Errors
/// A [`PersistError`] naming the file and offset of any damage that is not a torn
/// tail of the last segment, a missing segment, or an I/O error.
pub(crate) fn scan_log(dir: &Path, purged: u64) -> Result<ScannedLog, PersistError> {
    let seqs = segment_seqs(dir)?;
    let mut log = ScannedLog::default();
    // Positions: a record's position is its Raft index + 1 (a Raft log starts at
    // index 0, the initial membership), so position 0 means "nothing before".
    let mut last_index: Option<u64> = None;
    for (i, &seq) in seqs.iter().enumerate() {
        let path = dir.join(segment_name(seq));
        let is_last = i + 1 == seqs.len();
        let seg_last = Cell::new(None::<u64>);
        let mut records = 0;
        let scan = scan_segment(
            &RAFT_LOG_FORMAT,
            &path,
            is_last,
            |hseq, prev| {
                if hseq != seq {
                    return Err(PersistError::Corrupt {
                        path: path.clone(),
                        offset: 12,
                        reason: format!("header says segment {hseq}, file name says {seq}"),
                    });
                }
                if let Some(last) = last_index
                    && prev != last
                {
                    return Err(PersistError::MissingSegment {
                        path: path.clone(),
                        reason: format!(
                            "segment starts after index {prev}, but the log before it ends at {last}"
                        ),
                    });
                }
                seg_last.set(Some(prev));
                Ok(())
            },
            |version, payload| decode_record(version, payload).map_err(|e| e.to_string()),
            |rec| {
                let expected = seg_last.get().map_or(1, |l| l + 1);
                if rec.value.index + 1 != expected {
                    return Err(PersistError::Corrupt {
                        path: path.clone(),
                        offset: rec.offset,
                        reason: format!(
                            "log index {} where {} was expected",
                            rec.value.index,
                            expected - 1
                        ),
                    });
                }
                seg_last.set(Some(rec.value.index + 1));
                records += 1;
                if rec.value.index + 1 > purged {
                    log.records.push(ScannedRecord {
                        record: rec.value,
                        seq,
                        offset: rec.offset,
                        len: rec.end - rec.offset,
                    });
                } else {
                    log.purged_records += 1;
                }
                Ok(())
            },
        )?;
        let last = seg_last.get().unwrap_or(scan.prev_index);
        if !scan.torn_header {
            last_index = seg_last.get();
        }
        log.segments.push(ScannedSegment {
            seq,
            path,
            scan,
            last,
            records,
        });
    }
    let first_prev = log
        .segments
        .iter()
        .find(|s| !s.scan.torn_header)
        .map_or(0, |s| s.scan.prev_index);
    log.start = purged.max(first_prev);
    if let Some(first) = log.records.first()
        && first.record.index != log.start
    {
        return Err(PersistError::MissingSegment {
            path: dir.to_path_buf(),
            reason: format!(
                "the log resumes at index {} after position {}",
                first.record.index, log.start
            ),
        });
    }
    Ok(log)
}
