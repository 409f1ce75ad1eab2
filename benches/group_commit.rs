//! Group commit: commits per second and fsyncs per commit of a `DurableStore` under
//! `SyncPolicy::EveryCommit` with 1, 4, 16 and 64 writer threads, each calling
//! `apply_next` with a one-node upsert (a client heartbeat that flips a fingerprint's
//! health, as the peers' replicated workload does). Real fsyncs on the disk that holds
//! `target/` (where the data directory is made).
//!
//! ```text
//! cargo bench --bench group_commit                 # 3 s per writer count
//! cargo bench --bench group_commit -- 10 1,64      # 10 s, only 1 and 64 writers
//! ```
//!
//! Output: one line per writer count — commits/s, fsyncs per commit, p50/p99 commit
//! latency — and the ratio to the single writer. Every acknowledged commit is checked
//! after a reopen.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use schedstate::model::{CsiInfo, CsiNodeInfo, Node};
use schedstate::persist::faults::{Faults, Op};
use schedstate::persist::{DurableStore, Options, SyncPolicy};
use schedstate::{Command, Table};

/// Client nodes the writers report for (each writer thread owns its own nodes).
const NODES_PER_WRITER: usize = 50;

fn node(writer: usize, n: usize, healthy: bool) -> Node {
    let mut node = Node::new(format!("w{writer}-n{n}").as_str(), "client");
    node.add_csi_plugin(
        CsiInfo::node_instance(
            "ebs",
            format!("alloc-w{writer}-n{n}").as_str(),
            CsiNodeInfo::default(),
        )
        .with_provider("ebs.csi.aws.com", "1.25.0")
        .with_health(healthy, if healthy { "healthy" } else { "probe failed" }),
    );
    node
}

struct Result {
    writers: usize,
    commits: u64,
    fsyncs: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

fn run(writers: usize, seconds: u64) -> Result {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/group-commit-bench");
    let dir = root.join(format!("w{writers}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&root).expect("bench dir");
    let faults = Faults::scope(&dir);
    let options = Options {
        sync: policy(),
        compact_after_bytes: u64::MAX,
    };
    let (db, _) = DurableStore::open(&dir, options.clone()).expect("open");
    // Every node registered once, healthy.
    let nodes: Vec<Node> = (0..writers)
        .flat_map(|w| (0..NODES_PER_WRITER).map(move |n| node(w, n, true)))
        .collect();
    db.apply_next(Command::UpsertNodes { nodes })
        .expect("preload");
    let syncs_before = faults.counts().get(&Op::Sync).copied().unwrap_or(0);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let db = db.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let n = i % NODES_PER_WRITER;
                    let healthy = (i / NODES_PER_WRITER) % 2 == 1;
                    let t = Instant::now();
                    db.apply_next(Command::UpsertNode {
                        node: node(w, n, healthy),
                    })
                    .expect("commit");
                    latencies.push(t.elapsed());
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut latencies: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("writer"))
        .collect();
    let elapsed = start.elapsed();
    let fsyncs = faults.counts().get(&Op::Sync).copied().unwrap_or(0) - syncs_before;
    latencies.sort_unstable();
    let commits = latencies.len() as u64;
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q) as usize];
    let (p50, p99) = (at(0.50), at(0.99));
    // Every acknowledged commit is on disk.
    let last = db.snapshot().view().last_applied();
    drop(db);
    drop(faults);
    let (db, report) = DurableStore::open(&dir, options).expect("reopen");
    assert_eq!(report.last_applied, last, "acknowledged commits lost");
    assert_eq!(last, commits + 1, "one index per commit");
    assert!(db.snapshot().view().table_index(Table::Nodes) > 0);
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    Result {
        writers,
        commits,
        fsyncs,
        elapsed,
        p50,
        p99,
    }
}

/// `SCHEDSTATE_BENCH_SYNC=group|never` measures the other policies (default: every).
fn policy() -> SyncPolicy {
    match std::env::var("SCHEDSTATE_BENCH_SYNC").as_deref() {
        Ok("group") => SyncPolicy::Group,
        Ok("never") => SyncPolicy::Never,
        _ => SyncPolicy::EveryCommit,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; positional arguments are ours.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let seconds = args.first().and_then(|s| s.parse().ok()).unwrap_or(3);
    let counts: Vec<usize> = args
        .get(1)
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 16, 64]);
    println!(
        "# group commit: {:?}, apply_next, one-node upserts, {seconds} s per run",
        policy()
    );
    println!(
        "{:>8} {:>10} {:>11} {:>14} {:>10} {:>10} {:>8}",
        "writers", "commits", "commits/s", "fsyncs/commit", "p50", "p99", "vs 1"
    );
    let mut single = None;
    for writers in counts {
        let r = run(writers, seconds);
        let rate = r.commits as f64 / r.elapsed.as_secs_f64();
        let base = *single.get_or_insert(rate);
        println!(
            "{:>8} {:>10} {:>11.0} {:>14.3} {:>10.2?} {:>10.2?} {:>7.1}x",
            r.writers,
            r.commits,
            rate,
            r.fsyncs as f64 / r.commits as f64,
            r.p50,
            r.p99,
            rate / base
        );
    }
}
