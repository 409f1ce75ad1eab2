//! Leadership transfer: a leader hands over to a caught-up voter before it stops, so a
//! planned restart costs writes a round trip or two instead of an election timeout.
//!
//! openraft 0.9 has no transfer call, and its followers refuse any vote for the
//! leader's lease (200 ms) after its last heartbeat. What it does allow: a leader may
//! grant a vote itself (`Raft::vote` on its own handle, as CheckQuorum's step-down
//! does), and a follower may be told to campaign at once (`trigger().elect()`). So:
//!
//! 1. the leader holds its proposer (no new entry: `Batcher::hold`), waits for the
//!    entry in flight, and for the target's matched log to reach its last entry;
//! 2. it votes for the target at term + 1 — it steps down, and its vote is the
//!    target's;
//! 3. it tells the target ([`TimeoutNowRequest`], a new RPC over the same transport
//!    and checks as the others) to campaign now: the target stands at term + 1 with a
//!    log as long as anyone's, and the old leader's vote plus its own are a majority
//!    of three voters at once. With five, the third vote waits out the others'
//!    leases (200 ms) and the target's next pre-vote.
//!
//! The held proposals go on when the hold ends: openraft answers them "forward to the
//! leader", and a forwarded or keyed write is sent on to the new one.

use std::time::{Duration, Instant};

use openraft::Vote;
use openraft::raft::VoteRequest;
use serde::{Deserialize, Serialize};

use crate::error::ClusterError;
use crate::{NodeId, Server};

/// How long a transfer may take before it is given up (the leader then leads on, or
/// has stepped down and the cluster elects as after a failure).
pub const TRANSFER_DEADLINE: Duration = Duration::from_secs(3);

/// "Campaign now": from a leader that stepped down and voted for the receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutNowRequest {
    /// The leader handing over.
    pub from: NodeId,
    /// The term it voted for the receiver at (its term + 1).
    pub term: u64,
}

/// The answer to a [`TimeoutNowRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeoutNowAnswer {
    /// The receiver stands for election.
    Standing,
    /// It does not (why).
    Refused(String),
}

/// How long a leader waits before it asks again to step down, while its own vote is
/// within openraft's leader lease.
const STEP_DOWN_RETRY: Duration = Duration::from_millis(25);

impl Server {
    /// Hands the leadership to voter `to`, or to the most caught-up voter, and returns
    /// the new leader's id once it leads (as this server sees it). Leader only.
    ///
    /// # Errors
    /// [`ClusterError::NotLeader`]; [`ClusterError::Unavailable`] when `to` is no other
    /// voter, no voter caught up within [`TRANSFER_DEADLINE`], or the target did not
    /// take over in time (this server may have stepped down meanwhile: the cluster
    /// then elects as after a failure).
    pub async fn transfer_leadership(&self, to: Option<NodeId>) -> Result<NodeId, ClusterError> {
        let until = Instant::now() + TRANSFER_DEADLINE;
        let _hold = self.batcher().hold().await;
        let target = self.transfer_target(to)?;
        let (term, last) = self.wait_target_caught_up(target, until).await?;
        // openraft refuses any vote while its vote is fresher than the leader lease
        // (a leader elected a moment ago refuses its own): ask again until it passes.
        loop {
            let granted = self
                .raft()
                .vote(VoteRequest::new(Vote::new(term + 1, target), last))
                .await
                .map_err(|e| ClusterError::Unavailable(e.to_string()))?;
            if granted.vote_granted {
                break;
            }
            if Instant::now() + STEP_DOWN_RETRY >= until {
                return Err(ClusterError::Unavailable(format!(
                    "could not step down for server {target}: {}",
                    granted.vote
                )));
            }
            tokio::time::sleep(STEP_DOWN_RETRY).await;
        }
        // Stepped down: this server does not stand again while the target takes
        // over. With five voters the target's first try cannot win (the others
        // refuse within their lease of this leader), and this server — as caught up
        // as the target — would otherwise race it when the leases run out.
        let _held = HeldElections::new(self.elections());
        let addr = self.members().0.get(&target).cloned().unwrap_or_default();
        let request = TimeoutNowRequest {
            from: self.id(),
            term: term + 1,
        };
        match self.network().timeout_now(target, addr, request).await {
            Ok(TimeoutNowAnswer::Standing) => {}
            Ok(TimeoutNowAnswer::Refused(why)) => {
                return Err(ClusterError::Unavailable(format!(
                    "server {target} would not stand: {why}"
                )));
            }
            Err(e) => return Err(ClusterError::Unavailable(e.to_string())),
        }
        // Another leader, as this server sees it (its metrics may still name itself
        // for a moment after it stepped down).
        let left = until.saturating_duration_since(Instant::now());
        let me = self.id();
        let m = self
            .raft()
            .wait(Some(left))
            .metrics(
                |m| m.current_leader.is_some_and(|l| l != me),
                "another leader",
            )
            .await
            .map_err(|e| ClusterError::Unavailable(e.to_string()))?;
        let leader = m.current_leader.unwrap_or(target);
        tracing::info!(from = me, to = leader, "leadership transferred");
        Ok(leader)
    }

    /// `to` if it is another voter, else the voter whose matched log is longest.
    fn transfer_target(&self, to: Option<NodeId>) -> Result<NodeId, ClusterError> {
        let metrics = self.raft().metrics();
        let m = metrics.borrow();
        if m.current_leader != Some(self.id()) {
            let leader = m.current_leader;
            let address = leader.and_then(|l| self.members().0.get(&l).cloned());
            return Err(ClusterError::NotLeader { leader, address });
        }
        let voters: Vec<NodeId> = m
            .membership_config
            .membership()
            .voter_ids()
            .filter(|&v| v != self.id())
            .collect();
        if let Some(to) = to {
            return if voters.contains(&to) {
                Ok(to)
            } else {
                Err(ClusterError::Unavailable(format!(
                    "server {to} is no other voter of this cluster ({voters:?})"
                )))
            };
        }
        let matched = |v: &NodeId| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(v).copied().flatten())
                .map_or(0, |l| l.index)
        };
        voters
            .iter()
            .copied()
            .max_by_key(matched)
            .ok_or_else(|| ClusterError::Unavailable("no other voter to hand over to".into()))
    }

    /// Waits until `target` matched this leader's last entry; returns the term and
    /// that entry's id.
    async fn wait_target_caught_up(
        &self,
        target: NodeId,
        until: Instant,
    ) -> Result<(u64, Option<openraft::LogId<NodeId>>), ClusterError> {
        let mut metrics = self.raft().metrics();
        loop {
            {
                let m = metrics.borrow_and_update();
                if m.current_leader != Some(self.id()) {
                    return Err(ClusterError::NotLeader {
                        leader: m.current_leader,
                        address: None,
                    });
                }
                let last = self.log_store().last_log_id();
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&target).copied().flatten());
                if matched == last {
                    return Ok((m.current_term, last));
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, metrics.changed()).await.is_err() {
                return Err(ClusterError::Unavailable(format!(
                    "server {target} did not catch up within {TRANSFER_DEADLINE:?}"
                )));
            }
        }
    }

    /// This server's answer to a [`TimeoutNowRequest`] (already checked by
    /// [`check_timeout_now`](crate::inbound::check_timeout_now)): it stands at once if
    /// the sender is the leader it follows and the term the one after its own.
    pub(crate) async fn answer_timeout_now(&self, request: &TimeoutNowRequest) -> TimeoutNowAnswer {
        let (leader, term, voter) = {
            let metrics = self.raft().metrics();
            let m = metrics.borrow();
            let voter = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|v| v == self.id());
            (m.current_leader, m.current_term, voter)
        };
        if !voter {
            return TimeoutNowAnswer::Refused("not a voter".into());
        }
        if leader != Some(request.from) || term + 1 != request.term {
            return TimeoutNowAnswer::Refused(format!(
                "this server follows {leader:?} at term {term}, not {} handing over term {}",
                request.from, request.term
            ));
        }
        if let Err(e) = self.raft().trigger().elect().await {
            return TimeoutNowAnswer::Refused(e.to_string());
        }
        // The old leader's vote and this one are a majority of three; of five, the
        // others refuse any vote until their lease of the old leader runs out. Then
        // stand again, sanctioned by the hand-over, before their own timers would
        // (a lease and an election timeout).
        let server = self.clone();
        let lease = self.elections().lease();
        let term = request.term;
        tokio::spawn(async move {
            tokio::time::sleep(lease + STAND_AGAIN_MARGIN).await;
            let standing_again = {
                let metrics = server.raft().metrics();
                let m = metrics.borrow();
                m.current_leader.is_none() && m.current_term <= term
            };
            if standing_again {
                tracing::info!(
                    id = server.id(),
                    "the hand-over's first election did not win: standing again"
                );
                let _ = server.raft().trigger().elect().await;
            }
        });
        TimeoutNowAnswer::Standing
    }
}

/// How long after the others' lease a hand-over's target stands again.
const STAND_AGAIN_MARGIN: Duration = Duration::from_millis(20);

/// A hold on this server's elections, released when dropped.
struct HeldElections<'a>(&'a crate::elections::Elections);

impl<'a> HeldElections<'a> {
    fn new(elections: &'a crate::elections::Elections) -> Self {
        elections.hold();
        HeldElections(elections)
    }
}

impl Drop for HeldElections<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}
