//! `-phase waiters`: commit cost with many parked blocking queries (issue 15), the port
//! of the go-memdb probe `../shared/peers/go-memdb/waiters/main.go`.
//!
//! Per count N of `-waiters`, a fresh store gets the probe's shape: the dataset's
//! allocations only (`-nodes` × `-allocs-per-node`, 100,000 on 10,000 nodes by
//! default; the probe loads no nodes either), loaded by `upsert_allocs` commands of
//! `-batch` nodes' allocs. Then N waiters each read allocs-by-node of node `i % nodes`
//! through a watched view and park on the watch set, as a Nomad client's blocking query
//! on its allocations. A waiter is an async task on a one-worker tokio runtime (the
//! Go probe's are goroutines): 50,000 threads would measure the scheduler, not the
//! store. Then two timed runs of `-waiter-commits` one-alloc `upsert_allocs`, each
//! inserting a new alloc:
//! - `waiters`: on nodes nobody watches (the last ten nodes while N leaves them
//!   unwatched, as the probe does below 10,000; otherwise ten node ids outside the
//!   dataset). Any wake-up here would be a false one: the run fails on one.
//! - `waiters_wake`: on watched nodes, round robin (the probe's targets from 10,000
//!   waiters up): a commit wakes the waiters of its node the first time, and their
//!   tasks finish and unregister while the writer goes on.
//!
//! Each line carries the commit p50/p99 (the whole `upsert_allocs`, the alloc built
//! before the clock starts), the waiters registered and woken, and the set-up and
//! tear-down cost per waiter (reading, registering; cancelling, unregistering).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use schedstate::engine::WatchSet;
use schedstate::model::{Allocation, Id};
use schedstate::state::StateStore;

use crate::dataset::Dataset;
use crate::flags::Flags;
use crate::report::{Reporter, pct, us};

/// Longest the set-up may take before the run fails loudly.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Nodes the unwatched commits rotate over (the probe's ten).
const TARGETS: usize = 10;

/// Runs the probe once per waiter count.
pub fn run(rep: &mut Reporter, f: &Flags, ds: &Dataset, allocs: &[Arc<Allocation>]) {
    println!(
        "# note waiters: {} allocs on {} nodes, no node rows (as the probe); N waiters = async \
tasks parked on a watch set over allocs_by_node(node i % nodes); {} one-alloc upsert_allocs \
timed per line; waiters = commits on unwatched nodes, waiters_wake = on watched nodes",
        allocs.len(),
        ds.nodes,
        f.waiter_commits
    );
    for &n in &f.waiters {
        one_count(rep, f, ds, allocs, n);
    }
}

/// Waiters parked on one store, with the counts they report.
struct Parked {
    rt: tokio::runtime::Runtime,
    woken: Arc<AtomicUsize>,
    early: Arc<AtomicUsize>,
}

fn one_count(rep: &mut Reporter, f: &Flags, ds: &Dataset, allocs: &[Arc<Allocation>], n: usize) {
    let (store, mut index) = load(f, allocs);
    let t0 = Instant::now();
    let parked = park(&store, ds, n);
    let setup = t0.elapsed();
    let registered = store.reader().db().registered_watches();
    assert_eq!(
        parked.early.load(Ordering::Acquire),
        0,
        "waiters: a fresh watch fired before any write"
    );
    // As the probe: let every waiter settle before the clock starts.
    thread::sleep(Duration::from_millis(200));

    // Unwatched nodes: the last ten while N leaves them unwatched, else ids outside the
    // dataset.
    let outside: Vec<Id> = (0..TARGETS)
        .map(|k| Id::from(format!("ffffffff-ffff-0000-0000-{k:012x}")))
        .collect();
    let unwatched: Vec<&Id> = if n + TARGETS <= ds.nodes {
        (0..TARGETS)
            .map(|k| &ds.node_ids[ds.nodes - 1 - k])
            .collect()
    } else {
        outside.iter().collect()
    };
    let template = &allocs[0];
    rep.mark();
    let times = commits(&store, &mut index, template, f.waiter_commits, 0xb, |r| {
        unwatched[r % unwatched.len()]
    });
    // The probe's pause before counting: a late false wake would show here.
    thread::sleep(Duration::from_millis(100));
    let false_wakes = parked.woken.load(Ordering::Acquire);
    emit(rep, "waiters", n, &times, registered, false_wakes, setup);
    assert_eq!(
        false_wakes, 0,
        "waiters: a commit on an unwatched node woke a waiter"
    );

    let (rt, woken) = (parked.rt, parked.woken);
    if n > 0 {
        let watched = n.min(ds.nodes);
        rep.mark();
        let times = commits(&store, &mut index, template, f.waiter_commits, 0xc, |r| {
            &ds.node_ids[r % watched]
        });
        // The first commit on a watched node wakes every waiter of that node (waiter i
        // watches node i % nodes), and nobody else.
        let expect = (0..f.waiter_commits.min(watched))
            .map(|j| n / ds.nodes + usize::from(j < n % ds.nodes))
            .sum::<usize>();
        let t = Instant::now();
        while woken.load(Ordering::Acquire) < expect && t.elapsed() < READY_TIMEOUT {
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(Duration::from_millis(100)); // a false wake would show here
        let woke = woken.load(Ordering::Acquire);
        emit(rep, "waiters_wake", n, &times, registered, woke, setup);
        assert_eq!(woke, expect, "waiters_wake: woken waiters");
    }

    // Cancelling every task drops its watch set, which unregisters it.
    let t1 = Instant::now();
    drop(rt);
    let teardown = t1.elapsed();
    let left = store.reader().db().registered_watches();
    assert_eq!(left, 0, "waiters: dropped watch sets left registrations");
    println!(
        "# waiters={n} teardown_us_per_waiter={}",
        us(per_waiter(teardown, n))
    );
}

/// A fresh store with the dataset's allocations, one `upsert_allocs` per `-batch`
/// nodes. Returns the store and the last index used.
fn load(f: &Flags, allocs: &[Arc<Allocation>]) -> (StateStore, u64) {
    let store = StateStore::new();
    let mut index = 0;
    for chunk in allocs.chunks((f.batch * f.allocs_per_node).max(1)) {
        index += 1;
        let batch: Vec<Allocation> = chunk.iter().map(|a| (**a).clone()).collect();
        store.upsert_allocs(index, batch).expect("load allocs");
    }
    (store, index)
}

/// Spawns `n` waiters and returns once every one is registered.
fn park(store: &StateStore, ds: &Dataset, n: usize) -> Parked {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .expect("tokio runtime");
    let ready = Arc::new(AtomicUsize::new(0));
    let woken = Arc::new(AtomicUsize::new(0));
    let early = Arc::new(AtomicUsize::new(0));
    for i in 0..n {
        let store = store.clone();
        let node = ds.node_ids[i % ds.nodes].clone();
        let (ready, woken, early) = (Arc::clone(&ready), Arc::clone(&woken), Arc::clone(&early));
        rt.spawn(async move {
            let ws = WatchSet::new();
            {
                let snap = store.snapshot();
                black_box(snap.watched(&ws).allocs_by_node(&node).count());
            }
            let changed = ws.changed(); // registers
            if ws.is_fired() {
                early.fetch_add(1, Ordering::AcqRel);
            }
            ready.fetch_add(1, Ordering::AcqRel);
            changed.await;
            woken.fetch_add(1, Ordering::AcqRel);
        });
    }
    let t0 = Instant::now();
    while ready.load(Ordering::Acquire) < n {
        assert!(t0.elapsed() < READY_TIMEOUT, "waiters: set-up timed out");
        thread::sleep(Duration::from_millis(1));
    }
    Parked { rt, woken, early }
}

/// `count` timed `upsert_allocs` of one new alloc each, on `node(r)` for round `r`.
/// Alloc ids are UUID-shaped, distinct per run through `tag`.
fn commits<'a>(
    store: &StateStore,
    index: &mut u64,
    template: &Allocation,
    count: usize,
    tag: u64,
    node: impl Fn(usize) -> &'a Id,
) -> Vec<i64> {
    let mut times = Vec::with_capacity(count);
    for r in 0..count {
        let mut a = template.clone();
        a.id = Id::from(format!("{tag:08x}-0000-0000-0000-{r:012x}"));
        a.node_id = node(r).clone();
        *index += 1;
        let t = Instant::now();
        store.upsert_allocs(*index, vec![a]).expect("upsert_allocs");
        let el = t.elapsed();
        times.push(i64::try_from(el.as_nanos()).unwrap_or(i64::MAX));
    }
    times
}

/// `d` per waiter; 0 without waiters (the runtime's own start or stop is no cost of
/// a waiter).
fn per_waiter(d: Duration, n: usize) -> i64 {
    if n == 0 {
        return 0;
    }
    i64::try_from(d.as_nanos() / n as u128).unwrap_or(i64::MAX)
}

fn emit(
    rep: &mut Reporter,
    name: &str,
    n: usize,
    times: &[i64],
    registered: usize,
    woken: usize,
    setup: Duration,
) {
    rep.emit(
        name,
        pct(times, 0.5) as f64,
        times.len() as u64,
        &[
            ("waiters", n as f64),
            ("commit_p50_us", us(pct(times, 0.50))),
            ("commit_p99_us", us(pct(times, 0.99))),
            ("registered_items", registered as f64),
            ("woken", woken as f64),
            ("setup_us_per_waiter", us(per_waiter(setup, n))),
        ],
    );
}
