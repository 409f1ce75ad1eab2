//! The generic MVCC engine: tables on persistent maps, O(1) snapshots, single-writer
//! transactions, change sets and exact watches. It knows nothing about CSI.
//!
//! - [`Schema`] declares tables (row type + primary key function) and secondary
//!   indexes (unique or not, one or many keys per row, computed from the row).
//! - [`Db`] holds the published version. [`Db::snapshot`] counts one `Arc` (a thread
//!   remembers the version it read last, `last_seen.rs`);
//!   [`Db::begin_write`] starts the one write transaction, [`WriteTxn::commit`]
//!   publishes it whole, dropping it aborts.
//! - [`View`] reads one version: exact gets, prefix and range scans, full iteration, in
//!   [`Key`] order; through [`Snapshot::watched`] it records what it read into a
//!   [`WatchSet`], which can then wait (sync or async) until exactly that changes.
//! - [`Db::blocking_query`] is the loop of a blocking query built on those.

mod blocking;
mod bulk;
mod database;
mod error;
mod intervals;
mod key;
mod key_order;
mod last_seen;
mod pmap;
mod prefetch;
mod reclaim;
mod registry;
mod root;
mod schema;
mod staged;
mod txn;
mod view;
mod waiters;
mod watch;

pub use blocking::{MAX_BLOCKING_WAIT, QueryOptions, QueryResult};
pub use bulk::BulkLoad;
pub use database::{Db, Snapshot, WritePause};
pub use error::{Error, IndexInconsistency, Result};
pub use key::{Key, KeyBuilder};
pub use key_order::sorted_order;
pub use pmap::{Iter as PMapIter, KeyRef, PMap};
pub use prefetch::prefetch;
pub use schema::{Index, Schema, Table};
pub use txn::{Change, ChangeKind, CommitInfo, Savepoint, WriteTxn};
pub use view::{Rows, View};
pub use watch::{Changed, DEFAULT_WATCH_LIMIT, WaitOutcome, WatchSet};
