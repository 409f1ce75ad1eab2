//! When a server stands for election, and when a leader steps down: this crate's
//! election timer, in place of openraft's (switched off at open).
//!
//! openraft 0.9's timer raises the term whenever it fires, whether or not the server
//! could win, and a leader keeps leading while it hears no quorum. Ours:
//!
//! - **PreVote** ([`crate::pre_vote`]). A voter that has not heard from a leader for
//!   the leader's lease (openraft's: the maximum election timeout, 200 ms) plus a
//!   random election timeout (100–200 ms) — the moment openraft's own timer would have
//!   fired — first asks the voters whether they would vote for it, and asks openraft
//!   to campaign (`trigger().elect()`) only with a majority of yes. A server cut off
//!   from a majority never raises its term, so its return deposes nobody.
//! - **CheckQuorum**. A leader that no quorum has answered for its lease (200 ms:
//!   five heartbeats — the lease within which it tells a pre-vote it is alive, and
//!   after which openraft's followers would grant a vote) steps down, so that a leader
//!   that cannot hear its followers (whose heartbeats still reach them, so none of
//!   them would stand) does not hold the cluster without writes. openraft 0.9 has no
//!   call to step down; a leader does it by voting, through its own `Raft::vote`, for
//!   no one at the next term — [`STEP_DOWN_VOTE`], a candidate id no server has. It
//!   then follows with that vote uncommitted, which every real candidate of that term
//!   or a later one outranks (openraft orders a term's candidates by id), sends
//!   nothing, and its followers' timers run out and elect a leader among those that
//!   still hear each other. This costs the stepped-down server one term, and only it.
//!   Raft's answers wait for the followers' disks, so a leader whose answers are
//!   half a lease old asks the followers directly whether they still follow it
//!   ([`crate::quorum_probe`]); a majority's yes counts as an answer.
//!
//! "Heard from a leader" is [`Elections::heard`], called by
//! [`answer_rpc`](crate::wire::answer_rpc) for every AppendEntries from a leader this
//! server follows, as it arrives, and again once Raft accepted it; every snapshot
//! chunk a leader's vote got accepted with and every vote granted — what resets
//! openraft's own timer and lease — and while this server leads.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use openraft::raft::VoteRequest;
use openraft::{Config, Raft, ServerState, Vote};
use parking_lot::Mutex;

use crate::log_store::LogStore;
use crate::network::ErasedNetwork;
use crate::pre_vote::{PreVoteRequest, ask_voters};
use crate::quorum_probe::QuorumProbe;
use crate::{NodeId, TypeConfig};

/// The candidate a leader votes for to step down: no server has id 0 (the agent
/// refuses it), and it is below every real candidate of the same term.
pub const STEP_DOWN_VOTE: NodeId = 0;

/// How often the timer looks: an election is late by at most this much.
const TICK: Duration = Duration::from_millis(10);

/// A server's election timing and what resets it. Shared between the server (which
/// hears from leaders) and its timer task.
pub(crate) struct Elections {
    /// When a leader was last heard from (or a vote granted, or this server's vote
    /// changed): within the lease after it, this voter tells a pre-vote that a leader
    /// is alive.
    last_heard: Mutex<Instant>,
    /// When the timer last started: then, or when this server last asked to stand. A
    /// lost pre-vote starts the timer again but is no word from a leader: counted as
    /// one, it made the loser refuse the other voter's pre-vote for a lease, and two
    /// voters whose refusals crossed (one's log behind, the other's refusal fresh)
    /// took up to 7.6 s to elect a leader after a leader was killed.
    timer_from: Mutex<Instant>,
    /// Whether this voter's timer ran out since it last heard from a leader: it no
    /// longer takes the leader openraft still names for one. openraft clears its
    /// leader when its own timer fires (it becomes a candidate); ours may not stand
    /// at all (PreVote lost), and the forwarding, reads and proxy that wait on "the
    /// leadership moved" must still see it go.
    lost: tokio::sync::watch::Sender<bool>,
    /// Holds taken and not released (a received snapshot installing).
    holds: AtomicU64,
    lease: Duration,
    timeout_min: Duration,
    timeout_max: Duration,
}

impl Elections {
    /// The timing of `config`: openraft's lease (its maximum election timeout) and its
    /// election timeouts.
    pub(crate) fn new(config: &Config) -> Elections {
        Elections {
            last_heard: Mutex::new(Instant::now()),
            timer_from: Mutex::new(Instant::now()),
            lost: tokio::sync::watch::Sender::new(false),
            holds: AtomicU64::new(0),
            lease: Duration::from_millis(config.election_timeout_max),
            timeout_min: Duration::from_millis(config.election_timeout_min),
            timeout_max: Duration::from_millis(config.election_timeout_max),
        }
    }

    /// A leader was heard from (or a vote granted, or this server's vote changed):
    /// the timer starts again, and a leader it names is one again.
    pub(crate) fn heard(&self) {
        let now = Instant::now();
        *self.last_heard.lock() = now;
        *self.timer_from.lock() = now;
        self.lost.send_if_modified(|l| std::mem::replace(l, false));
    }

    /// The timer starts again; whether the leader is lost, and when a leader was
    /// last heard from, stay as they are.
    fn restart(&self) {
        *self.timer_from.lock() = Instant::now();
    }

    /// The timer ran out: the leader openraft names is no longer taken for one.
    fn lose(&self) {
        self.lost.send_if_modified(|l| !std::mem::replace(l, true));
    }

    /// Whether this server's timer ran out since it last heard from a leader.
    pub(crate) fn leader_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Told when [`leader_lost`](Self::leader_lost) changes.
    pub(crate) fn watch_lost(&self) -> tokio::sync::watch::Receiver<bool> {
        self.lost.subscribe()
    }

    /// How long ago a leader was last heard from.
    pub(crate) fn since_heard(&self) -> Duration {
        self.last_heard.lock().elapsed()
    }

    /// How long ago the timer last started.
    fn since_timer_started(&self) -> Duration {
        self.timer_from.lock().elapsed()
    }

    /// The leader's lease: within it, a voter refuses to vote for anyone else.
    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// Keeps this server from standing until [`release`](Self::release)d.
    pub(crate) fn hold(&self) {
        self.holds.fetch_add(1, Ordering::AcqRel);
    }

    /// Releases a [`hold`](Self::hold); the timer starts again from now.
    pub(crate) fn release(&self) {
        self.heard();
        self.holds.fetch_sub(1, Ordering::AcqRel);
    }

    fn held(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 0
    }

    /// How long without a leader before this server asks to stand: the lease plus a
    /// random election timeout, as openraft's own timer.
    fn next_timeout(&self) -> Duration {
        let spread = self.timeout_max.saturating_sub(self.timeout_min);
        let extra = Duration::from_micros(fastrand::u64(0..=spread.as_micros() as u64));
        self.lease + self.timeout_min + extra
    }

    /// How long a leader goes without a quorum's answer before it steps down: its
    /// lease. Its followers stand a lease plus an election timeout after its last
    /// heartbeat, so a leader that can send but not hear is replaced about 0.5–0.6 s
    /// after it last heard a quorum (0.7–0.8 s when it waited a further election
    /// timeout: over the 1 s bound on a loaded machine).
    fn quorum_timeout(&self) -> Duration {
        self.lease
    }
}

/// What the timer reads of the metrics each tick.
struct Seen {
    state: ServerState,
    vote: Vote<NodeId>,
    term: u64,
    quorum_ms: Option<u64>,
    voter: bool,
    alone: bool,
}

/// Starts server `id`'s timer; it ends when Raft stops (or is aborted).
pub(crate) fn spawn(
    raft: Raft<TypeConfig>,
    network: Arc<dyn ErasedNetwork>,
    log: LogStore,
    id: NodeId,
    elections: Arc<Elections>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut timeout = elections.next_timeout();
        let mut leading_since: Option<Instant> = None;
        let mut last_vote: Option<Vote<NodeId>> = None;
        let mut probe = QuorumProbe::default();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(seen) = look(&raft, id) else {
                return;
            };
            // A vote changed (granted, or this server stood): openraft restarts its
            // timer then, and so does this one.
            if last_vote.replace(seen.vote) != Some(seen.vote) {
                elections.heard();
            }
            if seen.state == ServerState::Leader {
                elections.heard();
                let since = *leading_since.get_or_insert_with(Instant::now);
                let acked = seen
                    .quorum_ms
                    .map_or_else(|| since.elapsed(), Duration::from_millis);
                // Raft's answers wait for the followers' disks; past half a lease
                // without them, the followers are asked directly (`quorum_probe.rs`).
                let lease = elections.quorum_timeout();
                if !seen.alone && acked > lease / 2 {
                    let (configs, addresses) = voters(&raft);
                    let request = PreVoteRequest {
                        candidate: id,
                        term: seen.term + 1,
                        last_log_id: log.last_log_id(),
                    };
                    probe.send(&network, configs, addresses, request, lease / 4, lease / 2);
                }
                let unanswered = probe
                    .confirmed_ago(seen.term)
                    .map_or(acked, |probed| probed.min(acked));
                // A new leader's first rounds (its blank entry, followers found where
                // their logs match) are given an election timeout more: at a
                // cluster's start, leaders stepped down before the first answers.
                let settled = since.elapsed() > lease + elections.timeout_max;
                if !seen.alone && settled && unanswered > lease {
                    step_down(&raft, &log, id, seen.term, unanswered).await;
                }
                continue;
            }
            leading_since = None;
            if !seen.voter || elections.held() {
                continue;
            }
            // The only voter needs nobody's vote, but waits out an election it
            // started (each trigger would start another, a term higher).
            let wait = if seen.alone {
                elections.timeout_min
            } else {
                timeout
            };
            if elections.since_timer_started() < wait {
                continue;
            }
            elections.lose();
            let (configs, addresses) = voters(&raft);
            let request = PreVoteRequest {
                candidate: id,
                term: seen.term + 1,
                last_log_id: log.last_log_id(),
            };
            let won = ask_voters(
                &network,
                id,
                &configs,
                &addresses,
                request,
                elections.timeout_max,
            )
            .await;
            if won {
                tracing::info!(
                    id,
                    term = seen.term + 1,
                    "a majority would vote for this server: standing for election"
                );
                if raft.trigger().elect().await.is_err() {
                    return;
                }
            } else {
                tracing::debug!(id, "pre-vote lost: not standing");
            }
            // Either way the timer starts again, with a new random timeout.
            elections.restart();
            timeout = elections.next_timeout();
        }
    })
}

/// The metrics the timer needs, read in place (`None`: Raft has stopped).
fn look(raft: &Raft<TypeConfig>, id: NodeId) -> Option<Seen> {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    m.running_state.as_ref().ok()?;
    let membership = m.membership_config.membership();
    let voter = membership.voter_ids().any(|v| v == id);
    let alone = voter && membership.voter_ids().all(|v| v == id);
    Some(Seen {
        state: m.state,
        vote: m.vote,
        term: m.current_term,
        quorum_ms: m.millis_since_quorum_ack,
        voter,
        alone,
    })
}

/// The voter sets of the effective membership (two in a joint configuration) and the
/// voters' addresses.
#[allow(clippy::type_complexity)]
fn voters(raft: &Raft<TypeConfig>) -> (Vec<BTreeSet<NodeId>>, Vec<(NodeId, String)>) {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    let membership = m.membership_config.membership();
    let configs = membership.get_joint_config().clone();
    let addresses = membership
        .voter_ids()
        .map(|v| {
            let addr = membership
                .get_node(&v)
                .map(|n| n.addr.clone())
                .unwrap_or_default();
            (v, addr)
        })
        .collect();
    (configs, addresses)
}

/// CheckQuorum: this leader heard no quorum for `unanswered`; it votes for
/// [`STEP_DOWN_VOTE`] at `term + 1`, which makes it a follower.
async fn step_down(
    raft: &Raft<TypeConfig>,
    log: &LogStore,
    id: NodeId,
    term: u64,
    unanswered: Duration,
) {
    let request = VoteRequest::new(Vote::new(term + 1, STEP_DOWN_VOTE), log.last_log_id());
    match raft.vote(request).await {
        Ok(answer) if answer.vote_granted => tracing::warn!(
            id,
            term,
            unanswered_ms = unanswered.as_millis() as u64,
            "no quorum answered this leader: stepped down"
        ),
        // An entry appended meanwhile, or openraft's lease: the next tick tries again.
        Ok(_) => {}
        Err(e) => tracing::debug!(id, error = %e, "stepping down failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_pre_vote_restarts_the_timer_but_is_no_word_from_a_leader() {
        let elections = Elections::new(&Config::default());
        std::thread::sleep(Duration::from_millis(20));
        // Asking to stand (and losing) starts the timer again...
        elections.restart();
        assert!(elections.since_timer_started() < Duration::from_millis(20));
        // ... and leaves when a leader was last heard from where it was: this voter
        // does not tell the next candidate's pre-vote that a leader is alive.
        assert!(elections.since_heard() >= Duration::from_millis(20));
        // Hearing from a leader restarts both.
        elections.heard();
        assert!(elections.since_heard() < Duration::from_millis(20));
        assert!(elections.since_timer_started() < Duration::from_millis(20));
    }
}
