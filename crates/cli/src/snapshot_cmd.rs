//! `snapshot save FILE` and `snapshot restore FILE`.
//!
//! Both are `persist` operations on a whole data directory ([`save_snapshot`],
//! [`restore_data_dir`]); this file only words their results.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use schedstate::Table;
use schedstate::persist::{SnapshotHeader, load_snapshot_file, restore_data_dir, save_snapshot};

use crate::DataDir;
use crate::output::{CliError, bytes, emit, open_read, thousands};

/// `snapshot save` / `snapshot restore`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Write the state of DIR to FILE (atomically: a temporary file, then a rename).
    Save(FileArgs),
    /// Check FILE and make it the state of DIR (created if missing); files it held are
    /// moved into DIR/replaced-N, never deleted. Refused while a writer holds DIR.
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

fn summary(header: &SnapshotHeader) -> String {
    let rows = |table: Table| {
        header
            .tables
            .iter()
            .find(|t| t.name == table.name())
            .map_or(0, |t| t.rows)
    };
    format!(
        "{} nodes, {} allocations, {} plugins, {} volumes",
        thousands(rows(Table::Nodes)),
        thousands(rows(Table::Allocs)),
        thousands(rows(Table::CsiPlugins)),
        thousands(rows(Table::CsiVolumes))
    )
}

fn save(args: &FileArgs) -> Result<(), CliError> {
    let (store, _) = open_read(&args.data.dir)?;
    let written = save_snapshot(&store.snapshot(), &args.file)?;
    let (_, header) = load_snapshot_file(&args.file)?;
    emit(&format!(
        "Saved the state at index {} ({}) to {} ({})\n",
        thousands(header.last_applied),
        summary(&header),
        args.file.display(),
        bytes(written)
    ))
}

fn restore(args: &FileArgs) -> Result<(), CliError> {
    let dir = &args.data.dir;
    crate::output::refuse_server_dir(dir)?;
    let report = restore_data_dir(dir, &args.file)?;
    let kept = report.set_aside.map_or(String::new(), |p| {
        format!("; the replaced files are kept in {}", p.display())
    });
    emit(&format!(
        "Restored the state at index {} ({}) from {} into {}{kept}\n",
        thousands(report.header.last_applied),
        summary(&report.header),
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
