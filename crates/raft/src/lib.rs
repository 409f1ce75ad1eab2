//! Replication for schedstate: the state store as the state machine of
//! [openraft](https://docs.rs/openraft/0.9), so that three or five servers hold the same
//! state and survive the loss of one.
//!
//! The layers, bottom up:
//!
//! - [`LogStore`]: the Raft log on disk — openraft's log storage over the project's
//!   segment framing (`schedstate::persist::segment`): checksummed records, torn-tail
//!   repair, corruption refused with file and offset, fsync before an append is
//!   acknowledged, one fsync for many entries under load; replication reads it in
//!   batches of about 1 MiB. It is the server's only log.
//! - the state machine: committed entries applied to a [`StateStore`](schedstate::state::StateStore)
//!   at their log index (the log index *is* the write index); refused commands are
//!   committed no-ops that answer the proposer with the typed error; snapshots are the
//!   store's O(1) snapshot in its own format behind the Raft metadata; installing one
//!   is a checked restore that abandons every watch. A snapshot is built every
//!   10,000 entries or 20,000 commands, whichever first, so a restart re-applies
//!   little.
//! - [`Network`]: how a server reaches the others — the in-process [`Router`] (drop,
//!   delay, partition) for tests, or [`TcpNetwork`] with a [`TcpEndpoint`] serving the
//!   RPCs (length-prefixed postcard frames on pooled connections).
//! - [`inspect_dir`]: a server's data directory read without opening it — the newest
//!   snapshot, the log's range, the vote, the committed pointer and the state they
//!   restore to — read-only, safe while the server runs (`schedstate inspect`).
//! - [`Server`]: the handle — [`propose`](Server::propose),
//!   [`propose_or_forward`](Server::propose_or_forward), consistent and stale reads,
//!   blocking queries on every server, membership.
//! - [`WriteKeys`]: exactly-once writes — a write may carry a [`WriteKey`] inside its
//!   entry; every state machine keeps recent keys with their first outcome, so a
//!   retried write answers that outcome instead of applying twice.
//!
//! A three-server cluster in one process:
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use schedstate::model::Node;
//! use schedstate::state::Command;
//! use schedstate_raft::{Router, Server, ServerOptions};
//!
//! let dirs = tempfile::tempdir()?;
//! let router = Router::new();
//! let mut servers = Vec::new();
//! for id in 1..=3 {
//!     let dir = dirs.path().join(format!("s{id}"));
//!     let server = Server::open(id, &dir, ServerOptions::default(), router.network(id)).await?;
//!     router.add(server.clone());
//!     servers.push(server);
//! }
//! servers[0].initialize((1..=3).map(|id| (id, format!("server-{id}")))).await?;
//! for s in &servers {
//!     s.wait_for_leader(std::time::Duration::from_secs(30)).await?;
//! }
//!
//! // Any server takes the write: a follower forwards it to the leader.
//! let node = Node::new("node-1", "dc1");
//! let committed = servers[2]
//!     .propose_or_forward(Command::UpsertNodes { nodes: vec![node] })
//!     .await?;
//!
//! // Every server applies it; read-your-writes on a follower.
//! for s in &servers {
//!     s.wait_applied(committed.index, std::time::Duration::from_secs(10)).await?;
//!     assert!(s.read_stale().view().node("node-1").is_some());
//! }
//! for s in &servers {
//!     s.shutdown().await;
//! }
//! # Ok(())
//! # }
//! ```

// openraft's error types are large (hundreds of bytes); the signatures that return
// them are openraft's, so boxing them here would only add a conversion.
#![allow(clippy::result_large_err)]

mod batcher;
mod committed;
mod elections;
mod error;
mod formats;
mod forward;
pub mod inbound;
pub mod inspect;
mod log_format;
mod log_scan;
mod log_store;
mod membership;
mod network;
mod observe;
pub mod pre_vote;
mod quorum_probe;
mod read_barrier;
mod read_index;
mod restore;
mod router;
mod server;
mod snapshot_cadence;
mod snapshot_file;
pub mod snapshot_receiver;
mod state_machine;
mod tcp;
pub mod transfer;
pub mod wire;
mod write_keys;

use std::io::Cursor;
use std::sync::Arc;

use schedstate::state::Command;

pub use committed::RAFT_COMMITTED_MAGIC;
pub use elections::STEP_DOWN_VOTE;
pub use error::{ClusterError, OpenError, ProposeError};
pub use formats::{FORMAT_NOT_ENABLED, MemberFormat, NEWEST_FORMAT, OLDEST_CLUSTER_FORMAT};
pub use forward::FORWARD_DEADLINE;
pub use inspect::{ServerDirReport, inspect_dir};
pub use log_format::{
    RAFT_LOG_MAGIC, RAFT_LOG_VERSION, RAFT_META_MAGIC, RAFT_META_VERSION, is_server_dir,
};
pub use log_store::{LogOpenReport, LogOptions, LogStats, LogStore};
pub use membership::{CATCH_UP_DISTANCE, MEMBERSHIP_STEP_DEADLINE};
pub use network::{BoxFuture, Network, RpcFailure, RpcResult};
pub use observe::{ApplyEvent, ApplyObserver};
pub use read_index::{READ_INDEX_WAIT, ReadIndexError};
pub use restore::{MAX_RESTORE_BYTES, RESTORE_CHUNK_BYTES, RestoreError, Restored};
pub use router::{Router, RouterNetwork};
pub use server::{Committed, Server, ServerOptions};
pub use snapshot_file::{RAFT_SNAPSHOT_MAGIC, RAFT_SNAPSHOT_VERSION};
pub use state_machine::ApplyResponse;
pub use state_machine::SnapshotBuilt;
pub use tcp::{MAX_FRAME, TcpEndpoint, TcpNetwork};
pub use transfer::TRANSFER_DEADLINE;
pub use write_keys::{
    KeptOutcome, MAX_WRITE_KEYS, ProposalKeys, WRITE_KEY_TTL_MS, WriteKey, WriteKeys,
};

/// A server's id in the cluster.
pub type NodeId = u64;

/// What one log entry proposes: one command, or several batched by the leader's
/// proposer (one append, one fsync, one apply for all of them). `Arc`-shared, so
/// replication and apply never copy a command's rows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Proposal {
    /// The commands, applied in order at the entry's index.
    pub commands: Vec<Arc<Command>>,
    /// The commands' write keys, when any has one (exactly-once writes): a command
    /// whose key the state machine already kept is answered, not applied again.
    pub keys: Option<ProposalKeys>,
    /// Raises the cluster's format to this one (an entry of its own, with no
    /// commands): proposed by a leader once every server reads it
    /// ([`Server::cluster_format`]).
    pub raise_format: Option<u32>,
}

impl Proposal {
    /// A proposal of `commands` without write keys.
    pub fn new(commands: Vec<Arc<Command>>) -> Proposal {
        Proposal {
            commands,
            keys: None,
            raise_format: None,
        }
    }

    /// The entry that raises the cluster's format to `format`.
    pub fn raise_format(format: u32) -> Proposal {
        Proposal {
            commands: Vec::new(),
            keys: None,
            raise_format: Some(format),
        }
    }

    /// The key of command `i`, if it has one.
    pub fn key(&self, i: usize) -> Option<&WriteKey> {
        self.keys.as_ref()?.keys.get(i)?.as_ref()
    }
}

openraft::declare_raft_types!(
    /// The types openraft is instantiated with.
    pub TypeConfig:
        D = Proposal,
        R = ApplyResponse,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;

#[cfg(test)]
mod tests;
