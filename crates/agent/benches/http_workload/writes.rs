//! The write phase: for each `-clients` count, that many writers each sending one
//! command at a time to the leader; and the allocations and node updates written
//! (shared with the waiter phase's writes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use schedstate::model::{Allocation, ClientStatus, DesiredStatus, Id, Node};
use schedstate::state::Command;
use schedstate_agent::Client;
use serde_json::{Value, json};

use crate::Flags;
use crate::cluster::gauge;
use crate::dataset::Dataset;
use crate::report::{Out, latency_json, num, signed_ns};
use crate::splitmix::SplitMix64;
use crate::system::{CpuMark, cpu_cell};

/// The id of the allocation of write `seq` (UUID-shaped; the dataset's ids are
/// random, so they never collide).
const BENCH_ALLOC_PREFIX: &str = "00000000-0000-4000-8000-";

fn bench_alloc_id(seq: u64) -> String {
    format!("{BENCH_ALLOC_PREFIX}{seq:012x}")
}

/// The write `seq` of an allocation id of [`bench_alloc_id`]; `None` for others.
pub fn bench_alloc_seq(id: &str) -> Option<u64> {
    u64::from_str_radix(id.strip_prefix(BENCH_ALLOC_PREFIX)?, 16).ok()
}

/// What the writers share: the dataset and its objects, the write counter.
pub struct Work {
    pub ds: Dataset,
    nodes: Vec<Arc<Node>>,
    pub next_seq: AtomicU64,
    write_nodes: bool,
    namespace: Id,
    task_group: Id,
}

impl Work {
    /// The preloaded dataset and its nodes; writes counted from 1.
    pub fn new(ds: Dataset, nodes: Vec<Arc<Node>>, write_nodes: bool) -> Work {
        Work {
            ds,
            nodes,
            next_seq: AtomicU64::new(1),
            write_nodes,
            namespace: Id::from("default"),
            task_group: Id::from("tg"),
        }
    }

    /// A new allocation on node `i`, as a scheduler places it.
    pub fn placement(&self, seq: u64, i: usize) -> Allocation {
        Allocation {
            id: Id::from(bench_alloc_id(seq)),
            namespace: self.namespace.clone(),
            job_id: Id::from(format!("bench-job-{:03}", seq % 500)),
            job_version: 0,
            task_group: self.task_group.clone(),
            node_id: self.ds.node_ids[i].clone(),
            desired_status: DesiredStatus::Run,
            client_status: ClientStatus::Pending,
            csi_volume_requests: Default::default(),
            create_index: 0,
            modify_index: 0,
        }
    }

    /// Node `i` with fingerprint `k`'s health set from `seq` (a client's fingerprint
    /// update).
    fn node_update(&self, seq: u64, i: usize, k: usize) -> Node {
        let mut node = (*self.nodes[i]).clone();
        let plugin = &self.ds.plugin_ids[self.ds.node_plugins[i][k]];
        if let Some(fp) = node.csi_node_plugins.get(plugin) {
            let mut fp = (**fp).clone();
            fp.healthy = seq.is_multiple_of(2);
            fp.health_description = if fp.healthy { "healthy" } else { "unhealthy" }.into();
            fp.update_time = seq;
            node.csi_node_plugins.insert(plugin.clone(), Arc::new(fp));
        }
        node
    }

    /// A client's fingerprint update of a random node (write `seq`).
    pub fn node_write(&self, seq: u64, g: &mut SplitMix64) -> Command {
        let i = g.intn(self.ds.nodes);
        Command::UpsertNode {
            node: self.node_update(seq, i, g.intn(2)),
        }
    }

    /// The command of the write phase's write `seq`.
    pub fn command(&self, seq: u64, g: &mut SplitMix64) -> Command {
        let i = g.intn(self.ds.nodes);
        if self.write_nodes {
            Command::UpsertNode {
                node: self.node_update(seq, i, g.intn(2)),
            }
        } else {
            Command::UpsertAllocs {
                allocs: vec![self.placement(seq, i)],
            }
        }
    }
}

/// One writer of a write phase: until `stop`, one command at a time; returns the
/// latencies (ns) of writes acknowledged inside the window, and the errors.
async fn writer(
    client: Client,
    work: Arc<Work>,
    seed: u64,
    stop: Arc<AtomicBool>,
    window: Arc<Mutex<Option<(Instant, Instant)>>>,
) -> (Vec<i64>, u64) {
    let mut g = SplitMix64(seed);
    let mut samples = Vec::new();
    let mut errors = 0;
    while !stop.load(Ordering::Relaxed) {
        let seq = work.next_seq.fetch_add(1, Ordering::Relaxed);
        let command = work.command(seq, &mut g);
        let t0 = Instant::now();
        let r = client.apply(&command).await;
        let t1 = Instant::now();
        match r {
            Ok(_) => {
                if let Some((from, to)) = *window.lock()
                    && t1 >= from
                    && t1 < to
                {
                    samples.push(signed_ns(t1, t0));
                }
            }
            Err(e) => {
                errors += 1;
                if errors <= 3 {
                    eprintln!("# write error: {e}");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    (samples, errors)
}

/// The leader's counters a window is measured between, from its metrics.
#[derive(Clone, Copy)]
pub struct Applied {
    /// Log entries applied.
    entries: f64,
    /// Commands accepted.
    commands: f64,
    /// Writes answered by its handlers, and their seconds from proposal to commit
    /// and apply (`schedstate_commit_seconds`).
    commits: f64,
    commit_seconds: f64,
}

/// The leader's [`Applied`] so far; `None` if its metrics cannot be read.
async fn applied(leader: &Client) -> Option<Applied> {
    let text = leader.metrics().await.ok()?;
    Some(Applied {
        entries: gauge(&text, "schedstate_entries_applied_total")?,
        commands: gauge(&text, "schedstate_commands_accepted_total")?,
        commits: gauge(&text, "schedstate_commit_seconds_count")?,
        commit_seconds: gauge(&text, "schedstate_commit_seconds_sum")?,
    })
}

/// What one window of writers measured.
pub struct Window {
    /// Latencies (ns) of the writes acknowledged inside the window.
    pub samples: Vec<i64>,
    pub errors: u64,
    /// [`CpuMark::json`] over the window (`pids` and this process).
    pub cpu: Value,
    /// The leader's counters at the window's start and end, when asked.
    pub applied: Option<(Applied, Applied)>,
}

/// What a [`Window`] comes to: the writes acknowledged in it, their latency, the
/// rate and the CPU per write — derived alike for every phase that compares them.
pub struct Rates {
    pub n: usize,
    pub lat: Value,
    pub rate: f64,
    pub cpu_us: f64,
}

impl Window {
    /// The window's [`Rates`] over its `secs`.
    pub fn rates(&mut self, secs: f64) -> Rates {
        let n = self.samples.len();
        let lat = latency_json(&mut self.samples);
        let rate = (n as f64 / secs).round();
        let cpu_us = cpu_us_per_commit(&self.cpu, rate);
        Rates {
            n,
            lat,
            rate,
            cpu_us,
        }
    }
}

/// `c` writers through `client` for `-warmup` then `-secs` (the window); the CPU
/// of `pids` and of this process over the window; with `leader`, its applied
/// counters at both ends. `p` seeds the writers (the row's position).
pub async fn measure_window(
    f: &Flags,
    client: &Client,
    work: &Arc<Work>,
    c: usize,
    p: usize,
    pids: &[u32],
    leader: Option<&Client>,
) -> Window {
    let stop = Arc::new(AtomicBool::new(false));
    let window = Arc::new(Mutex::new(None));
    let handles: Vec<_> = (0..c)
        .map(|k| {
            tokio::spawn(writer(
                client.clone(),
                work.clone(),
                f.seed ^ (1000 * (p as u64 + 1) + k as u64),
                stop.clone(),
                window.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(f.warmup)).await;
    let before = match leader {
        Some(l) => applied(l).await,
        None => None,
    };
    let cpu = CpuMark::new(pids);
    let from = Instant::now();
    let to = from + Duration::from_secs_f64(f.secs);
    *window.lock() = Some((from, to));
    tokio::time::sleep_until(to.into()).await;
    let cpu = cpu.json(pids);
    let after = match leader {
        Some(l) => applied(l).await,
        None => None,
    };
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (s, e) = h.await.expect("writer");
        samples.extend(s);
        errors += e;
    }
    Window {
        samples,
        errors,
        cpu,
        applied: before.zip(after),
    }
}

/// The CPU one commit cost the machine: the cores of `pids` and of this process
/// (the clients), all on the same cores, over the commits per second.
pub fn cpu_us_per_commit(cpu: &Value, rate: f64) -> f64 {
    let cores = num(cpu, "agents_cores") + num(cpu, "bench_cores");
    if rate > 0.0 { cores * 1e6 / rate } else { 0.0 }
}

/// Runs the write phase for each `-clients` count, a row each in the table and in
/// the JSON's `writes`.
pub async fn run_writes(f: &Flags, out: &mut Out, leader: &Client, work: &Arc<Work>, pids: &[u32]) {
    let mut write_rows = Vec::new();
    if !f.clients.is_empty() {
        out.line(format!(
            "writes: POST /v1/commands ({}) to the leader, one at a time per client; latency of acknowledged writes",
            if f.write_nodes {
                "UpsertNode, one fingerprint flipped"
            } else {
                "UpsertAllocs of 1 new allocation"
            }
        ));
        out.line(
            "  (in-agent ms: the leader's mean time from proposal to commit and apply, \
             schedstate_commit_seconds; the rest of a write's latency is HTTP and the request path)",
        );
        out.line(format!(
            "  {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6}  {:>15} {:>7} {:>9} {:>11}",
            "clients",
            "commits/s",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "errors",
            "cores a/b/f",
            "cmd/ent",
            "cpu µs/c",
            "in-agent ms"
        ));
    }
    for (p, &c) in f.clients.iter().enumerate() {
        let mut window = measure_window(f, leader, work, c, p, pids, Some(leader)).await;
        let Rates {
            n,
            lat,
            rate,
            cpu_us,
        } = window.rates(f.secs);
        let Window {
            errors,
            cpu: cpu_json,
            applied,
            ..
        } = window;
        // Commands per entry: how well the leader batched what arrived together (the
        // whole window's, refused no-ops left out).
        let per_entry = match applied {
            Some((a, b)) if b.entries > a.entries => {
                (b.commands - a.commands) / (b.entries - a.entries)
            }
            _ => 0.0,
        };
        let in_agent_ms = match applied {
            Some((a, b)) if b.commits > a.commits => {
                (b.commit_seconds - a.commit_seconds) * 1e3 / (b.commits - a.commits)
            }
            _ => 0.0,
        };
        out.line(format!(
            "  {c:>7} {rate:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {errors:>6}  {:>15} {per_entry:>7.1} {cpu_us:>9.0} {in_agent_ms:>11.3}",
            num(&lat, "p50_ms"),
            num(&lat, "p90_ms"),
            num(&lat, "p99_ms"),
            num(&lat, "max_ms"),
            cpu_cell(&cpu_json)
        ));
        write_rows.push(json!({
            "clients": c,
            "commits": n,
            "commits_per_s": rate,
            "latency": lat,
            "errors": errors,
            "cpu": cpu_json,
            "commands_per_entry": per_entry,
            "in_agent_mean_ms": in_agent_ms,
            "cpu_us_per_commit": cpu_us.round(),
        }));
    }
    out.put("writes", Value::Array(write_rows));
}
