//! The checks every inbound Raft RPC passes before openraft sees it, whoever sent it.
//!
//! openraft trusts its peers: a term near `u64::MAX` is persisted and overflows at the
//! next election; entries out of order or with a gap stop its core with a storage
//! error; a made-up leader's membership entry is appended like any other. The cluster
//! key keeps strangers out, and these checks keep any one RPC — a forged one, or one
//! from a server with a bug — from doing any of that. Each refusal is a typed
//! [`RpcRefused`] that changed nothing.
//!
//! The rules, against what this server knows ([`ServerView`]):
//!
//! - **Terms**: every term in the request (its vote, its log ids, its entries) is below
//!   [`MAX_TERM`] (2^62) and at most [`MAX_TERM_STEP`] (2^32) above this server's
//!   current term. Terms grow by one per election; 2^32 elections at one every 200 ms
//!   take 27 years, so no cluster gets there honestly, while 2^62 leaves every
//!   `term + 1` openraft computes far from overflowing.
//! - **AppendEntries**: the entries are consecutive from `prev_log_id.index + 1` (from 0
//!   without a `prev_log_id`, openraft's first index), their terms never decrease, start
//!   at or above `prev_log_id`'s term and end at or below the request's term, as do
//!   `leader_commit`'s. Each membership entry is a step Raft can take from the one
//!   before it (the same voter sets with learners added or removed, entering a joint
//!   configuration from its first half, or leaving one for either half) — the first
//!   from the membership in force here where the entries begin (the effective one, or
//!   the committed one when they begin before the effective one's entry, which they
//!   may replace); entries at or below the committed membership's index are ones this
//!   server holds already (a new leader resends its log from the middle) and are not
//!   steps. Addresses are non-empty, printable and short.
//! - **Who sends**: a server that has a membership takes AppendEntries only from a
//!   member of a membership it knows or of one the request itself introduces by such
//!   steps; votes only for a member it knows; snapshots only from a member it knows or
//!   from a leader of a snapshot whose voters hold a majority of the ones it knows and
//!   include this server. A fresh server (no membership: a learner being added) takes
//!   any sender.
//! - **Snapshots**: see [`SnapshotReceiver`](crate::snapshot_receiver::SnapshotReceiver).

use std::collections::BTreeSet;

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{BasicNode, EntryPayload, LogId, Membership, Vote};

use crate::{NodeId, TypeConfig};

/// No term at or above this is taken (2^62).
pub const MAX_TERM: u64 = 1 << 62;

/// No term further than this above the current one is taken (2^32).
pub const MAX_TERM_STEP: u64 = 1 << 32;

/// The longest server address taken in a membership.
pub const MAX_ADDRESS_BYTES: usize = 255;

/// Why an inbound RPC was refused before Raft saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcRefused {
    /// The bytes are not one whole RPC.
    #[error("not a Raft RPC: {0}")]
    Malformed(String),
    /// A term out of bounds.
    #[error(
        "{field} has term {term}; this server is at term {current} and takes none above {limit}"
    )]
    Term {
        /// Which term.
        field: &'static str,
        /// Its value.
        term: u64,
        /// This server's current term.
        current: u64,
        /// The largest term taken now.
        limit: u64,
    },
    /// Entries that do not follow each other.
    #[error("entry {position} has index {got}; after {after:?} the next index is {expected}")]
    NotConsecutive {
        /// Its position in the request.
        position: usize,
        /// Its index.
        got: u64,
        /// The index it must have.
        expected: u64,
        /// The log id it follows.
        after: Option<LogId<NodeId>>,
    },
    /// A term that goes backwards, or above the leader's.
    #[error("{field} has term {term}, outside {low}..={high}")]
    TermOrder {
        /// Which one.
        field: String,
        /// Its term.
        term: u64,
        /// The lowest term it may have.
        low: u64,
        /// The highest term it may have.
        high: u64,
    },
    /// The sender is not a member of any membership this server knows.
    #[error("server {sender} is not a member of this server's cluster ({members:?})")]
    NotAMember {
        /// The sender.
        sender: NodeId,
        /// The members this server knows.
        members: BTreeSet<NodeId>,
    },
    /// A membership entry that Raft could not have produced from the one before.
    #[error("the membership {got:?} cannot follow {after:?}")]
    MembershipJump {
        /// The voter sets before.
        after: Vec<BTreeSet<NodeId>>,
        /// The voter sets proposed.
        got: Vec<BTreeSet<NodeId>>,
    },
    /// A server address that is empty, not printable or too long.
    #[error(
        "server {id} has the address {address:?}: not 1 to {MAX_ADDRESS_BYTES} printable bytes"
    )]
    BadAddress {
        /// The server.
        id: NodeId,
        /// Its address (cut to 64 characters).
        address: String,
    },
    /// A snapshot chunk refused (see the snapshot receiver).
    #[error("snapshot: {0}")]
    Snapshot(String),
}

/// What a server knows when it checks an RPC.
#[derive(Debug, Clone, Default)]
pub struct ServerView {
    /// This server's id.
    pub id: NodeId,
    /// Its current term.
    pub current_term: u64,
    /// Its vote.
    pub vote: Vote<NodeId>,
    /// The members (voters and learners) of every membership it knows (the
    /// effective and the committed one).
    pub members: BTreeSet<NodeId>,
    /// The voters of its effective membership.
    pub voters: BTreeSet<NodeId>,
    /// The voter sets of its effective membership (two in a joint configuration).
    pub configs: Vec<BTreeSet<NodeId>>,
    /// The log index of the effective membership's entry (`None`: none, or unknown —
    /// then every request is checked against `configs`).
    pub configs_index: Option<u64>,
    /// The voter sets of the newest membership this server applied (committed).
    pub committed_configs: Vec<BTreeSet<NodeId>>,
    /// The log index of that membership's entry.
    pub committed_index: Option<u64>,
}

impl ServerView {
    /// Whether the server has a membership at all (a fresh one does not).
    pub fn has_membership(&self) -> bool {
        !self.members.is_empty()
    }

    fn term_limit(&self) -> u64 {
        self.current_term
            .saturating_add(MAX_TERM_STEP)
            .min(MAX_TERM - 1)
    }

    fn check_term(&self, field: &'static str, term: u64) -> Result<(), RpcRefused> {
        let limit = self.term_limit();
        if term > limit {
            return Err(RpcRefused::Term {
                field,
                term,
                current: self.current_term,
                limit,
            });
        }
        Ok(())
    }

    fn check_member(&self, sender: NodeId) -> Result<(), RpcRefused> {
        if self.has_membership() && !self.members.contains(&sender) {
            return Err(RpcRefused::NotAMember {
                sender,
                members: self.members.clone(),
            });
        }
        Ok(())
    }
}

/// A log id's term within the server's bounds and, when `not_above` is given, not
/// above that term (a log id the sender holds cannot be newer than its own vote).
fn check_log_id(
    view: &ServerView,
    field: &'static str,
    id: &Option<LogId<NodeId>>,
    not_above: Option<u64>,
) -> Result<(), RpcRefused> {
    let Some(id) = id else {
        return Ok(());
    };
    let term = id.leader_id.term;
    view.check_term(field, term)?;
    match not_above {
        Some(high) if term > high => Err(RpcRefused::TermOrder {
            field: field.into(),
            term,
            low: 0,
            high,
        }),
        _ => Ok(()),
    }
}

fn check_addresses(m: &Membership<NodeId, BasicNode>) -> Result<(), RpcRefused> {
    for (id, node) in m.nodes() {
        let a = &node.addr;
        // What an address means is the network's business (`host:port` for the
        // agent's, a name for the in-process router's); here it is only bounded.
        let ok = !a.is_empty()
            && a.len() <= MAX_ADDRESS_BYTES
            && !a.chars().any(|c| c.is_control() || c.is_whitespace());
        if !ok {
            return Err(RpcRefused::BadAddress {
                id: *id,
                address: a.chars().take(64).collect(),
            });
        }
    }
    Ok(())
}

/// Whether Raft can go from voter sets `before` to `after` in one membership entry:
/// the same sets (learners changed), into a joint configuration from its first half,
/// or out of one to either half. A fresh server (no sets) takes anything.
fn is_step(before: &[BTreeSet<NodeId>], after: &[BTreeSet<NodeId>]) -> bool {
    if before.is_empty() || before == after {
        return true;
    }
    match (before, after) {
        // [old] → [old, new]
        ([old], [first, _]) => first == old,
        // [old, new] → [new] or back to [old]
        ([old, new], [only]) => only == new || only == old,
        // [old, new] → [new, newer]: openraft 0.9 may start the next change from the
        // joint's second half.
        ([_, new], [first, _]) => first == new,
        _ => false,
    }
}

/// Checks an AppendEntries request.
///
/// # Errors
/// [`RpcRefused`] naming the first rule broken.
pub fn check_append(
    view: &ServerView,
    rpc: &AppendEntriesRequest<TypeConfig>,
) -> Result<(), RpcRefused> {
    let term = rpc.vote.leader_id.term;
    view.check_term("the request's vote", term)?;
    check_log_id(view, "prev_log_id", &rpc.prev_log_id, None)?;
    check_log_id(view, "leader_commit", &rpc.leader_commit, Some(term))?;
    let mut expected = rpc.prev_log_id.map_or(0, |p| p.index.saturating_add(1));
    let mut low = rpc.prev_log_id.map_or(0, |p| p.leader_id.term);
    // The membership in force here where the entries begin: the effective one if they
    // begin after its entry; otherwise they may replace it (it is not committed), but
    // never the committed one.
    let mut configs = if rpc.prev_log_id.map(|p| p.index) >= view.configs_index {
        view.configs.clone()
    } else {
        view.committed_configs.clone()
    };
    let mut members = view.members.clone();
    for (position, entry) in rpc.entries.iter().enumerate() {
        if entry.log_id.index != expected {
            return Err(RpcRefused::NotConsecutive {
                position,
                got: entry.log_id.index,
                expected,
                after: rpc.prev_log_id,
            });
        }
        let t = entry.log_id.leader_id.term;
        if t < low || t > term {
            return Err(RpcRefused::TermOrder {
                field: format!("entry {position} (index {expected})"),
                term: t,
                low,
                high: term,
            });
        }
        if let EntryPayload::Membership(m) = &entry.payload {
            check_addresses(m)?;
            let next = m.get_joint_config().clone();
            if Some(entry.log_id.index) <= view.committed_index {
                // An entry this server committed already: a new leader resends its log
                // from the middle (wherever the logs match) and Raft never rewrites a
                // committed entry, so it is no step; the entries after it step from it.
                configs = next;
            } else if is_step(&configs, &next) {
                configs = next;
                members.extend(m.nodes().map(|(id, _)| *id));
            } else {
                return Err(RpcRefused::MembershipJump {
                    after: configs,
                    got: next,
                });
            }
        }
        low = t;
        expected = expected.saturating_add(1);
    }
    let sender = rpc.vote.leader_id.node_id;
    if view.has_membership() && !members.contains(&sender) {
        return Err(RpcRefused::NotAMember { sender, members });
    }
    Ok(())
}

/// Checks a RequestVote request.
///
/// # Errors
/// [`RpcRefused`] naming the first rule broken.
pub fn check_vote(view: &ServerView, rpc: &VoteRequest<NodeId>) -> Result<(), RpcRefused> {
    let term = rpc.vote.leader_id.term;
    view.check_term("the candidate's vote", term)?;
    check_log_id(view, "last_log_id", &rpc.last_log_id, Some(term))?;
    view.check_member(rpc.vote.leader_id.node_id)
}

/// Checks a PreVote request: the same rules as a vote's (it changes nothing here,
/// but its numbers are compared with ours and logged).
///
/// # Errors
/// [`RpcRefused`] naming the first rule broken.
pub fn check_pre_vote(
    view: &ServerView,
    rpc: &crate::pre_vote::PreVoteRequest,
) -> Result<(), RpcRefused> {
    view.check_term("the candidate's term", rpc.term)?;
    check_log_id(view, "last_log_id", &rpc.last_log_id, Some(rpc.term))?;
    view.check_member(rpc.candidate)
}

/// Checks a TimeoutNow request: its term within bounds, its sender a member.
///
/// # Errors
/// [`RpcRefused`] naming the first rule broken.
pub fn check_timeout_now(
    view: &ServerView,
    rpc: &crate::transfer::TimeoutNowRequest,
) -> Result<(), RpcRefused> {
    view.check_term("the handed-over term", rpc.term)?;
    view.check_member(rpc.from)
}

/// Checks the parts of an InstallSnapshot chunk that do not depend on the chunks
/// before it (those are the receiver's).
///
/// # Errors
/// [`RpcRefused`] naming the first rule broken.
pub fn check_snapshot_chunk(
    view: &ServerView,
    rpc: &InstallSnapshotRequest<TypeConfig>,
) -> Result<(), RpcRefused> {
    let term = rpc.vote.leader_id.term;
    view.check_term("the request's vote", term)?;
    check_log_id(
        view,
        "the snapshot's last log id",
        &rpc.meta.last_log_id,
        Some(term),
    )?;
    let membership = rpc.meta.last_membership.membership();
    check_addresses(membership)?;
    let sender = rpc.vote.leader_id.node_id;
    if !view.has_membership() || view.members.contains(&sender) {
        return Ok(());
    }
    // A leader this server has not heard of: taken only from a cluster that is this
    // one's continuation — this server among its voters, and a majority of the voters
    // this server knows still there.
    let theirs: BTreeSet<NodeId> = membership.voter_ids().collect();
    let kept = view.voters.intersection(&theirs).count();
    let continuation =
        theirs.contains(&view.id) && theirs.contains(&sender) && kept * 2 > view.voters.len();
    if continuation {
        Ok(())
    } else {
        Err(RpcRefused::NotAMember {
            sender,
            members: view.members.clone(),
        })
    }
}

#[cfg(test)]
mod tests;
