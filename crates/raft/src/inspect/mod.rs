//! Reading a server's data directory without opening it — what `schedstate inspect`
//! shows: the newest snapshot (its Raft metadata and the tables it holds), the log's
//! range and segments, the vote and purge point, the committed pointer, and the state
//! a restart would serve before hearing from a leader: the snapshot with the committed
//! entries after it replayed.
//!
//! Read-only, and safe on a directory a running server holds: it takes no lock, opens
//! every file for reading only, writes, truncates and creates nothing (a
//! [`LogStore::open`](crate::LogStore::open) would cut a torn tail, remove a torn
//! segment header and start a new segment after an older format's). A torn tail of the
//! last segment is reported as such — usually a record being appended while it was
//! read. A file that a running server replaced or removed while it was read (a purge,
//! a new snapshot) makes the reading start over, a few times at most.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime};

use openraft::{BasicNode, EntryPayload, LogId, StoredMembership};
use schedstate::persist::PersistError;
use schedstate::state::{StateSnapshot, StateStore, Table};

use crate::NodeId;
use crate::committed::{self, committed_path};
use crate::log_format::{RAFT_LOG_MAGIC, RAFT_META_MAGIC, RaftMeta, meta_path, parse_segment_name};
use crate::log_scan::{ScannedLog, scan_log};
use crate::restore::{self, Staging};
use crate::snapshot_file::{self, RAFT_SNAPSHOT_MAGIC, parse_snapshot_name, snapshot_files};
use crate::state_machine::{Outcome, apply_proposal_to};
use crate::write_keys::WriteKeys;

mod report;

pub use report::{
    CommittedInfo, LogIdInfo, LogInfo, MemberInfo, MembershipInfo, SegmentInfo, ServerDirReport,
    ServerFile, SnapshotInfo, StateInfo, TableInfo, TornTail, VoteInfo,
};

fn tables(snap: &StateSnapshot) -> Vec<TableInfo> {
    let v = snap.view();
    Table::ALL
        .iter()
        .map(|t| TableInfo {
            name: t.name(),
            index: v.table_index(*t),
            rows: v.row_count(*t) as u64,
        })
        .collect()
}

/// Reads the server's data directory `dir` without changing anything; see the
/// [module](self).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let report = schedstate_raft::inspect_dir(dir.path()).unwrap();
/// assert!(report.snapshot.is_none() && report.log.entries == 0);
/// assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing created");
/// ```
///
/// # Errors
/// A [`PersistError`] naming the file, and the offset where it applies, of damage: a
/// segment, the metadata or a snapshot that does not read, a missing segment, entries
/// missing between the snapshot and the log, an entry that does not replay.
/// [`PersistError::NotADirectory`] if `dir` is not a directory.
pub fn inspect_dir(dir: &Path) -> Result<ServerDirReport, PersistError> {
    if !dir.is_dir() {
        return Err(PersistError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let mut attempts = 0;
    loop {
        let before = fingerprint(dir);
        match read_once(dir) {
            Ok(report) => return Ok(report),
            Err(e) => {
                attempts += 1;
                // A running server may have replaced or removed a file meanwhile;
                // damage reads the same again.
                if attempts >= 5 || fingerprint(dir) == before {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(20 * attempts));
            }
        }
    }
}

/// Names, sizes and modification times of the directory's entries.
fn fingerprint(dir: &Path) -> Vec<(OsString, u64, Option<SystemTime>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| {
            let meta = e.metadata().ok();
            (
                e.file_name(),
                meta.as_ref().map_or(0, std::fs::Metadata::len),
                meta.and_then(|m| m.modified().ok()),
            )
        })
        .collect();
    out.sort();
    out
}

/// One reading of the directory. The order matters on a live directory: the snapshot
/// first, then the committed pointer (it only ever names an entry that was durable in
/// the log when written, so the log read after it holds that entry unless a purge
/// took it: then the snapshot does), then the metadata and the log.
fn read_once(dir: &Path) -> Result<ServerDirReport, PersistError> {
    let store = StateStore::new();
    let mut keys = WriteKeys::default();
    let mut staging = None;
    let snapshot = match snapshot_files(dir)?.pop() {
        None => None,
        Some((_, path)) => {
            let (info, membership, kept, staged) = read_snapshot(&path, &store)?;
            keys = kept;
            staging = staged;
            Some((info, membership))
        }
    };
    let pointer = committed::read_checked(dir);
    let meta = RaftMeta::read(dir)?.unwrap_or_default();
    let purged = meta.last_purged();
    let scanned = scan_log(dir, purged.map_or(0, |l| l.index + 1))?;
    let log = log_info(&scanned, purged);

    let committed = match pointer {
        Ok(None) => CommittedInfo::Absent,
        Err(reason) => CommittedInfo::Ignored { reason },
        Ok(Some(c)) => {
            let first = scanned.records.first().map(|r| r.record.index);
            let at = first
                .and_then(|f| c.index.checked_sub(f))
                .and_then(|pos| scanned.records.get(usize::try_from(pos).ok()?))
                .map(|r| r.record.log_id());
            if at == Some(c) {
                CommittedInfo::InLog { log_id: c.into() }
            } else if first.is_none_or(|f| c.index < f) {
                CommittedInfo::BeforeLog { log_id: c.into() }
            } else {
                CommittedInfo::Ignored {
                    reason: format!(
                        "it names index {} of term {}, an entry the log does not hold",
                        c.index, c.leader_id.term
                    ),
                }
            }
        }
    };

    let state = replay(
        dir,
        &store,
        &mut keys,
        &mut staging,
        snapshot.as_ref(),
        &scanned,
        &committed,
    )?;
    let files = list_files(dir, &scanned, snapshot.as_ref())?;
    Ok(ServerDirReport {
        dir: dir.to_path_buf(),
        vote: meta.vote.map(|(term, node, committed)| VoteInfo {
            term,
            node,
            committed,
        }),
        log,
        committed,
        snapshot: snapshot.map(|(info, _)| info),
        state,
        files,
    })
}

/// What [`read_snapshot`] found: its summary, membership, write keys and staged
/// restore.
type ReadSnapshot = (
    SnapshotInfo,
    StoredMembership<NodeId, BasicNode>,
    WriteKeys,
    Option<Staging>,
);

/// The snapshot file `path`, restored into `store`; its summary and membership.
fn read_snapshot(path: &Path, store: &StateStore) -> Result<ReadSnapshot, PersistError> {
    let bytes = std::fs::read(path).map_err(|source| PersistError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let (meta, header, keys, staging) = snapshot_file::restore(path, &bytes, store)?;
    let body = snapshot_file::decode(path, &bytes)?.body;
    let info = SnapshotInfo {
        file: path.to_path_buf(),
        bytes: bytes.len() as u64,
        version: u32_at(&bytes, 8).unwrap_or_default(),
        store_version: u32_at(body, 8).unwrap_or_default(),
        snapshot_id: meta.snapshot_id.clone(),
        last_log_id: meta.last_log_id.map(LogIdInfo::from),
        membership: MembershipInfo::from(&meta.last_membership),
        last_applied: header.last_applied,
        tables: tables(&store.snapshot()),
        write_keys: keys.len() as u64,
    };
    Ok((info, meta.last_membership, keys, staging))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn log_info(scanned: &ScannedLog, purged: Option<LogId<NodeId>>) -> LogInfo {
    let mut segments = Vec::new();
    let mut torn_tail = None;
    for s in &scanned.segments {
        let bytes = s.scan.valid_len + s.scan.torn_bytes;
        if s.scan.torn_bytes > 0 || s.scan.torn_header {
            torn_tail = Some(TornTail {
                file: s.path.clone(),
                offset: s.scan.valid_len,
                bytes: s.scan.torn_bytes,
                header: s.scan.torn_header,
            });
        }
        if s.scan.torn_header {
            continue;
        }
        // Positions are Raft indexes + 1: the first record's index is the header's
        // previous position.
        let range = (s.records > 0).then(|| (s.scan.prev_index, s.last - 1));
        segments.push(SegmentInfo {
            file: s.path.clone(),
            seq: s.seq,
            version: s.scan.version,
            records: s.records,
            first_index: range.map(|r| r.0),
            last_index: range.map(|r| r.1),
            bytes,
        });
    }
    let first = scanned.records.first().map(|r| r.record.log_id().into());
    let last: Option<LogIdInfo> = scanned.records.last().map(|r| r.record.log_id().into());
    LogInfo {
        bytes: scanned
            .segments
            .iter()
            .map(|s| s.scan.valid_len + s.scan.torn_bytes)
            .sum(),
        segments,
        first,
        last,
        entries: scanned.records.len() as u64,
        next_index: last.map_or(scanned.start, |l| l.index + 1),
        purged: purged.map(LogIdInfo::from),
        purged_records: scanned.purged_records,
        torn_tail,
    }
}

/// Replays the committed entries after the snapshot into `store` (which holds the
/// snapshot's state), as the state machine applies them.
fn replay(
    dir: &Path,
    store: &StateStore,
    keys: &mut WriteKeys,
    staging: &mut Option<Staging>,
    snapshot: Option<&(SnapshotInfo, StoredMembership<NodeId, BasicNode>)>,
    scanned: &ScannedLog,
    committed: &CommittedInfo,
) -> Result<StateInfo, PersistError> {
    let mut last_applied = snapshot.and_then(|(s, _)| s.last_log_id);
    let mut membership = snapshot.map(|(_, m)| m.clone()).unwrap_or_default();
    let mut cluster_format = snapshot.map_or(crate::OLDEST_CLUSTER_FORMAT, |(s, _)| {
        s.store_version.max(crate::OLDEST_CLUSTER_FORMAT)
    });
    let next = last_applied.map_or(0, |l| l.index + 1);
    let until = match committed {
        CommittedInfo::InLog { log_id } if log_id.index >= next => Some(log_id.index),
        _ => None,
    };
    let (mut replayed, mut refused, mut replays) = (0, 0, 0);
    if let Some(until) = until {
        // The pointer names an entry of the log, so the log reaches it; it must also
        // reach back to the snapshot.
        let first = scanned.records.first().map_or(next, |r| r.record.index);
        if first > next {
            let path = scanned
                .segments
                .iter()
                .find(|s| s.records > 0)
                .map_or_else(|| dir.to_path_buf(), |s| s.path.clone());
            return Err(PersistError::MissingSegment {
                path,
                reason: match last_applied {
                    Some(l) => format!(
                        "the snapshot ends at index {}, but the log resumes at index {first}",
                        l.index
                    ),
                    None => format!("there is no snapshot, but the log starts at index {first}"),
                },
            });
        }
        for r in &scanned.records {
            let index = r.record.index;
            if index < next {
                continue;
            }
            if index > until {
                break;
            }
            let entry = r.record.clone().into_entry();
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(crate::Proposal {
                    raise_format: Some(format),
                    ..
                }) => cluster_format = cluster_format.max(*format),
                EntryPayload::Normal(proposal)
                    if proposal.commands.iter().any(|c| c.is_restore()) =>
                {
                    let (outcomes, _) = restore::apply_entry(staging, store, index, proposal);
                    refused += outcomes
                        .iter()
                        .filter(|o| matches!(o, Outcome::Refused(_)))
                        .count() as u64;
                }
                EntryPayload::Normal(proposal) => {
                    let applied =
                        apply_proposal_to(store, keys, index, proposal).map_err(|source| {
                            PersistError::Replay {
                                path: dir.join(crate::log_format::segment_name(r.seq)),
                                offset: r.offset,
                                index,
                                source: Box::new(source),
                            }
                        })?;
                    for outcome in &applied.outcomes {
                        match outcome {
                            Outcome::Refused(_) => refused += 1,
                            Outcome::Replayed { .. } | Outcome::KeyReused { .. } => replays += 1,
                            Outcome::Applied => {}
                        }
                    }
                }
                EntryPayload::Membership(m) => {
                    membership = StoredMembership::new(Some(entry.log_id), m.clone());
                }
            }
            last_applied = Some(entry.log_id.into());
            replayed += 1;
        }
    }
    let applied_index = last_applied.map(|l| l.index);
    let snap = store.snapshot();
    Ok(StateInfo {
        last_applied,
        replayed,
        refused,
        not_known_committed: scanned
            .records
            .iter()
            .filter(|r| applied_index.is_none_or(|a| r.record.index > a))
            .count() as u64,
        membership: MembershipInfo::from(&membership),
        latest_index: snap.view().latest_index(),
        cluster_format,
        write_keys: keys.len() as u64,
        replays,
        tables: tables(&snap),
        snapshot: snap,
    })
}

/// Every entry of the directory with what it is, its size and its format version.
fn list_files(
    dir: &Path,
    scanned: &ScannedLog,
    snapshot: Option<&(SnapshotInfo, StoredMembership<NodeId, BasicNode>)>,
) -> Result<Vec<ServerFile>, PersistError> {
    let io = |source| PersistError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        // A file a running server removed since it was listed is left out.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let (kind, version) = if meta.is_dir() {
            ("folder", None)
        } else if let Some(seq) = parse_segment_name(&name) {
            let scanned = scanned.segments.iter().find(|s| s.seq == seq);
            let version = match scanned {
                Some(s) if !s.scan.torn_header => Some(s.scan.version),
                Some(_) => None,
                None => header_version(&path, RAFT_LOG_MAGIC),
            };
            ("raft log segment", version)
        } else if parse_snapshot_name(&name).is_some() {
            let version = match snapshot {
                Some((s, _)) if s.file == path => Some(s.version),
                _ => header_version(&path, RAFT_SNAPSHOT_MAGIC),
            };
            ("raft snapshot", version)
        } else if path == meta_path(dir) {
            ("raft metadata", header_version(&path, RAFT_META_MAGIC))
        } else if path == committed_path(dir) {
            // No version field: its magic is its format.
            ("committed pointer", None)
        } else if name == "LOCK" {
            ("lock", None)
        } else if name.ends_with(".tmp") {
            ("temporary", None)
        } else {
            ("other", None)
        };
        out.push(ServerFile {
            name,
            kind,
            bytes: if meta.is_dir() { 0 } else { meta.len() },
            version,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The version field after `magic` at the start of `path`, if the file starts so.
fn header_version(path: &Path, magic: &[u8; 8]) -> Option<u32> {
    let mut head = [0u8; 12];
    let mut file = std::fs::File::open(path).ok()?;
    file.read_exact(&mut head).ok()?;
    (&head[..8] == magic).then(|| u32::from_le_bytes([head[8], head[9], head[10], head[11]]))
}
