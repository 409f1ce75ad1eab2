//! `inspect_dir`: a server's data directory read without opening it — on the golden
//! version-1 directory (figures known), on the directories of a running cluster (figures
//! against the servers' own), and on damage — changing nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use openraft::storage::RaftLogStorageExt;
use openraft::{CommittedLeaderId, EntryPayload, LogId, SnapshotPolicy};
use schedstate::persist::PersistError;
use schedstate::state::Command;
use schedstate_raft::inspect::{CommittedInfo, LogIdInfo};
use schedstate_raft::{
    Entry, LogOptions, LogStore, Proposal, ServerDirReport, ServerOptions, inspect_dir,
};
use schedstate_test_support::segment::records_end;

use crate::support::{Cluster, DEADLINE, marker_node, propose_until_known};

/// Every file of `dir`: its bytes and modification time.
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            let name = e.file_name().into_string().unwrap();
            (
                name,
                (std::fs::read(e.path()).unwrap(), meta.modified().unwrap()),
            )
        })
        .collect()
}

fn copy_golden(to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v1/data");
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A committed pointer file naming (term, node, index), written as a server does.
fn write_pointer(dir: &Path, term: u64, node: u64, index: u64) {
    let mut bytes = schedstate_raft::RAFT_COMMITTED_MAGIC.to_vec();
    for v in [term, node, index] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(dir.join("raft-committed"), bytes).unwrap();
}

fn rows(report_tables: &[schedstate_raft::inspect::TableInfo], name: &str) -> u64 {
    report_tables.iter().find(|t| t.name == name).unwrap().rows
}

fn id(index: u64, term: u64, leader: u64) -> LogIdInfo {
    LogIdInfo {
        index,
        term,
        leader,
    }
}

#[test]
fn the_golden_v1_directory_reads_to_its_known_figures_and_is_left_alone() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    copy_golden(dir);
    let before = files(dir);

    let r = inspect_dir(dir).unwrap();
    let snap = r.snapshot.as_ref().expect("a snapshot");
    assert_eq!(snap.last_log_id, Some(id(9, 1, 1)));
    assert_eq!((snap.version, snap.store_version), (1, 1));
    assert_eq!(snap.membership.voters, vec![vec![1]]);
    assert_eq!(snap.membership.log_id, Some(id(0, 0, 0)));
    assert_eq!(snap.membership.members.len(), 1);
    assert_eq!(snap.membership.members[0].address, "golden-1");
    assert!(snap.membership.members[0].voter);
    // Indexes 2..=9 are the first eight node upserts.
    assert_eq!(snap.last_applied, 9);
    assert_eq!(rows(&snap.tables, "nodes"), 8);
    assert_eq!(snap.bytes, 1209);

    assert_eq!(r.log.segments.len(), 2);
    assert!(r.log.segments.iter().all(|s| s.version == 1));
    assert_eq!(r.log.segments[0].first_index, Some(0));
    assert_eq!(
        r.log.segments[0].last_index.unwrap() + 1,
        r.log.segments[1].first_index.unwrap()
    );
    assert_eq!(r.log.segments[1].last_index, Some(15));
    assert_eq!(r.log.bytes, 1063 + 170);
    assert_eq!(r.log.first, Some(id(0, 0, 0)));
    assert_eq!(r.log.last, Some(id(15, 1, 1)));
    assert_eq!((r.log.entries, r.log.next_index), (16, 16));
    assert_eq!((r.log.purged, r.log.purged_records), (None, 0));
    assert_eq!(r.log.torn_tail, None);
    let vote = r.vote.unwrap();
    assert_eq!((vote.term, vote.node, vote.committed), (1, 1, true));
    let kinds: Vec<(&str, &str, Option<u32>)> = r
        .files
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.version))
        .collect();
    assert_eq!(
        kinds,
        [
            ("raft-00000000000000000001.log", "raft log segment", Some(1)),
            ("raft-00000000000000000002.log", "raft log segment", Some(1)),
            ("raft-meta", "raft metadata", Some(1)),
            ("snap-00000000000000000009.rsnap", "raft snapshot", Some(1)),
        ]
    );

    // No committed pointer (the build that wrote these had none): the state is the
    // snapshot's, and the six entries after it are not known to be committed.
    assert_eq!(r.committed, CommittedInfo::Absent);
    assert_eq!(r.state.last_applied, Some(id(9, 1, 1)));
    assert_eq!((r.state.replayed, r.state.not_known_committed), (0, 6));
    assert_eq!(rows(&r.state.tables, "nodes"), 8);

    // Nothing written: not the torn-free tail, not the new segment a LogStore::open
    // starts after a version-1 tail.
    assert_eq!(files(dir), before, "inspect changed the directory");

    // With a pointer at the last entry, the replay reaches the golden state.
    write_pointer(dir, 1, 1, 15);
    let r = inspect_dir(dir).unwrap();
    assert_eq!(
        r.committed,
        CommittedInfo::InLog {
            log_id: id(15, 1, 1)
        }
    );
    assert_eq!(r.state.last_applied, Some(id(15, 1, 1)));
    assert_eq!((r.state.replayed, r.state.refused), (6, 1));
    assert_eq!(r.state.not_known_committed, 0);
    assert_eq!(rows(&r.state.tables, "nodes"), 12);
    assert_eq!(r.state.latest_index, 15);
    r.state.snapshot.view().check_invariants().unwrap();
    let expected = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v1/expected.canonical"),
    )
    .unwrap();
    assert_eq!(r.state.snapshot.canonical_bytes().unwrap(), expected);
    assert_eq!(r.state.membership.voters, vec![vec![1]]);

    // A pointer a server would ignore is reported, and the state is the snapshot's.
    write_pointer(dir, 2, 1, 15);
    let r = inspect_dir(dir).unwrap();
    assert!(
        matches!(&r.committed, CommittedInfo::Ignored { reason } if reason.contains("does not hold")),
        "{:?}",
        r.committed
    );
    assert_eq!(r.state.replayed, 0);
    let mut torn = std::fs::read(dir.join("raft-committed")).unwrap();
    torn[30] ^= 1;
    std::fs::write(dir.join("raft-committed"), torn).unwrap();
    let r = inspect_dir(dir).unwrap();
    assert!(
        matches!(&r.committed, CommittedInfo::Ignored { reason } if reason.contains("checksum")),
        "{:?}",
        r.committed
    );

    // JSON: the figures, without the state itself.
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["log"]["last"]["index"], 15);
    assert_eq!(json["committed"]["status"], "ignored");
    assert_eq!(json["snapshot"]["tables"][0]["name"], "nodes");
    assert!(json["state"].get("snapshot").is_none());
}

fn entry(index: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposal {
            commands: vec![Arc::new(Command::UpsertNodes {
                nodes: vec![marker_node("inspect", index)],
            })],
            keys: None,
            raise_format: None,
        }),
    }
}

/// A log of entries 0..30 in several segments (no snapshot, no pointer); the segments.
async fn small_log(dir: &Path) -> Vec<PathBuf> {
    let options = LogOptions {
        segment_bytes: 600,
        cache_bytes: 1 << 20,
    };
    let (mut log, _) = LogStore::open(dir, options).unwrap();
    log.blocking_append((0..30).map(entry)).await.unwrap();
    log.close();
    drop(log);
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    assert!(segments.len() >= 3);
    segments
}

#[tokio::test]
async fn a_torn_tail_is_reported_not_cut_and_damage_is_named_with_file_and_offset() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let segments = small_log(dir).await;
    let last = segments.last().unwrap();
    let len = records_end(&std::fs::read(last).unwrap()) as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let before = files(dir);
    let r = inspect_dir(dir).unwrap();
    let torn = r.log.torn_tail.clone().expect("a torn tail");
    assert_eq!(&torn.file, last);
    assert!(!torn.header);
    assert_eq!(torn.offset + torn.bytes, len - 5);
    assert_eq!(
        r.log.last.unwrap().index,
        28,
        "the torn record is not counted"
    );
    let on_disk: u64 = segments
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(r.log.bytes, on_disk);
    assert_eq!(r.committed, CommittedInfo::Absent);
    assert_eq!(r.state.not_known_committed, 29);
    assert!(r.snapshot.is_none() && r.vote.is_none());
    assert_eq!(files(dir), before, "the torn tail was cut");

    // Damage in the middle of the log: the file and the offset.
    let middle = &segments[1];
    let mut bytes = std::fs::read(middle).unwrap();
    bytes[40] ^= 0x40;
    std::fs::write(middle, &bytes).unwrap();
    match inspect_dir(dir).unwrap_err() {
        PersistError::Checksum { path, offset, .. } => {
            assert_eq!(&path, middle);
            assert_eq!(offset, 32, "the first record after the header");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_segment_being_created_is_reported_and_left_alone() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let segments = small_log(dir).await;
    let seq: u64 = segments.len() as u64 + 1;
    let next = dir.join(format!("raft-{seq:020}.log"));
    std::fs::write(&next, &b"SCHEDRFT\x02\x00"[..]).unwrap();
    let before = files(dir);
    let r = inspect_dir(dir).unwrap();
    let torn = r.log.torn_tail.clone().expect("a torn header");
    assert!(torn.header);
    assert_eq!((torn.file, torn.offset, torn.bytes), (next.clone(), 0, 10));
    assert_eq!(r.log.segments.len(), segments.len());
    assert_eq!(r.log.last.unwrap().index, 29);
    assert_eq!(files(dir), before, "the torn segment was removed");
}

fn options() -> ServerOptions {
    let mut o = ServerOptions::default();
    o.raft.snapshot_policy = SnapshotPolicy::LogsSinceLast(60);
    o.raft.max_in_snapshot_log_to_keep = 10;
    o.raft.purge_batch_size = 1;
    o.log.segment_bytes = 4 << 10;
    o
}

/// Waits until `dir`'s report has applied `index` (the pointer is written by the
/// log's flusher shortly after the commit).
fn report_at(dir: &Path, index: u64) -> ServerDirReport {
    let start = Instant::now();
    loop {
        let r = inspect_dir(dir).unwrap();
        if r.state.last_applied.is_some_and(|l| l.index >= index) {
            return r;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{} never showed index {index}: {:?}",
            dir.display(),
            r.committed
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_clusters_directories_read_to_the_servers_own_figures() {
    let cluster = Cluster::start(3, options()).await;
    let mut last = 0;
    for seq in 0..150 {
        last = propose_until_known(&cluster, &marker_node("inspect", seq)).await;
    }
    cluster.wait_all_applied(last).await;
    let nodes = cluster.server(1).read_stale().view().nodes().count() as u64;

    for server in cluster.live() {
        let dir = cluster.dir(server.id());
        // While the server runs: nothing is written to its directory by reading it.
        let before = files(&dir);
        let r = report_at(&dir, last);
        let after = files(&dir);
        for (name, (bytes, mtime)) in &before {
            if let Some((b, m)) = after.get(name)
                && m == mtime
            {
                assert!(b == bytes, "{name} changed under an unchanged mtime");
            }
        }
        assert!(
            after
                .keys()
                .all(|n| before.contains_key(n) || !n.starts_with("raft-")),
            "a segment appeared: {:?}",
            after.keys()
        );

        let m = server.raft().metrics().borrow().clone();
        let snap = r.snapshot.as_ref().expect("a snapshot after 150 entries");
        assert_eq!(
            snap.last_log_id.map(|l| l.index),
            m.snapshot.map(|l| l.index)
        );
        assert_eq!(r.log.last.map(|l| l.index), m.last_log_index);
        assert_eq!(r.log.purged.map(|l| l.index), m.purged.map(|l| l.index));
        assert_eq!(
            r.log.first.unwrap().index,
            r.log.purged.map_or(0, |p| p.index + 1)
        );
        assert!(r.log.segments.len() > 1, "{:?}", r.log.segments);
        assert!(
            r.log
                .segments
                .iter()
                .all(|s| s.version == schedstate_raft::RAFT_LOG_VERSION)
        );
        assert_eq!(r.vote.unwrap().term, m.vote.leader_id.term);
        assert_eq!(r.committed.log_id().map(|l| l.index), Some(last));
        assert_eq!(
            r.state.last_applied.map(|l| l.index),
            Some(server.last_applied())
        );
        assert_eq!(r.state.not_known_committed, 0);
        assert_eq!(rows(&r.state.tables, "nodes"), nodes);
        assert_eq!(r.state.membership.voters, vec![vec![1, 2, 3]]);
        assert_eq!(
            r.state.snapshot.canonical_bytes().unwrap(),
            server.read_stale().canonical_bytes().unwrap(),
            "server {}",
            server.id()
        );
        assert!(r.files.iter().any(|f| f.kind == "lock"));
    }

    // Stopped, the figures are the same and, byte for byte, so is every file.
    let running: Vec<_> = cluster
        .live()
        .iter()
        .map(|s| (s.id(), inspect_dir(&cluster.dir(s.id())).unwrap()))
        .collect();
    cluster.shutdown().await;
    for (id, r) in running {
        let dir = cluster.dir(id);
        let before = files(&dir);
        let stopped = inspect_dir(&dir).unwrap();
        assert_eq!(files(&dir), before, "server {id}: inspect changed a file");
        assert_eq!(stopped.log, r.log);
        assert_eq!(stopped.snapshot, r.snapshot);
        assert_eq!(stopped.state.tables, r.state.tables);
        assert_eq!(stopped.state.last_applied, r.state.last_applied);
    }
}
