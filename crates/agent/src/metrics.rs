//! `GET /v1/metrics`: the agent's numbers in Prometheus text format
//! (prometheus-client). Counters the agent keeps itself (applies, refusals, leader
//! changes, apply- and commit-latency histograms) live here; numbers owned elsewhere
//! (the Raft log's fsyncs, the term, the applied index) are read when scraped.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use schedstate_raft::Server;

/// The agent's metrics.
pub struct Metrics {
    registry: Registry,
    /// Log entries with commands applied on this server.
    pub entries_applied: Counter,
    /// Commands accepted by the rules.
    pub commands_accepted: Counter,
    /// Commands refused by the rules (committed as no-ops).
    pub commands_refused: Counter,
    /// Seconds to apply one entry.
    pub apply_seconds: Histogram,
    /// Seconds from a write's proposal (or forward) on this server to its commit and
    /// apply here: the part of a write's latency spent in Raft and the store, not in
    /// HTTP.
    pub commit_seconds: Histogram,
    /// Leader changes this server saw.
    pub leader_changes: Counter,
    /// Snapshots installed from a leader.
    pub snapshots_installed: Counter,
    /// Blocking queries waiting now.
    pub blocking_waiting: Gauge,
    /// Event streams open now.
    pub event_streams: Gauge,
    /// Raft RPCs refused (no or wrong cluster key, over a limit, malformed, failing
    /// the checks before Raft).
    pub raft_rpcs_refused: Counter,
    /// Connections closed on accept: over the per-client or total limit.
    pub connections_refused: Counter,
    /// Connections open now (accepted and within the limits), clients' and servers'
    /// alike: on a leader, what its followers' reads and Raft RPCs hold.
    connections_open: Gauge,
    /// API requests refused for their token (none, unknown, expired, wrong scope).
    pub requests_unauthorized: Counter,
    /// TLS handshakes that failed (bad or missing certificates, plain HTTP on a TLS
    /// port).
    pub tls_handshakes_failed: Counter,
    // Read at scrape time.
    read_index_rounds: Counter,
    log_appends: Counter,
    log_entries: Counter,
    log_fsyncs: Counter,
    log_bytes: Gauge,
    log_held_entries: Gauge,
    snapshot_bytes: Gauge,
    snapshot_index: Gauge,
    snapshot_build_seconds: Gauge<f64, AtomicU64>,
    last_applied: Gauge,
    write_keys: Gauge,
    term: Gauge,
    is_leader: Gauge,
}

impl Metrics {
    /// Every metric at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("schedstate");
        let m = Metrics {
            entries_applied: Counter::default(),
            commands_accepted: Counter::default(),
            commands_refused: Counter::default(),
            // 10 µs … ~84 ms.
            apply_seconds: Histogram::new(exponential_buckets(1e-5, 2.0, 14)),
            // 100 µs … ~3.3 s.
            commit_seconds: Histogram::new(exponential_buckets(1e-4, 2.0, 16)),
            leader_changes: Counter::default(),
            snapshots_installed: Counter::default(),
            blocking_waiting: Gauge::default(),
            event_streams: Gauge::default(),
            raft_rpcs_refused: Counter::default(),
            connections_refused: Counter::default(),
            connections_open: Gauge::default(),
            read_index_rounds: Counter::default(),
            requests_unauthorized: Counter::default(),
            tls_handshakes_failed: Counter::default(),
            log_appends: Counter::default(),
            log_entries: Counter::default(),
            log_fsyncs: Counter::default(),
            log_bytes: Gauge::default(),
            log_held_entries: Gauge::default(),
            snapshot_bytes: Gauge::default(),
            snapshot_index: Gauge::default(),
            snapshot_build_seconds: Gauge::default(),
            last_applied: Gauge::default(),
            write_keys: Gauge::default(),
            term: Gauge::default(),
            is_leader: Gauge::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "entries_applied",
            "Raft log entries with commands applied on this server",
            m.entries_applied.clone(),
        );
        r.register(
            "commands_accepted",
            "Commands the rules accepted",
            m.commands_accepted.clone(),
        );
        r.register(
            "commands_refused",
            "Commands the rules refused (committed as no-ops)",
            m.commands_refused.clone(),
        );
        r.register(
            "apply_seconds",
            "Time to apply one log entry to the store",
            m.apply_seconds.clone(),
        );
        r.register(
            "commit_seconds",
            "Time from a write's proposal on this server to its commit and apply here",
            m.commit_seconds.clone(),
        );
        r.register(
            "leader_changes",
            "Leader changes seen by this server",
            m.leader_changes.clone(),
        );
        r.register(
            "snapshots_installed",
            "Snapshots installed from a leader",
            m.snapshots_installed.clone(),
        );
        r.register(
            "blocking_queries_waiting",
            "Blocking queries waiting for a change",
            m.blocking_waiting.clone(),
        );
        r.register(
            "event_streams",
            "Open event streams",
            m.event_streams.clone(),
        );
        r.register(
            "raft_rpcs_refused",
            "Raft RPCs refused before Raft saw them",
            m.raft_rpcs_refused.clone(),
        );
        r.register(
            "connections_refused",
            "Connections closed on accept (over the per-client or total limit)",
            m.connections_refused.clone(),
        );
        r.register(
            "connections_open",
            "Connections open now (clients' and other servers')",
            m.connections_open.clone(),
        );
        r.register(
            "read_index_rounds",
            "ReadIndex rounds this server ran as a follower (one RPC to the leader each, shared by every consistent read waiting)",
            m.read_index_rounds.clone(),
        );
        r.register(
            "requests_unauthorized",
            "API requests refused for their token (none, unknown, expired, wrong scope)",
            m.requests_unauthorized.clone(),
        );
        r.register(
            "tls_handshakes_failed",
            "TLS handshakes that failed",
            m.tls_handshakes_failed.clone(),
        );
        r.register(
            "raft_log_appends",
            "Appends to the Raft log (each a batch of entries)",
            m.log_appends.clone(),
        );
        r.register(
            "raft_log_entries_appended",
            "Entries appended to the Raft log",
            m.log_entries.clone(),
        );
        r.register(
            "raft_log_fsyncs",
            "fsyncs of the Raft log",
            m.log_fsyncs.clone(),
        );
        r.register(
            "raft_log_bytes",
            "Bytes of Raft log segments on disk",
            m.log_bytes.clone(),
        );
        r.register(
            "raft_log_held_entries",
            "Entries in the Raft log (after the purge point)",
            m.log_held_entries.clone(),
        );
        r.register(
            "snapshot_bytes",
            "Bytes of the newest Raft snapshot on disk (built here or installed from a leader)",
            m.snapshot_bytes.clone(),
        );
        r.register(
            "snapshot_index",
            "The last log index the newest Raft snapshot on disk holds",
            m.snapshot_index.clone(),
        );
        r.register(
            "snapshot_build_seconds",
            "How long this server took to build (encode and write) its last snapshot",
            m.snapshot_build_seconds.clone(),
        );
        r.register(
            "last_applied_index",
            "The last log index applied to the store",
            m.last_applied.clone(),
        );
        r.register(
            "write_keys",
            "Write keys kept for exactly-once writes (Idempotency-Key)",
            m.write_keys.clone(),
        );
        r.register("raft_term", "The current Raft term", m.term.clone());
        r.register(
            "raft_is_leader",
            "1 on the leader, 0 elsewhere",
            m.is_leader.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The text exposition, with the scraped-at-read numbers brought up to date.
    pub fn render(&self, server: &Server) -> String {
        let stats = server.log_stats();
        catch_up(&self.read_index_rounds, server.read_index_rounds());
        catch_up(&self.log_appends, stats.appends);
        catch_up(&self.log_entries, stats.entries);
        catch_up(&self.log_fsyncs, stats.fsyncs);
        self.log_bytes.set(log_bytes(server.dir()));
        let (index, bytes) = newest_snapshot(server.dir());
        self.snapshot_index.set(gauge(index));
        self.snapshot_bytes.set(gauge(bytes));
        if let Some(built) = server.last_snapshot_built() {
            self.snapshot_build_seconds.set(built.took.as_secs_f64());
        }
        let m = server.raft().metrics().borrow().clone();
        let last = m.last_log_index.unwrap_or(0);
        let purged = m.purged.map_or(0, |p| p.index + 1);
        self.log_held_entries
            .set(gauge(last.saturating_add(1).saturating_sub(purged)));
        self.last_applied.set(gauge(server.last_applied()));
        self.write_keys.set(gauge(server.write_keys_kept() as u64));
        self.term.set(gauge(m.current_term));
        self.is_leader
            .set(i64::from(m.current_leader == Some(server.id())));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// An accepted connection, counted in `connections_open` until dropped.
pub(crate) struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// Counts a connection open until the value is dropped.
    pub(crate) fn connection_opened(&self) -> OpenConnection {
        self.connections_open.inc();
        OpenConnection(self.connections_open.clone())
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Brings a counter mirroring a monotonic source up to `now`.
fn catch_up(counter: &Counter<u64, AtomicU64>, now: u64) {
    let have = counter.get();
    if now > have {
        counter.inc_by(now - have);
    }
}

/// The index and size of the newest snapshot file (`snap-<index>.rsnap`) in `dir`;
/// zeros without one.
fn newest_snapshot(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let index = name
                .to_str()?
                .strip_prefix("snap-")?
                .strip_suffix(".rsnap")?
                .parse::<u64>()
                .ok()?;
            Some((index, e.metadata().ok()?.len()))
        })
        .max()
        .unwrap_or((0, 0))
}

/// The size of the Raft log segments (`raft-<seq>.log`) in `dir`.
fn log_bytes(dir: &Path) -> i64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let total: u64 = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("raft-") && name.ends_with(".log")
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    gauge(total)
}

/// The Prometheus text of [`Metrics::render`] as Nomad's JSON metrics summary:
/// `Gauges` (`Name`, `Value`), `Counters` (`Name`, `Count`, `Sum`) and `Samples`
/// (histograms: `Name`, `Count`, `Sum`, `Mean`), names dotted as Nomad's
/// (`schedstate.entries_applied`).
pub fn as_nomad_json(text: &str) -> serde_json::Value {
    use serde_json::json;
    let mut gauges = Vec::new();
    let mut counters = Vec::new();
    let mut hist: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let name = name.split('{').next().unwrap_or(name);
        let dotted = |n: &str| n.replacen("schedstate_", "schedstate.", 1);
        if let Some(base) = name.strip_suffix("_total") {
            counters
                .push(json!({"Name": dotted(base), "Count": value, "Sum": value, "Labels": {}}));
        } else if let Some(base) = name.strip_suffix("_count") {
            hist.entry(dotted(base)).or_default().0 = value;
        } else if let Some(base) = name.strip_suffix("_sum") {
            hist.entry(dotted(base)).or_default().1 = value;
        } else if !name.ends_with("_bucket") {
            gauges.push(json!({"Name": dotted(name), "Value": value, "Labels": {}}));
        }
    }
    let samples: Vec<_> = hist
        .into_iter()
        .map(|(name, (count, sum))| {
            let mean = if count > 0.0 { sum / count } else { 0.0 };
            json!({"Name": name, "Count": count, "Sum": sum, "Mean": mean, "Labels": {}})
        })
        .collect();
    json!({
        "Timestamp": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "Gauges": gauges,
        "Counters": counters,
        "Samples": samples,
    })
}
