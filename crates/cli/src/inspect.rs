//! `inspect [--verify] [--json]`: formats, indexes, row counts and files of a data
//! directory — an embedded store's here, a replicated server's in the server half
//! ([`ServerHalf::inspect_server`]).

use std::path::PathBuf;

use clap::Args;
use schedstate::persist::{SNAPSHOT_VERSION, WAL_VERSION, list_files};
use schedstate::state::StateSnapshot;
use schedstate::{StateStore, Table};
use serde::Serialize;

use crate::DataDir;
use crate::output::{
    CliError, align_right, bytes, emit, emit_json, err, files_section, key_values, open_read,
    render, table, thousands,
};
use crate::server_half::ServerHalf;

/// Arguments of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub data: DataDir,
    /// Also check every invariant of the state and that it survives a snapshot round
    /// trip; exit non-zero on a problem (checksums are checked by loading).
    #[arg(long)]
    pub verify: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Every check `--verify` runs beyond loading: the invariants, and that the state
/// written as a snapshot reads back equal.
pub fn verify(snap: &StateSnapshot) -> Result<(), CliError> {
    snap.view()
        .check_invariants()
        .map_err(|v| err(format!("verify failed: {v}")))?;
    let mut image = Vec::new();
    snap.write_to(&mut image)?;
    let copy = StateStore::new();
    copy.restore_from(&mut image.as_slice())?;
    let (a, b) = (snap.canonical_bytes(), copy.snapshot().canonical_bytes());
    match (a, b) {
        (Ok(a), Ok(b)) if a == b => Ok(()),
        (Ok(_), Ok(_)) => Err(err(
            "verify failed: the state does not survive a snapshot round trip",
        )),
        (Err(e), _) | (_, Err(e)) => Err(err(format!("verify failed: encoding: {e}"))),
    }
}

/// What `--verify` found, in the JSON output.
#[derive(Debug, Serialize)]
pub struct VerifyJson {
    /// Every check passed.
    pub ok: bool,
    /// The first problem, if one.
    pub problem: Option<String>,
}

/// Runs `--verify` (if asked) for the JSON output: its result, and the error to exit
/// with after printing it.
pub fn verify_json(
    asked: bool,
    snap: &StateSnapshot,
) -> (Option<VerifyJson>, Result<(), CliError>) {
    if !asked {
        return (None, Ok(()));
    }
    let result = verify(snap);
    let json = VerifyJson {
        ok: result.is_ok(),
        problem: result.as_ref().err().map(|e| e.0.clone()),
    };
    (Some(json), result)
}

/// One table in the JSON output (the same shape for both kinds of directory).
#[derive(Debug, Serialize)]
struct TableJson {
    name: &'static str,
    index: u64,
    rows: u64,
}

/// One file in the JSON output (the same shape for both kinds of directory).
#[derive(Debug, Serialize)]
struct FileJson {
    name: String,
    kind: &'static str,
    bytes: u64,
    version: Option<u32>,
}

/// A torn tail in the JSON output.
#[derive(Debug, Serialize)]
struct TornJson {
    file: PathBuf,
    offset: u64,
    bytes: u64,
}

/// `inspect --json` of an embedded store's directory.
#[derive(Debug, Serialize)]
struct StoreJson {
    kind: &'static str,
    dir: PathBuf,
    last_applied: u64,
    latest_index: u64,
    snapshot_index: Option<u64>,
    replayed: u64,
    segments: usize,
    log_bytes: u64,
    torn_tail: Option<TornJson>,
    tables: Vec<TableJson>,
    files: Vec<FileJson>,
    verify: Option<VerifyJson>,
}

/// `inspect [--verify] [--json]`: a replicated server's directory (a Raft log) or an
/// embedded store's.
pub fn run(args: &InspectArgs, server: &dyn ServerHalf) -> Result<(), CliError> {
    if schedstate::persist::is_server_dir(&args.data.dir) {
        return server.inspect_server(args);
    }
    let dir = &args.data.dir;
    let (store, report) = open_read(dir)?;
    let files = list_files(dir)?;
    let snap = store.snapshot();
    let v = snap.view();

    if args.json {
        let (verify, result) = verify_json(args.verify, &snap);
        emit_json(&StoreJson {
            kind: "store",
            dir: dir.clone(),
            last_applied: report.last_applied,
            latest_index: v.latest_index(),
            snapshot_index: report.snapshot_index,
            replayed: report.replayed,
            segments: report.segments.len(),
            log_bytes: report.log_bytes,
            torn_tail: report.torn_tail.as_ref().map(|t| TornJson {
                file: t.path.clone(),
                offset: t.offset,
                bytes: t.bytes,
            }),
            tables: Table::ALL
                .iter()
                .map(|t| TableJson {
                    name: t.name(),
                    index: v.table_index(*t),
                    rows: v.row_count(*t) as u64,
                })
                .collect(),
            files: files
                .iter()
                .map(|f| FileJson {
                    name: f.name.clone(),
                    kind: f.kind.describe(),
                    bytes: f.size,
                    version: f.version,
                })
                .collect(),
            verify,
        })?;
        return result;
    }

    let versions = |kind: &str| -> String {
        let mut found: Vec<u32> = files
            .iter()
            .filter(|f| f.kind.describe() == kind)
            .filter_map(|f| f.version)
            .collect();
        found.sort_unstable();
        found.dedup();
        let found: Vec<String> = found.iter().map(|v| format!("v{v}")).collect();
        if found.is_empty() {
            "none".into()
        } else {
            found.join(",")
        }
    };
    let snapshot = match report.snapshot_index {
        Some(i) => format!(
            "index {} (+ {} log records replayed)",
            thousands(i),
            thousands(report.replayed)
        ),
        None => format!("none ({} log records replayed)", thousands(report.replayed)),
    };
    let torn = match &report.torn_tail {
        Some(t) => format!(
            "{}: {} bytes at offset {} (a record being written, or cut short by a crash; \
             the next writer truncates it)",
            t.path.display(),
            t.bytes,
            t.offset
        ),
        None => "none".into(),
    };
    let mut out = key_values(&[
        ("Data Directory", dir.display().to_string()),
        (
            "Format",
            format!(
                "snapshot {}, log {} (this build reads snapshot v{SNAPSHOT_VERSION}, log v{WAL_VERSION})",
                versions("snapshot"),
                versions("log segment")
            ),
        ),
        ("Last Applied", thousands(report.last_applied)),
        ("Latest Index", thousands(v.latest_index())),
        ("Snapshot", snapshot),
        (
            "Log Segments",
            // The records' bytes: a live segment's file (in Files below) also holds
            // the zeros preallocated after them.
            format!(
                "{}, {} of records",
                report.segments.len(),
                bytes(report.log_bytes)
            ),
        ),
        ("Torn Tail", torn),
    ]);

    let mut t = table(["Table", "Index", "Rows"]);
    for table in Table::ALL {
        t.add_row(vec![
            table.name().to_string(),
            thousands(v.table_index(table)),
            thousands(v.row_count(table) as u64),
        ]);
    }
    align_right(&mut t, &[1, 2]);
    out.push_str("\nTables\n");
    out.push_str(&render(&t));

    out.push_str(&files_section(
        files
            .iter()
            .map(|f| (f.name.as_str(), f.kind.describe(), f.size, f.version)),
    ));

    if args.verify {
        // Print what was found first, so a failure comes with the context.
        emit(&out)?;
        verify(&snap)?;
        return emit(&format!(
            "\nVerify: ok (checksums of {} file(s) checked while loading; every invariant \
             holds; the state survives a snapshot round trip)\n",
            files.iter().filter(|f| f.version.is_some()).count()
        ));
    }
    emit(&out)
}
