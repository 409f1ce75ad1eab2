//! CheckQuorum's second opinion: whether the followers still follow a leader whose
//! Raft answers have stopped coming.
//!
//! A leader counts a follower as answering when openraft has an answer to its
//! AppendEntries (`millis_since_quorum_ack`). A follower's openraft answers a
//! heartbeat only after the append ahead of it is durable, so a slow disk holds
//! every answer back: fsyncs of 150–305 ms were seen on the test machine while the
//! nemesis suite ran, longer than the lease after which a leader steps down
//! (`elections.rs`), and healthy leaders stepped down, each costing the cluster an
//! election.
//!
//! So once Raft's answers are half a lease old, the leader asks the voters directly,
//! with the side-effect-free [`PreVoteRequest`]: a follower that has heard from this
//! leader within the lease answers [`PreVoteAnswer::LeaderAlive`] naming it, from the
//! RPC handler, without waiting for its disk. A majority of such answers counts as
//! answers to a heartbeat sent when the probe was. A leader whose followers cannot
//! answer at all (its inbound packets lost) hears neither, and steps down after the
//! same lease as before.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::NodeId;
use crate::network::ErasedNetwork;
use crate::pre_vote::{PreVoteAnswer, PreVoteRequest, ask_voters_counting};

/// A leader's probes of its followers: at most one at a time.
#[derive(Default)]
pub(crate) struct QuorumProbe {
    /// The term, and when it was sent, of the newest probe a majority answered.
    confirmed: Arc<Mutex<Option<(u64, Instant)>>>,
    /// Whether a probe is out.
    running: Arc<AtomicBool>,
    /// When the last probe was sent.
    last_sent: Option<Instant>,
}

impl QuorumProbe {
    /// How long ago a probe a majority answered was sent, by the leader of `term`.
    pub(crate) fn confirmed_ago(&self, term: u64) -> Option<Duration> {
        match *self.confirmed.lock() {
            Some((t, sent)) if t == term => Some(sent.elapsed()),
            _ => None,
        }
    }

    /// Sends a probe for leader `request.candidate` of term `request.term - 1`,
    /// unless one is out or the last was sent within `every`; it waits `within` for
    /// the answers.
    pub(crate) fn send(
        &mut self,
        network: &Arc<dyn ErasedNetwork>,
        configs: Vec<BTreeSet<NodeId>>,
        addresses: Vec<(NodeId, String)>,
        request: PreVoteRequest,
        every: Duration,
        within: Duration,
    ) {
        if self.running.load(Ordering::Acquire)
            || self.last_sent.is_some_and(|s| s.elapsed() < every)
        {
            return;
        }
        let sent = Instant::now();
        self.last_sent = Some(sent);
        self.running.store(true, Ordering::Release);
        let (network, confirmed, running) = (
            network.clone(),
            self.confirmed.clone(),
            self.running.clone(),
        );
        tokio::spawn(async move {
            let leader = request.candidate;
            let term = request.term.saturating_sub(1);
            let followed = ask_voters_counting(
                &network,
                leader,
                &configs,
                &addresses,
                request,
                within,
                |answer| matches!(answer, PreVoteAnswer::LeaderAlive { leader: l, .. } if *l == leader),
            )
            .await;
            if followed {
                let mut c = confirmed.lock();
                if c.is_none_or(|(t, at)| (t, at) < (term, sent)) {
                    *c = Some((term, sent));
                }
            }
            running.store(false, Ordering::Release);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmation_counts_for_its_own_term_only() {
        let probe = QuorumProbe::default();
        assert_eq!(probe.confirmed_ago(3), None);
        *probe.confirmed.lock() = Some((3, Instant::now()));
        assert!(
            probe
                .confirmed_ago(3)
                .is_some_and(|d| d < Duration::from_secs(1))
        );
        assert_eq!(probe.confirmed_ago(4), None);
    }
}
