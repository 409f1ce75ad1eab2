//! [`Scans`]: reads whose work grows with a table — lists, filters over every row,
//! whole objects, `?pretty` — run off the async workers, a bounded number at a time,
//! each within a time budget.
//!
//! The async workers (one per core) serve Raft's heartbeats and every other client;
//! a read that holds one for seconds stalls them all (issue 48: four costly filters
//! froze a leader for 46 s and its followers elected another). Here:
//!
//! - a scan runs on a thread of its own at a lower priority, which its worker waits
//!   for inside tokio's `block_in_place` (the worker's other tasks move to a fresh
//!   worker meanwhile), so the workers keep serving and the scan yields the CPU to
//!   them;
//! - at most [`Limits::scan_threads`] scans run at once (by default half the
//!   cores, at least one: the other half stays with Raft and the other clients); a
//!   scan waits its turn at most [`Limits::scan_queue_wait`], then 503 `Busy`;
//! - the threads are taken first come, first served, but a client (by address and
//!   by token) is in that queue with at most [`Limits::scans_per_client`] scans at a
//!   time: its others wait in its own lane, so a client with many scans delays
//!   itself, not the others; it may have at most [`Limits::scans_waiting_per_client`]
//!   waiting in all (429 past it);
//! - each scan has [`Limits::scan_budget`] of time: the list checks its [`Budget`]
//!   as it goes and gives up past it (422 `BudgetExceeded`, naming the limit);
//! - an event stream makes its next lines on the same threads
//!   ([`Scans::run_queued`]), waiting its turn rather than refused: a hundred
//!   streams replaying a large backlog take the scan threads, not the workers.
//!
//! [`Limits::scan_threads`]: crate::Limits::scan_threads
//! [`Limits::scan_queue_wait`]: crate::Limits::scan_queue_wait
//! [`Limits::scans_per_client`]: crate::Limits::scans_per_client
//! [`Limits::scans_waiting_per_client`]: crate::Limits::scans_waiting_per_client
//! [`Limits::scan_budget`]: crate::Limits::scan_budget

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::shares::{ClientKey, ClientKeys, Shares};
use crate::config::Limits;

/// Why a scan did not run, or stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanRefused {
    /// The client has this many scans waiting or running already.
    ClientQueue(usize),
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

/// The scan threads and the clients' lanes to them.
pub(crate) struct Scans {
    threads: Arc<Semaphore>,
    /// Scans a client has waiting or running: bounded, so a client's queue is.
    waiting: Arc<Shares>,
    /// How many of a client's scans may wait for a thread at once.
    lanes: Arc<Lanes>,
    queue_wait: Duration,
    budget: Duration,
}

impl Scans {
    pub(crate) fn new(limits: &Limits) -> Scans {
        Scans {
            threads: Arc::new(Semaphore::new(limits.scan_threads)),
            waiting: Shares::new(limits.scans_waiting_per_client),
            lanes: Arc::new(Lanes {
                width: limits.scans_per_client,
                by_client: Mutex::default(),
            }),
            queue_wait: limits.scan_queue_wait,
            budget: limits.scan_budget,
        }
    }

    /// Runs `scan` for `client` with a fresh [`Budget`], off the async workers, once
    /// its turn comes: first a place in the client's lanes (by address, then by
    /// token: [`Limits::scans_per_client`] each), then a thread. The threads' queue is
    /// first come, first served, and a client is in it at most its lanes' width at a
    /// time: a client with a hundred scans waits behind itself, not others behind it.
    ///
    /// # Errors
    /// [`ScanRefused`]: the client has its most scans waiting already, or no turn
    /// came within the queue wait.
    ///
    /// [`Limits::scans_per_client`]: crate::Limits::scans_per_client
    pub(crate) async fn run<R: Send>(
        &self,
        client: &ClientKeys,
        scan: impl FnOnce(&Budget) -> R + Send,
    ) -> Result<R, ScanRefused> {
        let _waiting = self
            .waiting
            .take(client, 1)
            .ok_or(ScanRefused::ClientQueue(self.waiting.share()))?;
        let busy = || ScanRefused::Busy(self.queue_wait);
        let turn = async {
            let by_address = Lanes::enter(&self.lanes, &client.address).await;
            let by_token = match &client.token {
                Some(t) => Some(Lanes::enter(&self.lanes, t).await),
                None => None,
            };
            let thread = self.threads.acquire().await;
            (by_address, by_token, thread)
        };
        let (_by_address, _by_token, thread) = tokio::time::timeout(self.queue_wait, turn)
            .await
            .map_err(|_| busy())?;
        let _thread = thread.map_err(|_| busy())?;
        let budget = Budget::new(self.budget);
        Ok(off_the_workers(|| scan(&budget)))
    }

    /// Runs `work` for `client` on a scan thread, in the client's lanes like
    /// [`run`](Self::run) but however long its turn takes and whatever else the client
    /// has waiting: for the next piece of an answer already begun (a long list made as
    /// its reader takes it), which must not be refused halfway. A client reading many
    /// long lists at once waits behind itself.
    pub(crate) async fn run_in_lane<R: Send>(
        &self,
        client: &ClientKeys,
        work: impl FnOnce() -> R + Send,
    ) -> R {
        let _by_address = Lanes::enter(&self.lanes, &client.address).await;
        let _by_token = match &client.token {
            Some(t) => Some(Lanes::enter(&self.lanes, t).await),
            None => None,
        };
        // The semaphore is never closed: a permit always comes.
        let _thread = self.threads.acquire().await;
        off_the_workers(work)
    }
}

/// Each client's lane: a semaphore as wide as a client's share of the threads' queue,
/// made when the client first scans and dropped once no scan of it holds or waits for
/// it.
struct Lanes {
    width: usize,
    by_client: Mutex<HashMap<ClientKey, Arc<Semaphore>>>,
}

/// A place in a client's lane.
struct InLane {
    lanes: Arc<Lanes>,
    client: ClientKey,
    permit: Option<OwnedSemaphorePermit>,
}

impl Lanes {
    /// Waits for a place in `client`'s lane.
    async fn enter(lanes: &Arc<Lanes>, client: &ClientKey) -> InLane {
        let lane = lanes
            .by_client
            .lock()
            .entry(client.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(lanes.width)))
            .clone();
        // Dropped mid-wait (the queue wait ran out), the future lets go of its lane;
        // the next one made for this client starts empty, as this one is then.
        let mut place = InLane {
            lanes: lanes.clone(),
            client: client.clone(),
            permit: None,
        };
        place.permit = lane.acquire_owned().await.ok();
        place
    }
}

impl Drop for InLane {
    fn drop(&mut self) {
        drop(self.permit.take());
        // The lane goes once nobody holds or waits for a place in it (each holds
        // an `Arc` of it: a waiter's in its acquire future).
        let mut by_client = self.lanes.by_client.lock();
        if by_client
            .get(&self.client)
            .is_some_and(|lane| Arc::strong_count(lane) == 1)
        {
            by_client.remove(&self.client);
        }
    }
}

impl Scans {
    /// Runs `work` on a scan thread once one is free, however long that takes (no
    /// share, no budget): for work a stream must do to go on — making its next lines —
    /// which is bounded by the caller and must not be refused halfway, only kept off
    /// the async workers and taking its turn with the scans.
    pub(crate) async fn run_queued<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        // The semaphore is never closed: a permit always comes.
        let _thread = self.threads.acquire().await;
        off_the_workers(work)
    }
}

/// Runs `f` where it holds no async worker and yields to everything else: on a
/// thread of its own at a lower priority (`nice` [`SCAN_NICENESS`]), which the
/// calling worker waits for without spinning (`block_in_place` hands the worker's
/// other tasks to a fresh worker meanwhile). On a busy machine Raft, heartbeats and
/// other clients' requests take the CPU first; on an idle one the scan has it all.
/// A thread that cannot be started runs `f` in place.
fn off_the_workers<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let run = || {
        // Taken by whichever runs it: the scan thread, or this one if none starts.
        let slot = std::sync::Mutex::new(Some(f));
        let take = || slot.lock().ok().and_then(|mut f| f.take());
        std::thread::scope(|scope| {
            let spawned = std::thread::Builder::new()
                .name("scan".into())
                .spawn_scoped(scope, || {
                    lower_this_threads_priority();
                    take().map(|f| f())
                });
            let ran = match spawned {
                Ok(handle) => match handle.join() {
                    Ok(r) => r,
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                Err(_) => None,
            };
            match ran {
                Some(r) => r,
                None => (take().expect("the work is run once: the thread did not take it"))(),
            }
        })
    };
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
        _ => run(),
    }
}

/// How much lower than the agent's threads a scan runs (Linux's `nice`: at 10 a
/// thread gets about a tenth of the CPU a default one does when both want it).
pub(crate) const SCAN_NICENESS: i32 = 10;

/// Lowers the calling thread's priority (Linux keeps a nice value per thread; a
/// thread may always lower its own). Elsewhere, nothing.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take no pointers; they change this thread's
    // scheduling weight only.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid);
        if let Ok(tid) = libc::id_t::try_from(tid) {
            libc::setpriority(libc::PRIO_PROCESS, tid, SCAN_NICENESS);
        }
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
    async fn a_full_pool_answers_busy_and_a_client_queue_is_bounded() {
        let mut l = limits(1, 1, 20);
        l.scans_waiting_per_client = 2;
        let scans = Arc::new(Scans::new(&l));
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
        // My second waits in my lane, then gives up at the queue wait.
        assert_eq!(
            scans.run(&me, |_| ()).await,
            Err(ScanRefused::Busy(Duration::from_millis(20)))
        );
        // Another client's waits for the one thread and gives up too.
        assert_eq!(
            scans.run(&other, |_| ()).await,
            Err(ScanRefused::Busy(Duration::from_millis(20)))
        );
        // My third while two are mine (one running, one waiting): refused at once.
        let waiting = {
            let (scans, me) = (scans.clone(), me.clone());
            tokio::spawn(async move { scans.run(&me, |_| 1).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            scans.run(&me, |_| ()).await,
            Err(ScanRefused::ClientQueue(2))
        );
        let _ = waiting.await.unwrap();
        release_tx.send(()).unwrap();
        running.await.unwrap().unwrap();
        assert_eq!(scans.run(&other, |_| 7).await, Ok(7));
        assert!(
            scans.lanes.by_client.lock().is_empty(),
            "the lanes go when idle"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_with_many_scans_waits_behind_itself_not_others_behind_it() {
        let scans = Arc::new(Scans::new(&limits(1, 1, 5_000)));
        let busy = ClientKeys::new("10.0.0.1".parse().unwrap(), None);
        let other = ClientKeys::new("10.0.0.2".parse().unwrap(), None);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (scans, busy, order) = (scans.clone(), busy.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                scans
                    .run(&busy, |_| {
                        std::thread::sleep(Duration::from_millis(10));
                        order.lock().push(format!("busy{i}"));
                    })
                    .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
        let o = order.clone();
        scans
            .run(&other, move |_| o.lock().push("other".into()))
            .await
            .unwrap();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let order = order.lock();
        let at = order.iter().position(|s| s == "other").unwrap();
        // Behind at most what the busy client had in the queue (its lane's width and
        // the one running), not behind all eight.
        assert!(at <= 3, "{order:?}");
    }
}
