//! Several commands as one write: one transaction at one log index, each command
//! kept or undone on its own. A replicated store puts many proposals in one log entry
//! this way (one append, one fsync, one apply for the lot); the entry's index is the
//! write index of every command in it.

use super::command::Command;
use super::commit::Commit;
use super::error::{Result, StateError};
use super::store::{StateStore, apply_by_ref};
use super::writer::Writer;

/// What applying a batch did.
#[derive(Debug)]
pub struct BatchOutcome {
    /// The write, if any command in the batch changed the state.
    pub commit: Option<Commit>,
    /// Per command, in order: accepted, or the rule that refused it (its writes undone).
    pub results: Vec<std::result::Result<(), StateError>>,
}

impl StateStore {
    /// Applies `commands` in order at log index `index`, in one transaction. Each
    /// command is all-or-nothing on its own: one the rules refuse is undone (a
    /// savepoint of the transaction) and its error returned in its place, and the
    /// commands after it see the state without it. The accepted ones commit together;
    /// if none is accepted nothing is written and the index does not move.
    ///
    /// ```
    /// use schedstate::model::{Node, NodeStatus};
    /// use schedstate::state::{Command, StateStore};
    ///
    /// let store = StateStore::new();
    /// let outcome = store
    ///     .apply_batch(7, [
    ///         &Command::UpsertNode { node: Node::new("n1", "a") },
    ///         &Command::UpdateNodeStatus { id: "ghost".into(), status: NodeStatus::Down },
    ///         &Command::UpsertNode { node: Node::new("n2", "b") },
    ///     ])
    ///     .unwrap();
    /// assert!(outcome.results[0].is_ok() && outcome.results[2].is_ok());
    /// assert_eq!(outcome.results[1].as_ref().unwrap_err().kind(), "NodeNotFound");
    /// let snap = store.snapshot();
    /// assert_eq!(snap.view().node("n2").unwrap().modify_index, 7);
    /// ```
    ///
    /// # Errors
    /// [`StateError::StaleIndex`] if `index` is not after the last applied index
    /// (nothing applied).
    pub fn apply_batch<'c>(
        &self,
        index: u64,
        commands: impl IntoIterator<Item = &'c Command>,
    ) -> Result<BatchOutcome> {
        let mut txn = self.db().begin_write(index).map_err(StateError::from)?;
        let span = tracing::debug_span!("apply_batch", index, commands = tracing::field::Empty);
        let _enter = span.enter();
        let mut results = Vec::new();
        let mut accepted = false;
        for command in commands {
            let mark = txn.savepoint();
            let mut w = Writer::new(txn, self.tables());
            let applied = command
                .check_input()
                .and_then(|()| apply_by_ref(&mut w, command));
            txn = w.into_txn();
            match applied {
                Ok(()) => {
                    accepted = true;
                    results.push(Ok(()));
                }
                Err(e) => {
                    tracing::debug!(error = %e, kind = command.kind(), "rejected in batch");
                    txn.rollback_to(mark);
                    results.push(Err(e));
                }
            }
        }
        span.record("commands", results.len());
        let commit = if accepted {
            Some(Commit::new(txn.commit().map_err(StateError::from)?))
        } else {
            None
        };
        Ok(BatchOutcome { commit, results })
    }
}
