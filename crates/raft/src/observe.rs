//! [`ApplyObserver`]: a callback told of every entry a server's state machine applies,
//! for what sits beside a server (an event stream, metrics, logs) without reaching
//! into the apply path.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use schedstate::state::{Command, Commit, StateError};

/// What a server's state machine just did.
#[derive(Debug)]
pub enum ApplyEvent<'a> {
    /// The server opened its state: restored from its newest snapshot at `index` (0
    /// when it had none). Entries after it are applied (and told) as Raft replays them.
    Opened {
        /// The last log index the restored state holds.
        index: u64,
    },
    /// A proposal's entry was applied at `index`.
    Applied {
        /// The entry's log index (the write index of its rows).
        index: u64,
        /// The rows the accepted commands changed, if they changed any.
        commit: Option<&'a Commit>,
        /// The entry's commands, in order.
        commands: &'a [Arc<Command>],
        /// Per command: `None` if accepted, the rule that refused it otherwise.
        refused: &'a [Option<StateError>],
        /// How long applying the entry took.
        took: Duration,
    },
    /// A snapshot from the leader replaced the whole state at `index`: the changes up
    /// to it are not known one by one.
    SnapshotInstalled {
        /// The last log index the snapshot holds.
        index: u64,
    },
}

/// A callback run on the apply path for every [`ApplyEvent`], in log order. It must be
/// quick (it delays the next entry's apply); queue anything slow.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use schedstate_raft::{ApplyEvent, ApplyObserver, ServerOptions};
///
/// let applied = Arc::new(AtomicU64::new(0));
/// let seen = applied.clone();
/// let options = ServerOptions {
///     on_apply: Some(ApplyObserver::new(move |event| {
///         if let ApplyEvent::Applied { index, .. } = event {
///             seen.store(*index, Ordering::Relaxed);
///         }
///     })),
///     ..ServerOptions::default()
/// };
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct ApplyObserver(Arc<dyn Fn(&ApplyEvent<'_>) + Send + Sync>);

impl ApplyObserver {
    /// An observer running `f`.
    pub fn new(f: impl Fn(&ApplyEvent<'_>) + Send + Sync + 'static) -> Self {
        ApplyObserver(Arc::new(f))
    }

    pub(crate) fn tell(&self, event: &ApplyEvent<'_>) {
        (self.0)(event);
    }
}

impl fmt::Debug for ApplyObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApplyObserver(..)")
    }
}
