//! schedstate: an embedded, transactional state store for cluster schedulers.
//!
//! See `ARCHITECTURE.md` for the layers; in short:
//! - [`db`]: the generic MVCC engine (tables, snapshots, transactions, watches);
//! - [`model`]: the plain data types of the scheduler's state;
//! - [`state`]: the CSI rules as commands, queries and blocking queries;
//! - [`persist`]: snapshots, the write-ahead log and the durable store, beside `state`.

#![warn(missing_docs)]

pub mod db;
pub mod model;
pub mod persist;
pub mod state;
