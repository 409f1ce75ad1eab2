//! The write-ahead log: one checksummed record per applied command, in numbered
//! segment files framed as every log here is ([`segment`](super::segment)).
//!
//! ```text
//! segment := MAGIC "SCHEDWAL" | VERSION u32 | SEQ u64 | PREV_INDEX u64 | CRC u32
//!            | record*
//! record  := LEN u32 | CRC u32 | postcard((index u64, Command))
//!            (in a version 1 or 2 segment, the command in that version's shape)
//! ```
//! `PREV_INDEX` proves that no segment is missing between a snapshot and the log, or
//! between two segments. Torn tails and corruption follow the framing's rules.

use std::path::{Path, PathBuf};

use crate::state::Command;
use crate::state::v1::CommandV1;
use crate::state::v2::CommandV2;

use super::error::Result;
use super::segment::{self, AppendError, Scan, SegmentFormat, SegmentWriter};

pub(crate) use super::segment::SEGMENT_HEADER_LEN;

/// The first bytes of every log segment.
pub const WAL_MAGIC: &[u8; 8] = b"SCHEDWAL";
/// The log format version this build writes (version 2 added jobs: the job
/// commands, an allocation's job version; version 3 a job's registered definition and
/// the ACL salt). Version 1 and 2 segments are still read, their commands through that
/// version's shape ([`crate::state::v1::CommandV1`], [`crate::state::v2::CommandV2`]),
/// and never appended to.
pub const WAL_VERSION: u32 = 3;

/// The write-ahead log's segments: records are `postcard((index, Command))`.
pub(crate) const WAL_FORMAT: SegmentFormat = SegmentFormat {
    magic: WAL_MAGIC,
    version: WAL_VERSION,
    oldest_version: 1,
    kind: "log segment",
    probe: |version, payload| decode_record(version, payload).ok().map(|(index, _)| index),
};

/// A record's payload in a segment of format `version`.
fn decode_record(
    version: u32,
    payload: &[u8],
) -> std::result::Result<(u64, Command), postcard::Error> {
    if version == 1 {
        let (index, command) = postcard::from_bytes::<(u64, CommandV1)>(payload)?;
        Ok((index, command.into()))
    } else if version == 2 {
        let (index, command) = postcard::from_bytes::<(u64, CommandV2)>(payload)?;
        Ok((index, command.into()))
    } else {
        postcard::from_bytes::<(u64, Command)>(payload)
    }
}

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

/// The path of segment `seq` in `dir`.
pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_name(seq))
}

/// Creates segment `seq` of the log in `dir` (see [`SegmentWriter::create`]).
pub(crate) fn create_segment(dir: &Path, seq: u64, prev_index: u64) -> Result<SegmentWriter> {
    SegmentWriter::create(&WAL_FORMAT, segment_path(dir, seq), seq, prev_index)
}

/// Appends the record of `command` (encoded beforehand, so that a command consumed by
/// applying it can still be logged) at `index`.
pub(crate) fn append(
    writer: &mut SegmentWriter,
    index: u64,
    command: &EncodedCommand,
) -> std::result::Result<u64, AppendError> {
    writer.append(index, |buf| {
        let taken = std::mem::take(buf);
        *buf = postcard::to_extend(&index, taken)?;
        buf.extend_from_slice(&command.bytes);
        Ok(())
    })
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

/// A record found by a scan.
pub(crate) struct Record {
    /// Offset of the record in its segment.
    pub(crate) offset: u64,
    /// The log index it was applied at.
    pub(crate) index: u64,
    /// The command.
    pub(crate) command: Command,
    /// Whether it was read from a segment of an older format (1 or 2), whose input
    /// rules it is replayed under.
    pub(crate) legacy: bool,
}

/// Reads segment `path` (see [`segment::scan_segment`]), decoding each record.
pub(crate) fn scan_segment(
    path: &Path,
    last: bool,
    on_header: impl FnOnce(u64, u64) -> Result<()>,
    mut on_record: impl FnMut(Record) -> Result<()>,
) -> Result<Scan> {
    segment::scan_segment(
        &WAL_FORMAT,
        path,
        last,
        on_header,
        |version, payload| {
            decode_record(version, payload)
                .map(|(index, command)| (index, command, version < WAL_VERSION))
                .map_err(|e| e.to_string())
        },
        |rec| {
            let (index, command, legacy) = rec.value;
            on_record(Record {
                offset: rec.offset,
                index,
                command,
                legacy,
            })
        },
    )
}

/// The whole, decodable records in `bytes` from `from` on, and their index range.
pub(crate) fn decodable_records(bytes: &[u8], from: u64) -> (u64, Option<(u64, u64)>) {
    segment::decodable_records(&WAL_FORMAT, bytes, from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Job;
    use crate::state::v2::JobV2;

    /// A version-2 segment is replayed under version 2's input rules: a job it
    /// registered in namespace `*` (taken then, refused now) is rebuilt, not a replay
    /// error; a new write of one is refused.
    #[test]
    fn a_version_2_segment_replays_under_its_own_input_rules() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = SegmentFormat {
            version: 2,
            ..WAL_FORMAT
        };
        let job = Job::new("*", "stuck");
        let mut w = SegmentWriter::create(&v2, segment_path(dir.path(), 1), 1, 0).unwrap();
        w.append(1, |buf| {
            let taken = std::mem::take(buf);
            // (index, CommandV2::UpsertJobs { jobs }): variant 15.
            let mut bytes = postcard::to_extend(&1u64, taken)?;
            bytes.push(15);
            *buf = postcard::to_extend(&vec![JobV2::from(&job)], bytes)?;
            Ok(())
        })
        .unwrap();
        w.sync().unwrap();
        drop(w);
        let (db, report) =
            crate::DurableStore::open(dir.path(), crate::Options::default()).unwrap();
        assert_eq!(report.replayed, 1);
        assert!(db.store().snapshot().view().job("*", "stuck").is_some());
        let again = Command::UpsertJobs {
            jobs: vec![Job::new("*", "other")],
        };
        let err = db.apply(2, &again).unwrap_err();
        assert!(err.to_string().contains("namespace"), "{err}");
    }
}
