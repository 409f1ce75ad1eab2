//! Membership changes an operator asks for, made so that none can wedge the cluster:
//! each is checked before anything is proposed, each step has a deadline, and a new
//! server votes only once it holds the log.
//!
//! - [`Server::add_server`]: `id` ≠ 0, an address of at most 255 printable bytes; an id
//!   already a member with another address is refused (with the same address, the call
//!   only finishes what is missing). The server joins as a **learner** (it never counts
//!   toward a quorum, so an unreachable one costs the cluster nothing); it is promoted to
//!   voter only once its log matches the leader's up to the entry that added it and
//!   lacks at most [`CATCH_UP_DISTANCE`] entries of the leader's log. If it
//!   does not catch up in time, it is removed again and the call fails with
//!   [`ClusterError::NotCaughtUp`].
//! - [`Server::remove_server`]: a member; never the last voter.
//! - [`Server::recover_membership`]: leaves a joint configuration a leader left behind
//!   (openraft 0.9 lets a new leader keep the joint configuration of a change its
//!   predecessor did not finish; every later change is refused until it is left).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use openraft::{BasicNode, ChangeMembers};

use crate::error::{ClusterError, ProposeError};
use crate::{NodeId, Server};

/// The longest address taken (as in a membership entry; see `inbound`).
const MAX_ADDRESS_BYTES: usize = 255;

/// How long one step of a change (an entry to commit) may take.
pub const MEMBERSHIP_STEP_DEADLINE: Duration = Duration::from_secs(30);

/// How many entries a learner may still lack behind the leader's last one to be made
/// a voter. Once it votes it counts toward every quorum; until it holds the log it
/// cannot help make one, so the cluster would survive one failure less meanwhile.
/// (One entry carries a batch of commands.)
pub const CATCH_UP_DISTANCE: u64 = 64;

/// Checks an address: non-empty, at most 255 bytes, printable, no whitespace.
fn check_address(address: &str) -> Result<(), ClusterError> {
    if address.is_empty()
        || address.len() > MAX_ADDRESS_BYTES
        || address.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(ClusterError::Invalid(format!(
            "the address {:?} is not 1 to {MAX_ADDRESS_BYTES} printable bytes",
            address.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

/// Runs one step with the step deadline; a step that does not finish may still
/// commit later, so its outcome is unknown.
async fn step<T>(
    what: &str,
    fut: impl Future<Output = Result<T, ClusterError>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(MEMBERSHIP_STEP_DEADLINE, fut).await {
        Ok(r) => r,
        Err(_) => Err(ClusterError::Unavailable(format!(
            "{what} did not commit within {MEMBERSHIP_STEP_DEADLINE:?} (no quorum?); read the configuration before retrying"
        ))),
    }
}

impl Server {
    /// Adds server `id` at `address` as a voter, through a learner that must catch up
    /// within `catch_up` (see the module's doc). Leader only.
    ///
    /// # Errors
    /// [`ClusterError::Invalid`], [`ClusterError::Conflict`],
    /// [`ClusterError::NotCaughtUp`] (the server was removed again), or a step that did
    /// not commit ([`ClusterError::Unavailable`], [`ClusterError::NotLeader`]).
    pub async fn add_server(
        &self,
        id: NodeId,
        address: &str,
        catch_up: Duration,
    ) -> Result<(), ClusterError> {
        if id == 0 {
            return Err(ClusterError::Invalid("server ids start at 1".into()));
        }
        check_address(address)?;
        self.settle_membership().await?;
        let (members, voters) = self.members();
        match members.get(&id) {
            Some(a) if a != address => {
                return Err(ClusterError::Conflict(format!(
                    "server {id} is a member already, at {a}; remove it first to move it"
                )));
            }
            Some(_) if voters.contains(&id) => return Ok(()),
            _ => {}
        }
        let needed = self.join_as_learner(id, address).await?;
        if !self.wait_caught_up(id, needed, catch_up).await? {
            tracing::warn!(id, address, "the new server did not catch up; removing it");
            self.change(ChangeMembers::RemoveNodes(BTreeSet::from([id])))
                .await?;
            return Err(ClusterError::NotCaughtUp {
                id,
                address: address.to_string(),
                waited_ms: catch_up.as_millis() as u64,
            });
        }
        self.change(ChangeMembers::AddVoterIds(BTreeSet::from([id])))
            .await
    }

    /// Adds `id` at `address` as a learner without waiting for it (openraft's
    /// `blocking` wait has no end), within the step deadline; returns the index of the
    /// membership entry that added it.
    pub(crate) async fn join_as_learner(
        &self,
        id: NodeId,
        address: &str,
    ) -> Result<u64, ClusterError> {
        let raft = self.raft();
        let node = BasicNode {
            addr: address.to_string(),
        };
        let added = step("adding the learner", async {
            raft.add_learner(id, node, false)
                .await
                .map_err(|e| ClusterError::from(ProposeError::from_write(e)))
        })
        .await?;
        Ok(added.log_id.index)
    }

    /// Whether learner `id`, as this leader sees it, matched the log up to `index` and
    /// is within [`CATCH_UP_DISTANCE`] of the leader's last entry, within `within`.
    ///
    /// # Errors
    /// [`ClusterError::NotLeader`] as soon as this server stops leading (deposed while
    /// cut off, say): its view of the learner's progress means nothing any more, and
    /// waiting out `within` would hold the caller for nothing.
    pub(crate) async fn wait_caught_up(
        &self,
        id: NodeId,
        index: u64,
        within: Duration,
    ) -> Result<bool, ClusterError> {
        let until = Instant::now() + within;
        let mut metrics = self.raft().metrics();
        loop {
            let (caught_up, leader) = {
                let m = metrics.borrow_and_update();
                let last = m.last_log_index.unwrap_or(0);
                let caught_up = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).copied().flatten())
                    .is_some_and(|matched| {
                        matched.index >= index
                            && last.saturating_sub(matched.index) <= CATCH_UP_DISTANCE
                    });
                (caught_up, m.current_leader)
            };
            if caught_up {
                return Ok(true);
            }
            if leader != Some(self.id()) {
                let address = leader.and_then(|l| self.members().0.get(&l).cloned());
                return Err(ClusterError::NotLeader { leader, address });
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            if tokio::time::timeout(left, metrics.changed()).await.is_err() {
                return Ok(false);
            }
        }
    }

    /// Removes server `id` (voter or learner). Leader only.
    ///
    /// # Errors
    /// [`ClusterError::NotAMember`], [`ClusterError::Conflict`] for the last voter, or
    /// a step that did not commit.
    pub async fn remove_server(&self, id: NodeId) -> Result<(), ClusterError> {
        self.settle_membership().await?;
        let (members, voters) = self.members();
        if !members.contains_key(&id) {
            return Err(ClusterError::NotAMember(id));
        }
        if voters.len() == 1 && voters.contains(&id) {
            return Err(ClusterError::Conflict(format!(
                "server {id} is the last voter: a cluster needs one"
            )));
        }
        self.remove([id]).await
    }

    /// Leaves a joint configuration for its newer half, if the membership is joint;
    /// returns whether it was. Leader only.
    ///
    /// # Errors
    /// A step that did not commit.
    pub async fn recover_membership(&self) -> Result<bool, ClusterError> {
        self.settle_membership().await?;
        let configs = self
            .raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_joint_config()
            .clone();
        let [_, newer] = configs.as_slice() else {
            return Ok(false);
        };
        tracing::warn!(voters = ?newer, "leaving a joint configuration");
        self.change(ChangeMembers::ReplaceAllVoters(newer.clone()))
            .await?;
        Ok(true)
    }

    /// On a leader, waits (within the step deadline) until it applied its newest
    /// membership entry, so that [`members`](Self::members) is the membership in
    /// force and openraft takes a change: it refuses one while the entry before is not
    /// committed, as after an election until the new leader's first entry commits.
    async fn settle_membership(&self) -> Result<(), ClusterError> {
        let raft = self.raft();
        let (newest, applied) = {
            let m = raft.metrics();
            let m = m.borrow();
            (
                m.membership_config.log_id().map(|l| l.index),
                m.last_applied.map(|l| l.index),
            )
        };
        if !self.is_leader() || newest <= applied {
            return Ok(());
        }
        step("the newest membership entry", async {
            raft.wait(Some(MEMBERSHIP_STEP_DEADLINE))
                .applied_index_at_least(newest, "the newest membership applied")
                .await
                .map(|_| ())
                .map_err(|e| ClusterError::Unavailable(e.to_string()))
        })
        .await
    }

    /// One membership entry, within the step deadline.
    pub(crate) async fn change(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
    ) -> Result<(), ClusterError> {
        self.settle_membership().await?;
        let raft = self.raft();
        step("the membership change", async {
            raft.change_membership(change, false)
                .await
                .map(|_| ())
                .map_err(|e| ProposeError::from_write(e).into())
        })
        .await
    }
}
