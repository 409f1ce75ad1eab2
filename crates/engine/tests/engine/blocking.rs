//! Blocking queries (`Db::blocking_query` and its async form): min index 0 answers at
//! once, otherwise the query waits for a change to what it read and answers with the
//! newer index, or answers with what it last saw when the wait runs out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{Fixture, Item, key};
use schedstate_engine::{MAX_BLOCKING_WAIT, QueryOptions, QueryResult, View};

/// Long enough never to be reached by a correct run; a failure, not a measurement.
const LONG: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(100);

/// The query of these tests: the items table index and row "a". Sends on `first_run`
/// (if any) the first time it runs, so a writer can wait for the query to have read.
fn query_a(
    fx: &Fixture,
    runs: &AtomicUsize,
    first_run: Option<mpsc::Sender<()>>,
) -> impl FnMut(View<'_>) -> Result<(u64, Option<Arc<Item>>), ()> {
    let items = fx.items;
    move |v: View<'_>| {
        if runs.fetch_add(1, Ordering::SeqCst) == 0
            && let Some(tx) = &first_run
        {
            let _ = tx.send(());
        }
        Ok((v.table_index(items), v.get(items, &key("a"))))
    }
}

/// Runs `f` on another thread once `go` is received; the thread returns the instant
/// `f` finished (its commits published).
fn after(go: mpsc::Receiver<()>, f: impl FnOnce() + Send + 'static) -> thread::JoinHandle<Instant> {
    thread::spawn(move || {
        go.recv().unwrap();
        f();
        Instant::now()
    })
}

/// A negative test proves something only if the unrelated write landed while the query
/// was waiting: a write that is slow enough to land after the wait ended must fail it,
/// not let it pass.
#[track_caller]
fn assert_landed_during_the_wait(committed: Instant, answered: Instant) {
    assert!(
        committed < answered,
        "the unrelated write committed after the query answered: the test proved nothing"
    );
}

/// The query answers index 0 (nothing was ever written), which does not exceed min
/// index 0: only the "min index 0 answers at once" rule makes it answer.
#[test]
fn min_index_zero_answers_at_once() {
    let fx = Arc::new(Fixture::new());
    let (tx, rx) = mpsc::channel();
    {
        let fx = Arc::clone(&fx);
        // On another thread, so that a wrong wait fails the test instead of hanging it.
        thread::spawn(move || {
            let runs = AtomicUsize::new(0);
            let res = fx.db.blocking_query(
                QueryOptions::new(0, MAX_BLOCKING_WAIT),
                query_a(&fx, &runs, None),
            );
            let _ = tx.send((res, runs.load(Ordering::SeqCst)));
        });
    }
    let (res, runs) = rx.recv_timeout(LONG).expect("answered at once");
    let res = res.unwrap();
    assert_eq!(res.index, 0);
    assert!(res.value.is_none());
    assert_eq!(runs, 1);
}

#[test]
fn waits_for_a_relevant_commit_and_answers_its_index() {
    let fx = Arc::new(Fixture::new());
    let index = fx.put("a", "g1", 1);
    let (go_tx, go_rx) = mpsc::channel();
    let writer = {
        let fx = Arc::clone(&fx);
        after(go_rx, move || _ = fx.put("a", "g1", 2))
    };

    let runs = AtomicUsize::new(0);
    let res = fx
        .db
        .blocking_query(
            QueryOptions::new(index, LONG),
            query_a(&fx, &runs, Some(go_tx)),
        )
        .unwrap();
    writer.join().unwrap();
    assert_eq!(res.index, index + 1);
    assert_eq!(res.value.unwrap().n, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "one wait, one re-run");
}

#[test]
fn unrelated_commit_does_not_answer_early() {
    let fx = Arc::new(Fixture::new());
    let index = fx.put("a", "g1", 1);
    let (go_tx, go_rx) = mpsc::channel();
    let writer = {
        let fx = Arc::clone(&fx);
        after(go_rx, move || {
            fx.put("b", "g1", 1); // same table, other key
            fx.put_other("a", 1); // other table, same id
        })
    };

    let runs = AtomicUsize::new(0);
    let start = Instant::now();
    let res = fx
        .db
        .blocking_query(
            QueryOptions::new(index, SHORT),
            query_a(&fx, &runs, Some(go_tx)),
        )
        .unwrap();
    let answered = Instant::now();
    assert_landed_during_the_wait(writer.join().unwrap(), answered);
    assert!(
        res.timed_out,
        "answered without a change past the min index"
    );
    assert!(start.elapsed() >= SHORT, "answered early");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "woken by an unrelated commit"
    );
    assert_eq!(res.index, index, "the value it last saw");
    assert_eq!(res.value.unwrap().n, 1);
}

#[test]
fn timeout_returns_the_last_value() {
    let fx = Fixture::new();
    let index = fx.put("a", "g1", 7);
    let runs = AtomicUsize::new(0);
    let wait = Duration::from_millis(50);
    let start = Instant::now();
    let res = fx
        .db
        .blocking_query(QueryOptions::new(index, wait), query_a(&fx, &runs, None))
        .unwrap();
    assert!(start.elapsed() >= wait);
    assert_eq!(res.index, index);
    assert_eq!(res.value.unwrap().n, 7);
}

#[test]
fn keeps_waiting_until_the_index_exceeds_min_index() {
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 1);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (first_tx, first_rx) = mpsc::channel();
    // The caller already has index 3; the first change answers 2 (not newer), so the
    // query must wait again for the commit at 4.
    let writer = {
        let fx = Arc::clone(&fx);
        thread::spawn(move || {
            first_rx.recv().unwrap();
            fx.put("a", "g1", 2);
            go_rx.recv().unwrap();
            fx.put("a", "g1", 3);
            fx.put("a", "g1", 4);
        })
    };
    let runs = AtomicUsize::new(0);
    let items = fx.items;
    let res = fx
        .db
        .blocking_query(QueryOptions::new(3, LONG), |v| {
            let run = runs.fetch_add(1, Ordering::SeqCst);
            if run == 0 {
                first_tx.send(()).unwrap();
            }
            let row = v.get(items, &key("a")).unwrap();
            // The second run sees the commit at 2: ask for the rest.
            if row.n == 2 {
                let _ = go_tx.send(());
            }
            Ok::<_, ()>((v.table_index(items), row.n))
        })
        .unwrap();
    writer.join().unwrap();
    assert!(res.index > 3, "answered with index {}", res.index);
    assert_eq!(res.value, res.index);
}

#[test]
fn query_errors_are_returned() {
    let fx = Fixture::new();
    let res: Result<QueryResult<()>, &str> = fx
        .db
        .blocking_query(QueryOptions::new(5, LONG), |_| Err("no such thing"));
    assert_eq!(res, Err("no such thing"));
}

#[test]
fn effective_wait_defaults_to_and_caps_at_300s_plus_a_sixteenth() {
    assert_eq!(MAX_BLOCKING_WAIT, Duration::from_secs(300));
    let check = |opts: QueryOptions, base: Duration| {
        let mut jittered = false;
        for _ in 0..200 {
            let wait = opts.effective_wait();
            assert!(wait >= base, "{wait:?} < {base:?}");
            assert!(wait <= base + base / 16, "{wait:?} > {base:?} + 1/16");
            jittered |= wait > base;
        }
        assert!(base.is_zero() || jittered, "no jitter in 200 draws");
    };
    check(QueryOptions::default(), MAX_BLOCKING_WAIT);
    check(
        QueryOptions {
            min_index: 1,
            max_wait: None,
        },
        MAX_BLOCKING_WAIT,
    );
    check(
        QueryOptions::new(1, Duration::from_secs(301)),
        MAX_BLOCKING_WAIT,
    );
    check(
        QueryOptions::new(1, Duration::from_secs(3600)),
        MAX_BLOCKING_WAIT,
    );
    check(
        QueryOptions::new(1, Duration::from_secs(16)),
        Duration::from_secs(16),
    );
    check(QueryOptions::new(1, Duration::ZERO), Duration::ZERO);
}

#[tokio::test]
async fn async_blocking_query_wakes_on_a_commit() {
    let fx = Arc::new(Fixture::new());
    let index = fx.put("a", "g1", 1);
    let (go_tx, go_rx) = mpsc::channel();
    let writer = {
        let fx = Arc::clone(&fx);
        after(go_rx, move || _ = fx.put("a", "g1", 2))
    };

    let runs = AtomicUsize::new(0);
    let res = tokio::time::timeout(
        LONG,
        fx.db.blocking_query_async(
            QueryOptions::new(index, LONG),
            tokio::time::sleep,
            query_a(&fx, &runs, Some(go_tx)),
        ),
    )
    .await
    .expect("woken by the commit")
    .unwrap();
    writer.join().unwrap();
    assert_eq!(res.index, index + 1);
    assert_eq!(res.value.unwrap().n, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn async_blocking_query_times_out_with_the_last_value() {
    let fx = Arc::new(Fixture::new());
    let index = fx.put("a", "g1", 1);
    let (go_tx, go_rx) = mpsc::channel();
    let writer = {
        let fx = Arc::clone(&fx);
        after(go_rx, move || _ = fx.put("b", "g1", 1))
    };

    let runs = AtomicUsize::new(0);
    let start = Instant::now();
    let res = fx
        .db
        .blocking_query_async(
            QueryOptions::new(index, SHORT),
            tokio::time::sleep,
            query_a(&fx, &runs, Some(go_tx)),
        )
        .await
        .unwrap();
    let answered = Instant::now();
    assert_landed_during_the_wait(writer.join().unwrap(), answered);
    assert!(
        res.timed_out,
        "answered without a change past the min index"
    );
    assert!(start.elapsed() >= SHORT);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "woken by an unrelated commit"
    );
    assert_eq!(res.index, index);
    assert_eq!(res.value.unwrap().n, 1);
}

#[tokio::test]
async fn async_blocking_query_with_min_index_zero_answers_at_once() {
    let fx = Fixture::new(); // table index 0: only the min index 0 rule answers
    let runs = AtomicUsize::new(0);
    let res = tokio::time::timeout(
        LONG,
        fx.db.blocking_query_async(
            QueryOptions::default(),
            tokio::time::sleep,
            query_a(&fx, &runs, None),
        ),
    )
    .await
    .expect("answered at once")
    .unwrap();
    assert_eq!(res.index, 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A waiting query holds what it needs to re-check, not the version it read: a row
/// replaced while it waits is freed (its only owner left is the test).
#[tokio::test]
async fn a_waiting_query_pins_no_version() {
    let fx = Arc::new(Fixture::new());
    fx.put("a", "g1", 0);
    fx.put("big", "g1", 0);
    let old_big = fx.db.snapshot().view().get(fx.items, &key("big")).unwrap();
    let runs = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    let min = fx.db.last_applied();
    let waiter = {
        let fx = Arc::clone(&fx);
        async move {
            fx.db
                .blocking_query_async(
                    QueryOptions::new(min, Duration::from_millis(800)),
                    tokio::time::sleep,
                    query_a(&fx, &runs, Some(tx)),
                )
                .await
        }
    };
    let checker = {
        let fx = Arc::clone(&fx);
        tokio::task::spawn_blocking(move || {
            rx.recv().unwrap();
            // Let the query register (its first wait), then replace the row it did
            // not read; the write frees the versions nobody holds.
            thread::sleep(Duration::from_millis(100));
            fx.put("big", "g2", 1);
            fx.put("other", "g1", 0);
            fx.db.reclaim();
            Arc::strong_count(&old_big)
        })
    };
    let (answer, count) = tokio::join!(waiter, checker);
    let answer = answer.unwrap();
    assert!(answer.timed_out, "a write to another row answered it");
    assert_eq!(
        count.unwrap(),
        1,
        "the waiting query kept the old version alive"
    );
}
