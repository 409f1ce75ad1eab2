//! Forwarding a proposal to the leader, with a deadline and a retry.
//!
//! A follower forwards a write to the leader it knows of. If that leader stops
//! answering — killed, paused, cut off — the write must not wait on it: as soon as
//! this server sees the leadership move (its own election timer or a new leader's
//! heartbeat), the forwarded attempt is abandoned. What happens next depends on
//! whether the write has a key:
//!
//! - **with a write key** it is sent again to the new leader, under the same key,
//!   until [`FORWARD_DEADLINE`]: if the old leader had applied it (or a quorum had it
//!   and the new leader commits it), the key answers the first outcome instead of a
//!   second apply — so a retry is always safe;
//! - **without one** the outcome is unknown and said so at once
//!   ([`ProposeError::Unavailable`]), instead of after the RPC's own timeout.
//!
//! A target that answers "not the leader" refused before appending anything, so that
//! is retried with or without a key.

use std::time::{Duration, Instant};

use schedstate::state::Command;

use crate::error::ProposeError;
use crate::server::{Committed, Server};
use crate::{NodeId, WriteKey};

/// How long a forwarded write keeps finding the leader before it answers with the
/// last error.
pub const FORWARD_DEADLINE: Duration = Duration::from_secs(20);

/// The pause before trying the leader again after a failed attempt.
const RETRY_PAUSE: Duration = Duration::from_millis(25);

/// What one forwarded attempt came to.
enum Attempt {
    Answered(Result<Committed, ProposeError>),
    Failed(String),
    LeaderMoved,
}

/// Proposes `command` on the leader, from wherever this server is (see the module's
/// doc).
pub(crate) async fn propose_or_forward(
    server: &Server,
    command: Command,
    key: Option<WriteKey>,
) -> Result<Committed, ProposeError> {
    let deadline = Instant::now() + FORWARD_DEADLINE;
    loop {
        let leader = match server.leader_node().await {
            Some(l) => l,
            None => {
                // An election under way: wait for its outcome (within the deadline),
                // else let the local proposal say there is no leader.
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || server.wait_for_leader(left).await.is_err() {
                    return server.propose_keyed(command, key).await;
                }
                continue;
            }
        };
        let (id, addr) = leader;
        if id == server.id() {
            return server.propose_keyed(command, key).await;
        }
        let attempt = {
            let forward = server.network().forward(id, addr, command.clone(), key);
            tokio::select! {
                r = forward => match r {
                    Ok(answer) => Attempt::Answered(answer),
                    Err(crate::RpcFailure::Protocol { reason, .. }) if !command.fits_format_2() => {
                        // The leader could not read a command of format 3: it runs
                        // the previous release (a rolling upgrade under way).
                        Attempt::Answered(Err(ProposeError::Invalid {
                            kind: crate::FORMAT_NOT_ENABLED.into(),
                            message: format!(
                                "the command {} needs store format 3, and the leader, server {id}, \
                                 could not read it ({reason}): it runs an older release; upgrade \
                                 every server, then try again",
                                command.kind()
                            ),
                        }))
                    }
                    Err(failure) => Attempt::Failed(failure.to_string()),
                },
                () = leader_moves_from(server, id) => Attempt::LeaderMoved,
            }
        };
        let in_time = Instant::now() < deadline;
        match attempt {
            Attempt::Answered(Err(e @ ProposeError::NotLeader { .. })) => {
                if !in_time {
                    return Err(e);
                }
            }
            Attempt::Answered(answer) => return answer,
            Attempt::Failed(why) => {
                if key.is_none() || !in_time {
                    return Err(ProposeError::Unavailable(why));
                }
            }
            Attempt::LeaderMoved => {
                if key.is_none() || !in_time {
                    return Err(ProposeError::Unavailable(format!(
                        "server {id} stopped leading while the write was forwarded to it; its outcome is unknown"
                    )));
                }
                tracing::debug!(
                    old = id,
                    "leader moved under a forwarded write; sending it again under its key"
                );
                continue;
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Resolves once this server no longer takes `id` for the leader (an election began,
/// another server won one, or its election timer ran out without word from `id`), or
/// its Raft stopped. Watches openraft's server metrics, which change with the vote,
/// the leader or the membership only — not with every entry appended or applied,
/// which would wake each forwarded write and each ReadIndex round in flight — and
/// the election timer's "leader lost".
pub(crate) async fn leader_moves_from(server: &Server, id: NodeId) {
    let mut metrics = server.raft().server_metrics();
    let mut lost = server.elections().watch_lost();
    loop {
        lost.borrow_and_update();
        // From the watched metrics: openraft publishes them before `Raft::metrics`.
        let named = metrics.borrow_and_update().current_leader;
        if server.leader_as_seen(named) != Some(id) {
            return;
        }
        tokio::select! {
            r = metrics.changed() => if r.is_err() { return },
            r = lost.changed() => if r.is_err() { return },
        }
    }
}

impl Server {
    /// Resolves once this server no longer takes `id` for the leader: an election
    /// began, another server won one, its election timer ran out without word from
    /// `id` (`elections.rs`), or its Raft stopped. Wakes only on those, not on
    /// every entry.
    pub async fn leader_moves_from(&self, id: NodeId) {
        leader_moves_from(self, id).await;
    }
}
