//! The Raft log's files keep the WAL's guarantees: a torn tail is cut on open, damage
//! anywhere else is refused with the file and offset, a missing segment is noticed.

use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader};
use schedstate::persist::PersistError;
use schedstate::state::Command;
use schedstate_raft::{Entry, LogOptions, LogStore, Proposal};
use schedstate_test_support::segment::records_end;

use crate::support::marker_node;

fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposal {
            commands: vec![Arc::new(Command::UpsertNodes {
                nodes: vec![marker_node("log", index)],
            })],
            keys: None,
            raise_format: None,
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
    let len = records_end(&std::fs::read(last).unwrap()) as u64;
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

fn id(index: u64) -> LogId<schedstate_raft::NodeId> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

#[tokio::test]
async fn the_committed_pointer_survives_a_reopen_and_never_names_more_than_the_log_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), None);
    log.blocking_append((0..10).map(entry)).await.unwrap();
    log.save_committed(Some(id(7))).await.unwrap();
    // The flusher writes the pointer after the next fsync, before it acknowledges it.
    log.blocking_append([entry(10)]).await.unwrap();
    drop(log);
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(7)));

    // Reported past what the log has made durable: the pointer stops at the last
    // durable entry (entries below a committed index are committed).
    log.save_committed(Some(id(40))).await.unwrap();
    log.blocking_append([entry(11)]).await.unwrap();
    drop(log);
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(11)));
    drop(log);

    // A pointer naming an entry the log no longer holds (its file cut short) is
    // ignored: nothing beyond the snapshot is re-applied.
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    let last = files.last().unwrap();
    let len = records_end(&std::fs::read(last).unwrap()) as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let (mut log, report) = LogStore::open(dir.path(), options()).unwrap();
    assert!(report.torn_bytes > 0);
    assert_eq!(log.read_committed().await.unwrap(), None);
    drop(log);

    // A damaged pointer file is ignored too.
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    log.save_committed(Some(id(9))).await.unwrap();
    log.blocking_append([entry(11)]).await.unwrap();
    drop(log);
    let pointer = dir.path().join("raft-committed");
    let mut bytes = std::fs::read(&pointer).unwrap();
    assert_eq!(&bytes[..8], schedstate_raft::RAFT_COMMITTED_MAGIC);
    bytes[30] ^= 0x10;
    std::fs::write(&pointer, &bytes).unwrap();
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), None);
}

/// The index the pointer file in `dir` names, if it holds one.
fn pointer_index(dir: &std::path::Path) -> Option<u64> {
    let bytes = std::fs::read(dir.join("raft-committed")).ok()?;
    Some(u64::from_le_bytes(bytes.get(24..32)?.try_into().ok()?))
}

#[tokio::test]
async fn a_commit_reported_after_the_last_fsync_reaches_the_pointer_once_the_log_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    log.blocking_append((0..10).map(entry)).await.unwrap();
    // Reported after the fsync that made it durable, and no append follows: the
    // flusher writes it on its own once the log has been quiet (20 ms), with the
    // handle still open.
    log.save_committed(Some(id(9))).await.unwrap();
    let start = std::time::Instant::now();
    while pointer_index(dir.path()) != Some(9) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "the pointer stayed at {:?}",
            pointer_index(dir.path())
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }

    // Reported and the last handle dropped at once: the drop writes it.
    log.blocking_append([entry(10)]).await.unwrap();
    log.save_committed(Some(id(10))).await.unwrap();
    drop(log);
    assert_eq!(pointer_index(dir.path()), Some(10));
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(10)));

    // And `close` writes it too.
    log.blocking_append([entry(11)]).await.unwrap();
    log.save_committed(Some(id(11))).await.unwrap();
    log.close();
    assert_eq!(pointer_index(dir.path()), Some(11));
}

#[tokio::test]
async fn a_pointer_behind_the_purge_point_is_left_to_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    log.blocking_append((0..30).map(entry)).await.unwrap();
    log.save_committed(Some(id(5))).await.unwrap();
    log.blocking_append([entry(30)]).await.unwrap();
    log.purge(id(20)).await.unwrap();
    drop(log);
    let (mut log, _) = LogStore::open(dir.path(), options()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), None);
}

/// An entry carrying `commands` node upserts (about 1 KiB each, encoded).
fn wide_entry(index: u64, commands: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposal {
            commands: (0..commands)
                .map(|c| {
                    let mut node = marker_node("wide", index * 1_000 + c);
                    node.name = "n".repeat(1_000);
                    Arc::new(Command::UpsertNode { node })
                })
                .collect(),
            keys: None,
            raise_format: None,
        }),
    }
}

#[tokio::test]
async fn a_replication_batch_stops_near_a_mebibyte_and_never_comes_back_empty() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 8 << 20,
        cache_bytes: 1 << 20,
    };
    let (mut log, _) = LogStore::open(dir.path(), options).unwrap();
    // 100 entries of 64 commands: about 64 KiB each, 6.4 MiB in all.
    log.blocking_append((0..100).map(|i| wide_entry(i, 64)))
        .await
        .unwrap();
    let batch = log.limited_get_log_entries(0, 100).await.unwrap();
    assert!(
        (8..=20).contains(&batch.len()),
        "{} entries of ~64 KiB in one batch",
        batch.len()
    );
    assert_eq!(batch[0].log_id.index, 0);
    // Entries follow one another from the start asked for.
    for (i, e) in batch.iter().enumerate() {
        assert_eq!(e.log_id.index, i as u64);
    }
    // The oldest entries are past the 1 MiB cache: each was read back from its segment.
    assert_eq!(log.stats().disk_reads, batch.len() as u64);
    // The newest are still cached.
    assert_eq!(log.try_get_log_entries(95..100).await.unwrap().len(), 5);
    assert_eq!(log.stats().disk_reads, batch.len() as u64);
    // The whole range is still there for whoever asks for all of it.
    assert_eq!(log.try_get_log_entries(0..100).await.unwrap().len(), 100);

    // One entry over the budget on its own still goes, alone.
    log.blocking_append([wide_entry(100, 2_000)]).await.unwrap();
    let alone = log.limited_get_log_entries(100, 101).await.unwrap();
    assert_eq!(alone.len(), 1);
}
