//! The machine, from /proc: memory, descriptors and CPU of the agents and of this
//! process; the descriptor limit and the ephemeral ports.

use std::time::Instant;

use serde_json::{Value, json};

use crate::report::{num, round2};

/// Raises the soft descriptor limit to the hard one; (soft, hard) after.
pub fn raise_nofile_limit() -> (u64, u64) {
    schedstate_agent::raise_open_file_limit().map_or((0, 0), |l| (l.after, l.hard))
}

/// (VmRSS, VmHWM) of `pid` in kB.
pub fn proc_memory_kb(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// RssAnon of `pid` in kB: its resident anonymous memory — the heap as the
/// allocator holds it, and the threads' stacks (RSS less the mapped binary and files).
pub fn proc_anon_kb(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of `pid` ("self" for this process).
pub fn proc_fds(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// CPU seconds (user + system) of `pid` ("self" for this process): fields 14 and 15
/// of /proc/<pid>/stat, after the ")" of the name; clock ticks of 1/100 s.
fn proc_cpu_secs(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Busy CPU seconds of the whole machine (the first line of /proc/stat).
fn machine_busy_secs() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let line = s.lines().next()?.to_string();
            let f: Vec<f64> = line
                .split_whitespace()
                .skip(1)
                .take(8)
                .map(|x| x.parse().unwrap_or(0.0))
                .collect();
            (f.len() == 8 && line.starts_with("cpu "))
                .then(|| (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / 100.0)
        })
        .unwrap_or(0.0)
}

/// A point to measure CPU from: the agents', this process's, the machine's.
pub struct CpuMark {
    wall: Instant,
    agents: f64,
    me: f64,
    busy: f64,
}

impl CpuMark {
    pub fn new(pids: &[u32]) -> CpuMark {
        CpuMark {
            wall: Instant::now(),
            agents: pids.iter().map(|p| proc_cpu_secs(&p.to_string())).sum(),
            me: proc_cpu_secs("self"),
            busy: machine_busy_secs(),
        }
    }

    /// Cores used since the mark: (agents, this process, everything else).
    fn cores(&self, pids: &[u32]) -> (f64, f64, f64) {
        let now = CpuMark::new(pids);
        let wall = (now.wall - self.wall).as_secs_f64().max(1e-9);
        let agents = (now.agents - self.agents) / wall;
        let me = (now.me - self.me) / wall;
        let foreign = ((now.busy - self.busy) / wall - agents - me).max(0.0);
        (round2(agents), round2(me), round2(foreign))
    }

    /// The cores used since the mark, as JSON.
    pub fn json(&self, pids: &[u32]) -> Value {
        let (a, m, f) = self.cores(pids);
        json!({ "agents_cores": a, "bench_cores": m, "foreign_cores": f })
    }
}

/// A [`CpuMark::json`] as a table cell: `agents/bench/foreign` cores.
pub fn cpu_cell(v: &Value) -> String {
    format!(
        "{:.2}/{:.2}/{:.2}",
        num(v, "agents_cores"),
        num(v, "bench_cores"),
        num(v, "foreign_cores")
    )
}

/// How many ephemeral ports the machine hands out (`ip_local_port_range`).
pub fn ephemeral_ports() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let v: Vec<u64> = s
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            Some(v.get(1)? - v.first()?)
        })
        .unwrap_or(u64::MAX)
}
