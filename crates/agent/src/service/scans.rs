//! [`Scans`]: reads whose work grows with a table — lists, filters over every row,
//! whole objects, `?pretty` — run off the async workers, a bounded number at a time,
//! each within a time budget.
//!
//! The async workers (one per core) serve Raft's heartbeats and every other client;
//! a read that holds one for seconds stalls them all (issue 48: four costly filters
//! froze a leader for 46 s and its followers elected another). Here:
//!
//! - a scan runs on a thread of its own (tokio's `block_in_place`: the worker's
//!   other tasks move to a fresh worker meanwhile), so the workers keep serving;
//! - at most [`Limits::scan_threads`] scans run at once (by default half the
//!   cores, at least one: the other half stays with Raft and the other clients); a
//!   scan waits its turn at most [`Limits::scan_queue_wait`], then 503 `Busy`;
//! - a client has at most [`Limits::scans_per_client`] scans running or waiting
//!   (by address and by token, [`Shares`]); more are 429;
//! - each scan has [`Limits::scan_budget`] of time: the list checks its [`Budget`]
//!   as it goes and gives up past it (422 `BudgetExceeded`, naming the limit).
//!
//! [`Limits::scan_threads`]: crate::Limits::scan_threads
//! [`Limits::scan_queue_wait`]: crate::Limits::scan_queue_wait
//! [`Limits::scans_per_client`]: crate::Limits::scans_per_client
//! [`Limits::scan_budget`]: crate::Limits::scan_budget

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::shares::{ClientKeys, Shares};
use crate::config::Limits;

/// Why a scan did not run, or stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanRefused {
    /// The client has its share of scans running or waiting.
    ClientShare(usize),
    /// No scan thread came free within the queue wait.
    Busy(Duration),
}

/// The time a scan may take, checked by the scan as it goes.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    deadline: Option<Instant>,
    limit: Duration,
}

impl Budget {
    /// A budget of `limit` from now.
    pub(crate) fn new(limit: Duration) -> Budget {
        Budget {
            deadline: Instant::now().checked_add(limit),
            limit,
        }
    }

    /// No limit: the point reads, which touch a bounded number of rows.
    pub(crate) fn unlimited() -> Budget {
        Budget {
            deadline: None,
            limit: Duration::MAX,
        }
    }

    /// Whether the budget is spent.
    pub(crate) fn spent(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// What the budget was.
    pub(crate) fn limit(&self) -> Duration {
        self.limit
    }
}

/// The scan threads and their shares.
pub(crate) struct Scans {
    threads: Arc<Semaphore>,
    shares: Arc<Shares>,
    queue_wait: Duration,
    budget: Duration,
}

impl Scans {
    pub(crate) fn new(limits: &Limits) -> Scans {
        Scans {
            threads: Arc::new(Semaphore::new(limits.scan_threads)),
            shares: Shares::new(limits.scans_per_client),
            queue_wait: limits.scan_queue_wait,
            budget: limits.scan_budget,
        }
    }

    /// Runs `scan` for `client` with a fresh [`Budget`], off the async workers, once
    /// its turn comes.
    ///
    /// # Errors
    /// [`ScanRefused`]: the client's share, or no thread within the queue wait.
    pub(crate) async fn run<R>(
        &self,
        client: &ClientKeys,
        scan: impl FnOnce(&Budget) -> R,
    ) -> Result<R, ScanRefused> {
        let _share = self
            .shares
            .take(client, 1)
            .ok_or(ScanRefused::ClientShare(self.shares.share()))?;
        let _thread = tokio::time::timeout(self.queue_wait, self.threads.acquire())
            .await
            .map_err(|_| ScanRefused::Busy(self.queue_wait))?
            .map_err(|_| ScanRefused::Busy(self.queue_wait))?;
        let budget = Budget::new(self.budget);
        Ok(off_the_workers(|| scan(&budget)))
    }
}

/// Runs `f` where it holds no async worker: `block_in_place` on a multi-threaded
/// runtime; inline on a single-threaded one (tests), which has no other worker to
/// hand its tasks to.
fn off_the_workers<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(threads: usize, per_client: usize, wait_ms: u64) -> Limits {
        Limits {
            scan_threads: threads,
            scans_per_client: per_client,
            scan_queue_wait: Duration::from_millis(wait_ms),
            scan_budget: Duration::from_millis(50),
            ..Limits::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scans_run_off_the_workers_within_their_budget() {
        let scans = Arc::new(Scans::new(&limits(1, 2, 1_000)));
        let me = ClientKeys::new("10.0.0.1".parse().unwrap(), None);
        // A scan that spins until its budget is spent: the runtime keeps serving.
        let spinner = {
            let (scans, me) = (scans.clone(), me.clone());
            tokio::spawn(async move {
                let start = Instant::now();
                scans
                    .run(&me, |b| while !b.spent() {})
                    .await
                    .map(|()| start.elapsed())
            })
        };
        let ticks = tokio::spawn(async {
            let mut n = 0;
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                n += 1;
            }
            n
        });
        assert_eq!(ticks.await.unwrap(), 10);
        let took = spinner.await.unwrap().unwrap();
        assert!(took >= Duration::from_millis(50), "{took:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_gets_its_share_and_a_full_pool_answers_busy() {
        let scans = Arc::new(Scans::new(&limits(1, 1, 20)));
        let me = ClientKeys::new("10.0.0.1".parse().unwrap(), Some("t"));
        let other = ClientKeys::new("10.0.0.2".parse().unwrap(), Some("u"));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let running = {
            let (scans, me) = (scans.clone(), me.clone());
            tokio::spawn(async move {
                scans
                    .run(&me, move |_| {
                        started_tx.send(()).unwrap();
                        release_rx.recv().unwrap();
                    })
                    .await
            })
        };
        tokio::task::spawn_blocking(move || started_rx.recv().unwrap())
            .await
            .unwrap();
        assert_eq!(
            scans.run(&me, |_| ()).await,
            Err(ScanRefused::ClientShare(1))
        );
        assert_eq!(
            scans.run(&other, |_| ()).await,
            Err(ScanRefused::Busy(Duration::from_millis(20)))
        );
        release_tx.send(()).unwrap();
        running.await.unwrap().unwrap();
        assert_eq!(scans.run(&other, |_| 7).await, Ok(7));
    }
}
