//! Watches: a commit fires exactly the watch sets that read something it changed —
//! exact keys (present or absent), prefixes and ranges, secondary index values, whole
//! tables — never others; no wake-up is missed when the change lands between the read
//! and the wait; dropped sets leave nothing behind; large sets fall back to table
//! watches; waits honour deadlines, work from async code, and `abandon` / restore wake
//! everyone.
//!
//! Most rules are checked twice (see [`scenario`]): with the set registered before the
//! commit (the commit's fan-out must fire it) and registered only after the commit (the
//! registration's version comparison must fire it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{Fixture, Item, assert_fired, assert_quiet, item, key};
use schedstate_engine::{Error, KeyBuilder, View, WaitOutcome, WatchSet};

/// Generous bound for waits that must end early (a failure, not a measurement).
const LONG: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Registered (by a zero wait) before the commit: the commit must fire it.
    RegisteredBeforeCommit,
    /// First waited on after the commit: registration must notice the change.
    RegisteredAfterCommit,
}

type Step<'a> = &'a dyn Fn(&Fixture);

/// For each case `(name, change, fires)`, in both [`Mode`]s, on a fresh fixture:
/// `setup`, read through a watch set of item limit `limit` with `read`, apply `change`,
/// and assert the set fired exactly when `fires`.
fn scenario(
    limit: usize,
    setup: Step<'_>,
    read: &dyn Fn(&Fixture, View<'_>),
    cases: &[(&str, Step<'_>, bool)],
) {
    for &(name, change, fires) in cases {
        for mode in [Mode::RegisteredBeforeCommit, Mode::RegisteredAfterCommit] {
            let fx = Fixture::new();
            setup(&fx);
            let ws = WatchSet::with_limit(limit);
            let snap = fx.db.snapshot();
            read(&fx, snap.watched(&ws));
            if mode == Mode::RegisteredBeforeCommit {
                assert_quiet(&ws);
            }
            change(&fx);
            if mode == Mode::RegisteredBeforeCommit {
                assert_eq!(ws.is_fired(), fires, "case {name:?}, {mode:?}");
            }
            let want = if fires {
                WaitOutcome::Changed
            } else {
                WaitOutcome::TimedOut
            };
            assert_eq!(
                ws.wait_timeout(Duration::ZERO),
                want,
                "case {name:?}, {mode:?}"
            );
            drop(ws);
            assert_eq!(fx.db.registered_watches(), 0, "case {name:?}, {mode:?}");
        }
    }
}

const DEFAULT_LIMIT: usize = schedstate_engine::DEFAULT_WATCH_LIMIT;

/// A transaction that writes `id` and then puts its original row back: it collapses
/// to no change at all.
fn collapsed_write(fx: &Fixture, id: &str) {
    let items = fx.items;
    fx.write(|txn| {
        let old = txn.view().get(items, &key(id)).expect("row exists");
        txn.insert(items, item(id, "g9", 99)).unwrap();
        txn.delete(items, &key(id)).unwrap();
        txn.insert(items, old).unwrap();
    });
}

/// A transaction writing `id` that is dropped instead of committed.
fn aborted_write(fx: &Fixture, id: &str) {
    let mut txn = fx.db.begin_write(fx.db.last_applied() + 1).unwrap();
    txn.insert(fx.items, item(id, "g1", 42)).unwrap();
    drop(txn);
}

#[test]
fn exact_key_watch_fires_on_update_and_delete_of_that_key_only() {
    scenario(
        DEFAULT_LIMIT,
        &|fx| {
            fx.put("a", "g1", 0);
            fx.put("ab", "g1", 0);
            fx.put("b", "g1", 0);
        },
        &|fx, v| assert!(v.get(fx.items, &key("a")).is_some()),
        &[
            ("update a", &|fx| _ = fx.put("a", "g1", 1), true),
            (
                "move a to another group",
                &|fx| _ = fx.put("a", "g2", 0),
                true,
            ),
            ("delete a", &|fx| _ = fx.del("a"), true),
            ("update b", &|fx| _ = fx.put("b", "g1", 1), false),
            ("insert a1", &|fx| _ = fx.put("a1", "g1", 0), false),
            ("delete ab", &|fx| _ = fx.del("ab"), false),
            (
                "other table, same id",
                &|fx| _ = fx.put_other("a", 0),
                false,
            ),
            (
                "write a, then restore it",
                &|fx| collapsed_write(fx, "a"),
                false,
            ),
            ("aborted write to a", &|fx| aborted_write(fx, "a"), false),
            ("empty commit", &|fx| _ = fx.write(|_| {}), false),
        ],
    );
}

#[test]
fn get_many_answers_as_get_and_watches_each_key_it_looked_up() {
    scenario(
        DEFAULT_LIMIT,
        &|fx| {
            fx.put("a", "g1", 0);
            fx.put("c", "g1", 0);
            fx.put("d", "g1", 0);
        },
        &|fx, v| {
            let keys = [key("a"), key("b"), key("c"), key("a")];
            let mut got = Vec::new();
            v.get_many(fx.items, &keys, |i, row| {
                got.push((i, row.map(|r| r.id.clone())))
            });
            let a = Some("a".to_string());
            let c = Some("c".to_string());
            assert_eq!(got, [(0, a.clone()), (1, None), (2, c), (3, a)]);
        },
        &[
            ("update a", &|fx| _ = fx.put("a", "g1", 1), true),
            (
                "create b (looked up, absent)",
                &|fx| _ = fx.put("b", "g1", 0),
                true,
            ),
            ("delete c", &|fx| _ = fx.del("c"), true),
            (
                "update d (not looked up)",
                &|fx| _ = fx.put("d", "g1", 1),
                false,
            ),
            ("insert a1", &|fx| _ = fx.put("a1", "g1", 0), false),
        ],
    );
}

#[test]
fn absent_key_watch_fires_on_create_not_on_neighbour() {
    scenario(
        DEFAULT_LIMIT,
        &|fx| {
            fx.put("a", "g1", 0);
            fx.put("c", "g1", 0);
        },
        &|fx, v| assert!(v.get(fx.items, &key("b")).is_none()),
        &[
            ("create b", &|fx| _ = fx.put("b", "g1", 0), true),
            ("create ba", &|fx| _ = fx.put("ba", "g1", 0), false),
            ("create ab", &|fx| _ = fx.put("ab", "g1", 0), false),
            ("create b\\0", &|fx| _ = fx.put("b\0", "g1", 0), false),
            ("update a", &|fx| _ = fx.put("a", "g1", 1), false),
            ("delete c", &|fx| _ = fx.del("c"), false),
            ("other table b", &|fx| _ = fx.put_other("b", 0), false),
            (
                "create and delete b in one txn",
                &|fx| {
                    let items = fx.items;
                    fx.write(|txn| {
                        txn.insert(items, item("b", "g1", 0)).unwrap();
                        txn.delete(items, &key("b")).unwrap();
                    });
                },
                false,
            ),
            ("aborted create of b", &|fx| aborted_write(fx, "b"), false),
        ],
    );
}

#[test]
fn prefix_watch_fires_on_changes_inside_the_prefix_only() {
    scenario(
        DEFAULT_LIMIT,
        &|fx| {
            fx.put("a", "g1", 0);
            fx.put("ab", "g1", 0);
            fx.put("b", "g1", 0);
        },
        &|fx, v| {
            let rows = v.prefix(fx.items, KeyBuilder::new().str_prefix("a").as_bytes());
            assert_eq!(rows.count(), 2);
        },
        &[
            ("insert ac", &|fx| _ = fx.put("ac", "g1", 0), true),
            ("update ab", &|fx| _ = fx.put("ab", "g2", 0), true),
            ("delete a", &|fx| _ = fx.del("a"), true),
            ("insert b1", &|fx| _ = fx.put("b1", "g1", 0), false),
            ("update b", &|fx| _ = fx.put("b", "g1", 1), false),
            ("insert just below", &|fx| _ = fx.put("`z", "g1", 0), false),
            ("insert upper-case A", &|fx| _ = fx.put("A", "g1", 0), false),
            ("other table a1", &|fx| _ = fx.put_other("a1", 0), false),
        ],
    );
}

#[test]
fn range_watch_fires_on_changes_inside_the_range_only() {
    use std::ops::Bound;
    scenario(
        DEFAULT_LIMIT,
        &|fx| {
            fx.put("a", "g1", 0);
            fx.put("c", "g1", 0);
            fx.put("e", "g1", 0);
        },
        &|fx, v| {
            let (lo, hi) = (key("b"), key("d"));
            let rows = v.range(
                fx.items,
                Bound::Included(lo.as_bytes()),
                Bound::Excluded(hi.as_bytes()),
            );
            assert_eq!(rows.count(), 1);
        },
        &[
            (
                "insert b (inclusive bound)",
                &|fx| _ = fx.put("b", "g1", 0),
                true,
            ),
            ("update c", &|fx| _ = fx.put("c", "g1", 1), true),
            ("insert cz", &|fx| _ = fx.put("cz", "g1", 0), true),
            (
                "insert d (exclusive bound)",
                &|fx| _ = fx.put("d", "g1", 0),
                false,
            ),
            ("update a", &|fx| _ = fx.put("a", "g1", 1), false),
            ("delete e", &|fx| _ = fx.del("e"), false),
        ],
    );
}

#[test]
fn index_value_watch_fires_when_rows_enter_change_or_leave_the_group() {
    scenario(
        DEFAULT_LIMIT,
        &|fx| {
            fx.put("x", "g1", 0);
            fx.put("y", "g2", 0);
        },
        &|fx, v| {
            let ids: Vec<String> = v
                .index_eq(fx.by_group, &key("g1"))
                .map(|r| r.id.clone())
                .collect();
            assert_eq!(ids, ["x"]);
        },
        &[
            ("insert a g1 row", &|fx| _ = fx.put("z", "g1", 0), true),
            ("update a g1 row", &|fx| _ = fx.put("x", "g1", 1), true),
            ("delete a g1 row", &|fx| _ = fx.del("x"), true),
            ("move a row into g1", &|fx| _ = fx.put("y", "g1", 0), true),
            ("move a row out of g1", &|fx| _ = fx.put("x", "g2", 0), true),
            ("insert a g2 row", &|fx| _ = fx.put("z", "g2", 0), false),
            ("update a g2 row", &|fx| _ = fx.put("y", "g2", 1), false),
            ("delete a g2 row", &|fx| _ = fx.del("y"), false),
            ("insert a g10 row", &|fx| _ = fx.put("z", "g10", 0), false),
            ("move g2 row to g10", &|fx| _ = fx.put("y", "g10", 0), false),
            ("other table", &|fx| _ = fx.put_other("x", 0), false),
        ],
    );
}

#[test]
fn table_watch_fires_on_any_change_to_it_not_on_another_table() {
    scenario(
        DEFAULT_LIMIT,
        &|fx| _ = fx.put("a", "g1", 0),
        &|fx, v| assert_eq!(v.iter(fx.items).count(), 1),
        &[
            ("insert", &|fx| _ = fx.put("zzz", "g7", 0), true),
            ("update", &|fx| _ = fx.put("a", "g1", 1), true),
            ("delete", &|fx| _ = fx.del("a"), true),
            ("other table", &|fx| _ = fx.put_other("a", 0), false),
            ("collapsed write", &|fx| collapsed_write(fx, "a"), false),
            ("aborted write", &|fx| aborted_write(fx, "b"), false),
            ("empty commit", &|fx| _ = fx.write(|_| {}), false),
        ],
    );
}

#[test]
fn watch_limit_falls_back_to_watching_the_table() {
    let setup: Step<'_> = &|fx| {
        for id in ["a", "b", "c", "z"] {
            fx.put(id, "g1", 0);
        }
    };
    // Three keys read with a limit of two: the third becomes a table watch.
    scenario(
        2,
        setup,
        &|fx, v| {
            for id in ["a", "b", "c"] {
                assert!(v.get(fx.items, &key(id)).is_some());
            }
        },
        &[
            ("change an unread key", &|fx| _ = fx.put("z", "g1", 1), true),
            ("create an unread key", &|fx| _ = fx.put("q", "g1", 1), true),
            ("change a read key", &|fx| _ = fx.put("a", "g1", 1), true),
            ("other table", &|fx| _ = fx.put_other("z", 0), false),
        ],
    );
    // Within the limit the watch stays exact.
    scenario(
        2,
        setup,
        &|fx, v| {
            for id in ["a", "b"] {
                assert!(v.get(fx.items, &key(id)).is_some());
            }
        },
        &[
            (
                "change an unread key",
                &|fx| _ = fx.put("z", "g1", 1),
                false,
            ),
            ("change a read key", &|fx| _ = fx.put("b", "g1", 1), true),
        ],
    );
}

#[test]
fn no_false_wakes_over_200_unrelated_commits() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    fx.put("x", "g2", 0);
    fx.put_other("o", 0);

    let snap = fx.db.snapshot();
    let watch = |read: &dyn Fn(View<'_>)| {
        let ws = WatchSet::new();
        read(snap.watched(&ws));
        assert_quiet(&ws);
        ws
    };
    let on_key = watch(&|v| _ = v.get(fx.items, &key("a")));
    let on_absent = watch(&|v| _ = v.get(fx.items, &key("k")));
    let on_prefix = watch(&|v| {
        _ = v
            .prefix(fx.items, KeyBuilder::new().str_prefix("a").as_bytes())
            .count();
    });
    let on_group = watch(&|v| _ = v.index_eq(fx.by_group, &key("g1")).count());
    let on_other_table = watch(&|v| _ = v.iter(fx.other).count());
    let all = [
        ("key", &on_key),
        ("absent key", &on_absent),
        ("prefix", &on_prefix),
        ("group", &on_group),
        ("other table", &on_other_table),
    ];

    for i in 0..200u64 {
        match i % 5 {
            0 => _ = fx.put("x", "g2", i),
            1 => _ = fx.put(&format!("y{}", i % 7), "g2", i),
            2 => _ = fx.del(&format!("y{}", (i + 3) % 7)),
            3 => _ = fx.put(&format!("z{i}"), "g10", i),
            _ => aborted_write(&fx, "a"),
        }
        for (name, ws) in all {
            assert!(!ws.is_fired(), "{name} woke on unrelated commit {i}");
            assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::TimedOut);
        }
    }

    // The sets are still live: each wakes on its own change.
    fx.put("a", "g1", 1);
    for ws in [&on_key, &on_prefix, &on_group] {
        assert_fired(ws);
    }
    assert_quiet(&on_absent);
    assert_quiet(&on_other_table);
    fx.put("k", "g3", 0);
    assert_fired(&on_absent);
    assert_quiet(&on_other_table);
    fx.put_other("p", 0);
    assert_fired(&on_other_table);
}

#[test]
fn missed_wake_change_between_read_and_wait_fires_at_once() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    let snap = fx.db.snapshot();
    let ws = WatchSet::new();
    assert_eq!(snap.watched(&ws).get(fx.items, &key("a")).unwrap().n, 0);

    // The change lands after the read, before the set is ever registered.
    fx.put("a", "g1", 1);
    assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::Changed);
    assert_eq!(ws.wait_timeout(LONG), WaitOutcome::Changed);
    // Firing at registration left no registration behind.
    drop(ws);
    assert_eq!(fx.db.registered_watches(), 0);
}

#[test]
fn missed_wake_check_ignores_unrelated_commit_between_read_and_wait() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    fx.put("b", "g1", 0);
    let snap = fx.db.snapshot();
    let ws = WatchSet::new();
    let view = snap.watched(&ws);
    assert!(view.get(fx.items, &key("a")).is_some());
    assert!(view.get(fx.items, &key("c")).is_none());

    // Same table (its table index moves), other keys.
    fx.put("b", "g1", 1);
    fx.put("cc", "g1", 1);
    assert_quiet(&ws);
    assert_eq!(fx.db.registered_watches(), 2);

    fx.put("c", "g1", 0);
    assert_fired(&ws);
}

/// A reader keeps reading a key and waiting while a writer keeps changing it, one
/// commit per value the reader has seen, so each commit is the only one that can end
/// the wait in progress. For odd values the reader waits for the commit to land before
/// it waits (registration must notice it); for even ones the commit races the
/// registration. Every wait must end with `Changed`.
#[test]
fn missed_wake_race_under_concurrent_commits_never_loses_a_wake() {
    const LAST: u64 = 300;
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 0);
    // The last value the reader read, plus one (0: nothing read yet).
    let seen = Arc::new(AtomicU64::new(0));
    // The last value the writer committed.
    let written = Arc::new(AtomicU64::new(0));

    let reader = {
        let fx = Arc::clone(&fx);
        let seen = Arc::clone(&seen);
        let written = Arc::clone(&written);
        thread::spawn(move || {
            let mut waits = 0;
            loop {
                let snap = fx.db.snapshot();
                let ws = WatchSet::new();
                let n = snap.watched(&ws).get(fx.items, &key("a")).unwrap().n;
                seen.store(n + 1, Ordering::Release);
                if n == LAST {
                    return waits;
                }
                if n % 2 == 1 {
                    while written.load(Ordering::Acquire) <= n {
                        thread::yield_now();
                    }
                }
                // Value n + 1 is committed only after `seen` says n: this wait must
                // end, whether that commit lands before or after it registers.
                assert_eq!(ws.wait_timeout(LONG), WaitOutcome::Changed, "at n = {n}");
                waits += 1;
            }
        })
    };
    for n in 1..=LAST {
        // Wait until the reader has read value n - 1 (or has failed).
        while seen.load(Ordering::Acquire) < n && !reader.is_finished() {
            thread::yield_now();
        }
        if reader.is_finished() {
            break;
        }
        fx.put("a", "g1", n);
        written.store(n, Ordering::Release);
    }
    let waits = reader.join().unwrap();
    assert_eq!(waits, LAST, "one wait per value");
    assert_eq!(fx.db.registered_watches(), 0);
}

#[test]
fn dropped_watch_sets_leave_no_registrations() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    let snap = fx.db.snapshot();

    let mut held = Vec::with_capacity(1000);
    for i in 0..10_000u32 {
        let ws = WatchSet::new();
        let v = snap.watched(&ws);
        // One item per set, of every kind.
        match i % 5 {
            0 => _ = v.get(fx.items, &key("a")),
            1 => _ = v.get(fx.items, &key(&format!("absent{i}"))),
            2 => {
                _ = v
                    .prefix(fx.items, KeyBuilder::new().str_prefix("a").as_bytes())
                    .count()
            }
            3 => _ = v.index_eq(fx.by_group, &key("g1")).count(),
            _ => _ = v.iter(fx.other).count(),
        }
        assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::TimedOut);
        held.push(ws);
        if held.len() == 1000 {
            assert_eq!(fx.db.registered_watches(), 1000);
            held.clear();
            assert_eq!(fx.db.registered_watches(), 0, "after set {i}");
        }
    }

    // Sets that fired (by a commit, or at registration) clean up too.
    let sets: Vec<WatchSet> = (0..100)
        .map(|_| {
            let ws = WatchSet::new();
            _ = snap.watched(&ws).get(fx.items, &key("a"));
            ws
        })
        .collect();
    for ws in &sets[..50] {
        assert_quiet(ws);
    }
    fx.put("a", "g1", 1);
    for ws in &sets {
        assert_fired(ws);
    }
    drop(sets);
    assert_eq!(fx.db.registered_watches(), 0);
}

#[test]
fn wait_timeout_returns_timed_out_after_the_deadline() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    let snap = fx.db.snapshot();
    let ws = WatchSet::new();
    _ = snap.watched(&ws).get(fx.items, &key("a"));

    let wait = Duration::from_millis(50);
    let start = Instant::now();
    assert_eq!(ws.wait_timeout(wait), WaitOutcome::TimedOut);
    assert!(
        start.elapsed() >= wait,
        "returned after {:?}",
        start.elapsed()
    );

    let past = Instant::now() - Duration::from_millis(1);
    assert_eq!(ws.wait_deadline(past), WaitOutcome::TimedOut);

    // A set that read nothing has nothing to wait for.
    assert_eq!(
        WatchSet::new().wait_timeout(Duration::from_millis(1)),
        WaitOutcome::TimedOut
    );
}

#[test]
fn thread_wait_is_woken_by_commit_from_another_thread() {
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 0);
    let (ready_tx, ready_rx) = mpsc::channel();
    let waiter = {
        let fx = Arc::clone(&fx);
        thread::spawn(move || {
            let snap = fx.db.snapshot();
            let ws = WatchSet::new();
            _ = snap.watched(&ws).get(fx.items, &key("a"));
            assert_quiet(&ws);
            ready_tx.send(()).unwrap();
            ws.wait_timeout(LONG)
        })
    };
    ready_rx.recv().unwrap();
    fx.put("b", "g1", 0);
    fx.put("a", "g1", 1);
    assert_eq!(waiter.join().unwrap(), WaitOutcome::Changed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_wait_is_woken_by_commit_from_another_thread() {
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 0);
    let snap = fx.db.snapshot();
    let ws = WatchSet::new();
    _ = snap.watched(&ws).get(fx.items, &key("a"));

    let mut changed = ws.changed(); // registers
    // Pending first: nothing changed yet.
    assert!(
        tokio::time::timeout(Duration::from_millis(20), &mut changed)
            .await
            .is_err()
    );

    let (go_tx, go_rx) = mpsc::channel::<()>();
    let writer = {
        let fx = Arc::clone(&fx);
        thread::spawn(move || {
            go_rx.recv().unwrap();
            fx.put("a", "g1", 1);
        })
    };
    go_tx.send(()).unwrap();
    tokio::time::timeout(LONG, changed)
        .await
        .expect("woken by the commit");
    assert!(ws.is_fired());
    writer.join().unwrap();
}

#[tokio::test]
async fn async_wait_stays_pending_on_unrelated_commit() {
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 0);
    let snap = fx.db.snapshot();
    let ws = WatchSet::new();
    _ = snap.watched(&ws).get(fx.items, &key("a"));
    let mut changed = ws.changed();

    let fx2 = Arc::clone(&fx);
    tokio::task::spawn_blocking(move || fx2.put("b", "g1", 1))
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut changed)
            .await
            .is_err(),
        "woken by a commit to another key"
    );

    let fx2 = Arc::clone(&fx);
    tokio::task::spawn_blocking(move || fx2.del("a"))
        .await
        .unwrap();
    tokio::time::timeout(LONG, changed).await.expect("woken");
}

/// One watch set of each kind, registered, over the fixture's items "a" (g1), and the
/// other table.
fn registered_sets(fx: &Fixture) -> Vec<WatchSet> {
    let snap = fx.db.snapshot();
    let reads: [&dyn Fn(View<'_>); 5] = [
        &|v| _ = v.get(fx.items, &key("a")),
        &|v| _ = v.get(fx.items, &key("absent")),
        &|v| {
            _ = v
                .prefix(fx.items, KeyBuilder::new().str_prefix("a").as_bytes())
                .count()
        },
        &|v| _ = v.index_eq(fx.by_group, &key("g1")).count(),
        &|v| _ = v.iter(fx.other).count(),
    ];
    reads
        .iter()
        .map(|read| {
            let ws = WatchSet::new();
            read(snap.watched(&ws));
            assert_quiet(&ws);
            ws
        })
        .collect()
}

/// Threads blocked in `wait_timeout(LONG)` on key "a"; returns their handles once all
/// are waiting (registered).
fn blocked_waiters(fx: &Arc<Fixture>, n: usize) -> Vec<thread::JoinHandle<WaitOutcome>> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let handles = (0..n)
        .map(|_| {
            let fx = Arc::clone(fx);
            let ready_tx = ready_tx.clone();
            thread::spawn(move || {
                let snap = fx.db.snapshot();
                let ws = WatchSet::new();
                _ = snap.watched(&ws).get(fx.items, &key("a"));
                assert_quiet(&ws);
                ready_tx.send(()).unwrap();
                ws.wait_timeout(LONG)
            })
        })
        .collect();
    for _ in 0..n {
        ready_rx.recv().unwrap();
    }
    handles
}

#[test]
fn abandon_fires_every_waiter_without_changing_state() {
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 0);
    fx.put_other("o", 0);
    let sets = registered_sets(&fx);
    let threads = blocked_waiters(&fx, 2);
    let before = fx.db.snapshot();

    fx.db.abandon();
    for ws in &sets {
        assert_fired(ws);
    }
    for t in threads {
        assert_eq!(t.join().unwrap(), WaitOutcome::Changed);
    }
    let after = fx.db.snapshot();
    assert!(before.same_version(&after), "abandon changes no data");
    drop(sets);
    assert_eq!(fx.db.registered_watches(), 0);
}

#[test]
fn restore_fires_every_waiter_and_replaces_the_state() {
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 0);
    fx.put_other("o", 0);
    let sets = registered_sets(&fx);
    let threads = blocked_waiters(&fx, 2);
    let old = fx.db.snapshot();
    // Read before the restore, first waited on after it.
    let late = WatchSet::new();
    _ = old.watched(&late).get(fx.items, &key("untouched"));

    let mut txn = fx.db.begin_restore(50);
    txn.insert(fx.items, item("r", "g5", 7)).unwrap();
    txn.set_table_index(fx.items, 40);
    txn.commit().unwrap();

    for ws in &sets {
        assert_fired(ws);
    }
    for t in threads {
        assert_eq!(t.join().unwrap(), WaitOutcome::Changed);
    }
    assert_fired(&late);

    let now = fx.db.snapshot();
    let v = now.view();
    assert_eq!(v.last_applied(), 50);
    assert_eq!(v.table_index(fx.items), 40);
    assert_eq!(v.table_index(fx.other), 0);
    let rows: Vec<Arc<Item>> = v.iter(fx.items).collect();
    assert_eq!(rows, vec![item("r", "g5", 7)]);
    assert_eq!(v.iter(fx.other).count(), 0);
    assert_eq!(v.index_eq(fx.by_group, &key("g5")).count(), 1);
    // The old snapshot still reads the old state.
    assert!(old.view().get(fx.items, &key("a")).is_some());
    assert!(matches!(
        fx.db.begin_write(50),
        Err(Error::StaleIndex {
            last_applied: 50,
            ..
        })
    ));
    // Ordinary watching works on the restored state.
    let ws = WatchSet::new();
    _ = now.watched(&ws).get(fx.items, &key("r"));
    assert_quiet(&ws);
    fx.put("r", "g5", 8);
    assert_fired(&ws);
}

#[test]
fn waiters_wake_when_the_database_is_dropped() {
    let fx = Fixture::new();
    fx.put("a", "g1", 0);
    let snap = fx.db.snapshot();
    let items = fx.items;
    let (ready_tx, ready_rx) = mpsc::channel();
    let waiter = {
        let snap = snap.clone();
        thread::spawn(move || {
            let ws = WatchSet::new();
            _ = snap.watched(&ws).get(items, &key("a"));
            assert_quiet(&ws);
            ready_tx.send(()).unwrap();
            ws.wait_timeout(LONG)
        })
    };
    ready_rx.recv().unwrap();
    drop(fx);
    assert_eq!(waiter.join().unwrap(), WaitOutcome::Changed);

    // A set first waited on after the drop does not wait either.
    let ws = WatchSet::new();
    _ = snap.watched(&ws).get(items, &key("a"));
    assert_eq!(ws.wait_timeout(LONG), WaitOutcome::Changed);
}
