//! Consistent reads on a follower that cannot reach its leader: answered 503 once
//! the follower stops taking it for the leader, or once the leader's read index is
//! overdue — never held for a blocking read's whole wait (found by the nemesis when
//! such reads were proxied: reads proxied to a blackholed leader were held for
//! minutes). And a membership change, still proxied to the leader whole, is given
//! the wait it asked for.

use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::proxy::Fault;
use crate::workload::{self, Answer, read_once};

/// A consistent read through `follower`, in the background; its answer and how long
/// it took.
fn read_through(c: &Cluster, follower: usize) -> tokio::task::JoinHandle<(Answer, Duration)> {
    let url = c.url(follower);
    tokio::spawn(async move {
        let start = Instant::now();
        let answer = match read_once(&workload::http(), &url, 0, Duration::from_secs(60)).await {
            Ok(v) => Answer::Ok(serde_json::json!(v), false),
            Err(a) => a,
        };
        (answer, start.elapsed())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waiting_on_a_leader_that_is_cut_off_ends_when_the_follower_sees_it_go() {
    let c = Cluster::start(3, 3).await;
    let l = c.wait_leader(&[0, 1, 2]).await;
    let f = (l + 1) % 3;
    // The follower cannot reach the leader but still hears it: its read waits on a
    // ReadIndex RPC that stalls.
    c.proxy.set(f, l, Fault::Drop);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.leader_seen_by(f), Some(l));
    let read = read_through(&c, f);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !read.is_finished(),
        "the read should be waiting on the leader"
    );
    // Now the leader's heartbeats stop too: the follower's election timer fires.
    let cut = Instant::now();
    c.proxy.set(l, f, Fault::Drop);
    let (answer, _) = read.await.unwrap();
    let after_cut = cut.elapsed();
    assert!(
        matches!(&answer, Answer::Error(503, kind, m) if kind == "Unavailable" && m.contains("stopped leading")),
        "{answer:?}"
    );
    // An election timeout and the leader's lease, below the 5 s read-index wait.
    assert!(
        after_cut < Duration::from_secs(3),
        "answered {after_cut:?} after the cut"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_a_follower_whose_leader_never_answers_ends_at_the_read_index_wait() {
    let c = Cluster::start(3, 3).await;
    let l = c.wait_leader(&[0, 1, 2]).await;
    let f = (l + 1) % 3;
    // One way only, for good: the follower keeps hearing the leader.
    c.proxy.set(f, l, Fault::Drop);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (answer, took) = read_through(&c, f).await.unwrap();
    assert!(
        matches!(&answer, Answer::Error(503, kind, m) if kind == "Unavailable" && m.contains("no read index")),
        "{answer:?}"
    );
    // The leader's 5 s to answer a read index (one round, or the end of one under
    // way and one more): not the minutes a blocking read may be given.
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(12),
        "{took:?}"
    );
    assert_eq!(
        c.leader_seen_by(f),
        Some(l),
        "the follower still takes it for the leader"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_proxied_by_a_follower_is_given_the_wait_it_asked_for() {
    // A server nobody can reach: the leader's learner never catches up, and the change
    // waits the 11 s it asked for — beyond a read's 10 s — before it is refused.
    let mut c = Cluster::start(4, 3).await;
    c.start_agent(3, 4).await;
    for i in 0..3 {
        c.proxy.set(i, 3, Fault::Drop);
    }
    let l = c.wait_leader(&[0, 1, 2]).await;
    let f = (l + 1) % 3;
    let add = schedstate_agent::api::PeerChange::Add {
        id: 4,
        address: c.public[3].to_string(),
        wait: Some("11s".into()),
    };
    let start = Instant::now();
    let e = schedstate_agent::Client::new(&c.url(f), None)
        .unwrap()
        .change_peer(&add)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), Some("NotCaughtUp"), "{e}");
    assert!(
        start.elapsed() >= Duration::from_secs(11),
        "{:?}",
        start.elapsed()
    );
    c.shutdown().await;
}
