//! What the tests of several crates of this workspace share, in one copy instead of
//! one per test binary.
//!
//! Dev-only: crates take it under `[dev-dependencies]`, and it is never published.
//! It depends on nothing, the workspace's own crates included, so that any of them —
//! from the engine at the bottom of the layers to the CLI at the top — can use it
//! without a cycle or an exception to "arrows point down only" (ARCHITECTURE.md).
//! A helper that needs a crate of the workspace stays in that crate's tests instead
//! (the engine's `PMap`-against-model check, `crates/engine/tests/engine/pmap_check.rs`),
//! and one a library of the workspace already provides is called there (ports for
//! agents: `schedstate_agent::free_loopback_ports`).

pub mod segment;
