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
//!
//! Proposers that come back from further away — an HTTP client, whose next write
//! crosses the network, TLS and the agent's request path after its answer — are not
//! back within those turns either. So the next entry also waits, for at most
//! [`GATHER_WAIT`], until as many proposals are queued as there were writers when
//! the last entry was answered (its proposers and those that missed it). A lone
//! writer's demand is one, which the proposal that starts the entry meets: it never
//! waits. A writer that does not come back costs one entry that wait, after which
//! the demand counts it no more.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The longest the next entry waits for the writers of the last one to come back
/// (tokio's timers tick in milliseconds: this waits one to two). Measured with
/// `http_workload` (three agents over HTTPS, 16 and 64 clients): see BENCHMARKS.md,
/// "The HTTP path, per stage".
const GATHER_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

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
    /// Proposals queued and not yet taken into an entry.
    queued: Arc<AtomicUsize>,
    /// Read by each entry while it is proposed; written by a leadership transfer,
    /// which holds new entries back (`transfer.rs`).
    gate: Arc<tokio::sync::RwLock<()>>,
}

impl Batcher {
    /// Starts the proposer task for `raft`.
    pub(crate) fn start(raft: Raft<TypeConfig>) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        let gate = Arc::new(tokio::sync::RwLock::new(()));
        let queued = Arc::new(AtomicUsize::new(0));
        tokio::spawn(run(raft, rx, gate.clone(), queued.clone()));
        Batcher { tx, queued, gate }
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
        self.queued.fetch_add(1, Ordering::Relaxed);
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
    queued: Arc<AtomicUsize>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // The writers when the last entry was answered: its proposers and the proposals
    // queued then (set by the entry's task, read when the next entry is taken).
    let demand = Arc::new(AtomicUsize::new(0));
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
        // entry's command and byte limits; then, for a short while, the last entry's
        // writers still on their way back (see the module docs).
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
        let target = demand.load(Ordering::Relaxed).min(MAX_BATCH);
        if carried.is_none() && batch.len() < target {
            let until = tokio::time::Instant::now() + GATHER_WAIT;
            while batch.len() < target {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(more)) if bytes.saturating_add(more.2) > MAX_ENTRY_BYTES => {
                        carried = Some(more);
                        break;
                    }
                    Ok(Some(more)) => {
                        bytes += more.2;
                        batch.push(more);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
        // A carried proposal stays counted as queued: it starts the next entry.
        queued.fetch_sub(batch.len(), Ordering::Relaxed);
        let writers = batch.len();
        let (queued, demand) = (queued.clone(), demand.clone());
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
            // Read before anyone is answered: what is queued now missed this entry,
            // and none of its own proposers can have written again yet (one that
            // did would count twice and make the next entry wait for a writer that
            // does not exist).
            let missed = queued.load(Ordering::Relaxed);
            demand.store(writers + missed, Ordering::Relaxed);
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
