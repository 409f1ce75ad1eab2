//! `demo`: a simulated cluster on a durable store, a blocking query printing its
//! wake-ups, a progress bar, and a summary with the plugin table.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use schedstate::QueryOptions;
use schedstate::StateReader;
use schedstate::model::CsiPlugin;
use schedstate::persist::{
    DurableStore, FileKind, Options, SyncPolicy, list_files, remove_data_dir,
};

use crate::DataDir;
use crate::catalog::{Kind, PENDING_PLUGIN, PLUGINS, WATCHED_PLUGIN, job_id};
use crate::output::{CliError, bytes, err, thousands};
use crate::server_half::ServerHalf;
use crate::sim::Cluster;
use crate::status::plugin_table;

/// When the demo's commits are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    /// fsync before every commit returns.
    Every,
    /// fsync before a commit returns, shared by concurrent writers.
    Group,
    /// No fsync.
    Never,
}

impl SyncArg {
    fn name(self) -> &'static str {
        match self {
            SyncArg::Every => "every",
            SyncArg::Group => "group",
            SyncArg::Never => "never",
        }
    }
}

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub data: DataDir,
    /// Client nodes in the simulated cluster.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(4..=20_000))]
    pub nodes: u32,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub seconds: u64,
    /// Run exactly this many simulation steps instead of for --seconds: the same seed
    /// on the same state then gives the same state, whatever the machine's speed.
    #[arg(long, conflicts_with = "seconds")]
    pub steps: Option<u64>,
    /// Start over: delete the data directory's files first.
    #[arg(long)]
    pub fresh: bool,
    /// Seed of the simulation: the same seed on the same state applies the same
    /// commands (how many depends on the machine's speed).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// When commits are made durable.
    #[arg(long, value_enum, default_value_t = SyncArg::Group)]
    pub sync: SyncArg,
    /// Run against N `schedstate agent` processes on loopback instead of a store in
    /// this process, through their HTTP API; kill the leader with SIGKILL halfway and
    /// restart it (their directories go beside DIR, in DIR-cluster).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=7), conflicts_with = "sync")]
    pub cluster: Option<u8>,
}

/// One printed wake of the watched plugin's blocking query.
pub fn wake_line(wakes: u64, index: u64, id: &str, plugin: Option<&CsiPlugin>) -> String {
    let what = match plugin {
        Some(p) => format!(
            "controllers {}/{} healthy, nodes {}/{} healthy, {} allocations",
            p.controllers_healthy(),
            p.controllers_expected(),
            p.nodes_healthy(),
            p.nodes_expected(),
            p.allocations.len()
        ),
        None => "absent".to_string(),
    };
    format!(
        "  wake {:>5}  index {:>7}  {id}: {what}",
        thousands(wakes),
        thousands(index)
    )
}

/// Prints lines above the progress bar, or plainly when there is no bar (not a
/// terminal). A closed stdout is ignored.
#[derive(Clone)]
struct Printer(ProgressBar);

impl Printer {
    fn line(&self, s: &str) {
        if self.0.is_hidden() {
            let _ = writeln!(io::stdout().lock(), "{s}");
        } else {
            self.0.println(s);
        }
    }
}

/// How many wake-ups to print: the first few, then at most one a second.
const FIRST_WAKES: u64 = 5;
const MAX_WAKE_LINES: u64 = 30;

/// The blocking query on the watched plugin: runs until `stop`, printing wakes.
/// Returns (wakes, last index seen).
fn watch(store: StateReader, stop: Arc<AtomicBool>, out: Printer) -> (u64, u64) {
    let id = PLUGINS[WATCHED_PLUGIN].id;
    let first = store.blocking_csi_plugin_denormalized(QueryOptions::default(), id);
    // The plugins table starts at index 0; wait for anything after that.
    let mut min = first.index.max(1);
    let (mut wakes, mut printed) = (0u64, 0u64);
    let mut last_print = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let opts = QueryOptions::new(min, Duration::from_millis(200));
        let r = store.blocking_csi_plugin_denormalized(opts, id);
        if r.timed_out {
            continue; // the wait passed without a change
        }
        min = r.index;
        wakes += 1;
        let due = wakes <= FIRST_WAKES || last_print.elapsed() >= Duration::from_secs(1);
        if due && printed < MAX_WAKE_LINES {
            printed += 1;
            last_print = Instant::now();
            out.line(&wake_line(wakes, r.index, id, r.value.as_ref()));
        }
    }
    (wakes, min)
}

/// How to run this binary again, for the hints at the end.
pub fn invocation() -> String {
    if std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
        if cfg!(debug_assertions) {
            "cargo run --".into()
        } else {
            "cargo run --release --".into()
        }
    } else {
        "schedstate".into()
    }
}

/// `demo`.
pub fn run(args: &DemoArgs, server: &dyn ServerHalf) -> Result<(), CliError> {
    if let Some(n) = args.cluster {
        return server.cluster_demo(args, usize::from(n));
    }
    let dir = &args.data.dir;
    // Before `--fresh`: a server's directory is neither read nor removed.
    crate::output::refuse_server_dir(dir)?;
    if args.fresh {
        remove_data_dir(dir)?;
    }
    let sync = match args.sync {
        SyncArg::Every => SyncPolicy::EveryCommit,
        SyncArg::Group => SyncPolicy::Group,
        SyncArg::Never => SyncPolicy::Never,
    };
    let options = Options {
        sync,
        // Small, so that a run shows a compaction (a snapshot and a new log segment).
        compact_after_bytes: 256 << 10,
    };
    let (db, report) = DurableStore::open(dir, options)?;
    let started_at = report.last_applied;
    let pb = ProgressBar::with_draw_target(
        Some(args.steps.unwrap_or(args.seconds * 1000)),
        ProgressDrawTarget::stdout_with_hz(10),
    );
    pb.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>3} [{bar:25}] {msg}")
            .map_err(|e| err(format!("progress bar: {e}")))?
            .progress_chars("=> "),
    );
    let out = Printer(pb.clone());
    let resumed = if started_at == 0 {
        "new".to_string()
    } else {
        format!("resuming after index {}", thousands(started_at))
    };
    let budget = match args.steps {
        Some(n) => format!("{n} steps"),
        None => format!("{} s", args.seconds),
    };
    out.line(&format!(
        "schedstate demo: {} ({resumed}), {} nodes, {budget}, seed {}, sync {}",
        dir.display(),
        args.nodes,
        args.seed,
        args.sync.name()
    ));
    out.line(&format!(
        "Watching plugin {} with a blocking query (each wake prints its index):",
        PLUGINS[WATCHED_PLUGIN].id
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (store, stop, out) = (db.reader().clone(), Arc::clone(&stop), out.clone());
        thread::Builder::new()
            .name("demo-watch".into())
            .spawn(move || watch(store, stop, out))
            .map_err(|e| err(format!("starting the watcher thread: {e}")))?
    };

    let start = Instant::now();
    let total = Duration::from_secs(args.seconds);
    let mut cluster = Cluster::new(&db, args.nodes as usize, args.seed);
    let result = (|| -> Result<(), CliError> {
        cluster.boot()?;
        for e in cluster.events.drain(..) {
            out.line(&format!("  {e}"));
        }
        let v = db.snapshot();
        out.line(&format!(
            "  index {}: cluster up: {} nodes, {} plugins, {} volumes",
            thousands(cluster.next - 1),
            v.view().nodes().count(),
            v.view().csi_plugins().count(),
            v.view().csi_volumes().count()
        ));
        let mut last_draw = Instant::now();
        let mut steps = 0;
        loop {
            let elapsed = start.elapsed();
            // Where the run is, out of 1,000: by steps if given, else by time.
            let progress = match args.steps {
                Some(n) => steps * 1000 / n.max(1),
                None => (elapsed.as_millis() * 1000 / total.as_millis().max(1)) as u64,
            };
            if progress >= 1000 {
                break;
            }
            if !cluster.stopped && progress >= 400 {
                cluster.stop_plugin_job()?;
            }
            for e in cluster.events.drain(..) {
                out.line(&format!("  {e}"));
            }
            cluster.step()?;
            steps += 1;
            if last_draw.elapsed() >= Duration::from_millis(100) {
                last_draw = Instant::now();
                pb.set_position(match args.steps {
                    Some(_) => steps,
                    None => elapsed.as_millis() as u64,
                });
                let rate = cluster.stats.commands as f64 / elapsed.as_secs_f64().max(1e-3);
                pb.set_message(format!(
                    "index {} · {:.0}/s · {} unhealthy",
                    thousands(cluster.next - 1),
                    rate,
                    cluster.unhealthy_now()
                ));
            }
        }
        if !cluster.stopped {
            cluster.stop_plugin_job()?;
        }
        for e in cluster.events.drain(..) {
            out.line(&format!("  {e}"));
        }
        Ok(())
    })();
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Release);
    let (wakes, last_wake) = watcher.join().unwrap_or((0, 0));
    pb.finish_and_clear();
    result?;
    db.wait_for_compaction()?;

    let s = &cluster.stats;
    let last = cluster.next - 1;
    let mut text = String::new();
    text.push_str(&format!(
        "\nApplied {} commands (index {} → {}) in {:.1} s: {} commits/s (sync {})\n",
        thousands(s.commands),
        thousands(started_at + 1),
        thousands(last),
        elapsed.as_secs_f64(),
        thousands((s.commands as f64 / elapsed.as_secs_f64().max(1e-3)).round() as u64),
        args.sync.name()
    ));
    text.push_str(&format!(
        "  health: {} instances went unhealthy, {} recovered; {} plugin allocations replaced\n",
        thousands(s.unhealthy),
        thousands(s.recovered),
        thousands(s.restarts)
    ));
    text.push_str(&format!(
        "  volumes: {} registered, {} deregistered; {} claims taken, {} released\n",
        thousands(s.registered),
        thousands(s.deregistered),
        thousands(s.claims),
        thousands(s.releases)
    ));
    text.push_str(&format!(
        "  nodes: {} status and drain changes; {} finished allocations garbage-collected\n",
        thousands(s.node_changes),
        thousands(s.gc_allocs)
    ));
    text.push_str(&format!(
        "Blocking query on plugin {} woke {} times (last at index {})\n",
        PLUGINS[WATCHED_PLUGIN].id,
        thousands(wakes),
        thousands(last_wake)
    ));
    let files = list_files(dir)?;
    let count = |kind: fn(&FileKind) -> bool| files.iter().filter(|f| kind(&f.kind)).count();
    let snaps = count(|k| matches!(k, FileKind::Snapshot { .. }));
    let segs = count(|k| matches!(k, FileKind::LogSegment { .. }));
    let size: u64 = files.iter().map(|f| f.size).sum();
    text.push_str(&format!(
        "Data directory {}: {} snapshot(s), {} log segment(s), {}\n\n",
        dir.display(),
        snaps,
        segs,
        bytes(size)
    ));
    text.push_str(&plugin_table(&crate::source::plugin_stubs(
        &db.snapshot().view(),
    )));
    drop(db);
    let run = invocation();
    let d = dir.display();
    text.push_str(&format!(
        "\nLook inside (works while a demo runs):\n  {run} plugin status --data {d}\n  \
         {run} plugin status {} --data {d}\n  {run} job status --data {d}\n  \
         {run} job status {} --data {d}\n  {run} volume status --data {d}\n  \
         {run} node status --data {d}\n  {run} inspect --verify --data {d}\n",
        PLUGINS[WATCHED_PLUGIN].id,
        job_id(PENDING_PLUGIN, Kind::Node)
    ));
    crate::output::emit(&text)
}
