//! Reporting: the peer's line format, its per-phase foreign-load figure, JSON; and the
//! latency helpers (nanoseconds, percentiles, microseconds).

use std::time::{Duration, Instant};

struct ResultRow {
    name: String,
    ns_per_op: f64,
    ops: u64,
    extra: Vec<(String, f64)>,
}

/// The peer's number format: integers plain, everything else with 2 decimals.
fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}")
    }
}

/// (busy seconds of the whole machine, CPU seconds of this process).
fn cpu_sample() -> (f64, f64) {
    let busy = std::fs::read_to_string("/proc/stat")
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
        .unwrap_or(0.0);
    let own = own_cpu_secs();
    (busy, own)
}

/// CPU seconds this process used (user + system): fields 14 and 15 of
/// /proc/self/stat (utime, stime), after the ")" of the name.
pub fn own_cpu_secs() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
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

pub struct Reporter {
    results: Vec<ResultRow>,
    mark_wall: Instant,
    mark_cpu: (f64, f64),
}

impl Reporter {
    pub fn new() -> Self {
        Reporter {
            results: Vec::new(),
            mark_wall: Instant::now(),
            mark_cpu: cpu_sample(),
        }
    }

    pub fn mark(&mut self) {
        self.mark_wall = Instant::now();
        self.mark_cpu = cpu_sample();
    }

    /// Average number of cores busy with other processes since the last mark.
    fn foreign(&self) -> f64 {
        let wall = self.mark_wall.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        let (busy, own) = cpu_sample();
        let f = ((busy - self.mark_cpu.0) - (own - self.mark_cpu.1)) / wall;
        (f.max(0.0) * 100.0).round() / 100.0
    }

    pub fn emit(&mut self, name: &str, ns_per_op: f64, ops: u64, extra: &[(&str, f64)]) {
        let mut extra: Vec<(String, f64)> =
            extra.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        extra.push(("foreign_cores".into(), self.foreign()));
        let mut line = format!(
            "{name} ns_per_op={} ops={ops}",
            fmt_num((ns_per_op * 10.0).round() / 10.0)
        );
        for (k, v) in &extra {
            line.push_str(&format!(" {k}={}", fmt_num(*v)));
        }
        println!("{line}");
        self.results.push(ResultRow {
            name: name.into(),
            ns_per_op,
            ops,
            extra,
        });
        self.mark();
    }

    pub fn write_json(&self, path: &str, meta: serde_json::Value) -> std::io::Result<()> {
        let results: Vec<serde_json::Value> = self
            .results
            .iter()
            .map(|r| {
                let extra: serde_json::Map<String, serde_json::Value> = r
                    .extra
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::json!(v)))
                    .collect();
                serde_json::json!({
                    "name": r.name,
                    "ns_per_op": r.ns_per_op,
                    "ops": r.ops,
                    "extra": extra,
                })
            })
            .collect();
        let doc = serde_json::json!({ "meta": meta, "results": results });
        let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

pub fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64
}

/// Percentile as the peer takes it: sorted, index ⌊n·q⌋ (clamped).
pub fn pct(samples: &[i64], q: f64) -> i64 {
    if samples.is_empty() {
        return 0;
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    let i = ((s.len() as f64 * q) as usize).min(s.len() - 1);
    s[i]
}

/// Nanoseconds to microseconds with 2 decimals.
pub fn us(ns: i64) -> f64 {
    (ns as f64 / 10.0).round() / 100.0
}

pub fn signed_ns(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from(earlier.duration_since(later).as_nanos()).unwrap_or(i64::MAX),
    }
}
