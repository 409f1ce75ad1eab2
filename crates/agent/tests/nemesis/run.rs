//! One nemesis run: a cluster, its clients, the minority probes, and the checks at
//! the end — every acknowledged write on every server, the servers identical, the
//! history linearizable, every minority answer a clear refusal within its bound.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::task::JoinHandle;

use crate::checker::{Event, Op, check_register};
use crate::cluster::Cluster;
use crate::workload::{
    self, Answer, Recorder, Rng, Targets, is_unavailable, probe_value, read_once, record_probe,
    write_once,
};

/// How long the clients run while faults are applied: `SCHEDSTATE_NEMESIS_SECONDS`,
/// else a CI-sized default.
pub fn seconds() -> Duration {
    let s = std::env::var("SCHEDSTATE_NEMESIS_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(6);
    Duration::from_secs(s.max(1))
}

/// The run's seed: `SCHEDSTATE_NEMESIS_SEED` to replay a schedule, else the clock.
fn seed() -> u64 {
    std::env::var("SCHEDSTATE_NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// The agents' own bounds on answering while there is no quorum, with a margin for
/// a loaded machine: a write waits up to 5 s for a leader, then up to 30 s to commit
/// (`http/writes.rs`); a consistent read up to 3 s for a leader, then up to 5 s for
/// the leader's confirmation — or, proxied by a follower, up to 10 s for the
/// leader's answer to begin (`http/consistency.rs`).
pub const WRITE_BOUND: Duration = Duration::from_secs(35 + 5);
pub const READ_BOUND: Duration = Duration::from_secs(13 + 4);

/// What a probe of a partitioned server came to.
#[derive(Debug, Clone)]
pub struct Probe {
    pub server: usize,
    pub what: &'static str,
    pub answer: String,
    pub took: Duration,
    /// Answered while the partition was still in place.
    pub while_partitioned: bool,
    /// Answered a success.
    pub ok: bool,
    /// A success answered while partitioned, a hang, or an unclear error.
    pub bad: bool,
}

/// A running nemesis test.
pub struct Run {
    pub name: &'static str,
    pub cluster: Cluster,
    pub rng: Rng,
    pub seed: u64,
    pub recorder: Arc<Recorder>,
    pub targets: Targets,
    /// Servers that are members now (for the end checks).
    pub members: Vec<usize>,
    registers: usize,
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<()>>,
    probes: Vec<JoinHandle<Probe>>,
    /// Probes answered so far.
    probed: Vec<Probe>,
    /// Set while a probed partition is in place.
    partitioned: Arc<AtomicBool>,
    started: Instant,
}

impl Run {
    /// Starts `voters` agents (room for `capacity`) and `clients` clients on
    /// `registers` registers.
    pub async fn start(
        name: &'static str,
        capacity: usize,
        voters: usize,
        clients: usize,
        registers: usize,
    ) -> Run {
        let seed = seed();
        eprintln!(
            "nemesis {name}: seed {seed} (SCHEDSTATE_NEMESIS_SEED={seed} replays the schedule)"
        );
        let cluster = Cluster::start(capacity, voters).await;
        let members: Vec<usize> = (0..voters).collect();
        let targets: Targets = Arc::new(Mutex::new(
            members.iter().map(|&i| cluster.url(i)).collect(),
        ));
        let recorder = Recorder::new();
        let stop = Arc::new(AtomicBool::new(false));
        let mut rng = Rng::new(seed);
        let clients = (0..clients)
            .map(|id| {
                tokio::spawn(workload::client(
                    id,
                    registers,
                    targets.clone(),
                    recorder.clone(),
                    Rng::new(rng.next()),
                    stop.clone(),
                ))
            })
            .collect();
        Run {
            name,
            cluster,
            rng,
            seed,
            recorder,
            targets,
            members,
            registers,
            stop,
            clients,
            probes: Vec::new(),
            probed: Vec::new(),
            partitioned: Arc::new(AtomicBool::new(false)),
            started: Instant::now(),
        }
    }

    /// Whether the clients have run for `seconds()` yet.
    pub fn time_left(&self) -> bool {
        self.started.elapsed() < seconds()
    }

    /// Marks a probed partition in place (`true`) or healed.
    pub fn partitioned(&self, on: bool) {
        self.partitioned.store(on, Ordering::SeqCst);
    }

    /// Sends one write and one consistent read to each of `servers` (cut off from any
    /// quorum), each recorded in the history. Each must be answered within the
    /// agent's bound, and answered a success only once the partition healed.
    pub fn probe(&mut self, servers: &[usize]) {
        for &server in servers {
            for what in ["write", "read"] {
                let url = self.cluster.url(server);
                let recorder = self.recorder.clone();
                let partitioned = self.partitioned.clone();
                let k = self.rng.below(self.registers);
                self.probes.push(tokio::spawn(async move {
                    probe(server, what, url, k, recorder, partitioned).await
                }));
            }
        }
    }

    /// Waits for the probes sent so far (each bounded by its own timeout).
    pub async fn await_probes(&mut self) {
        for p in self.probes.drain(..) {
            self.probed.push(p.await.expect("a probe panicked"));
        }
    }

    /// Accepts the successes of the probes awaited so far: a scenario calls it when
    /// the cluster elected a leader during them that the probed servers can reach (a
    /// one-way partition cuts a follower off from one leader, not from a quorum).
    /// Hangs and unclear errors stay failures.
    pub fn accept_probe_successes(&mut self) {
        for p in &mut self.probed {
            if p.ok {
                eprintln!(
                    "{}: a new leader was elected during the probes; the {} probe's success is accepted",
                    self.name, p.what
                );
                p.bad = false;
            }
        }
    }

    /// Heals every link, stops the clients, waits for the probes and for every member
    /// to apply everything, and checks the run. Panics with what broke.
    pub async fn finish(mut self) {
        let faulted = self.started.elapsed();
        self.cluster.proxy.heal();
        self.partitioned(false);
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients.drain(..) {
            c.await.expect("a client panicked");
        }
        self.await_probes().await;
        let probes = std::mem::take(&mut self.probed);
        let settle = Instant::now();
        self.cluster.wait_converged(&self.members).await;
        let traces = self.check_servers_agree().await;
        let counts = self.recorder.counts.lock().clone();
        let records = self.recorder.records.lock().clone();
        let (history, dropped) = resolve(&records, &traces);
        let acked: BTreeSet<u64> = records
            .iter()
            .filter_map(|r| match r.event.op {
                Op::Write(v) if r.event.complete.is_some() => Some(v),
                _ => None,
            })
            .collect();
        let lost: Vec<&u64> = acked.difference(&traces).collect();
        let unknown = records
            .iter()
            .filter(|r| matches!(r.event.op, Op::Write(_)) && r.event.complete.is_none())
            .count();
        let checked = Instant::now();
        let mut violations = Vec::new();
        for (k, h) in &history {
            if let Err(v) = check_register(h) {
                violations.push(format!("register {k}: {v}"));
            }
        }
        let check_took = checked.elapsed();
        let ops: usize = history.values().map(Vec::len).sum();
        eprintln!(
            "nemesis {}: seed {}, {:.1} s under faults, {:.1} s to converge; {} operations checked \
             ({} writes acked, {} replayed, {} unknown of which {} never applied, {} reads, {} reads failed, \
             {} timeouts, slowest answer {} ms) in {} ms; {} probes",
            self.name,
            self.seed,
            faulted.as_secs_f64(),
            settle.elapsed().as_secs_f64(),
            ops,
            counts.writes_acked,
            counts.writes_replayed,
            unknown,
            dropped,
            counts.reads_ok,
            counts.reads_failed,
            counts.timeouts,
            counts.slowest.as_millis(),
            check_took.as_millis(),
            probes.len(),
        );
        for p in &probes {
            eprintln!(
                "  probe {} of server {}: {} in {} ms{}",
                p.what,
                p.server + 1,
                p.answer,
                p.took.as_millis(),
                if p.while_partitioned {
                    " (partitioned)"
                } else {
                    " (after heal)"
                }
            );
        }
        let bad_probes: Vec<&Probe> = probes.iter().filter(|p| p.bad).collect();
        self.cluster.shutdown().await;
        assert!(
            lost.is_empty(),
            "{}: acknowledged writes missing after the run: {lost:?}",
            self.name
        );
        assert!(
            violations.is_empty(),
            "{}: not linearizable (seed {}): {violations:#?}",
            self.name,
            self.seed
        );
        assert!(
            counts.unexpected.is_empty(),
            "{}: unexpected answers: {:#?}",
            self.name,
            counts.unexpected
        );
        assert!(
            bad_probes.is_empty(),
            "{}: partitioned servers answered badly: {bad_probes:#?}",
            self.name
        );
        assert!(
            counts.writes_acked > 0 && counts.reads_ok > 0,
            "{}: nothing got through: {counts:?}",
            self.name
        );
    }

    /// Every member's state, read from the member itself (`?stale`): the same
    /// registers and the same trace rows everywhere. Returns the traces' values.
    async fn check_servers_agree(&self) -> BTreeSet<u64> {
        let http = workload::http();
        let mut seen: Option<(usize, BTreeMap<String, String>)> = None;
        for &i in &self.members {
            let url = format!("{}/v1/nodes?stale", self.cluster.url(i));
            let body = http
                .get(&url)
                .timeout(Duration::from_secs(30))
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .expect("list nodes")
                .bytes()
                .await
                .expect("a node list");
            let list: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            let rows: BTreeMap<String, String> = list
                .as_array()
                .expect("an array")
                .iter()
                .map(|n| {
                    (
                        n["ID"].as_str().unwrap_or_default().to_string(),
                        n["Name"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            if let Some((j, first)) = &seen {
                let differ: Vec<_> = first
                    .iter()
                    .filter(|(id, name)| rows.get(*id) != Some(name))
                    .chain(rows.iter().filter(|(id, _)| !first.contains_key(*id)))
                    .take(10)
                    .collect();
                assert!(
                    differ.is_empty(),
                    "{}: servers {} and {} hold different rows after converging: {differ:?}",
                    self.name,
                    j + 1,
                    i + 1
                );
            } else {
                seen = Some((i, rows));
            }
        }
        let (_, rows) = seen.expect("a member");
        rows.keys()
            .filter_map(|id| id.strip_prefix("w-").and_then(|v| v.parse().ok()))
            .collect()
    }
}

/// The history per register, with the writes of unknown outcome that never took
/// effect (no trace on the converged servers) left out: had one taken effect after
/// the end, it would be linearized after everything recorded. Also how many were
/// left out.
fn resolve(
    records: &[workload::Record],
    traces: &BTreeSet<u64>,
) -> (BTreeMap<usize, Vec<Event>>, usize) {
    let mut history: BTreeMap<usize, Vec<Event>> = BTreeMap::new();
    let mut dropped = 0;
    for r in records {
        if let (Op::Write(v), None) = (r.event.op, r.event.complete)
            && !traces.contains(&v)
        {
            dropped += 1;
            continue;
        }
        history.entry(r.register).or_default().push(r.event);
    }
    (history, dropped)
}

/// One probe (see [`Run::probe`]).
async fn probe(
    server: usize,
    what: &'static str,
    url: String,
    k: usize,
    recorder: Arc<Recorder>,
    partitioned: Arc<AtomicBool>,
) -> Probe {
    let http = workload::http();
    let start = Instant::now();
    let invoke = recorder.now();
    let (answer, ok) = if what == "write" {
        let value = probe_value(&recorder);
        let key = schedstate_agent::new_write_key();
        let answer = write_once(&http, &url, k, value, &key, WRITE_BOUND).await;
        let ok = matches!(answer, Answer::Ok(..));
        // A failed probe write may still be applied later (it was proposed): its
        // outcome is unknown unless it succeeded.
        let complete = ok.then(|| recorder.now());
        record_probe(&recorder, k, Op::Write(value), invoke, complete);
        (answer, ok)
    } else {
        match read_once(&http, &url, k, READ_BOUND).await {
            Ok(v) => {
                record_probe(&recorder, k, Op::Read(v), invoke, Some(recorder.now()));
                (Answer::Ok(serde_json::json!(v), false), true)
            }
            Err(a) => (a, false),
        }
    };
    let took = start.elapsed();
    let while_partitioned = partitioned.load(Ordering::SeqCst);
    let clear = matches!(&answer, Answer::Error(status, kind, _) if is_unavailable(*status, kind));
    let bad = (ok && while_partitioned) || (!ok && !clear);
    let answer = match answer {
        Answer::Ok(v, _) => format!("200 {v}"),
        Answer::Error(s, k, m) => format!("{s} {k}: {m}"),
        Answer::Timeout => "no answer within the bound".to_string(),
        Answer::Broken(e) => format!("broken: {e}"),
    };
    Probe {
        server,
        what,
        answer,
        took,
        while_partitioned,
        ok,
        bad,
    }
}
