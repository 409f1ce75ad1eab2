//! The watch phases: `blocking_wake` (a sync, then an async waiter),
//! `watch_granularity`, `blocking_wake_many`, and schedstate's own
//! `thread_wake_floor` (the peer has none): what waking a parked thread costs on this
//! machine at all, the floor under every synchronous wake above.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use schedstate::engine::{WaitOutcome, WatchSet};
use schedstate::model::Id;
use schedstate::state::{Command, StateError, StateView};

use crate::flags::Flags;
use crate::report::{Reporter, pct, signed_ns, us};
use crate::splitmix::SplitMix64;
use crate::store::{Ctx, register};

/// Longest any wait in the wake workloads may take before the run fails loudly.
const WAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the watch phases in the peer's order.
pub fn run(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    rep.mark();
    // g. blocking_wake (sync waiter thread, then an async waiter)
    blocking_wake(ctx, rep, f, false);
    rep.mark();
    blocking_wake(ctx, rep, f, true);
    rep.mark();
    watch_granularity(ctx, rep, f);
    rep.mark();
    blocking_wake_many(ctx, rep, f);
    rep.mark();
    thread_wake_floor(rep, f.wake_rounds);
}

/// A bare wake of a parked thread, shaped as the wake phases are: the waiter parks
/// (`thread::park`, a futex on Linux), the writer sleeps 1 ms so that it is parked,
/// reads the clock and unparks it; the latency runs to the waiter's clock after it
/// woke. No store, no watch: the OS's part of every synchronous wake above, measured
/// in the same run.
fn thread_wake_floor(rep: &mut Reporter, rounds: usize) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let go = AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (woke_tx, woke_rx) = mpsc::channel::<Instant>();
    let mut wake = Vec::with_capacity(rounds);
    thread::scope(|s| {
        let go = &go;
        let waiter = s.spawn(move || {
            for _ in 0..rounds {
                go.store(false, Ordering::Release);
                if ready_tx.send(()).is_err() {
                    return;
                }
                while !go.load(Ordering::Acquire) {
                    thread::park();
                }
                if woke_tx.send(Instant::now()).is_err() {
                    return;
                }
            }
        });
        let handle = waiter.thread().clone();
        for _ in 0..rounds {
            ready_rx
                .recv_timeout(WAKE_TIMEOUT)
                .expect("thread_wake_floor: waiter never got ready");
            thread::sleep(Duration::from_millis(1));
            let t0 = Instant::now();
            go.store(true, Ordering::Release);
            handle.unpark();
            let w = woke_rx
                .recv_timeout(WAKE_TIMEOUT)
                .expect("thread_wake_floor: no wake report");
            wake.push(signed_ns(w, t0));
        }
    });
    rep.emit(
        "thread_wake_floor",
        pct(&wake, 0.5) as f64,
        rounds as u64,
        &[
            ("p50_us", us(pct(&wake, 0.50))),
            ("p99_us", us(pct(&wake, 0.99))),
            ("max_us", us(pct(&wake, 1.0))),
        ],
    );
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
                        black_box(snap.watched(&ws).csi_plugin(&pid));
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
                    black_box(snap.watched(&ws).csi_plugin(&pid));
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
    let mut r = SplitMix64(4001);
    let (mut false_wakes, mut true_wakes, mut other_table, mut missing_key) = (0, 0, 0, 0);
    let (mut iter_false, mut table_iter, mut absent_created) = (0, 0, 0);
    let n_allocs = ds.alloc_ids.len();
    for i in 0..f.wake_rounds {
        // 1. row watch on plugin-00, write plugin-01: must not fire.
        let w = |v: StateView<'_>| {
            black_box(v.csi_plugin(&watched));
        };
        false_wakes += u64::from(ctx.fired_after(w, |c| c.touch_plugin(&other)));
        // 2. row watch on plugin-00, write plugin-00: must fire.
        true_wakes += u64::from(ctx.fired_after(w, |c| c.touch_plugin(&watched)));
        // 3. row watch on plugin-00, write a random alloc (another table).
        let aid = ds.alloc_ids[r.intn(n_allocs)].clone();
        other_table += u64::from(ctx.fired_after(w, |c| c.touch_alloc(&aid)));
        // 4. watch on an absent plugin id, write plugin-01: exact here, must not fire.
        let wa = |v: StateView<'_>| {
            black_box(v.csi_plugin(absent));
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
    let mut n = (*snap.view().node(&ds.node_ids[i]).expect("node")).clone();
    drop(snap);
    match plugin {
        Some(pid) => {
            let mut f = (*ds.node_fingerprint(i, 1)).clone();
            f.plugin_id = Id::from(pid);
            f.provider = format!("org.example.csi.driver-{pid}").into();
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
                    if let Some(p) = v.csi_plugin(&pid) {
                        black_box(v.denormalize_csi_plugin(&p));
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
        let mut r = SplitMix64(5001);
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
                .apply_owned_with_hook(index, Command::UpsertAllocs { allocs: vec![a] }, || {
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
