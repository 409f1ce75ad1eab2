//! `snapshot save FILE` and `snapshot restore FILE`.
//!
//! Restore writes only into an empty or new data directory: the durable store has no
//! call that replaces a live directory's state durably, so the checked file becomes the
//! directory's snapshot (under the store's file name) and is then opened to confirm.

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use schedstate::persist::{DurableStore, Options, PersistError, SnapshotHeader};
use schedstate::state::{StateStore, names};

use crate::DataDir;
use crate::output::{CliError, bytes, emit, err, io_err, open_read, thousands};

/// `snapshot save` / `snapshot restore`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Write the state of DIR to FILE (atomically: a temporary file, then a rename).
    Save(FileArgs),
    /// Check FILE and make it the state of DIR, which must be empty or not exist.
    Restore(FileArgs),
}

/// A snapshot file and a data directory.
#[derive(Debug, Args)]
pub struct FileArgs {
    /// The snapshot file.
    pub file: PathBuf,
    #[command(flatten)]
    pub data: DataDir,
}

/// Errors of stream reads and writes name `<stream>`; name the file instead.
fn at(path: &Path, e: PersistError) -> CliError {
    let msg = e.to_string();
    let shown = path.display().to_string();
    CliError(msg.replacen("<stream>", &shown, 1))
}

/// Fsyncs the directory holding `path` so that a rename in it survives a crash.
fn sync_parent(path: &Path) -> Result<(), CliError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(parent, &e))
}

/// Writes `path` through `path.tmp`, fsynced and renamed into place.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&File>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| io_err(&tmp, &e))?;
    let result = (|| {
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        write(&mut out)?;
        out.flush().map_err(|e| io_err(&tmp, &e))?;
        drop(out);
        file.sync_all().map_err(|e| io_err(&tmp, &e))?;
        fs::rename(&tmp, path).map_err(|e| io_err(path, &e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    sync_parent(path)
}

fn summary(header: &SnapshotHeader) -> String {
    let rows = |name: &str| {
        header
            .tables
            .iter()
            .find(|t| t.name == name)
            .map_or(0, |t| t.rows)
    };
    format!(
        "{} nodes, {} allocations, {} plugins, {} volumes",
        thousands(rows(names::NODES)),
        thousands(rows(names::ALLOCS)),
        thousands(rows(names::CSI_PLUGINS)),
        thousands(rows(names::CSI_VOLUMES))
    )
}

/// Reads and checks a snapshot file into a new in-memory store.
fn load_file(file: &Path) -> Result<(StateStore, SnapshotHeader), CliError> {
    let f = File::open(file).map_err(|e| io_err(file, &e))?;
    let store = StateStore::new();
    let header = store
        .restore_from(&mut BufReader::with_capacity(1 << 20, f))
        .map_err(|e| at(file, e))?;
    Ok((store, header))
}

fn save(args: &FileArgs) -> Result<(), CliError> {
    let (store, _) = open_read(&args.data.dir)?;
    if args.file.is_dir() {
        return Err(err(format!("{}: is a directory", args.file.display())));
    }
    let snap = store.snapshot();
    let mut written = 0;
    write_atomically(&args.file, |out| {
        written = snap.write_to(out).map_err(|e| at(&args.file, e))?;
        Ok(())
    })?;
    // Read it back: what was saved must load.
    let (_, header) = load_file(&args.file)?;
    emit(&format!(
        "Saved the state at index {} ({}) to {} ({})\n",
        thousands(header.last_applied),
        summary(&header),
        args.file.display(),
        bytes(written)
    ))
}

/// Whether a file name is one a data directory of ours holds.
pub fn is_store_file(name: &str) -> bool {
    name == "LOCK"
        || name.ends_with(".tmp")
        || (name.starts_with("snapshot-") && name.ends_with(".snap"))
        || (name.starts_with("wal-") && name.ends_with(".log"))
}

/// Moves the snapshot and log files of `dir` into a new `dir/replaced-N`, so that a
/// restore replaces the state without destroying the old one. Returns that folder, or
/// `None` when there was nothing to move. Refuses a directory holding other files.
fn set_aside(dir: &Path) -> Result<Option<PathBuf>, CliError> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, &e))? {
        let entry = entry.map_err(|e| io_err(dir, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() && name.starts_with("replaced-") {
            continue;
        }
        if !is_store_file(&name) {
            return Err(err(format!(
                "{}: holds {name:?}, which is not a schedstate file; not restoring over it",
                dir.display()
            )));
        }
        if name != "LOCK" {
            files.push(entry.path());
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    let backup = (1..)
        .map(|n| dir.join(format!("replaced-{n}")))
        .find(|p| !p.exists())
        .ok_or_else(|| err("no free replaced-N folder name"))?;
    fs::create_dir(&backup).map_err(|e| io_err(&backup, &e))?;
    for file in files {
        if let Some(name) = file.file_name() {
            let to = backup.join(name);
            fs::rename(&file, &to).map_err(|e| io_err(&file, &e))?;
        }
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, &e))?;
    Ok(Some(backup))
}

fn restore(args: &FileArgs) -> Result<(), CliError> {
    let dir = &args.data.dir;
    let (scratch, header) = load_file(&args.file)?;
    if dir.exists() && !dir.is_dir() {
        return Err(err(format!("{}: not a directory", dir.display())));
    }
    fs::create_dir_all(dir).map_err(|e| io_err(dir, &e))?;
    let target = dir.join(format!("snapshot-{:020}.snap", header.last_applied));
    let replaced = {
        // Keep a writer (a running demo) off the directory while the files change.
        let _lock = schedstate::persist::DirLock::acquire(dir)?;
        let replaced = set_aside(dir)?;
        let mut source = File::open(&args.file).map_err(|e| io_err(&args.file, &e))?;
        write_atomically(&target, |out| {
            std::io::copy(&mut source, out).map_err(|e| io_err(&args.file, &e))?;
            Ok(())
        })?;
        replaced
    };
    let (db, report) = DurableStore::open(dir, Options::default())?;
    let same = match (
        db.store().snapshot().canonical_bytes(),
        scratch.snapshot().canonical_bytes(),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if report.last_applied != header.last_applied || !same {
        return Err(err(format!(
            "{}: the restored directory does not hold the state of {}",
            dir.display(),
            args.file.display()
        )));
    }
    drop(db);
    let kept = replaced.map_or(String::new(), |p| {
        format!("; the replaced files are kept in {}", p.display())
    });
    emit(&format!(
        "Restored the state at index {} ({}) from {} into {}{kept}\n",
        thousands(header.last_applied),
        summary(&header),
        args.file.display(),
        dir.display()
    ))
}

/// Runs a `snapshot` subcommand.
pub fn run(cmd: &SnapshotCmd) -> Result<(), CliError> {
    match cmd {
        SnapshotCmd::Save(args) => save(args),
        SnapshotCmd::Restore(args) => restore(args),
    }
}
