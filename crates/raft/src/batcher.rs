//! The leader's proposer: concurrent proposals go into one log entry.
//!
//! openraft 0.9 appends one entry per `client_write` and waits for its fsync before
//! it takes the next, so a leader that proposed each command on its own would do one
//! fsync per command, one after the other. Here proposals queue while earlier entries
//! in flight; the next entry takes everything queued meanwhile (up to a limit), so
//! under load one append, one fsync, one replication round and one apply carry many
//! commands. A lone proposal still goes out at once, alone.
//!
//! An entry's slot is freed only after its proposers have their answers and have had
//! a turn to run ([`YIELDS_BEFORE_NEXT_ENTRY`]). Freed first, the next entry left
//! with whatever had queued during the round, and the proposers answered just then
//! missed it: clients that write again as soon as they are answered split into two
//! groups taking turns, each waiting two rounds per write.

use std::sync::Arc;

use openraft::Raft;
use schedstate::state::Command;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::ProposeError;
use crate::server::Committed;
use crate::state_machine::Outcome;
use crate::write_keys::kept_answer;
use crate::{Proposal, ProposalKeys, TypeConfig, WriteKey};

/// The wall clock in milliseconds since the Unix epoch: the leader's time stamp on a
/// keyed entry, from which every replica ages the write keys alike.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The most commands in one entry.
pub(crate) const MAX_BATCH: usize = 512;
/// The most encoded bytes of commands in one entry: with its framing an entry always
/// fits one RPC ([`MAX_RPC_BYTES`](crate::wire::MAX_RPC_BYTES)), so every entry can
/// reach the followers whatever the clients sent at once.
pub(crate) const MAX_ENTRY_BYTES: usize = crate::wire::MAX_RPC_BYTES / 2;
/// Entries proposed and not yet answered at once. One: openraft 0.9 appends and
/// fsyncs entries one after the other anyway, so a second entry in flight only splits
/// the queue into smaller batches (measured with `raft_workload` at 64 clients:
/// 13.2k commits/s with one, 12.0k with two, 10.3k with four, 7.3k with eight).
const IN_FLIGHT: usize = 1;

/// Scheduler turns an answered entry gives the tasks its answers woke before the
/// next entry is taken: one that writes again at once is then in it. Measured with
/// `raft_workload -clients 1,16,64` (commands per entry, commits/s): freeing the slot
/// before answering, 8.5 and 32.5 per entry at 16 and 64 clients (two groups taking
/// turns); after answering with no turn, the same; one turn 14.3 and 47; two turns 16
/// and 63.9 (one group); four no better than two. A turn costs a few microseconds
/// when nothing else is runnable.
const YIELDS_BEFORE_NEXT_ENTRY: usize = 2;

type Reply = oneshot::Sender<Result<Committed, ProposeError>>;

/// A queued proposal: the command, its write key, its encoded size, where its answer
/// goes.
type Queued = (Arc<Command>, Option<WriteKey>, usize, Reply);

/// A command's encoded size (postcard, counted without writing it).
fn encoded_size(command: &Command) -> usize {
    postcard::serialize_with_flavor::<_, postcard::ser_flavors::Size, usize>(
        command,
        postcard::ser_flavors::Size::default(),
    )
    .unwrap_or(usize::MAX)
}

/// The queue in front of a server's Raft.
pub(crate) struct Batcher {
    tx: mpsc::UnboundedSender<Queued>,
    /// Read by each entry while it is proposed; written by a leadership transfer,
    /// which holds new entries back (`transfer.rs`).
    gate: Arc<tokio::sync::RwLock<()>>,
}

impl Batcher {
    /// Starts the proposer task for `raft`.
    pub(crate) fn start(raft: Raft<TypeConfig>) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        let gate = Arc::new(tokio::sync::RwLock::new(()));
        tokio::spawn(run(raft, rx, gate.clone()));
        Batcher { tx, gate }
    }

    /// Holds new entries back until the guard is dropped, once the entry in flight
    /// (if any) has its outcome.
    pub(crate) async fn hold(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.gate.clone().write_owned().await
    }

    /// Queues `command` and waits for its outcome.
    pub(crate) async fn propose(
        &self,
        command: Command,
        key: Option<WriteKey>,
    ) -> Result<Committed, ProposeError> {
        let size = encoded_size(&command);
        if size > MAX_ENTRY_BYTES {
            return Err(ProposeError::Invalid {
                kind: "TooLarge".into(),
                message: format!(
                    "the command encodes to {size} bytes, over the limit of {MAX_ENTRY_BYTES} for one log entry"
                ),
            });
        }
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((Arc::new(command), key, size, reply))
            .map_err(|_| ProposeError::Stopped)?;
        answer.await.unwrap_or(Err(ProposeError::Stopped))
    }
}

async fn run(
    raft: Raft<TypeConfig>,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    gate: Arc<tokio::sync::RwLock<()>>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // A proposal that did not fit the previous entry starts the next one.
    let mut carried: Option<Queued> = None;
    loop {
        let first = match carried.take() {
            Some(q) => q,
            None => match rx.recv().await {
                Some(q) => q,
                None => return,
            },
        };
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        // Everything that queued while the slot was taken joins this entry, up to the
        // entry's command and byte limits.
        let mut bytes = first.2;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(more) if bytes.saturating_add(more.2) > MAX_ENTRY_BYTES => {
                    carried = Some(more);
                    break;
                }
                Ok(more) => {
                    bytes += more.2;
                    batch.push(more);
                }
                Err(_) => break,
            }
        }
        let raft = raft.clone();
        let open = gate.clone().read_owned().await;
        tokio::spawn(async move {
            let mut commands = Vec::with_capacity(batch.len());
            let mut keys = Vec::with_capacity(batch.len());
            let mut replies = Vec::with_capacity(batch.len());
            for (command, key, _, reply) in batch {
                commands.push(command);
                keys.push(key);
                replies.push(reply);
            }
            let keys = keys.iter().any(Option::is_some).then(|| ProposalKeys {
                at_ms: unix_ms(),
                keys,
            });
            let outcome = raft
                .client_write(Proposal {
                    commands,
                    keys,
                    raise_format: None,
                })
                .await;
            drop(open);
            match outcome {
                Ok(resp) => {
                    let index = resp.log_id.index;
                    let mut outcomes = resp.data.outcomes.into_iter();
                    for reply in replies {
                        let answer = match outcomes.next() {
                            Some(Outcome::Applied) | None => Ok(Committed::at(index)),
                            Some(Outcome::Refused(error)) => {
                                Err(ProposeError::Refused { index, error })
                            }
                            Some(Outcome::Replayed { index, refusal }) => {
                                kept_answer(index, refusal)
                            }
                            Some(Outcome::KeyReused { index }) => {
                                Err(ProposeError::KeyReused { index })
                            }
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
            // The proposers just answered queue their next writes before the next
            // entry is taken (see the module docs).
            for _ in 0..YIELDS_BEFORE_NEXT_ENTRY {
                tokio::task::yield_now().await;
            }
            drop(permit);
        });
    }
}
