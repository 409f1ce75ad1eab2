//! When a server builds its next snapshot, counted in commands applied rather than in
//! log entries.
//!
//! A restarted server re-applies every committed entry after its newest snapshot
//! before it has caught up. openraft's own policy counts entries, but under load one
//! entry carries many commands (32 at 64 clients, see `batcher.rs`), so 10,000
//! entries were 320,000 commands to re-apply: a server restarted after a few seconds
//! of 64 writers took 10–11 s to rejoin (`raft_workload -clients 64 -failovers`).
//! The state machine counts the commands it applies (an entry without commands
//! counts one) and asks for a snapshot once they
//! reach [`ServerOptions::snapshot_after_commands`](crate::ServerOptions), or a
//! sixteenth of the state's rows if that is more: re-applying commands costs about as
//! much per command as restoring a snapshot costs per sixteen rows, so a large state
//! is not snapshotted over and over for a replay that restoring it would outweigh
//! anyway. openraft's entry-count policy stays as it was, whichever comes first.

use schedstate::state::{StateStore, Table};
use tokio::sync::mpsc;

/// Rows of state per command of replay worth a snapshot (see the module docs).
const ROWS_PER_COMMAND: u64 = 16;
/// How many commands apart the (O(1) per table) row count is read once the minimum
/// is passed.
const RECHECK_EVERY: u64 = 1_024;

/// The state machine's count of commands since its last snapshot.
pub(crate) struct SnapshotCadence {
    min_commands: u64,
    since: u64,
    /// The count at which to look again whether a snapshot is due: the minimum, then
    /// every [`RECHECK_EVERY`] commands; `u64::MAX` once asked, until one is built.
    next_look: u64,
    /// The server's task that hands the request to Raft.
    due: mpsc::UnboundedSender<()>,
}

impl SnapshotCadence {
    /// A count starting at zero (the state just restored from the newest snapshot, or
    /// empty); `due` receives one message per snapshot asked for.
    pub(crate) fn new(min_commands: u64, due: mpsc::UnboundedSender<()>) -> SnapshotCadence {
        let min_commands = min_commands.max(1);
        SnapshotCadence {
            min_commands,
            since: 0,
            next_look: min_commands,
            due,
        }
    }

    /// Counts an applied entry of `commands` commands.
    pub(crate) fn applied(&mut self, commands: usize, store: &StateStore) {
        self.since = self
            .since
            .saturating_add(u64::try_from(commands).unwrap_or(u64::MAX).max(1));
        if self.since < self.next_look {
            return;
        }
        if self.since >= self.threshold(store) {
            self.next_look = u64::MAX;
            // A closed channel means the server is stopping: nothing to ask.
            let _ = self.due.send(());
        } else {
            self.next_look = self.since.saturating_add(RECHECK_EVERY);
        }
    }

    /// Asks for a snapshot now, whatever the count: after a restore replaced the
    /// state, so that a restart restores it instead of re-applying its pieces, and
    /// the entries that carried them can be purged from the log.
    pub(crate) fn ask_now(&mut self) {
        if self.next_look != u64::MAX {
            self.next_look = u64::MAX;
            let _ = self.due.send(());
        }
    }

    /// A snapshot now covers everything applied (built, or installed from a leader).
    pub(crate) fn covered(&mut self) {
        self.since = 0;
        self.next_look = self.min_commands;
    }

    /// Commands since the last snapshot worth the next one for the state in `store`.
    fn threshold(&self, store: &StateStore) -> u64 {
        let snapshot = store.snapshot();
        let view = snapshot.view();
        let rows: u64 = Table::ALL
            .into_iter()
            .map(|t| u64::try_from(view.row_count(t)).unwrap_or(u64::MAX))
            .fold(0, u64::saturating_add);
        self.min_commands.max(rows / ROWS_PER_COMMAND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_once_per_snapshot_after_the_minimum_of_commands() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let store = StateStore::new();
        let mut cadence = SnapshotCadence::new(100, tx);
        for _ in 0..3 {
            cadence.applied(32, &store);
        }
        assert!(rx.try_recv().is_err(), "96 commands: not yet");
        cadence.applied(32, &store);
        assert!(rx.try_recv().is_ok(), "128 commands: asked");
        cadence.applied(500, &store);
        assert!(rx.try_recv().is_err(), "asked once until one is built");
        cadence.covered();
        cadence.applied(0, &store);
        assert!(
            rx.try_recv().is_err(),
            "an entry without commands counts one"
        );
        cadence.applied(99, &store);
        assert!(rx.try_recv().is_ok(), "asked again after the next 100");
    }
}
