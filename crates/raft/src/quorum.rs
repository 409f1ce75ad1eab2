//! A leader cut off from its quorum stops taking writes.
//!
//! openraft keeps a leader a leader until it hears of a higher term, so a leader on the
//! minority side of a partition (or one whose followers all died) accepts proposals
//! that can never commit while it stays cut off: without this, each waited for the
//! caller's own bound (the agent's 30 s). Here, once the leader has heard from no
//! quorum for [`QUORUM_LOST_AFTER`] — long past the election timeout, so the majority
//! side has had time to elect another leader — a new proposal is refused at once as
//! "no leader" (nothing was proposed), and a proposal already waiting is answered
//! "no answer" (outcome unknown: it is in this leader's log and commits if the
//! partition heals before another leader overwrites it; a retry under the same write
//! key applies it at most once).
//!
//! The clock is openraft's `millis_since_quorum_ack` (the time since a quorum last
//! acknowledged this leader's heartbeats or entries), refreshed with the metrics at
//! every tick; a single-voter cluster is its own quorum and never loses it.

use std::time::Duration;

use openraft::{Raft, ServerState};

use crate::TypeConfig;

/// How long a leader may hear from no quorum before it refuses writes: five times the
/// longest default election timeout, so that slow heartbeats on a loaded machine do
/// not trip it, and well within any request's deadline.
pub const QUORUM_LOST_AFTER: Duration = Duration::from_secs(1);

/// How often a waiting proposal looks at the clock once it has waited
/// [`QUORUM_LOST_AFTER`].
const RECHECK: Duration = Duration::from_millis(100);

/// Whether this server leads a cluster of several voters and has heard from no quorum
/// for [`QUORUM_LOST_AFTER`] or more.
pub(crate) fn lost(raft: &Raft<TypeConfig>) -> bool {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    m.state == ServerState::Leader
        && m.membership_config
            .membership()
            .voter_ids()
            .nth(1)
            .is_some()
        && m.millis_since_quorum_ack
            .is_some_and(|ms| u128::from(ms) >= QUORUM_LOST_AFTER.as_millis())
}

/// Resolves once [`lost`] holds (checked after [`QUORUM_LOST_AFTER`], then every
/// [`RECHECK`]); never while the leader hears from its quorum.
pub(crate) async fn loss(raft: &Raft<TypeConfig>) {
    tokio::time::sleep(QUORUM_LOST_AFTER).await;
    while !lost(raft) {
        tokio::time::sleep(RECHECK).await;
    }
}
