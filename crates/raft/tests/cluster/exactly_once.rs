//! Exactly-once writes: a write retried under its key is applied once — after its
//! leader died between apply and reply, with copies in flight at once, across
//! restarts and snapshot installs — and a key reused for another write is refused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use schedstate::state::Command;
use schedstate_raft::{Committed, ProposeError, ServerOptions, WriteKey};

use super::small_snapshots;
use super::support::*;

fn key(n: u8, body: u8) -> WriteKey {
    WriteKey {
        id: [n; 32],
        fingerprint: [body; 32],
    }
}

fn upsert(name: &str, seq: u64) -> Command {
    Command::UpsertNodes {
        nodes: vec![marker_node(name, seq)],
    }
}

/// The modify index of node `id` on every live server (all must agree).
fn modify_index_everywhere(cluster: &Cluster, id: &str) -> u64 {
    let indexes: Vec<u64> = cluster
        .live()
        .iter()
        .map(|s| {
            s.read_stale()
                .view()
                .node(id)
                .unwrap_or_else(|| panic!("server {} lacks {id}", s.id()))
                .modify_index
        })
        .collect();
    assert!(indexes.windows(2).all(|w| w[0] == w[1]), "{indexes:?}");
    indexes[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_retried_after_its_leader_died_between_apply_and_reply_is_applied_once() {
    let cluster = Cluster::start(3, ServerOptions::default()).await;
    let leader = cluster.wait_leader(&[]).await;
    let k = key(1, 1);
    // The leader applies the write; its answer is lost with it.
    let first = leader
        .propose_keyed(upsert("once", 1), Some(k))
        .await
        .unwrap();
    assert!(!first.replayed);
    cluster.wait_all_applied(first.index).await;
    let old = leader.id();
    cluster.crash(old).await;
    let new_leader = cluster.wait_leader(&[old]).await;

    // The client retries under the same key: on the new leader, and through the
    // other server (forwarded with its key).
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != new_leader.id())
        .unwrap();
    for via in [&new_leader, &follower] {
        let again = via
            .propose_or_forward_keyed(upsert("once", 1), Some(k))
            .await
            .unwrap();
        assert_eq!(
            again,
            Committed {
                index: first.index,
                replayed: true
            }
        );
    }
    // Something else under the same key is refused, and applies nothing.
    let reused = follower
        .propose_or_forward_keyed(upsert("once", 2), Some(key(1, 2)))
        .await
        .unwrap_err();
    assert_eq!(reused, ProposeError::KeyReused { index: first.index });
    let later = new_leader.propose(upsert("other", 1)).await.unwrap().index;
    cluster.wait_all_applied(later).await;
    assert_eq!(modify_index_everywhere(&cluster, "once-1"), first.index);

    // The crashed leader comes back: it replays its log and knows the key too.
    let back = cluster.open(old).await;
    back.wait_applied(later, DEADLINE).await.unwrap();
    assert_eq!(back.kept_write(&k.id).unwrap().index, first.index);
    cluster.converge().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_a_write_in_flight_at_once_apply_once_and_a_refusal_replays_as_refused() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let leader = cluster.wait_leader(&[]).await;
    // Eight copies at once through every server: they share entries or follow each
    // other; either way one applies and the rest answer its outcome.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let via = cluster.live()[i % 3].clone();
        tasks.push(tokio::spawn(async move {
            via.propose_or_forward_keyed(upsert("dup", 1), Some(key(7, 7)))
                .await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap().unwrap());
    }
    let index = answers[0].index;
    assert!(answers.iter().all(|a| a.index == index), "{answers:?}");
    assert_eq!(answers.iter().filter(|a| !a.replayed).count(), 1);
    cluster.wait_all_applied(index).await;
    assert_eq!(modify_index_everywhere(&cluster, "dup-1"), index);

    // A refused write keeps its refusal: the retry is refused alike, at the same index.
    let refused = Command::DeleteNodes {
        ids: vec!["no-such-node".into()],
    };
    let first = leader
        .propose_keyed(refused.clone(), Some(key(8, 8)))
        .await
        .unwrap_err();
    let again = leader
        .propose_keyed(refused, Some(key(8, 8)))
        .await
        .unwrap_err();
    let (
        ProposeError::Refused { index: i1, error },
        ProposeError::RefusedRemotely {
            index: i2, kind, ..
        },
    ) = (&first, &again)
    else {
        panic!("{first:?} then {again:?}");
    };
    assert_eq!((i1, error.kind()), (i2, kind.as_str()));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_keys_cross_snapshot_installs_and_restarts() {
    let cluster = Arc::new(Cluster::start(3, small_snapshots()).await);
    let leader = cluster.wait_leader(&[]).await;
    let (lagging, others) = cluster.a_follower_and_the_others(&leader);
    cluster.router.partition(&[&[lagging.id()], &others]);
    let k = key(3, 3);
    let keyed = leader
        .propose_keyed(upsert("kept", 1), Some(k))
        .await
        .unwrap();
    // Enough writes after it that the leader snapshots (with the key) and purges.
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
    // The follower learned the key from the snapshot: a retry through it replays.
    assert_eq!(lagging.kept_write(&k.id).unwrap().index, keyed.index);
    let again = lagging
        .propose_or_forward_keyed(upsert("kept", 1), Some(k))
        .await
        .unwrap();
    assert_eq!(again.index, keyed.index);
    assert!(again.replayed);

    // Every server restarted from its own snapshot and log still knows it.
    let ids: Vec<u64> = cluster.live().iter().map(|s| s.id()).collect();
    for id in ids {
        cluster.crash(id).await;
        let back = cluster.open(id).await;
        cluster.wait_leader(&[]).await;
        back.wait_applied(keyed.index, DEADLINE).await.unwrap();
        assert_eq!(
            back.kept_write(&k.id).map(|kept| kept.index),
            Some(keyed.index),
            "server {id} forgot the key after a restart"
        );
    }
    assert_eq!(modify_index_everywhere(&cluster, "kept-1"), keyed.index);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_write_forwarded_to_a_cut_off_leader_goes_to_the_new_one_and_applies_once() {
    let cluster = Cluster::start(3, ServerOptions::default()).await;
    let leader = cluster.wait_leader(&[]).await;
    let followers: Vec<_> = cluster
        .live()
        .into_iter()
        .filter(|s| s.id() != leader.id())
        .collect();
    let ids: Vec<u64> = followers.iter().map(|s| s.id()).collect();
    cluster.router.partition(&[&[leader.id()], &ids]);
    let via = followers[0].clone();
    // The follower still takes the old leader for the leader: the forward fails,
    // and the write goes to whoever wins the election — without a caller's retry.
    let started = Instant::now();
    let keyed = tokio::time::timeout(
        Duration::from_secs(30),
        via.propose_or_forward_keyed(upsert("moved", 1), Some(key(9, 9))),
    )
    .await
    .expect("within the deadline")
    .unwrap();
    assert!(!keyed.replayed);
    let new_leader = cluster.wait_leader(&[leader.id()]).await;
    assert_ne!(new_leader.id(), leader.id());
    assert!(started.elapsed() < Duration::from_secs(20));

    // Without a key, a write forwarded to a leader this server cannot reach is
    // answered at once: its outcome is unknown, nothing is retried behind the caller.
    // (From the follower of the new leader that is not the old one.)
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != new_leader.id() && s.id() != leader.id())
        .unwrap();
    let others: Vec<u64> = cluster
        .live()
        .iter()
        .map(|s| s.id())
        .filter(|id| *id != follower.id())
        .collect();
    cluster.router.partition(&[&[follower.id()], &others]);
    let started = Instant::now();
    let unkeyed = follower.propose_or_forward(upsert("moved", 2)).await;
    assert!(
        matches!(
            unkeyed,
            Err(ProposeError::Unavailable(_) | ProposeError::NotLeader { .. })
        ),
        "{unkeyed:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    cluster.router.heal();
    cluster.converge().await;
    assert_eq!(modify_index_everywhere(&cluster, "moved-1"), keyed.index);
    cluster.shutdown().await;
}
