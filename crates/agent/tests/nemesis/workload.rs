//! The clients of a nemesis run: each writes and reads a few registers through
//! random agents over raw HTTP, as an outside client does, and records every
//! operation's invocation, completion and value for the checker.
//!
//! A register is node row `reg-<k>`; its value is the node's name `v<value>`. A
//! write of `v` is one `UpsertNodes` command that sets the register *and* creates a
//! trace row `w-<v>` — one command, so both or neither are applied — which lets the
//! end of the run see every write that took effect even after later writes
//! overwrote the register. Values are unique over the run.
//!
//! Writes carry an `Idempotency-Key` and are sent again under it, to another random
//! agent, while the outcome is unknown (no answer, 503), until [`WRITE_GIVE_UP`];
//! one answered 200 completes at that answer, one never answered stays unknown.
//! Reads are consistent (no `?stale`); a failed read is left out of the history (it
//! changed nothing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use schedstate::model::Node;
use schedstate::state::Command;

use crate::checker::{Event, Op};

/// How long a client waits for one answer before it sends the request elsewhere
/// (a write under the same key). Short, as a real client's would be, so that the
/// clients keep making operations while a server holds requests; the probes are
/// what wait out the agents' own bounds.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

/// How long a write is sent again under its key before it is left unknown.
pub const WRITE_GIVE_UP: Duration = Duration::from_secs(20);

/// A small deterministic generator (SplitMix64): the nemesis's and the clients'
/// choices follow from the run's seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `[lo, hi)`.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = (hi - lo).as_millis().max(1) as u64;
        lo + Duration::from_millis(self.next() % span)
    }
}

/// One recorded operation: which register, and the checker's event.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub register: usize,
    pub event: Event,
}

/// What the clients saw, besides the history.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub writes_acked: u64,
    pub writes_replayed: u64,
    pub reads_ok: u64,
    pub reads_failed: u64,
    /// Attempts that got no answer within [`REQUEST_TIMEOUT`].
    pub timeouts: u64,
    /// Answers no client should ever get (a 4xx on a well-formed write, a 5xx that
    /// is not one of the documented "try again" kinds): (what, status, body).
    pub unexpected: Vec<String>,
    /// The slowest answer of any kind.
    pub slowest: Duration,
}

/// The history and counters of a run, shared by its clients.
pub struct Recorder {
    pub origin: Instant,
    pub records: Mutex<Vec<Record>>,
    pub counts: Mutex<Counts>,
    next_value: AtomicU64,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            origin: Instant::now(),
            records: Mutex::new(Vec::new()),
            counts: Mutex::new(Counts::default()),
            next_value: AtomicU64::new(1),
        })
    }

    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn record(&self, register: usize, op: Op, invoke: u64, complete: Option<u64>, client: usize) {
        self.records.lock().push(Record {
            register,
            event: Event {
                op,
                invoke,
                complete,
                client,
            },
        });
    }

    fn slow(&self, took: Duration) {
        let mut c = self.counts.lock();
        c.slowest = c.slowest.max(took);
    }
}

/// The register row's id.
pub fn register_id(k: usize) -> String {
    format!("reg-{k}")
}

/// The trace row's id of value `v`.
pub fn trace_id(v: u64) -> String {
    format!("w-{v}")
}

/// The command writing `value` to register `k`, with its trace.
fn write_command(k: usize, value: u64) -> Command {
    Command::UpsertNodes {
        nodes: vec![
            Node::new(register_id(k), format!("v{value}")),
            Node::new(trace_id(value), register_id(k)),
        ],
    }
}

/// A plain HTTP client. reqwest is built without a TLS provider of its own (the
/// agent's tests hand it rustls configs); one made without any needs the
/// process-wide provider, installed once.
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .expect("client")
}

/// How an attempt ended.
#[derive(Debug)]
pub enum Answer {
    Ok(serde_json::Value, bool),
    /// The agent answered an error: status, kind, message.
    Error(u16, String, String),
    /// No answer within the timeout.
    Timeout,
    /// The connection failed or broke.
    Broken(String),
}

/// Sends one request with `timeout`.
async fn send(req: reqwest::RequestBuilder, timeout: Duration) -> Answer {
    let resp = match req.timeout(timeout).send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Answer::Timeout,
        Err(e) => return Answer::Broken(e.to_string()),
    };
    let status = resp.status().as_u16();
    let replayed = resp
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes() == b"true");
    let body = match resp.bytes().await {
        Ok(b) => b,
        Err(e) if e.is_timeout() => return Answer::Timeout,
        Err(e) => return Answer::Broken(e.to_string()),
    };
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if status == 200 {
        return Answer::Ok(json, replayed);
    }
    let kind = json["kind"].as_str().unwrap_or("?").to_string();
    let message = json["message"].as_str().map_or_else(
        || String::from_utf8_lossy(&body).into_owned(),
        str::to_string,
    );
    Answer::Error(status, kind, message)
}

/// One write attempt of `value` to register `k` at `url` under `key`.
pub async fn write_once(
    http: &reqwest::Client,
    url: &str,
    k: usize,
    value: u64,
    key: &str,
    timeout: Duration,
) -> Answer {
    let body = serde_json::to_vec(&write_command(k, value)).expect("json");
    let req = http
        .post(format!("{url}/v1/commands"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body);
    send(req, timeout).await
}

/// One consistent read of register `k` at `url`: `Ok(value)` or how it failed.
pub async fn read_once(
    http: &reqwest::Client,
    url: &str,
    k: usize,
    timeout: Duration,
) -> Result<Option<u64>, Answer> {
    let req = http.get(format!("{url}/v1/node/{}", register_id(k)));
    match send(req, timeout).await {
        Answer::Ok(json, _) => {
            let name = json["Name"].as_str().unwrap_or_default();
            let value = name.strip_prefix('v').and_then(|v| v.parse().ok());
            assert!(value.is_some(), "register {k} holds {name:?}");
            Ok(value)
        }
        Answer::Error(404, kind, _) if kind == "NodeNotFound" => Ok(None),
        other => Err(other),
    }
}

/// Whether an error answer is one the API documents for "no leader now, try
/// again" (the outcome of a write unknown).
pub fn is_unavailable(status: u16, kind: &str) -> bool {
    status == 503 && matches!(kind, "NoLeader" | "Unavailable" | "NotLeader")
}

/// Where clients send requests: the agents' URLs (changed by a membership change).
pub type Targets = Arc<Mutex<Vec<String>>>;

/// Runs one client until `stop`: random operations on `registers` registers through
/// random targets.
pub async fn client(
    id: usize,
    registers: usize,
    targets: Targets,
    recorder: Arc<Recorder>,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
) {
    let http = http();
    let pick = |rng: &mut Rng| {
        let t = targets.lock();
        t[rng.below(t.len())].clone()
    };
    while !stop.load(Ordering::Relaxed) {
        let k = rng.below(registers);
        if rng.below(2) == 0 {
            let value = recorder.next_value.fetch_add(1, Ordering::Relaxed);
            let key = schedstate_agent::new_write_key();
            let invoke = recorder.now();
            let started = Instant::now();
            let mut outcome = None;
            while started.elapsed() < WRITE_GIVE_UP && outcome.is_none() {
                let url = pick(&mut rng);
                let attempt = Instant::now();
                let answer = write_once(&http, &url, k, value, &key, REQUEST_TIMEOUT).await;
                recorder.slow(attempt.elapsed());
                match answer {
                    Answer::Ok(_, replayed) => {
                        let mut c = recorder.counts.lock();
                        c.writes_acked += 1;
                        c.writes_replayed += u64::from(replayed);
                        outcome = Some(recorder.now());
                    }
                    Answer::Error(status, kind, message) if !is_unavailable(status, &kind) => {
                        recorder.counts.lock().unexpected.push(format!(
                            "write v{value} to {url}: {status} {kind}: {message}"
                        ));
                        break;
                    }
                    Answer::Timeout => recorder.counts.lock().timeouts += 1,
                    Answer::Error(..) | Answer::Broken(_) => {}
                }
                if outcome.is_none() {
                    tokio::time::sleep(
                        rng.between(Duration::from_millis(20), Duration::from_millis(120)),
                    )
                    .await;
                }
            }
            recorder.record(k, Op::Write(value), invoke, outcome, id);
        } else {
            let url = pick(&mut rng);
            let invoke = recorder.now();
            let attempt = Instant::now();
            let read = read_once(&http, &url, k, REQUEST_TIMEOUT).await;
            recorder.slow(attempt.elapsed());
            match read {
                Ok(value) => {
                    recorder.counts.lock().reads_ok += 1;
                    recorder.record(k, Op::Read(value), invoke, Some(recorder.now()), id);
                }
                Err(answer) => {
                    let mut c = recorder.counts.lock();
                    c.reads_failed += 1;
                    match answer {
                        Answer::Timeout => c.timeouts += 1,
                        Answer::Error(status, kind, message) if !is_unavailable(status, &kind) => c
                            .unexpected
                            .push(format!("read reg-{k} at {url}: {status} {kind}: {message}")),
                        _ => {}
                    }
                }
            }
        }
    }
}

/// A value for a probe's write (outside the clients' sequence, still unique).
pub fn probe_value(recorder: &Recorder) -> u64 {
    recorder.next_value.fetch_add(1, Ordering::Relaxed)
}

/// Records a probe's write or read in the history (`complete: None` for a write
/// whose outcome is unknown).
pub fn record_probe(
    recorder: &Recorder,
    register: usize,
    op: Op,
    invoke: u64,
    complete: Option<u64>,
) {
    recorder.record(register, op, invoke, complete, usize::MAX);
}
