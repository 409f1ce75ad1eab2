//! The leader's proposer: concurrent proposals go into one log entry.
//!
//! openraft 0.9 appends one entry per `client_write` and waits for its fsync before
//! it takes the next, so a leader that proposed each command on its own would do one
//! fsync per command, one after the other. Here proposals queue while earlier entries
//! in flight; the next entry takes everything queued meanwhile (up to a limit), so
//! under load one append, one fsync, one replication round and one apply carry many
//! commands. A lone proposal still goes out at once, alone.

use std::sync::Arc;

use openraft::Raft;
use schedstate::state::Command;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::ProposeError;
use crate::server::Committed;
use crate::{Proposal, TypeConfig};

/// The most commands in one entry.
pub(crate) const MAX_BATCH: usize = 512;
/// Entries proposed and not yet answered at once. One: openraft 0.9 appends and
/// fsyncs entries one after the other anyway, so a second entry in flight only splits
/// the queue into smaller batches (measured with `raft_workload` at 64 clients:
/// 13.2k commits/s with one, 12.0k with two, 10.3k with four, 7.3k with eight).
const IN_FLIGHT: usize = 1;

type Reply = oneshot::Sender<Result<Committed, ProposeError>>;

/// The queue in front of a server's Raft.
pub(crate) struct Batcher {
    tx: mpsc::UnboundedSender<(Arc<Command>, Reply)>,
}

impl Batcher {
    /// Starts the proposer task for `raft`.
    pub(crate) fn start(raft: Raft<TypeConfig>) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, rx));
        Batcher { tx }
    }

    /// Queues `command` and waits for its outcome.
    pub(crate) async fn propose(&self, command: Command) -> Result<Committed, ProposeError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((Arc::new(command), reply))
            .map_err(|_| ProposeError::Stopped)?;
        answer.await.unwrap_or(Err(ProposeError::Stopped))
    }
}

async fn run(raft: Raft<TypeConfig>, mut rx: mpsc::UnboundedReceiver<(Arc<Command>, Reply)>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        // Everything that queued while the slot was taken joins this entry.
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            let (commands, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            let outcome = raft.client_write(Proposal { commands }).await;
            drop(permit);
            match outcome {
                Ok(resp) => {
                    let index = resp.log_id.index;
                    let mut refused = resp.data.refused.into_iter();
                    for reply in replies {
                        let answer = match refused.next().flatten() {
                            None => Ok(Committed { index }),
                            Some(error) => Err(ProposeError::Refused { index, error }),
                        };
                        let _ = reply.send(answer);
                    }
                }
                Err(e) => {
                    let e = ProposeError::from_write(e);
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        });
    }
}
