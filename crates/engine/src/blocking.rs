//! Blocking queries: run a query, and if its answer is not newer than what the caller
//! already has, wait until what it read changes, then run it again.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::database::Db;
use super::view::View;
use super::watch::{WaitOutcome, WatchSet};

/// The longest a blocking query waits, and the default wait.
pub const MAX_BLOCKING_WAIT: Duration = Duration::from_secs(300);

/// How long a blocking query may wait, and for what.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryOptions {
    /// Answer once the query's index exceeds this; 0 answers at once.
    pub min_index: u64,
    /// How long to wait at most (capped at, and defaulting to, [`MAX_BLOCKING_WAIT`]).
    /// Up to 1/16 of it is added as random jitter, so that many clients blocked on the
    /// same data do not all come back at once.
    pub max_wait: Option<Duration>,
}

impl QueryOptions {
    /// Options that answer once the index exceeds `min_index` or `max_wait` passes.
    pub fn new(min_index: u64, max_wait: Duration) -> Self {
        QueryOptions {
            min_index,
            max_wait: Some(max_wait),
        }
    }

    /// Whether an answer at `index` ends the query: the minimum index is 0, or the
    /// answer is newer.
    pub fn is_answered_by(&self, index: u64) -> bool {
        self.min_index == 0 || index > self.min_index
    }

    /// The wait with its cap and jitter applied.
    pub fn effective_wait(&self) -> Duration {
        let wait = self
            .max_wait
            .unwrap_or(MAX_BLOCKING_WAIT)
            .min(MAX_BLOCKING_WAIT);
        let sixteenth = wait.as_nanos() / 16;
        let jitter = u64::try_from(sixteenth).unwrap_or(u64::MAX);
        wait + Duration::from_nanos(fastrand::u64(0..=jitter))
    }
}

/// What a blocking query answers: the index of the data, the data, and whether the
/// wait ended without anything newer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryResult<T> {
    /// The index the query reported (normally a table index).
    pub index: u64,
    /// The query's value.
    pub value: T,
    /// The wait ended at its deadline with an answer no newer than the minimum index
    /// asked for (`index <= min_index`). Always false when the minimum index is 0.
    pub timed_out: bool,
}

impl<T> QueryResult<T> {
    fn answer(opts: &QueryOptions, index: u64, value: T) -> Self {
        QueryResult {
            index,
            value,
            timed_out: !opts.is_answered_by(index),
        }
    }

    /// The same answer with its value transformed.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> QueryResult<U> {
        QueryResult {
            index: self.index,
            value: f(self.value),
            timed_out: self.timed_out,
        }
    }
}

impl Db {
    /// Runs `query` on fresh snapshots until the index it returns exceeds
    /// `opts.min_index` or the wait passes, and answers with what it last saw.
    ///
    /// The query gets a watched view: whatever it reads is what the wait watches.
    ///
    /// # Errors
    /// Whatever the query returns.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use schedstate_engine::{Db, Key, QueryOptions, Schema};
    ///
    /// let mut schema = Schema::new();
    /// let kv = schema.table("kv", |r: &(String, u64)| Key::str(&r.0)).unwrap();
    /// let db = Db::new(schema);
    /// let writer = db.clone();
    /// let t = std::thread::spawn(move || {
    ///     std::thread::sleep(Duration::from_millis(20));
    ///     let mut txn = writer.begin_write(5).unwrap();
    ///     txn.insert(kv, Arc::new(("a".to_string(), 1))).unwrap();
    ///     txn.commit().unwrap();
    /// });
    /// let res = db
    ///     .blocking_query(QueryOptions::new(1, Duration::from_secs(10)), |v| {
    ///         Ok::<_, ()>((v.table_index(kv), v.get(kv, &Key::str("a"))))
    ///     })
    ///     .unwrap();
    /// assert_eq!(res.index, 5);
    /// assert!(res.value.is_some());
    /// assert!(!res.timed_out);
    /// t.join().unwrap();
    /// ```
    pub fn blocking_query<T, E>(
        &self,
        opts: QueryOptions,
        mut query: impl FnMut(View<'_>) -> Result<(u64, T), E>,
    ) -> Result<QueryResult<T>, E> {
        let deadline = Instant::now() + opts.effective_wait();
        let span = tracing::debug_span!("blocking_query", min_index = opts.min_index);
        let _enter = span.enter();
        loop {
            let snap = self.snapshot();
            let ws = WatchSet::new();
            let (index, value) = query(snap.watched(&ws))?;
            // Not held while waiting: the set keeps the version it read only until it
            // registers, so a waiting query pins no version of the store (rows replaced
            // meanwhile are freed).
            drop(snap);
            if opts.is_answered_by(index) || Instant::now() >= deadline {
                return Ok(QueryResult::answer(&opts, index, value));
            }
            if ws.wait_deadline(deadline) == WaitOutcome::TimedOut {
                return Ok(QueryResult::answer(&opts, index, value));
            }
        }
    }

    /// The async form of [`blocking_query`](Self::blocking_query). The library is
    /// runtime-agnostic: `sleep` builds the timer of yours (for tokio,
    /// `tokio::time::sleep`).
    ///
    /// # Errors
    /// Whatever the query returns.
    pub async fn blocking_query_async<T, E, S, SF>(
        &self,
        opts: QueryOptions,
        sleep: S,
        mut query: impl FnMut(View<'_>) -> Result<(u64, T), E>,
    ) -> Result<QueryResult<T>, E>
    where
        S: FnOnce(Duration) -> SF,
        SF: Future<Output = ()>,
    {
        let wait = opts.effective_wait();
        let deadline = Instant::now() + wait;
        let mut timer = pin!(sleep(wait));
        loop {
            let snap = self.snapshot();
            let ws = WatchSet::new();
            let (index, value) = query(snap.watched(&ws))?;
            // As in the sync form: the version is let go once the set registers.
            drop(snap);
            if opts.is_answered_by(index) || Instant::now() >= deadline {
                return Ok(QueryResult::answer(&opts, index, value));
            }
            let mut changed = pin!(ws.changed());
            let timed_out = std::future::poll_fn(|cx| {
                if changed.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(false);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(true);
                }
                Poll::Pending
            })
            .await;
            if timed_out {
                return Ok(QueryResult::answer(&opts, index, value));
            }
        }
    }
}
