//! Benchmarks of the generic MVCC engine (crate `schedstate-engine`).
//!
//! Dataset: one table of 100,000 rows keyed by UUID-like 36-character ids, each row a
//! small struct with an id and a `node` field, plus a non-unique secondary index on
//! `node` holding 10 rows per node (10,000 nodes). Everything is generated
//! deterministically with SplitMix64 (`common/splitmix.rs`) exactly as the go-memdb peer
//! benchmark generates its allocations (`peers/go-memdb/RESULTS.md` §4.2: seed 42, same
//! ids, same lookup sequences), so runs are comparable with each other and with the
//! peer.
//!
//! Run with `cargo bench --bench engine`; one benchmark with
//! `cargo bench --bench engine -- commit_to_wake`.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use schedstate_engine::{Db, Index, Key, Schema, Table, WaitOutcome, WatchSet};

// The data generator shared with the workspace root's benchmarks (same ids, same dataset).
#[path = "../../../benches/common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix64;

const NODES: usize = 10_000;
const ROWS_PER_NODE: usize = 10;
const ROWS: usize = NODES * ROWS_PER_NODE;
/// Number of CSI plugins of the peer workload (only drawn, to keep the ids identical).
const PLUGINS: usize = 10;
/// Length of the precomputed random lookup sequences.
const LOOKUPS: usize = 1 << 20;

/// How long the commit-to-wake benchmark waits for anything before giving up loudly.
const WAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between the waiter's registration and the commit, so that it is parked (the
/// peer sleeps 100 µs too).
const PARK_PAUSE: Duration = Duration::from_micros(100);

/// `len` random indexes below `n`.
fn indexes(rng: &mut SplitMix64, n: usize, len: usize) -> Vec<u32> {
    (0..len).map(|_| rng.intn(n) as u32).collect()
}

/// A row: an allocation placed on a node.
#[derive(Debug)]
struct Alloc {
    id: Arc<str>,
    node: Arc<str>,
    version: u64,
}

struct Fixture {
    db: Db,
    allocs: Table<Alloc>,
    by_node: Index<Alloc>,
    /// Every row's id; row `i` lives on node `i / ROWS_PER_NODE`.
    ids: Vec<Arc<str>>,
    /// The node of every row.
    node_of: Vec<Arc<str>>,
    /// Encoded primary keys of every row.
    row_keys: Vec<Key>,
    /// Encoded `by_node` index keys of every node.
    node_keys: Vec<Key>,
}

fn fixture() -> Fixture {
    // As the peer: per node, its id, two plugin draws (unused here), then its rows' ids.
    let mut rng = SplitMix64(42);
    let mut nodes: Vec<Arc<str>> = Vec::with_capacity(NODES);
    let mut ids: Vec<Arc<str>> = Vec::with_capacity(ROWS);
    for _ in 0..NODES {
        nodes.push(Arc::from(rng.uuid()));
        let _p1 = rng.intn(PLUGINS);
        let _p2 = rng.intn(PLUGINS - 1);
        ids.extend((0..ROWS_PER_NODE).map(|_| Arc::from(rng.uuid())));
    }
    let node_of: Vec<Arc<str>> = (0..ROWS)
        .map(|i| Arc::clone(&nodes[i / ROWS_PER_NODE]))
        .collect();
    println!(
        "# dataset node0={} alloc0={} rows={ROWS} nodes={NODES}",
        nodes[0], ids[0]
    );
    // The peer's check line starts `# dataset node0=bdd73226-… alloc0=09bc585a-…`.
    assert_eq!(
        &*nodes[0], "bdd73226-2feb-6e95-28ef-e333b266f103",
        "dataset drift"
    );
    assert_eq!(
        &*ids[0], "09bc585a-2448-23f2-de44-31fa3c80db06",
        "dataset drift"
    );

    let mut schema = Schema::new();
    let allocs = schema
        .table("allocs", |a: &Alloc| Key::str(&a.id))
        .expect("table");
    let by_node = schema
        .index(allocs, "node", false, |a: &Alloc| Some(Key::str(&a.node)))
        .expect("index");
    let db = Db::new(schema);

    let mut txn = db.begin_write(1).expect("begin");
    for (id, node) in ids.iter().zip(&node_of) {
        let row = Alloc {
            id: Arc::clone(id),
            node: Arc::clone(node),
            version: 0,
        };
        txn.insert(allocs, Arc::new(row)).expect("insert");
    }
    txn.commit().expect("commit");

    let row_keys: Vec<Key> = ids.iter().map(|id| Key::str(id)).collect();
    let node_keys: Vec<Key> = nodes.iter().map(|n| Key::str(n)).collect();
    let snap = db.snapshot();
    assert_eq!(snap.view().len(allocs), ROWS, "dataset: row count");
    for key in &node_keys[..100] {
        let n = snap.view().index_eq(by_node, key).count();
        assert_eq!(n, ROWS_PER_NODE, "dataset: rows per node");
    }
    Fixture {
        db,
        allocs,
        by_node,
        ids,
        node_of,
        row_keys,
        node_keys,
    }
}

fn bench_reads(c: &mut Criterion, fx: &Fixture) {
    c.bench_function("snapshot", |b| b.iter(|| black_box(fx.db.snapshot())));

    // Random point gets (with replacement), as the peer's `point_read_alloc`.
    let snap = fx.db.snapshot();
    let order = indexes(&mut SplitMix64(1001), ROWS, LOOKUPS);
    let mut i = 0usize;
    c.bench_function("get_100k", |b| {
        b.iter(|| {
            let key = &fx.row_keys[order[i] as usize];
            i = (i + 1) % LOOKUPS;
            black_box(snap.view().get(fx.allocs, black_box(key)))
        })
    });

    // All rows of a random node through the index, as the peer's `index_scan`.
    let order = indexes(&mut SplitMix64(2001), NODES, LOOKUPS);
    let mut i = 0usize;
    c.bench_function("index_scan_10_rows", |b| {
        b.iter(|| {
            let key = &fx.node_keys[order[i] as usize];
            i = (i + 1) % LOOKUPS;
            let mut n = 0usize;
            for row in snap.view().index_eq(fx.by_node, black_box(key)) {
                black_box(&row);
                n += 1;
            }
            assert_eq!(n, ROWS_PER_NODE);
            n
        })
    });
}

/// Replaces one random existing row (same key, same node, new `Arc`) and commits,
/// while a snapshot taken before the benchmark stays alive. The table stays at 100,000
/// rows. Log indexes continue from the last one applied.
fn bench_write(c: &mut Criterion, fx: &Fixture) {
    let held = fx.db.snapshot();
    let mut rng = SplitMix64(3002);
    let mut index = fx.db.last_applied();
    c.bench_function("write_txn_under_snapshot", |b| {
        b.iter(|| {
            let i = rng.intn(ROWS);
            index += 1;
            let row = Alloc {
                id: Arc::clone(&fx.ids[i]),
                node: Arc::clone(&fx.node_of[i]),
                version: index,
            };
            let mut txn = fx.db.begin_write(index).expect("begin");
            txn.insert(fx.allocs, Arc::new(row)).expect("insert");
            txn.commit().expect("commit")
        })
    });
    // The old snapshot still sees the original rows.
    for key in &fx.row_keys[..100] {
        let row = held
            .view()
            .get(fx.allocs, key)
            .expect("row in held snapshot");
        assert_eq!(row.version, 0, "a held snapshot changed");
    }
}

/// `write_txn_under_snapshot` with 10,000 parked index watches: two watch sets per node
/// on nodes 0..5,000, each over `index_eq(by_node, node)` (a client's blocking query on
/// its allocations), and the writes on rows of the other nodes, which nobody watches.
/// The registry is looked up per changed key, so this should cost what the write
/// without waiters costs (issue 15: with ranges scanned per changed key, 10,000 such
/// waiters made a commit 25 times slower).
fn bench_write_with_waiters(c: &mut Criterion, fx: &Fixture) {
    const WAITERS: usize = 10_000;
    let watched_nodes = NODES / 2;
    let snap = fx.db.snapshot();
    let sets: Vec<WatchSet> = (0..WAITERS)
        .map(|i| {
            let ws = WatchSet::new();
            let n = snap
                .watched(&ws)
                .index_eq(fx.by_node, &fx.node_keys[i % watched_nodes])
                .count();
            assert_eq!(n, ROWS_PER_NODE);
            // A zero wait registers the set.
            assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::TimedOut);
            ws
        })
        .collect();
    drop(snap);
    assert_eq!(fx.db.registered_watches(), WAITERS);
    let mut rng = SplitMix64(3003);
    let mut index = fx.db.last_applied();
    let first_unwatched = watched_nodes * ROWS_PER_NODE;
    c.bench_function("write_txn_with_10k_index_waiters", |b| {
        b.iter(|| {
            let i = first_unwatched + rng.intn(ROWS - first_unwatched);
            index += 1;
            let row = Alloc {
                id: Arc::clone(&fx.ids[i]),
                node: Arc::clone(&fx.node_of[i]),
                version: index,
            };
            let mut txn = fx.db.begin_write(index).expect("begin");
            txn.insert(fx.allocs, Arc::new(row)).expect("insert");
            txn.commit().expect("commit")
        })
    });
    let woken = sets.iter().filter(|ws| ws.is_fired()).count();
    assert_eq!(woken, 0, "a write on an unwatched node woke a waiter");
    drop(sets);
    assert_eq!(fx.db.registered_watches(), 0);
}

/// One waiter thread blocked in `WatchSet::wait_timeout` on one key; a one-row write
/// transaction on that key. As the peer's `blocking_wake`, the transaction is prepared
/// first and the time runs from the start of `commit()` to the waiter's
/// `Instant::now()` after it woke.
fn bench_wake(c: &mut Criterion, fx: &Fixture) {
    let db = fx.db.clone();
    let allocs = fx.allocs;
    let key_id = Arc::clone(&fx.ids[0]);
    let key = Key::str(&key_id);
    let node = Arc::clone(&fx.node_of[0]);

    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (woke_tx, woke_rx) = mpsc::channel::<(WaitOutcome, Instant)>();
    let waiter = {
        let db = db.clone();
        thread::spawn(move || {
            // One round per message; ends when the sender is dropped.
            while go_rx.recv().is_ok() {
                let snap = db.snapshot();
                let ws = WatchSet::new();
                black_box(snap.watched(&ws).get(allocs, &key));
                let outcome = ws.wait_timeout(WAKE_TIMEOUT);
                let woke = Instant::now();
                drop(ws); // unregister before reporting, so the next round starts clean
                if woke_tx.send((outcome, woke)).is_err() {
                    break;
                }
            }
        })
    };

    let mut wakes: Vec<Duration> = Vec::new();
    let mut commits: Vec<Duration> = Vec::new();
    c.bench_function("commit_to_wake", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Not timed: start the waiter, prepare the transaction, wait until the
                // watch is registered, then give the waiter time to park.
                go_tx.send(()).expect("waiter thread alive");
                let index = db.last_applied() + 1;
                let row = Alloc {
                    id: Arc::clone(&key_id),
                    node: Arc::clone(&node),
                    version: index,
                };
                let mut txn = db.begin_write(index).expect("begin");
                txn.insert(allocs, Arc::new(row)).expect("insert");
                let t0 = Instant::now();
                while db.registered_watches() == 0 {
                    assert!(t0.elapsed() < WAKE_TIMEOUT, "waiter never registered");
                    thread::yield_now();
                }
                thread::sleep(PARK_PAUSE);

                let start = Instant::now();
                txn.commit().expect("commit");
                let committed = Instant::now();
                let (outcome, woke) = woke_rx
                    .recv_timeout(WAKE_TIMEOUT)
                    .expect("waiter did not report a wake");
                assert_eq!(outcome, WaitOutcome::Changed, "waiter timed out");
                let d = woke.saturating_duration_since(start);
                wakes.push(d);
                commits.push(committed - start);
                total += d;
            }
            total
        })
    });
    drop(go_tx);
    waiter.join().expect("waiter thread");

    // Criterion reports per-sample means; the tail matters for wakes too. Percentiles
    // as the peer takes them (sorted, index floor(n * q)), over every round, warm-up
    // included.
    for (name, samples) in [("wake", &mut wakes), ("commit", &mut commits)] {
        samples.sort_unstable();
        let n = samples.len();
        if n == 0 {
            continue;
        }
        let pct = |q: usize| samples[(n * q / 100).min(n - 1)];
        println!(
            "commit_to_wake {name}: n={n} p50={:?} p99={:?} max={:?}",
            pct(50),
            pct(99),
            samples[n - 1]
        );
    }
}

fn engine(c: &mut Criterion) {
    let fx = fixture();
    bench_reads(c, &fx);
    bench_write(c, &fx);
    bench_write_with_waiters(c, &fx);
    bench_wake(c, &fx);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = engine
}
criterion_main!(benches);
