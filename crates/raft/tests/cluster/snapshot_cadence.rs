//! Snapshots counted in commands: under many clients one entry carries many commands,
//! and a restarted server re-applies every command after its newest snapshot.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use openraft::SnapshotPolicy;
use schedstate_raft::ServerOptions;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_follows_so_many_commands_whatever_the_entries_carry() {
    let mut options = ServerOptions::default();
    // Entries alone would never call for one here.
    options.raft.snapshot_policy = SnapshotPolicy::LogsSinceLast(1_000_000);
    options.snapshot_after_commands = 300;
    let cluster = Arc::new(Cluster::start(3, options).await);
    let (acked, handles) = spawn_clients(&cluster, 16, 50, Arc::new(AtomicBool::new(false)));
    for h in handles {
        h.await.unwrap();
    }
    let acked = acked.lock().clone();
    assert_eq!(acked.len(), 800);
    cluster.converge().await;
    let last = cluster.wait_leader(&[]).await.last_applied();
    for s in cluster.live() {
        let built = s
            .last_snapshot_built()
            .unwrap_or_else(|| panic!("server {} built no snapshot", s.id()));
        // At least 300 commands of the 800 (plus the cluster's own entries) before it.
        assert!(
            built.index > 0 && built.index <= last,
            "server {}: snapshot at {} of {last}",
            s.id(),
            built.index
        );
    }

    // A restarted server resumes from its snapshot and the commands after it, and
    // holds every acknowledged write once.
    let id = cluster.live()[0].id();
    cluster.crash(id).await;
    let back = cluster.open(id).await;
    cluster.wait_all_applied(last).await;
    assert_applied_once(&back, &acked);
    cluster.shutdown().await;
}
