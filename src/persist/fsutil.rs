//! File-system steps that make a write durable: fsync of files and of the directory
//! that names them, and atomic replacement through a temporary file.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::error::{IoContext, Result};

/// Fsyncs a directory, so that creations, renames and deletions in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// The directory that names `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes `path` atomically: into `path` + `.tmp`, fsynced, renamed into place,
/// directory fsynced. A crash leaves either the old file or the new one, never a mix
/// (in a data directory, a stray `.tmp` is removed on the next open); a failed write
/// removes its temporary file.
pub(crate) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&File>) -> Result<()>,
) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .at(&tmp)?;
    let written = (|| {
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        write(&mut out)?;
        out.flush().at(&tmp)?;
        drop(out);
        file.sync_all().at(&tmp)
    })();
    drop(file);
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path).at(path)?;
    sync_dir(parent_dir(path))
}
