//! A replicated snapshot: the Raft metadata the state cannot know (the last applied
//! log id, the membership, the snapshot's id) in front of the store's own snapshot
//! format, unchanged.
//!
//! ```text
//! raft snapshot := MAGIC "SCHEDRSN" | VERSION u32 | LEN u32 | postcard(SnapshotRecord)
//!                  | CRC u32
//!                  | KEYS_LEN u32 | postcard(WriteKeysRecord) | KEYS_CRC u32   (version 2)
//!                  | STAGED_LEN u32 | postcard(StagedRecord) | STAGED_CRC u32 (version 3)
//!                  | SCHEDSNP stream (schedstate's snapshot format)
//! ```
//! The CRC covers everything before it; the keys' CRC covers their length and bytes;
//! the staged section's CRC its length and bytes; the store's stream carries its own
//! checksums and is checked, invariants included, before a snapshot is installed.
//! Version 2 added the write keys (exactly-once writes, [`crate::WriteKeys`]); a
//! version-1 snapshot is read with none. Version 3 added the pieces of a restore
//! staged when the snapshot was taken (`restore.rs`): a snapshot is written as
//! version 3 only while a restore is staged — otherwise as version 2, byte for byte
//! what a build without restores writes and reads.

use std::path::{Path, PathBuf};

use openraft::{BasicNode, SnapshotMeta};
use schedstate::persist::{PersistError, SnapshotHeader};
use schedstate::state::{StateSnapshot, StateStore};
use serde::{Deserialize, Serialize};

use crate::NodeId;
use crate::log_format::{MembershipRecord, log_id, log_id_parts};
use crate::restore::{MAX_RESTORE_BYTES, Staging};
use crate::write_keys::{WriteKeys, WriteKeysRecord};

/// The first bytes of every replicated snapshot.
pub const RAFT_SNAPSHOT_MAGIC: &[u8; 8] = b"SCHEDRSN";
/// The replicated snapshot format version this build writes (it reads 1, 2 and 3).
pub const RAFT_SNAPSHOT_VERSION: u32 = 2;
/// The version this build writes while a restore is staged (with the staged section).
pub const RAFT_SNAPSHOT_STAGED_VERSION: u32 = 3;
/// The largest staged section: a whole restore's pieces and their framing.
const STAGED_CAP: usize = MAX_RESTORE_BYTES as usize + (1 << 20);
const HEADER_CAP: usize = 1 << 20;
/// The largest write-key section: [`MAX_WRITE_KEYS`](crate::MAX_WRITE_KEYS) keys with
/// their longest refusal messages fit in it.
const KEYS_CAP: usize = 96 << 20;

/// What a replicated snapshot holds besides the store's stream.
pub(crate) struct Decoded<'b> {
    pub meta: SnapshotMeta<NodeId, BasicNode>,
    pub keys: WriteKeys,
    /// The restore staged when the snapshot was taken, if any (version 3).
    pub staging: Option<Staging>,
    /// The store's snapshot stream.
    pub body: &'b [u8],
}

/// A staged restore as a snapshot holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StagedRecord {
    restore: u64,
    pieces: Vec<Vec<u8>>,
}

/// [`StagedRecord`] as it is written: the pieces borrowed from the staging (postcard
/// writes a byte slice as it writes a `Vec<u8>`), so a snapshot taken mid-restore
/// does not copy up to a gigabyte of pieces first.
#[derive(Serialize)]
struct StagedRecordRef<'a> {
    restore: u64,
    pieces: Vec<&'a [u8]>,
}

/// Appends one section, `LEN u32 | postcard(value) | CRC u32` (the CRC over the
/// length and the bytes), encoding `value` straight into `out`.
fn put_section(out: &mut Vec<u8>, value: &impl Serialize) -> Result<(), PersistError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    *out = postcard::to_extend(value, std::mem::take(out))?;
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The section at `at` of the snapshot file `path` (as [`put_section`] wrote it, at
/// most `cap` bytes): its payload and where the next part starts. `name` and `what`
/// name it in errors.
fn section<'b>(
    path: &Path,
    bytes: &'b [u8],
    at: usize,
    cap: usize,
    name: &str,
    what: &'static str,
) -> Result<(&'b [u8], usize), PersistError> {
    let corrupt = |reason: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset: at as u64,
        reason,
    };
    let Some(len) = bytes.get(at..at + 4) else {
        return Err(corrupt(format!("no {name} section")));
    };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len > cap || bytes.len() < at + 4 + len + 4 {
        return Err(corrupt(format!(
            "{name} section length {len} does not fit the file"
        )));
    }
    let end = at + 4 + len;
    if bytes[end..end + 4] != crc32fast::hash(&bytes[at..end]).to_le_bytes() {
        return Err(PersistError::Checksum {
            path: path.to_path_buf(),
            offset: at as u64,
            what,
        });
    }
    Ok((&bytes[at + 4..end], end + 4))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SnapshotRecord {
    last_log_id: Option<(u64, NodeId, u64)>,
    membership: MembershipRecord,
    snapshot_id: String,
}

/// The file name of the snapshot whose last log id has `index`.
pub(crate) fn snapshot_name(index: u64) -> String {
    format!("snap-{index:020}.rsnap")
}

/// The index in a snapshot file name.
pub(crate) fn parse_snapshot_name(name: &str) -> Option<u64> {
    name.strip_prefix("snap-")?
        .strip_suffix(".rsnap")?
        .parse()
        .ok()
}

/// The newest snapshot file in `dir`, if any, and every older one.
pub(crate) fn snapshot_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, PersistError> {
    let mut found = Vec::new();
    let read = std::fs::read_dir(dir).map_err(|source| PersistError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in read {
        let entry = entry.map_err(|source| PersistError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        if let Some(index) = entry.file_name().to_str().and_then(parse_snapshot_name) {
            found.push((index, entry.path()));
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// Encodes `meta`, the write keys, the staged restore (if any) and the state `snap`
/// as one replicated snapshot, the store's stream in the cluster's `format` (its
/// oldest version that holds the state: a server of that format can install it;
/// `formats.rs`).
pub(crate) fn encode(
    meta: &SnapshotMeta<NodeId, BasicNode>,
    keys: &WriteKeys,
    staging: Option<&Staging>,
    snap: &StateSnapshot,
    format: u32,
) -> Result<Vec<u8>, PersistError> {
    let record = SnapshotRecord {
        last_log_id: meta.last_log_id.map(|l| log_id_parts(&l)),
        membership: MembershipRecord::from_stored(&meta.last_membership),
        snapshot_id: meta.snapshot_id.clone(),
    };
    let body = postcard::to_allocvec(&record)?;
    let mut out = Vec::new();
    out.extend_from_slice(RAFT_SNAPSHOT_MAGIC);
    let version = if staging.is_some() {
        RAFT_SNAPSHOT_STAGED_VERSION
    } else {
        RAFT_SNAPSHOT_VERSION
    };
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    put_section(&mut out, &keys.to_record())?;
    if let Some(staging) = staging {
        let record = StagedRecordRef {
            restore: staging.restore,
            pieces: staging.bytes().collect(),
        };
        put_section(&mut out, &record)?;
    }
    snap.write_as(&mut out, format)?;
    Ok(out)
}

/// The cluster's format a snapshot's store stream says (its version; version 1 is
/// read as the oldest cluster format). The stream is checked when it is restored;
/// this only reads its version.
pub(crate) fn stream_format(stream: &[u8]) -> u32 {
    let version = stream
        .get(8..12)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    version.max(crate::OLDEST_CLUSTER_FORMAT)
}

/// Splits a replicated snapshot (`path` names it in errors) into its metadata, its
/// write keys and the store's snapshot stream, checking the header and the keys.
pub(crate) fn decode<'b>(path: &Path, bytes: &'b [u8]) -> Result<Decoded<'b>, PersistError> {
    let corrupt = |offset: u64, reason: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    if bytes.len() < 8 || &bytes[0..8] != RAFT_SNAPSHOT_MAGIC {
        return Err(PersistError::BadMagic {
            path: path.to_path_buf(),
            kind: "raft snapshot",
        });
    }
    if bytes.len() < 16 {
        return Err(corrupt(0, "shorter than its header".into()));
    }
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let version = u32_at(8);
    if !(1..=RAFT_SNAPSHOT_STAGED_VERSION).contains(&version) {
        return Err(PersistError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            supported: RAFT_SNAPSHOT_STAGED_VERSION,
        });
    }
    let len = u32_at(12) as usize;
    if len > HEADER_CAP || bytes.len() < 16 + len + 4 {
        return Err(corrupt(
            12,
            format!("header length {len} does not fit the file"),
        ));
    }
    if u32_at(16 + len) != crc32fast::hash(&bytes[..16 + len]) {
        return Err(PersistError::Checksum {
            path: path.to_path_buf(),
            offset: 0,
            what: "raft snapshot header",
        });
    }
    let record: SnapshotRecord = postcard::from_bytes(&bytes[16..16 + len])
        .map_err(|e| corrupt(16, format!("header does not decode: {e}")))?;
    let meta = SnapshotMeta {
        last_log_id: record.last_log_id.map(|(t, n, i)| log_id(t, n, i)),
        last_membership: record.membership.into_stored(),
        snapshot_id: record.snapshot_id,
    };
    let mut at = 16 + len + 4;
    let keys = if version >= 2 {
        let (payload, next) = section(
            path,
            bytes,
            at,
            KEYS_CAP,
            "write-key",
            "raft snapshot write keys",
        )?;
        let record: WriteKeysRecord = postcard::from_bytes(payload)
            .map_err(|e| corrupt(at as u64 + 4, format!("write keys do not decode: {e}")))?;
        let keys = WriteKeys::from_record(record)
            .map_err(|e| corrupt(at as u64 + 4, format!("write keys: {e}")))?;
        at = next;
        keys
    } else {
        WriteKeys::default()
    };
    let staging = if version >= 3 {
        let (payload, next) = section(
            path,
            bytes,
            at,
            STAGED_CAP,
            "staged-restore",
            "raft snapshot staged restore",
        )?;
        let record: StagedRecord = postcard::from_bytes(payload).map_err(|e| {
            corrupt(
                at as u64 + 4,
                format!("staged restore does not decode: {e}"),
            )
        })?;
        at = next;
        Some(Staging::from_pieces(record.restore, record.pieces))
    } else {
        None
    };
    Ok(Decoded {
        meta,
        keys,
        staging,
        body: &bytes[at..],
    })
}

/// Restores the replicated snapshot `bytes`, read from the file `path`, into `store`:
/// its header checked, then the store's stream (format, checksums, every invariant;
/// the store is unchanged on error). Returns the Raft metadata and the stream's
/// header, the write keys and the staged restore; the cluster's format is
/// [`stream_format`] of the body. Errors name `path` and the offset in the file, not
/// in the stream.
pub(crate) fn restore(
    path: &Path,
    bytes: &[u8],
    store: &StateStore,
) -> Result<Restored, PersistError> {
    let Decoded {
        meta,
        keys,
        staging,
        mut body,
    } = decode(path, bytes)?;
    let base = (bytes.len() - body.len()) as u64;
    let header = store
        .restore_from(&mut body)
        .map_err(|e| in_file(e, path, base))?;
    Ok((meta, header, keys, staging))
}

/// What [`restore`] read besides the state: the Raft metadata, the stream's header,
/// the write keys and the staged restore.
pub(crate) type Restored = (
    SnapshotMeta<NodeId, BasicNode>,
    SnapshotHeader,
    WriteKeys,
    Option<Staging>,
);

/// `e`, an error of the store's stream that starts at offset `base` of the file
/// `path`, as an error of the file.
fn in_file(e: PersistError, path: &Path, base: u64) -> PersistError {
    let file = path.to_path_buf();
    match e {
        PersistError::Checksum { offset, what, .. } => PersistError::Checksum {
            path: file,
            offset: base + offset,
            what,
        },
        PersistError::Corrupt { offset, reason, .. } => PersistError::Corrupt {
            path: file,
            offset: base + offset,
            reason,
        },
        PersistError::Io { source, .. } => PersistError::Corrupt {
            path: file,
            offset: base,
            reason: format!("the store's snapshot stream: {source}"),
        },
        PersistError::BadMagic { .. } => PersistError::Corrupt {
            path: file,
            offset: base,
            reason: "the store's snapshot stream does not start with SCHEDSNP".into(),
        },
        PersistError::UnsupportedVersion {
            version, supported, ..
        } => PersistError::UnsupportedVersion {
            path: file,
            version,
            supported,
        },
        PersistError::BrokenInvariant { violation, .. } => PersistError::BrokenInvariant {
            path: file,
            violation,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_in_the_stream_is_named_with_the_file_and_its_offset() {
        let store = StateStore::new();
        let meta = SnapshotMeta::<NodeId, BasicNode>::default();
        let mut bytes = encode(&meta, &WriteKeys::default(), None, &store.snapshot(), 3).unwrap();
        let path = Path::new("/data/snap-00000000000000000000.rsnap");
        let (_, header, _, _) = restore(path, &bytes, &StateStore::new()).unwrap();
        assert_eq!(header.last_applied, 0);

        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        let e = restore(path, &bytes, &StateStore::new()).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(&format!("{}: ", path.display())), "{text}");
        match e {
            PersistError::Checksum { offset, .. } | PersistError::Corrupt { offset, .. } => {
                let body = decode(path, &bytes).unwrap().body;
                assert!(offset >= (bytes.len() - body.len()) as u64, "{text}");
            }
            other => panic!("{other}"),
        }
    }
}
