//! The agent's configuration file: TOML, one table of settings with `[peers]`, `[tls]`
//! and `[limits]` sections, each key the setting of one flag (the README's table).
//!
//! A file is read whole (at most 1 MiB), parsed twice: once with serde into
//! [`FileConfig`] (unknown keys refused, every value typed and checked: ids and limits
//! above zero, durations in humantime's syntax, peers as `ID = "host:port"`), and,
//! only when that fails, once more into toml's spanned tree to name the key the error
//! is at. Relative paths in a file are taken from the file's own directory, so a
//! file means the same whatever directory the agent is started from.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::num::{NonZeroU64, NonZeroUsize};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schedstate_agent::{ConfigError, Peers};
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};
use toml::de::{DeTable, DeValue};

use super::settings::{Layer, LogLevel};

/// The largest configuration file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why a configuration file could not be used. Every message names the file; a bad
/// key or value names its line and its key (`limits.max_conns`).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read (missing, unreadable, a directory).
    #[error("configuration file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is larger than any configuration.
    #[error("configuration file {}: larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Not TOML, an unknown key, a value of the wrong type or out of range.
    #[error("{}{at}: {}{message}", path.display(), key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where in it.
        at: Position,
        /// The key the error is at (`tls.cert`, `peers.2`), when it is at one.
        key: Option<String>,
        /// What is wrong.
        message: String,
    },
}

/// A place in a file: line and column from 1 (none when toml gives no place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, from 1.
    pub line: usize,
    /// The column (in characters), from 1.
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            Ok(())
        } else {
            write!(f, " line {}, column {}", self.line, self.column)
        }
    }
}

/// What one file may hold: every key optional (a default or another file or a flag
/// gives the rest).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    id: Option<NonZeroU64>,
    bind: Option<SocketAddr>,
    data_dir: Option<FilePath>,
    peers: Option<BTreeMap<PeerId, PeerAddr>>,
    cluster_key_file: Option<FilePath>,
    region: Option<Region>,
    dev: Option<bool>,
    log_level: Option<LogLevel>,
    max_format: Option<u32>,
    tls: Option<TlsSection>,
    limits: Option<LimitsSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSection {
    cert: Option<FilePath>,
    key: Option<FilePath>,
    ca: Option<FilePath>,
    verify_clients: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSection {
    max_conns_per_client: Option<NonZeroUsize>,
    max_conns: Option<NonZeroUsize>,
    max_blocking_queries: Option<NonZeroUsize>,
    max_blocking_queries_per_client: Option<NonZeroUsize>,
    max_event_streams: Option<NonZeroUsize>,
    max_event_streams_per_client: Option<NonZeroUsize>,
    scan_budget: Option<Budget>,
    max_snapshot_restore_bytes: Option<NonZeroUsize>,
}

/// A path, not empty.
#[derive(Debug)]
struct FilePath(PathBuf);

impl<'de> Deserialize<'de> for FilePath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Err(D::Error::custom("an empty path"));
        }
        Ok(FilePath(PathBuf::from(s)))
    }
}

/// A region name, not empty.
#[derive(Debug)]
struct Region(String);

impl<'de> Deserialize<'de> for Region {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Err(D::Error::custom("an empty region"));
        }
        Ok(Region(s))
    }
}

/// A server id as a key of `[peers]`: a number from 1.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PeerId(u64);

impl<'de> Deserialize<'de> for PeerId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.parse::<u64>() {
            Ok(0) => Err(D::Error::custom("server ids start at 1")),
            Ok(id) => Ok(PeerId(id)),
            Err(_) => Err(D::Error::custom(format!(
                "the peer id {s:?} is not a number (peers are ID = \"host:port\")"
            ))),
        }
    }
}

/// A peer's `host:port`, checked as `--peers` checks it.
#[derive(Debug)]
struct PeerAddr(String);

impl<'de> Deserialize<'de> for PeerAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match format!("1={s}").parse::<Peers>() {
            Ok(_) if !s.contains(',') => Ok(PeerAddr(s.trim().to_string())),
            Ok(_) => Err(D::Error::custom(format!("{s:?} is not one HOST:PORT"))),
            Err(ConfigError::BadPeer { reason, .. }) => Err(D::Error::custom(format!(
                "{s:?} is not HOST:PORT: {reason}"
            ))),
            Err(e) => Err(D::Error::custom(e)),
        }
    }
}

/// A duration above zero in humantime's syntax (`2s`, `500ms`, `1m30s`).
#[derive(Debug)]
struct Budget(Duration);

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match humantime::parse_duration(&s) {
            Ok(d) if d.is_zero() => Err(D::Error::custom("a duration above zero")),
            Ok(d) => Ok(Budget(d)),
            Err(e) => Err(D::Error::custom(format!(
                "{s:?} is not a duration such as \"2s\" or \"500ms\": {e}"
            ))),
        }
    }
}

/// Reads the configuration file at `path` into the settings it sets.
pub fn read(path: &Path) -> Result<Layer, FileError> {
    let read_err = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
        });
    }
    let dir = path.parent().unwrap_or(Path::new(""));
    parse(&text, dir).map_err(|(span, message)| FileError::Invalid {
        path: path.to_owned(),
        at: span.as_ref().map_or(Position { line: 0, column: 0 }, |s| {
            position(&text, s.start)
        }),
        key: span.and_then(|s| key_at(&text, &s)),
        message,
    })
}

/// Parses a file's text; relative paths are joined to `dir`. The error is its span
/// and message.
pub(super) fn parse(text: &str, dir: &Path) -> Result<Layer, (Option<Range<usize>>, String)> {
    let file: FileConfig =
        toml::from_str(text).map_err(|e| (e.span(), e.message().trim().to_string()))?;
    let path = |p: Option<FilePath>| p.map(|p| dir.join(p.0));
    let tls = file.tls.unwrap_or_default();
    let limits = file.limits.unwrap_or_default();
    let count = |n: Option<NonZeroUsize>| n.map(NonZeroUsize::get);
    Ok(Layer {
        id: file.id.map(NonZeroU64::get),
        bind: file.bind,
        data: path(file.data_dir),
        peers: file
            .peers
            .map(|p| Peers(p.into_iter().map(|(id, a)| (id.0, a.0)).collect())),
        cluster_key_file: path(file.cluster_key_file),
        tls_cert: path(tls.cert),
        tls_key: path(tls.key),
        tls_ca: path(tls.ca),
        tls_verify_clients: tls.verify_clients,
        region: file.region.map(|r| r.0),
        dev: file.dev,
        log_level: file.log_level,
        max_format: file.max_format,
        max_conns_per_client: count(limits.max_conns_per_client),
        max_conns: count(limits.max_conns),
        max_blocking_queries: count(limits.max_blocking_queries),
        max_blocking_queries_per_client: count(limits.max_blocking_queries_per_client),
        max_event_streams: count(limits.max_event_streams),
        max_event_streams_per_client: count(limits.max_event_streams_per_client),
        scan_budget: limits.scan_budget.map(|b| b.0),
        max_snapshot_restore_bytes: count(limits.max_snapshot_restore_bytes),
    })
}

/// Line and column (from 1) of byte `offset` of `text`.
fn position(text: &str, offset: usize) -> Position {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Position {
        line,
        column: before[line_start..].chars().count() + 1,
    }
}

/// The dotted key whose key or value holds `span` (the innermost), if the text parses
/// as TOML at all.
fn key_at(text: &str, span: &Range<usize>) -> Option<String> {
    let table = DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    walk(table.get_ref(), span, &mut path);
    (!path.is_empty()).then(|| path.join("."))
}

fn walk(table: &DeTable<'_>, span: &Range<usize>, path: &mut Vec<String>) {
    let inside = |s: Range<usize>| s.start <= span.start && span.end <= s.end;
    for (key, value) in table {
        if inside(key.span()) {
            path.push(key.get_ref().to_string());
            return;
        }
        if inside(value.span()) {
            path.push(key.get_ref().to_string());
            if let DeValue::Table(inner) = value.get_ref() {
                walk(inner, span, path);
            }
            return;
        }
    }
    // A section (`[tls]`): its span is its header's, and its keys' spans hold the rest.
    for (key, value) in table {
        if let DeValue::Table(inner) = value.get_ref() {
            let mut inner_path = vec![key.get_ref().to_string()];
            walk(inner, span, &mut inner_path);
            if inner_path.len() > 1 {
                path.extend(inner_path);
                return;
            }
        }
    }
}
