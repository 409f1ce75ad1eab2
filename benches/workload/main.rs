//! The go-memdb peer workload (`../shared/peers/go-memdb`, RESULTS.md §4), ported to
//! schedstate's public API: same flags, same SplitMix64 data, the identical
//! `# dataset …` check line, and one `name ns_per_op=… ops=… key=value …` line per
//! workload in the peer's order (plus `-json PATH`).
//!
//! ```sh
//! cargo bench --bench workload                      # the peer's defaults (10,000 nodes)
//! cargo bench --bench workload -- -nodes 2000 -json /tmp/rs.json
//! cargo bench --bench workload -- -dataset-check    # only the dataset line
//! scripts/compare-peer.sh                           # both peers, side by side
//! ```
//!
//! Where the port differs from the Go program, and why (each also printed as a
//! `# note` line next to its result):
//! - `bulk_load_raw` inserts node and alloc rows at the engine level
//!   (`StateStore::db().begin_write`, `tables().nodes` / `allocs`), 1,000 nodes per
//!   transaction as the peer: commands always derive plugins, and the peer's raw load
//!   is exactly "the same inserts without derivation".
//! - `bulk_load` goes through commands: per node one `upsert_allocs` (its allocs) and
//!   one `upsert_node`, each its own transaction. The command API has no multi-node
//!   transaction, so the peer's 10 × 1,000-node batches are 2 × N commands here;
//!   `commit_ms_total` is the time from the `apply_with` hook (run just before
//!   publishing) to the return of every command.
//! - Writes the peer makes to a plugin row alone (`blocking_wake`, `watch_granularity`)
//!   have no command (plugins are derived from node fingerprints): they are engine
//!   transactions that read the plugin, store a copy with a new `modify_index` and
//!   commit, the same transaction shape as the peer's `touchPluginTxn`. Alloc writes
//!   are `upsert_allocs` commands.
//! - Watches register when a set first waits; the granularity checks register each set
//!   (a zero-length wait) before the commit, then read `is_fired` after it, as the peer
//!   does a non-blocking receive (both stores fire before `commit` returns).
//! - Memory is the bytes currently allocated, counted by this binary's global allocator
//!   (`heap_alloc_*`, comparable with Go's `HeapAlloc` after a GC), plus the resident set
//!   (`rss_mib`). There is no GC and so no `HeapInuse`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use schedstate::db::{Key, WaitOutcome, WatchSet, WriteTxn};
use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiVolume, DesiredStatus,
    Id, Node,
};
use schedstate::state::{Command, StateError, StateStore, StateView, Tables};

// ---------------------------------------------------------------------------
// Counting global allocator: bytes currently allocated, in per-thread-slot shards so
// that two busy threads (the concurrent phase) do not bounce one cache line.

const SHARDS: usize = 16;

#[repr(align(64))]
struct Shard(AtomicIsize);

static LIVE: [Shard; SHARDS] = [const { Shard(AtomicIsize::new(0)) }; SHARDS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised, no destructor: safe to touch from inside the allocator.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> &'static AtomicIsize {
    let slot = SLOT
        .try_with(|s| {
            let mut v = s.get();
            if v == usize::MAX {
                v = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SHARDS;
                s.set(v);
            }
            v
        })
        .unwrap_or(0);
    &LIVE[slot].0
}

fn isize_of(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are
// only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            shard().fetch_add(isize_of(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            shard().fetch_add(isize_of(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) };
        shard().fetch_sub(isize_of(layout.size()), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shard().fetch_add(
                isize_of(new_size) - isize_of(layout.size()),
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live bytes once superseded versions that readers let go of have been freed: the
/// counterpart of the peer's `runtime.GC()` before it reads the heap (schedstate frees
/// such versions on the next write, or at once with `Db::reclaim`).
fn settled_live_bytes(store: &StateStore) -> u64 {
    store.db().reclaim();
    live_bytes()
}

/// Bytes currently allocated by this process through the global allocator.
fn live_bytes() -> u64 {
    let sum: isize = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    u64::try_from(sum).unwrap_or(0)
}

/// Resident set size in bytes (from /proc/self/status), 0 if unavailable.
fn rss_bytes() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn mib(b: u64) -> f64 {
    (b as f64 / 1_048_576.0 * 100.0).round() / 100.0
}

// ---------------------------------------------------------------------------
// SplitMix64, exactly as the peer (RESULTS.md §4.2).

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `next() % n` (the modulo bias is part of the spec).
    fn intn(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Two draws a, b; the 16 big-endian bytes of a‖b as an 8-4-4-4-12 hex UUID.
    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }
}

// ---------------------------------------------------------------------------
// Flags: the peer's, parsed by hand (`-name value`, `-name=value`, `--name value`).

#[derive(Debug, Clone)]
struct Flags {
    nodes: usize,
    allocs_per_node: usize,
    plugins: usize,
    batch: usize,
    volumes: usize,
    txns: usize,
    snapshot_ops: usize,
    reads: usize,
    scans: usize,
    denorm_reps: usize,
    wake_rounds: usize,
    wake_many_rounds: usize,
    concurrent_secs: f64,
    mem_txns: usize,
    seed: u64,
    json: Option<String>,
    dataset_check: bool,
}

impl Default for Flags {
    fn default() -> Self {
        Flags {
            nodes: 10_000,
            allocs_per_node: 10,
            plugins: 10,
            batch: 1000,
            volumes: 1000,
            txns: 10_000,
            snapshot_ops: 1_000_000,
            reads: 1_000_000,
            scans: 100_000,
            denorm_reps: 20,
            wake_rounds: 1000,
            wake_many_rounds: 200,
            concurrent_secs: 3.0,
            mem_txns: 10_000,
            seed: 42,
            json: None,
            dataset_check: false,
        }
    }
}

const USAGE: &str = "usage: workload [-nodes N] [-allocs-per-node N] [-plugins N] [-batch N] \
[-volumes N] [-txns N] [-snapshot-ops N] [-reads N] [-scans N] [-denorm-reps N] \
[-wake-rounds N] [-wake-many-rounds N] [-concurrent-secs S] [-mem-txns N] [-seed N] \
[-json PATH] [-dataset-check]";

fn parse_flags(args: &[String]) -> Result<Flags, String> {
    let mut f = Flags::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--bench" || arg == "--test" {
            continue; // passed by cargo
        }
        let Some(stripped) = arg.strip_prefix('-') else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        let stripped = stripped.strip_prefix('-').unwrap_or(stripped);
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (stripped, None),
        };
        // Boolean flags.
        match name {
            "dataset-check" => {
                f.dataset_check = inline.as_deref() != Some("false");
                continue;
            }
            "nomad-scan-copy" => {
                // The peer's Nomad-exact variant copies every plugin in the removal
                // sweep; this store has no such copy (persistent instance maps).
                eprintln!("# note: -nomad-scan-copy has no equivalent here; ignored");
                continue;
            }
            "h" | "help" => return Err(USAGE.to_string()),
            _ => {}
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("flag -{name} needs a value"))?,
        };
        let num = |v: &str| -> Result<usize, String> {
            v.parse::<usize>()
                .map_err(|e| format!("-{name} {v:?}: {e}"))
        };
        match name {
            "nodes" => f.nodes = num(&value)?,
            "allocs-per-node" => f.allocs_per_node = num(&value)?,
            "plugins" => f.plugins = num(&value)?,
            "batch" => f.batch = num(&value)?,
            "volumes" => f.volumes = num(&value)?,
            "txns" => f.txns = num(&value)?,
            "snapshot-ops" => f.snapshot_ops = num(&value)?,
            "reads" => f.reads = num(&value)?,
            "scans" => f.scans = num(&value)?,
            "denorm-reps" => f.denorm_reps = num(&value)?,
            "wake-rounds" => f.wake_rounds = num(&value)?,
            "wake-many-rounds" => f.wake_many_rounds = num(&value)?,
            "mem-txns" => f.mem_txns = num(&value)?,
            "concurrent-secs" => {
                f.concurrent_secs = value
                    .parse::<f64>()
                    .map_err(|e| format!("-concurrent-secs {value:?}: {e}"))?;
            }
            "seed" => {
                f.seed = value
                    .parse::<u64>()
                    .map_err(|e| format!("-seed {value:?}: {e}"))?;
            }
            "json" => f.json = Some(value),
            "cpuprofile" => eprintln!("# note: -cpuprofile is not supported here (use perf)"),
            _ => return Err(format!("unknown flag -{name}\n{USAGE}")),
        }
    }
    if f.plugins < 2 || f.allocs_per_node < 1 {
        return Err("need -plugins >= 2 and -allocs-per-node >= 1".into());
    }
    if f.nodes < 2 || f.batch < 1 || f.volumes < 1 {
        return Err("need -nodes >= 2, -batch >= 1 and -volumes >= 1".into());
    }
    Ok(f)
}

// ---------------------------------------------------------------------------
// Dataset (RESULTS.md §4.2).

struct Dataset {
    nodes: usize,
    allocs_per: usize,
    plugins: usize,
    plugin_ids: Vec<Id>,
    node_ids: Vec<Id>,
    /// Two distinct node-plugin indexes per node.
    node_plugins: Vec<[usize; 2]>,
    /// Controller fingerprint for `node_plugins[i][0]`.
    has_ctrl: Vec<bool>,
    /// Node fingerprint `[0]` references a never-inserted alloc.
    missing_alloc: Vec<bool>,
    /// Allocs of node i: `[i * allocs_per, (i + 1) * allocs_per)`.
    alloc_ids: Vec<Id>,
}

fn provider(p: usize) -> String {
    format!("org.example.csi.driver-{p:02}")
}

fn missing_alloc_id(i: usize) -> String {
    format!("ffffffff-0000-0000-0000-{i:012x}")
}

impl Dataset {
    fn generate(nodes: usize, allocs_per: usize, plugins: usize, seed: u64) -> Dataset {
        let mut g = Rng(seed);
        let mut ds = Dataset {
            nodes,
            allocs_per,
            plugins,
            plugin_ids: (0..plugins)
                .map(|p| Id::from(format!("plugin-{p:02}")))
                .collect(),
            node_ids: Vec::with_capacity(nodes),
            node_plugins: Vec::with_capacity(nodes),
            has_ctrl: Vec::with_capacity(nodes),
            missing_alloc: Vec::with_capacity(nodes),
            alloc_ids: Vec::with_capacity(nodes * allocs_per),
        };
        for i in 0..nodes {
            ds.node_ids.push(Id::from(g.uuid()));
            let p1 = g.intn(plugins);
            let p2 = (p1 + 1 + g.intn(plugins - 1)) % plugins;
            ds.node_plugins.push([p1, p2]);
            ds.has_ctrl.push(i % 10 == 0);
            ds.missing_alloc.push(i % 20 == 7);
            for _ in 0..allocs_per {
                ds.alloc_ids.push(Id::from(g.uuid()));
            }
        }
        ds
    }

    /// The peer's check line, byte for byte.
    fn check_line(&self) -> String {
        let mut nc = vec![0usize; self.plugins];
        let mut cc = vec![0usize; self.plugins];
        for (i, p) in self.node_plugins.iter().enumerate() {
            nc[p[0]] += 1;
            nc[p[1]] += 1;
            if self.has_ctrl[i] {
                cc[p[0]] += 1;
            }
        }
        let join = |v: &[usize]| {
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for id in self.node_ids.iter().chain(&self.alloc_ids) {
            for &b in id.as_bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01B3);
            }
        }
        format!(
            "# dataset node0={} alloc0={} node0_plugins={},{} plugin_nodes={} plugin_ctrls={} fnv1a64_ids={h:016x}",
            self.node_ids[0],
            self.alloc_ids[0],
            self.node_plugins[0][0],
            self.node_plugins[0][1],
            join(&nc),
            join(&cc)
        )
    }

    fn node_fingerprint(&self, i: usize, k: usize) -> Arc<CsiInfo> {
        let p = self.node_plugins[i][k];
        let alloc_id = if k == 0 && self.missing_alloc[i] {
            Id::from(missing_alloc_id(i))
        } else {
            self.alloc_ids[i * self.allocs_per + (k % self.allocs_per)].clone()
        };
        Arc::new(CsiInfo {
            plugin_id: self.plugin_ids[p].clone(),
            alloc_id,
            healthy: true,
            health_description: "healthy".into(),
            provider: provider(p),
            provider_version: "1.2.3".into(),
            requires_controller_plugin: true,
            node_info: Some(CsiNodeInfo {
                id: self.node_ids[i].to_string(),
                max_volumes: 64,
                accessible_topology: None,
                requires_node_stage_volume: true,
            }),
            ..Default::default()
        })
    }

    /// The row objects, built before any timing (as the peer does).
    fn objects(&self) -> (Vec<Arc<Node>>, Vec<Arc<Allocation>>) {
        let default_ns = Id::from("default");
        let mut nodes = Vec::with_capacity(self.nodes);
        let mut allocs = Vec::with_capacity(self.nodes * self.allocs_per);
        for i in 0..self.nodes {
            let nid = &self.node_ids[i];
            let mut n = Node::new(nid.clone(), format!("node-{i:05}"));
            for k in 0..2 {
                let f = self.node_fingerprint(i, k);
                n.csi_node_plugins.insert(f.plugin_id.clone(), f);
            }
            if self.has_ctrl[i] {
                let p = self.node_plugins[i][0];
                let f = Arc::new(CsiInfo {
                    plugin_id: self.plugin_ids[p].clone(),
                    alloc_id: self.alloc_ids[i * self.allocs_per + (2 % self.allocs_per)].clone(),
                    healthy: true,
                    health_description: "healthy".into(),
                    provider: provider(p),
                    provider_version: "1.2.3".into(),
                    requires_controller_plugin: true,
                    controller_info: Some(CsiControllerInfo {
                        supports_attach_detach: true,
                        supports_list_volumes: true,
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                n.csi_controller_plugins.insert(f.plugin_id.clone(), f);
            }
            nodes.push(Arc::new(n));
            for j in 0..self.allocs_per {
                let k = i * self.allocs_per + j;
                allocs.push(Arc::new(Allocation {
                    id: self.alloc_ids[k].clone(),
                    namespace: default_ns.clone(),
                    job_id: Id::from(format!("job-{:03}", k % 500)),
                    task_group: "tg".into(),
                    node_id: nid.clone(),
                    desired_status: DesiredStatus::Run,
                    client_status: ClientStatus::Running,
                    csi_volume_requests: Vec::new(),
                    create_index: 0,
                    modify_index: 0,
                }));
            }
        }
        (nodes, allocs)
    }
}

// ---------------------------------------------------------------------------
// Reporting: the peer's line format, its per-phase foreign-load figure, JSON.

struct ResultRow {
    name: String,
    ns_per_op: f64,
    ops: u64,
    extra: Vec<(String, f64)>,
}

/// The peer's number format: integers plain, everything else with 2 decimals.
fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}")
    }
}

/// (busy seconds of the whole machine, CPU seconds of this process).
fn cpu_sample() -> (f64, f64) {
    let busy = std::fs::read_to_string("/proc/stat")
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
        .unwrap_or(0.0);
    // Fields 14 and 15 of /proc/self/stat (utime, stime), after the ")" of the name.
    let own = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(0.0);
    (busy, own)
}

struct Reporter {
    results: Vec<ResultRow>,
    mark_wall: Instant,
    mark_cpu: (f64, f64),
}

impl Reporter {
    fn new() -> Self {
        Reporter {
            results: Vec::new(),
            mark_wall: Instant::now(),
            mark_cpu: cpu_sample(),
        }
    }

    fn mark(&mut self) {
        self.mark_wall = Instant::now();
        self.mark_cpu = cpu_sample();
    }

    /// Average number of cores busy with other processes since the last mark.
    fn foreign(&self) -> f64 {
        let wall = self.mark_wall.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        let (busy, own) = cpu_sample();
        let f = ((busy - self.mark_cpu.0) - (own - self.mark_cpu.1)) / wall;
        (f.max(0.0) * 100.0).round() / 100.0
    }

    fn emit(&mut self, name: &str, ns_per_op: f64, ops: u64, extra: &[(&str, f64)]) {
        let mut extra: Vec<(String, f64)> =
            extra.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        extra.push(("foreign_cores".into(), self.foreign()));
        let mut line = format!(
            "{name} ns_per_op={} ops={ops}",
            fmt_num((ns_per_op * 10.0).round() / 10.0)
        );
        for (k, v) in &extra {
            line.push_str(&format!(" {k}={}", fmt_num(*v)));
        }
        println!("{line}");
        self.results.push(ResultRow {
            name: name.into(),
            ns_per_op,
            ops,
            extra,
        });
        self.mark();
    }

    fn write_json(&self, path: &str, meta: serde_json::Value) -> std::io::Result<()> {
        let results: Vec<serde_json::Value> = self
            .results
            .iter()
            .map(|r| {
                let extra: serde_json::Map<String, serde_json::Value> = r
                    .extra
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::json!(v)))
                    .collect();
                serde_json::json!({
                    "name": r.name,
                    "ns_per_op": r.ns_per_op,
                    "ops": r.ops,
                    "extra": extra,
                })
            })
            .collect();
        let doc = serde_json::json!({ "meta": meta, "results": results });
        let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64
}

/// Percentile as the peer takes it: sorted, index ⌊n·q⌋ (clamped).
fn pct(samples: &[i64], q: f64) -> i64 {
    if samples.is_empty() {
        return 0;
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    let i = ((s.len() as f64 * q) as usize).min(s.len() - 1);
    s[i]
}

/// Nanoseconds to microseconds with 2 decimals.
fn us(ns: i64) -> f64 {
    (ns as f64 / 10.0).round() / 100.0
}

fn signed_ns(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from(earlier.duration_since(later).as_nanos()).unwrap_or(i64::MAX),
    }
}

/// Longest any wait in the wake workloads may take before the run fails loudly.
const WAKE_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// The store under test and its write paths.

struct Ctx {
    store: StateStore,
    t: Tables,
    ds: Arc<Dataset>,
    /// Last log index used; one per write transaction (command or engine txn).
    idx: u64,
}

impl Ctx {
    fn next_index(&mut self) -> u64 {
        self.idx += 1;
        self.idx
    }

    /// Engine transaction that stores a copy of plugin `pid` with a new modify index
    /// (the peer's `touchPluginTxn`; no command writes a plugin alone). Not committed.
    fn touch_plugin_txn(&mut self, pid: &str) -> WriteTxn {
        let index = self.next_index();
        let mut txn = self.store.db().begin_write(index).expect("begin_write");
        let p = txn
            .view()
            .get(self.t.plugins, &Key::str(pid))
            .expect("plugin to touch");
        let mut cp = (*p).clone();
        cp.modify_index = index;
        txn.insert(self.t.plugins, Arc::new(cp))
            .expect("insert plugin");
        txn
    }

    fn touch_plugin(&mut self, pid: &str) {
        self.touch_plugin_txn(pid).commit().expect("commit");
    }

    /// `upsert_allocs` of a copy of alloc `aid` (the peer's `touchAllocTxn`).
    fn touch_alloc(&mut self, aid: &str) {
        let a = self.alloc_copy(aid);
        let index = self.next_index();
        self.store
            .upsert_allocs(index, vec![a])
            .expect("upsert_allocs");
    }

    fn alloc_copy(&self, aid: &str) -> Allocation {
        let snap = self.store.snapshot();
        let a = snap.view().alloc_by_id(aid).expect("alloc to touch");
        (*a).clone()
    }

    /// Reads through a watched view, registers the watch set, runs `write`, and says
    /// whether the set fired.
    fn fired_after(
        &mut self,
        read: impl FnOnce(StateView<'_>),
        write: impl FnOnce(&mut Self),
    ) -> bool {
        let snap = self.store.snapshot();
        let ws = WatchSet::new();
        read(snap.watched(&ws));
        let early = register(&ws);
        write(self);
        early || ws.is_fired()
    }
}

/// Registers a watch set now (a zero-length wait). True if it had already fired.
fn register(ws: &WatchSet) -> bool {
    ws.wait_timeout(Duration::ZERO) == WaitOutcome::Changed
}

/// One single-node write flipping the health of one of the node's two node-plugin
/// fingerprints, with plugin derivation (the peer's `upsertToggle`), via `upsert_node`.
fn upsert_toggle(store: &StateStore, ds: &Dataset, idx: &mut u64, r: &mut Rng) {
    let i = r.intn(ds.nodes);
    let k = r.intn(2);
    *idx += 1;
    let index = *idx;
    let snap = store.snapshot();
    let old = snap.view().node_by_id(&ds.node_ids[i]).expect("node");
    let mut n = (*old).clone();
    let pid = &ds.plugin_ids[ds.node_plugins[i][k]];
    let mut info = (*old.csi_node_plugins[pid]).clone();
    info.healthy = !info.healthy;
    info.health_description = if info.healthy { "healthy" } else { "unhealthy" }.into();
    info.update_time = index;
    n.csi_node_plugins.insert(pid.clone(), Arc::new(info));
    drop(snap);
    store.upsert_node(index, n).expect("upsert_node");
}

/// Applies `command`, returning the time from just before publishing to the return.
fn apply_timed(store: &StateStore, index: u64, command: &Command) -> Duration {
    let mut before_publish = None;
    store
        .apply_with(index, command, || {
            before_publish = Some(Instant::now());
            Ok::<(), StateError>(())
        })
        .expect("apply");
    before_publish.map_or(Duration::ZERO, |t| t.elapsed())
}

/// Recomputes every plugin from the nodes table and compares (as the peer), then runs
/// the store's own invariant checker. Panics on a mismatch.
fn verify(ctx: &Ctx, stage: &str) {
    #[derive(Default, Debug, PartialEq)]
    struct Agg {
        nodes: usize,
        nodes_h: usize,
        ctrls: usize,
        ctrls_h: usize,
    }
    let snap = ctx.store.snapshot();
    let v = snap.view();
    let mut want: BTreeMap<Id, Agg> = BTreeMap::new();
    let mut nn = 0;
    for n in v.nodes() {
        nn += 1;
        for (pid, info) in &n.csi_node_plugins {
            let a = want.entry(pid.clone()).or_default();
            a.nodes += 1;
            a.nodes_h += usize::from(info.healthy);
        }
        for (pid, info) in &n.csi_controller_plugins {
            let a = want.entry(pid.clone()).or_default();
            a.ctrls += 1;
            a.ctrls_h += usize::from(info.healthy);
        }
    }
    let mut np = 0;
    for p in v.csi_plugins() {
        np += 1;
        let got = Agg {
            nodes: p.nodes.len(),
            nodes_h: p.nodes_healthy(),
            ctrls: p.controllers.len(),
            ctrls_h: p.controllers_healthy(),
        };
        let w = want.get(&p.id);
        assert_eq!(w, Some(&got), "verify {stage}: plugin {} mismatch", p.id);
        for (nid, info) in p.nodes.iter() {
            let node = v.node_by_id(nid).expect("node of a plugin entry");
            assert_eq!(
                node.csi_node_plugins.get(&p.id).map(|f| &**f),
                Some(&**info),
                "verify {stage}: stale node fingerprint in plugin {}",
                p.id
            );
        }
    }
    assert_eq!(np, want.len(), "verify {stage}: plugin count");
    let allocs = v.raw().len(ctx.t.allocs);
    if let Err(e) = v.check_invariants() {
        panic!("verify {stage}: check_invariants: {e}");
    }
    println!("# verify {stage} ok nodes={nn} allocs={allocs} plugins={np}");
}

// ---------------------------------------------------------------------------
// The workloads, in the peer's order.

fn bulk_load_raw(
    f: &Flags,
    ds: &Dataset,
    objs: &(Vec<Arc<Node>>, Vec<Arc<Allocation>>),
) -> (Duration, usize) {
    let scratch = StateStore::new();
    let t = scratch.tables();
    let (nodes, allocs) = objs;
    let mut index = 0;
    let t0 = Instant::now();
    let mut lo = 0;
    while lo < ds.nodes {
        let hi = (lo + f.batch).min(ds.nodes);
        index += 1;
        let mut txn = scratch.db().begin_write(index).expect("begin_write");
        for i in lo..hi {
            for j in 0..ds.allocs_per {
                txn.insert(t.allocs, Arc::clone(&allocs[i * ds.allocs_per + j]))
                    .expect("insert alloc");
            }
            let n = &nodes[i];
            assert!(
                txn.view().get(t.nodes, &Key::str(&n.id)).is_none(),
                "bulk_load_raw: duplicate node"
            );
            txn.insert(t.nodes, Arc::clone(n)).expect("insert node");
        }
        txn.commit().expect("commit");
        lo = hi;
    }
    let el = t0.elapsed();
    drop(scratch);
    (el, index as usize)
}

fn run(f: &Flags) {
    let start = Instant::now();
    let threads = thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "# schedstate={} profile={} threads={threads} nodes={} allocs-per-node={} plugins={} batch={} seed={}",
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        f.nodes,
        f.allocs_per_node,
        f.plugins,
        f.batch,
        f.seed
    );
    let ds = Arc::new(Dataset::generate(
        f.nodes,
        f.allocs_per_node,
        f.plugins,
        f.seed,
    ));
    println!("{}", ds.check_line());
    let objs = ds.objects();
    let mut rep = Reporter::new();

    // ---- a0. bulk_load_raw --------------------------------------------------
    println!(
        "# note bulk_load_raw: engine level (db().begin_write + insert into tables().allocs/nodes), \
{} nodes per txn as the peer; no commands, no plugin derivation",
        f.batch
    );
    let (el, _) = bulk_load_raw(f, &ds, &objs);
    rep.emit(
        "bulk_load_raw",
        ns(el) / f.nodes as f64,
        f.nodes as u64,
        &[
            ("total_ms", (el.as_micros() as f64).round() / 1000.0),
            (
                "ns_per_object",
                (ns(el) / (f.nodes * (1 + f.allocs_per_node)) as f64).round(),
            ),
        ],
    );

    // The objects move into the commands (the scratch store is gone, so no copies).
    let (node_arcs, alloc_arcs) = objs;
    let nodes: Vec<Node> = node_arcs.into_iter().map(Arc::unwrap_or_clone).collect();
    let allocs: Vec<Allocation> = alloc_arcs.into_iter().map(Arc::unwrap_or_clone).collect();
    let store = StateStore::new();
    let mut ctx = Ctx {
        t: store.tables(),
        store,
        ds: Arc::clone(&ds),
        idx: 0,
    };
    let heap_empty = live_bytes();
    let rss_empty = rss_bytes();

    rep.mark();
    // ---- a. bulk_load ---------------------------------------------------------
    {
        println!(
            "# note bulk_load: per batch of {} nodes one upsert_allocs command ({} allocs) then one \
upsert_nodes command (plugin derivation per node, each plugin written once per batch): {} txns \
instead of the peer's {} (one txn per batch)",
            f.batch,
            f.batch * f.allocs_per_node,
            2 * f.nodes.div_ceil(f.batch.max(1)),
            f.nodes.div_ceil(f.batch.max(1)),
        );
        let mut commit_total = Duration::ZERO;
        let mut allocs_iter = allocs.into_iter();
        let mut nodes_iter = nodes.into_iter();
        let mut txns = 0u64;
        let t0 = Instant::now();
        loop {
            let batch: Vec<Node> = nodes_iter.by_ref().take(f.batch.max(1)).collect();
            if batch.is_empty() {
                break;
            }
            let batch_allocs: Vec<Allocation> = allocs_iter
                .by_ref()
                .take(batch.len() * f.allocs_per_node)
                .collect();
            let index = ctx.next_index();
            commit_total += apply_timed(
                &ctx.store,
                index,
                &Command::UpsertAllocs {
                    allocs: batch_allocs,
                },
            );
            let index = ctx.next_index();
            commit_total += apply_timed(&ctx.store, index, &Command::UpsertNodes { nodes: batch });
            txns += 2;
        }
        let el = t0.elapsed();
        rep.emit(
            "bulk_load",
            ns(el) / f.nodes as f64,
            f.nodes as u64,
            &[
                ("total_ms", (el.as_micros() as f64).round() / 1000.0),
                ("allocs", (f.nodes * f.allocs_per_node) as f64),
                ("txns", txns as f64),
                (
                    "ns_per_object",
                    (ns(el) / (f.nodes * (1 + f.allocs_per_node)) as f64).round(),
                ),
                (
                    "commit_ms_total",
                    (commit_total.as_micros() as f64).round() / 1000.0,
                ),
            ],
        );
    }
    verify(&ctx, "after_bulk_load");
    let heap_load = settled_live_bytes(&ctx.store);
    let rss_load = rss_bytes();

    rep.mark();
    // ---- volumes_load ---------------------------------------------------------
    {
        let index = ctx.next_index();
        let t0 = Instant::now();
        let vols: Vec<CsiVolume> = (0..f.volumes)
            .map(|v| {
                let id = format!("vol-{v:05}");
                let mut vol =
                    CsiVolume::new("default", id.as_str(), ds.plugin_ids[v % f.plugins].clone());
                vol.name = id;
                vol
            })
            .collect();
        ctx.store
            .csi_volume_register(index, vols)
            .expect("csi_volume_register");
        let el = t0.elapsed();
        rep.emit(
            "volumes_load",
            ns(el) / f.volumes as f64,
            f.volumes as u64,
            &[],
        );
    }
    rep.emit(
        "memory_after_load",
        0.0,
        0,
        &[
            ("heap_alloc_mib", mib(heap_load)),
            ("heap_alloc_empty_mib", mib(heap_empty)),
            ("rss_mib", mib(rss_load)),
            ("rss_empty_mib", mib(rss_empty)),
        ],
    );

    rep.mark();
    // ---- c. snapshot, read_txn_open ------------------------------------------
    {
        let t0 = Instant::now();
        for _ in 0..f.snapshot_ops {
            black_box(ctx.store.snapshot());
        }
        let el = t0.elapsed();
        rep.emit(
            "snapshot",
            ns(el) / f.snapshot_ops as f64,
            f.snapshot_ops as u64,
            &[],
        );
        let t0 = Instant::now();
        for _ in 0..f.snapshot_ops {
            let s = ctx.store.snapshot();
            black_box(s.view());
        }
        let el = t0.elapsed();
        rep.emit(
            "read_txn_open",
            ns(el) / f.snapshot_ops as f64,
            f.snapshot_ops as u64,
            &[],
        );
    }

    rep.mark();
    // ---- d. point reads -------------------------------------------------------
    {
        let snap = ctx.store.snapshot();
        let v = snap.view();
        let n_allocs = ds.alloc_ids.len();
        let mut r = Rng(1001);
        let mut found = 0usize;
        let t0 = Instant::now();
        for _ in 0..f.reads {
            if black_box(v.alloc_by_id(&ds.alloc_ids[r.intn(n_allocs)])).is_some() {
                found += 1;
            }
        }
        let el = t0.elapsed();
        assert_eq!(found, f.reads, "point_read: missing alloc");
        rep.emit(
            "point_read_alloc",
            ns(el) / f.reads as f64,
            f.reads as u64,
            &[],
        );

        let mut r = Rng(1002);
        let t0 = Instant::now();
        for _ in 0..f.reads {
            let s = ctx.store.snapshot();
            black_box(s.view().alloc_by_id(&ds.alloc_ids[r.intn(n_allocs)]));
        }
        let el = t0.elapsed();
        rep.emit(
            "point_read_alloc_txn_each",
            ns(el) / f.reads as f64,
            f.reads as u64,
            &[],
        );

        let mut r = Rng(1003);
        let t0 = Instant::now();
        for _ in 0..f.reads {
            black_box(v.csi_plugin_by_id(&ds.plugin_ids[r.intn(f.plugins)]));
        }
        let el = t0.elapsed();
        rep.emit(
            "point_read_plugin",
            ns(el) / f.reads as f64,
            f.reads as u64,
            &[],
        );

        let vol_ids: Vec<String> = (0..f.volumes).map(|i| format!("vol-{i:05}")).collect();
        let mut r = Rng(1004);
        let t0 = Instant::now();
        for _ in 0..f.reads {
            let vol = v.csi_volume_stored("default", &vol_ids[r.intn(f.volumes)]);
            assert!(vol.is_some(), "point_read_volume: missing volume");
            black_box(vol);
        }
        let el = t0.elapsed();
        rep.emit(
            "point_read_volume",
            ns(el) / f.reads as f64,
            f.reads as u64,
            &[],
        );
    }

    rep.mark();
    // ---- e. index_scan --------------------------------------------------------
    {
        let snap = ctx.store.snapshot();
        let v = snap.view();
        let mut r = Rng(2001);
        let mut total = 0usize;
        let t0 = Instant::now();
        for _ in 0..f.scans {
            // Borrowed, as the peer's iterator hands out pointers: the rows themselves
            // are not touched.
            for a in v.allocs_by_node(&ds.node_ids[r.intn(f.nodes)]).borrowed() {
                black_box(a);
                total += 1;
            }
        }
        let el = t0.elapsed();
        rep.emit(
            "index_scan",
            ns(el) / f.scans as f64,
            f.scans as u64,
            &[
                ("allocs_per_node", total as f64 / f.scans as f64),
                (
                    "ns_per_alloc",
                    (ns(el) / total.max(1) as f64 * 10.0).round() / 10.0,
                ),
            ],
        );
    }

    rep.mark();
    // ---- f. plugin_denormalize ------------------------------------------------
    {
        // Lookups and misses per plugin (not timed; the state does not change here).
        let (mut lookups, mut missing) = (0usize, 0usize);
        {
            let snap = ctx.store.snapshot();
            let v = snap.view();
            for pid in &ds.plugin_ids {
                let Some(p) = v.csi_plugin_by_id(pid) else {
                    continue;
                };
                let ids: BTreeSet<&Id> = p
                    .controllers
                    .iter()
                    .chain(p.nodes.iter())
                    .map(|(_, i)| &i.alloc_id)
                    .collect();
                let found = ids.iter().filter(|id| v.alloc_by_id(id).is_some()).count();
                lookups += ids.len();
                missing += ids.len() - found;
            }
        }
        let mut ops = 0usize;
        let mut stubs = 0usize;
        let t0 = Instant::now();
        for _ in 0..f.denorm_reps {
            let snap = ctx.store.snapshot();
            let v = snap.view();
            for pid in &ds.plugin_ids {
                if let Some(p) = v.csi_plugin_by_id(pid) {
                    let d = v.csi_plugin_denormalize(&p);
                    stubs += d.allocations.len();
                    black_box(d);
                }
                ops += 1;
            }
        }
        let el = t0.elapsed();
        let per = f.plugins as f64;
        assert_eq!(
            stubs,
            (lookups - missing) * f.denorm_reps,
            "plugin_denormalize: stub count"
        );
        rep.emit(
            "plugin_denormalize",
            ns(el) / ops as f64,
            ops as u64,
            &[
                ("allocs_per_plugin", lookups as f64 / per),
                ("missing_per_plugin", missing as f64 / per),
                (
                    "ns_per_alloc",
                    (ns(el) / (lookups * f.denorm_reps).max(1) as f64 * 10.0).round() / 10.0,
                ),
            ],
        );

        let mut items = 0usize;
        let mut ops = 0usize;
        let t0 = Instant::now();
        for _ in 0..f.denorm_reps {
            let snap = ctx.store.snapshot();
            for pid in &ds.plugin_ids {
                let ws = WatchSet::new();
                let v = snap.watched(&ws);
                if let Some(p) = v.csi_plugin_by_id(pid) {
                    black_box(v.csi_plugin_denormalize(&p));
                }
                items += ws.len();
                ops += 1;
            }
        }
        let el = t0.elapsed();
        rep.emit(
            "plugin_denormalize_ws",
            ns(el) / ops as f64,
            ops as u64,
            &[("watch_chans_per_plugin", items as f64 / ops as f64)],
        );
    }

    rep.mark();
    // ---- b. upsert_node_txn ---------------------------------------------------
    {
        let mut r = Rng(3001);
        let mut lat = Vec::with_capacity(f.txns);
        let t0 = Instant::now();
        for _ in 0..f.txns {
            let s = Instant::now();
            upsert_toggle(&ctx.store, &ds, &mut ctx.idx, &mut r);
            lat.push(signed_ns(Instant::now(), s));
        }
        let el = t0.elapsed();
        let per = ns(el) / f.txns as f64;
        rep.emit(
            "upsert_node_txn",
            per,
            f.txns as u64,
            &[
                ("txns_per_s", (1e9 / per).round()),
                ("p50_us", us(pct(&lat, 0.50))),
                ("p99_us", us(pct(&lat, 0.99))),
            ],
        );
    }
    verify(&ctx, "after_upsert_node_txn");

    rep.mark();
    // ---- b2. upsert_node_txn_raw (engine) and _raw_cmd (a command without derivation)
    {
        println!(
            "# note upsert_node_txn_raw: engine txn (read node, insert a copy with a new modify_index, commit); \
upsert_node_txn_raw_cmd: the same through a command without derivation (update_node_eligibility, flipped)"
        );
        let mut r = Rng(3002);
        let mut lat = Vec::with_capacity(f.txns);
        let t0 = Instant::now();
        for _ in 0..f.txns {
            let s = Instant::now();
            let n = r.intn(f.nodes);
            let index = ctx.next_index();
            let mut txn = ctx.store.db().begin_write(index).expect("begin_write");
            let old = txn
                .view()
                .get(ctx.t.nodes, &Key::str(&ds.node_ids[n]))
                .expect("node");
            let mut cp = (*old).clone();
            cp.modify_index = index;
            txn.insert(ctx.t.nodes, Arc::new(cp)).expect("insert node");
            txn.commit().expect("commit");
            lat.push(signed_ns(Instant::now(), s));
        }
        let el = t0.elapsed();
        let per = ns(el) / f.txns as f64;
        rep.emit(
            "upsert_node_txn_raw",
            per,
            f.txns as u64,
            &[
                ("txns_per_s", (1e9 / per).round()),
                ("p50_us", us(pct(&lat, 0.50))),
                ("p99_us", us(pct(&lat, 0.99))),
            ],
        );

        let mut r = Rng(3002);
        let mut lat = Vec::with_capacity(f.txns);
        let t0 = Instant::now();
        for _ in 0..f.txns {
            let s = Instant::now();
            let n = r.intn(f.nodes);
            let index = ctx.next_index();
            let eligible = ctx
                .store
                .snapshot()
                .view()
                .node_by_id(&ds.node_ids[n])
                .expect("node")
                .eligible;
            ctx.store
                .update_node_eligibility(index, &ds.node_ids[n], !eligible)
                .expect("update_node_eligibility");
            lat.push(signed_ns(Instant::now(), s));
        }
        let el = t0.elapsed();
        let per = ns(el) / f.txns as f64;
        rep.emit(
            "upsert_node_txn_raw_cmd",
            per,
            f.txns as u64,
            &[
                ("txns_per_s", (1e9 / per).round()),
                ("p50_us", us(pct(&lat, 0.50))),
                ("p99_us", us(pct(&lat, 0.99))),
            ],
        );
    }

    rep.mark();
    // ---- g. blocking_wake (sync waiter thread, then an async waiter) -----------
    blocking_wake(&mut ctx, &mut rep, f, false);
    rep.mark();
    blocking_wake(&mut ctx, &mut rep, f, true);

    rep.mark();
    watch_granularity(&mut ctx, &mut rep, f);

    rep.mark();
    blocking_wake_many(&mut ctx, &mut rep, f);

    rep.mark();
    // ---- h. concurrent --------------------------------------------------------
    {
        let stop = AtomicBool::new(false);
        let secs = Duration::from_secs_f64(f.concurrent_secs.max(0.0));
        let (w, rd) = thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut r = Rng(6001);
                let mut idx = ctx.idx;
                let t0 = Instant::now();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    upsert_toggle(&ctx.store, &ds, &mut idx, &mut r);
                    n += 1;
                }
                (n, t0.elapsed(), idx)
            });
            let reader = s.spawn(|| {
                let mut r = Rng(6002);
                let n_allocs = ds.alloc_ids.len();
                let t0 = Instant::now();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let snap = ctx.store.snapshot();
                    let a = snap.view().alloc_by_id(&ds.alloc_ids[r.intn(n_allocs)]);
                    assert!(a.is_some(), "concurrent: missing alloc");
                    n += 1;
                }
                (n, t0.elapsed())
            });
            thread::sleep(secs);
            stop.store(true, Ordering::Relaxed);
            (
                writer.join().expect("writer thread"),
                reader.join().expect("reader thread"),
            )
        });
        let (w_ops, w_el, idx) = w;
        ctx.idx = idx;
        let (r_ops, r_el) = rd;
        rep.emit(
            "concurrent_writer",
            ns(w_el) / w_ops.max(1) as f64,
            w_ops,
            &[("txns_per_s", (w_ops as f64 / w_el.as_secs_f64()).round())],
        );
        rep.emit(
            "concurrent_reader",
            ns(r_el) / r_ops.max(1) as f64,
            r_ops,
            &[("reads_per_s", (r_ops as f64 / r_el.as_secs_f64()).round())],
        );
    }
    verify(&ctx, "after_concurrent");

    rep.mark();
    // ---- i. memory with a held snapshot ----------------------------------------
    {
        let before = settled_live_bytes(&ctx.store);
        let rss_before = rss_bytes();
        let snap = ctx.store.snapshot();
        let held_index = snap.view().last_applied();
        let mut r = Rng(7001);
        for _ in 0..f.mem_txns {
            upsert_toggle(&ctx.store, &ds, &mut ctx.idx, &mut r);
        }
        let held = settled_live_bytes(&ctx.store);
        let rss_held = rss_bytes();
        // The snapshot still sees the world before those writes.
        assert_eq!(snap.view().last_applied(), held_index, "snapshot moved");
        assert!(
            snap.view().node_by_id(&ds.node_ids[0]).is_some(),
            "snapshot lost"
        );
        drop(snap);
        let released = settled_live_bytes(&ctx.store);
        let rss_released = rss_bytes();
        rep.emit(
            "memory_snapshot_held",
            0.0,
            f.mem_txns as u64,
            &[
                ("heap_alloc_before_mib", mib(before)),
                ("heap_alloc_with_snapshot_mib", mib(held)),
                ("heap_alloc_after_release_mib", mib(released)),
                (
                    "snapshot_retained_alloc_mib",
                    ((mib(held) - mib(released)) * 100.0).round() / 100.0,
                ),
                ("rss_before_mib", mib(rss_before)),
                ("rss_with_snapshot_mib", mib(rss_held)),
                ("rss_after_release_mib", mib(rss_released)),
            ],
        );
    }
    verify(&ctx, "final");

    println!(
        "# alloc live_mib={} rss_mib={}",
        mib(live_bytes()),
        mib(rss_bytes())
    );
    let total = start.elapsed();
    println!("# total_runtime_s={:.2}", total.as_secs_f64());

    if let Some(path) = &f.json {
        let meta = serde_json::json!({
            "schedstate": env!("CARGO_PKG_VERSION"),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "threads": threads,
            "nodes": f.nodes,
            "allocs_per_node": f.allocs_per_node,
            "plugins": f.plugins,
            "batch": f.batch,
            "seed": f.seed,
            "total_runtime_s": total.as_secs_f64(),
        });
        if let Err(e) = rep.write_json(path, meta) {
            eprintln!("writing {path}: {e}");
            std::process::exit(1);
        }
    }
}

/// The peer's `blocking_wake`: a waiter watches plugin-00 (one key); the writer stores
/// a copy of plugin-00, sleeps 100 µs so that the waiter is parked, and commits. The
/// latency runs from the start of `commit()` to the waiter's clock after it woke.
fn blocking_wake(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags, asynchronous: bool) {
    let rounds = f.wake_rounds;
    let watched = ctx.ds.plugin_ids[0].clone();
    let (ready_tx, ready_rx) = mpsc::channel::<bool>();
    let (woke_tx, woke_rx) = mpsc::channel::<(bool, Instant)>();
    let mut wake = Vec::with_capacity(rounds);
    let mut commit = Vec::with_capacity(rounds);
    let mut after_commit = Vec::with_capacity(rounds);
    let mut early = 0u64;
    thread::scope(|s| {
        let store = ctx.store.clone();
        let pid = watched.clone();
        s.spawn(move || {
            if asynchronous {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .expect("tokio runtime");
                rt.block_on(async {
                    for _ in 0..rounds {
                        let snap = store.snapshot();
                        let ws = WatchSet::new();
                        black_box(snap.watched(&ws).csi_plugin_by_id(&pid));
                        let changed = ws.changed(); // registers
                        if ready_tx.send(ws.is_fired()).is_err() {
                            return;
                        }
                        let ok = tokio::time::timeout(WAKE_TIMEOUT, changed).await.is_ok();
                        let now = Instant::now();
                        if woke_tx.send((ok, now)).is_err() {
                            return;
                        }
                    }
                });
            } else {
                for _ in 0..rounds {
                    let snap = store.snapshot();
                    let ws = WatchSet::new();
                    black_box(snap.watched(&ws).csi_plugin_by_id(&pid));
                    let fired = register(&ws);
                    if ready_tx.send(fired).is_err() {
                        return;
                    }
                    let ok = ws.wait_timeout(WAKE_TIMEOUT) == WaitOutcome::Changed;
                    let now = Instant::now();
                    if woke_tx.send((ok, now)).is_err() {
                        return;
                    }
                }
            }
        });
        for _ in 0..rounds {
            let fired = ready_rx
                .recv_timeout(WAKE_TIMEOUT)
                .expect("blocking_wake: waiter never got ready");
            early += u64::from(fired);
            let txn = ctx.touch_plugin_txn(&watched);
            thread::sleep(Duration::from_micros(100)); // let the waiter park
            let c0 = Instant::now();
            txn.commit().expect("commit");
            let c1 = Instant::now();
            let (ok, w) = woke_rx
                .recv_timeout(WAKE_TIMEOUT)
                .expect("blocking_wake: no wake report");
            assert!(ok, "blocking_wake: watch timed out");
            wake.push(signed_ns(w, c0));
            commit.push(signed_ns(c1, c0));
            after_commit.push(signed_ns(w, c1));
        }
    });
    assert_eq!(
        early, 0,
        "blocking_wake: a fresh watch fired before any write"
    );
    let name = if asynchronous {
        "blocking_wake_async"
    } else {
        "blocking_wake"
    };
    rep.emit(
        name,
        pct(&wake, 0.5) as f64,
        rounds as u64,
        &[
            ("p50_us", us(pct(&wake, 0.50))),
            ("p99_us", us(pct(&wake, 0.99))),
            ("max_us", us(pct(&wake, 1.0))),
            ("commit_p50_us", us(pct(&commit, 0.50))),
            (
                "wake_after_commit_return_p50_us",
                us(pct(&after_commit, 0.50)),
            ),
        ],
    );
}

/// The peer's six granularity checks per round (same draws), plus one of ours: an
/// absent-key watch must fire when the key appears.
fn watch_granularity(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    let ds = Arc::clone(&ctx.ds);
    let watched = ds.plugin_ids[0].clone();
    let other = ds.plugin_ids[1].clone();
    let absent = "plugin-zz";
    let mut r = Rng(4001);
    let (mut false_wakes, mut true_wakes, mut other_table, mut missing_key) = (0, 0, 0, 0);
    let (mut iter_false, mut table_iter, mut absent_created) = (0, 0, 0);
    let n_allocs = ds.alloc_ids.len();
    for i in 0..f.wake_rounds {
        // 1. row watch on plugin-00, write plugin-01: must not fire.
        let w = |v: StateView<'_>| {
            black_box(v.csi_plugin_by_id(&watched));
        };
        false_wakes += u64::from(ctx.fired_after(w, |c| c.touch_plugin(&other)));
        // 2. row watch on plugin-00, write plugin-00: must fire.
        true_wakes += u64::from(ctx.fired_after(w, |c| c.touch_plugin(&watched)));
        // 3. row watch on plugin-00, write a random alloc (another table).
        let aid = ds.alloc_ids[r.intn(n_allocs)].clone();
        other_table += u64::from(ctx.fired_after(w, |c| c.touch_alloc(&aid)));
        // 4. watch on an absent plugin id, write plugin-01: exact here, must not fire.
        let wa = |v: StateView<'_>| {
            black_box(v.csi_plugin_by_id(absent));
        };
        missing_key += u64::from(ctx.fired_after(wa, |c| c.touch_plugin(&other)));
        // 5. allocs of node A, write an alloc of node B != A.
        let na = r.intn(f.nodes);
        let nb = (na + 1 + r.intn(f.nodes - 1)) % f.nodes;
        let bid = ds.alloc_ids[nb * ds.allocs_per + r.intn(ds.allocs_per)].clone();
        iter_false += u64::from(ctx.fired_after(
            |v| {
                black_box(v.allocs_by_node(&ds.node_ids[na]).count());
            },
            |c| c.touch_alloc(&bid),
        ));
        // 6. whole-table iteration of csi_plugins, write plugin-01: fires.
        table_iter += u64::from(ctx.fired_after(
            |v| {
                black_box(v.csi_plugins().count());
            },
            |c| c.touch_plugin(&other),
        ));
        // 7. (ours) absent plugin id, a node starts reporting it: must fire. The node
        //    then drops it again (not checked), which deletes the plugin.
        let node_i = i % f.nodes;
        absent_created += u64::from(ctx.fired_after(wa, |c| {
            set_extra_fingerprint(c, node_i, Some(absent));
        }));
        set_extra_fingerprint(ctx, node_i, None);
    }
    rep.emit(
        "watch_granularity",
        0.0,
        f.wake_rounds as u64,
        &[
            ("false_wakes_other_plugin", false_wakes as f64),
            ("true_wakes_same_plugin", true_wakes as f64),
            ("false_wakes_other_table", other_table as f64),
            ("wakes_missing_key_watch", missing_key as f64),
            ("false_wakes_node_alloc_iter", iter_false as f64),
            ("wakes_table_iter", table_iter as f64),
            ("true_wakes_absent_key_created", absent_created as f64),
        ],
    );
}

/// Upserts node `i` with (or without) an extra healthy node fingerprint for `plugin`.
fn set_extra_fingerprint(ctx: &mut Ctx, i: usize, plugin: Option<&str>) {
    let ds = Arc::clone(&ctx.ds);
    let snap = ctx.store.snapshot();
    let mut n = (*snap.view().node_by_id(&ds.node_ids[i]).expect("node")).clone();
    drop(snap);
    match plugin {
        Some(pid) => {
            let mut f = (*ds.node_fingerprint(i, 1)).clone();
            f.plugin_id = Id::from(pid);
            f.provider = format!("org.example.csi.driver-{pid}");
            n.csi_node_plugins.insert(f.plugin_id.clone(), Arc::new(f));
        }
        None => n.csi_node_plugins.retain(|k, _| ds.plugin_ids.contains(k)),
    }
    let index = ctx.next_index();
    ctx.store.upsert_node(index, n).expect("upsert_node");
}

/// The peer's `blocking_wake_many`: the waiter denormalizes plugin-00 through a watched
/// view (one key per alloc it looked up) and waits; the writer rewrites one of those
/// allocs (`upsert_allocs`), sleeping 1 ms just before publishing.
fn blocking_wake_many(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    let ds = Arc::clone(&ctx.ds);
    let rounds = f.wake_many_rounds;
    let watched = ds.plugin_ids[0].clone();
    let mut targets: Vec<Id> = Vec::new();
    for i in 0..ds.nodes {
        for k in 0..2 {
            if ds.node_plugins[i][k] == 0 && !(k == 0 && ds.missing_alloc[i]) {
                targets.push(ds.alloc_ids[i * ds.allocs_per + (k % ds.allocs_per)].clone());
            }
        }
    }
    assert!(!targets.is_empty(), "blocking_wake_many: no target allocs");
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, bool)>();
    let (woke_tx, woke_rx) = mpsc::channel::<(bool, Instant)>();
    let mut wake = Vec::with_capacity(rounds);
    let mut commit = Vec::with_capacity(rounds);
    let mut after_return = Vec::with_capacity(rounds);
    let mut items = 0usize;
    let mut early = 0u64;
    thread::scope(|s| {
        let store = ctx.store.clone();
        let pid = watched.clone();
        s.spawn(move || {
            for _ in 0..rounds {
                let snap = store.snapshot();
                let ws = WatchSet::new();
                {
                    let v = snap.watched(&ws);
                    if let Some(p) = v.csi_plugin_by_id(&pid) {
                        black_box(v.csi_plugin_denormalize(&p));
                    }
                }
                let n = ws.len(); // registering hands the items over to the store
                let fired = register(&ws);
                if ready_tx.send((n, fired)).is_err() {
                    return;
                }
                let ok = ws.wait_timeout(WAKE_TIMEOUT) == WaitOutcome::Changed;
                let now = Instant::now();
                if woke_tx.send((ok, now)).is_err() {
                    return;
                }
            }
        });
        let mut r = Rng(5001);
        for _ in 0..rounds {
            let (n, fired) = ready_rx
                .recv_timeout(WAKE_TIMEOUT)
                .expect("blocking_wake_many: waiter never got ready");
            items += n;
            early += u64::from(fired);
            let a = ctx.alloc_copy(&targets[r.intn(targets.len())]);
            let index = ctx.next_index();
            let mut c0 = None;
            ctx.store
                .apply_with(index, &Command::UpsertAllocs { allocs: vec![a] }, || {
                    thread::sleep(Duration::from_millis(1)); // let the waiter park
                    c0 = Some(Instant::now());
                    Ok::<(), StateError>(())
                })
                .expect("upsert_allocs");
            let t1 = Instant::now();
            let (ok, w) = woke_rx
                .recv_timeout(WAKE_TIMEOUT)
                .expect("blocking_wake_many: no wake report");
            assert!(ok, "blocking_wake_many: watch timed out");
            let c0 = c0.expect("hook ran");
            wake.push(signed_ns(w, c0));
            commit.push(signed_ns(t1, c0));
            after_return.push(signed_ns(w, t1));
        }
    });
    assert_eq!(
        early, 0,
        "blocking_wake_many: a fresh watch fired before any write"
    );
    rep.emit(
        "blocking_wake_many",
        pct(&wake, 0.5) as f64,
        rounds as u64,
        &[
            ("p50_us", us(pct(&wake, 0.50))),
            ("p99_us", us(pct(&wake, 0.99))),
            ("max_us", us(pct(&wake, 1.0))),
            ("commit_p50_us", us(pct(&commit, 0.5))),
            (
                "wake_after_commit_return_p50_us",
                us(pct(&after_return, 0.5)),
            ),
            ("watch_chans", items as f64 / rounds.max(1) as f64),
        ],
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Without `--bench` and without flags (`cargo test --benches`), run a small smoke
    // version instead of the full workload.
    let smoke = args.is_empty();
    let mut flags = match parse_flags(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if smoke {
        println!("# smoke run (no arguments): tiny sizes; use `cargo bench --bench workload`");
        flags = Flags {
            nodes: 200,
            batch: 50,
            volumes: 50,
            txns: 200,
            snapshot_ops: 1000,
            reads: 1000,
            scans: 1000,
            denorm_reps: 2,
            wake_rounds: 20,
            wake_many_rounds: 10,
            concurrent_secs: 0.2,
            mem_txns: 200,
            ..flags
        };
    }
    if flags.dataset_check {
        let ds = Dataset::generate(
            flags.nodes,
            flags.allocs_per_node,
            flags.plugins,
            flags.seed,
        );
        println!("{}", ds.check_line());
        return;
    }
    run(&flags);
}
