//! Flags: the peer's, parsed by hand (`-name value`, `-name=value`, `--name value`).

#[derive(Debug, Clone)]
pub struct Flags {
    pub nodes: usize,
    pub allocs_per_node: usize,
    pub plugins: usize,
    pub batch: usize,
    pub volumes: usize,
    pub txns: usize,
    pub snapshot_ops: usize,
    pub reads: usize,
    pub scans: usize,
    pub denorm_reps: usize,
    pub wake_rounds: usize,
    pub wake_many_rounds: usize,
    pub concurrent_secs: f64,
    pub mem_txns: usize,
    pub seed: u64,
    pub json: Option<String>,
    pub dataset_check: bool,
    /// Which phases run: the peer's whole workload, or only the waiters probe.
    pub phase: Phase,
    /// Waiter counts of the waiters probe.
    pub waiters: Vec<usize>,
    /// Timed commits per line of the waiters probe.
    pub waiter_commits: usize,
}

/// `-phase`: what the binary runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The peer's workload (`bench.go`), every phase in its order.
    All,
    /// Only the waiters probe (`waiters/main.go`, issue 15).
    Waiters,
}

impl Default for Flags {
    fn default() -> Self {
        Flags {
            nodes: 10_000,
            allocs_per_node: 10,
            plugins: 10,
            batch: 1000,
            volumes: 1000,
            txns: 10_000,
            snapshot_ops: 1_000_000,
            reads: 1_000_000,
            scans: 100_000,
            denorm_reps: 20,
            wake_rounds: 1000,
            wake_many_rounds: 200,
            concurrent_secs: 3.0,
            mem_txns: 10_000,
            seed: 42,
            json: None,
            dataset_check: false,
            phase: Phase::All,
            waiters: vec![0, 1000, 10_000, 20_000, 50_000],
            waiter_commits: 2000,
        }
    }
}

const USAGE: &str = "usage: workload [-nodes N] [-allocs-per-node N] [-plugins N] [-batch N] \
[-volumes N] [-txns N] [-snapshot-ops N] [-reads N] [-scans N] [-denorm-reps N] \
[-wake-rounds N] [-wake-many-rounds N] [-concurrent-secs S] [-mem-txns N] [-seed N] \
[-json PATH] [-dataset-check] [-phase all|waiters] [-waiters N,N,...] [-waiter-commits N]";

pub fn parse_flags(args: &[String]) -> Result<Flags, String> {
    let mut f = Flags::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--bench" || arg == "--test" {
            continue; // passed by cargo
        }
        let Some(stripped) = arg.strip_prefix('-') else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        let stripped = stripped.strip_prefix('-').unwrap_or(stripped);
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (stripped, None),
        };
        // Boolean flags.
        match name {
            "dataset-check" => {
                f.dataset_check = inline.as_deref() != Some("false");
                continue;
            }
            "nomad-scan-copy" => {
                // The peer's Nomad-exact variant copies every plugin in the removal
                // sweep; this store has no such copy (persistent instance maps).
                eprintln!("# note: -nomad-scan-copy has no equivalent here; ignored");
                continue;
            }
            "h" | "help" => return Err(USAGE.to_string()),
            _ => {}
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("flag -{name} needs a value"))?,
        };
        let num = |v: &str| -> Result<usize, String> {
            v.parse::<usize>()
                .map_err(|e| format!("-{name} {v:?}: {e}"))
        };
        match name {
            "nodes" => f.nodes = num(&value)?,
            "allocs-per-node" => f.allocs_per_node = num(&value)?,
            "plugins" => f.plugins = num(&value)?,
            "batch" => f.batch = num(&value)?,
            "volumes" => f.volumes = num(&value)?,
            "txns" => f.txns = num(&value)?,
            "snapshot-ops" => f.snapshot_ops = num(&value)?,
            "reads" => f.reads = num(&value)?,
            "scans" => f.scans = num(&value)?,
            "denorm-reps" => f.denorm_reps = num(&value)?,
            "wake-rounds" => f.wake_rounds = num(&value)?,
            "wake-many-rounds" => f.wake_many_rounds = num(&value)?,
            "mem-txns" => f.mem_txns = num(&value)?,
            "concurrent-secs" => {
                f.concurrent_secs = value
                    .parse::<f64>()
                    .map_err(|e| format!("-concurrent-secs {value:?}: {e}"))?;
            }
            "seed" => {
                f.seed = value
                    .parse::<u64>()
                    .map_err(|e| format!("-seed {value:?}: {e}"))?;
            }
            "json" => f.json = Some(value),
            "phase" => {
                f.phase = match value.as_str() {
                    "all" => Phase::All,
                    "waiters" => Phase::Waiters,
                    _ => return Err(format!("-phase {value:?}: all or waiters\n{USAGE}")),
                };
            }
            "waiters" => {
                f.waiters = value
                    .split(',')
                    .filter(|v| !v.is_empty())
                    .map(num)
                    .collect::<Result<_, _>>()?;
            }
            "waiter-commits" => f.waiter_commits = num(&value)?,
            "cpuprofile" => eprintln!("# note: -cpuprofile is not supported here (use perf)"),
            _ => return Err(format!("unknown flag -{name}\n{USAGE}")),
        }
    }
    if f.plugins < 2 || f.allocs_per_node < 1 {
        return Err("need -plugins >= 2 and -allocs-per-node >= 1".into());
    }
    if f.nodes < 2 || f.batch < 1 || f.volumes < 1 {
        return Err("need -nodes >= 2, -batch >= 1 and -volumes >= 1".into());
    }
    Ok(f)
}
