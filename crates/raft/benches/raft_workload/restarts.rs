//! Planned restarts of the leader (issue 50): each round, as `schedstate agent` does on
//! SIGTERM, the leader hands its leadership over to the most caught-up voter, stops,
//! and is started again on its directory, while the failover phase's writers go on.
//!
//! What a round reports: how long the hand-over took, the write pause (the longest
//! time between two acknowledgements, cluster-wide, from the hand-over's start until
//! the server is back and caught up, and half a second after), each write's latency in
//! that window — from its first try to its acknowledgement, retries on the new leader
//! included — and every server's term before and after (a hand-over is one election:
//! the term moves by one).

use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use super::{Clients, Cluster, Flags, Reporter};

pub(super) async fn run(
    f: &Flags,
    cluster: &std::sync::Arc<Cluster>,
    clients: &Clients,
    rep: &mut Reporter,
) {
    let mut pauses = Vec::new();
    let mut handovers = Vec::new();
    let mut latencies: Vec<i64> = Vec::new();
    let mut failed = 0u64;
    for round in 1..=f.restarts {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let old = cluster.wait_leader(None).await;
        let oi = (old.id() - 1) as usize;
        let terms_before: Vec<u64> = cluster.live().iter().map(|s| s.term()).collect();
        clients.samples.lock().clear();
        let t0 = Instant::now();
        *clients.window.lock() = Some((t0, t0 + Duration::from_secs(3600)));
        // As the agent on SIGTERM: a hand-over that fails is reported, and the server
        // stops all the same (the others then elect as after a failure).
        let to = match old.transfer_leadership(None).await {
            Ok(to) => Some(to),
            Err(e) => {
                failed += 1;
                println!("# restart round={round} handover_failed: {e}");
                for s in cluster.live() {
                    println!(
                        "#   s{}: {:?}",
                        s.id() - 1,
                        s.raft().metrics().borrow().clone()
                    );
                }
                None
            }
        };
        let handed = t0.elapsed();
        let taken = cluster.servers.lock()[oi].take();
        if let Some((s, ep)) = taken {
            ep.stop();
            drop(ep);
            s.shutdown().await;
        }
        let new = cluster.wait_leader(Some(old.id())).await;
        let target = new.last_applied();
        let listener = loop {
            match TcpListener::bind(&cluster.addrs[oi]).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        let back = cluster.start_server(oi, listener).await;
        back.wait_applied(target, Duration::from_secs(60))
            .await
            .expect("the restarted server catches up");
        let rejoined = t0.elapsed();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let end = Instant::now();
        *clients.window.lock() = None;
        let terms_after: Vec<u64> = cluster.live().iter().map(|s| s.term()).collect();
        let mut times: Vec<Instant> = clients
            .first_ack_by
            .lock()
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| *t >= t0 && *t <= end)
            .collect();
        times.sort();
        let mut pause = Duration::ZERO;
        let mut last = t0;
        for t in times.iter().copied().chain(std::iter::once(end)) {
            pause = pause.max(t - last);
            last = t;
        }
        let mut window = clients.samples.lock().clone();
        window.sort_unstable();
        let p99 = super::pct(&window, 0.99);
        println!(
            "# restart round={round} leader=s{oi} handed_to={} handover_ms={:.2} pause_ms={:.2} write_p99_ms={:.2} writes={} rejoin_ms={:.2} terms_before={terms_before:?} terms_after={terms_after:?}",
            to.map_or_else(|| "none".to_string(), |to| format!("s{}", to - 1)),
            handed.as_secs_f64() * 1e3,
            pause.as_secs_f64() * 1e3,
            p99 as f64 / 1e6,
            window.len(),
            rejoined.as_secs_f64() * 1e3,
        );
        pauses.push(pause.as_secs_f64() * 1e3);
        handovers.push(handed.as_secs_f64() * 1e3);
        latencies.extend(window);
    }
    latencies.sort_unstable();
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let pause_max = pauses.iter().copied().fold(0.0, f64::max);
    rep.emit(
        "planned_restart",
        med(&mut pauses) * 1e6,
        f.restarts as u64,
        &[
            ("restarts", f.restarts as f64),
            ("pause_p50_ms", med(&mut pauses)),
            ("pause_max_ms", pause_max),
            ("handover_p50_ms", med(&mut handovers)),
            ("write_p50_ms", super::pct(&latencies, 0.50) as f64 / 1e6),
            ("write_p99_ms", super::pct(&latencies, 0.99) as f64 / 1e6),
            ("writes", latencies.len() as f64),
            ("handovers_failed", failed as f64),
        ],
    );
}
