//! The exclusive lock on a data directory: one writer per directory, across processes.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::error::{IoContext, PersistError, Result};

/// The lock file's name in a data directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// Holds the writer's lock on a data directory until dropped (an advisory `flock` on
/// `DIR/LOCK`, released by the operating system if the process dies). A
/// [`DurableStore`](super::DurableStore) takes it on open; so does a replicated
/// server's log.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    path: PathBuf,
}

impl DirLock {
    /// Takes the lock of `dir` (an existing directory) without waiting.
    ///
    /// # Errors
    /// [`PersistError::Locked`] if another process or handle holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let file = super::fs::owner_only(
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )
        .open(&path)
        .at(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(DirLock { _file: file, path }),
            Err(fs::TryLockError::WouldBlock) => Err(PersistError::Locked { path }),
            Err(fs::TryLockError::Error(source)) => Err(PersistError::Io { path, source }),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
