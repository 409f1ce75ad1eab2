//! schedstate: an embedded, transactional state store for cluster schedulers.
//!
//! It keeps a scheduler's state — nodes, allocations, CSI plugins and CSI volumes — in
//! memory as immutable versions. Every change is a [`state::Command`] applied at a log
//! index, all of it or none of it; readers take O(1) snapshots that never change and
//! never block the writer; a query can block until exactly the rows it read change.
//!
//! # Layers
//!
//! Each layer uses only the ones below it (see `ARCHITECTURE.md` for the flow of a
//! write and of a blocking read, and the invariants):
//!
//! - [`persist`] — beside `state`: the versioned, checksummed snapshot format, the
//!   write-ahead log of commands, and [`persist::DurableStore`], which recovers from
//!   them after a crash;
//! - [`state`] — the scheduler's rules: [`state::StateStore::apply`] (or `apply_owned`,
//!   which moves the command's rows into the store) is the only way the state changes; plugins are derived from node fingerprints and allocation writes;
//!   volumes are registered, claimed and released against them; [`state::StateView`]
//!   holds every read, denormalization and the invariant checker;
//! - [`model`] — plain serde data: [`model::Node`], [`model::CsiInfo`],
//!   [`model::Allocation`], [`model::CsiPlugin`], [`model::CsiVolume`], …;
//! - [`db`] — the generic MVCC engine, which knows nothing about CSI: tables and
//!   secondary indexes on persistent maps, snapshots, single-writer transactions,
//!   change sets, exact watches and blocking queries. A version no reader holds any
//!   more is freed on the writer's side, never on a reader's thread.
//!
//! # Example
//!
//! A client node reports a CSI plugin; the plugin appears, and a blocking query that
//! read it wakes when its health changes:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use schedstate::db::QueryOptions;
//! use schedstate::model::{CsiInfo, CsiNodeInfo, Node};
//! use schedstate::state::StateStore;
//!
//! fn node(healthy: bool) -> Node {
//!     let mut n = Node::new("node-1", "client-1");
//!     let info = CsiInfo {
//!         plugin_id: "ebs".into(),
//!         alloc_id: "alloc-1".into(),
//!         healthy,
//!         provider: "ebs.csi.aws.com".into(),
//!         provider_version: "1.25.0".into(),
//!         node_info: Some(CsiNodeInfo::default()),
//!         ..Default::default()
//!     };
//!     n.csi_node_plugins.insert("ebs".into(), Arc::new(info));
//!     n
//! }
//!
//! let store = StateStore::new();
//! store.upsert_node(1, node(true)).unwrap();
//!
//! let writer = store.clone();
//! let flip = std::thread::spawn(move || {
//!     std::thread::sleep(Duration::from_millis(20));
//!     writer.upsert_node(2, node(false)).unwrap();
//! });
//!
//! // Wait (at most 10 s) for the plugins table to move past index 1.
//! let answer = store.blocking_csi_plugin(QueryOptions::new(1, Duration::from_secs(10)), "ebs");
//! flip.join().unwrap();
//! let plugin = answer.value.unwrap();
//! assert_eq!(answer.index, 2);
//! assert_eq!((plugin.nodes_healthy(), plugin.nodes_expected()), (0, 1));
//! assert_eq!(plugin.provider, "ebs.csi.aws.com");
//! ```

#![warn(missing_docs)]

#[cfg(feature = "unstable-internals")]
pub use schedstate_engine as engine;
#[cfg(not(feature = "unstable-internals"))]
pub(crate) use schedstate_engine as engine;

pub mod model;
pub mod persist;
pub mod state;

pub use persist::{DurableStore, OpenReport, Options, PersistError, SyncPolicy};
pub use schedstate_engine::{
    ChangeKind, DEFAULT_WATCH_LIMIT, Error as EngineError, MAX_BLOCKING_WAIT, QueryOptions,
    QueryResult, WaitOutcome, WatchSet,
};
pub use state::{
    Command, Commit, CsiVolumeClaimRequest, InvariantViolation, Row, RowChange, StateError,
    StateReader, StateSnapshot, StateStore, StateView, Table,
};
