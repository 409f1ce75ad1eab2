//! The durability phase (`-durability`): what the preloaded state costs to keep on
//! disk and to bring back, at the cluster's size (issue 25 item 4 runs it at 200,000
//! nodes and 2,000,000 allocations).
//!
//! 1. **At rest**: each agent's RSS and its anonymous part (heap and stacks), its
//!    data directory's size (Raft log and snapshots), the log's bytes.
//! 2. **Latency at this size**, one request at a time on the leader: `-probe` point
//!    reads of random nodes (consistent, then `?stale`) and node writes (a
//!    fingerprint's health flipped).
//! 3. **Snapshot and compaction**: node writes from 16 writers until every agent has
//!    built a snapshot of the state after the preload (the policy: one every 10,000
//!    entries) and purged its log; meanwhile each data directory's size is sampled
//!    every 100 ms. Reported: the snapshot's size, each agent's build time
//!    (`schedstate_snapshot_build_seconds`), the log's bytes before and after, and the
//!    largest data directory seen against the snapshot's size.
//! 4. **Restart**: a follower stopped (SIGTERM) and started on its directory; the time
//!    until it serves again and until it has applied the leader's last index.
//! 5. **Wiped follower**: the other follower removed from the membership, killed, its
//!    directory removed, started empty and added back (`POST /v1/operator/raft/peer`):
//!    the time until it is a voter again and has the leader's last index (by a
//!    snapshot install).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use schedstate_agent::api::PeerChange;
use schedstate_agent::{Client, ReadOptions};
use serde_json::{Value, json};

use crate::Flags;
use crate::cluster::{Cluster, gauge};
use crate::report::{Out, latency_json, latency_text, memory_json, round2};
use crate::splitmix::SplitMix64;
use crate::system::proc_anon_kb;
use crate::writes::Work;

/// How long the snapshot, restart and catch-up steps may take each.
const STEP: Duration = Duration::from_secs(600);

/// The numbers of an agent's `/v1/metrics` this phase reads.
#[derive(Debug, Default, Clone, Copy)]
struct Gauges {
    applied: u64,
    log_bytes: u64,
    snapshot_index: u64,
    snapshot_bytes: u64,
    build_seconds: f64,
    installed: u64,
}

async fn gauges(c: &Client) -> Option<Gauges> {
    let text = c.metrics().await.ok()?;
    let g = |name: &str| gauge(&text, name).unwrap_or(0.0);
    Some(Gauges {
        applied: g("schedstate_last_applied_index") as u64,
        log_bytes: g("schedstate_raft_log_bytes") as u64,
        snapshot_index: g("schedstate_snapshot_index") as u64,
        snapshot_bytes: g("schedstate_snapshot_bytes") as u64,
        build_seconds: g("schedstate_snapshot_build_seconds"),
        installed: g("schedstate_snapshots_installed_total") as u64,
    })
}

/// The bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

fn mib(bytes: u64) -> f64 {
    round2(bytes as f64 / (1 << 20) as f64)
}

pub async fn run_durability(
    f: &Flags,
    out: &mut Out,
    cluster: &mut Cluster,
    li: usize,
    work: &Arc<Work>,
) {
    let leader = cluster.clients[li].clone();
    // ---- at rest ----
    let mut rest = Vec::new();
    for i in 0..3 {
        let g = gauges(&cluster.clients[i]).await.unwrap_or_default();
        rest.push(json!({
            "agent": i + 1,
            "data_dir_mib": mib(dir_bytes(&cluster.data_dir(i))),
            "log_mib": mib(g.log_bytes),
            "snapshot_mib": mib(g.snapshot_bytes),
            "applied": g.applied,
        }));
    }
    let memory = memory_json(&cluster.memory());
    let anon: Vec<u64> = cluster.pids().into_iter().map(proc_anon_kb).collect();
    for (r, kb) in rest.iter_mut().zip(&anon) {
        r["rss_anon_mib"] = json!(round2(*kb as f64 / 1024.0));
    }
    out.line(format!(
        "durability: at rest after the preload: {}",
        rest.iter()
            .zip(memory.as_array().into_iter().flatten())
            .map(|(r, m)| format!(
                "agent {} RSS {:.0} MiB (anonymous {} MiB), data {} MiB (log {} MiB)",
                r["agent"],
                m["vm_rss_kb"].as_f64().unwrap_or(0.0) / 1024.0,
                r["rss_anon_mib"],
                r["data_dir_mib"],
                r["log_mib"]
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));

    // ---- latency at this size ----
    let mut g = SplitMix64(f.seed ^ 0xD0_2AB1E);
    let mut reads = Vec::with_capacity(f.probe);
    let mut stale_reads = Vec::with_capacity(f.probe);
    for _ in 0..f.probe {
        let id = work.ds.node_ids[g.intn(work.ds.nodes)].to_string();
        let t = Instant::now();
        let r = leader.node(&id, ReadOptions::default()).await;
        reads.push(t.elapsed().as_nanos() as i64);
        assert!(r.expect("point read").value.is_some(), "node {id} missing");
        let t = Instant::now();
        let r = leader.node(&id, ReadOptions::stale()).await;
        stale_reads.push(t.elapsed().as_nanos() as i64);
        assert!(r.expect("stale point read").value.is_some());
    }
    let mut writes = Vec::with_capacity(f.probe);
    for _ in 0..f.probe {
        let seq = work.next_seq.fetch_add(1, Ordering::Relaxed);
        let cmd = work.node_write(seq, &mut g);
        let t = Instant::now();
        leader.apply(&cmd).await.expect("node write");
        writes.push(t.elapsed().as_nanos() as i64);
    }
    let (reads, stale_reads, writes) = (
        latency_json(&mut reads),
        latency_json(&mut stale_reads),
        latency_json(&mut writes),
    );
    out.line(format!(
        "durability: one at a time on the leader, {} each: point read {}; stale {}; node write {}",
        f.probe,
        latency_text(&reads),
        latency_text(&stale_reads),
        latency_text(&writes)
    ));

    // ---- snapshot and compaction ----
    let before: Vec<Gauges> = {
        let mut v = Vec::new();
        for c in &cluster.clients {
            v.push(gauges(c).await.unwrap_or_default());
        }
        v
    };
    // A snapshot that holds the whole preload: newer than anything applied so far.
    let from = before.iter().map(|g| g.applied).max().unwrap_or(0);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let (c, work, stop, written) =
                (leader.clone(), work.clone(), stop.clone(), written.clone());
            let mut g = SplitMix64(f.seed ^ ((w as u64 + 1) * 0x9E37));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let seq = work.next_seq.fetch_add(1, Ordering::Relaxed);
                    if c.apply(&work.node_write(seq, &mut g)).await.is_ok() {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let t = Instant::now();
    let mut max_dir = [0u64; 3];
    let mut max_log = [0u64; 3];
    let mut done: Vec<Option<(Gauges, Duration)>> = vec![None; 3];
    while done.iter().any(Option::is_none) {
        assert!(
            t.elapsed() < STEP,
            "no snapshot on every agent after {STEP:?}"
        );
        for i in 0..3 {
            max_dir[i] = max_dir[i].max(dir_bytes(&cluster.data_dir(i)));
            let Some(g) = gauges(&cluster.clients[i]).await else {
                continue;
            };
            max_log[i] = max_log[i].max(g.log_bytes);
            // A snapshot of the state after the preload, and the log purged behind it.
            if done[i].is_none() && g.snapshot_index > from && g.log_bytes < max_log[i] {
                done[i] = Some((g, t.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let snapshot_bytes = done
        .iter()
        .flatten()
        .map(|(g, _)| g.snapshot_bytes)
        .max()
        .unwrap_or(0);
    let per_agent: Vec<Value> = (0..3)
        .map(|i| {
            let (g, at) = done[i].expect("done");
            json!({
                "agent": i + 1,
                "snapshot_mib": mib(g.snapshot_bytes),
                "build_s": round2(g.build_seconds),
                "log_before_mib": mib(max_log[i]),
                "log_after_mib": mib(g.log_bytes),
                "max_data_dir_mib": mib(max_dir[i]),
                "max_data_dir_over_snapshot": round2(max_dir[i] as f64 / g.snapshot_bytes.max(1) as f64),
                "compacted_after_s": round2(at.as_secs_f64()),
            })
        })
        .collect();
    out.line(format!(
        "durability: snapshot {} MiB; {} node writes until every agent built one and purged its log: {}",
        mib(snapshot_bytes),
        written.load(Ordering::Relaxed),
        per_agent
            .iter()
            .map(|a| format!(
                "agent {} build {} s, log {} → {} MiB, data dir at most {} MiB ({}× the snapshot)",
                a["agent"],
                a["build_s"],
                a["log_before_mib"],
                a["log_after_mib"],
                a["max_data_dir_mib"],
                a["max_data_dir_over_snapshot"]
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));

    // ---- restart a follower ----
    // The leader may have moved under the write load: ask again.
    let li = cluster.wait_leader(STEP).await;
    let leader = cluster.clients[li].clone();
    let fi = (li + 1) % 3;
    let target = gauges(&leader).await.expect("leader metrics").applied;
    cluster.stop(fi, false);
    cluster.restart(fi);
    let (serving, caught_up) = wait_caught_up(cluster, fi, target).await;
    out.line(format!(
        "durability: agent {} restarted on its directory: serving after {:.0} ms, applied the leader's index {target} after {:.0} ms",
        fi + 1,
        serving.as_secs_f64() * 1e3,
        caught_up.as_secs_f64() * 1e3
    ));

    // ---- a wiped follower, the supported way: out of the membership, wiped, back in ----
    // (A voter wiped and started again under its id would be a Raft log reversion:
    // its vote forgotten, and openraft 0.9's leader never finds where to resume it.)
    let li = cluster.wait_leader(STEP).await;
    let wi = (li + 2) % 3;
    let id = wi as u64 + 1;
    cluster.clients[li]
        .change_peer(&PeerChange::Remove { id })
        .await
        .expect("remove the follower");
    cluster.stop(wi, true);
    std::fs::remove_dir_all(cluster.data_dir(wi)).expect("wipe the follower's directory");
    let li = leader_among(cluster, wi).await;
    let leader = cluster.clients[li].clone();
    let target = gauges(&leader).await.expect("leader metrics").applied;
    cluster.restart(wi);
    let t = Instant::now();
    let add = PeerChange::Add {
        id,
        address: cluster.addrs[wi].clone(),
        wait: Some("10m".into()),
    };
    leader
        .change_peer(&add)
        .await
        .expect("add the wiped follower back");
    let added = t.elapsed();
    let (wiped_serving, caught) = wait_caught_up(cluster, wi, target).await;
    let wiped_caught_up = added + caught;
    let installed = gauges(&cluster.clients[wi])
        .await
        .map_or(0, |g| g.installed);
    out.line(format!(
        "durability: agent {} removed, wiped, started empty and added back: added (caught up, a voter) after {:.0} ms, applied the leader's index {target} after {:.0} ms ({installed} snapshot(s) installed)",
        wi + 1,
        added.as_secs_f64() * 1e3,
        wiped_caught_up.as_secs_f64() * 1e3
    ));
    out.put(
        "durability",
        json!({
            "at_rest": rest,
            "memory_at_rest": memory,
            "probe": f.probe,
            "point_read": reads,
            "point_read_stale": stale_reads,
            "node_write": writes,
            "snapshot_mib": mib(snapshot_bytes),
            "snapshot": per_agent,
            "restart": {
                "agent": fi + 1,
                "serving_ms": round2(serving.as_secs_f64() * 1e3),
                "caught_up_ms": round2(caught_up.as_secs_f64() * 1e3),
            },
            "wiped": {
                "agent": wi + 1,
                "serving_after_add_ms": round2(wiped_serving.as_secs_f64() * 1e3),
                "added_ms": round2(added.as_secs_f64() * 1e3),
                "caught_up_ms": round2(wiped_caught_up.as_secs_f64() * 1e3),
                "snapshots_installed": installed,
            },
            "memory_end": memory_json(&cluster.memory()),
        }),
    );
}

/// The leader's position, as the agents other than `out` name it (an election may be
/// under way).
async fn leader_among(cluster: &Cluster, out: usize) -> usize {
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < STEP, "no leader after {STEP:?}");
        for (j, c) in cluster.clients.iter().enumerate() {
            if j == out {
                continue;
            }
            if let Ok(Some(addr)) = c.leader().await
                && let Some(l) = cluster.addrs.iter().position(|a| *a == addr)
                && l != out
            {
                return l;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until agent `i` answers its metrics (serving) and has applied `target`;
/// both times from now.
async fn wait_caught_up(cluster: &mut Cluster, i: usize, target: u64) -> (Duration, Duration) {
    let t = Instant::now();
    let mut serving = None;
    loop {
        cluster.check_alive();
        assert!(
            t.elapsed() < STEP,
            "agent {} not caught up after {STEP:?}",
            i + 1
        );
        // Serving: its health answers (no token needed; a wiped agent has no tokens
        // until the state arrives).
        if serving.is_none() && cluster.clients[i].health().await.is_ok() {
            serving = Some(t.elapsed());
        }
        if let Some(at) = serving
            && let Some(g) = gauges(&cluster.clients[i]).await
            && g.applied >= target
        {
            return (at, t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
