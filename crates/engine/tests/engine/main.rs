//! The engine's integration tests: a model test against `BTreeMap`s, watches and
//! blocking queries (no missed and no false wake-ups), and concurrency. One binary, so
//! that the suite links once.

mod blocking;
mod bulk;
mod concurrency;
mod delete_index;
mod insert_many;
mod model;
mod pmap;
mod pmap_check;

/// The map `pmap_check` compares (it names it through its parent, as the fuzz target
/// that includes it does).
use schedstate_engine::{KeyRef, PMap};
mod registry;
mod savepoint;
mod support;
mod watch;
