//! Leadership transfer under writes: the leader hands over to the voter it is asked
//! for (or the most caught-up one); writes pause for a round trip or two, not an
//! election timeout; every acknowledged write is kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use schedstate_raft::ServerOptions;

use crate::support::*;

/// The longest stretch without an acknowledged write that overlaps `from..to`.
fn pause(acks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut acks = acks.to_vec();
    acks.sort();
    acks.windows(2)
        .filter(|w| w[1] > from && w[0] < to)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// Four writers proposing marker nodes until stopped: what each acknowledged write
/// was (and its index), and when it was acknowledged.
struct Writers {
    stop: Arc<AtomicBool>,
    acked: Acked,
    times: Arc<Mutex<Vec<Instant>>>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    fn start(cluster: &Arc<Cluster>, prefix: &str) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Acked = Arc::default();
        let times: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let handles = (0..4)
            .map(|c| {
                let (cluster, stop, acked, times) =
                    (cluster.clone(), stop.clone(), acked.clone(), times.clone());
                let name = format!("{prefix}{c}");
                tokio::spawn(async move {
                    let mut seq = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let node = marker_node(&name, seq);
                        let index = propose_until_known(&cluster, &node).await;
                        times.lock().push(Instant::now());
                        acked.lock().push((node.id.to_string(), index));
                        seq += 1;
                    }
                })
            })
            .collect();
        Writers {
            stop,
            acked,
            times,
            handles,
        }
    }

    /// Stops the writers; every write they had acknowledged.
    async fn stop(self) -> Vec<(String, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.await.unwrap();
        }
        self.acked.lock().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_under_writes_pauses_them_briefly_and_loses_nothing() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let writers = Writers::start(&cluster, "t");
    let acks = writers.times.clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut pauses = Vec::new();
    for round in 0..8 {
        let old = cluster.wait_leader(&[]).await;
        let term = old.term();
        // Every other round names the target; the others let the leader pick.
        let to = (round % 2 == 0).then(|| (old.id() % 3) + 1);
        let started = Instant::now();
        let new = old.transfer_leadership(to).await.expect("the transfer");
        let done = Instant::now();
        assert_ne!(new, old.id());
        if let Some(to) = to {
            assert_eq!(new, to);
        }
        assert!(!old.is_leader());
        assert_eq!(cluster.server(new).term(), term + 1);
        // Writes resume: wait for acks after the transfer, then measure.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let p = pause(&acks.lock(), started, done);
        eprintln!(
            "transfer {round}: {} -> {new} in {:?}, writes paused {p:?}",
            old.id(),
            done - started
        );
        pauses.push(p);
    }
    let acked = writers.stop().await;
    pauses.sort();
    eprintln!("write pauses across transfers: {pauses:?}");
    cluster.converge().await;
    for s in cluster.live() {
        assert_applied_once(&s, &acked);
    }
    // Generous for a shared 2-core machine; the figures are printed above.
    assert!(
        *pauses.last().unwrap() < Duration::from_millis(400),
        "{pauses:?}"
    );
    cluster.shutdown().await;
}

/// A planned restart, as `schedstate agent` does on SIGTERM, again and again under
/// writes: the leader hands over, stops, and is opened again on its directory. Each
/// hand-over must find its target ready, the restarted server among the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_restarts_hand_over_every_time() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let writers = Writers::start(&cluster, "r");
    for round in 0..8 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let old = cluster.wait_leader(&[]).await;
        let started = Instant::now();
        let new = old.transfer_leadership(None).await;
        eprintln!(
            "restart {round}: {} -> {new:?} in {:?}",
            old.id(),
            started.elapsed()
        );
        let new = new.expect("the hand-over");
        assert_ne!(new, old.id());
        cluster.crash(old.id()).await;
        cluster.open(old.id()).await;
    }
    let acked = writers.stop().await;
    cluster.converge().await;
    for s in cluster.live() {
        assert_applied_once(&s, &acked);
    }
    cluster.shutdown().await;
}

/// Five voters: the old leader's vote and the target's are two of five, and the
/// other three refuse any vote within their lease of the old leader, so the target
/// stands again once the leases ran out (the old leader holds back meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_voters_hand_over_within_a_lease() {
    let cluster = Arc::new(Cluster::start(5, ServerOptions::default()).await);
    let writers = Writers::start(&cluster, "f");
    let mut took = Vec::new();
    for round in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let old = cluster.wait_leader(&[]).await;
        let to = (round % 2 == 0).then(|| (old.id() % 5) + 1);
        let started = Instant::now();
        let new = old.transfer_leadership(to).await;
        let elapsed = started.elapsed();
        eprintln!(
            "five voters, transfer {round}: {} -> {new:?} in {elapsed:?}",
            old.id()
        );
        let new = new.expect("the hand-over");
        assert_ne!(new, old.id());
        if let Some(to) = to {
            assert_eq!(new, to);
        }
        took.push(elapsed);
    }
    let acked = writers.stop().await;
    cluster.converge().await;
    for s in cluster.live() {
        assert_applied_once(&s, &acked);
    }
    // A lease (200 ms) and an election, with room for a shared 2-core machine.
    for t in &took {
        assert!(*t < Duration::from_millis(1500), "{took:?}");
    }
    cluster.shutdown().await;
}
