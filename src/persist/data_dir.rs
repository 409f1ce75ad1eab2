//! What a data directory holds, by name — the one place that knows the file names —
//! and the offline operations on a whole directory: list, save a snapshot file,
//! restore one in place of the directory's state, remove the directory.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::state::{StateSnapshot, StateStore};

use super::durable::{DurableStore, Options};
use super::error::{IoContext, PersistError, Result};
use super::fs::{self, write_atomically};
use super::lock::{DirLock, LOCK_FILE};
use super::snapshot::{SNAPSHOT_MAGIC, SnapshotHeader};
use super::wal::{WAL_MAGIC, parse_segment_name};

/// The name of the snapshot taken at `index`.
pub(crate) fn snapshot_name(index: u64) -> String {
    format!("snapshot-{index:020}.snap")
}

pub(crate) fn parse_snapshot_name(name: &str) -> Option<u64> {
    name.strip_prefix("snapshot-")?
        .strip_suffix(".snap")?
        .parse()
        .ok()
}

/// Prefix of the folders a restore moves replaced files into (`replaced-1`, …).
const REPLACED_PREFIX: &str = "replaced-";

/// What a file of a data directory is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// A snapshot of the state at this index.
    Snapshot {
        /// The last applied index it holds.
        index: u64,
    },
    /// A log segment with this sequence number.
    LogSegment {
        /// Its sequence number.
        seq: u64,
    },
    /// The writer's lock file.
    Lock,
    /// A file being written atomically (or left by a crash while it was).
    Temporary,
    /// A folder of files set aside by a restore (`replaced-N`) or a repair
    /// (`damaged-N`).
    SetAside,
    /// Anything else: not the store's.
    Other,
}

impl FileKind {
    /// The kind of the file called `name`.
    pub fn of(name: &str) -> FileKind {
        if let Some(index) = parse_snapshot_name(name) {
            FileKind::Snapshot { index }
        } else if let Some(seq) = parse_segment_name(name) {
            FileKind::LogSegment { seq }
        } else if name == LOCK_FILE {
            FileKind::Lock
        } else if name.ends_with(".tmp") {
            FileKind::Temporary
        } else if name.starts_with(REPLACED_PREFIX)
            || name.starts_with(super::repair::DAMAGED_PREFIX)
        {
            FileKind::SetAside
        } else {
            FileKind::Other
        }
    }

    /// A short description, as `inspect` prints it.
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Snapshot { .. } => "snapshot",
            FileKind::LogSegment { .. } => "log segment",
            FileKind::Lock => "lock",
            FileKind::Temporary => "temporary",
            FileKind::SetAside => "set aside",
            FileKind::Other => "other",
        }
    }
}

/// One entry of a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirFile {
    /// Its path.
    pub path: PathBuf,
    /// Its file name.
    pub name: String,
    /// What it is.
    pub kind: FileKind,
    /// Its size in bytes (0 for a folder).
    pub size: u64,
    /// The format version in its header, for a snapshot or log segment that starts
    /// with the right magic bytes.
    pub version: Option<u32>,
}

/// The entries of a data directory, in name order. A file removed while listing (by
/// a running writer's compaction) is left out. Changes nothing; takes no lock.
///
/// # Errors
/// [`PersistError::Io`] if the directory cannot be read.
pub fn list_files(dir: &Path) -> Result<Vec<DirFile>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .at(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let kind = FileKind::of(&name);
        let version = match kind {
            FileKind::Snapshot { .. } => header_version(&path, SNAPSHOT_MAGIC),
            FileKind::LogSegment { .. } => header_version(&path, WAL_MAGIC),
            _ => None,
        };
        let size = if meta.is_dir() { 0 } else { meta.len() };
        out.push(DirFile {
            path,
            name,
            kind,
            size,
            version,
        });
    }
    Ok(out)
}

/// The magic and version at the start of a snapshot or log segment.
fn header_version(path: &Path, magic: &[u8; 8]) -> Option<u32> {
    let mut head = [0u8; 12];
    File::open(path).ok()?.read_exact(&mut head).ok()?;
    (&head[..8] == magic).then(|| u32::from_le_bytes([head[8], head[9], head[10], head[11]]))
}

/// Writes `snap` to the file `path` in snapshot format, atomically (a temporary file,
/// fsynced, renamed, the directory fsynced), and reads it back to check it. Returns
/// the number of bytes written.
///
/// # Errors
/// I/O errors on `path`, or the check of what was written failing.
pub fn save_snapshot(snap: &StateSnapshot, path: &Path) -> Result<u64> {
    if path.is_dir() {
        return Err(PersistError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
        });
    }
    let mut written = 0;
    write_atomically(path, |out| {
        written = super::snapshot::write_snapshot(snap, out, path)?;
        Ok(())
    })?;
    load_snapshot_file(path)?;
    Ok(written)
}

/// Reads and checks a snapshot file (format, checksums, invariants) into a new
/// in-memory store.
///
/// # Errors
/// A [`PersistError`] naming the file and what is wrong in it.
pub fn load_snapshot_file(path: &Path) -> Result<(StateStore, SnapshotHeader)> {
    let file = File::open(path).at(path)?;
    let store = StateStore::new();
    let header =
        super::snapshot::read_snapshot(&mut BufReader::with_capacity(1 << 20, file), path, &store)?;
    Ok((store, header))
}

/// What [`restore_data_dir`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The header of the snapshot restored.
    pub header: SnapshotHeader,
    /// Where the directory's previous files were moved, if it had any.
    pub set_aside: Option<PathBuf>,
}

/// Makes the snapshot file `snapshot` the state of the data directory `dir`
/// (created if missing), offline: the file is checked completely first; then, under
/// the directory's lock (refused while a writer holds it), the directory's snapshot
/// and log files are moved into a new `dir/replaced-N` (nothing is deleted), the
/// snapshot is written under the store's own file name, and the directory is opened to
/// confirm that it holds exactly that state.
///
/// # Errors
/// The snapshot's damage, [`PersistError::Locked`], a directory holding files that
/// are not the store's ([`PersistError::ForeignFile`]), or I/O errors.
pub fn restore_data_dir(dir: &Path, snapshot: &Path) -> Result<RestoreReport> {
    let (scratch, header) = load_snapshot_file(snapshot)?;
    if dir.exists() && !dir.is_dir() {
        return Err(PersistError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    fs::create_dir_all(dir)?;
    let set_aside = {
        let _lock = DirLock::acquire(dir)?;
        let set_aside = SetAside::move_out(dir)?;
        let target = dir.join(snapshot_name(header.last_applied));
        let written = File::open(snapshot).at(snapshot).and_then(|mut source| {
            write_atomically(&target, |out| {
                std::io::copy(&mut source, out).at(snapshot)?;
                Ok(())
            })
        });
        if let Err(e) = written {
            // Put the old state back: the directory must open as it was. The new
            // snapshot may be in place already (a failed directory fsync after the
            // rename): it goes first, or it would mix with the old log.
            if target.exists()
                && let Err(remove) = fs::remove_file(&target)
            {
                tracing::error!(error = %remove, "could not remove a half-restored snapshot");
                return Err(e);
            }
            if let Some(set_aside) = set_aside {
                set_aside.undo(dir);
            }
            return Err(e);
        }
        set_aside.map(|s| s.folder)
    };
    let (opened, report) = DurableStore::open(dir, Options::default())?;
    let same = opened.snapshot().canonical_bytes()? == scratch.snapshot().canonical_bytes()?;
    if report.last_applied != header.last_applied || !same {
        return Err(PersistError::Corrupt {
            path: dir.to_path_buf(),
            offset: 0,
            reason: format!(
                "the restored directory does not hold the state of {}",
                snapshot.display()
            ),
        });
    }
    Ok(RestoreReport { header, set_aside })
}

/// The files a restore moved out of a data directory, into `folder`.
struct SetAside {
    folder: PathBuf,
    moved: Vec<(PathBuf, PathBuf)>,
}

impl SetAside {
    /// Moves the snapshot and log files of `dir` into a new `dir/replaced-N`; `None`
    /// when there was nothing to move. Refuses a directory holding files that are not
    /// the store's. The caller holds the lock. All or nothing, as far as the disk lets
    /// it: if a move fails, the files already moved are moved back.
    fn move_out(dir: &Path) -> Result<Option<SetAside>> {
        let mut files = Vec::new();
        for f in list_files(dir)? {
            match f.kind {
                FileKind::Lock | FileKind::SetAside => {}
                FileKind::Other => return Err(PersistError::ForeignFile { path: f.path }),
                _ => files.push(f.path),
            }
        }
        if files.is_empty() {
            return Ok(None);
        }
        let folder = (1..)
            .map(|n| dir.join(format!("{REPLACED_PREFIX}{n}")))
            .find(|p| !p.exists())
            .unwrap_or_else(|| dir.join(REPLACED_PREFIX));
        fs::create_dir(&folder)?;
        let mut set_aside = SetAside {
            folder,
            moved: Vec::new(),
        };
        let outcome = (|| {
            for file in &files {
                if let Some(name) = file.file_name() {
                    let to = set_aside.folder.join(name);
                    fs::rename(file, &to)?;
                    set_aside.moved.push((file.clone(), to));
                }
            }
            fs::sync_dir(&set_aside.folder)?;
            fs::sync_dir(dir)
        })();
        match outcome {
            Ok(()) => Ok(Some(set_aside)),
            Err(e) => {
                set_aside.undo(dir);
                Err(e)
            }
        }
    }

    /// Moves the files back (best effort: a file that cannot be moved back stays in
    /// the folder, named in the log) and removes the folder if it is empty.
    fn undo(self, dir: &Path) {
        for (from, to) in self.moved.iter().rev() {
            if let Err(e) = fs::rename(to, from) {
                tracing::error!(error = %e, file = %to.display(), "could not move a set-aside file back");
            }
        }
        let _ = fs::remove_dir(&self.folder);
        let _ = fs::sync_dir(dir);
    }
}

/// Deletes the data directory `dir` and everything the store keeps in it, if no
/// writer holds it and it holds nothing but the store's live files (a missing
/// directory is fine). A folder of files set aside by a restore (`replaced-N`) is a
/// backup someone may still want: like any other file that is not the store's, it
/// makes the call refuse rather than delete it.
///
/// # Errors
/// [`PersistError::Locked`], [`PersistError::ForeignFile`] (naming the first such
/// file or folder), or I/O errors.
pub fn remove_data_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(PersistError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let lock = DirLock::acquire(dir)?;
    let files = list_files(dir)?;
    if let Some(other) = files
        .iter()
        .find(|f| matches!(f.kind, FileKind::Other | FileKind::SetAside))
    {
        return Err(PersistError::ForeignFile {
            path: other.path.clone(),
        });
    }
    // Newest log segments first, then older ones, then snapshots: a removal that stops
    // halfway leaves a directory that still opens (with a shorter log), and running it
    // again finishes the job.
    let rank = |kind: &FileKind| match kind {
        FileKind::LogSegment { seq } => (0, u64::MAX - seq),
        FileKind::Snapshot { index } => (1, u64::MAX - index),
        _ => (2, 0),
    };
    let mut doomed: Vec<&DirFile> = files.iter().filter(|f| f.kind != FileKind::Lock).collect();
    doomed.sort_by_key(|f| rank(&f.kind));
    for f in doomed {
        fs::remove_file(&f.path)?;
    }
    let lock_path = lock.path().to_path_buf();
    drop(lock);
    fs::remove_file(&lock_path)?;
    fs::remove_dir(dir)
}
