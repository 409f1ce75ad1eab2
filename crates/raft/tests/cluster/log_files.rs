//! The Raft log's files keep the WAL's guarantees: a torn tail is cut on open, damage
//! anywhere else is refused with the file and offset, a missing segment is noticed.

use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader};
use schedstate::persist::PersistError;
use schedstate::state::Command;
use schedstate_raft::{Entry, LogOptions, LogStore, Proposal};

use crate::support::marker_node;

fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposal {
            commands: vec![Arc::new(Command::UpsertNodes {
                nodes: vec![marker_node("log", index)],
            })],
        }),
    }
}

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 600,
        cache_bytes: 1 << 20,
    }
}

/// A log of entries 0..n in several segments; returns the segment files in order.
async fn written(dir: &std::path::Path, n: u64) -> Vec<std::path::PathBuf> {
    let (mut log, _) = LogStore::open(dir, options()).unwrap();
    log.blocking_append((0..n).map(entry)).await.unwrap();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 3,
        "want several segments, got {}",
        files.len()
    );
    files
}

#[tokio::test]
async fn a_torn_tail_is_cut_on_open_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let files = written(dir.path(), 30).await;
    let last = files.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(last).unwrap();
    f.set_len(len - 5).unwrap();
    drop(f);

    let (mut log, report) = LogStore::open(dir.path(), options()).unwrap();
    assert!(report.torn_bytes > 0);
    let state = log.get_log_state().await.unwrap();
    assert_eq!(
        state.last_log_id.unwrap().index,
        28,
        "the torn entry 29 is gone"
    );
    // The log takes the lost entry again, and a reopen reads all of it.
    log.blocking_append([entry(29)]).await.unwrap();
    drop(log);
    let (mut log, report) = LogStore::open(dir.path(), options()).unwrap();
    assert_eq!(report.torn_bytes, 0);
    let all = log.try_get_log_entries(0..30).await.unwrap();
    assert_eq!(all.len(), 30);
    assert_eq!(all[29], entry(29));
}

#[tokio::test]
async fn damage_before_the_tail_is_refused_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let files = written(dir.path(), 30).await;
    let first = &files[0];
    let mut bytes = std::fs::read(first).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(first, &bytes).unwrap();
    match LogStore::open(dir.path(), options()) {
        Err(PersistError::Checksum { path, offset, .. }) => {
            assert_eq!(&path, first);
            assert!(
                offset > 0 && offset <= at as u64,
                "offset {offset}, damage at {at}"
            );
        }
        Err(PersistError::Corrupt { path, .. }) => assert_eq!(&path, first),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a damaged log opened"),
    }
}

#[tokio::test]
async fn a_missing_segment_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let files = written(dir.path(), 30).await;
    std::fs::remove_file(&files[1]).unwrap();
    match LogStore::open(dir.path(), options()) {
        Err(PersistError::MissingSegment { .. }) => {}
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a log with a hole opened"),
    }
}
