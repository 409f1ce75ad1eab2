//! [`ReadBarrier`]: linearizable reads that share their leadership checks.
//!
//! A linearizable read needs a confirmation that *starts after the read arrived*:
//! the leader asks a quorum whether it still leads (openraft's read index) and waits
//! until it applied everything committed before. openraft 0.9 sends one heartbeat
//! round per call, with a timeout of one heartbeat interval; hundreds of concurrent
//! reads then flood the followers and miss that timeout. Here one round is in flight
//! at a time and every read that arrived before it started is answered by it: a read
//! arriving during a round waits for the next one, which serves everyone queued.
//!
//! The same rule serves a follower's read index ([`crate::read_index`]): there a
//! round is one ReadIndex RPC to the leader, and its outcome is the index to wait for.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::ClusterError;

/// Rounds of confirmation, numbered from 1 in the order they start; each round's
/// outcome is a `Result<T, E>` shared by every read it covers.
pub(crate) struct ReadBarrier<T = (), E = ClusterError> {
    /// The number of the last round started.
    started: AtomicU64,
    /// The outcome of the newest finished round: its number and result (`None`
    /// before the first).
    finished: Mutex<(u64, Option<Result<T, E>>)>,
    /// One round at a time.
    turn: tokio::sync::Mutex<()>,
}

impl<T, E> Default for ReadBarrier<T, E> {
    fn default() -> Self {
        ReadBarrier {
            started: AtomicU64::new(0),
            finished: Mutex::new((0, None)),
            turn: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T: Clone, E: Clone> ReadBarrier<T, E> {
    /// Returns once a round of `confirm` that started after this call began has
    /// finished, with its outcome: this call's own round, or one it shared.
    ///
    /// A call dropped while it runs a round abandons that round: the reads it would
    /// have answered run the next one (a round is never answered by one that did not
    /// finish).
    pub(crate) async fn confirm<F, Fut>(&self, confirm: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        // Any round numbered above what has started now starts after this read.
        let need = self.started.load(Ordering::Acquire) + 1;
        let _turn = self.turn.lock().await;
        {
            let finished = self.finished.lock();
            if finished.0 >= need
                && let Some(outcome) = &finished.1
            {
                return outcome.clone();
            }
        }
        let round = self.started.fetch_add(1, Ordering::AcqRel) + 1;
        let outcome = confirm().await;
        *self.finished.lock() = (round, Some(outcome.clone()));
        outcome
    }

    /// How many rounds have started (finished or abandoned).
    pub(crate) fn rounds(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_reads_share_rounds_that_start_after_them() {
        let barrier: Arc<ReadBarrier> = Arc::new(ReadBarrier::default());
        let rounds = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..200 {
            let (barrier, rounds) = (barrier.clone(), rounds.clone());
            tasks.push(tokio::spawn(async move {
                barrier
                    .confirm(|| async {
                        rounds.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        Ok(())
                    })
                    .await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let n = rounds.load(Ordering::Relaxed);
        assert!((1..=20).contains(&n), "{n} rounds for 200 reads");
    }

    #[tokio::test]
    async fn a_read_after_a_round_finished_runs_its_own() {
        let barrier: ReadBarrier = ReadBarrier::default();
        let rounds = AtomicUsize::new(0);
        for _ in 0..3 {
            barrier
                .confirm(|| async {
                    rounds.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
                .await
                .unwrap();
        }
        assert_eq!(rounds.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_arriving_during_a_round_waits_for_the_next() {
        let barrier: Arc<ReadBarrier<u64, ClusterError>> = Arc::new(ReadBarrier::default());
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier
                    .confirm(|| async { hold.await.map(|()| 1).map_err(|_| ClusterError::Stopped) })
                    .await
            })
        };
        // The first round is under way.
        while barrier.rounds() < 1 {
            tokio::task::yield_now().await;
        }
        let second = {
            let barrier = barrier.clone();
            tokio::spawn(async move { barrier.confirm(|| async { Ok(2) }).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), Ok(1));
        // Not answered by the round it arrived during: a round of its own.
        assert_eq!(second.await.unwrap(), Ok(2));
        assert_eq!(barrier.rounds(), 2);
    }

    #[tokio::test]
    async fn an_abandoned_round_answers_no_one() {
        let barrier: ReadBarrier<u64, ClusterError> = ReadBarrier::default();
        let abandoned = tokio::time::timeout(
            Duration::from_millis(10),
            barrier.confirm(std::future::pending),
        )
        .await;
        assert!(abandoned.is_err());
        assert_eq!(barrier.confirm(|| async { Ok(7) }).await, Ok(7));
        assert_eq!(barrier.rounds(), 2);
    }

    #[tokio::test]
    async fn a_failed_round_answers_the_reads_it_covered() {
        let barrier: ReadBarrier = ReadBarrier::default();
        let e = barrier
            .confirm(|| async { Err(ClusterError::Unavailable("no quorum".into())) })
            .await
            .unwrap_err();
        assert_eq!(e, ClusterError::Unavailable("no quorum".into()));
        // The next read is not answered by the old failure.
        barrier.confirm(|| async { Ok(()) }).await.unwrap();
    }
}
