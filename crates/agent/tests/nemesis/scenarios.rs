//! The scenarios: each starts a cluster behind the fault proxy, runs clients for
//! [`run::seconds`] while its nemesis applies faults, heals, and checks (see
//! [`Run::finish`]).

use std::time::Duration;

use schedstate_agent::Client;
use schedstate_agent::api::PeerChange;

use crate::cluster::SETTLE;
use crate::proxy::Fault;
use crate::run::Run;

/// Clients per run and registers they share: enough overlap for reads to race
/// writes on one register, few enough for 2 cores.
const CLIENTS: usize = 8;
const REGISTERS: usize = 3;

/// How long a partition stays before the clients' requests and the probes may
/// assume the minority knows it has no leader (election timeouts are 200–400 ms).
const SETTLE_PARTITION: Duration = Duration::from_millis(1500);

/// A blackhole or a hard cut, at random: a real partition is either.
fn partition_fault(run: &mut Run) -> Fault {
    if run.rng.below(3) == 0 {
        Fault::Cut
    } else {
        Fault::Drop
    }
}

/// The leader as the majority of `members` sees it, once they agree.
async fn leader(run: &Run) -> usize {
    run.cluster.wait_leader(&run.members).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_answers_no_stale_success_and_the_rest_goes_on() {
    let mut run = Run::start("isolated-leader", 3, 3, CLIENTS, REGISTERS).await;
    let mut first = true;
    while run.time_left() {
        let old = leader(&run).await;
        let others: Vec<usize> = run.members.iter().copied().filter(|&i| i != old).collect();
        let fault = partition_fault(&mut run);
        run.cluster.proxy.between(&[old], &others, fault);
        run.partitioned(true);
        // The others elect a new leader; the old one finds no quorum.
        let new = run.cluster.wait_leader(&others).await;
        assert_ne!(new, old);
        tokio::time::sleep(SETTLE_PARTITION).await;
        if first {
            // While it is cut off, the old leader must refuse writes and consistent
            // reads within its bounds; the partition stays until it has answered.
            run.probe(&[old]);
            run.await_probes().await;
            first = false;
        }
        run.cluster.proxy.heal();
        run.partitioned(false);
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(300), Duration::from_millis(1200)),
        )
        .await;
    }
    run.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_goes_on_and_a_minority_refuses_clearly() {
    let mut run = Run::start("majority-minority", 5, 5, CLIENTS, REGISTERS).await;
    let mut first = true;
    while run.time_left() {
        // A random 2 | 3 split.
        let mut order = run.members.clone();
        for i in (1..order.len()).rev() {
            let j = run.rng.below(i + 1);
            order.swap(i, j);
        }
        let (minority, majority) = order.split_at(2);
        let fault = partition_fault(&mut run);
        run.cluster.proxy.between(minority, majority, fault);
        run.partitioned(true);
        run.cluster.wait_leader(majority).await;
        tokio::time::sleep(SETTLE_PARTITION).await;
        if first {
            run.probe(minority);
            run.await_probes().await;
            first = false;
        } else {
            tokio::time::sleep(
                run.rng
                    .between(Duration::from_millis(500), Duration::from_millis(2000)),
            )
            .await;
        }
        run.cluster.proxy.heal();
        run.partitioned(false);
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(300), Duration::from_millis(1000)),
        )
        .await;
    }
    run.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_between_two_halves_keeps_the_history_linearizable() {
    let mut run = Run::start("bridge", 5, 5, CLIENTS, REGISTERS).await;
    while run.time_left() {
        // Two halves that do not see each other and one server that sees both: each
        // half plus the bridge is a majority, so leadership may move between them.
        let mut order = run.members.clone();
        for i in (1..order.len()).rev() {
            let j = run.rng.below(i + 1);
            order.swap(i, j);
        }
        let fault = partition_fault(&mut run);
        run.cluster.proxy.between(&order[0..2], &order[3..5], fault);
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(1500), Duration::from_millis(3000)),
        )
        .await;
        run.cluster.proxy.heal();
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(200), Duration::from_millis(800)),
        )
        .await;
    }
    run.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_links_keep_the_history_linearizable() {
    let mut run = Run::start("flapping", 5, 5, CLIENTS, REGISTERS).await;
    while run.time_left() {
        // One directed link changes every 50–300 ms: cut, dropped, slowed or back up;
        // now and then everything heals at once.
        let from = run.members[run.rng.below(run.members.len())];
        let to = run.members[run.rng.below(run.members.len())];
        if from != to {
            let fault = match run.rng.below(4) {
                0 => Fault::Cut,
                1 => Fault::Drop,
                2 => Fault::Delay(
                    run.rng
                        .between(Duration::from_millis(5), Duration::from_millis(250)),
                ),
                _ => Fault::Up,
            };
            run.cluster.proxy.set(from, to, fault);
        }
        if run.rng.below(20) == 0 {
            run.cluster.proxy.heal();
        }
        tokio::time::sleep(
            run.rng
                .between(Duration::from_millis(50), Duration::from_millis(300)),
        )
        .await;
    }
    run.finish().await;
}

/// Sends `change` to the leader most members know of (a member cut off from the
/// others would only answer "no leader"), again until it goes through, within
/// [`SETTLE`].
async fn change_peer(run: &mut Run, change: &PeerChange) {
    let start = std::time::Instant::now();
    loop {
        let mut seen: Vec<usize> = run
            .members
            .iter()
            .filter_map(|&i| run.cluster.leader_seen_by(i))
            .collect();
        seen.sort_unstable();
        let leader = seen
            .chunk_by(|a, b| a == b)
            .max_by_key(|c| c.len())
            .map_or(run.members[0], |c| c[0]);
        let client = Client::new(&run.cluster.url(leader), None).expect("client");
        match client.change_peer(change).await {
            Ok(_) => return,
            Err(e) => {
                assert!(
                    start.elapsed() < SETTLE,
                    "{change:?} never went through: {e}"
                );
                eprintln!(
                    "nemesis {}: {change:?}: {e}; trying again (leaders seen: {seen:?})",
                    run.name
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Runs `change` (see [`change_peer`]) and says how long it took and under what.
async fn step(run: &mut Run, change: PeerChange, while_: &str) {
    let start = std::time::Instant::now();
    change_peer(run, &change).await;
    eprintln!(
        "nemesis {}: {change:?} done in {} ms {while_}",
        run.name,
        start.elapsed().as_millis()
    );
}

/// The cluster's voters as the leader reports them, by position.
async fn voters(run: &Run) -> Vec<usize> {
    let l = leader(run).await;
    let config = Client::new(&run.cluster.url(l), None)
        .expect("client")
        .raft_configuration()
        .await
        .expect("the configuration");
    let mut v: Vec<usize> = config
        .servers
        .iter()
        .filter(|s| s.voter)
        .map(|s| s.id as usize - 1)
        .collect();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_partitioned_during_membership_changes_under_load() {
    let mut run = Run::start("membership", 5, 3, CLIENTS, REGISTERS).await;
    // 1. A follower is cut off; a fourth server is added meanwhile, then the cut-off
    //    follower removed while it cannot hear of it, and stopped.
    let l = leader(&run).await;
    let cut_off = run
        .members
        .iter()
        .copied()
        .find(|&i| i != l)
        .expect("a follower");
    let fault = partition_fault(&mut run);
    let others: Vec<usize> = (0..5).filter(|&i| i != cut_off).collect();
    run.cluster.proxy.between(&[cut_off], &others, fault);
    tokio::time::sleep(SETTLE_PARTITION).await;
    run.cluster.start_agent(3, 4).await;
    let address = run.cluster.public[3].to_string();
    let why = format!("with server {} cut off ({fault:?})", cut_off + 1);
    step(
        &mut run,
        PeerChange::Add {
            id: 4,
            address,
            wait: None,
        },
        &why,
    )
    .await;
    run.members.push(3);
    run.targets.lock().push(run.cluster.url(3));
    let id = cut_off as u64 + 1;
    step(&mut run, PeerChange::Remove { id }, &why).await;
    run.members.retain(|&i| i != cut_off);
    let url = run.cluster.url(cut_off);
    run.targets.lock().retain(|t| *t != url);
    run.cluster.stop_agent(cut_off).await;
    run.cluster.proxy.heal();

    // 2. A fifth server is added and the leader is cut off while the change is under
    //    way: the change may fail with the leader; it is asked again (adding a server
    //    that is there is nothing to do) until it is in place.
    run.cluster.start_agent(4, 5).await;
    let l = leader(&run).await;
    // A short catch-up wait, so a change that fails with its leader fails fast (a
    // deposed leader now answers NotLeader at once: see `deposed.rs`).
    let change = PeerChange::Add {
        id: 5,
        address: run.cluster.public[4].to_string(),
        wait: Some("5s".into()),
    };
    let url = run.cluster.url(l);
    let in_flight = tokio::spawn({
        let change = change.clone();
        async move {
            Client::new(&url, None)
                .expect("client")
                .change_peer(&change)
                .await
        }
    });
    tokio::time::sleep(
        run.rng
            .between(Duration::from_millis(0), Duration::from_millis(300)),
    )
    .await;
    let rest: Vec<usize> = (0..5).filter(|&i| i != l).collect();
    run.cluster.proxy.between(&[l], &rest, Fault::Drop);
    let voting: Vec<usize> = run.members.iter().copied().filter(|&i| i != l).collect();
    run.cluster.wait_leader_other_than(&voting, l).await;
    tokio::time::sleep(SETTLE_PARTITION).await;
    run.cluster.proxy.heal();
    // The old leader learns of the new term and gives the change up (or it went
    // through before the cut).
    let first = in_flight.await.expect("the change's task");
    eprintln!(
        "nemesis membership: adding server 5 as leader {} was cut off: {first:?}",
        l + 1
    );
    step(&mut run, change, "after the heal").await;
    run.members.push(4);
    run.targets.lock().push(run.cluster.url(4));

    // 3. The leader's links flap (delays) while writes go on; then server 5 leaves.
    while run.time_left() {
        let l = leader(&run).await;
        let to = run.members[run.rng.below(run.members.len())];
        if to != l {
            let d = run
                .rng
                .between(Duration::from_millis(10), Duration::from_millis(150));
            run.cluster.proxy.set(l, to, Fault::Delay(d));
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        run.cluster.proxy.heal();
    }
    step(&mut run, PeerChange::Remove { id: 5 }, "at the end").await;
    run.members.retain(|&i| i != 4);
    let url = run.cluster.url(4);
    run.targets.lock().retain(|t| *t != url);
    let mut expected = run.members.clone();
    expected.sort_unstable();
    assert_eq!(voters(&run).await, expected, "the voters after the changes");
    run.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_cannot_reach_the_leader_answers_within_its_bounds() {
    // One way only: the follower's connections to the leader are blackholed, the
    // leader's to the follower work — its heartbeats arrive, so the follower keeps
    // taking it for the leader and sends it what it forwards and proxies.
    let mut run = Run::start("one-way", 3, 3, CLIENTS, REGISTERS).await;
    let l = leader(&run).await;
    let follower = run
        .members
        .iter()
        .copied()
        .find(|&i| i != l)
        .expect("a follower");
    run.cluster.proxy.set(follower, l, Fault::Drop);
    run.partitioned(true);
    tokio::time::sleep(SETTLE_PARTITION).await;
    // On a loaded machine the leader's heartbeats can come late enough for the third
    // server to win an election — before the probes or during them; the follower
    // reaches that leader, and its probes may then rightly succeed.
    let still_hears = run.cluster.leader_seen_by(follower) == Some(l);
    let term = run.cluster.term_seen_by(follower);
    run.probe(&[follower]);
    run.await_probes().await;
    if !still_hears || run.cluster.term_seen_by(follower) != term {
        eprintln!("nemesis one-way: an election during the partition; probe successes accepted");
        run.accept_probe_successes();
    }
    run.finish().await;
}
