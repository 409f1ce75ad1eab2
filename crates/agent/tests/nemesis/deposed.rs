//! A request waiting on a leader that was cut off and deposed meanwhile: once the
//! partition heals, the old leader hears of the new term — the request should be
//! answered then ("not the leader", outcome unknown), not when its own 30 s bound
//! runs out.

use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::proxy::Fault;
use crate::workload::{self, Answer, write_once};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_on_a_deposed_leader_is_answered_soon_after_the_heal() {
    let c = Cluster::start(3, 3).await;
    let l = c.wait_leader(&[0, 1, 2]).await;
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    c.proxy.between(&[l], &others, Fault::Drop);
    let url = c.url(l);
    let write = tokio::spawn(async move {
        let key = schedstate_agent::new_write_key();
        let answer = write_once(&workload::http(), &url, 0, 1, &key, Duration::from_secs(60)).await;
        (answer, Instant::now())
    });
    c.wait_leader_other_than(&others, l).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let healed = Instant::now();
    c.proxy.heal();
    let (answer, answered) = write.await.unwrap();
    let after_heal = answered.saturating_duration_since(healed);
    eprintln!("write to the deposed leader: {answer:?}, {after_heal:?} after the heal");
    assert!(
        matches!(answer, Answer::Error(503, ..) | Answer::Ok(..)),
        "{answer:?}"
    );
    assert!(
        after_heal < Duration::from_secs(5),
        "answered {after_heal:?} after the heal: {answer:?}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_waiting_on_a_deposed_leader_is_answered_soon_after_the_heal() {
    let mut c = Cluster::start(4, 3).await;
    c.start_agent(3, 4).await;
    let l = c.wait_leader(&[0, 1, 2]).await;
    let others: Vec<usize> = (0..4).filter(|&i| i != l).collect();
    // The leader cannot reach the new server, so the learner it adds (with the other
    // two's votes) never catches up: the change waits in its catch-up step.
    c.proxy.set(l, 3, Fault::Drop);
    let url = c.url(l);
    let address = c.public[3].to_string();
    let change = tokio::spawn(async move {
        let add = schedstate_agent::api::PeerChange::Add {
            id: 4,
            address,
            wait: None,
        };
        let answer = schedstate_agent::Client::new(&url, None)
            .unwrap()
            .change_peer(&add)
            .await;
        (answer, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !change.is_finished(),
        "the change should wait for the learner"
    );
    // Then the leader is cut off from everyone and deposed; then the heal.
    c.proxy.between(&[l], &others, Fault::Drop);
    c.wait_leader_other_than(&others[..2], l).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let healed = Instant::now();
    c.proxy.heal();
    let (answer, answered) = change.await.unwrap();
    let after_heal = answered.saturating_duration_since(healed);
    eprintln!("membership change on the deposed leader: {answer:?}, {after_heal:?} after the heal");
    assert!(
        after_heal < Duration::from_secs(5),
        "answered {after_heal:?} after the heal: {answer:?}"
    );
    c.shutdown().await;
}
