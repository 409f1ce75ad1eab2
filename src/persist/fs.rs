//! The file-system seam: every operation the persistence layer performs that changes
//! what is on disk, each asking [`faults::check`](super::faults) first (a no-op unless
//! the `fault-injection` feature is on), with the path attached to any error. Reads
//! (listing, scanning, loading) go to `std::fs` directly: they change nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::error::{IoContext, Result};
use super::faults::{self, Op, Verdict};

/// Runs `f` unless a fault is injected for `op` on `path`.
fn guarded<T>(op: Op, path: &Path, f: impl FnOnce() -> io::Result<T>) -> Result<T> {
    match faults::check(op, path, 0) {
        Verdict::Proceed => f().at(path),
        Verdict::Fail(e) | Verdict::Short(_, e) => Err(e).at(path),
    }
}

/// The mode of every file the store creates: its owner's only. A data directory holds
/// the whole state, CSI volume secrets included; no other user of the machine reads it.
pub const FILE_MODE: u32 = 0o600;

/// The mode of every directory the store creates.
pub const DIR_MODE: u32 = 0o700;

/// Options that create a file with [`FILE_MODE`] (the umask can only take bits away).
pub fn owner_only(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(options, FILE_MODE);
    options
}

/// Creates `path` (or truncates it) for writing, owner-only.
pub(crate) fn create(path: &Path) -> Result<File> {
    guarded(Op::Create, path, || {
        owner_only(OpenOptions::new().write(true).create(true).truncate(true)).open(path)
    })
}

fn dir_builder(recursive: bool) -> fs::DirBuilder {
    let mut b = fs::DirBuilder::new();
    b.recursive(recursive);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, DIR_MODE);
    b
}

/// Makes the data directory `dir` and what is in it owner-only, as the store would
/// have created them: the directory (and any directory in it) [`DIR_MODE`], files
/// [`FILE_MODE`]. Returns what it changed, for the caller to warn about: a directory
/// made by an older version, or by hand, that others could read.
///
/// # Errors
/// The directory cannot be listed or a mode cannot be set.
pub fn make_owner_only(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut fixed = Vec::new();
    #[cfg(unix)]
    fix_modes(dir, 2, &mut fixed)?;
    Ok(fixed)
}

#[cfg(unix)]
fn fix_modes(dir: &Path, depth: u32, fixed: &mut Vec<PathBuf>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let fix = |path: &Path, meta: &fs::Metadata, mode: u32, fixed: &mut Vec<PathBuf>| {
        if meta.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).at(path)?;
            fixed.push(path.to_path_buf());
        }
        Ok::<(), super::error::PersistError>(())
    };
    // The directory itself is followed if it is a symlink (a data directory may be
    // one): its target's mode is what matters, a link's own mode is always 0777.
    let meta = fs::metadata(dir).at(dir)?;
    fix(dir, &meta, DIR_MODE, fixed)?;
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        let meta = entry.metadata().at(&path)?;
        if meta.is_dir() {
            if depth > 0 {
                fix_modes(&path, depth - 1, fixed)?;
            }
        } else if meta.is_file() {
            fix(&path, &meta, FILE_MODE, fixed)?;
        }
    }
    Ok(())
}

/// Opens an existing file to append to it, or to cut it.
pub(crate) fn open_append(path: &Path) -> Result<File> {
    guarded(Op::Create, path, || {
        OpenOptions::new().append(true).open(path)
    })
}

/// Writes all of `bytes` to `file` at its position (or its end, if opened to append).
/// A failure may leave a prefix of `bytes` written: the caller cuts it back.
pub(crate) fn write_all(mut file: &File, path: &Path, bytes: &[u8]) -> Result<()> {
    match faults::check(Op::Write, path, bytes.len()) {
        Verdict::Proceed => file.write_all(bytes).at(path),
        Verdict::Fail(e) => Err(e).at(path),
        Verdict::Short(n, e) => {
            file.write_all(&bytes[..n]).at(path)?;
            Err(e).at(path)
        }
    }
}

/// Opens an existing file to read it and to write at positions of its own choosing
/// (not appending): a log segment with preallocated zeros after its records.
pub(crate) fn open_write(path: &Path) -> Result<File> {
    guarded(Op::Create, path, || {
        OpenOptions::new().read(true).write(true).open(path)
    })
}

/// Writes `len` zero bytes to `file` at its position. A failure may leave some of
/// them written.
pub(crate) fn write_zeros(file: &File, path: &Path, len: u64) -> Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut left = len;
    while left > 0 {
        // Bounded by ZEROS.len(), so the cast cannot truncate.
        let n = left.min(ZEROS.len() as u64) as usize;
        write_all(file, path, &ZEROS[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Flushes a file's data to disk (`fdatasync`).
pub(crate) fn sync_data(file: &File, path: &Path) -> Result<()> {
    guarded(Op::Sync, path, || file.sync_data())
}

/// Flushes a file's data and metadata to disk (`fsync`).
pub(crate) fn sync_all(file: &File, path: &Path) -> Result<()> {
    guarded(Op::Sync, path, || file.sync_all())
}

/// Fsyncs a directory, so that creations, renames and deletions in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    guarded(Op::SyncDir, dir, || {
        File::open(dir).and_then(|d| d.sync_all())
    })
}

/// Cuts `file` to `len` bytes.
pub(crate) fn set_len(file: &File, path: &Path, len: u64) -> Result<()> {
    guarded(Op::SetLen, path, || file.set_len(len))
}

/// Renames `from` to `to` (atomically replacing `to`).
pub(crate) fn rename(from: &Path, to: &Path) -> Result<()> {
    guarded(Op::Rename, to, || fs::rename(from, to))
}

/// Removes a file.
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    guarded(Op::Remove, path, || fs::remove_file(path))
}

/// Removes an empty directory.
pub(crate) fn remove_dir(path: &Path) -> Result<()> {
    guarded(Op::Remove, path, || fs::remove_dir(path))
}

/// Creates a directory, owner-only.
pub(crate) fn create_dir(path: &Path) -> Result<()> {
    guarded(Op::CreateDir, path, || dir_builder(false).create(path))
}

/// Creates a directory and its missing parents, owner-only.
pub(crate) fn create_dir_all(path: &Path) -> Result<()> {
    guarded(Op::CreateDir, path, || dir_builder(true).create(path))
}

/// The directory that names `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A file being written through the seam: each write can be refused.
pub(crate) struct SeamWriter<'a> {
    file: &'a File,
    path: &'a Path,
}

impl Write for SeamWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match faults::check(Op::Write, self.path, buf.len()) {
            Verdict::Proceed => (&*self.file).write(buf),
            Verdict::Fail(e) => Err(e),
            Verdict::Short(n, e) => {
                (&*self.file).write_all(&buf[..n])?;
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self.file).flush()
    }
}

/// Writes `path` atomically: into `path` + `.tmp`, fsynced, renamed into place,
/// directory fsynced. A crash leaves either the old file or the new one, never a mix
/// (in a data directory, a stray `.tmp` is removed on the next open); a failed write
/// removes its temporary file (best effort: a leftover is harmless, as said).
pub(crate) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<SeamWriter<'_>>) -> Result<()>,
) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = create(&tmp)?;
    let written = (|| {
        let mut out = BufWriter::with_capacity(
            1 << 20,
            SeamWriter {
                file: &file,
                path: &tmp,
            },
        );
        write(&mut out)?;
        out.flush().at(&tmp)?;
        drop(out);
        sync_all(&file, &tmp)
    })();
    drop(file);
    let renamed = written.and_then(|()| rename(&tmp, path));
    if let Err(e) = renamed {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(parent_dir(path))
}
