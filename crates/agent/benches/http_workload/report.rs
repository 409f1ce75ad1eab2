//! Output: the table to stdout (stderr with `-json`), every number into one JSON
//! object; percentiles and the JSON shapes the phases share.

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};

pub struct Out {
    pub json: bool,
    pub doc: serde_json::Map<String, Value>,
}

impl Out {
    pub fn new(json: bool) -> Out {
        Out {
            json,
            doc: serde_json::Map::new(),
        }
    }

    pub fn line(&self, s: impl AsRef<str>) {
        if self.json {
            eprintln!("{}", s.as_ref());
        } else {
            println!("{}", s.as_ref());
        }
    }

    pub fn put(&mut self, key: &str, v: Value) {
        self.doc.insert(key.to_string(), v);
    }

    /// With `-json`, the object with every number, to stdout.
    pub fn finish(&mut self) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&Value::Object(std::mem::take(&mut self.doc)))
                    .expect("json")
            );
        }
    }
}

/// Percentile as the workload benches take it: sorted, index ⌊n·q⌋ (clamped).
fn pct(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn ms(ns: i64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `later - earlier` in ns, negative when `later` is the earlier.
pub fn signed_ns(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from(earlier.duration_since(later).as_nanos()).unwrap_or(i64::MAX),
    }
}

/// p50/p90/p99/max (ms) of `samples` (ns), sorted in place.
pub fn latency_json(samples: &mut [i64]) -> Value {
    samples.sort_unstable();
    json!({
        "n": samples.len(),
        "p50_ms": ms(pct(samples, 0.50)),
        "p90_ms": ms(pct(samples, 0.90)),
        "p99_ms": ms(pct(samples, 0.99)),
        "max_ms": ms(samples.last().copied().unwrap_or(0)),
        "min_ms": ms(samples.first().copied().unwrap_or(0)),
    })
}

/// The number at `key` of a JSON object (0 when absent).
pub fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(0.0)
}

/// `p50 … ms  p90 … ms  p99 … ms  max … ms` of a [`latency_json`].
pub fn latency_text(lat: &Value) -> String {
    format!(
        "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        num(lat, "p50_ms"),
        num(lat, "p90_ms"),
        num(lat, "p99_ms"),
        num(lat, "max_ms"),
    )
}

/// (VmRSS, VmHWM) in kB of each agent.
pub fn memory_json(mem: &[(u64, u64)]) -> Value {
    Value::Array(
        mem.iter()
            .enumerate()
            .map(|(i, (rss, hwm))| json!({ "agent": i + 1, "vm_rss_kb": rss, "vm_hwm_kb": hwm }))
            .collect(),
    )
}

/// Counts an error in `count`; the first three also go to stderr as `# what: e`.
pub fn count_error(count: &AtomicU64, what: &str, e: impl Display) {
    if count.fetch_add(1, Ordering::Relaxed) < 3 {
        eprintln!("# {what}: {e}");
    }
}
