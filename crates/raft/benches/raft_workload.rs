//! The nomad-raft peer's workload (`../shared/peers/nomad-raft/`, its README §5) on the
//! replicated store: three servers in one process over loopback TCP, fsync on, the
//! same dataset, the same preload, the same upsert-node write (read the node on the
//! leader, flip one fingerprint's health, propose), the same client windows and
//! failover rounds, the same output lines.
//!
//! ```text
//! cargo bench -p schedstate-raft --bench raft_workload -- [-nodes 1000] [-clients 1,16,64]
//!     [-secs 5] [-warmup 0.5] [-failovers 5] [-failover-clients 4] [-nomad-timeouts]
//!     [-servers 3] [-restarts 5]
//! ```
//! `-restarts N` adds N planned restarts of the leader after the failovers (a hand-over,
//! then a stop and a start, as `schedstate agent` does on SIGTERM: `restarts.rs`); the
//! peer has no such rounds.
//! Differences, stated: the peer's preload command (nodes and their allocs in one
//! entry) is two entries here (`UpsertAllocs`, then `UpsertNodes`); "nothing lost" is
//! checked from the state (every acknowledged write's node has a modify index at or
//! after the write's, and carries the write's fingerprint when it is the last write)
//! rather than from a list of applied write ids kept by the state machine.

#[path = "../../../benches/workload/alloc_counter.rs"]
#[allow(dead_code)]
mod alloc_counter;
#[path = "../../../benches/workload/dataset.rs"]
#[allow(dead_code)]
mod dataset;
#[path = "raft_workload/fsync_floor.rs"]
mod fsync_floor;
#[path = "../../../benches/workload/report.rs"]
#[allow(dead_code)]
mod report;
#[path = "raft_workload/restarts.rs"]
mod restarts;
#[path = "../../../benches/common/splitmix.rs"]
#[allow(dead_code)]
mod splitmix;

/// The allocator under the counting one: the `schedstate` binary's (`schedstate
/// agent` is the server this workload stands for), so the figures are the deployed
/// server's.
const UNDERLYING: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use schedstate::model::{Allocation, Node};
use schedstate::state::Command;
use schedstate_raft::{ProposeError, Server, ServerOptions, TcpEndpoint, TcpNetwork};
use tokio::net::TcpListener;

use crate::dataset::Dataset;
use crate::report::{Reporter, own_cpu_secs, pct, us};
use crate::splitmix::SplitMix64;

struct Flags {
    nodes: usize,
    allocs_per: usize,
    plugins: usize,
    seed: u64,
    batch: usize,
    clients: Vec<usize>,
    secs: f64,
    warmup: f64,
    failovers: usize,
    failover_clients: usize,
    /// Planned restarts of the leader after the failovers.
    restarts: usize,
    /// Servers in the cluster (the peer runs three; five for the failover bars).
    servers: usize,
    nomad_timeouts: bool,
    timeouts: Option<(u64, u64, u64)>,
    json: Option<String>,
}

fn parse_flags() -> Flags {
    let mut f = Flags {
        nodes: 1000,
        allocs_per: 10,
        plugins: 10,
        seed: 42,
        batch: 100,
        clients: vec![1, 16, 64],
        secs: 5.0,
        warmup: 0.5,
        failovers: 5,
        failover_clients: 4,
        restarts: 0,
        servers: 3,
        nomad_timeouts: false,
        timeouts: None,
        json: None,
    };
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut i = 0;
    while i < args.len() {
        let name = args[i].trim_start_matches('-');
        let value = args.get(i + 1).cloned().unwrap_or_default();
        let mut took = true;
        match name {
            "nodes" => f.nodes = value.parse().expect("-nodes N"),
            "allocs-per-node" => f.allocs_per = value.parse().expect("-allocs-per-node N"),
            "plugins" => f.plugins = value.parse().expect("-plugins N"),
            "seed" => f.seed = value.parse().expect("-seed N"),
            "batch" => f.batch = value.parse().expect("-batch N"),
            "clients" => {
                f.clients = value
                    .split(',')
                    .map(|c| c.parse().expect("-clients a,b,c"))
                    .collect()
            }
            "secs" => f.secs = value.parse().expect("-secs S"),
            "warmup" => f.warmup = value.parse().expect("-warmup S"),
            "failovers" => f.failovers = value.parse().expect("-failovers N"),
            "failover-clients" => f.failover_clients = value.parse().expect("-failover-clients N"),
            "servers" => f.servers = value.parse().expect("-servers N"),
            "restarts" => f.restarts = value.parse().expect("-restarts N"),
            "timeouts" => {
                let v: Vec<u64> = value
                    .split(',')
                    .map(|x| {
                        x.parse()
                            .expect("-timeouts heartbeat,election_min,election_max (ms)")
                    })
                    .collect();
                f.timeouts = Some((v[0], v[1], v[2]));
            }
            "json" => f.json = Some(value),
            "nomad-timeouts" => {
                f.nomad_timeouts = true;
                took = false;
            }
            other => panic!("unknown flag -{other}"),
        }
        i += if took { 2 } else { 1 };
    }
    f
}

fn options(f: &Flags) -> ServerOptions {
    let mut o = ServerOptions::default();
    if let Some((hb, lo, hi)) = f.timeouts {
        o.raft.heartbeat_interval = hb;
        o.raft.election_timeout_min = lo;
        o.raft.election_timeout_max = hi;
    }
    if f.nomad_timeouts {
        // hashicorp/raft's DefaultConfig as Nomad runs it: 1 s heartbeat timeout and
        // election timeout (randomized up to 2 s there).
        o.raft.heartbeat_interval = 250;
        o.raft.election_timeout_min = 1000;
        o.raft.election_timeout_max = 2000;
    }
    o
}

struct Cluster {
    root: tempfile::TempDir,
    addrs: Vec<String>,
    opts: ServerOptions,
    servers: Mutex<Vec<Option<(Server, TcpEndpoint)>>>,
}

impl Cluster {
    async fn start_server(&self, i: usize, listener: TcpListener) -> Server {
        let id = i as u64 + 1;
        let s = Server::open(
            id,
            &self.root.path().join(format!("s{i}")),
            self.opts.clone(),
            TcpNetwork::new(),
        )
        .await
        .expect("open server");
        let ep = TcpEndpoint::serve(listener, s.clone()).expect("serve");
        self.servers.lock()[i] = Some((s.clone(), ep));
        s
    }

    fn live(&self) -> Vec<Server> {
        self.servers
            .lock()
            .iter()
            .flatten()
            .map(|(s, _)| s.clone())
            .collect()
    }

    fn leader(&self) -> Option<Server> {
        self.live().into_iter().find(Server::is_leader)
    }

    async fn wait_leader(&self, not: Option<u64>) -> Server {
        let start = Instant::now();
        loop {
            if let Some(l) = self.leader().filter(|l| Some(l.id()) != not) {
                return l;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no leader");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// One acknowledged write: node, fingerprint slot, write id, commit index.
type Ack = (usize, usize, u64, u64);

/// The write op: read node `i` on the leader, flip the health of fingerprint `k`.
fn flip(leader: &Server, ds: &Dataset, i: usize, k: usize, write_id: u64) -> Option<Node> {
    let snap = leader.read_stale();
    let node = snap.view().node(&ds.node_ids[i])?;
    let mut node = (*node).clone();
    let plugin = &ds.plugin_ids[ds.node_plugins[i][k]];
    let fp = node.csi_node_plugins.get(plugin)?;
    let mut fp = (**fp).clone();
    fp.healthy = !fp.healthy;
    fp.health_description = if fp.healthy { "healthy" } else { "unhealthy" }.into();
    fp.update_time = write_id;
    node.csi_node_plugins.insert(plugin.clone(), Arc::new(fp));
    Some(node)
}

/// One phase's writers and what they share: the cluster and dataset, the write-id
/// counter, the stop flag, the measuring window, and what they record.
#[derive(Clone)]
struct Clients {
    cluster: Arc<Cluster>,
    ds: Arc<Dataset>,
    next_id: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    window: Arc<Mutex<Option<(Instant, Instant)>>>,
    samples: Arc<Mutex<Vec<i64>>>,
    acks: Arc<Mutex<Vec<Ack>>>,
    /// (time, server) of every acknowledgement: the failover rounds look for the first
    /// one on a new leader.
    first_ack_by: Arc<Mutex<Vec<(Instant, u64)>>>,
}

impl Clients {
    /// A new phase over `cluster`: its own stop flag, window and records; the write
    /// ids and the acknowledged writes are the run's.
    fn new(
        cluster: &Arc<Cluster>,
        ds: &Arc<Dataset>,
        next_id: &Arc<AtomicU64>,
        acks: &Arc<Mutex<Vec<Ack>>>,
    ) -> Clients {
        Clients {
            cluster: cluster.clone(),
            ds: ds.clone(),
            next_id: next_id.clone(),
            stop: Arc::default(),
            window: Arc::default(),
            samples: Arc::default(),
            acks: acks.clone(),
            first_ack_by: Arc::default(),
        }
    }

    /// Starts `n` writers; writer `c` draws from SplitMix64(`seed_base` + c).
    fn spawn(&self, n: usize, seed_base: u64) -> Vec<tokio::task::JoinHandle<u64>> {
        (0..n)
            .map(|c| tokio::spawn(client_loop(self.clone(), seed_base + c as u64)))
            .collect()
    }

    /// Stops the writers and returns their error count.
    async fn stop(&self, handles: Vec<tokio::task::JoinHandle<u64>>) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let mut errors = 0;
        for h in handles {
            errors += h.await.expect("client");
        }
        errors
    }
}

/// One writer: until stopped, pick a node and a fingerprint, flip it, propose on the
/// leader; returns the errors it saw (each followed by a retry).
async fn client_loop(sh: Clients, seed: u64) -> u64 {
    let Clients {
        cluster,
        ds,
        next_id,
        stop,
        window,
        samples,
        acks,
        first_ack_by,
    } = sh;
    let mut g = SplitMix64(seed);
    let mut errors = 0;
    let mut leader = cluster.wait_leader(None).await;
    // When the write being tried was first tried: a write's latency includes its
    // retries (on a new leader after a failover or a hand-over).
    let mut first_try: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let i = g.intn(ds.nodes);
        let k = g.intn(2);
        let write_id = next_id.fetch_add(1, Ordering::Relaxed);
        let t0 = *first_try.get_or_insert_with(Instant::now);
        let Some(node) = flip(&leader, &ds, i, k, write_id) else {
            errors += 1;
            leader = cluster.wait_leader(None).await;
            continue;
        };
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            leader.propose(Command::UpsertNode { node }),
        )
        .await;
        let t1 = Instant::now();
        match result {
            Ok(Ok(c)) => {
                first_try = None;
                acks.lock().push((i, k, write_id, c.index));
                first_ack_by.lock().push((t1, leader.id()));
                if let Some((from, to)) = *window.lock()
                    && t1 >= from
                    && t1 < to
                {
                    samples.lock().push((t1 - t0).as_nanos() as i64);
                }
            }
            Ok(Err(ProposeError::Refused { error, .. })) => panic!("refused: {error}"),
            _ => {
                errors += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
                leader = cluster.wait_leader(None).await;
            }
        }
    }
    errors
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(parse_flags()));
}

async fn run(f: Flags) {
    let mut rep = Reporter::new();
    let o = options(&f);
    println!(
        "# raft_config heartbeat_interval={}ms election_timeout={}-{}ms max_payload_entries={} snapshot_policy={:?} snapshot_after_commands={} max_in_snapshot_log_to_keep={} transport=TCP(loopback,postcard,pooled) fsync=on(flusher thread, one fsync per batch)",
        o.raft.heartbeat_interval,
        o.raft.election_timeout_min,
        o.raft.election_timeout_max,
        o.raft.max_payload_entries,
        o.raft.snapshot_policy,
        o.snapshot_after_commands,
        o.raft.max_in_snapshot_log_to_keep
    );
    println!(
        "# workload nodes={} allocs-per-node={} plugins={} seed={} batch={} clients={:?} secs={} warmup={} failovers={} failover-clients={} servers={} encoding=postcard",
        f.nodes,
        f.allocs_per,
        f.plugins,
        f.seed,
        f.batch,
        f.clients,
        f.secs,
        f.warmup,
        f.failovers,
        f.failover_clients,
        f.servers
    );
    let ds = Arc::new(Dataset::generate(f.nodes, f.allocs_per, f.plugins, f.seed));
    println!("{}", ds.check_line());

    // ---- cluster start ----
    let mut listeners = Vec::new();
    for _ in 0..f.servers {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
    }
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().expect("addr").to_string())
        .collect();
    println!("# cluster addrs={}", addrs.join(","));
    let cluster = Arc::new(Cluster {
        root: tempfile::Builder::new()
            .prefix("raftbench-")
            .tempdir()
            .expect("tempdir"),
        addrs: addrs.clone(),
        opts: o.clone(),
        servers: Mutex::new((0..f.servers).map(|_| None).collect()),
    });
    rep.mark();
    let t = Instant::now();
    for (i, l) in listeners.into_iter().enumerate() {
        cluster.start_server(i, l).await;
    }
    cluster.live()[0]
        .initialize(
            addrs
                .iter()
                .enumerate()
                .map(|(i, a)| (i as u64 + 1, a.clone())),
        )
        .await
        .expect("initialize");
    let leader = cluster.wait_leader(None).await;
    let el = t.elapsed();
    rep.emit(
        "cluster_start",
        report::ns(el),
        1,
        &[("leader_elected_ms", el.as_secs_f64() * 1e3)],
    );

    // The disk's floor under a one-client commit, in this run, on the logs' disk.
    fsync_floor::fsync_floor(cluster.root.path(), &mut rep);

    // ---- preload ----
    let heap_before = alloc_counter::live_bytes();
    let (nodes, allocs) = ds.objects();
    rep.mark();
    let t = Instant::now();
    let mut last = 0;
    for b in 0..f.nodes.div_ceil(f.batch) {
        let lo = b * f.batch;
        let hi = (lo + f.batch).min(f.nodes);
        let allocs: Vec<Allocation> = allocs[lo * f.allocs_per..hi * f.allocs_per]
            .iter()
            .map(|a| (**a).clone())
            .collect();
        let batch: Vec<Node> = nodes[lo..hi].iter().map(|n| (**n).clone()).collect();
        leader
            .propose(Command::UpsertAllocs { allocs })
            .await
            .expect("preload allocs");
        last = leader
            .propose(Command::UpsertNodes { nodes: batch })
            .await
            .expect("preload nodes")
            .index;
    }
    let total = t.elapsed();
    for s in cluster.live() {
        s.wait_applied(last, Duration::from_secs(60))
            .await
            .expect("applied");
    }
    let all = t.elapsed();
    rep.emit(
        "preload",
        report::ns(total) / f.nodes as f64,
        f.nodes as u64,
        &[
            ("total_ms", total.as_secs_f64() * 1e3),
            ("all_applied_ms", all.as_secs_f64() * 1e3),
            ("batches", f.nodes.div_ceil(f.batch) as f64),
            ("entries", 2.0 * f.nodes.div_ceil(f.batch) as f64),
            ("allocs", (f.nodes * f.allocs_per) as f64),
        ],
    );
    drop((nodes, allocs));
    let live = cluster.live();
    // Superseded versions no reader holds are freed on the next write; free them now,
    // as the peer runs the GC before it reads its heap.
    for s in &live {
        s.reader().db().reclaim();
    }
    let heap = alloc_counter::live_bytes();
    rep.emit(
        "memory_after_preload",
        0.0,
        0,
        &[
            ("heap_alloc_mib", alloc_counter::mib(heap)),
            (
                "heap_alloc_before_preload_mib",
                alloc_counter::mib(heap_before),
            ),
            ("rss_mib", alloc_counter::mib(alloc_counter::rss_bytes())),
            ("fsm_replicas", 3.0),
        ],
    );

    // ---- replicated writes ----
    let next_id = Arc::new(AtomicU64::new(1));
    let all_acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
    for (p, &c) in f.clients.iter().enumerate() {
        let clients = Clients::new(&cluster, &ds, &next_id, &all_acks);
        let stats_before: Vec<(u64, schedstate_raft::LogStats)> = cluster
            .live()
            .iter()
            .map(|s| (s.id(), s.log_stats()))
            .collect();
        let cpu_before = own_cpu_secs();
        let acked_before = all_acks.lock().len();
        let handles = clients.spawn(c, 10_000 * (p as u64 + 1));
        tokio::time::sleep(Duration::from_secs_f64(f.warmup)).await;
        rep.mark();
        let from = Instant::now();
        let to = from + Duration::from_secs_f64(f.secs);
        *clients.window.lock() = Some((from, to));
        tokio::time::sleep_until(to.into()).await;
        let errors = clients.stop(handles).await;
        let cpu = own_cpu_secs() - cpu_before;
        let leader_id = cluster.wait_leader(None).await.id();
        let (mut le, mut lf, mut fe, mut ff, mut reads) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for srv in cluster.live() {
            let now = srv.log_stats();
            let Some((_, before)) = stats_before.iter().find(|(id, _)| *id == srv.id()) else {
                continue;
            };
            let (e, fs) = (now.entries - before.entries, now.fsyncs - before.fsyncs);
            reads += now.disk_reads - before.disk_reads;
            if srv.id() == leader_id {
                (le, lf) = (le + e, lf + fs);
            } else {
                (fe, ff) = (fe + e, ff + fs);
            }
        }
        let mut s = clients.samples.lock().clone();
        s.sort_unstable();
        let n = s.len() as u64;
        let leader = cluster.wait_leader(None).await;
        let target = leader.last_applied();
        let t = Instant::now();
        for srv in cluster.live() {
            srv.wait_applied(target, Duration::from_secs(60))
                .await
                .expect("drain");
        }
        let drain = t.elapsed();
        let hash_equal = states_equal(&cluster);
        rep.emit(
            &format!("write_c{c}"),
            f.secs * 1e9 / n.max(1) as f64,
            n,
            &[
                ("clients", c as f64),
                ("commits_per_s", (n as f64 / f.secs).round()),
                ("p50_us", us(pct(&s, 0.50))),
                ("p90_us", us(pct(&s, 0.90))),
                ("p99_us", us(pct(&s, 0.99))),
                ("max_us", us(s.last().copied().unwrap_or(0))),
                (
                    "leader_entries_per_fsync",
                    (le as f64 / lf.max(1) as f64 * 100.0).round() / 100.0,
                ),
                (
                    "commands_per_entry",
                    ((all_acks.lock().len() - acked_before) as f64 / le.max(1) as f64 * 100.0)
                        .round()
                        / 100.0,
                ),
                (
                    "follower_entries_per_fsync",
                    (fe as f64 / ff.max(1) as f64 * 100.0).round() / 100.0,
                ),
                ("log_disk_reads", reads as f64),
                (
                    "process_cores",
                    (cpu / (f.secs + f.warmup) * 100.0).round() / 100.0,
                ),
                ("cpu_us_per_commit", (cpu * 1e6 / n.max(1) as f64).round()),
                ("drain_ms", drain.as_secs_f64() * 1e3),
                ("errors", errors as f64),
                ("hash_equal", f64::from(u8::from(hash_equal))),
            ],
        );
    }

    // After the write phases every node has been rewritten many times over: what a
    // replica keeps in steady state, the log's cache of recent entries included.
    if !f.clients.is_empty() {
        for s in cluster.live() {
            s.reader().db().reclaim();
        }
        rep.emit(
            "memory_after_writes",
            0.0,
            0,
            &[
                (
                    "heap_alloc_mib",
                    alloc_counter::mib(alloc_counter::live_bytes()),
                ),
                ("rss_mib", alloc_counter::mib(alloc_counter::rss_bytes())),
            ],
        );
    }

    // ---- failover ----
    if f.failovers > 0 {
        let clients = Clients::new(&cluster, &ds, &next_id, &all_acks);
        let handles = clients.spawn(f.failover_clients, 90_000);
        rep.mark();
        let mut failover_ms = Vec::new();
        let mut election_ms = Vec::new();
        let mut rejoin_ms = Vec::new();
        for round in 1..=f.failovers {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let old = cluster.wait_leader(None).await;
            let oi = (old.id() - 1) as usize;
            let t0 = Instant::now();
            let taken = cluster.servers.lock()[oi].take();
            if let Some((s, ep)) = taken {
                ep.stop();
                drop(ep);
                s.shutdown().await;
            }
            let new = cluster.wait_leader(Some(old.id())).await;
            let elected = t0.elapsed();
            let first = loop {
                let hit = clients
                    .first_ack_by
                    .lock()
                    .iter()
                    .find(|(t, by)| *t > t0 && *by != old.id())
                    .map(|(t, _)| *t - t0);
                if let Some(d) = hit {
                    break d;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "no write after failover"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            tokio::time::sleep(Duration::from_millis(500)).await;
            let target = new.last_applied();
            let t1 = Instant::now();
            let listener = loop {
                match TcpListener::bind(&cluster.addrs[oi]).await {
                    Ok(l) => break l,
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            };
            let back = cluster.start_server(oi, listener).await;
            let opened = t1.elapsed();
            back.wait_applied(target, Duration::from_secs(60))
                .await
                .expect("rejoin");
            let rejoin = t1.elapsed();
            println!(
                "# failover round={round} killed=s{oi} new_leader=s{} election_ms={:.2} failover_ms={:.2} rejoin_ms={:.2} open_ms={:.2} rejoin_target_index={target}",
                new.id() - 1,
                elected.as_secs_f64() * 1e3,
                first.as_secs_f64() * 1e3,
                rejoin.as_secs_f64() * 1e3,
                opened.as_secs_f64() * 1e3
            );
            failover_ms.push(first.as_secs_f64() * 1e3);
            election_ms.push(elected.as_secs_f64() * 1e3);
            rejoin_ms.push(rejoin.as_secs_f64() * 1e3);
        }
        let errors = clients.stop(handles).await;
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let maxf = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let fmax = maxf(&failover_ms);
        let rmax = maxf(&rejoin_ms);
        let fp50 = med(&mut failover_ms);
        rep.emit(
            "failover",
            fp50 * 1e6,
            f.failovers as u64,
            &[
                ("failovers", f.failovers as f64),
                ("failover_p50_ms", fp50),
                ("failover_max_ms", fmax),
                ("election_p50_ms", med(&mut election_ms)),
                ("rejoin_p50_ms", med(&mut rejoin_ms)),
                ("rejoin_max_ms", rmax),
                ("client_errors", errors as f64),
            ],
        );
    }

    // ---- planned restarts ----
    if f.restarts > 0 {
        let clients = Clients::new(&cluster, &ds, &next_id, &all_acks);
        let handles = clients.spawn(f.failover_clients, 95_000);
        rep.mark();
        restarts::run(&f, &cluster, &clients, &mut rep).await;
        let errors = clients.stop(handles).await;
        println!("# restart client_errors={errors}");
    }

    // ---- final consistency ----
    rep.mark();
    let leader = cluster.wait_leader(None).await;
    let barrier = leader
        .read_consistent()
        .await
        .map(|_| leader.last_applied())
        .expect("read index");
    for s in cluster.live() {
        s.wait_applied(barrier, Duration::from_secs(60))
            .await
            .expect("final");
    }
    let acks = all_acks.lock().clone();
    let (missing, checked) = check_acks(&cluster, &ds, &acks);
    let hash_equal = states_equal(&cluster);
    let verify_ok = cluster
        .live()
        .iter()
        .all(|s| s.read_stale().view().check_invariants().is_ok());
    rep.emit(
        "consistency",
        0.0,
        acks.len() as u64,
        &[
            (
                "nothing_lost",
                f64::from(u8::from(
                    missing == 0 && hash_equal && verify_ok && cluster.live().len() == f.servers,
                )),
            ),
            ("live_servers", cluster.live().len() as f64),
            ("hash_equal", f64::from(u8::from(hash_equal))),
            ("verify_ok", f64::from(u8::from(verify_ok))),
            ("acked_writes", acks.len() as f64),
            ("acked_missing", missing as f64),
            ("acked_checked_exactly", checked as f64),
            ("last_index", leader.last_applied() as f64),
        ],
    );
    let mut file_bytes = 0u64;
    for e in walk(cluster.root.path()) {
        file_bytes += e;
    }
    rep.emit(
        "raft_disk",
        0.0,
        leader.last_applied(),
        &[("file_mib_total", alloc_counter::mib(file_bytes))],
    );
    for s in cluster.live() {
        s.shutdown().await;
    }
    if let Some(path) = &f.json {
        let meta = serde_json::json!({
            "bench": "schedstate-raft raft_workload",
            "nodes": f.nodes,
            "clients": f.clients,
            "secs": f.secs,
            "failovers": f.failovers,
            "heartbeat_ms": o.raft.heartbeat_interval,
            "election_timeout_ms": [o.raft.election_timeout_min, o.raft.election_timeout_max],
        });
        rep.write_json(path, meta).expect("write -json");
    }
}

fn walk(dir: &std::path::Path) -> Vec<u64> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(m.len());
            }
        }
    }
    out
}

fn states_equal(cluster: &Cluster) -> bool {
    let bytes: Vec<Vec<u8>> = cluster
        .live()
        .iter()
        .map(|s| s.read_stale().canonical_bytes().expect("canonical"))
        .collect();
    bytes.windows(2).all(|w| w[0] == w[1])
}

/// Every acknowledged write is in every server's state: its node was last modified at
/// or after the write's index, and when the write is the node's last modification, the
/// node carries its fingerprint. Returns (missing, checked exactly).
fn check_acks(cluster: &Cluster, ds: &Dataset, acks: &[Ack]) -> (u64, u64) {
    // Per node: its newest commit index and every write acknowledged at it. Batched
    // proposals put several commands in one entry, all acknowledged with the entry's
    // index; two of them may rewrite the same node (each from the node it read), and
    // the state then holds whichever the entry applied last. So the node must be at
    // that index holding one of them.
    let mut last: HashMap<usize, (u64, Vec<(usize, u64)>)> = HashMap::new();
    for &(i, k, id, index) in acks {
        let e = last.entry(i).or_insert((index, Vec::new()));
        if index > e.0 {
            *e = (index, Vec::new());
        }
        if index == e.0 {
            e.1.push((k, id));
        }
    }
    let mut missing = 0;
    let mut exact = 0;
    for s in cluster.live() {
        let snap = s.read_stale();
        for (&i, (index, writes)) in &last {
            let Some(node) = snap.view().node(&ds.node_ids[i]) else {
                missing += 1;
                continue;
            };
            if node.modify_index < *index {
                missing += 1;
            } else if node.modify_index == *index {
                let holds = |&(k, id): &(usize, u64)| {
                    let plugin = &ds.plugin_ids[ds.node_plugins[i][k]];
                    node.csi_node_plugins
                        .get(plugin)
                        .is_some_and(|fp| fp.update_time == id)
                };
                if writes.iter().any(holds) {
                    exact += 1;
                } else {
                    missing += 1;
                }
            }
        }
    }
    (missing, exact)
}
