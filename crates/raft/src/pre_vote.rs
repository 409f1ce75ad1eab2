//! PreVote: a server asks whether it could win an election before it stands.
//!
//! openraft 0.9 has no PreVote: a follower whose election timer fires raises its term
//! at once. Cut off for a few seconds, it raised its term by one per timeout (25 in
//! five seconds), and when the link healed the leader saw the higher term in an
//! answer and stepped down — an election after every heal, caused by the one server
//! that had been away. Here a server stands only after a majority of the voters
//! (each half of a joint configuration) said, without changing anything, that they
//! would vote for it ([`PreVoteRequest`]): a voter says no while it has heard from a
//! leader within the leader's lease (openraft's own: the maximum election timeout),
//! and no when the candidate's log is behind its own. A server that cannot reach a
//! majority therefore never raises its term, and a healthy leader is never deposed
//! by one that comes back. The timer that asks is `elections.rs`; openraft's own
//! election timer is switched off.
//!
//! The RPC is [`RpcRequest::PreVote`](crate::wire::RpcRequest::PreVote), over the
//! same authenticated transport as the Raft RPCs, checked by
//! [`check_pre_vote`](crate::inbound::check_pre_vote) like a vote.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::{LogId, ServerState};
use serde::{Deserialize, Serialize};

use crate::network::ErasedNetwork;
use crate::{NodeId, Server};

/// "Would you vote for me?", asked before a server raises its term.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The server asking.
    pub candidate: NodeId,
    /// The term it would stand at (its current term + 1).
    pub term: u64,
    /// The last entry of its log.
    pub last_log_id: Option<LogId<NodeId>>,
}

/// The answer to a [`PreVoteRequest`]. Answering changes nothing on the voter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreVoteAnswer {
    /// It would vote for the candidate.
    Granted,
    /// It heard from a leader `ms` milliseconds ago, within the leader's lease (or it
    /// is that leader, and a quorum answered it that recently).
    LeaderAlive {
        /// The leader it heard from.
        leader: NodeId,
        /// How long ago.
        ms: u64,
    },
    /// The candidate's log is behind this server's.
    LogBehind {
        /// This server's last log id.
        mine: Option<LogId<NodeId>>,
    },
}

impl Server {
    /// This server's answer to `request` (already checked by
    /// [`check_pre_vote`](crate::inbound::check_pre_vote)).
    pub(crate) fn answer_pre_vote(&self, request: &PreVoteRequest) -> PreVoteAnswer {
        let lease = self.elections().lease();
        {
            let metrics = self.raft().metrics();
            let m = metrics.borrow();
            if m.state == ServerState::Leader {
                // A leader that still hears a quorum (or was elected a moment ago and
                // has not counted one yet) is alive; one that does not is about to
                // step down (CheckQuorum, `elections.rs`) and lets others stand.
                let ms = m.millis_since_quorum_ack.unwrap_or(0);
                if u128::from(ms) <= lease.as_millis() {
                    return PreVoteAnswer::LeaderAlive {
                        leader: self.id(),
                        ms,
                    };
                }
            } else if let Some(leader) = m.current_leader {
                let since = self.elections().since_heard();
                if since <= lease {
                    return PreVoteAnswer::LeaderAlive {
                        leader,
                        ms: since.as_millis() as u64,
                    };
                }
            }
        }
        let mine = self.log_store().last_log_id();
        if request.last_log_id < mine {
            return PreVoteAnswer::LogBehind { mine };
        }
        PreVoteAnswer::Granted
    }
}

/// Asks every voter of `configs` but this server (`id`, which grants its own) at
/// `addresses` and returns whether a majority of each configuration granted, within
/// `within`. Stops asking as soon as the outcome is known.
pub(crate) async fn ask_voters(
    network: &Arc<dyn ErasedNetwork>,
    id: NodeId,
    configs: &[BTreeSet<NodeId>],
    addresses: &[(NodeId, String)],
    request: PreVoteRequest,
    within: Duration,
) -> bool {
    let granted = |answer: &PreVoteAnswer| matches!(answer, PreVoteAnswer::Granted);
    ask_voters_counting(network, id, configs, addresses, request, within, granted).await
}

/// As [`ask_voters`], counting the answers `yes` accepts (and this server) as yes:
/// whether a majority of each configuration said yes within `within`.
pub(crate) async fn ask_voters_counting(
    network: &Arc<dyn ErasedNetwork>,
    id: NodeId,
    configs: &[BTreeSet<NodeId>],
    addresses: &[(NodeId, String)],
    request: PreVoteRequest,
    within: Duration,
    yes: impl Fn(&PreVoteAnswer) -> bool,
) -> bool {
    let mut granted: BTreeSet<NodeId> = BTreeSet::new();
    let mut refused: BTreeSet<NodeId> = BTreeSet::new();
    granted.insert(id);
    let mut asks = tokio::task::JoinSet::new();
    for (target, addr) in addresses.iter().filter(|(t, _)| *t != id) {
        let (network, target, addr, request) =
            (network.clone(), *target, addr.clone(), request.clone());
        asks.spawn(async move { (target, network.pre_vote(target, addr, request).await) });
    }
    let outcome = |granted: &BTreeSet<NodeId>, refused: &BTreeSet<NodeId>| {
        let won = configs
            .iter()
            .all(|c| c.iter().filter(|v| granted.contains(v)).count() * 2 > c.len());
        let lost = configs
            .iter()
            .any(|c| c.iter().filter(|v| refused.contains(v)).count() * 2 >= c.len());
        (won, lost)
    };
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (won, lost) = outcome(&granted, &refused);
        if won || lost {
            return won;
        }
        let next = tokio::time::timeout_at(deadline, asks.join_next()).await;
        let (target, answer) = match next {
            Ok(Some(Ok(done))) => done,
            Ok(Some(Err(_))) => continue,
            // Everyone answered, or time is up, without a majority.
            Ok(None) | Err(_) => return false,
        };
        match answer {
            Ok(answer) if yes(&answer) => {
                granted.insert(target);
            }
            Ok(refusal) => {
                tracing::debug!(target, ?refusal, "pre-vote refused");
                refused.insert(target);
            }
            Err(failure) => {
                tracing::debug!(target, %failure, "pre-vote unanswered");
                refused.insert(target);
            }
        }
    }
}
