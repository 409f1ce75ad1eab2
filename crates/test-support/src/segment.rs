//! Where the records of a log segment are, read from the bytes of the file.
//!
//! The store's write-ahead log and the Raft log share one framing
//! (`schedstate::persist::segment`):
//!
//! ```text
//! segment := header (32 bytes) | record* | zeros preallocated ahead of the records
//! record  := LEN u32 | CRC u32 | payload (LEN bytes)      (little endian)
//! ```
//!
//! It is parsed here on its own, not through the library's scan, because the tests use
//! it as the reference the library is checked against: where a torn tail starts, where
//! a repair cuts, which bytes to damage. Only the lengths are read — no header check,
//! no checksum — so that a record is found wherever its length says it is.
//!
//! ```
//! use schedstate_test_support::segment::{SEGMENT_HEADER_LEN, records_end, whole_records};
//!
//! let mut segment = vec![0xAA; SEGMENT_HEADER_LEN];
//! for payload in [&b"one"[..], &b"three"[..]] {
//!     segment.extend_from_slice(&(payload.len() as u32).to_le_bytes());
//!     segment.extend_from_slice(&[0xCC; 4]); // the checksum, not read
//!     segment.extend_from_slice(payload);
//! }
//! segment.resize(segment.len() + 64, 0); // preallocated zeros
//! assert_eq!(whole_records(&segment), [32..43, 43..56]);
//! assert_eq!(records_end(&segment), 56);
//!
//! // A record whose length reaches past the file is not a whole one.
//! segment.truncate(50);
//! assert_eq!(records_end(&segment), 43);
//! ```

use std::ops::Range;

/// The byte length of a segment's header (magic, version, sequence number, previous
/// index, checksum).
pub const SEGMENT_HEADER_LEN: usize = 32;

/// The byte length of a record's `LEN | CRC` before its payload.
const RECORD_HEADER_LEN: usize = 8;

/// The byte ranges of the whole records of `segment`, in order, up to the first that
/// is cut short by the end of the file or the zeros after the records (a length of 0
/// is no record).
pub fn whole_records(segment: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_LEN;
    while let Some(len) = segment.get(at..at + RECORD_HEADER_LEN) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let end = at + RECORD_HEADER_LEN + len;
        if len == 0 || end > segment.len() {
            break;
        }
        out.push(at..end);
        at = end;
    }
    out
}

/// Where the whole records of `segment` end: where the zeros a live segment is
/// preallocated with start, or a torn record. Just after the header when it holds no
/// record, and at most the length of `segment` (a torn header).
pub fn records_end(segment: &[u8]) -> usize {
    whole_records(segment)
        .last()
        .map_or(SEGMENT_HEADER_LEN.min(segment.len()), |r| r.end)
}
