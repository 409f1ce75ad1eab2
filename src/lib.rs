//! schedstate: an embedded, transactional state store for cluster schedulers.
//!
//! It keeps a scheduler's state — nodes, allocations, jobs, CSI plugins and CSI volumes
//! — in memory as immutable versions. Every change is a [`Command`] applied at a log index,
//! all of it or none of it; readers take O(1) snapshots that never change and never
//! block the writer; a query can block until exactly the rows it read change. The
//! rules every write follows are in `docs/rules.md`.
//!
//! # The door
//!
//! Each store kind has one way in, the same for both: [`apply`](StateStore::apply)
//! (or `apply_owned`, which moves the command's rows into the store) and one typed
//! method per command (`upsert_node`, `delete_nodes`, `upsert_allocs`,
//! `register_csi_volumes`, `claim_csi_volume`, …).
//!
//! - [`StateStore`]: in memory (tests, or a replica whose log lives elsewhere);
//! - [`DurableStore`]: the same state in a data directory — each accepted command is
//!   logged (and, by default, fsynced) before anyone can see it; recovery replays the
//!   log over the newest snapshot.
//!
//! Reads go through a [`StateSnapshot`] (`snapshot().view()`: every read of
//! [`StateView`]) or a [`StateReader`] (`reader()`), which also runs blocking queries
//! and can be handed to code that must not write.
//!
//! # Layers
//!
//! Each uses only those below it (`ARCHITECTURE.md` has the flow of a write and of a
//! blocking read, and the invariants):
//!
//! - [`persist`] — beside `state`: the snapshot format, the write-ahead log and
//!   [`DurableStore`]; offline operations on a whole data directory;
//! - [`state`] — the scheduler's rules: commands, plugin derivation from fingerprints,
//!   volume claims, reads, denormalization, blocking queries, the invariant checker;
//! - [`model`] — plain serde data: [`model::Node`], [`model::CsiInfo`],
//!   [`model::Allocation`], [`model::CsiPlugin`], [`model::CsiVolume`], …;
//! - the engine, crate `schedstate-engine` — generic tables and secondary indexes on
//!   persistent maps, snapshots, single-writer transactions, change sets, exact
//!   watches; it knows nothing about CSI. The store re-exports the few engine types
//!   its API uses ([`QueryOptions`], [`QueryResult`], [`WatchSet`], …).
//!
//! # Example
//!
//! A job asks for three node instances of a CSI plugin; one client node reports one;
//! a blocking query on the plugin wakes when its health changes, and shows how many
//! instances are healthy against how many the job expects:
//!
//! ```
//! use std::time::Duration;
//! use schedstate::model::{CsiInfo, CsiNodeInfo, CsiPluginType, Job, Node, Task, TaskCsiPlugin, TaskGroup};
//! use schedstate::{QueryOptions, StateStore, Table};
//!
//! let job = Job {
//!     task_groups: vec![TaskGroup {
//!         name: "nodes".into(),
//!         count: 3,
//!         tasks: vec![Task {
//!             name: "plugin".into(),
//!             csi_plugin: Some(TaskCsiPlugin { id: "ebs".into(), plugin_type: CsiPluginType::Node }),
//!         }],
//!     }],
//!     ..Job::new("default", "ebs-nodes")
//! };
//!
//! fn node(healthy: bool) -> Node {
//!     let mut n = Node::new("node-1", "client-1");
//!     n.add_csi_plugin(
//!         CsiInfo::node_instance("ebs", "alloc-1", CsiNodeInfo::default())
//!             .with_provider("ebs.csi.aws.com", "1.25.0")
//!             .with_health(healthy, if healthy { "ok" } else { "probe failed" }),
//!     );
//!     n
//! }
//!
//! let store = StateStore::new();
//! store.upsert_jobs(1, vec![job]).unwrap();
//! store.upsert_node(2, node(true)).unwrap();
//! assert_eq!(store.snapshot().view().table_index(Table::CsiPlugins), 2);
//!
//! let writer = store.clone();
//! let flip = std::thread::spawn(move || {
//!     std::thread::sleep(Duration::from_millis(20));
//!     writer.upsert_node(3, node(false)).unwrap();
//! });
//!
//! // Wait (at most 10 s) for the plugin to change past index 2.
//! let opts = QueryOptions::new(2, Duration::from_secs(10));
//! let answer = store.reader().blocking_csi_plugin_denormalized(opts, "ebs");
//! flip.join().unwrap();
//! assert!(!answer.timed_out);
//! assert_eq!(answer.index, 3);
//! let plugin = answer.value.unwrap();
//! assert_eq!((plugin.nodes_healthy(), plugin.nodes_expected()), (0, 3));
//! assert_eq!(plugin.provider, "ebs.csi.aws.com");
//! ```
//!
//! # Features
//!
//! `unstable-internals` exposes the engine under the store (`schedstate::engine`, raw
//! views, table handles, the publish hook) for this repository's benchmarks, tests and
//! fuzz targets. It is not covered by semantic versioning, and writes through it skip
//! the rules and the log.

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
    ChangeKind, Changed, DEFAULT_WATCH_LIMIT, Error as EngineError, MAX_BLOCKING_WAIT,
    QueryOptions, QueryResult, Rows, WaitOutcome, WatchSet,
};
pub use state::{
    Command, Commit, CsiVolumeClaimRequest, InvariantViolation, Row, RowChange, StateError,
    StateReader, StateSnapshot, StateStore, StateView, Table,
};
