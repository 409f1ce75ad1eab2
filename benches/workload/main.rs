//! The go-memdb peer workload (`../shared/peers/go-memdb`, RESULTS.md §4), ported to
//! schedstate's public API: same flags, same SplitMix64 data, the identical
//! `# dataset …` check line, and one `name ns_per_op=… ops=… key=value …` line per
//! workload in the peer's order (plus `-json PATH`).
//!
//! ```sh
//! cargo bench --bench workload                      # the peer's defaults (10,000 nodes)
//! cargo bench --bench workload -- -nodes 2000 -json /tmp/rs.json
//! cargo bench --bench workload -- -dataset-check    # only the dataset line
//! scripts/compare-peer.sh                           # both peers, side by side
//! cargo bench --bench workload -- -phase waiters -waiters 0,1000,10000,50000
//! ```
//!
//! `-phase waiters` runs only the port of the peer's waiters probe
//! (`../shared/peers/go-memdb/waiters/`): commit cost with N parked blocking queries
//! (`waiters.rs`).
//!
//! Where the port differs from the Go program, and why (each also printed as a
//! `# note` line next to its result):
//! - `bulk_load_raw` inserts node and alloc rows at the engine level
//!   (`StateStore::db().begin_write`, `tables().nodes` / `allocs`), 1,000 nodes per
//!   transaction as the peer: commands always derive plugins, and the peer's raw load
//!   is exactly "the same inserts without derivation".
//! - `bulk_load` goes through commands: per batch of `-batch` nodes one `upsert_allocs`
//!   (the batch's allocs) and one `upsert_nodes` (plugin derivation per node, each
//!   plugin written once per batch), each its own transaction, so the peer's 10 ×
//!   1,000-node transactions are 2 × 10 commands here; `commit_ms_total` is the time
//!   from the `apply_owned_with` hook (run just before publishing) to the return of every
//!   command.
//! - Writes the peer makes to a plugin row alone (`blocking_wake`, `watch_granularity`)
//!   have no command (plugins are derived from node fingerprints): they are engine
//!   transactions that read the plugin, store a copy with a new `modify_index` and
//!   commit, the same transaction shape as the peer's `touchPluginTxn`. Alloc writes
//!   are `upsert_allocs` commands.
//! - Watches register when a set first waits; the granularity checks register each set
//!   (a zero-length wait) before the commit, then read `is_fired` after it, as the peer
//!   does a non-blocking receive (both stores fire before `commit` returns).
//! - Memory is the bytes currently allocated, counted by this binary's global allocator
//!   (`heap_alloc_*`, comparable with Go's `HeapAlloc` after a GC), plus the resident set
//!   (`rss_mib`). There is no GC and so no `HeapInuse`.
//!
//! Layout: `flags`, `dataset` (with the shared `../common/splitmix.rs`), `report` (line
//! format, foreign load, JSON), `alloc_counter` (the counting allocator, memory
//! figures), `store` (the context and write helpers the phases share), and the phases
//! in groups, run in this order: `load`, `reads`, `writes`, `watches`, `concurrent`;
//! `waiters` on its own (`-phase waiters`).

#[path = "../common/splitmix.rs"]
mod splitmix;

mod alloc_counter;
mod concurrent;
mod dataset;
mod flags;
mod load;
mod reads;
mod report;
mod store;
mod waiters;
mod watches;
mod writes;

/// The allocator under the counting one: the system's, as an application embedding the
/// store would most likely run it (see `alloc_counter`).
const UNDERLYING: std::alloc::System = std::alloc::System;

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::alloc_counter::{live_bytes, mib, rss_bytes};
use crate::dataset::Dataset;
use crate::flags::{Flags, Phase, parse_flags};
use crate::report::Reporter;

/// The whole workload, phase groups in the peer's order (or only the waiters probe).
fn run(f: &Flags) {
    let start = Instant::now();
    let threads = thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "# schedstate={} profile={} threads={threads} nodes={} allocs-per-node={} plugins={} batch={} seed={}",
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        f.nodes,
        f.allocs_per_node,
        f.plugins,
        f.batch,
        f.seed
    );
    let ds = Arc::new(Dataset::generate(
        f.nodes,
        f.allocs_per_node,
        f.plugins,
        f.seed,
    ));
    println!("{}", ds.check_line());
    let objs = ds.objects();
    let mut rep = Reporter::new();

    match f.phase {
        Phase::All => {
            let mut ctx = load::run(&mut rep, f, &ds, objs);
            reads::run(&ctx, &mut rep, f);
            writes::run(&mut ctx, &mut rep, f);
            watches::run(&mut ctx, &mut rep, f);
            concurrent::run(&mut ctx, &mut rep, f);
        }
        Phase::Waiters => waiters::run(&mut rep, f, &ds, &objs.1),
    }

    println!(
        "# alloc live_mib={} rss_mib={}",
        mib(live_bytes()),
        mib(rss_bytes())
    );
    let total = start.elapsed();
    println!("# total_runtime_s={:.2}", total.as_secs_f64());

    if let Some(path) = &f.json {
        let meta = serde_json::json!({
            "schedstate": env!("CARGO_PKG_VERSION"),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "threads": threads,
            "nodes": f.nodes,
            "allocs_per_node": f.allocs_per_node,
            "plugins": f.plugins,
            "batch": f.batch,
            "seed": f.seed,
            "total_runtime_s": total.as_secs_f64(),
        });
        if let Err(e) = rep.write_json(path, meta) {
            eprintln!("writing {path}: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Without `--bench` and without flags (`cargo test --benches`), run a small smoke
    // version instead of the full workload.
    let smoke = args.is_empty();
    let mut flags = match parse_flags(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if smoke {
        println!("# smoke run (no arguments): tiny sizes; use `cargo bench --bench workload`");
        flags = Flags {
            nodes: 200,
            batch: 50,
            volumes: 50,
            txns: 200,
            snapshot_ops: 1000,
            reads: 1000,
            scans: 1000,
            denorm_reps: 2,
            wake_rounds: 20,
            wake_many_rounds: 10,
            concurrent_secs: 0.2,
            mem_txns: 200,
            ..flags
        };
    }
    if flags.dataset_check {
        let ds = Dataset::generate(
            flags.nodes,
            flags.allocs_per_node,
            flags.plugins,
            flags.seed,
        );
        println!("{}", ds.check_line());
        return;
    }
    run(&flags);
    if smoke {
        run(&Flags {
            phase: Phase::Waiters,
            waiters: vec![0, 300],
            waiter_commits: 50,
            ..flags
        });
    }
}
