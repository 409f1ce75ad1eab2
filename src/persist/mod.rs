//! Durability beside the state: the snapshot format, the write-ahead log of commands,
//! and the durable store that recovers from them.
//!
//! - [`snapshot`](self::SnapshotHeader): the versioned, checksummed image of a whole
//!   state; also [`StateStore::snapshot_to`](crate::state::StateStore::snapshot_to) /
//!   [`restore_from`](crate::state::StateStore::restore_from) for any stream.
//! - the log: one checksummed record per accepted [`Command`](crate::state::Command),
//!   written before the command is visible.
//! - [`DurableStore`]: open a data directory (snapshot + replay, torn-tail repair,
//!   exclusive lock), apply commands durably, compact.
//! - the data directory's files by name ([`list_files`], [`FileKind`]) and the offline
//!   operations on a whole directory ([`save_snapshot`], [`restore_data_dir`],
//!   [`remove_data_dir`], and [`repair_data_dir`] for one that no longer opens).
//! - [`segment`]: the framing of every log's segment files (header, checksummed
//!   records, torn-tail and corruption rules), shared with the replication crate's
//!   Raft log.
//! - [`faults`]: the fault-injection seam every file operation goes through (feature
//!   `fault-injection`; a no-op otherwise).

mod batch;
mod data_dir;
mod durable;
mod error;
pub mod faults;
mod fs;
mod lock;
mod recover;
mod repair;
pub mod segment;
mod server_dir;
mod snapshot;
mod wal;

pub use data_dir::{
    DirFile, FileKind, RestoreReport, list_files, load_snapshot_file, remove_data_dir,
    restore_data_dir, save_snapshot,
};
pub use durable::{DurableStore, OpenReport, Options, SyncPolicy, TornTail};
pub use error::{PersistError, Result};
pub use fs::{DIR_MODE, FILE_MODE, make_owner_only, owner_only};
pub use lock::DirLock;
pub use repair::{Dropped, RepairReport, repair_data_dir};
pub use server_dir::{
    SERVER_META_FILE, is_server_dir, parse_server_segment_name, server_meta_path,
    server_segment_name,
};
pub use snapshot::{
    OLDEST_SNAPSHOT_VERSION, SNAPSHOT_MAGIC, SNAPSHOT_VERSION, SnapshotHeader, TableHeader,
};
pub use wal::{WAL_MAGIC, WAL_VERSION};
