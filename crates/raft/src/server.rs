//! One replicated server: openraft over this crate's log and state machine, and the
//! client API — propose, consistent and stale reads, blocking queries, membership.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft};
use parking_lot::Mutex;
use schedstate::state::{StateReader, StateSnapshot, StateStore};

use crate::batcher::Batcher;
use crate::elections::Elections;
use crate::error::{ClusterError, OpenError};
use crate::inbound::ServerView;
use crate::log_store::{LogOpenReport, LogStats, LogStore};
use crate::network::{BoxFuture, ErasedNetwork, Factory, Network};
use crate::read_barrier::ReadBarrier;
use crate::read_index::ReadIndexError;
use crate::snapshot_cadence::SnapshotCadence;
use crate::snapshot_receiver::{CheckedSnapshot, SnapshotReceiver};
use crate::state_machine::{Applied, StateMachine};
use crate::write_keys::WriteKeys;
use crate::{NodeId, TypeConfig};

mod options;
mod snapshot_install;
mod writes;

pub use options::{Committed, ServerOptions};

/// One server of a replicated store. Cheap to clone.
///
/// Writes go through [`propose`](Self::propose) on the leader (or
/// [`propose_or_forward`](Self::propose_or_forward) anywhere); every server applies
/// the committed entries to its own store, so reads and blocking queries
/// ([`reader`](Self::reader)) work on every server and wake when an entry is applied
/// there.
#[derive(Clone)]
pub struct Server {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    id: NodeId,
    dir: PathBuf,
    pub(crate) raft: Raft<TypeConfig>,
    store: StateStore,
    pub(crate) applied: Arc<Mutex<Applied>>,
    /// The state machine's write keys.
    keys: Arc<Mutex<WriteKeys>>,
    network: Arc<dyn ErasedNetwork>,
    opened: LogOpenReport,
    log: LogStore,
    batcher: Batcher,
    /// Concurrent consistent reads share their leadership checks.
    reads: ReadBarrier,
    /// Concurrent consistent reads on a follower share their ReadIndex RPCs.
    follower_reads: ReadBarrier<u64, ReadIndexError>,
    /// The chunks of a snapshot being received from a leader.
    receiver: Mutex<SnapshotReceiver>,
    /// The last snapshot received and checked, for the state machine to install
    /// (shared with it).
    checked: Arc<Mutex<Option<CheckedSnapshot>>>,
    /// When this server last heard from a leader, and holds on its elections (a
    /// received snapshot installing): read by its election timer.
    elections: Arc<Elections>,
    max_snapshot_bytes: u64,
    /// The newest store format this server reads ([`ServerOptions::max_format`]).
    pub(crate) max_format: u32,
    /// One raise of the cluster's format at a time (`formats.rs`).
    pub(crate) raising: tokio::sync::Mutex<()>,
    /// The leader's periodic raise of the cluster's format.
    _raise: std::sync::OnceLock<AbortOnDrop>,
    /// The task asking Raft for the snapshots the state machine's cadence calls for.
    _snapshots: AbortOnDrop,
    /// The election timer: PreVote, then `trigger().elect()`; CheckQuorum.
    _elections: AbortOnDrop,
    /// Held by the restore under way here, if any (`restore.rs`): one at a time.
    restoring: tokio::sync::Mutex<()>,
}

/// A task stopped when its owner is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Server {
    /// Starts server `id` on the data directory `dir` (created if missing), reaching
    /// the others through `network`. A directory with state resumes it: the newest
    /// snapshot is restored (checked), the log reopened (a torn tail cut), and Raft
    /// replays the committed entries after the snapshot.
    ///
    /// # Errors
    /// [`OpenError`]: damage in the log, metadata or snapshot files (with the file and
    /// offset), a bad configuration.
    pub fn open<N: Network>(
        id: NodeId,
        dir: &Path,
        options: ServerOptions,
        network: N,
    ) -> BoxFuture<'static, Result<Server, OpenError>> {
        Self::open_erased(id, dir.to_path_buf(), options, Arc::new(network))
    }

    /// [`Server::open`] once the network's type is erased. Not generic, and boxed
    /// here, so openraft's core is compiled in this crate once rather than in every
    /// crate that opens a server (see [`ErasedNetwork`]).
    fn open_erased(
        id: NodeId,
        dir: PathBuf,
        options: ServerOptions,
        network: Arc<dyn ErasedNetwork>,
    ) -> BoxFuture<'static, Result<Server, OpenError>> {
        Box::pin(async move {
            let max_snapshot_bytes = options.max_snapshot_bytes;
            let max_format = options.max_format;
            if !(crate::formats::OLDEST_CLUSTER_FORMAT..=crate::formats::NEWEST_FORMAT)
                .contains(&max_format)
            {
                return Err(OpenError::Options(format!(
                    "max_format {max_format}: this build reads store formats {} to {}",
                    crate::formats::OLDEST_CLUSTER_FORMAT,
                    crate::formats::NEWEST_FORMAT
                )));
            }
            let (log, opened) = LogStore::open(&dir, options.log)?;
            let store = StateStore::new();
            let applied = Arc::new(Mutex::new(Applied::default()));
            let keys = Arc::new(Mutex::new(WriteKeys::default()));
            let checked = Arc::new(Mutex::new(None));
            let (snapshot_due, mut due) = tokio::sync::mpsc::unbounded_channel();
            let sm = StateMachine::open(
                &dir,
                store.clone(),
                applied.clone(),
                keys.clone(),
                checked.clone(),
                options.on_apply,
                SnapshotCadence::new(options.snapshot_after_commands, snapshot_due),
            )?;
            let config = Arc::new(options.raft.validate()?);
            let raft = Raft::new(
                id,
                config.clone(),
                Factory(network.clone()),
                log.clone(),
                sm,
            )
            .await?;
            // Elections are ours (PreVote first, `elections.rs`): openraft's timer
            // would raise the term whether or not the server could win.
            raft.runtime_config().elect(false);
            let elections = Arc::new(Elections::new(&config));
            let timer = AbortOnDrop(crate::elections::spawn(
                raft.clone(),
                network.clone(),
                log.clone(),
                id,
                elections.clone(),
            ));
            // Hands the state machine's requests for a snapshot to Raft; ends when the
            // server is dropped (the task is aborted) or Raft stops.
            let trigger = raft.clone();
            let snapshots = AbortOnDrop(tokio::spawn(async move {
                while due.recv().await.is_some() {
                    if trigger.trigger().snapshot().await.is_err() {
                        return;
                    }
                }
            }));
            let server = Server {
                inner: Arc::new(Inner {
                    id,
                    dir,
                    store,
                    applied,
                    keys,
                    network,
                    opened,
                    log,
                    batcher: Batcher::start(raft.clone()),
                    reads: ReadBarrier::default(),
                    follower_reads: ReadBarrier::default(),
                    receiver: Mutex::default(),
                    checked,
                    elections,
                    max_snapshot_bytes,
                    max_format,
                    raising: tokio::sync::Mutex::new(()),
                    _raise: std::sync::OnceLock::new(),
                    raft,
                    _snapshots: snapshots,
                    _elections: timer,
                    restoring: tokio::sync::Mutex::new(()),
                }),
            };
            let raise = tokio::spawn(crate::formats::keep_raising(Arc::downgrade(&server.inner)));
            let _ = server.inner._raise.set(AbortOnDrop(raise));
            Ok(server)
        })
    }

    /// The lock a restore holds while it runs here.
    pub(crate) fn restoring(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.restoring
    }

    /// This server's id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What opening its log found.
    pub fn open_report(&self) -> &LogOpenReport {
        &self.inner.opened
    }

    /// What its log has done since it started (appends, entries, fsyncs).
    pub fn log_stats(&self) -> LogStats {
        self.inner.log.stats()
    }

    /// The openraft handle, for metrics and operations this API does not wrap.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.inner.raft
    }

    /// Makes a new cluster of `members` (id → address); call it on one server of a
    /// cluster that has never been initialized. Initializing an initialized server is
    /// a no-op.
    ///
    /// # Errors
    /// [`ClusterError`] when Raft refuses (members that do not include this server) or
    /// has stopped.
    pub async fn initialize(
        &self,
        members: impl IntoIterator<Item = (NodeId, String)>,
    ) -> Result<(), ClusterError> {
        let members: BTreeMap<NodeId, BasicNode> = members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode { addr }))
            .collect();
        match self.inner.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(RaftError::APIError(e)) => Err(ClusterError::Unavailable(e.to_string())),
            Err(RaftError::Fatal(_)) => Err(ClusterError::Stopped),
        }
    }

    /// Its election timing (`elections.rs`).
    pub(crate) fn elections(&self) -> &Elections {
        &self.inner.elections
    }

    /// Its proposer.
    pub(crate) fn batcher(&self) -> &Batcher {
        &self.inner.batcher
    }

    /// Its Raft log.
    pub(crate) fn log_store(&self) -> &LogStore {
        &self.inner.log
    }

    /// How this server forwards proposals to the leader.
    pub(crate) fn network(&self) -> &dyn ErasedNetwork {
        &*self.inner.network
    }

    /// The current leader as this server knows it, with its address. `None` also
    /// once this server's election timer ran out without word from that leader
    /// (`elections.rs`).
    pub async fn leader_node(&self) -> Option<(NodeId, String)> {
        if self.inner.elections.leader_lost() {
            return None;
        }
        // Read in place: every forwarded proposal asks, and the metrics are large.
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        let leader = m.current_leader?;
        let addr = m
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.addr.clone())
            .unwrap_or_default();
        Some((leader, addr))
    }

    /// Waits until this server knows a leader (itself or another), and returns it.
    ///
    /// # Errors
    /// [`ClusterError::Unavailable`] when `timeout` passes first.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, ClusterError> {
        // `Raft::metrics`, which openraft publishes last: once it names a leader,
        // `leader_node` and the other metrics do too.
        let mut metrics = self.inner.raft.metrics();
        let mut lost = self.inner.elections.watch_lost();
        let wait = async {
            loop {
                lost.borrow_and_update();
                let named = metrics.borrow_and_update().current_leader;
                if let Some(leader) = self.leader_as_seen(named) {
                    return Ok(leader);
                }
                tokio::select! {
                    r = metrics.changed() => r.map_err(|_| ClusterError::Stopped)?,
                    r = lost.changed() => r.map_err(|_| ClusterError::Stopped)?,
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| ClusterError::Unavailable(format!("no leader within {timeout:?}")))?
    }

    /// The current leader's id as this server knows it (see
    /// [`leader_node`](Self::leader_node)).
    pub fn leader(&self) -> Option<NodeId> {
        let named = self.inner.raft.metrics().borrow().current_leader;
        self.leader_as_seen(named)
    }

    /// The leader openraft `named`, unless this server's election timer ran out
    /// since it last heard from a leader.
    pub(crate) fn leader_as_seen(&self, named: Option<NodeId>) -> Option<NodeId> {
        if self.inner.elections.leader_lost() {
            None
        } else {
            named
        }
    }

    /// Whether this server believes it is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.inner.id)
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.inner.raft.metrics().borrow().current_term
    }

    /// The members' ids and addresses (voters and learners) of the membership this
    /// server applied last, and which of them vote.
    pub fn members(&self) -> (BTreeMap<NodeId, String>, BTreeSet<NodeId>) {
        let a = self.inner.applied.lock();
        let m = a.membership.membership();
        (
            m.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
            m.voter_ids().collect(),
        )
    }

    /// A linearizable read: confirms leadership with a quorum (openraft's read index),
    /// waits until this server applied everything committed before the read, and
    /// returns that version of the state. Only the leader answers. Concurrent calls
    /// share confirmation rounds (each call is covered by a round that started after
    /// it), so many readers cost one quorum round trip, not one each. A follower's
    /// consistent read is [`read_index`](Self::read_index).
    ///
    /// # Errors
    /// [`ClusterError::NotLeader`], or no quorum.
    pub async fn read_consistent(&self) -> Result<StateSnapshot, ClusterError> {
        self.confirm_leadership().await?;
        Ok(self.inner.store.snapshot())
    }

    /// The leader's shared confirmation rounds ([`crate::read_index`]).
    pub(crate) fn leader_reads(&self) -> &ReadBarrier {
        &self.inner.reads
    }

    /// A follower's shared ReadIndex rounds ([`crate::read_index`]).
    pub(crate) fn follower_reads(&self) -> &ReadBarrier<u64, ReadIndexError> {
        &self.inner.follower_reads
    }

    /// A stale read: this server's latest applied state, without asking anyone.
    pub fn read_stale(&self) -> StateSnapshot {
        self.inner.store.snapshot()
    }

    /// This server's reader: snapshots and blocking queries, woken when entries are
    /// applied here (and abandoned and re-run when a snapshot is installed).
    pub fn reader(&self) -> &StateReader {
        self.inner.store.reader()
    }

    /// The index of the last entry applied here (refused commands, blank and
    /// membership entries included).
    pub fn last_applied(&self) -> u64 {
        self.inner.applied.lock().last.map_or(0, |l| l.index)
    }

    /// Snapshots installed from a leader since this server started.
    pub fn snapshots_installed(&self) -> u64 {
        self.inner.applied.lock().installs
    }

    /// The last snapshot this server built since it started (`None`: none yet).
    pub fn last_snapshot_built(&self) -> Option<crate::SnapshotBuilt> {
        self.inner.applied.lock().last_built
    }

    /// Waits until this server applied `index` (read-your-writes on a follower).
    ///
    /// # Errors
    /// [`ClusterError::Unavailable`] when `timeout` passes first.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), ClusterError> {
        self.inner
            .raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "wait_applied")
            .await
            .map(|_| ())
            .map_err(|e| ClusterError::Unavailable(e.to_string()))
    }

    /// Adds server `id` at `addr` as a learner (it receives the log, does not vote) and
    /// waits until it caught up, at most `within`. Leader only. An operator's change
    /// goes through [`add_server`](Self::add_server), which checks it first and takes
    /// the learner out again when it does not catch up.
    ///
    /// # Errors
    /// [`ClusterError`]; [`ClusterError::NotCaughtUp`] when `within` passed (the
    /// learner stays a member).
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: impl Into<String>,
    ) -> Result<(), ClusterError> {
        let address = addr.into();
        let added = self.join_as_learner(id, &address).await?;
        let within = Duration::from_secs(60);
        if self.wait_caught_up(id, added, within).await? {
            Ok(())
        } else {
            Err(ClusterError::NotCaughtUp {
                id,
                address,
                waited_ms: within.as_millis() as u64,
            })
        }
    }

    /// Makes the learners `ids` voters. Leader only.
    ///
    /// # Errors
    /// [`ClusterError`].
    pub async fn promote(&self, ids: impl IntoIterator<Item = NodeId>) -> Result<(), ClusterError> {
        let ids: BTreeSet<NodeId> = ids.into_iter().collect();
        self.change(ChangeMembers::AddVoterIds(ids)).await
    }

    /// Removes the servers `ids` from the cluster (voters and learners). Leader only.
    ///
    /// # Errors
    /// [`ClusterError`].
    pub async fn remove(&self, ids: impl IntoIterator<Item = NodeId>) -> Result<(), ClusterError> {
        let ids: BTreeSet<NodeId> = ids.into_iter().collect();
        let voters = self.members().1;
        let (demote, learners): (BTreeSet<NodeId>, BTreeSet<NodeId>) =
            ids.into_iter().partition(|id| voters.contains(id));
        // Learners first, while this server surely leads. Voters last, in one change:
        // without `retain` it takes them out of the membership altogether, so nothing
        // follows it — if it removed this server, this server no longer leads, and
        // openraft 0.9 asserts (panics, in a debug build) when a stepped-down leader
        // is handed another membership change.
        if !learners.is_empty() {
            self.change(ChangeMembers::RemoveNodes(learners)).await?;
        }
        if !demote.is_empty() {
            self.change(ChangeMembers::RemoveVoters(demote)).await?;
        }
        Ok(())
    }

    /// Stops Raft and releases the data directory's lock. The files stay as they are:
    /// every acknowledged entry was fsynced before it was acknowledged, so stopping
    /// writes nothing more (a crash and a stop leave the same directory).
    pub async fn shutdown(&self) {
        let _ = self.inner.raft.shutdown().await;
        // Raft has stopped: let another server open the directory.
        self.inner.log.close();
    }
}

/// Inbound RPCs: what the checks need to know (snapshots received in chunks:
/// `server/snapshot_install.rs`).
impl Server {
    /// What this server knows for checking an inbound RPC
    /// ([`crate::inbound`]): its term, vote, and the members of its effective and
    /// committed memberships.
    pub fn inbound_view(&self) -> ServerView {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        let effective = m.membership_config.membership();
        let mut members: BTreeSet<NodeId> = effective.nodes().map(|(id, _)| *id).collect();
        let (committed_configs, committed_index) = {
            let applied = self.inner.applied.lock();
            let committed = &applied.membership;
            members.extend(committed.membership().nodes().map(|(id, _)| *id));
            (
                committed.membership().get_joint_config().clone(),
                committed.log_id().map(|l| l.index),
            )
        };
        ServerView {
            id: self.inner.id,
            current_term: m.current_term,
            vote: m.vote,
            members,
            voters: effective.voter_ids().collect(),
            configs: effective.get_joint_config().clone(),
            configs_index: m.membership_config.log_id().map(|l| l.index),
            committed_configs,
            committed_index,
        }
    }
}
