//! Three in-process servers on a router: many clients, a leader crash, a follower
//! that catches up by snapshot, partitions, and seeded random schedules — every
//! acknowledged write applied exactly once on every server, states byte-identical.

mod batching;
mod exactly_once;
mod forged;
mod golden;
mod golden_v3;
mod inspect;
mod log_files;
mod membership;
mod pre_vote;
mod read_index;
mod restore;
mod snapshot_cadence;
mod support;
mod tcp;
mod transfer;
mod upgrade;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use openraft::SnapshotPolicy;
use schedstate::QueryOptions;
use schedstate::state::Command;
use schedstate_raft::{ProposeError, ServerOptions};
use support::*;

fn small_snapshots() -> ServerOptions {
    let mut o = ServerOptions::default();
    o.raft.snapshot_policy = SnapshotPolicy::LogsSinceLast(300);
    o.raft.max_in_snapshot_log_to_keep = 0;
    o.raft.purge_batch_size = 1;
    // A small cache: catching up reads entries back from the segments.
    o.log.cache_bytes = 16 << 10;
    // Small chunks: a snapshot crosses in many, each checked by the receiver.
    o.raft.snapshot_max_chunk_size = 4 << 10;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_commands_from_sixteen_clients_reach_every_server_exactly_once() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, handles) = spawn_clients(&cluster, 16, 625, stop);
    for h in handles {
        h.await.unwrap();
    }
    let acked = acked.lock().clone();
    assert_eq!(acked.len(), 10_000);
    cluster.converge().await;
    for s in cluster.live() {
        assert_applied_once(&s, &acked);
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_crash_mid_stream_loses_nothing_and_the_restarted_server_rejoins() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, handles) = spawn_clients(&cluster, 4, u64::MAX, stop.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;

    let old = cluster.wait_leader(&[]).await.id();
    let before = acked.lock().len();
    let killed_at = Instant::now();
    cluster.crash(old).await;
    let new = cluster.wait_leader(&[old]).await;
    let elected = killed_at.elapsed();
    // Writes resume on the new leader.
    let resumed = Instant::now();
    while acked.lock().len() < before + 50 {
        assert!(resumed.elapsed() < DEADLINE, "writes did not resume");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_ne!(new.id(), old);
    assert!(
        elected < Duration::from_secs(10),
        "election took {elected:?}"
    );

    // The crashed server restarts from its directory and catches up.
    let back = cluster.open(old).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.unwrap();
    }
    let acked = acked.lock().clone();
    cluster.converge().await;
    assert!(back.last_applied() > 0);
    for s in cluster.live() {
        assert_applied_once(&s, &acked);
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_a_purge_catches_up_by_snapshot_and_its_blocking_query_wakes() {
    let cluster = Arc::new(Cluster::start(3, small_snapshots()).await);
    let leader = cluster.wait_leader(&[]).await;
    let (lagging, others) = cluster.a_follower_and_the_others(&leader);
    // A blocking query on the follower, armed before it falls behind.
    let seen = lagging.read_stale().view().last_applied();
    let reader = lagging.reader().clone();
    let query = std::thread::spawn(move || {
        reader.blocking_nodes(QueryOptions::new(seen, Duration::from_secs(120)))
    });

    cluster.router.partition(&[&[lagging.id()], &others]);
    for seq in 0..1_000 {
        propose_until_known(&cluster, &marker_node("lag", seq)).await;
    }
    // The leader snapshotted and purged what the follower lacks.
    let start = Instant::now();
    while leader.raft().metrics().borrow().purged.is_none() {
        assert!(start.elapsed() < DEADLINE, "the leader never purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.router.heal();
    cluster.converge().await;
    assert!(
        lagging.snapshots_installed() >= 1,
        "the follower caught up without a snapshot"
    );
    let woke = query.join().unwrap();
    assert!(!woke.timed_out, "the blocking query was not woken");
    // Re-run after the wake, the query sees the new state.
    let now = lagging.read_stale();
    assert!(now.view().node("lag-999").is_some());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minority_side_of_a_partition_cannot_commit_and_everyone_converges_after_healing() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    propose_until_known(&cluster, &marker_node("before", 0)).await;
    let old = cluster.wait_leader(&[]).await;
    let others: Vec<u64> = cluster
        .live()
        .iter()
        .map(|s| s.id())
        .filter(|id| *id != old.id())
        .collect();
    cluster.router.partition(&[&[old.id()], &others]);

    // The old leader, alone, cannot commit.
    let lonely = marker_node("minority", 0);
    let attempt = tokio::time::timeout(
        Duration::from_secs(3),
        old.propose(Command::UpsertNodes {
            nodes: vec![lonely.clone()],
        }),
    )
    .await;
    assert!(
        !matches!(attempt, Ok(Ok(_))),
        "the minority committed: {attempt:?}"
    );
    // The majority elects a leader and commits.
    let new = cluster.wait_leader(&[old.id()]).await;
    let majority = marker_node("majority", 0);
    new.propose(Command::UpsertNodes {
        nodes: vec![majority.clone()],
    })
    .await
    .unwrap();
    assert!(old.read_stale().view().node(&majority.id).is_none());

    cluster.router.heal();
    cluster.converge().await;
    for s in cluster.live() {
        let snap = s.read_stale();
        assert!(snap.view().node(&majority.id).is_some());
        assert!(
            snap.view().node(&lonely.id).is_none(),
            "an entry the minority never committed was applied"
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_command_commits_as_a_no_op_everywhere_and_the_proposer_gets_the_typed_error() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let leader = cluster.wait_leader(&[]).await;
    let before = leader.read_stale().canonical_bytes().unwrap();
    let err = leader
        .propose(Command::UpdateNodeStatus {
            id: "nowhere".into(),
            status: schedstate::model::NodeStatus::Down,
        })
        .await
        .unwrap_err();
    let ProposeError::Refused { index, error } = err else {
        panic!("expected a refusal, got {err:?}")
    };
    assert_eq!(error.kind(), "NodeNotFound");
    cluster.wait_all_applied(index).await;
    for s in cluster.live() {
        assert!(s.last_applied() >= index);
        assert_eq!(s.read_stale().canonical_bytes().unwrap(), before);
    }
    cluster.shutdown().await;
}

/// Seeded schedules of crashes, restarts, partitions and heals between writes; the
/// invariant checker on every server after each step. `SCHEDSTATE_RAFT_SEEDS` runs
/// more seeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_schedules_of_crashes_and_partitions_keep_every_acknowledged_write() {
    let seeds: u64 = std::env::var("SCHEDSTATE_RAFT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    for seed in 0..seeds {
        fastrand::seed(seed);
        let cluster = Arc::new(Cluster::start(3, small_snapshots()).await);
        let mut acked = Vec::new();
        let mut down: Option<u64> = None;
        for step in 0..12 {
            match fastrand::u8(0..4) {
                0 if down.is_none() => {
                    let id = fastrand::u64(1..=3);
                    cluster.crash(id).await;
                    down = Some(id);
                }
                1 => {
                    if let Some(id) = down.take() {
                        cluster.open(id).await;
                    }
                }
                2 => {
                    let id = fastrand::u64(1..=3);
                    let rest: Vec<u64> = (1..=3).filter(|o| *o != id).collect();
                    cluster.router.partition(&[&[id], &rest]);
                }
                _ => cluster.router.heal(),
            }
            // A majority is always reachable for the writes: at most one server is
            // down or cut off at a time.
            if down.is_some() {
                cluster.router.heal();
            }
            for i in 0..40 {
                let node = marker_node(&format!("s{seed}-{step}"), i);
                let index = propose_until_known(&cluster, &node).await;
                acked.push((node.id.to_string(), index));
            }
            for s in cluster.live() {
                s.read_stale()
                    .view()
                    .check_invariants()
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: server {}: {e}", s.id()));
            }
        }
        cluster.router.heal();
        if let Some(id) = down.take() {
            cluster.open(id).await;
        }
        cluster.converge().await;
        for s in cluster.live() {
            assert_applied_once(&s, &acked);
        }
        cluster.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_serves_one_server_at_a_time() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let one = cluster.server(1);
    let second = schedstate_raft::Server::open(
        9,
        &cluster.dir(1),
        ServerOptions::default(),
        cluster.router.network(9),
    )
    .await;
    match second {
        Err(schedstate_raft::OpenError::Persist(schedstate::persist::PersistError::Locked {
            ..
        })) => {}
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second server opened a directory in use"),
    }
    // Once the first stops, the directory opens again.
    cluster.crash(1).await;
    drop(one);
    let back = cluster.open(1).await;
    cluster.converge().await;
    assert!(back.last_applied() > 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_restarted_server_serves_its_committed_writes_without_a_leader() {
    let cluster = Cluster::start(3, ServerOptions::default()).await;
    let mut last = 0;
    for seq in 0..40 {
        last = propose_until_known(&cluster, &marker_node("lone", seq)).await;
    }
    let leader = cluster.wait_leader(&[]).await.id();
    // The leader writes its committed pointer off the write path; wait until it
    // names the last write (liveness only).
    let pointer = cluster.dir(leader).join("raft-committed");
    let start = Instant::now();
    loop {
        let named = std::fs::read(&pointer).ok().and_then(|b| {
            let index: [u8; 8] = b.get(24..32)?.try_into().ok()?;
            Some(u64::from_le_bytes(index))
        });
        if named.is_some_and(|i| i >= last) {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the pointer stayed at {named:?}, want {last}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for id in 1..=3 {
        cluster.crash(id).await;
    }
    // Only the old leader comes back: no quorum, so no leader will tell it what is
    // committed. It re-applies its own committed entries while opening.
    let back = cluster.open(leader).await;
    assert!(
        back.last_applied() >= last,
        "applied {} of {last} after a lone restart",
        back.last_applied()
    );
    let snap = back.read_stale();
    for seq in 0..40 {
        let id = format!("lone-{seq}");
        assert!(
            snap.view().node(&id).is_some(),
            "{id} missing after a lone restart"
        );
    }
    cluster.shutdown().await;
}

/// Every file of a server's directory — log segments, metadata, the committed
/// pointer, snapshots, the lock — is its owner's only, and a directory left readable
/// is made owner-only when the server opens it again, and reported.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let cluster = Arc::new(Cluster::start(3, small_snapshots()).await);
    for seq in 0..400 {
        propose_until_known(&cluster, &marker_node("modes", seq)).await;
    }
    cluster.converge().await;
    let dir = cluster.dir(1);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.ends_with(".rsnap")), "{names:?}");
    assert!(names.iter().any(|n| n.contains("committed")), "{names:?}");
    assert_eq!(mode(&dir), 0o700);
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    cluster.crash(1).await;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&files[0], std::fs::Permissions::from_mode(0o644)).unwrap();
    let back = cluster.open(1).await;
    let fixed = &back.open_report().permissions_fixed;
    assert!(
        fixed.contains(&dir) && fixed.contains(&files[0]),
        "{fixed:?}"
    );
    assert_eq!(mode(&dir), 0o700);
    cluster.converge().await;
    cluster.shutdown().await;
}
