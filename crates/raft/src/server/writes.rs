//! The writes: a command proposed on the leader (batched into log entries), exactly
//! once under a write key, or forwarded to the leader from any server.

use schedstate::state::Command;

use super::{Committed, Server};
use crate::error::ProposeError;
use crate::write_keys::{KeptOutcome, KeyCheck, WriteKey, kept_answer};

impl Server {
    /// Proposes `command`: returns once it is committed by a quorum and applied here
    /// (the leader), with its index. Proposals made while earlier ones are in flight
    /// share a log entry (and its index): one append and one fsync for all of them.
    ///
    /// # Errors
    /// [`ProposeError::Invalid`] when it breaks an input rule (nothing proposed);
    /// [`ProposeError::Refused`] with the typed [`StateError`](schedstate::state::StateError)
    /// when the rules refuse it on the state (it is still a committed, no-op entry);
    /// [`ProposeError::NotLeader`] naming the leader; [`ProposeError::Invalid`] of
    /// kind [`FORMAT_NOT_ENABLED`](crate::FORMAT_NOT_ENABLED) when it needs a store
    /// format some server does not read yet (a rolling upgrade under way); see
    /// [`ProposeError`] for when the outcome is unknown.
    pub async fn propose(&self, command: Command) -> Result<Committed, ProposeError> {
        self.propose_keyed(command, None).await
    }

    /// As [`propose`](Self::propose), exactly once per `key`: a key this server's state
    /// machine already kept (it is applied here) is answered at once with the first
    /// apply's outcome ([`Committed::replayed`], or the refusal at its index), another
    /// request under the same key with [`ProposeError::KeyReused`]; a new key goes into
    /// the entry beside the command, so two retries in flight still apply once.
    ///
    /// # Errors
    /// As [`propose`](Self::propose), and [`ProposeError::KeyReused`].
    pub async fn propose_keyed(
        &self,
        command: Command,
        key: Option<WriteKey>,
    ) -> Result<Committed, ProposeError> {
        // The input rules need no state: a command that breaks one costs no log entry.
        command
            .check_input()
            .map_err(|e| ProposeError::invalid(&e))?;
        if let Some(answer) = self.known_outcome(key.as_ref()) {
            return answer;
        }
        // What every server reads: a rolling upgrade may not be over (`formats.rs`).
        let command = self.fit_to_cluster(command).await?;
        self.inner.batcher.propose(command, key).await
    }

    /// The answer for a write whose key this server's state machine already kept
    /// (applied here, so final): its first outcome, or the refusal of a reused key.
    fn known_outcome(&self, key: Option<&WriteKey>) -> Option<Result<Committed, ProposeError>> {
        let check = self.inner.keys.lock().check(key?);
        match check {
            KeyCheck::Fresh => None,
            KeyCheck::Replay(kept) => Some(kept_answer(kept.index, kept.refusal)),
            KeyCheck::Reused { index } => Some(Err(ProposeError::KeyReused { index })),
        }
    }

    /// How many write keys this server's state machine keeps.
    pub fn write_keys_kept(&self) -> usize {
        self.inner.keys.lock().len()
    }

    /// The outcome kept for the write key `id` on this server, if it holds one.
    pub fn kept_write(&self, id: &[u8; 32]) -> Option<KeptOutcome> {
        self.inner.keys.lock().get(id).cloned()
    }

    /// Proposes `command` here, or, when this server is not the leader, forwards it to
    /// the leader it knows of over the network. A forwarded proposal is abandoned as
    /// soon as this server sees the leadership move, answered
    /// [`ProposeError::Unavailable`] (outcome unknown) rather than waiting on a
    /// paused or lost leader; see [`propose_or_forward_keyed`](Self::propose_or_forward_keyed)
    /// for one that is sent again instead.
    ///
    /// # Errors
    /// As [`propose`](Self::propose); a refusal forwarded over a network that carries
    /// only kind and message is [`ProposeError::RefusedRemotely`].
    pub async fn propose_or_forward(&self, command: Command) -> Result<Committed, ProposeError> {
        self.propose_or_forward_keyed(command, None).await
    }

    /// [`propose_keyed`](Self::propose_keyed) here, or forwarded with its key to the
    /// leader — and, with a key, sent again to the new leader when the one it was
    /// forwarded to stops answering or leading, for up to
    /// [`FORWARD_DEADLINE`](crate::FORWARD_DEADLINE): the key makes the retry safe.
    ///
    /// # Errors
    /// As [`propose_or_forward`](Self::propose_or_forward), and
    /// [`ProposeError::KeyReused`].
    pub async fn propose_or_forward_keyed(
        &self,
        command: Command,
        key: Option<WriteKey>,
    ) -> Result<Committed, ProposeError> {
        command
            .check_input()
            .map_err(|e| ProposeError::invalid(&e))?;
        // A retry of a write this server already applied needs no leader.
        if let Some(answer) = self.known_outcome(key.as_ref()) {
            return answer;
        }
        crate::forward::propose_or_forward(self, command, key).await
    }
}
