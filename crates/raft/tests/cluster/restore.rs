//! Restoring a snapshot file into the running cluster through the log: the pieces
//! staged by every server, a follower cut off while the leader snapshots and purges
//! between two pieces (it installs the snapshot, staging included, and goes on from
//! the next piece), restarts from each server's own snapshot and log, and the file
//! replacing the state on every server with every index at the restore's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use schedstate::model::Node;
use schedstate::state::{Command, StateStore, Table};
use schedstate_raft::{Proposal, RestoreError, ServerOptions};
use sha2::{Digest, Sha256};

use crate::small_snapshots;
use crate::support::*;

/// A snapshot file of `n` nodes, from a store of its own.
fn saved_file(n: usize) -> Vec<u8> {
    let store = StateStore::new();
    for i in 0..n {
        let node = Node::new(format!("saved-{i}"), format!("host-{i}"));
        store
            .apply(i as u64 + 1, &Command::UpsertNode { node })
            .unwrap();
    }
    let mut bytes = Vec::new();
    store.snapshot_to(&mut bytes).unwrap();
    bytes
}

async fn propose(server: &schedstate_raft::Server, command: Command) -> u64 {
    server
        .raft()
        .client_write(Proposal::new(vec![Arc::new(command)]))
        .await
        .unwrap()
        .log_id
        .index
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_staged_across_a_snapshot_install_restore_on_every_server() {
    let cluster = Cluster::start(3, small_snapshots()).await;
    let leader = cluster.wait_leader(&[]).await;
    let (lagging, others) = cluster.a_follower_and_the_others(&leader);

    let file = saved_file(30);
    let pieces: Vec<&[u8]> = file.chunks(file.len() / 5 + 1).collect();
    assert!(pieces.len() >= 4);
    let restore = 77;
    let piece = |seq: usize| Command::StageSnapshotChunk {
        restore,
        seq: seq as u32,
        bytes: pieces[seq].to_vec(),
    };
    // Two pieces reach every server.
    propose(&leader, piece(0)).await;
    let at = propose(&leader, piece(1)).await;
    cluster.wait_all_applied(at).await;

    // Cut off, the follower misses enough that the leader snapshots (with the two
    // pieces staged) and purges the entries that carried them.
    cluster.router.partition(&[&[lagging.id()], &others]);
    for seq in 0..400 {
        propose_until_known(&cluster, &marker_node("fill", seq)).await;
    }
    let start = Instant::now();
    while leader.raft().metrics().borrow().purged.is_none() {
        assert!(start.elapsed() < DEADLINE, "the leader never purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.router.heal();
    cluster.converge().await;
    assert!(lagging.snapshots_installed() >= 1);

    // The rest of the pieces, and the last entry.
    for seq in 2..pieces.len() {
        propose(&leader, piece(seq)).await;
    }
    let last = leader
        .raft()
        .client_write(Proposal::new(vec![Arc::new(Command::RestoreSnapshot {
            restore,
            chunks: pieces.len() as u32,
            len: file.len() as u64,
            sha256: Sha256::digest(&file).into(),
        })]))
        .await
        .unwrap()
        .log_id
        .index;
    cluster.wait_all_applied(last).await;

    let expected = StateStore::new();
    expected
        .restore_from_at(&mut file.as_slice(), last)
        .unwrap();
    let expected = expected.snapshot().canonical_bytes().unwrap();
    for s in cluster.live() {
        let snap = s.read_stale();
        assert!(
            snap.canonical_bytes().unwrap() == expected,
            "server {} holds the restored file",
            s.id()
        );
        assert_eq!(snap.view().table_index(Table::Nodes), last);
        assert_eq!(snap.view().nodes().count(), 30);
    }

    // Every server restarted from its own snapshot and log serves the same state.
    let ids: Vec<u64> = cluster.live().iter().map(|s| s.id()).collect();
    for id in ids {
        cluster.crash(id).await;
        let back = cluster.open(id).await;
        cluster.wait_leader(&[]).await;
        back.wait_applied(last, DEADLINE).await.unwrap();
    }
    cluster.converge().await;
    for s in cluster.live() {
        let snap = s.read_stale();
        let saved = snap
            .view()
            .nodes()
            .filter(|n| n.id.starts_with("saved-"))
            .count();
        assert_eq!(saved, 30, "server {} after its restart", s.id());
        assert!(snap.view().nodes().all(|n| !n.id.starts_with("fill-")));
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_snapshot_checks_the_file_first_and_replaces_the_state_everywhere() {
    let cluster = Cluster::start(3, ServerOptions::default()).await;
    let leader = cluster.wait_leader(&[]).await;
    for seq in 0..20 {
        propose_until_known(&cluster, &marker_node("before", seq)).await;
    }
    cluster.converge().await;
    let file = saved_file(5);

    // Restore commands are not writes: the input rules refuse them.
    let e = leader
        .propose(Command::RestoreSnapshot {
            restore: 1,
            chunks: 0,
            len: 0,
            sha256: [0; 32],
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, schedstate_raft::ProposeError::Invalid { kind, .. } if kind == "ReplicatedOnly"),
        "{e:?}"
    );

    // A bad file: refused before anything is proposed.
    let mut bad = file.clone();
    let at = bad.len() - 6;
    bad[at] ^= 0x20;
    let applied = leader.last_applied();
    match leader.restore_snapshot(bad.into()).await {
        Err(RestoreError::Invalid(_)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(leader.last_applied(), applied, "nothing proposed");
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != leader.id())
        .unwrap();
    match follower.restore_snapshot(file.clone().into()).await {
        Err(RestoreError::Propose(schedstate_raft::ProposeError::NotLeader {
            leader: l, ..
        })) => {
            assert_eq!(l, Some(leader.id()));
        }
        other => panic!("{other:?}"),
    }
    for s in cluster.live() {
        let snap = s.read_stale();
        assert!(snap.view().nodes().all(|n| !n.id.starts_with("saved-")));
        assert_eq!(
            snap.view()
                .nodes()
                .filter(|n| n.id.starts_with("before-"))
                .count(),
            20
        );
    }

    let done = leader.restore_snapshot(file.clone().into()).await.unwrap();
    assert_eq!(done.pieces, 1);
    cluster.wait_all_applied(done.index).await;
    for s in cluster.live() {
        let snap = s.read_stale();
        let v = snap.view();
        assert_eq!(v.last_applied(), done.index);
        assert_eq!(v.nodes().count(), 5);
        assert!(v.nodes().all(|n| n.modify_index == done.index));
    }
    cluster.shutdown().await;
}
