//! PreVote and CheckQuorum on the router: a follower cut off (both ways, or deaf)
//! comes back without changing anyone's term; a leader cut off, mute or deaf is
//! replaced within a second, and one that hears no quorum steps down; one whose
//! followers' Raft answers late (slow disks) but who still follow it keeps leading.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use schedstate_raft::{NodeId, ServerOptions};

use crate::support::*;

/// How long a server stays cut off.
const CUT: Duration = Duration::from_secs(5);

/// The failover bound the timing aims for (`ServerOptions::default`).
const FAILOVER: Duration = Duration::from_secs(1);

fn terms(cluster: &Cluster) -> BTreeMap<NodeId, u64> {
    cluster.live().iter().map(|s| (s.id(), s.term())).collect()
}

/// A three-server cluster under a client's writes; returns it, the leader's id and
/// the followers' ids.
async fn loaded_cluster() -> (
    Arc<Cluster>,
    NodeId,
    Vec<NodeId>,
    Arc<AtomicBool>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let stop = Arc::new(AtomicBool::new(false));
    let (_acked, handles) = spawn_clients(&cluster, 2, u64::MAX, stop.clone());
    let leader = cluster.wait_leader(&[]).await.id();
    let followers = (1..=3).filter(|&id| id != leader).collect();
    (cluster, leader, followers, stop, handles)
}

async fn finish(
    cluster: Arc<Cluster>,
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<()>>,
) {
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.unwrap();
    }
    cluster.converge().await;
    cluster.shutdown().await;
}

/// Cuts `follower` off with `cut`, waits [`CUT`], heals, and checks that no term
/// moved and the leader stayed.
async fn follower_returns_quietly(cut: impl Fn(&Cluster, NodeId, &[NodeId])) {
    let (cluster, leader, followers, stop, handles) = loaded_cluster().await;
    // Let the election's aftermath settle (the first heartbeats, the blank entry).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = terms(&cluster);
    let away = followers[0];
    let others: Vec<NodeId> = (1..=3).filter(|&id| id != away).collect();
    cut(&cluster, away, &others);
    tokio::time::sleep(CUT).await;
    assert_eq!(
        terms(&cluster),
        before,
        "a term moved while server {away} was cut off"
    );
    cluster.router.heal();
    // Long enough for any election the return would cause to have happened.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        terms(&cluster),
        before,
        "a term moved when server {away} came back"
    );
    assert_eq!(cluster.wait_leader(&[]).await.id(), leader);
    finish(cluster, stop, handles).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_follower_comes_back_without_a_term_change() {
    follower_returns_quietly(|c, away, others| c.router.partition(&[&[away], others])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deaf_follower_comes_back_without_a_term_change() {
    follower_returns_quietly(|c, away, others| {
        for &o in others {
            c.router.cut_one_way(o, away);
        }
    })
    .await;
}

/// Cuts the leader off with `cut` and returns how long until the others agree on a
/// new leader; checks that the old one no longer takes itself for the leader.
async fn failover(cut: impl Fn(&Cluster, NodeId, &[NodeId])) -> Duration {
    let (cluster, leader, followers, stop, handles) = loaded_cluster().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    cut(&cluster, leader, &followers);
    let elected = loop {
        let views: Vec<Option<NodeId>> = followers
            .iter()
            .map(|&f| cluster.server(f).leader())
            .collect();
        if let Some(new) = views[0]
            && new != leader
            && views.iter().all(|v| *v == Some(new))
        {
            break started.elapsed();
        }
        assert!(started.elapsed() < DEADLINE, "no new leader");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // CheckQuorum: the old leader steps down within its lease (200 ms) of its last
    // quorum, however it was cut.
    let old = cluster.server(leader);
    let t = Instant::now();
    while old.is_leader() {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the old leader never stepped down"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.router.heal();
    finish(cluster, stop, handles).await;
    elected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_is_replaced_within_a_second() {
    let took = failover(|c, leader, others| c.router.partition(&[&[leader], others])).await;
    eprintln!("isolated leader: new leader after {took:?}");
    assert!(took <= FAILOVER, "failover took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deaf_leader_steps_down_and_is_replaced_within_a_second() {
    let took = failover(|c, leader, others| {
        for &o in others {
            c.router.cut_one_way(o, leader);
        }
    })
    .await;
    eprintln!("deaf leader: new leader after {took:?}");
    assert!(took <= FAILOVER, "failover took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mute_leader_is_replaced_within_a_second() {
    let took = failover(|c, leader, others| {
        for &o in others {
            c.router.cut_one_way(leader, o);
        }
    })
    .await;
    eprintln!("mute leader: new leader after {took:?}");
    assert!(took <= FAILOVER, "failover took {took:?}");
}

/// Followers whose Raft answers come late — as a slow disk makes them: it answers an
/// AppendEntries only once the append ahead of it is durable — but which still
/// follow the leader: the leader asks them directly (`quorum_probe.rs`) and keeps
/// leading, and no term moves. Before, it stepped down once Raft's answers were a
/// lease (200 ms) old: an election for every disk stall that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_followers_answer_raft_late_keeps_leading() {
    let (cluster, leader, _followers, stop, handles) = loaded_cluster().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = terms(&cluster);
    cluster
        .router
        .set_append_answer_delay(Duration::from_millis(400));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        terms(&cluster),
        before,
        "a term moved while answers were late"
    );
    assert!(
        cluster.server(leader).is_leader(),
        "the leader stepped down"
    );
    cluster.router.set_append_answer_delay(Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(terms(&cluster), before, "a term moved after");
    finish(cluster, stop, handles).await;
}
