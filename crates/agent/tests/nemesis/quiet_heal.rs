//! PreVote and CheckQuorum seen through the proxy (issue 50): a follower cut off for
//! 5 s — isolated, or deaf (nobody's connections reach it; its own still go out) —
//! comes back with no term changed on any server; a leader isolated or mute (its own
//! connections to the others blackholed, theirs to it working) is replaced within
//! about a second, under the clients' load, and the history stays linearizable.
//!
//! The proxy faults connections by who opened them (`proxy.rs`), and an answer
//! travels on its request's connection: "deaf" and "mute" here are one-way in who
//! can start an exchange, not in single packets.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::proxy::Fault;
use crate::run::Run;

/// How long a follower stays cut off.
const CUT: Duration = Duration::from_secs(5);

/// The failover bound the timing aims for (`ServerOptions::default`), with room for
/// a test machine whose two cores run every agent and client of the run.
const FAILOVER: Duration = Duration::from_millis(1200);

fn terms(run: &Run) -> BTreeMap<usize, Option<u64>> {
    run.members
        .iter()
        .map(|&i| (i, run.cluster.term_seen_by(i)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_for_five_seconds_comes_back_without_a_term_change() {
    let run = Run::start("quiet-heal", 3, 3, 8, 3).await;
    for kind in ["isolated", "deaf"] {
        // The election's aftermath settled: every server knows the leader's term.
        run.cluster.wait_leader(&run.members).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let leader = run.cluster.wait_leader(&run.members).await;
        let follower = run
            .members
            .iter()
            .copied()
            .find(|&i| i != leader)
            .expect("a follower");
        let others: Vec<usize> = run
            .members
            .iter()
            .copied()
            .filter(|&i| i != follower)
            .collect();
        let before = terms(&run);
        match kind {
            "isolated" => run.cluster.proxy.between(&[follower], &others, Fault::Drop),
            _ => {
                for &o in &others {
                    run.cluster.proxy.set(o, follower, Fault::Drop);
                }
            }
        }
        tokio::time::sleep(CUT).await;
        let during = terms(&run);
        run.cluster.proxy.heal();
        // Long enough for any election the return would cause to have happened.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = terms(&run);
        eprintln!(
            "nemesis quiet-heal: follower {} {kind} for {CUT:?}: terms {before:?}, at the heal {during:?}, 1 s later {after:?}",
            follower + 1
        );
        assert_eq!(during, before, "a term moved while the follower was {kind}");
        assert_eq!(
            after, before,
            "a term moved when the {kind} follower came back"
        );
        assert_eq!(run.cluster.wait_leader(&run.members).await, leader);
    }
    run.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_or_mute_is_replaced_within_a_second() {
    let run = Run::start("failover", 3, 3, 8, 3).await;
    let mut took = Vec::new();
    for kind in ["isolated", "mute", "isolated", "mute"] {
        let old = run.cluster.wait_leader(&run.members).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let others: Vec<usize> = run.members.iter().copied().filter(|&i| i != old).collect();
        let cut = Instant::now();
        match kind {
            "isolated" => run.cluster.proxy.between(&[old], &others, Fault::Drop),
            _ => {
                for &o in &others {
                    run.cluster.proxy.set(old, o, Fault::Drop);
                }
            }
        }
        let new = run.cluster.wait_leader_other_than(&others, old).await;
        let elapsed = cut.elapsed();
        eprintln!(
            "nemesis failover: leader {} {kind}: server {} leads after {} ms",
            old + 1,
            new + 1,
            elapsed.as_millis()
        );
        took.push((kind, elapsed));
        // CheckQuorum: the old leader, which hears no quorum, stops leading.
        let t = Instant::now();
        while run.cluster.leader_seen_by(old) == Some(old) {
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "the old leader {} ({kind}) still leads",
                old + 1
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        run.cluster.proxy.heal();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (kind, elapsed) in took {
        assert!(
            elapsed <= FAILOVER,
            "failover after the leader was {kind} took {elapsed:?}"
        );
    }
    run.finish().await;
}
