//! The logic of the fuzz targets, as a library so that the targets stay one line each.
//! The same files are compiled into `tests/store/fuzz_regressions.rs` (with `#[path]`), so a
//! committed input means the same thing under libFuzzer and under `cargo test`.

pub mod harness;
