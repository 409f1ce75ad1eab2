//! Golden files of the replicated formats, version 1 (`tests/golden/v1/`): the data
//! directory of a one-server cluster — Raft log segments (`SCHEDRFT` 1), the metadata
//! file (`SCHEDRMT` 1) and a snapshot (`SCHEDRSN` 1 around `SCHEDSNP` 1) — written
//! once. Every later build must open it to the same state. See the README there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use openraft::RaftLogReader;
use openraft::storage::RaftLogStorage;
use schedstate::model::NodeStatus;
use schedstate::state::Command;
use schedstate_raft::{LogOptions, LogStore, ProposeError, Router, Server, ServerOptions};

use crate::support::{DEADLINE, marker_node};

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v1")
}

fn options() -> ServerOptions {
    ServerOptions {
        log: LogOptions {
            segment_bytes: 1024,
            ..LogOptions::default()
        },
        ..ServerOptions::default()
    }
}

/// The golden commands: twelve node upserts, a refused status change, a status change.
fn golden_commands() -> Vec<Command> {
    let mut commands: Vec<Command> = (0..12)
        .map(|i| Command::UpsertNodes {
            nodes: vec![marker_node("golden", i)],
        })
        .collect();
    commands.push(Command::UpdateNodeStatus {
        id: "nowhere".into(),
        status: NodeStatus::Down,
    });
    commands.push(Command::UpdateNodeStatus {
        id: "golden-3".into(),
        status: NodeStatus::Down,
    });
    commands
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file()
            && e.file_name() != "README.md"
            && e.file_name() != "expected.canonical"
        {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Writes the golden directory where files are missing (run once, with `--ignored`);
/// never overwrites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the golden files; run once when a format version is introduced"]
async fn regenerate_golden_files() {
    let out = golden().join("data");
    if out.exists() {
        eprintln!("{} exists; not touching it", out.display());
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let router = Router::new();
    let server = Server::open(1, work.path(), options(), router.network(1))
        .await
        .unwrap();
    router.add(server.clone());
    server
        .initialize([(1, "golden-1".to_string())])
        .await
        .unwrap();
    server.wait_for_leader(DEADLINE).await.unwrap();
    for (i, c) in golden_commands().into_iter().enumerate() {
        match server.propose(c).await {
            Ok(_) | Err(ProposeError::Refused { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        if i == 7 {
            server.raft().trigger().snapshot().await.unwrap();
            while server.raft().metrics().borrow().snapshot.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    server.shutdown().await;
    copy_dir(work.path(), &out);
    std::fs::write(
        golden().join("expected.canonical"),
        server.read_stale().canonical_bytes().unwrap(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_v1_directory_opens_to_the_same_state() {
    let data = golden().join("data");
    let expected = std::fs::read(golden().join("expected.canonical")).unwrap();
    let work = tempfile::tempdir().unwrap();
    copy_dir(&data, work.path());

    // The log alone: every entry after the snapshot, in order, with the vote.
    {
        let (mut log, report) = LogStore::open(work.path(), LogOptions::default()).unwrap();
        assert_eq!(report.torn_bytes, 0);
        let state = log.get_log_state().await.unwrap();
        let last = state.last_log_id.unwrap().index;
        assert_eq!(last, 15, "blank + membership + 14 commands");
        let entries = log.try_get_log_entries(0..=last).await.unwrap();
        assert!(!entries.is_empty());
        for pair in entries.windows(2) {
            assert_eq!(pair[0].log_id.index + 1, pair[1].log_id.index);
        }
        let vote = log.read_vote().await.unwrap().unwrap();
        assert_eq!((vote.leader_id.term, vote.leader_id.node_id), (1, 1));
    }

    // The whole server: snapshot restored, the log replayed on top, same state.
    let server = open_applied(work.path(), 15).await;
    let snap = server.read_stale();
    snap.view().check_invariants().unwrap();
    assert_eq!(snap.canonical_bytes().unwrap(), expected);

    // A write of this build (a job: format 2 only) goes to a new segment; the
    // version-1 segments stay as committed, and the whole reopens.
    let job = schedstate::model::Job::new("default", "upgrade-check");
    let committed = server
        .propose(Command::UpsertJobs { jobs: vec![job] })
        .await
        .unwrap();
    server.shutdown().await;
    for name in [
        "raft-00000000000000000001.log",
        "raft-00000000000000000002.log",
    ] {
        assert!(
            std::fs::read(work.path().join(name)).unwrap()
                == std::fs::read(data.join(name)).unwrap(),
            "{name} was changed"
        );
    }
    let newest = std::fs::read(work.path().join("raft-00000000000000000003.log")).unwrap();
    assert_eq!(
        &newest[8..12],
        &schedstate_raft::RAFT_LOG_VERSION.to_le_bytes()
    );
    let server = open_applied(work.path(), committed.index).await;
    let snap = server.read_stale();
    assert!(snap.view().job("default", "upgrade-check").is_some());
    snap.view().check_invariants().unwrap();
    server.shutdown().await;
}

/// Server 1 on `dir`, alone, once it leads and has applied `index`.
async fn open_applied(dir: &Path, index: u64) -> Server {
    let router = Router::new();
    let server = Server::open(1, dir, options(), router.network(1))
        .await
        .unwrap();
    router.add(server.clone());
    server.wait_for_leader(DEADLINE).await.unwrap();
    server
        .wait_applied(index, Duration::from_secs(60))
        .await
        .unwrap();
    server
}
