//! Errors of the durable store: every one names the file, and where it helps the byte
//! offset, so an operator can find the problem.

use std::io;
use std::path::PathBuf;

use crate::state::{InvariantViolation, StateError};

/// Why opening, writing or reading durable state failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    /// An operating-system error on a file or directory.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Another process (or handle) has the data directory open for writing.
    #[error("{path}: the data directory is locked by another process")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The path given as data directory does not exist (read-only open) or is not a
    /// directory.
    #[error("{path}: not a data directory")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A data directory holds a file that is not the store's (or, for a removal, a
    /// backup folder set aside by a restore), so an operation on the whole directory
    /// refuses to touch it.
    #[error("{path}: not a live schedstate file; refusing to act on its directory")]
    ForeignFile {
        /// The file.
        path: PathBuf,
    },
    /// A file named like ours does not start with our magic bytes.
    #[error("{path}: not a schedstate {kind} file (bad magic bytes)")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// "snapshot" or "log segment".
        kind: &'static str,
    },
    /// A file of a format version this build cannot read.
    #[error("{path}: unsupported format version {version} (this build reads {supported})")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        version: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A checksum did not match: the bytes were damaged.
    #[error("{path}: checksum mismatch in {what} at offset {offset}")]
    Checksum {
        /// The file.
        path: PathBuf,
        /// Where the checked bytes start.
        offset: u64,
        /// What was checked.
        what: &'static str,
    },
    /// Bytes that cannot be what they claim to be (a forged length, a row that does
    /// not decode, a count that does not match, trailing garbage).
    #[error("{path}: corrupt at offset {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Log records between two files are missing.
    #[error("{path}: missing log segment before this one ({reason})")]
    MissingSegment {
        /// The first file after the gap.
        path: PathBuf,
        /// What does not line up.
        reason: String,
    },
    /// A logged command failed to apply again on recovery.
    #[error("{path}: record at offset {offset} (index {index}) does not replay: {source}")]
    Replay {
        /// The segment.
        path: PathBuf,
        /// The record's offset.
        offset: u64,
        /// The record's log index.
        index: u64,
        /// Why it failed.
        #[source]
        source: Box<StateError>,
    },
    /// A snapshot decodes, but the state it holds breaks an invariant of the rules
    /// (rows that no sequence of accepted writes produces); it was not installed.
    #[error("{path}: {violation}")]
    BrokenInvariant {
        /// The snapshot file (or `<stream>`).
        path: PathBuf,
        /// The first invariant broken.
        violation: InvariantViolation,
    },
    /// A command was refused by the state rules (nothing was logged or changed).
    #[error(transparent)]
    State(#[from] StateError),
    /// Encoding a value failed.
    #[error("encoding failed: {0}")]
    Encode(#[from] postcard::Error),
    /// The disk is full (`ENOSPC`). The write that hit it was abandoned and the log
    /// cut back; writes work again once there is space.
    #[error("{path}: no space left on device")]
    NoSpace {
        /// The file or directory being written.
        path: PathBuf,
    },
    /// Something to write exceeds what the format allows: a command too large for a log
    /// record (it was not applied), a row too large for a snapshot (no snapshot was
    /// written). Not damage: nothing on disk is wrong.
    #[error("{what} of {bytes} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// What: "a log record", "a snapshot row", "a snapshot header".
        what: &'static str,
        /// Its encoded size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The background compaction thread panicked (a bug); the log is intact.
    #[error("the compaction thread panicked; the log is intact and the next compaction retries")]
    CompactionPanicked,
    /// An earlier failure left the store unable to promise durability (a failed fsync,
    /// a log that could not be cut back): it refuses every write until it is reopened,
    /// which reads the truth back from the disk. Reads of the published state go on.
    #[error("the store refuses writes after an earlier failure ({cause}); reopen it")]
    Poisoned {
        /// The failure that poisoned it.
        cause: String,
    },
}

/// Shorthand for results of the durable store.
pub type Result<T, E = PersistError> = std::result::Result<T, E>;

/// Attaches a path to an I/O error.
pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::result::Result<T, io::Error> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| {
            if source.kind() == io::ErrorKind::StorageFull {
                PersistError::NoSpace {
                    path: path.to_path_buf(),
                }
            } else {
                PersistError::Io {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })
    }
}
