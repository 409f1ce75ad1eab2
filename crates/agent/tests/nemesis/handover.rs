//! Leadership transfer over HTTP under the clients' load (issue 50, part 2): asked
//! through a follower (`POST /v1/operator/raft/transfer-leader`, proxied to the
//! leader) and at a planned stop (`Agent::hand_over`, what SIGTERM runs), the leader
//! hands over to another voter within a fraction of a second, and the history stays
//! linearizable with every acknowledged write kept.

use std::time::{Duration, Instant};

use schedstate_agent::Client;

use crate::run::Run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leadership_is_handed_over_on_request_and_before_a_planned_stop() {
    let run = Run::start("handover", 3, 3, 8, 3).await;
    run.cluster.wait_leader(&run.members).await;
    let terms: Vec<_> = (0..3).map(|i| run.cluster.term_seen_by(i)).collect();
    eprintln!("nemesis handover: terms after the start {terms:?}");
    for round in 0..4 {
        let old = run.cluster.wait_leader(&run.members).await;
        let via = run
            .members
            .iter()
            .copied()
            .find(|&i| i != old)
            .expect("a follower");
        // Named every other round; else the most caught-up voter.
        let to = (round % 2 == 0).then_some(via as u64 + 1);
        let started = Instant::now();
        let client = Client::new(&run.cluster.url(via), None).expect("client");
        // A follower that has not heard of the leader yet answers 503 NoLeader: an
        // operator asks again.
        let mut tries = 0;
        let done = loop {
            match client.transfer_leader(to).await {
                Ok(done) => break done,
                Err(schedstate_agent::ClientError::Api { kind, .. })
                    if tries < 20 && kind == "NoLeader" =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    let seen: Vec<_> = (0..3)
                        .map(|i| (run.cluster.leader_seen_by(i), run.cluster.term_seen_by(i)))
                        .collect();
                    panic!(
                        "the transfer via {} (leader {}): {e}; leaders and terms: {seen:?}",
                        via + 1,
                        old + 1
                    )
                }
            }
        };
        eprintln!(
            "nemesis handover: {} -> {} on request in {} ms",
            old + 1,
            done.leader,
            started.elapsed().as_millis()
        );
        assert_ne!(done.leader, old as u64 + 1);
        if let Some(to) = to {
            assert_eq!(done.leader, to);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A planned stop: the leader hands over first, then stops.
    let old = run.cluster.wait_leader(&run.members).await;
    let started = Instant::now();
    run.cluster.agents[old]
        .as_ref()
        .expect("the leader runs")
        .hand_over()
        .await;
    let others: Vec<usize> = run.members.iter().copied().filter(|&i| i != old).collect();
    let new = run.cluster.wait_leader_other_than(&others, old).await;
    eprintln!(
        "nemesis handover: {} -> {} before a stop in {} ms",
        old + 1,
        new + 1,
        started.elapsed().as_millis()
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    run.finish().await;
}
