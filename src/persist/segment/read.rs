//! Reading segments back: a span of records with one read, one record of a span, and
//! the scan of a whole segment that tells a torn tail from corruption (the rules in
//! the parent module's docs).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::Path;

use super::{MAX_RECORD, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN, SegmentFormat, record_crc};
use crate::persist::error::{IoContext, PersistError, Result};

/// Reads `len` bytes of the segment `path` from `offset` with one open and one read:
/// the records a caller knows lie there (offsets a scan or an append reported), to
/// take apart with [`record_in`]. Many consecutive records cost one open and one
/// read, not a few system calls each.
///
/// # Errors
/// The I/O error; a file shorter than `offset + len` is an
/// [`UnexpectedEof`](std::io::ErrorKind::UnexpectedEof).
pub fn read_span(path: &Path, offset: u64, len: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let len = usize::try_from(len).map_err(|_| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason: format!("a span of {len} bytes does not fit in memory"),
    })?;
    let mut file = File::open(path).at(path)?;
    file.seek(SeekFrom::Start(offset)).at(path)?;
    let mut span = vec![0u8; len];
    file.read_exact(&mut span).at(path)?;
    Ok(span)
}

/// The payload of the record at `at` in `span`, bytes [`read_span`] read from the
/// segment `path` at `span_offset`: its header's length within the limit and the
/// span, its checksum matching (errors name the record's offset in the file).
///
/// # Errors
/// [`PersistError::Corrupt`] if the record does not fit in the span or claims a
/// length over the limit, [`PersistError::Checksum`] if its checksum does not match.
pub fn record_in<'a>(span: &'a [u8], at: usize, path: &Path, span_offset: u64) -> Result<&'a [u8]> {
    let offset = span_offset + at as u64;
    let corrupt = |reason: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    let header = span
        .get(at..)
        .and_then(|rest| rest.first_chunk::<{ RECORD_HEADER_LEN as usize }>())
        .ok_or_else(|| corrupt("the record's header lies past the bytes read".into()))?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_RECORD {
        return Err(corrupt(format!("record length {len} exceeds the limit")));
    }
    let start = at + RECORD_HEADER_LEN as usize;
    let payload = span
        .get(start..start + len as usize)
        .ok_or_else(|| corrupt(format!("a record of {len} bytes runs past the bytes read")))?;
    if record_crc(len.to_le_bytes(), payload) != stored {
        return Err(PersistError::Checksum {
            path: path.to_path_buf(),
            offset,
            what: "log record",
        });
    }
    Ok(payload)
}

/// A record found by a scan.
pub struct Record<R> {
    /// Offset of the record in its segment.
    pub offset: u64,
    /// Offset just past it.
    pub end: u64,
    /// The decoded payload.
    pub value: R,
}

/// What a scan of one segment found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    /// The header's sequence number (0 for a torn header).
    pub seq: u64,
    /// The header's previous index (0 for a torn header).
    pub prev_index: u64,
    /// Length of the valid prefix of the file: the header and the whole records (any
    /// bytes after it are zeros preallocated, or a torn tail).
    pub valid_len: u64,
    /// Bytes after `valid_len` (a torn tail; only possible in the last segment).
    pub torn_bytes: u64,
    /// The header itself was torn (a crash while creating the segment).
    pub torn_header: bool,
    /// The segment's format version (the written one for a torn header).
    pub version: u32,
}

/// Reads the segment `path` of `format`, calling `on_header` with its sequence number
/// and previous index once the header is checked (not for a torn header), then
/// `decode` (with the segment's format version) and `on_record` for each record in
/// order. With `last` (the last segment),
/// a torn tail is reported in the result instead of failing.
///
/// # Errors
/// [`PersistError::BadMagic`], [`PersistError::UnsupportedVersion`],
/// [`PersistError::Checksum`] or [`PersistError::Corrupt`] with the offset; a payload
/// `decode` refuses is corruption at its offset; or the callbacks' own errors.
pub fn scan_segment<R>(
    format: &SegmentFormat,
    path: &Path,
    last: bool,
    on_header: impl FnOnce(u64, u64) -> Result<()>,
    mut decode: impl FnMut(u32, &[u8]) -> std::result::Result<R, String>,
    mut on_record: impl FnMut(Record<R>) -> Result<()>,
) -> Result<Scan> {
    let bytes = std::fs::read(path).at(path)?;
    let total = bytes.len() as u64;
    let corrupt = |offset: u64, reason: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    let bad_magic = || PersistError::BadMagic {
        path: path.to_path_buf(),
        kind: format.kind,
    };
    let unsupported = |version: u32| PersistError::UnsupportedVersion {
        path: path.to_path_buf(),
        version,
        supported: format.version,
    };
    if total < SEGMENT_HEADER_LEN {
        // A header cut short by a crash is a prefix of ours; anything else is not a
        // file of ours (and must not be removed as a torn header).
        let n = bytes.len().min(8);
        if bytes[..n] != format.magic[..n] {
            return Err(bad_magic());
        }
        if bytes.len() >= 12 {
            let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            if !format.reads(version) {
                return Err(unsupported(version));
            }
        }
        if last {
            return Ok(Scan {
                seq: 0,
                prev_index: 0,
                valid_len: 0,
                torn_bytes: total,
                torn_header: true,
                version: format.version,
            });
        }
        return Err(corrupt(0, "segment shorter than its header".into()));
    }
    if &bytes[0..8] != format.magic {
        return Err(bad_magic());
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
    if !format.reads(version) {
        return Err(unsupported(version));
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
        // Preallocated zeros: the clean end of the records (see the module docs).
        if all_zero(&bytes[at as usize..]) {
            return Ok(Scan {
                seq,
                prev_index,
                valid_len: at,
                torn_bytes: 0,
                torn_header: false,
                version,
            });
        }
        // A crash mid-write leaves a prefix of one record at the very end of the last
        // segment. A whole valid record after the damage proves it is not that (a
        // damaged length, a flipped byte) but corruption, which must not be truncated.
        let torn = |reason: String| -> Result<Scan> {
            if last && !valid_record_after(format, version, &bytes, at) {
                Ok(Scan {
                    seq,
                    prev_index,
                    valid_len: at,
                    torn_bytes: remaining,
                    torn_header: false,
                    version,
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
        if len == 0 {
            // No record is empty: bytes that were never written (a crash that kept a
            // later part of an append and lost its start) or damage.
            return torn("a record of length zero".into());
        }
        let stored_crc = u32_at(p + 4);
        let end = at + RECORD_HEADER_LEN + u64::from(len);
        if end > total {
            return torn(format!(
                "record of {len} bytes extends past the end of the segment"
            ));
        }
        let payload = &bytes[p + 8..end as usize];
        if record_crc(len.to_le_bytes(), payload) != stored_crc {
            let at_the_end = end == total || all_zero(&bytes[end as usize..]);
            if at_the_end && last && !valid_record_after(format, version, &bytes, at) {
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
        let value = decode(version, payload)
            .map_err(|err| corrupt(at, format!("record does not decode: {err}")))?;
        on_record(Record {
            offset: at,
            end,
            value,
        })?;
        at = end;
    }
    Ok(Scan {
        seq,
        prev_index,
        valid_len: total,
        torn_bytes: 0,
        torn_header: false,
        version,
    })
}

/// Whether every byte of `bytes` is zero.
fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// What starts at one offset of a segment, as a record-by-record search sees it.
enum Candidate {
    /// No whole record with a valid checksum and a payload the probe accepts.
    Nothing,
    /// Checking it would exceed the search's budget of checksummed bytes.
    OverBudget,
    /// A valid record ending at `end`, with its index.
    Record { end: usize, index: u64 },
}

/// Looks for a valid record at offset `p` of `bytes`, charging what it checksums to
/// `budget` (a bound on the work forged input can cause).
fn candidate(
    format: &SegmentFormat,
    version: u32,
    bytes: &[u8],
    p: usize,
    budget: &mut u64,
) -> Candidate {
    let header = RECORD_HEADER_LEN as usize;
    let len = u32::from_le_bytes([bytes[p], bytes[p + 1], bytes[p + 2], bytes[p + 3]]);
    let end = p + header + len.min(MAX_RECORD) as usize;
    if len > MAX_RECORD || end > bytes.len() {
        return Candidate::Nothing;
    }
    let cost = u64::from(len) + header as u64;
    if cost > *budget {
        return Candidate::OverBudget;
    }
    *budget -= cost;
    let stored = u32::from_le_bytes([bytes[p + 4], bytes[p + 5], bytes[p + 6], bytes[p + 7]]);
    let payload = &bytes[p + header..end];
    if record_crc(len.to_le_bytes(), payload) != stored {
        return Candidate::Nothing;
    }
    match (format.probe)(version, payload) {
        Some(index) => Candidate::Record { end, index },
        None => Candidate::Nothing,
    }
}

/// Whether a whole record with a valid checksum and a payload the format's probe
/// accepts starts anywhere after `from` in `bytes`. A torn write leaves only a prefix
/// of one record, so finding one means the bytes at `from` were damaged, not torn.
///
/// The search checksums candidate records; past a budget of bytes (only reachable with
/// forged input) it gives up and answers yes, so that the damage is reported as
/// corruption rather than truncated away.
fn valid_record_after(format: &SegmentFormat, version: u32, bytes: &[u8], from: u64) -> bool {
    let mut budget = 2 * u64::from(MAX_RECORD);
    let mut p = from as usize + 1;
    while p + RECORD_HEADER_LEN as usize <= bytes.len() {
        match candidate(format, version, bytes, p, &mut budget) {
            Candidate::Nothing => p += 1,
            Candidate::OverBudget | Candidate::Record { .. } => return true,
        }
    }
    false
}

/// The whole, checksummed, decodable records in `bytes` from `from` on, and the first
/// and last of their indexes: what a repair reports as lost. Damaged bytes are stepped
/// over one at a time; past a budget of checksummed bytes (only reachable with forged
/// input) the count stops, a lower bound.
pub fn decodable_records(
    format: &SegmentFormat,
    bytes: &[u8],
    from: u64,
) -> (u64, Option<(u64, u64)>) {
    // The segment's own version when its header says one this build reads.
    let version = bytes
        .get(8..12)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .filter(|v| format.reads(*v))
        .unwrap_or(format.version);
    let mut budget = 4 * u64::from(MAX_RECORD);
    let (mut count, mut range): (u64, Option<(u64, u64)>) = (0, None);
    let mut p = from as usize;
    while p + RECORD_HEADER_LEN as usize <= bytes.len() {
        match candidate(format, version, bytes, p, &mut budget) {
            Candidate::Nothing => p += 1,
            Candidate::OverBudget => break,
            Candidate::Record { end, index } => {
                count += 1;
                range =
                    Some(range.map_or((index, index), |(lo, hi)| (lo.min(index), hi.max(index))));
                p = end;
            }
        }
    }
    (count, range)
}
