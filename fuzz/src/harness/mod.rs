//! The fuzz targets' logic, independent of libFuzzer: each `run` takes the raw input
//! bytes and panics when a property breaks.
//!
//! Compiled into the `schedstate_fuzz` library (behind the libFuzzer targets and their
//! plain replay binaries) and into `tests/store/fuzz_regressions.rs` (with `#[path]`), so a
//! committed seed means the same thing everywhere.

pub mod commands;
pub mod generate;
pub mod input;
pub mod persist;
pub mod txn;
