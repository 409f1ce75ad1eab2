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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_new_server_is_taken_out_again_and_the_cluster_stays_writable() {
    use std::time::{Duration, Instant};
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    propose_until_known(&cluster, &marker_node("before", 0)).await;
    let leader = cluster.wait_leader(&[]).await;
    let before = leader.members();
    // Server 5 is never started: nothing answers at its address.
    let start = Instant::now();
    let e = leader
        .add_server(5, "server-5", Duration::from_millis(800))
        .await
        .unwrap_err();
    assert!(matches!(e, ClusterError::NotCaughtUp { id: 5, .. }), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(leader.members(), before, "the learner was taken out again");
    // Writable throughout and after.
    for seq in 0..20 {
        propose_until_known(&cluster, &marker_node("after", seq)).await;
    }
    cluster.converge().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_conflicting_membership_changes_change_nothing() {
    use std::time::Duration;
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let leader = cluster.wait_leader(&[]).await;
    let before = leader.members();
    let short = Duration::from_millis(200);
    for (id, address) in [(0, "server-0"), (4, ""), (4, "server 4"), (4, "a\nb")] {
        let e = leader.add_server(id, address, short).await.unwrap_err();
        assert!(
            matches!(e, ClusterError::Invalid(_)),
            "{id} {address:?}: {e}"
        );
    }
    let other = (1..=3).find(|i| *i != leader.id()).unwrap();
    let e = leader
        .add_server(other, "elsewhere:1", short)
        .await
        .unwrap_err();
    assert!(matches!(e, ClusterError::Conflict(_)), "{e}");
    // The same server at the same address: nothing to do.
    leader
        .add_server(other, &format!("server-{other}"), short)
        .await
        .unwrap();
    let e = leader.remove_server(42).await.unwrap_err();
    assert!(matches!(e, ClusterError::NotAMember(42)), "{e}");
    assert_eq!(leader.members(), before);
    // Nothing to recover in a uniform configuration.
    assert!(!leader.recover_membership().await.unwrap());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_voter_cannot_be_removed() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let leader = cluster.wait_leader(&[]).await;
    for id in (1..=3).filter(|id| *id != leader.id()) {
        leader.remove_server(id).await.unwrap();
    }
    let e = leader.remove_server(leader.id()).await.unwrap_err();
    assert!(matches!(e, ClusterError::Conflict(_)), "{e}");
    assert!(leader.members().1.contains(&leader.id()));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joint_configuration_left_by_a_lost_leader_is_recovered() {
    use std::time::{Duration, Instant};
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    propose_until_known(&cluster, &marker_node("before", 0)).await;
    let leader = cluster.wait_leader(&[]).await;
    let _four = cluster.open(4).await;
    leader.add_learner(4, "server-4").await.unwrap();
    let old = leader.id();
    let mut followers = (1..=3).filter(|id| *id != old);
    let (two, three) = (followers.next().unwrap(), followers.next().unwrap());
    // The leader keeps a quorum of the old voters (itself and `two`) but cannot reach
    // a quorum of the new ones: the joint entry is appended on both, never committed.
    cluster.router.partition(&[&[old, two], &[three, 4]]);
    let promoting = {
        let leader = leader.clone();
        tokio::spawn(async move { leader.promote([4]).await })
    };
    let joint = |s: &schedstate_raft::Server| {
        s.raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_joint_config()
            .len()
            > 1
    };
    let start = Instant::now();
    let two_server = cluster.server(two);
    while !joint(&two_server) {
        assert!(
            start.elapsed() < DEADLINE,
            "the joint entry never reached {two}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The leader is lost; `two`, holding the joint entry, is elected by 3 and 4.
    cluster.crash(old).await;
    promoting.abort();
    cluster.router.heal();
    let new = cluster.wait_leader(&[old]).await;
    // openraft 0.9 does not finish a predecessor's change: the new leader stays joint,
    // and every other membership change is refused until the operator recovers.
    assert!(joint(&new), "the new leader finished the change itself");
    assert!(new.recover_membership().await.unwrap(), "it was joint");
    assert!(!joint(&new), "still joint");
    let voters = new.members().1;
    assert!(
        voters.contains(&4),
        "the newer half is the membership: {voters:?}"
    );
    assert!(!new.recover_membership().await.unwrap());
    // The cluster takes writes without the lost leader: 3 of the 4 voters are up.
    for seq in 0..10 {
        propose_until_known(&cluster, &marker_node("after", seq)).await;
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_removes_itself_and_the_others_go_on() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    propose_until_known(&cluster, &marker_node("before", 0)).await;
    let old = cluster.wait_leader(&[]).await;
    // One change, and none after it: a second one reached a leader that had stepped
    // down and stopped its Raft (openraft's "only leader" assertion).
    old.remove_server(old.id()).await.unwrap();
    assert!(!old.members().0.contains_key(&old.id()));
    // The other two elect a leader among themselves; the one that replicates to the
    // other resends the membership entries the removal wrote, which it must take.
    let new = cluster.wait_leader(&[old.id()]).await;
    assert_ne!(new.id(), old.id());
    cluster.crash(old.id()).await;
    for seq in 0..10 {
        propose_until_known(&cluster, &marker_node("after", seq)).await;
    }
    cluster.converge().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_elected_after_a_membership_change_replicates_to_every_follower() {
    use std::time::Duration;
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    propose_until_known(&cluster, &marker_node("before", 0)).await;
    let leader = cluster.wait_leader(&[]).await;
    let _four = cluster.open(4).await;
    leader
        .add_server(4, "server-4", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(leader.members().1.contains(&4));
    // A new leader starts replicating from the middle of its log, across the
    // membership entries of the change: the followers must take them again.
    cluster.crash(leader.id()).await;
    let new = cluster.wait_leader(&[leader.id()]).await;
    for seq in 0..10 {
        propose_until_known(&cluster, &marker_node("after", seq)).await;
    }
    cluster.wait_all_applied(new.last_applied()).await;
    cluster.converge().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_server_votes_only_once_it_caught_up() {
    use std::time::{Duration, Instant};
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    for seq in 0..20 {
        propose_until_known(&cluster, &marker_node("before", seq)).await;
    }
    let leader = cluster.wait_leader(&[]).await;
    let four = cluster.open(4).await;
    // Server 4 is cut off: it joins as a learner and cannot catch up.
    cluster.router.partition(&[&[1, 2, 3], &[4]]);
    let adding = {
        let leader = leader.clone();
        tokio::spawn(async move { leader.add_server(4, "server-4", DEADLINE).await })
    };
    let start = Instant::now();
    while !leader.members().0.contains_key(&4) {
        assert!(start.elapsed() < DEADLINE, "4 never became a learner");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Meanwhile the cluster takes writes (a learner is in no quorum), and 4 stays a
    // learner however long it lags.
    for seq in 0..20 {
        propose_until_known(&cluster, &marker_node("while", seq)).await;
        assert!(!leader.members().1.contains(&4), "promoted while cut off");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!leader.members().1.contains(&4), "promoted while cut off");
    assert!(!adding.is_finished());
    cluster.router.heal();
    adding.await.unwrap().unwrap();
    assert!(leader.members().1.contains(&4));
    // Promoted once it held the log: it has every write made while it was cut off.
    four.wait_applied(leader.last_applied(), DEADLINE)
        .await
        .unwrap();
    assert!(four.read_stale().view().node("while-19").is_some());
    cluster.shutdown().await;
}
