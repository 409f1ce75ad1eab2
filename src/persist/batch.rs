//! The write queue of a durable store: concurrent writers hand their commands to one
//! of them, the *leader*, which applies a whole batch under the writer lock (each
//! command its own transaction, at its own index), makes the batch durable with one
//! fsync and wakes each writer with its own result. Without it, 64 writers hand the
//! writer lock to each other 64 times per fsync, and most of the time goes to waking
//! threads; with it, each writer sleeps once per commit.
//!
//! A leader serves one batch — the requests queued when it looks, its own among them
//! — then hands the leadership to the oldest queued request, if any, and returns: no
//! caller serves others forever.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::state::{Command, Commit};

use super::error::Result;
use super::wal::EncodedCommand;

/// One queued write.
pub(crate) struct Request {
    /// The index asked for, or `None` for the next one.
    pub(crate) index: Option<u64>,
    pub(crate) command: Command,
    /// The command's log encoding, made on the caller's thread before queueing.
    pub(crate) encoded: EncodedCommand,
}

#[derive(Default)]
struct SlotState {
    request: Option<Request>,
    lead: bool,
    result: Option<Result<Commit>>,
}

/// Where a queued writer waits for its result, or to be made leader.
pub(crate) struct Slot {
    state: Mutex<SlotState>,
    cv: Condvar,
}

impl Slot {
    /// Takes the request to serve it.
    pub(crate) fn take(&self) -> Option<Request> {
        self.state.lock().request.take()
    }

    /// Gives the writer its result.
    pub(crate) fn complete(&self, result: Result<Commit>) {
        self.state.lock().result = Some(result);
        self.cv.notify_one();
    }

    fn make_leader(&self) {
        self.state.lock().lead = true;
        self.cv.notify_one();
    }

    /// Waits until served (`Some`) or made leader (`None`).
    fn wait(&self) -> Option<Result<Commit>> {
        let mut state = self.state.lock();
        loop {
            if let Some(result) = state.result.take() {
                return Some(result);
            }
            if std::mem::take(&mut state.lead) {
                return None;
            }
            self.cv.wait(&mut state);
        }
    }
}

#[derive(Default)]
struct QueueState {
    pending: Vec<Arc<Slot>>,
    leading: bool,
}

/// The queue of writes waiting for a leader.
#[derive(Default)]
pub(crate) struct WriteQueue {
    state: Mutex<QueueState>,
}

impl WriteQueue {
    /// Queues `request` and returns its result: served by the current leader, or by
    /// this caller as the leader — `apply` applies a batch, then, once the leadership
    /// is passed on, `finish` makes it durable (together they must complete every
    /// slot they are given).
    pub(crate) fn submit<P>(
        &self,
        request: Request,
        mut apply: impl FnMut(Vec<Arc<Slot>>) -> P,
        mut finish: impl FnMut(P),
    ) -> Result<Commit> {
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState {
                request: Some(request),
                ..SlotState::default()
            }),
            cv: Condvar::new(),
        });
        let mut lead = {
            let mut q = self.state.lock();
            q.pending.push(Arc::clone(&slot));
            !std::mem::replace(&mut q.leading, true)
        };
        loop {
            if lead {
                // Apply what is queued (this request among it), pass on, finish.
                let batch = std::mem::take(&mut self.state.lock().pending);
                let applied = apply(batch);
                {
                    let mut q = self.state.lock();
                    match q.pending.first() {
                        Some(next) => next.make_leader(),
                        None => q.leading = false,
                    }
                }
                finish(applied);
            }
            match slot.wait() {
                Some(result) => return result,
                None => lead = true,
            }
        }
    }
}
