//! File-system steps that make a write durable: fsync of files and of the directory
//! that names them, and atomic replacement through a temporary file.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;

use super::error::{IoContext, Result};

/// Fsyncs a directory, so that creations, renames and deletions in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// Writes `path` atomically: into `path.tmp`, fsynced, renamed into place, directory
/// fsynced. A crash leaves either the old file or the new one, never a mix (a stray
/// `.tmp` is removed on the next open).
pub(crate) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&File>) -> Result<()>,
) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .at(&tmp)?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    write(&mut out)?;
    out.flush().at(&tmp)?;
    drop(out);
    file.sync_all().at(&tmp)?;
    drop(file);
    fs::rename(&tmp, path).at(path)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}
