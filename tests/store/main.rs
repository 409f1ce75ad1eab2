//! The store's integration tests: the rules of every write and read
//! (`state_*`), durability (`persist_*`), and the regressions fuzzing found. One
//! binary, so that the suite links once (most of a test run's time on two cores).
//!
//! Helpers are in [`support`]. `PROPTEST_CASES` raises the case counts of the
//! model tests.
//!
//! The crash test is the one exception (`tests/crash`): it runs its own binary again as
//! a child to kill, and a child forked from a process whose other threads hold data
//! directory locks shares those locks until it execs — a reopen in a test running
//! beside it would see the directory as locked.

mod fuzz_regressions;
mod persist_corruption;
mod persist_faults;
mod persist_golden;
mod persist_golden_v2;
mod persist_golden_v2_acl;
mod persist_golden_v3;
mod persist_group;
mod persist_modes;
mod persist_prealloc;
mod persist_repair;
mod persist_roundtrip;
mod persist_span;
mod state_acl;
mod state_acl_salt;
mod state_answer_index;
mod state_batch;
mod state_blocking;
mod state_claims;
mod state_input;
mod state_job_definitions;
mod state_jobs;
mod state_model;
mod state_nodes_allocs;
mod state_plugins;
mod state_volume_provider;
mod state_volumes;
mod support;
