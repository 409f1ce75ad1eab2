//! Helpers of the command-line tests: running the binary, reading its tables, and
//! loading and damaging the data directories it writes (a [`TempDir`], usually
//! [`TempDir::absent`]: the tool creates it). Shared by the tests of `schedstate`
//! and of `schedstate-server` (which include this file), each naming its binary.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use schedstate::StateStore;
use schedstate::persist::{DurableStore, Options};

/// A path inside a fresh temporary folder (removed with everything in it when
/// dropped): [`new`](Self::new) creates it, [`absent`](Self::absent) leaves it for the
/// code under test to create (or not).
#[derive(Debug)]
pub struct TempDir {
    _root: tempfile::TempDir,
    path: PathBuf,
}

impl TempDir {
    /// A fresh, empty directory named after `tag`.
    pub fn new(tag: &str) -> TempDir {
        let dir = TempDir::absent(tag);
        std::fs::create_dir(&dir.path).expect("create temp dir");
        dir
    }

    /// A fresh path named after `tag` that does not exist yet.
    pub fn absent(tag: &str) -> TempDir {
        let root = tempfile::Builder::new()
            .prefix("schedstate-cli-test-")
            .tempdir()
            .expect("create temp root");
        let path = root.path().join(tag);
        TempDir { _root: root, path }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as a command-line argument.
    pub fn arg(&self) -> &str {
        self.path.to_str().expect("utf-8 temp path")
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

/// The canonical bytes of the current state.
pub fn canonical(store: &StateStore) -> Vec<u8> {
    store
        .snapshot()
        .canonical_bytes()
        .expect("canonical bytes encode")
}

/// The binary under test (`BIN` of the test crate that includes this file), with the
/// server binary it hands server commands to (`SERVER_BIN`).
pub fn schedstate() -> Command {
    let mut cmd = Command::new(super::BIN);
    cmd.env_remove("CARGO_MANIFEST_DIR")
        .env("SCHEDSTATE_SERVER_BIN", super::SERVER_BIN);
    cmd
}

/// Runs the binary with `args`, expects success and nothing on stderr; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = schedstate().args(args).output().expect("runs");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    let stderr = String::from_utf8(out.stderr).expect("utf-8 stderr");
    assert!(
        out.status.success(),
        "schedstate {args:?} failed ({:?}):\n{stderr}\n{stdout}",
        out.status
    );
    assert!(
        stderr.is_empty(),
        "schedstate {args:?} wrote to stderr:\n{stderr}"
    );
    stdout
}

/// Runs the binary with `args`, expects exit code 1 and one `error: …` line on stderr;
/// returns that line.
pub fn fails(args: &[&str]) -> String {
    let out = schedstate().args(args).output().expect("runs");
    let stderr = String::from_utf8(out.stderr).expect("utf-8 stderr");
    assert_eq!(
        out.status.code(),
        Some(1),
        "schedstate {args:?} should fail with 1:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {stderr:?}");
    assert!(lines[0].starts_with("error: "), "{stderr:?}");
    lines[0].to_string()
}

/// Runs a small demo into `dir`; returns its stdout.
pub fn demo(dir: &TempDir, extra: &[&str]) -> String {
    let mut args = vec!["demo", "--data", dir.arg(), "--nodes", "12"];
    args.extend_from_slice(extra);
    if !extra.contains(&"--seconds") && !extra.contains(&"--steps") {
        args.extend_from_slice(&["--seconds", "2"]);
    }
    ok(&args)
}

/// The rows of an aligned table (header line first), split on whitespace. Every cell
/// of the tables checked here is a single word.
pub fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// The `key = value` lines of a details block, up to the first blank line.
pub fn key_values(text: &str) -> Vec<(String, String)> {
    text.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.split_once(" = ")?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// The value of `key` in a details block.
pub fn value(text: &str, key: &str) -> String {
    key_values(text)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"))
}

/// The lines of the section titled `title` (after its title, up to a blank line).
pub fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| *l != title)
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

/// The directory's state, loaded read-only, and its last applied index.
pub fn load(dir: &TempDir) -> (StateStore, u64) {
    let (store, report) = DurableStore::open_read_only(dir.path()).expect("the directory loads");
    (store, report.last_applied)
}

/// The canonical bytes of the directory's state.
pub fn dir_canonical(dir: &TempDir) -> Vec<u8> {
    canonical(&load(dir).0)
}

/// `1,234` as 1234.
pub fn plain(number: &str) -> u64 {
    number.replace(',', "").parse().expect("a number")
}

/// 1234 as `1,234`, as the tool prints numbers.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Writes a snapshot into the directory (a compaction) and returns its path.
pub fn compact(dir: &TempDir) -> PathBuf {
    let (db, _) = DurableStore::open(dir.path(), Options::default()).unwrap();
    db.compact().unwrap();
    drop(db);
    std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "snap"))
        .expect("a snapshot file")
}

/// Flips one bit of the byte `from_end` bytes before the end of `path`.
pub fn flip_byte(path: &Path, from_end: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.len() - from_end;
    bytes[at] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}
