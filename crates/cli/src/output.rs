//! What every command shares: the error type, opening a directory for reading,
//! writing to stdout, aligned tables, `key = value` blocks and number formats.

use std::fmt;
use std::io::{self, Write};
use std::path::Path;

use comfy_table::{CellAlignment, ContentArrangement, Table, presets};
use schedstate::persist::{DurableStore, OpenReport, PersistError};
use schedstate::state::StateStore;
use serde::Serialize;

/// An error shown as one line: `error: <message>`.
#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<PersistError> for CliError {
    fn from(e: PersistError) -> Self {
        CliError(one_line(&e.to_string()))
    }
}

impl From<schedstate::state::StateError> for CliError {
    fn from(e: schedstate::state::StateError) -> Self {
        CliError(one_line(&e.to_string()))
    }
}

/// Builds an error from a message.
pub fn err(msg: impl Into<String>) -> CliError {
    CliError(msg.into())
}

/// Finds the one row `wanted` names among `all`: an exact id, else a unique id prefix.
/// `kind` names the rows in errors ("volume"); `key` gives a row's (namespace, id).
/// Ambiguity names up to five matches.
pub fn find_one<'a, T>(
    all: &'a [T],
    wanted: &str,
    kind: &str,
    key: impl Fn(&T) -> (&str, &str),
) -> Result<&'a T, CliError> {
    let exact: Vec<&T> = all.iter().filter(|r| key(r).1 == wanted).collect();
    let candidates = if exact.is_empty() {
        all.iter()
            .filter(|r| key(r).1.starts_with(wanted))
            .collect()
    } else {
        exact
    };
    match candidates.as_slice() {
        [] => Err(err(format!("{kind} {wanted:?} not found"))),
        [one] => Ok(one),
        many => {
            let names: Vec<String> = many
                .iter()
                .take(5)
                .map(|r| {
                    let (namespace, id) = key(r);
                    format!("{namespace}/{id}")
                })
                .collect();
            let more = if many.len() > 5 { ", …" } else { "" };
            Err(err(format!(
                "{kind} {wanted:?} matches {} {kind}s: {}{more} (give the full id and --namespace)",
                many.len(),
                names.join(", ")
            )))
        }
    }
}

fn one_line(s: &str) -> String {
    s.lines().collect::<Vec<_>>().join(" ")
}

/// Refuses a replicated server's data directory (a Raft log and snapshots): the
/// single-store commands would read it as an empty store, and a write there would
/// start a second log beside Raft's.
pub fn refuse_server_dir(dir: &Path) -> Result<(), CliError> {
    if schedstate::persist::is_server_dir(dir) {
        return Err(err(format!(
            "{} is a replicated server's directory (a Raft log), not a store's: read it through its agent (--address http://HOST:PORT; start one with `schedstate agent --data {}`), or look inside with `schedstate inspect --data {}`",
            dir.display(),
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// Loads a data directory without the lock and without changing it. A compaction
/// running in a writer may delete a file between listing and reading; that is retried.
pub fn open_read(dir: &Path) -> Result<(StateStore, OpenReport), CliError> {
    refuse_server_dir(dir)?;
    let mut attempt = 0;
    loop {
        match DurableStore::open_read_only(dir) {
            Ok(opened) => return Ok(opened),
            Err(PersistError::Io { source, .. })
                if source.kind() == io::ErrorKind::NotFound && attempt < 5 =>
            {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
pub fn emit(text: &str) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(err(format!("stdout: {e}"))),
    }
}

/// Writes `value` as pretty JSON to stdout.
pub fn emit_json<T: Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    let mut text =
        serde_json::to_string_pretty(value).map_err(|e| err(format!("JSON output: {e}")))?;
    text.push('\n');
    emit(&text)
}

/// A borderless table with aligned columns, in the style of the scheduler's CLI.
pub fn table<const N: usize>(header: [&str; N]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header);
    for column in t.column_iter_mut() {
        column.set_padding((0, 2));
    }
    t
}

/// Right-aligns the given columns (numbers).
pub fn align_right(t: &mut Table, columns: &[usize]) {
    for &c in columns {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// Renders a table without trailing spaces, ending in a newline.
pub fn render(t: &Table) -> String {
    let mut out = String::new();
    for line in t.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A `key = value` block with aligned `=` (an empty value shows as `-`).
/// The "Files" section of `inspect`: one row per file (name, kind, size, format
/// version) and their total.
pub fn files_section<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str, u64, Option<u32>)>,
) -> String {
    let mut f = table(["File", "Kind", "Size", "Format"]);
    let mut total = 0;
    for (name, kind, size, version) in files {
        total += size;
        f.add_row(vec![
            name.to_string(),
            kind.to_string(),
            bytes(size),
            version.map_or_else(|| "-".into(), |v| format!("v{v}")),
        ]);
    }
    f.add_row(vec![
        "total".to_string(),
        String::new(),
        bytes(total),
        String::new(),
    ]);
    align_right(&mut f, &[2]);
    format!("\nFiles\n{}", render(&f))
}

pub fn key_values(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        let v = if v.is_empty() { "-" } else { v.as_str() };
        out.push_str(&format!("{k:<width$} = {v}\n"));
    }
    out
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A byte count in B, KiB or MiB.
pub fn bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if f < KIB {
        format!("{n} B")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{:.1} MiB", f / (KIB * KIB))
    }
}

/// `healthy/expected`.
pub fn ratio(healthy: usize, expected: usize) -> String {
    format!("{healthy}/{expected}")
}

/// The serde name of a plain enum value (`single-node-writer`, `running`, …).
pub fn serde_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::from("?"),
    }
}

/// Resolves an id the way the scheduler's CLI does: an exact match, else the one id
/// starting with it. `ids` is every candidate id (in order).
pub fn resolve_id<'a>(
    what: &str,
    wanted: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<String, CliError> {
    let mut matches = Vec::new();
    for id in ids {
        if id == wanted {
            return Ok(id.to_string());
        }
        if id.starts_with(wanted) {
            matches.push(id.to_string());
        }
    }
    match matches.len() {
        0 => Err(err(format!("{what} {wanted:?} not found"))),
        1 => Ok(matches.remove(0)),
        n => {
            let shown: Vec<_> = matches.iter().take(5).map(String::as_str).collect();
            let more = if n > 5 { ", …" } else { "" };
            Err(err(format!(
                "{what} id prefix {wanted:?} matches {n} {what}s: {}{more}",
                shown.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(2048), "2.0 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }

    #[test]
    fn ids_resolve_exactly_then_by_unique_prefix() {
        let ids = ["aws-ebs0", "aws-ebs1", "nfs"];
        assert_eq!(resolve_id("plugin", "nfs", ids).unwrap(), "nfs");
        assert_eq!(resolve_id("plugin", "n", ids).unwrap(), "nfs");
        assert!(
            resolve_id("plugin", "aws", ids)
                .unwrap_err()
                .0
                .contains("matches 2")
        );
        assert_eq!(
            resolve_id("plugin", "x", ids).unwrap_err().0,
            "plugin \"x\" not found"
        );
    }

    #[test]
    fn tables_align_without_trailing_space() {
        let mut t = table(["ID", "Count"]);
        t.add_row(vec!["a", "1"]);
        t.add_row(vec!["bbbb", "22"]);
        align_right(&mut t, &[1]);
        let s = render(&t);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 3, "{s}");
        assert!(lines.iter().all(|l| !l.ends_with(' ')));
        assert_eq!(lines[1].find('1'), lines[2].find("22").map(|i| i + 1));
    }
}
