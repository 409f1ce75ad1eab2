//! schedstate: an embedded, transactional state store for cluster schedulers.
//!
//! See `ARCHITECTURE.md` for the layers; in short:
//! - [`db`]: the generic MVCC engine (tables, snapshots, transactions, watches);
//! - [`model`]: the plain data types of the scheduler's state.

#![warn(missing_docs)]

pub mod db;
pub mod model;
