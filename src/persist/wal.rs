//! The write-ahead log: one checksummed record per applied command, in numbered
//! segment files.
//!
//! ```text
//! segment := MAGIC "SCHEDWAL" | VERSION u32 | SEQ u64 | PREV_INDEX u64 | CRC u32
//!            | record*
//! record  := LEN u32 | CRC u32 | postcard((index u64, Command))
//! ```
//! Little-endian integers, CRC-32 (IEEE). The header's CRC covers the 28 bytes before
//! it; a record's CRC covers its LEN bytes and its payload, so a damaged length is
//! caught too. `PREV_INDEX` is the index of the last record written before this
//! segment: with the sequence number it proves that no segment is missing between a
//! snapshot and the log, or between two segments.
//!
//! A record cut short by a crash can only be the last one of the last segment: there
//! it is truncated and reported. A bad record anywhere else is corruption — including a
//! bad record in the last segment that is followed by a valid one (a damaged length
//! can make a record look cut short; the valid record after it shows it is not).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::state::Command;

use super::error::{IoContext, PersistError, Result};
use super::fs;

/// The first bytes of every log segment.
pub const WAL_MAGIC: &[u8; 8] = b"SCHEDWAL";
/// The log format version this build writes and reads.
pub const WAL_VERSION: u32 = 1;
pub(crate) const SEGMENT_HEADER_LEN: u64 = 32;
const RECORD_HEADER_LEN: u64 = 8;
/// The largest record accepted.
const MAX_RECORD: u32 = 64 << 20;

/// The file name of segment `seq`.
pub(crate) fn segment_name(seq: u64) -> String {
    format!("wal-{seq:020}.log")
}

/// The sequence number of a segment file name.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

fn record_crc(len: [u8; 4], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len);
    h.update(payload);
    h.finalize()
}

fn segment_header(seq: u64, prev_index: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[0..8].copy_from_slice(WAL_MAGIC);
    h[8..12].copy_from_slice(&WAL_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&seq.to_le_bytes());
    h[20..28].copy_from_slice(&prev_index.to_le_bytes());
    let crc = crc32fast::hash(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The segment being appended to.
pub(crate) struct SegmentWriter {
    pub(crate) path: PathBuf,
    file: File,
    pub(crate) seq: u64,
    /// Bytes in the file (the offset of the next record).
    pub(crate) len: u64,
    /// Index of the last record written (or the segment's previous index).
    pub(crate) last_index: u64,
    buf: Vec<u8>,
}

/// Why an append failed, and whether the segment is still good.
#[derive(Debug)]
pub(crate) struct AppendError {
    pub(crate) error: PersistError,
    /// The file could not be cut back to its last whole record: the segment must not
    /// be appended to again (the store poisons itself).
    pub(crate) poisoned: bool,
}

impl SegmentWriter {
    /// Creates segment `seq` in `dir`, durable (file and directory fsynced). If a step
    /// fails, the file is removed again (best effort: the caller checks with
    /// [`segment_path`] whether it is gone).
    pub(crate) fn create(dir: &Path, seq: u64, prev_index: u64) -> Result<SegmentWriter> {
        let path = segment_path(dir, seq);
        let file = fs::create(&path)?;
        let made = (|| {
            fs::write_all(&file, &path, &segment_header(seq, prev_index))?;
            fs::sync_all(&file, &path)?;
            fs::sync_dir(dir)
        })();
        if let Err(e) = made {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Ok(SegmentWriter {
            path,
            file,
            seq,
            len: SEGMENT_HEADER_LEN,
            last_index: prev_index,
            buf: Vec::new(),
        })
    }

    /// Reopens an existing, already validated segment for appending at `len`.
    pub(crate) fn reopen(
        path: PathBuf,
        seq: u64,
        len: u64,
        last_index: u64,
    ) -> Result<SegmentWriter> {
        let file = fs::open_append(&path)?;
        Ok(SegmentWriter {
            path,
            file,
            seq,
            len,
            last_index,
            buf: Vec::new(),
        })
    }

    /// Appends the record of `command` (encoded beforehand, so that a command consumed
    /// by applying it can still be logged) at `index`. On a failed write the file is
    /// cut back to its last whole record (and the write position with it), so nothing
    /// of the failed record is left before the next one; if even that fails, the error
    /// says the segment is poisoned.
    pub(crate) fn append(
        &mut self,
        index: u64,
        command: &EncodedCommand,
    ) -> std::result::Result<u64, AppendError> {
        let buf = encode_into(index, command, std::mem::take(&mut self.buf)).map_err(|error| {
            AppendError {
                error,
                poisoned: false,
            }
        })?;
        let result = self.append_bytes(index, &buf);
        self.buf = buf;
        result
    }

    /// Checks the size, writes, and cuts back on failure.
    fn append_bytes(&mut self, index: u64, record: &[u8]) -> std::result::Result<u64, AppendError> {
        let payload_len = record.len() - RECORD_HEADER_LEN as usize;
        if u32::try_from(payload_len).map_or(true, |n| n > MAX_RECORD) {
            return Err(AppendError {
                error: PersistError::TooLarge {
                    what: "a log record",
                    bytes: payload_len as u64,
                    limit: u64::from(MAX_RECORD),
                },
                poisoned: false,
            });
        }
        match fs::write_all(&self.file, &self.path, record) {
            Ok(()) => {
                self.len += record.len() as u64;
                self.last_index = index;
                Ok(self.len)
            }
            Err(error) => {
                let poisoned = self.cut_back(self.len).is_err();
                Err(AppendError { error, poisoned })
            }
        }
    }

    /// Cuts the file back to `len` bytes and moves the write position there (a file
    /// not opened to append would otherwise write its next record after a hole).
    pub(crate) fn cut_back(&mut self, len: u64) -> Result<()> {
        fs::set_len(&self.file, &self.path, len)?;
        self.file.seek(SeekFrom::Start(len)).at(&self.path)?;
        self.len = len;
        Ok(())
    }

    /// Makes everything appended so far durable.
    pub(crate) fn sync(&self) -> Result<()> {
        fs::sync_data(&self.file, &self.path)
    }

    /// Another handle on the file, to fsync without holding the log.
    pub(crate) fn sync_handle(&self) -> Result<(File, PathBuf)> {
        Ok((self.file.try_clone().at(&self.path)?, self.path.clone()))
    }
}

/// The path of segment `seq` in `dir`.
pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_name(seq))
}

/// A command's encoding, made ahead of its record: a log record's payload is
/// `postcard((index, command))`, which is the index's varint followed by the command's
/// own encoding, so the index (which `apply_next` learns only under the writer lock)
/// is added when the record is written.
pub(crate) struct EncodedCommand {
    bytes: Vec<u8>,
}

impl EncodedCommand {
    pub(crate) fn new(command: &Command) -> Result<EncodedCommand> {
        Ok(EncodedCommand {
            bytes: postcard::to_allocvec(command)?,
        })
    }
}

/// Encodes the record of `command` at `index` into `buf` (cleared first): length,
/// checksum, then the payload. The length is clamped here and checked against the
/// record limit when the record is written.
fn encode_into(index: u64, command: &EncodedCommand, mut buf: Vec<u8>) -> Result<Vec<u8>> {
    buf.clear();
    buf.extend_from_slice(&[0u8; RECORD_HEADER_LEN as usize]);
    let mut buf = postcard::to_extend(&index, buf)?;
    buf.extend_from_slice(&command.bytes);
    let payload_len = buf.len() - RECORD_HEADER_LEN as usize;
    let len_bytes = u32::try_from(payload_len).unwrap_or(u32::MAX).to_le_bytes();
    let crc = record_crc(len_bytes, &buf[RECORD_HEADER_LEN as usize..]);
    buf[0..4].copy_from_slice(&len_bytes);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(buf)
}

/// A record found by a scan.
pub(crate) struct Record {
    /// Offset of the record in its segment.
    pub(crate) offset: u64,
    /// The log index it was applied at.
    pub(crate) index: u64,
    /// The command.
    pub(crate) command: Command,
}

/// What a scan of one segment found.
pub(crate) struct Scan {
    pub(crate) prev_index: u64,
    /// Length of the valid prefix of the file.
    pub(crate) valid_len: u64,
    /// Bytes after `valid_len` (a torn tail; only possible in the last segment).
    pub(crate) torn_bytes: u64,
    /// The header itself was torn (a crash while creating the segment).
    pub(crate) torn_header: bool,
}

/// Reads segment `path`, calling `on_header` with its sequence number and previous
/// index once the header is checked (not for a torn header), then `on_record` for each
/// record in order. With `last` (the last segment), a torn tail is reported in the
/// result instead of failing.
pub(crate) fn scan_segment(
    path: &Path,
    last: bool,
    on_header: impl FnOnce(u64, u64) -> Result<()>,
    mut on_record: impl FnMut(Record) -> Result<()>,
) -> Result<Scan> {
    let bytes = std::fs::read(path).at(path)?;
    let total = bytes.len() as u64;
    let corrupt = |offset: u64, reason: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    if total < SEGMENT_HEADER_LEN {
        // A header cut short by a crash is a prefix of ours; anything else is not a
        // file of ours (and must not be removed as a torn header).
        let n = bytes.len().min(8);
        if bytes[..n] != WAL_MAGIC[..n] {
            return Err(PersistError::BadMagic {
                path: path.to_path_buf(),
                kind: "log segment",
            });
        }
        if bytes.len() >= 12 {
            let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            if version != WAL_VERSION {
                return Err(PersistError::UnsupportedVersion {
                    path: path.to_path_buf(),
                    version,
                    supported: WAL_VERSION,
                });
            }
        }
        if last {
            return Ok(Scan {
                prev_index: 0,
                valid_len: 0,
                torn_bytes: total,
                torn_header: true,
            });
        }
        return Err(corrupt(0, "segment shorter than its header".into()));
    }
    if &bytes[0..8] != WAL_MAGIC {
        return Err(PersistError::BadMagic {
            path: path.to_path_buf(),
            kind: "log segment",
        });
    }
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    // The version first: another version's header may be laid out differently, so
    // its checksum cannot be checked as ours.
    let version = u32_at(8);
    if version != WAL_VERSION {
        return Err(PersistError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            supported: WAL_VERSION,
        });
    }
    if u32_at(28) != crc32fast::hash(&bytes[0..28]) {
        return Err(PersistError::Checksum {
            path: path.to_path_buf(),
            offset: 0,
            what: "segment header",
        });
    }
    let seq = u64_at(12);
    let prev_index = u64_at(20);
    on_header(seq, prev_index)?;

    let mut at = SEGMENT_HEADER_LEN;
    while at < total {
        let remaining = total - at;
        // A crash mid-write leaves a prefix of one record at the very end of the last
        // segment. A whole valid record after the damage proves it is not that (a
        // damaged length, a flipped byte) but corruption, which must not be truncated.
        let torn = |reason: String| -> Result<Scan> {
            if last && !valid_record_after(&bytes, at) {
                Ok(Scan {
                    prev_index,
                    valid_len: at,
                    torn_bytes: remaining,
                    torn_header: false,
                })
            } else {
                Err(corrupt(at, reason))
            }
        };
        if remaining < RECORD_HEADER_LEN {
            return torn("record header cut short".into());
        }
        let p = at as usize;
        let len = u32_at(p);
        let stored_crc = u32_at(p + 4);
        let end = at + RECORD_HEADER_LEN + u64::from(len);
        if end > total {
            return torn(format!(
                "record of {len} bytes extends past the end of the segment"
            ));
        }
        let payload = &bytes[p + 8..end as usize];
        if record_crc(len.to_le_bytes(), payload) != stored_crc {
            if end == total && last && !valid_record_after(&bytes, at) {
                return torn("last record fails its checksum".into());
            }
            return Err(PersistError::Checksum {
                path: path.to_path_buf(),
                offset: at,
                what: "log record",
            });
        }
        if len > MAX_RECORD {
            return Err(corrupt(
                at,
                format!("record length {len} exceeds the limit"),
            ));
        }
        let (index, command): (u64, Command) = postcard::from_bytes(payload)
            .map_err(|err| corrupt(at, format!("record does not decode: {err}")))?;
        on_record(Record {
            offset: at,
            index,
            command,
        })?;
        at = end;
    }
    Ok(Scan {
        prev_index,
        valid_len: total,
        torn_bytes: 0,
        torn_header: false,
    })
}

/// Whether a whole record with a valid checksum and a decodable payload starts
/// anywhere after `from` in `bytes`. A torn write leaves only a prefix of one record,
/// so finding one means the bytes at `from` were damaged, not torn.
///
/// The search checksums candidate records; past a budget of bytes (only reachable with
/// forged input) it gives up and answers yes, so that the damage is reported as
/// corruption rather than truncated away.
fn valid_record_after(bytes: &[u8], from: u64) -> bool {
    let header = RECORD_HEADER_LEN as usize;
    let mut budget = 2 * u64::from(MAX_RECORD);
    let mut p = from as usize + 1;
    while p + header <= bytes.len() {
        let len = u32::from_le_bytes([bytes[p], bytes[p + 1], bytes[p + 2], bytes[p + 3]]);
        let end = p + header + len.min(MAX_RECORD) as usize;
        if len <= MAX_RECORD && end <= bytes.len() {
            let cost = u64::from(len) + header as u64;
            if cost > budget {
                return true;
            }
            budget -= cost;
            let stored =
                u32::from_le_bytes([bytes[p + 4], bytes[p + 5], bytes[p + 6], bytes[p + 7]]);
            let payload = &bytes[p + header..end];
            if record_crc(len.to_le_bytes(), payload) == stored
                && postcard::from_bytes::<(u64, Command)>(payload).is_ok()
            {
                return true;
            }
        }
        p += 1;
    }
    false
}

/// The whole, checksummed, decodable records in `bytes` from `from` on, and the first
/// and last of their indexes: what a repair reports as lost. Damaged bytes are stepped
/// over one at a time; past a budget of checksummed bytes (only reachable with forged
/// input) the count stops, a lower bound.
pub(crate) fn decodable_records(bytes: &[u8], from: u64) -> (u64, Option<(u64, u64)>) {
    let header = RECORD_HEADER_LEN as usize;
    let mut budget = 4 * u64::from(MAX_RECORD);
    let (mut count, mut range): (u64, Option<(u64, u64)>) = (0, None);
    let mut p = from as usize;
    while p + header <= bytes.len() {
        let len = u32::from_le_bytes([bytes[p], bytes[p + 1], bytes[p + 2], bytes[p + 3]]);
        let end = p + header + len.min(MAX_RECORD) as usize;
        if len <= MAX_RECORD && end <= bytes.len() {
            let cost = u64::from(len) + header as u64;
            if cost > budget {
                break;
            }
            budget -= cost;
            let stored =
                u32::from_le_bytes([bytes[p + 4], bytes[p + 5], bytes[p + 6], bytes[p + 7]]);
            let payload = &bytes[p + header..end];
            if record_crc(len.to_le_bytes(), payload) == stored
                && let Ok((index, _)) = postcard::from_bytes::<(u64, Command)>(payload)
            {
                count += 1;
                range =
                    Some(range.map_or((index, index), |(lo, hi)| (lo.min(index), hi.max(index))));
                p = end;
                continue;
            }
        }
        p += 1;
    }
    (count, range)
}
