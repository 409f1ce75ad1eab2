//! Consistent reads served by a follower after a read index from the leader
//! (ReadIndex, issue 48): read-your-writes through another server than the one
//! that acknowledged the write, over slow links; and a follower cut off from the
//! leader answers 503 promptly, never the value it has.

use std::time::{Duration, Instant};

use crate::cluster::{Cluster, SETTLE};
use crate::proxy::Fault;
use crate::workload::{self, Answer, is_unavailable, read_once, write_once};

const REGISTER: usize = 0;

/// Writes `value` to the register through agent `i`; panics unless acknowledged.
async fn write(c: &Cluster, i: usize, value: u64) {
    let key = schedstate_agent::new_write_key();
    let answer = write_once(
        &workload::http(),
        &c.url(i),
        REGISTER,
        value,
        &key,
        Duration::from_secs(20),
    )
    .await;
    assert!(
        matches!(answer, Answer::Ok(..)),
        "write v{value}: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_acknowledged_by_the_leader_is_read_through_either_follower() {
    let c = Cluster::start(3, 3).await;
    // Every server-to-server byte 10 ms late: the followers apply well after the
    // leader acknowledged.
    c.proxy.between(
        &[0, 1, 2],
        &[0, 1, 2],
        Fault::Delay(Duration::from_millis(10)),
    );
    let l = c.wait_leader(&[0, 1, 2]).await;
    let http = workload::http();
    for value in 1..=20u64 {
        write(&c, l, value).await;
        let f = (l + 1 + value as usize % 2) % 3;
        let read = read_once(&http, &c.url(f), REGISTER, Duration::from_secs(20)).await;
        assert_eq!(
            read.as_ref().ok(),
            Some(&Some(value)),
            "read through server {} after v{value}: {read:?}",
            f + 1
        );
    }
    // Served by the followers after a read index, not proxied to the leader.
    for f in (0..3).filter(|&i| i != l) {
        let server = c.agents[f].as_ref().expect("running").server();
        assert!(server.read_index_rounds() > 0, "server {}", f + 1);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_the_leader_answers_503_promptly_not_its_stale_value() {
    let c = Cluster::start(3, 3).await;
    let l = c.wait_leader(&[0, 1, 2]).await;
    let f = (l + 1) % 3;
    let http = workload::http();
    write(&c, l, 1).await;
    let read = read_once(&http, &c.url(f), REGISTER, Duration::from_secs(20)).await;
    assert_eq!(read.ok(), Some(Some(1)));

    // The follower alone: its connections to both others are closed.
    let rest: Vec<usize> = (0..3).filter(|&i| i != f).collect();
    c.proxy.between(&[f], &rest, Fault::Cut);
    // The majority goes on: the register moves on without the follower.
    write(&c, l, 2).await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let asked = Instant::now();
        let read = read_once(&http, &c.url(f), REGISTER, Duration::from_secs(20)).await;
        let took = asked.elapsed();
        assert!(
            matches!(&read, Err(Answer::Error(status, kind, _)) if is_unavailable(*status, kind)),
            "a cut-off follower answered {read:?}"
        );
        // The leader refused at once (connection closed), or no leader after a
        // short wait for an election: never a blocking read's wait.
        assert!(took < Duration::from_secs(6), "answered after {took:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Healed, it reads the latest value.
    c.proxy.heal();
    let start = Instant::now();
    loop {
        match read_once(&http, &c.url(f), REGISTER, Duration::from_secs(20)).await {
            Ok(Some(2)) => break,
            Ok(other) => panic!("after the heal the follower read {other:?}, not v2"),
            Err(e) => assert!(start.elapsed() < SETTLE, "after the heal: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.shutdown().await;
}
