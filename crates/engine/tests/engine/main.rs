//! The engine's integration tests: a model test against `BTreeMap`s, watches and
//! blocking queries (no missed and no false wake-ups), and concurrency. One binary, so
//! that the suite links once.

mod blocking;
mod concurrency;
mod model;
mod pmap;
mod registry;
mod savepoint;
mod support;
mod watch;
