//! How a server runs ([`ServerOptions`]) and what a committed write answers
//! ([`Committed`]).

use openraft::{Config, SnapshotPolicy};

use crate::log_store::LogOptions;
use crate::observe::ApplyObserver;

/// A command that committed and was applied: its log index, which is also the write
/// index of the state it produced (for read-your-writes and blocking queries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Committed {
    /// The Raft log index of the entry.
    pub index: u64,
    /// Whether this answers a retry: the command's write key was kept from an earlier
    /// apply at `index`, and nothing was applied again.
    pub replayed: bool,
}

impl Committed {
    /// A command applied at `index` (not a replay).
    pub fn at(index: u64) -> Committed {
        Committed {
            index,
            replayed: false,
        }
    }
}

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// openraft's configuration (timeouts, snapshot policy, batch sizes).
    pub raft: Config,
    /// The log's segment size.
    pub log: LogOptions,
    /// Told of every applied entry and installed snapshot (event streams, metrics).
    pub on_apply: Option<ApplyObserver>,
    /// The largest snapshot received from a leader: the chunks are held in memory
    /// until the last one, and a transfer growing past this is refused.
    pub max_snapshot_bytes: u64,
    /// A snapshot once this many commands were applied since the last one (or a
    /// sixteenth of the state's rows, if more), besides `raft.snapshot_policy`'s count
    /// of entries: a restarted server re-applies everything after its newest
    /// snapshot, and one entry may carry hundreds of commands.
    pub snapshot_after_commands: u64,
    /// The newest store format this server reads: this build's
    /// ([`NEWEST_FORMAT`](crate::NEWEST_FORMAT)), or 2 to act as a server of the
    /// previous release would — it refuses what that release cannot decode and never
    /// raises the cluster's format (rolling-upgrade tests; `formats.rs`).
    pub max_format: u32,
}

impl Default for ServerOptions {
    /// Heartbeat every 40 ms, election timeout 100–200 ms. A follower that knew a
    /// leader waits the leader's lease (the maximum election timeout) *plus* its own
    /// election timeout before it asks to stand (PreVote, `elections.rs`, which keeps
    /// openraft 0.9's timing: its lease refuses votes until then), so a follower
    /// stands 300–400 ms after the last heartbeat: failover p50 ≤ 0.5 s and max
    /// ≤ 1 s, with room for a loaded machine to miss seven heartbeats before anyone
    /// stands; a leader that hears no quorum for its lease (200 ms) steps down (CheckQuorum). (At 200–400 ms the same rules gave 600–800 ms, 1.4–1.6 s at worst.) A
    /// snapshot every 10,000 entries, keeping 1,000 entries behind it for followers
    /// that lag a little. At most 64 entries per `AppendEntries`: a new leader knows
    /// no follower's log and openraft 0.9 finds where each matches by probing from
    /// the oldest entry it keeps, halving the distance to its last each round, every
    /// probe carrying up to this many entries the follower already has — at 512 the
    /// probes took 40–120 ms (up to 500) between an election and the first commit
    /// on five servers, at 64 they take 11–33 ms. A follower far behind catches up
    /// in more, smaller rounds (rejoin measured no slower). Snapshots received up to 4 GiB (a 200,000-node state is well
    /// under that); a snapshot chunk may take up to
    /// [`SNAPSHOT_INSTALL_DEADLINE`](crate::wire::SNAPSHOT_INSTALL_DEADLINE), since
    /// the last one is answered once the whole snapshot is checked and installed
    /// (openraft's 200 ms made a large snapshot time out and start over forever).
    /// Also a snapshot every 20,000 commands (`snapshot_after_commands`), so a
    /// restart re-applies at most about that many (0.2–0.5 s to open at 1,000 nodes,
    /// where 10,000 entries of 32 commands took 10 s).
    fn default() -> Self {
        ServerOptions {
            raft: Config {
                cluster_name: "schedstate".into(),
                heartbeat_interval: 40,
                election_timeout_min: 100,
                election_timeout_max: 200,
                max_payload_entries: 64,
                snapshot_policy: SnapshotPolicy::LogsSinceLast(10_000),
                max_in_snapshot_log_to_keep: 1_000,
                install_snapshot_timeout: crate::wire::SNAPSHOT_INSTALL_DEADLINE.as_millis() as u64,
                ..Config::default()
            },
            log: LogOptions::default(),
            on_apply: None,
            max_snapshot_bytes: 4 << 30,
            snapshot_after_commands: 20_000,
            max_format: crate::NEWEST_FORMAT,
        }
    }
}
