//! The agent over HTTP, through real processes: a 3-agent cluster of the `schedstate-server`
//! binary on loopback (fsync on, each with its own data directory), driven with
//! [`Client`] from this process.
//!
//! ```text
//! cargo build --release -p schedstate-server   # the agents run target/release/schedstate-server
//! cargo bench -p schedstate-agent --bench http_workload -- [-quick] [-json]
//!     [-clients 1,16,64] [-secs 5] [-warmup 0.5] [-write allocs|nodes]
//!     [-waiters 10000] [-waiters-stale] [-rate 200] [-waiter-secs 10]
//!     [-nodes 10000] [-allocs-per-node 4] [-batch 100] [-seed 42] [-bin PATH]
//!     [-durability] [-probe 2000] [-pace 0] [-volumes 0] [-reads 0] [-floor]
//! ```
//!
//! Phases:
//! 1. **cluster**: three `schedstate agent` processes on free ports; the time until all
//!    three name the same leader.
//! 2. **preload**: `-nodes` nodes (the workload dataset's nodes, with CSI
//!    fingerprints) and `-allocs-per-node` allocations each, `UpsertAllocs` then
//!    `UpsertNodes` per `-batch` nodes, through `POST /v1/commands` on the leader;
//!    then `-volumes` CSI volumes on the dataset's plugins (`RegisterCsiVolumes`).
//! 3. **writes**: for each `-clients` count, that many clients each sending one
//!    command at a time to the leader for `-secs` after `-warmup`: `UpsertAllocs` of
//!    one new allocation on a random node (`-write allocs`, a scheduler's placement) or
//!    `UpsertNode` of a random node with one fingerprint's health flipped (`-write
//!    nodes`, a client's fingerprint update). Commits/s and the latency of
//!    acknowledged writes; the leader's commands per log entry over the window (from
//!    its `/v1/metrics`) and the CPU (agents and this process) per commit.
//! 4. **floor** (`-floor`): the same writers, one client count after another,
//!    against a server that answers at once (`floor.rs`): what HTTP itself costs.
//! 5. **reads** (`-reads N`): N consistent point reads one at a time through a
//!    follower, then N on the leader (`reads.rs`).
//! 6. **waiters**: one blocking query per node, `GET /v1/node/<id>/allocations?index=
//!    <its current index>&wait=5m`, for `-waiters` nodes at once (as each Nomad client
//!    watches its own allocations), all on the leader (consistent reads; the default)
//!    or, with `-waiters-stale`, spread over the three agents with `?stale` (what
//!    Nomad clients get from followers). Each waiter re-blocks with the index of each
//!    answer. While they are all open, one new allocation per write on a random
//!    watched node at `-rate` writes/s for `-waiter-secs`. Reported: wake latency
//!    (the write's acknowledgement → the waiter's answer; negative when the answer
//!    beat the acknowledgement, also from the write's send), wakes, false wakes (an
//!    answer whose index did not move, or whose allocations did not change), writes
//!    never seen by their waiter, `schedstate_blocking_queries_waiting` from
//!    `/v1/metrics` (asserted ≥ the waiters opened, less 1 %), and each agent's
//!    VmRSS/VmHWM before the waiters, with them open, after the writes and after they
//!    closed.
//! 7. **durability** (`-durability`): at the preloaded size, point-read and node-write
//!    latency one at a time (`-probe` each), then writes until every agent built a
//!    snapshot and purged its log (snapshot size, build time, log before and after,
//!    the largest data directory against the snapshot), a follower restarted, and the
//!    other wiped and started empty (time to serve and to catch up). See
//!    `durability.rs`.
//!
//! File descriptors: every waiter holds one connection, so this process and the
//! agent(s) serving the waiters need more than `-waiters` descriptors. The soft limit
//! is raised to the hard limit at start (the agents inherit it); a hard limit too low
//! for `-waiters` stops the run with a message.
//!
//! Output: a table (stdout; stderr with `-json`), and with `-json` one JSON object
//! with every number on stdout. Every phase also reports CPU: cores used by the agents,
//! by this process, and by anything else on the machine (`foreign`: another build on
//! the same cores makes the numbers meaningless).
//!
//! Layout: `cluster` (the binary, the agent processes, leader and gauges), `system`
//! (/proc: memory, descriptors, CPU; the descriptor limit), `report` (the table and
//! JSON, percentiles), and the phases in the order they run: `preload`, `writes`, `floor`,
//! `reads`, `waiters`, `durability`.

#[path = "../../../../benches/workload/dataset.rs"]
#[allow(dead_code)]
mod dataset;
#[path = "../../../../benches/common/splitmix.rs"]
#[allow(dead_code)]
mod splitmix;

mod cluster;
mod durability;
mod floor;
mod preload;
mod reads;
mod report;
mod system;
mod waiters;
mod writes;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{Cluster, Security, locate_binary, warn_if_stale};
use crate::report::{Out, memory_json, round2};
use crate::system::{ephemeral_ports, raise_nofile_limit};

/// Descriptors this process or an agent needs besides the waiters' connections.
const FD_SLACK: u64 = 512;

// ---------------------------------------------------------------------------------
// Flags

struct Flags {
    bin: Option<PathBuf>,
    nodes: usize,
    allocs_per: usize,
    plugins: usize,
    batch: usize,
    seed: u64,
    clients: Vec<usize>,
    secs: f64,
    warmup: f64,
    write_nodes: bool,
    waiters: usize,
    waiters_stale: bool,
    rate: f64,
    waiter_secs: f64,
    json: bool,
    quick: bool,
    security: Security,
    /// Run the durability phase (`durability.rs`).
    durability: bool,
    /// Requests of each kind in the durability phase's latency probe.
    probe: usize,
    /// Preload: wait for every agent every this many batches (0: only at the end).
    pace: usize,
    /// Preload: CSI volumes registered after the nodes, on the dataset's plugins.
    volumes: usize,
    /// Consistent point reads through a follower (and on the leader); 0: none.
    reads: usize,
    /// Run the floor phase (`floor.rs`).
    floor: bool,
}

fn usage() -> &'static str {
    "flags: -quick -json -bin PATH -nodes N -allocs-per-node N -batch N -seed N \
     -clients 1,16,64 (0: no write phase) -secs S -warmup S -write allocs|nodes \
     -waiters N (0: no waiter phase) -waiters-stale -rate W -waiter-secs S \
     -durability (snapshot, compaction, restart, wiped follower) -probe N \
     -pace B (preload: wait for every agent every B batches) \
     -volumes N (preload: CSI volumes on the plugins, after the nodes) \
     -reads N (consistent point reads through a follower, then the leader) \
     -floor (the same writes to a server that answers at once: HTTP's own cost) \
     -security tls|acl|dev (default tls: TLS, cluster key and ACL, as deployed)"
}

fn parse_flags() -> Flags {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let quick = args.iter().any(|a| a.trim_start_matches('-') == "quick");
    let mut f = Flags {
        bin: None,
        nodes: 10_000,
        allocs_per: 4,
        plugins: 10,
        batch: 100,
        seed: 42,
        clients: vec![1, 16, 64],
        secs: 5.0,
        warmup: 0.5,
        write_nodes: false,
        waiters: 10_000,
        waiters_stale: false,
        rate: 200.0,
        waiter_secs: 10.0,
        json: false,
        quick,
        security: Security::Tls,
        durability: false,
        probe: 2_000,
        pace: 0,
        volumes: 0,
        reads: 0,
        floor: false,
    };
    if quick {
        // A smaller dataset and shorter phases; flags still override these.
        f = Flags {
            nodes: 500,
            allocs_per: 2,
            clients: vec![1, 16],
            secs: 1.0,
            warmup: 0.2,
            waiters: 500,
            rate: 100.0,
            waiter_secs: 2.0,
            ..f
        };
    }
    let mut i = 0;
    while i < args.len() {
        let name = args[i].trim_start_matches('-');
        let value = args.get(i + 1).cloned().unwrap_or_default();
        let bad = |what: &str| -> ! { panic!("-{name} {what}\n{}", usage()) };
        let mut took = true;
        match name {
            "bin" => f.bin = Some(PathBuf::from(value)),
            "nodes" => f.nodes = value.parse().unwrap_or_else(|_| bad("N")),
            "allocs-per-node" => f.allocs_per = value.parse().unwrap_or_else(|_| bad("N")),
            "batch" => f.batch = value.parse().unwrap_or_else(|_| bad("N")),
            "seed" => f.seed = value.parse().unwrap_or_else(|_| bad("N")),
            "clients" => {
                f.clients = value
                    .split(',')
                    .map(|c| c.trim().parse().unwrap_or_else(|_| bad("a,b,c")))
                    .filter(|&c| c > 0)
                    .collect();
            }
            "secs" => f.secs = value.parse().unwrap_or_else(|_| bad("SECONDS")),
            "warmup" => f.warmup = value.parse().unwrap_or_else(|_| bad("SECONDS")),
            "write" => match value.as_str() {
                "allocs" => f.write_nodes = false,
                "nodes" => f.write_nodes = true,
                _ => bad("allocs|nodes"),
            },
            "waiters" => f.waiters = value.parse().unwrap_or_else(|_| bad("N")),
            "rate" => f.rate = value.parse().unwrap_or_else(|_| bad("WRITES_PER_S")),
            "waiter-secs" => f.waiter_secs = value.parse().unwrap_or_else(|_| bad("SECONDS")),
            "probe" => f.probe = value.parse().unwrap_or_else(|_| bad("N")),
            "pace" => f.pace = value.parse().unwrap_or_else(|_| bad("BATCHES")),
            "volumes" => f.volumes = value.parse().unwrap_or_else(|_| bad("N")),
            "reads" => f.reads = value.parse().unwrap_or_else(|_| bad("N")),
            "security" => {
                f.security = match value.as_str() {
                    "tls" => Security::Tls,
                    "acl" => Security::Acl,
                    "dev" => Security::Dev,
                    _ => bad("tls|acl|dev"),
                }
            }
            "waiters-stale" | "durability" | "floor" | "json" | "quick" | "h" | "help" => {
                took = false;
                match name {
                    "waiters-stale" => f.waiters_stale = true,
                    "floor" => f.floor = true,
                    "durability" => f.durability = true,
                    "json" => f.json = true,
                    "quick" => {}
                    _ => {
                        println!("{}", usage());
                        std::process::exit(0);
                    }
                }
            }
            other => panic!("unknown flag -{other}\n{}", usage()),
        }
        i += if took { 2 } else { 1 };
    }
    assert!(
        f.batch > 0 && f.allocs_per > 0,
        "-batch and -allocs-per-node ≥ 1"
    );
    assert!(f.rate > 0.0, "-rate > 0");
    f.nodes = f.nodes.max(f.waiters).max(1);
    f
}

// ---------------------------------------------------------------------------------

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(floor::SERVE_ARG) {
        floor::serve_main(&args[1..]);
    }
    let f = parse_flags();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(f));
}

async fn run(f: Flags) {
    let mut out = Out::new(f.json);
    let (soft, hard) = raise_nofile_limit();
    // This process holds one connection per waiter; so does the agent serving them
    // (all of them on the leader unless -waiters-stale).
    let need = f.waiters as u64 + FD_SLACK;
    if f.waiters > 0 && soft < need {
        eprintln!(
            "error: {} waiters need about {need} file descriptors (one connection each, in \
             this process and in the agent serving them), but the limit is {soft} (hard \
             limit {hard}).\nRaise it (`ulimit -n {need}` as root, or the hard limit in \
             /etc/security/limits.conf) or run with -waiters {}.",
            f.waiters,
            soft.saturating_sub(FD_SLACK)
        );
        std::process::exit(2);
    }
    let ports = ephemeral_ports();
    if f.waiters as u64 + 1000 > ports {
        out.line(format!(
            "# warning: {} waiters leave little of the {ports} ephemeral ports for anything else",
            f.waiters
        ));
    }
    let bin = locate_binary(f.bin.as_deref());
    warn_if_stale(&bin, &out);
    out.line(format!(
        "# http_workload bin={} nofile={soft}/{hard} nodes={} allocs-per-node={} clients={:?} secs={} warmup={} write={} waiters={} waiters-target={} rate={}/s waiter-secs={}{}",
        bin.display(),
        f.nodes,
        f.allocs_per,
        f.clients,
        f.secs,
        f.warmup,
        if f.write_nodes { "UpsertNode" } else { "UpsertAllocs(1)" },
        f.waiters,
        if f.waiters_stale { "all-3-stale" } else { "leader-consistent" },
        f.rate,
        f.waiter_secs,
        if f.quick { " (quick)" } else { "" }
    ));
    out.put(
        "meta",
        json!({
            "bench": "schedstate-agent http_workload",
            "bin": bin.display().to_string(),
            "nofile_soft": soft,
            "nofile_hard": hard,
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "nodes": f.nodes,
            "allocs_per_node": f.allocs_per,
            "batch": f.batch,
            "seed": f.seed,
            "clients": f.clients,
            "secs": f.secs,
            "warmup": f.warmup,
            "write": if f.write_nodes { "nodes" } else { "allocs" },
            "waiters": f.waiters,
            "waiters_stale": f.waiters_stale,
            "rate": f.rate,
            "waiter_secs": f.waiter_secs,
            "quick": f.quick,
            "security": f.security.name(),
            "reads": f.reads,
        }),
    );

    // ---- cluster ----
    let t = Instant::now();
    let mut cluster = Cluster::spawn(&bin, f.security);
    let pids = cluster.pids();
    let li = cluster.wait_leader(Duration::from_secs(60)).await;
    let elected = t.elapsed();
    cluster.bootstrap_acl(li).await;
    out.line(format!(
        "cluster: 3 agents {} ({}; pids {:?}), leader agent {} after {:.0} ms; data and logs in {}",
        cluster.addrs.join(" "),
        f.security.name(),
        pids,
        li + 1,
        elected.as_secs_f64() * 1e3,
        cluster.root.path().display()
    ));
    out.put(
        "cluster",
        json!({
            "addrs": cluster.addrs,
            "pids": pids,
            "leader": li + 1,
            "leader_elected_ms": round2(elected.as_secs_f64() * 1e3),
            "memory_started": memory_json(&cluster.memory()),
        }),
    );

    // ---- preload ----
    let work = Arc::new(preload::preload(&f, &mut out, &cluster, li).await);

    // ---- writes ----
    writes::run_writes(&f, &mut out, &cluster.clients[li], &work, &pids).await;

    // ---- floor ----
    if f.floor && !f.clients.is_empty() {
        floor::run_floor(&f, &mut out, &cluster, &work).await;
    }

    // ---- reads ----
    if f.reads > 0 {
        reads::run_reads(&f, &mut out, &cluster, li, &work).await;
    }

    // ---- waiters ----
    if f.waiters > 0 {
        waiters::run_waiters(&f, &mut out, &cluster, li, &work).await;
    }

    // ---- durability ----
    if f.durability {
        durability::run_durability(&f, &mut out, &mut cluster, li, &work).await;
    }
    out.put("memory_end", memory_json(&cluster.memory()));
    cluster.check_alive();
    drop(cluster);
    out.finish();
}
