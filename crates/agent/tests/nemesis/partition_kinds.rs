//! PreVote and CheckQuorum through the eight partitions of issue 50, seen through the
//! proxy: each cut lasts 5 s under the clients' load, then heals; the history of the
//! whole run stays linearizable with nothing acknowledged lost (`Run::finish`).
//!
//! | kind | expected |
//! |---|---|
//! | leader isolated, leader mute | a new leader within about a second; the old one steps down (CheckQuorum); no election at the heal |
//! | leader deaf, bridge through a follower, bridge through the leader, follower isolated, follower deaf, follower mute | no term moves on any server, during the cut or at the heal (PreVote); the leader stays |
//!
//! The proxy faults connections by who opened them (`proxy.rs`), and an answer
//! travels on its request's connection: "deaf" and "mute" are one-way in who can
//! start an exchange, not in single packets. A deaf leader still sends its
//! heartbeats and hears their answers, so it keeps leading (with packets dropped by
//! address it would step down and be replaced, as a mute one is here).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::proxy::{Fault, Proxy};
use crate::run::Run;

/// How long each cut lasts.
const CUT: Duration = Duration::from_secs(5);

/// The failover bound the timing aims for (1 s, `ServerOptions::default`), with room
/// for a test machine whose two cores run every agent and client of the run.
const FAILOVER: Duration = Duration::from_millis(1200);

/// The partitions, by the role of who is cut off from whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    LeaderIsolated,
    LeaderMute,
    LeaderDeaf,
    /// The leader and one follower cannot reach each other; both reach the other
    /// follower.
    BridgeThroughFollower,
    /// The two followers cannot reach each other; both reach the leader.
    BridgeThroughLeader,
    FollowerIsolated,
    FollowerDeaf,
    FollowerMute,
}

impl Kind {
    const ALL: [Kind; 8] = [
        Kind::LeaderIsolated,
        Kind::LeaderMute,
        Kind::LeaderDeaf,
        Kind::BridgeThroughFollower,
        Kind::BridgeThroughLeader,
        Kind::FollowerIsolated,
        Kind::FollowerDeaf,
        Kind::FollowerMute,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::LeaderIsolated => "leader isolated",
            Kind::LeaderMute => "leader mute",
            Kind::LeaderDeaf => "leader deaf",
            Kind::BridgeThroughFollower => "bridge through a follower",
            Kind::BridgeThroughLeader => "bridge through the leader",
            Kind::FollowerIsolated => "follower isolated",
            Kind::FollowerDeaf => "follower deaf",
            Kind::FollowerMute => "follower mute",
        }
    }

    /// Whether the leader loses its quorum (and must be replaced).
    fn replaces_the_leader(self) -> bool {
        matches!(self, Kind::LeaderIsolated | Kind::LeaderMute)
    }

    /// Cuts the links: `leader`, and followers `f1` (the one cut off when one is)
    /// and `f2`.
    fn apply(self, proxy: &Proxy, leader: usize, f1: usize, f2: usize) {
        // Connections `from` opens to each of `to` go nowhere.
        let drop_from = |from: usize, to: &[usize]| {
            for &t in to {
                proxy.set(from, t, Fault::Drop);
            }
        };
        let drop_to = |to: usize, from: &[usize]| {
            for &f in from {
                proxy.set(f, to, Fault::Drop);
            }
        };
        match self {
            Kind::LeaderIsolated => proxy.between(&[leader], &[f1, f2], Fault::Drop),
            Kind::LeaderMute => drop_from(leader, &[f1, f2]),
            Kind::LeaderDeaf => drop_to(leader, &[f1, f2]),
            Kind::BridgeThroughFollower => proxy.between(&[leader], &[f1], Fault::Drop),
            Kind::BridgeThroughLeader => proxy.between(&[f1], &[f2], Fault::Drop),
            Kind::FollowerIsolated => proxy.between(&[f1], &[leader, f2], Fault::Drop),
            Kind::FollowerDeaf => drop_to(f1, &[leader, f2]),
            Kind::FollowerMute => drop_from(f1, &[leader, f2]),
        }
    }
}

fn terms(run: &Run) -> BTreeMap<usize, u64> {
    run.members
        .iter()
        .map(|&i| (i, run.cluster.term_seen_by(i).expect("running")))
        .collect()
}

/// The most any server's term moved from `from` to `to`.
fn moved(from: &BTreeMap<usize, u64>, to: &BTreeMap<usize, u64>) -> u64 {
    to.iter()
        .map(|(i, t)| t.saturating_sub(from[i]))
        .max()
        .unwrap_or(0)
}

/// What one cut came to.
struct Row {
    kind: Kind,
    /// The most a term moved while cut, and at the heal.
    during: u64,
    at_heal: u64,
    failover: Option<Duration>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_partition_kinds_heal_without_an_election_storm() {
    let run = Run::start("partition-kinds", 3, 3, 8, 3).await;
    let mut rows = Vec::new();
    for kind in Kind::ALL {
        // The last election's aftermath settled: every server knows the leader's term.
        run.cluster.wait_leader(&run.members).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let leader = run.cluster.wait_leader(&run.members).await;
        let followers: Vec<usize> = run
            .members
            .iter()
            .copied()
            .filter(|&i| i != leader)
            .collect();
        let (f1, f2) = (followers[0], followers[1]);
        let before = terms(&run);
        let cut = Instant::now();
        kind.apply(&run.cluster.proxy, leader, f1, f2);
        let mut failover = None;
        if kind.replaces_the_leader() {
            let new = run.cluster.wait_leader_other_than(&followers, leader).await;
            failover = Some(cut.elapsed());
            // CheckQuorum: the old leader, which hears no quorum, stops leading.
            while run.cluster.leader_seen_by(leader) == Some(leader) {
                assert!(
                    cut.elapsed() < CUT,
                    "the old leader {} ({}) still leads beside {}",
                    leader + 1,
                    kind.name(),
                    new + 1
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        tokio::time::sleep(CUT.saturating_sub(cut.elapsed())).await;
        let during = terms(&run);
        run.cluster.proxy.heal();
        // Long enough for any election the heal would cause to have happened.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = terms(&run);
        eprintln!(
            "nemesis partition-kinds: {} (leader {}, cut-off follower {}): terms {before:?}, at the heal {during:?}, 1 s later {after:?}, failover {failover:?}",
            kind.name(),
            leader + 1,
            f1 + 1
        );
        // At the heal, no server goes past the highest term of the cut: whoever was
        // behind catches up with it, and nobody starts an election.
        let highest = during.values().copied().max().unwrap_or(0);
        let at_heal = after
            .values()
            .map(|t| t.saturating_sub(highest))
            .max()
            .unwrap_or(0);
        rows.push(Row {
            kind,
            during: moved(&before, &during),
            at_heal,
            failover,
        });
        assert_eq!(at_heal, 0, "{}: a term moved at the heal", kind.name());
        if let Some(took) = failover {
            assert!(took <= FAILOVER, "{}: failover took {took:?}", kind.name());
        } else {
            assert_eq!(
                during,
                before,
                "{}: a term moved during the cut",
                kind.name()
            );
            assert_eq!(
                run.cluster.wait_leader(&run.members).await,
                leader,
                "{}: the leader changed",
                kind.name()
            );
        }
    }
    eprintln!("| partition (5 s) | most a term moved during | at the heal | failover |");
    eprintln!("|---|---:|---:|---:|");
    for r in &rows {
        eprintln!(
            "| {} | {} | {} | {} |",
            r.kind.name(),
            r.during,
            r.at_heal,
            r.failover.map_or_else(
                || "none needed".to_string(),
                |d| format!("{} ms", d.as_millis())
            )
        );
    }
    run.finish().await;
}
