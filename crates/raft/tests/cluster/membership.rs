//! Membership changes and the two kinds of reads.

use std::sync::Arc;

use schedstate::state::Command;
use schedstate_raft::{ClusterError, ServerOptions};

use crate::support::{Cluster, DEADLINE, marker_node, propose_until_known};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_is_added_promoted_and_a_voter_removed_while_writes_go_on() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    for seq in 0..50 {
        propose_until_known(&cluster, &marker_node("before", seq)).await;
    }
    let leader = cluster.wait_leader(&[]).await;

    // Server 4 starts empty, joins as a learner and catches up.
    let four = cluster.open(4).await;
    leader.add_learner(4, "server-4").await.unwrap();
    let (members, voters) = leader.members();
    assert!(members.contains_key(&4) && !voters.contains(&4));
    four.wait_applied(leader.last_applied(), DEADLINE)
        .await
        .unwrap();
    assert!(four.read_stale().view().node("before-49").is_some());

    // Promoted, it votes; then a voter other than the leader is removed.
    leader.promote([4]).await.unwrap();
    assert!(leader.members().1.contains(&4));
    let gone = (1..=3).find(|id| *id != leader.id()).unwrap();
    leader.remove([gone]).await.unwrap();
    let (members, voters) = leader.members();
    assert!(!members.contains_key(&gone) && !voters.contains(&gone));
    cluster.crash(gone).await;

    // The cluster of three (leader, the other original, 4) goes on.
    for seq in 0..50 {
        propose_until_known(&cluster, &marker_node("after", seq)).await;
    }
    cluster.converge().await;
    for s in cluster.live() {
        assert!(s.read_stale().view().node("after-49").is_some());
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_come_from_the_leader_and_stale_reads_from_anywhere() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let leader = cluster.wait_leader(&[]).await;
    let c = leader
        .propose(Command::UpsertNodes {
            nodes: vec![marker_node("read", 0)],
        })
        .await
        .unwrap();
    // The leader's linearizable read sees every write it acknowledged.
    let snap = leader.read_consistent().await.unwrap();
    assert!(snap.view().node("read-0").is_some());
    assert!(snap.view().last_applied() >= c.index);
    // A follower refuses a consistent read and names the leader ...
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != leader.id())
        .unwrap();
    follower.wait_for_leader(DEADLINE).await.unwrap();
    match follower.read_consistent().await {
        Err(ClusterError::NotLeader {
            leader: Some(l), ..
        }) => assert_eq!(l, leader.id()),
        other => panic!("expected NotLeader, got {other:?}"),
    }
    // ... and answers a stale read once it applied the write.
    follower.wait_applied(c.index, DEADLINE).await.unwrap();
    assert!(follower.read_stale().view().node("read-0").is_some());
    cluster.shutdown().await;
}
