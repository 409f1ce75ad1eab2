//! The waiter phase: one blocking query per watched node, all open at once, while
//! allocations are written to those nodes at `-rate`; wake latency, false wakes,
//! the agents' count of waiting queries, descriptors and memory.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use schedstate::model::Allocation;
use schedstate::state::Command;
use schedstate_agent::{Client, Indexed, ReadOptions};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::Flags;
use crate::cluster::{Cluster, WAITING, gauge};
use crate::report::{
    Out, count_error, latency_json, latency_text, memory_json, num, round2, signed_ns,
};
use crate::splitmix::SplitMix64;
use crate::system::{CpuMark, cpu_cell, proc_fds, proc_memory_kb};
use crate::writes::{Work, bench_alloc_seq};

/// How long a waiter's blocking query may wait (Nomad's longest).
const WAIT: Duration = Duration::from_secs(300);
/// Waiters opening their first connection at once (the agents listen with a backlog
/// of 1024; more would overflow it and stall connects for a SYN retry).
const OPEN_CONCURRENCY: usize = 256;
/// Writes in flight at most during the waiter phase.
const MAX_IN_FLIGHT: usize = 256;

/// What the waiters record, shared.
#[derive(Default)]
struct WaitStats {
    /// Waiters that read their node and sent their first blocking query.
    opened: AtomicU64,
    /// Answers to blocking queries.
    answers: AtomicU64,
    /// Answers whose allocations changed.
    changed: AtomicU64,
    /// Answers whose index did not move past the one asked.
    index_stuck: AtomicU64,
    /// Answers whose index moved but whose allocations were the same.
    unchanged: AtomicU64,
    /// Changed allocations that no write of this phase made.
    foreign_changes: AtomicU64,
    /// Failed requests (each retried).
    errors: AtomicU64,
    /// (write seq, when the answer showing it arrived).
    seen: Mutex<Vec<(u64, Instant)>>,
}

/// id → modify index of the allocations of an answer.
fn alloc_versions(allocs: Option<Vec<Allocation>>) -> HashMap<String, u64> {
    allocs
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.id.to_string(), a.modify_index))
        .collect()
}

/// The allocations of `node` read with `opts`, retried every 100 ms until they
/// come (each failure counted in `st.errors`, the first few told as `what`).
async fn node_allocations(
    client: &Client,
    node: &str,
    opts: ReadOptions,
    st: &WaitStats,
    what: &str,
) -> Indexed<Option<Vec<Allocation>>> {
    loop {
        match client.node_allocations(node, opts).await {
            Ok(r) => return r,
            Err(e) => {
                count_error(&st.errors, what, e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One simulated client node: reads its allocations, then blocks on them, again and
/// again, recording what each answer brought.
async fn waiter(
    client: Client,
    node: String,
    stale: bool,
    gate: Arc<Semaphore>,
    st: Arc<WaitStats>,
) {
    let (mut index, mut have) = {
        let _permit = gate.acquire().await.expect("gate");
        let opts = ReadOptions {
            stale,
            ..ReadOptions::default()
        };
        let r = node_allocations(&client, &node, opts, &st, "waiter open error").await;
        (r.index, alloc_versions(r.value))
    };
    st.opened.fetch_add(1, Ordering::Relaxed);
    loop {
        let opts = ReadOptions {
            index,
            wait: Some(WAIT),
            stale,
        };
        let r = node_allocations(&client, &node, opts, &st, "waiter error").await;
        let t = Instant::now();
        st.answers.fetch_add(1, Ordering::Relaxed);
        let now = alloc_versions(r.value);
        let mut seqs = Vec::new();
        let mut changed = false;
        for (id, mi) in &now {
            if have.get(id) != Some(mi) {
                changed = true;
                match bench_alloc_seq(id) {
                    Some(seq) if !have.contains_key(id) => seqs.push(seq),
                    _ => {
                        st.foreign_changes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        changed |= have.len() != now.len();
        if r.index <= index {
            st.index_stuck.fetch_add(1, Ordering::Relaxed);
        } else if !changed {
            st.unchanged.fetch_add(1, Ordering::Relaxed);
        } else {
            st.changed.fetch_add(1, Ordering::Relaxed);
        }
        if !seqs.is_empty() {
            st.seen.lock().extend(seqs.into_iter().map(|s| (s, t)));
        }
        index = index.max(r.index);
        have = now;
    }
}

/// One acknowledged write of the waiter phase: (seq, sent, acknowledged).
type Ack = (u64, Instant, Instant);

/// The writes of the waiter phase.
struct RateWrites {
    /// The acknowledged ones.
    acks: Vec<Ack>,
    issued: u64,
    errors: u64,
    /// From the first until the last was answered.
    secs: f64,
}

/// One new allocation per write on a random watched node, to the leader, at `-rate`
/// writes/s for `-waiter-secs` (at most [`MAX_IN_FLIGHT`] at once); returns once all
/// were answered.
async fn write_at_rate(f: &Flags, leader: &Client, work: &Arc<Work>) -> RateWrites {
    let acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
    let write_errors = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut g = SplitMix64(f.seed ^ 0xABCD);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f.rate));
    let t = Instant::now();
    let end = t + Duration::from_secs_f64(f.waiter_secs);
    let mut writes = tokio::task::JoinSet::new();
    let mut issued = 0u64;
    loop {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        let permit = in_flight.clone().acquire_owned().await.expect("in flight");
        let seq = work.next_seq.fetch_add(1, Ordering::Relaxed);
        let node = g.intn(f.waiters);
        let command = Command::UpsertAllocs {
            allocs: vec![work.placement(seq, node)],
        };
        let (client, acks, errors) = (leader.clone(), acks.clone(), write_errors.clone());
        issued += 1;
        writes.spawn(async move {
            let t0 = Instant::now();
            let r = client.apply(&command).await;
            let t1 = Instant::now();
            match r {
                Ok(_) => acks.lock().push((seq, t0, t1)),
                Err(e) => count_error(&errors, "write error", e),
            }
            drop(permit);
        });
    }
    while writes.join_next().await.is_some() {}
    let secs = t.elapsed().as_secs_f64();
    let acks = std::mem::take(&mut *acks.lock());
    RateWrites {
        acks,
        issued,
        errors: write_errors.load(Ordering::Relaxed),
        secs,
    }
}

pub async fn run_waiters(f: &Flags, out: &mut Out, cluster: &Cluster, li: usize, work: &Arc<Work>) {
    let pids = cluster.pids();
    let leader = cluster.clients[li].clone();
    // Which agents serve the waiters: the leader, or all three (stale).
    let targets: Vec<usize> = if f.waiters_stale {
        vec![0, 1, 2]
    } else {
        vec![li]
    };
    // The waiting queries the serving agent(s) count, of each agent's.
    let serving = |w: &[Option<f64>]| -> f64 { targets.iter().map(|&i| w[i].unwrap_or(0.0)).sum() };
    let mem_before = cluster.memory();
    let waiting_before = cluster.waiting().await;
    let bench_before = proc_memory_kb(std::process::id());

    // Open them: each reads its node's allocations, then blocks with that index.
    let st = Arc::new(WaitStats::default());
    let gate = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let cpu = CpuMark::new(&pids);
    let t = Instant::now();
    let mut handles = Vec::with_capacity(f.waiters);
    for i in 0..f.waiters {
        let client = cluster.clients[targets[i % targets.len()]].clone();
        handles.push(tokio::spawn(waiter(
            client,
            work.ds.node_ids[i].to_string(),
            f.waiters_stale,
            gate.clone(),
            st.clone(),
        )));
    }
    let deadline = Duration::from_secs(120);
    while st.opened.load(Ordering::Relaxed) < f.waiters as u64 {
        assert!(
            t.elapsed() < deadline,
            "only {} of {} waiters opened after {deadline:?} ({} errors)",
            st.opened.load(Ordering::Relaxed),
            f.waiters,
            st.errors.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = t.elapsed();
    // The servers count them once their handlers wait.
    let tolerance = (f.waiters as f64 * 0.01).ceil();
    let waiting_open = loop {
        let w = cluster.waiting().await;
        if serving(&w) >= f.waiters as f64 || t.elapsed() > deadline {
            break w;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let open_cpu = cpu.json(&pids);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mem_open = cluster.memory();
    let bench_open = proc_memory_kb(std::process::id());
    // One connection per waiter: this process's descriptors and the agents'.
    let fds_open: Vec<usize> = std::iter::once("self".to_string())
        .chain(pids.iter().map(u32::to_string))
        .map(|p| proc_fds(&p))
        .collect();
    let sum_open = serving(&waiting_open);
    out.line(format!(
        "waiters: {} blocking queries GET /v1/node/<id>/allocations?index=&wait=5m{} on {}: all sent after {:.0} ms, {} waiting on the server(s) after {:.0} ms; cores a/b/f {}",
        f.waiters,
        if f.waiters_stale { "&stale" } else { "" },
        if f.waiters_stale {
            "all 3 agents".to_string()
        } else {
            format!("the leader (agent {})", li + 1)
        },
        sent.as_secs_f64() * 1e3,
        sum_open,
        open_ms,
        cpu_cell(&open_cpu)
    ));

    // Write allocations to random watched nodes at -rate.
    let answers_before = st.answers.load(Ordering::Relaxed);
    let stuck_before = st.index_stuck.load(Ordering::Relaxed);
    let unchanged_before = st.unchanged.load(Ordering::Relaxed);
    let cpu = CpuMark::new(&pids);
    let RateWrites {
        acks,
        issued,
        errors: write_errors,
        secs: write_secs,
    } = write_at_rate(f, &leader, work).await;
    // Until every acknowledged write reached its waiter (or 10 s).
    let wanted: HashSet<u64> = acks.iter().map(|a| a.0).collect();
    let drain = Instant::now();
    loop {
        let seen: HashSet<u64> = st.seen.lock().iter().map(|s| s.0).collect();
        if wanted.is_subset(&seen) || drain.elapsed() > Duration::from_secs(10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the last answers re-block before counting the waiting queries.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let write_cpu = cpu.json(&pids);
    let waiting_end = cluster.waiting().await;
    let leader_metrics = leader.metrics().await.unwrap_or_default();
    let mem_end = cluster.memory();
    let bench_end = proc_memory_kb(std::process::id());

    // Close them (dropping a request closes its connection).
    for h in &handles {
        h.abort();
    }
    for h in handles {
        let _ = h.await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting_closed = cluster.waiting().await;
    let mem_closed = cluster.memory();

    // Wake latencies: each write's first sighting by its waiter.
    let mut first_seen: HashMap<u64, Instant> = HashMap::new();
    for &(seq, t) in st.seen.lock().iter() {
        first_seen
            .entry(seq)
            .and_modify(|e| *e = (*e).min(t))
            .or_insert(t);
    }
    let mut from_ack = Vec::new();
    let mut from_send = Vec::new();
    let mut write_lat = Vec::new();
    let mut missed = 0u64;
    for &(seq, sent, acked) in &acks {
        write_lat.push(signed_ns(acked, sent));
        match first_seen.get(&seq) {
            Some(&w) => {
                from_ack.push(signed_ns(w, acked));
                from_send.push(signed_ns(w, sent));
            }
            None => missed += 1,
        }
    }
    let before_ack = from_ack.iter().filter(|&&d| d < 0).count();
    let wake = latency_json(&mut from_ack);
    let wake_send = latency_json(&mut from_send);
    let write_lat = latency_json(&mut write_lat);
    let answers = st.answers.load(Ordering::Relaxed) - answers_before;
    let stuck = st.index_stuck.load(Ordering::Relaxed) - stuck_before;
    let unchanged = st.unchanged.load(Ordering::Relaxed) - unchanged_before;
    let sum_end = serving(&waiting_end);
    let leader_waiting_end = gauge(&leader_metrics, WAITING);

    out.line(format!(
        "  writes: {} acknowledged of {issued} issued in {write_secs:.1} s ({:.0}/s), {write_errors} errors; write latency p50 {:.2} ms p99 {:.2} ms",
        acks.len(),
        acks.len() as f64 / write_secs,
        num(&write_lat, "p50_ms"),
        num(&write_lat, "p99_ms"),
    ));
    out.line(format!(
        "  wake latency (write acknowledged → waiter's answer): {}  ({before_ack} of {} answers arrived before the write's acknowledgement)",
        latency_text(&wake),
        wake["n"]
    ));
    out.line(format!(
        "  wake latency (write sent → waiter's answer):         {}",
        latency_text(&wake_send)
    ));
    out.line(format!(
        "  answers {answers}: {} with new allocations, false wakes {} (index did not move: {stuck}; index moved, allocations unchanged: {unchanged}); writes never seen by their waiter: {missed}; foreign changes {}; waiter errors {}",
        answers - stuck - unchanged,
        stuck + unchanged,
        st.foreign_changes.load(Ordering::Relaxed),
        st.errors.load(Ordering::Relaxed),
    ));
    let fmt_w = |w: &[Option<f64>]| {
        w.iter()
            .map(|x| x.map_or("?".to_string(), |v| format!("{v:.0}")))
            .collect::<Vec<_>>()
            .join("/")
    };
    out.line(format!(
        "  schedstate_blocking_queries_waiting agents 1/2/3: before {}, opened {}, after the writes {}, 2 s after closing {}",
        fmt_w(&waiting_before),
        fmt_w(&waiting_open),
        fmt_w(&waiting_end),
        fmt_w(&waiting_closed),
    ));
    out.line(format!(
        "  open descriptors with the waiters open: bench {}, agents 1/2/3 {}/{}/{}",
        fds_open[0], fds_open[1], fds_open[2], fds_open[3]
    ));
    out.line(format!(
        "  cores a/b/f while writing: {}",
        cpu_cell(&write_cpu)
    ));
    out.line(
        "  memory (MiB)     VmRSS agent1 agent2 agent3 | VmHWM agent1 agent2 agent3 | bench VmRSS",
    );
    let mib = |kb: u64| kb as f64 / 1024.0;
    for (name, m, b) in [
        ("before waiters", &mem_before, Some(bench_before)),
        ("waiters open", &mem_open, Some(bench_open)),
        ("after writes", &mem_end, Some(bench_end)),
        ("after closing", &mem_closed, None),
    ] {
        out.line(format!(
            "  {name:<16} {:>12.1} {:>6.1} {:>6.1} | {:>12.1} {:>6.1} {:>6.1} | {}",
            mib(m[0].0),
            mib(m[1].0),
            mib(m[2].0),
            mib(m[0].1),
            mib(m[1].1),
            mib(m[2].1),
            b.map_or("-".to_string(), |b| format!("{:.1}", mib(b.0)))
        ));
    }
    let per_waiter_kb: f64 = targets
        .iter()
        .map(|&i| mem_open[i].0 as f64 - mem_before[i].0 as f64)
        .sum::<f64>()
        / f.waiters as f64;
    out.line(format!(
        "  server memory per open waiter: {per_waiter_kb:.1} kB (VmRSS growth of the serving agent(s) / waiters)"
    ));

    out.put(
        "waiters",
        json!({
            "waiters": f.waiters,
            "target": if f.waiters_stale { "all-stale" } else { "leader" },
            "leader": li + 1,
            "all_sent_ms": round2(sent.as_secs_f64() * 1e3),
            "all_waiting_ms": round2(open_ms),
            "open_cpu": open_cpu,
            "rate_asked": f.rate,
            "writes_issued": issued,
            "writes_acked": acks.len(),
            "writes_per_s": round2(acks.len() as f64 / write_secs),
            "write_errors": write_errors,
            "write_latency": write_lat,
            "wake_latency_from_ack": wake,
            "wakes_before_ack": before_ack,
            "wake_latency_from_send": wake_send,
            "answers": answers,
            "answers_with_new_allocs": answers - stuck - unchanged,
            "false_wakes": stuck + unchanged,
            "false_wakes_index_not_moved": stuck,
            "false_wakes_allocs_unchanged": unchanged,
            "writes_missed": missed,
            "foreign_changes": st.foreign_changes.load(Ordering::Relaxed),
            "waiter_errors": st.errors.load(Ordering::Relaxed),
            "write_cpu": write_cpu,
            "open_fds": { "bench": fds_open[0], "agents": &fds_open[1..] },
            "blocking_queries_waiting": {
                "before": waiting_before,
                "opened": waiting_open,
                "after_writes": waiting_end,
                "leader_after_writes": leader_waiting_end,
                "after_close_2s": waiting_closed,
            },
            "memory": {
                "before_waiters": memory_json(&mem_before),
                "waiters_open": memory_json(&mem_open),
                "after_writes": memory_json(&mem_end),
                "after_close": memory_json(&mem_closed),
                "server_kb_per_waiter": round2(per_waiter_kb),
                "bench_rss_kb": { "before": bench_before.0, "open": bench_open.0, "after_writes": bench_end.0 },
            },
        }),
    );
    let _ = std::io::stdout().flush();
    assert!(
        sum_end >= f.waiters as f64 - tolerance,
        "schedstate_blocking_queries_waiting on the serving agent(s) is {sum_end} with {} waiters open",
        f.waiters
    );
    assert!(
        sum_open >= f.waiters as f64 - tolerance,
        "only {sum_open} blocking queries counted waiting after opening {}",
        f.waiters
    );
    assert_eq!(missed, 0, "acknowledged writes never seen by their waiter");
}
