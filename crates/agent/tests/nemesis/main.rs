//! The partition nemesis (issue 26, item 4): clusters of in-process agents whose
//! servers reach each other only through a fault proxy the test controls, clients
//! writing and reading registers through random agents while links are cut, dropped,
//! delayed and healed, and, after each run, the checks: every acknowledged write on
//! every server, the servers identical, the history linearizable, and a partitioned
//! minority answering a clear "no leader"/"unavailable" within its bound, never a
//! stale success.
//!
//! `SCHEDSTATE_NEMESIS_SECONDS=60 cargo test -p schedstate-agent --test nemesis` runs
//! each scenario longer (CI: 6 s each); `SCHEDSTATE_NEMESIS_SEED=…` replays a run's
//! fault schedule and client choices (the timing is the machine's).

mod checker;
mod cluster;
mod deposed;
mod follower_reads;
mod handover;
mod partition_kinds;
mod proxied;
mod proxy;
mod run;
mod scenarios;
mod workload;
