//! The committed pointer: the last log id this server knows is committed, kept in a
//! small file beside the log so that a restarted server can re-apply its committed
//! entries on its own (openraft's `read_committed`), instead of serving its last
//! snapshot's state until a leader tells it how far the log is committed — which, with
//! no quorum up, may be never.
//!
//! ```text
//! raft-committed := MAGIC "SCHEDRCM" | TERM u64 | NODE u64 | INDEX u64 | CRC u32   (little endian)
//! ```
//!
//! The file is overwritten in place and never fsynced: it only ever names an entry
//! that was committed *and* durable in this log when it was written, so a lost or
//! stale write falls back to an earlier committed entry (or to none: the snapshot),
//! and a torn one fails its checksum and is ignored. Either way the server only
//! re-applies less; it never applies an entry that was not committed.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use openraft::LogId;

use crate::NodeId;
use crate::log_format::{log_id, log_id_parts};

/// The first bytes of the committed-pointer file.
pub const RAFT_COMMITTED_MAGIC: &[u8; 8] = b"SCHEDRCM";

const LEN: usize = 8 + 3 * 8 + 4;

/// The committed-pointer file's path in a log directory.
pub(crate) fn committed_path(dir: &Path) -> PathBuf {
    dir.join("raft-committed")
}

fn encode(id: &LogId<NodeId>) -> [u8; LEN] {
    let (term, node, index) = log_id_parts(id);
    let mut out = [0u8; LEN];
    out[..8].copy_from_slice(RAFT_COMMITTED_MAGIC);
    out[8..16].copy_from_slice(&term.to_le_bytes());
    out[16..24].copy_from_slice(&node.to_le_bytes());
    out[24..32].copy_from_slice(&index.to_le_bytes());
    let crc = crc32fast::hash(&out[..32]);
    out[32..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The log id in `bytes`, or why it is not one.
fn decode(bytes: &[u8]) -> Result<LogId<NodeId>, &'static str> {
    if bytes.len() != LEN {
        return Err("not 36 bytes long");
    }
    if &bytes[..8] != RAFT_COMMITTED_MAGIC {
        return Err("bad magic");
    }
    let crc = u32::from_le_bytes([bytes[32], bytes[33], bytes[34], bytes[35]]);
    if crc32fast::hash(&bytes[..32]) != crc {
        return Err("checksum mismatch (a torn write)");
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    Ok(log_id(u64_at(8), u64_at(16), u64_at(24)))
}

/// Reads the pointer saved in `dir`; `None` if there is none or it is unreadable
/// (which only means re-applying less after this restart).
pub(crate) fn read(dir: &Path) -> Option<LogId<NodeId>> {
    match read_checked(dir) {
        Ok(id) => id,
        Err(why) => {
            tracing::warn!(path = %committed_path(dir).display(), why, "raft log: committed pointer ignored");
            None
        }
    }
}

/// Reads the pointer saved in `dir`: `Ok(None)` if there is none (no file, or the
/// empty file a log creates before its first commit), `Err` with the reason if it
/// cannot be used (unreadable, torn, not a pointer). Reads only.
pub(crate) fn read_checked(dir: &Path) -> Result<Option<LogId<NodeId>>, String> {
    match std::fs::read(committed_path(dir)) {
        Ok(bytes) if bytes.is_empty() => Ok(None),
        Ok(bytes) => decode(&bytes).map(Some).map_err(str::to_string),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("unreadable: {e}")),
    }
}

/// The open pointer file, and what it holds.
pub(crate) struct CommittedFile {
    file: Option<File>,
    path: PathBuf,
    written: Option<LogId<NodeId>>,
}

impl CommittedFile {
    /// Opens (creating) the file in `dir`; `written` is what it holds now.
    pub(crate) fn open(dir: &Path, written: Option<LogId<NodeId>>) -> CommittedFile {
        let path = committed_path(dir);
        let file = schedstate::persist::owner_only(
            File::options().create(true).truncate(false).write(true),
        )
        .open(&path)
            .map_err(|e| {
                tracing::warn!(path = %path.display(), error = %e, "raft log: committed pointer not kept");
            })
            .ok();
        CommittedFile {
            file,
            path,
            written,
        }
    }

    /// Records `id` (unless it is what the file holds). A failure is logged and
    /// otherwise ignored: the pointer is an optimisation of restarts, not a promise.
    pub(crate) fn write(&mut self, id: LogId<NodeId>) {
        if self.written == Some(id) {
            return;
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let done = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&encode(&id)));
        match done {
            Ok(()) => self.written = Some(id),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "raft log: writing the committed pointer failed");
                self.file = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_round_trips_and_damage_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        let mut f = CommittedFile::open(dir.path(), None);
        f.write(log_id(3, 2, 41));
        assert_eq!(read(dir.path()), Some(log_id(3, 2, 41)));
        f.write(log_id(4, 1, 7));
        assert_eq!(read(dir.path()), Some(log_id(4, 1, 7)));

        let path = committed_path(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(dir.path()), None, "a flipped bit fails the checksum");
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert_eq!(read(dir.path()), None, "a short file is ignored");
        std::fs::write(&path, b"").unwrap();
        assert_eq!(read(dir.path()), None);
    }
}
