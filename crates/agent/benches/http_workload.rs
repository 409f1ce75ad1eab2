//! The agent over HTTP, through real processes: a 3-agent cluster of the `schedstate`
//! binary on loopback (fsync on, each with its own data directory), driven with
//! [`Client`] from this process.
//!
//! ```text
//! cargo build --release -p schedstate-cli      # the agents run target/release/schedstate
//! cargo bench -p schedstate-agent --bench http_workload -- [-quick] [-json]
//!     [-clients 1,16,64] [-secs 5] [-warmup 0.5] [-write allocs|nodes]
//!     [-waiters 10000] [-waiters-stale] [-rate 200] [-waiter-secs 10]
//!     [-nodes 10000] [-allocs-per-node 4] [-batch 100] [-seed 42] [-bin PATH]
//! ```
//!
//! Phases:
//! 1. **cluster**: three `schedstate agent` processes on free ports; the time until all
//!    three name the same leader.
//! 2. **preload**: `-nodes` nodes (the workload dataset's nodes, with CSI
//!    fingerprints) and `-allocs-per-node` allocations each, `UpsertAllocs` then
//!    `UpsertNodes` per `-batch` nodes, through `POST /v1/commands` on the leader.
//! 3. **writes**: for each `-clients` count, that many clients each sending one
//!    command at a time to the leader for `-secs` after `-warmup`: `UpsertAllocs` of
//!    one new allocation on a random node (`-write allocs`, a scheduler's placement) or
//!    `UpsertNode` of a random node with one fingerprint's health flipped (`-write
//!    nodes`, a client's fingerprint update). Commits/s and the latency of
//!    acknowledged writes.
//! 4. **waiters**: one blocking query per node, `GET /v1/node/<id>/allocations?index=
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

#[path = "../../../benches/workload/dataset.rs"]
#[allow(dead_code)]
mod dataset;
#[path = "../../../benches/common/splitmix.rs"]
#[allow(dead_code)]
mod splitmix;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use schedstate::model::{Allocation, ClientStatus, DesiredStatus, Id, Node};
use schedstate::state::Command;
use schedstate_agent::{Client, ReadOptions};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::dataset::Dataset;
use crate::splitmix::SplitMix64;

/// How long a waiter's blocking query may wait (Nomad's longest).
const WAIT: Duration = Duration::from_secs(300);
/// Descriptors this process or an agent needs besides the waiters' connections.
const FD_SLACK: u64 = 512;
/// Waiters opening their first connection at once (the agents listen with a backlog
/// of 1024; more would overflow it and stall connects for a SYN retry).
const OPEN_CONCURRENCY: usize = 256;
/// Writes in flight at most during the waiter phase.
const MAX_IN_FLIGHT: usize = 256;

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
}

fn usage() -> &'static str {
    "flags: -quick -json -bin PATH -nodes N -allocs-per-node N -batch N -seed N \
     -clients 1,16,64 (0: no write phase) -secs S -warmup S -write allocs|nodes \
     -waiters N (0: no waiter phase) -waiters-stale -rate W -waiter-secs S"
}

fn parse_flags() -> Flags {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let quick = args.iter().any(|a| a.trim_start_matches('-') == "quick");
    let mut f = if quick {
        Flags {
            bin: None,
            nodes: 500,
            allocs_per: 2,
            plugins: 10,
            batch: 100,
            seed: 42,
            clients: vec![1, 16],
            secs: 1.0,
            warmup: 0.2,
            write_nodes: false,
            waiters: 500,
            waiters_stale: false,
            rate: 100.0,
            waiter_secs: 2.0,
            json: false,
            quick,
        }
    } else {
        Flags {
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
        }
    };
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
            "waiters-stale" | "json" | "quick" | "h" | "help" => {
                took = false;
                match name {
                    "waiters-stale" => f.waiters_stale = true,
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
// Output: the table to stdout (stderr with -json), every number into one JSON object.

struct Out {
    json: bool,
    doc: serde_json::Map<String, Value>,
}

impl Out {
    fn line(&self, s: impl AsRef<str>) {
        if self.json {
            eprintln!("{}", s.as_ref());
        } else {
            println!("{}", s.as_ref());
        }
    }

    fn put(&mut self, key: &str, v: Value) {
        self.doc.insert(key.to_string(), v);
    }
}

/// Percentile as the workload benches take it: sorted, index ⌊n·q⌋ (clamped).
fn pct(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn ms(ns: i64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn signed_ns(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from(earlier.duration_since(later).as_nanos()).unwrap_or(i64::MAX),
    }
}

/// p50/p90/p99/max (ms) of `samples` (ns), sorted in place.
fn latency_json(samples: &mut [i64]) -> Value {
    samples.sort_unstable();
    json!({
        "n": samples.len(),
        "p50_ms": ms(pct(samples, 0.50)),
        "p90_ms": ms(pct(samples, 0.90)),
        "p99_ms": ms(pct(samples, 0.99)),
        "max_ms": ms(samples.last().copied().unwrap_or(0)),
        "min_ms": ms(samples.first().copied().unwrap_or(0)),
    })
}

// ---------------------------------------------------------------------------------
// The machine: descriptors, /proc.

/// Raises the soft descriptor limit to the hard one; (soft, hard) after.
fn raise_nofile_limit() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the struct we own and pass by pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return (0, 0);
    }
    let mut target = lim.rlim_max;
    if target == libc::RLIM_INFINITY {
        // NOFILE cannot be unlimited: the kernel's ceiling is fs.nr_open.
        target = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if lim.rlim_cur < target {
        let want = libc::rlimit {
            rlim_cur: target,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            lim.rlim_cur = target;
        }
    }
    (lim.rlim_cur, lim.rlim_max)
}

/// (VmRSS, VmHWM) of `pid` in kB.
fn proc_memory_kb(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Open file descriptors of `pid` ("self" for this process).
fn proc_fds(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// CPU seconds (user + system) of `pid` ("self" for this process): fields 14 and 15
/// of /proc/<pid>/stat, after the ")" of the name; clock ticks of 1/100 s.
fn proc_cpu_secs(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Busy CPU seconds of the whole machine (the first line of /proc/stat).
fn machine_busy_secs() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let line = s.lines().next()?.to_string();
            let f: Vec<f64> = line
                .split_whitespace()
                .skip(1)
                .take(8)
                .map(|x| x.parse().unwrap_or(0.0))
                .collect();
            (f.len() == 8 && line.starts_with("cpu "))
                .then(|| (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / 100.0)
        })
        .unwrap_or(0.0)
}

/// A point to measure CPU from: the agents', this process's, the machine's.
struct CpuMark {
    wall: Instant,
    agents: f64,
    me: f64,
    busy: f64,
}

impl CpuMark {
    fn new(pids: &[u32]) -> CpuMark {
        CpuMark {
            wall: Instant::now(),
            agents: pids.iter().map(|p| proc_cpu_secs(&p.to_string())).sum(),
            me: proc_cpu_secs("self"),
            busy: machine_busy_secs(),
        }
    }

    /// Cores used since the mark: (agents, this process, everything else).
    fn cores(&self, pids: &[u32]) -> (f64, f64, f64) {
        let now = CpuMark::new(pids);
        let wall = (now.wall - self.wall).as_secs_f64().max(1e-9);
        let agents = (now.agents - self.agents) / wall;
        let me = (now.me - self.me) / wall;
        let foreign = ((now.busy - self.busy) / wall - agents - me).max(0.0);
        (round2(agents), round2(me), round2(foreign))
    }

    fn json(&self, pids: &[u32]) -> Value {
        let (a, m, f) = self.cores(pids);
        json!({ "agents_cores": a, "bench_cores": m, "foreign_cores": f })
    }
}

fn cpu_cell(v: &Value) -> String {
    format!(
        "{:.2}/{:.2}/{:.2}",
        v["agents_cores"].as_f64().unwrap_or(0.0),
        v["bench_cores"].as_f64().unwrap_or(0.0),
        v["foreign_cores"].as_f64().unwrap_or(0.0)
    )
}

// ---------------------------------------------------------------------------------
// The cluster: three agent processes.

/// The agents; every process is killed (SIGKILL) and reaped when this is dropped,
/// panics included. Each also gets SIGKILL if this process dies first.
struct Cluster {
    root: tempfile::TempDir,
    procs: Vec<Child>,
    addrs: Vec<String>,
    logs: Vec<PathBuf>,
    clients: Vec<Client>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
        if std::thread::panicking() {
            for (i, log) in self.logs.iter().enumerate() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("--- agent {} log, last lines ({}):", i + 1, log.display());
                for l in &lines[lines.len().saturating_sub(20)..] {
                    eprintln!("{l}");
                }
            }
        }
    }
}

/// The `schedstate` binary: `-bin`, `SCHEDSTATE_BIN`, or beside this benchmark's
/// directory (`target/release/deps/../schedstate`).
fn locate_binary(flag: Option<&Path>) -> PathBuf {
    let (path, from) = if let Some(p) = flag {
        (p.to_path_buf(), "-bin")
    } else if let Some(p) = std::env::var_os("SCHEDSTATE_BIN") {
        (PathBuf::from(p), "SCHEDSTATE_BIN")
    } else {
        let exe = std::env::current_exe().expect("the benchmark's own path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the benchmark runs from target/<profile>/deps");
        (dir.join("schedstate"), "beside the benchmark")
    };
    if !path.is_file() {
        eprintln!(
            "error: no schedstate binary at {} ({from}).\n\
             Build it first:  cargo build --release -p schedstate-cli\n\
             or point to one:  -bin PATH  or  SCHEDSTATE_BIN=PATH",
            path.display()
        );
        std::process::exit(2);
    }
    path
}

/// The newest modification time of a file under `dir`.
fn newest_under(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(m) = e.metadata() else { continue };
        let t = if m.is_dir() {
            newest_under(&e.path())
        } else {
            m.modified().ok()
        };
        newest = newest.max(t);
    }
    newest
}

/// Warns when a source of the binary is newer than it (a stale build measures old
/// code).
fn warn_if_stale(bin: &Path, out: &Out) {
    let Ok(built) = bin.metadata().and_then(|m| m.modified()) else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let sources = [
        "src",
        "crates/engine/src",
        "crates/raft/src",
        "crates/agent/src",
        "crates/cli/src",
    ];
    let newer: Vec<&str> = sources
        .iter()
        .copied()
        .filter(|s| newest_under(&root.join(s)).is_some_and(|t| t > built))
        .collect();
    if !newer.is_empty() {
        out.line(format!(
            "# warning: {} is older than sources in {}: rebuild with `cargo build --release -p schedstate-cli`",
            bin.display(),
            newer.join(", ")
        ));
    }
}

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("its address").port())
        .collect()
}

impl Cluster {
    fn spawn(bin: &Path) -> Cluster {
        let root = tempfile::Builder::new()
            .prefix("schedstate-httpbench-")
            .tempdir()
            .expect("a temp dir");
        let ports = free_ports(3);
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let peers: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect();
        let peers = peers.join(",");
        let mut c = Cluster {
            root,
            procs: Vec::new(),
            addrs: addrs.clone(),
            logs: Vec::new(),
            clients: addrs
                .iter()
                .map(|a| Client::new(a, None).expect("client"))
                .collect(),
        };
        for (i, addr) in addrs.iter().enumerate() {
            let data = c.root.path().join(format!("agent{}", i + 1));
            let log = c.root.path().join(format!("agent{}.log", i + 1));
            let file = File::create(&log).expect("log file");
            let mut cmd = std::process::Command::new(bin);
            cmd.arg("agent")
                .args(["--id", &(i + 1).to_string()])
                .args(["--bind", addr])
                .arg("--data")
                .arg(&data)
                .args(["--peers", &peers])
                .env_remove("SCHEDSTATE_TOKEN")
                .stdin(Stdio::null())
                .stdout(file.try_clone().expect("log file"))
                .stderr(file);
            // SAFETY: the closure runs in the child between fork and exec and calls
            // only prctl, which is async-signal-safe; it allocates nothing.
            unsafe {
                cmd.pre_exec(|| {
                    // The agent dies with this process, even on SIGKILL of this one.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            c.procs.push(child);
            c.logs.push(log);
        }
        c
    }

    fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(Child::id).collect()
    }

    fn check_alive(&mut self) {
        for (i, p) in self.procs.iter_mut().enumerate() {
            if let Ok(Some(status)) = p.try_wait() {
                panic!("agent {} exited: {status}", i + 1);
            }
        }
    }

    /// Waits until all three agents name the same leader; its position.
    async fn wait_leader(&mut self, deadline: Duration) -> usize {
        let start = Instant::now();
        loop {
            self.check_alive();
            let mut named = Vec::new();
            for c in &self.clients {
                named.push(c.leader().await.ok().flatten());
            }
            if let Some(Some(l)) = named.first()
                && named.iter().all(|n| n.as_deref() == Some(l.as_str()))
                && let Some(i) = self.addrs.iter().position(|a| a == l)
            {
                return i;
            }
            assert!(
                start.elapsed() < deadline,
                "no leader after {deadline:?}: the agents named {named:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// (VmRSS, VmHWM) in kB of each agent.
    fn memory(&self) -> Vec<(u64, u64)> {
        self.pids().into_iter().map(proc_memory_kb).collect()
    }

    /// `schedstate_blocking_queries_waiting` of each agent.
    async fn waiting(&self) -> Vec<Option<f64>> {
        let mut out = Vec::new();
        for c in &self.clients {
            let text = c.metrics().await.ok();
            out.push(text.and_then(|t| gauge(&t, "schedstate_blocking_queries_waiting")));
        }
        out
    }
}

/// A sample `name value` of Prometheus text.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok())?
    })
}

fn memory_json(mem: &[(u64, u64)]) -> Value {
    Value::Array(
        mem.iter()
            .enumerate()
            .map(|(i, (rss, hwm))| json!({ "agent": i + 1, "vm_rss_kb": rss, "vm_hwm_kb": hwm }))
            .collect(),
    )
}

// ---------------------------------------------------------------------------------
// Writes.

/// The id of the allocation of write `seq` (UUID-shaped; the dataset's ids are
/// random, so they never collide).
const BENCH_ALLOC_PREFIX: &str = "00000000-0000-4000-8000-";

fn bench_alloc_id(seq: u64) -> String {
    format!("{BENCH_ALLOC_PREFIX}{seq:012x}")
}

fn bench_alloc_seq(id: &str) -> Option<u64> {
    u64::from_str_radix(id.strip_prefix(BENCH_ALLOC_PREFIX)?, 16).ok()
}

/// What the writers share: the dataset and its objects, the write counter.
struct Work {
    ds: Dataset,
    nodes: Vec<Arc<Node>>,
    next_seq: AtomicU64,
    write_nodes: bool,
    namespace: Id,
    task_group: Id,
}

impl Work {
    /// A new allocation on node `i`, as a scheduler places it.
    fn placement(&self, seq: u64, i: usize) -> Allocation {
        Allocation {
            id: Id::from(bench_alloc_id(seq)),
            namespace: self.namespace.clone(),
            job_id: Id::from(format!("bench-job-{:03}", seq % 500)),
            task_group: self.task_group.clone(),
            node_id: self.ds.node_ids[i].clone(),
            desired_status: DesiredStatus::Run,
            client_status: ClientStatus::Pending,
            csi_volume_requests: Vec::new(),
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

    /// The command of the write phase's write `seq`.
    fn command(&self, seq: u64, g: &mut SplitMix64) -> Command {
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

// ---------------------------------------------------------------------------------
// Waiters.

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
        loop {
            let opts = ReadOptions {
                stale,
                ..ReadOptions::default()
            };
            match client.node_allocations(&node, opts).await {
                Ok(r) => break (r.index, alloc_versions(r.value)),
                Err(e) => {
                    if st.errors.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("# waiter open error: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    st.opened.fetch_add(1, Ordering::Relaxed);
    loop {
        let opts = ReadOptions {
            index,
            wait: Some(WAIT),
            stale,
        };
        let r = client.node_allocations(&node, opts).await;
        let t = Instant::now();
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                if st.errors.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!("# waiter error: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
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

// ---------------------------------------------------------------------------------

fn main() {
    let f = parse_flags();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(f));
}

async fn run(f: Flags) {
    let mut out = Out {
        json: f.json,
        doc: serde_json::Map::new(),
    };
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
    let ports = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let v: Vec<u64> = s
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            Some(v.get(1)? - v.first()?)
        })
        .unwrap_or(u64::MAX);
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
        }),
    );

    // ---- cluster ----
    let t = Instant::now();
    let mut cluster = Cluster::spawn(&bin);
    let pids = cluster.pids();
    let li = cluster.wait_leader(Duration::from_secs(60)).await;
    let elected = t.elapsed();
    let leader = cluster.clients[li].clone();
    out.line(format!(
        "cluster: 3 agents {} (pids {:?}), leader agent {} after {:.0} ms; data and logs in {}",
        cluster.addrs.join(" "),
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
    let ds = Dataset::generate(f.nodes, f.allocs_per, f.plugins, f.seed);
    let (nodes, allocs) = ds.objects();
    let cpu = CpuMark::new(&pids);
    let t = Instant::now();
    let mut last = 0;
    let batches = f.nodes.div_ceil(f.batch);
    for b in 0..batches {
        let lo = b * f.batch;
        let hi = (lo + f.batch).min(f.nodes);
        let batch_allocs: Vec<Allocation> = allocs[lo * f.allocs_per..hi * f.allocs_per]
            .iter()
            .map(|a| (**a).clone())
            .collect();
        let batch_nodes: Vec<Node> = nodes[lo..hi].iter().map(|n| (**n).clone()).collect();
        leader
            .apply(&Command::UpsertAllocs {
                allocs: batch_allocs,
            })
            .await
            .expect("preload allocations");
        last = leader
            .apply(&Command::UpsertNodes { nodes: batch_nodes })
            .await
            .expect("preload nodes");
    }
    let total = t.elapsed();
    // Every agent has it: a stale blocking read of the last node on each.
    let last_node = ds.node_ids[f.nodes - 1].to_string();
    for c in &cluster.clients {
        let r = c
            .node(
                &last_node,
                ReadOptions {
                    index: last - 1,
                    wait: Some(Duration::from_secs(60)),
                    stale: true,
                },
            )
            .await
            .expect("read after preload");
        assert!(r.index >= last && r.value.is_some(), "preload not applied");
    }
    let all = t.elapsed();
    let cpu_json = cpu.json(&pids);
    out.line(format!(
        "preload: {} nodes + {} allocs in {} batches ({} entries): {:.0} ms, on all 3 agents after {:.0} ms, {:.0} nodes/s; cores agents/bench/foreign {}",
        f.nodes,
        f.nodes * f.allocs_per,
        batches,
        2 * batches,
        total.as_secs_f64() * 1e3,
        all.as_secs_f64() * 1e3,
        f.nodes as f64 / total.as_secs_f64(),
        cpu_cell(&cpu_json)
    ));
    out.put(
        "preload",
        json!({
            "nodes": f.nodes,
            "allocs": f.nodes * f.allocs_per,
            "batches": batches,
            "entries": 2 * batches,
            "total_ms": round2(total.as_secs_f64() * 1e3),
            "all_applied_ms": round2(all.as_secs_f64() * 1e3),
            "last_index": last,
            "cpu": cpu_json,
            "memory": memory_json(&cluster.memory()),
        }),
    );
    drop(allocs);
    let work = Arc::new(Work {
        ds,
        nodes,
        next_seq: AtomicU64::new(1),
        write_nodes: f.write_nodes,
        namespace: Id::from("default"),
        task_group: Id::from("tg"),
    });

    // ---- writes ----
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
        out.line(format!(
            "  {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6}  {:>15}",
            "clients", "commits/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "cores a/b/f"
        ));
    }
    for (p, &c) in f.clients.iter().enumerate() {
        let stop = Arc::new(AtomicBool::new(false));
        let window = Arc::new(Mutex::new(None));
        let handles: Vec<_> = (0..c)
            .map(|k| {
                tokio::spawn(writer(
                    leader.clone(),
                    work.clone(),
                    f.seed ^ (1000 * (p as u64 + 1) + k as u64),
                    stop.clone(),
                    window.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_secs_f64(f.warmup)).await;
        let cpu = CpuMark::new(&pids);
        let from = Instant::now();
        let to = from + Duration::from_secs_f64(f.secs);
        *window.lock() = Some((from, to));
        tokio::time::sleep_until(to.into()).await;
        let cpu_json = cpu.json(&pids);
        stop.store(true, Ordering::Relaxed);
        let mut samples = Vec::new();
        let mut errors = 0;
        for h in handles {
            let (s, e) = h.await.expect("writer");
            samples.extend(s);
            errors += e;
        }
        let n = samples.len();
        let lat = latency_json(&mut samples);
        let rate = (n as f64 / f.secs).round();
        out.line(format!(
            "  {c:>7} {rate:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {errors:>6}  {:>15}",
            lat["p50_ms"].as_f64().unwrap_or(0.0),
            lat["p90_ms"].as_f64().unwrap_or(0.0),
            lat["p99_ms"].as_f64().unwrap_or(0.0),
            lat["max_ms"].as_f64().unwrap_or(0.0),
            cpu_cell(&cpu_json)
        ));
        write_rows.push(json!({
            "clients": c,
            "commits": n,
            "commits_per_s": rate,
            "latency": lat,
            "errors": errors,
            "cpu": cpu_json,
        }));
    }
    out.put("writes", Value::Array(write_rows));

    // ---- waiters ----
    if f.waiters > 0 {
        run_waiters(&f, &mut out, &cluster, li, &work).await;
    }
    out.put("memory_end", memory_json(&cluster.memory()));
    cluster.check_alive();
    drop(cluster);
    if f.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Value::Object(std::mem::take(&mut out.doc)))
                .expect("json")
        );
    }
}

async fn run_waiters(f: &Flags, out: &mut Out, cluster: &Cluster, li: usize, work: &Arc<Work>) {
    let pids = cluster.pids();
    let leader = cluster.clients[li].clone();
    // Which agents serve the waiters: the leader, or all three (stale).
    let targets: Vec<usize> = if f.waiters_stale {
        vec![0, 1, 2]
    } else {
        vec![li]
    };
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
        let sum: f64 = targets.iter().map(|&i| w[i].unwrap_or(0.0)).sum();
        if sum >= f.waiters as f64 || t.elapsed() > deadline {
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
    let sum_open: f64 = targets
        .iter()
        .map(|&i| waiting_open[i].unwrap_or(0.0))
        .sum();
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
    let acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
    let write_errors = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut g = SplitMix64(f.seed ^ 0xABCD);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f.rate));
    let cpu = CpuMark::new(&pids);
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
                Err(e) => {
                    if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("# write error: {e}");
                    }
                }
            }
            drop(permit);
        });
    }
    while writes.join_next().await.is_some() {}
    let write_secs = t.elapsed().as_secs_f64();
    // Until every acknowledged write reached its waiter (or 10 s).
    let acks = std::mem::take(&mut *acks.lock());
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
    let sum_end: f64 = targets.iter().map(|&i| waiting_end[i].unwrap_or(0.0)).sum();
    let leader_waiting_end = gauge(&leader_metrics, "schedstate_blocking_queries_waiting");

    let f2 = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    out.line(format!(
        "  writes: {} acknowledged of {issued} issued in {write_secs:.1} s ({:.0}/s), {} errors; write latency p50 {:.2} ms p99 {:.2} ms",
        acks.len(),
        acks.len() as f64 / write_secs,
        write_errors.load(Ordering::Relaxed),
        f2(&write_lat, "p50_ms"),
        f2(&write_lat, "p99_ms"),
    ));
    out.line(format!(
        "  wake latency (write acknowledged → waiter's answer): p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} of {} answers arrived before the write's acknowledgement)",
        f2(&wake, "p50_ms"),
        f2(&wake, "p90_ms"),
        f2(&wake, "p99_ms"),
        f2(&wake, "max_ms"),
        before_ack,
        wake["n"]
    ));
    out.line(format!(
        "  wake latency (write sent → waiter's answer):         p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        f2(&wake_send, "p50_ms"),
        f2(&wake_send, "p90_ms"),
        f2(&wake_send, "p99_ms"),
        f2(&wake_send, "max_ms"),
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
            "write_errors": write_errors.load(Ordering::Relaxed),
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
