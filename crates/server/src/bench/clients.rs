//! `schedstate bench clients`: many blocked clients on one agent, as a cluster's client
//! nodes hold them, and what they cost it.
//!
//! One run: start an agent (`agent_process.rs`), register `--clients` watched nodes
//! and `--unwatched` others, time `--writes` writes to unwatched nodes, read the agent's
//! RSS; open one connection per watched node, each holding `GET /v1/node/{id}?index=
//! <its modify index>&wait=5m` (`long_poll.rs`), wait until the agent counts them all
//! as waiting, read its RSS again; time the same writes again; then write `--wakes`
//! watched nodes, one after the other, and time each until its waiter answers. Any
//! other waiter that answers before its wait ran out is a false wake. The agent is
//! stopped and its directory removed at the end of the run, whatever happened.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use schedstate::model::{Id, Node, NodeStatus};
use schedstate::state::Command;
use schedstate_agent::Client;
use schedstate_cli::output::{CliError, err};
use tokio::sync::{Semaphore, mpsc};

use super::agent_process::AgentProcess;
use super::long_poll::{self, Answer, PollError};
use super::report::{Percentiles, RunReport};

/// The most clients one run opens (the open-file limits of the tool and the agent,
/// one descriptor each per client, are 20,000 on the machines this was built for).
pub const MAX_CLIENTS: usize = 20_000;
/// How long a waiter waits: the agent's longest, so none ends within a run.
const WAIT: Duration = Duration::from_secs(300);
/// Connections being opened at once (beyond it the agent's accept backlog overflows
/// and connects stall for a second).
const CONNECTING: usize = 256;
/// How long to let the agent's memory settle before reading it.
const SETTLE: Duration = Duration::from_secs(2);
/// How long a written row's waiter may take to answer before it counts as missed.
const PATIENCE: Duration = Duration::from_secs(30);

/// Arguments of `bench clients`.
#[derive(Debug, Clone, Args)]
pub struct ClientsArgs {
    /// Blocked clients: watched nodes, one connection and one blocking query each (at
    /// most 20,000; 0 measures the agent alone).
    #[arg(long, default_value_t = 1_000)]
    pub clients: usize,
    /// Nodes nobody watches, which the writes that must wake nobody go to.
    #[arg(long, default_value_t = 1_000)]
    pub unwatched: usize,
    /// Writes to unwatched nodes in each of the two commit-latency phases.
    #[arg(long, default_value_t = 200)]
    pub writes: usize,
    /// Writes to watched nodes, each of which must wake its client (at most
    /// --clients; 100 or --clients if fewer by default).
    #[arg(long)]
    pub wakes: Option<usize>,
    /// Client connections per loopback source address (127.0.1.0 onwards); the agent
    /// is started allowing at least as many per address.
    #[arg(long, default_value_t = 100)]
    pub per_address: usize,
    /// Runs, each on a new agent; with more than one, the medians are reported too.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// A run taking longer than this fails (its agent is stopped all the same).
    #[arg(long, default_value = "4m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Drive an agent already running on loopback at this address (ACL off: `agent
    /// --dev`, allowing the connections) instead of starting one; needs --agent-pid.
    #[arg(long, requires = "agent_pid")]
    pub address: Option<std::net::SocketAddr>,
    /// The process id of the agent at --address, whose RSS is measured.
    #[arg(long, requires = "address")]
    pub agent_pid: Option<u32>,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl ClientsArgs {
    /// How many watched nodes are written.
    pub fn wakes(&self) -> usize {
        self.wakes.unwrap_or(self.clients.min(100))
    }

    /// Refuses what a run could not do within its bounds.
    pub fn check(&self) -> Result<(), CliError> {
        if self.clients > MAX_CLIENTS {
            return Err(err(format!(
                "--clients {} is over the limit of {MAX_CLIENTS}",
                self.clients
            )));
        }
        if self.wakes() > self.clients {
            return Err(err(format!(
                "--wakes {} is more than --clients {}: each wake writes a watched node",
                self.wakes(),
                self.clients
            )));
        }
        if self.unwatched == 0 || self.unwatched > 1_000_000 {
            return Err(err("--unwatched must be 1 to 1,000,000"));
        }
        if self.writes == 0 || self.writes > 100_000 {
            return Err(err("--writes must be 1 to 100,000"));
        }
        if self.per_address == 0 || self.per_address > 10_000 {
            return Err(err("--per-address must be 1 to 10,000"));
        }
        if self.runs == 0 || self.runs > 10 {
            return Err(err("--runs must be 1 to 10"));
        }
        if self.timeout.is_zero() || self.timeout >= WAIT {
            return Err(err(format!(
                "--timeout must be above 0 and below the waiters' wait ({}s)",
                WAIT.as_secs()
            )));
        }
        Ok(())
    }
}

/// One waiter's answer.
struct Returned {
    /// Which watched node.
    n: usize,
    answer: Result<Answer, PollError>,
    /// When it arrived.
    at: Instant,
}

fn watched_id(n: usize) -> String {
    format!("w{n:05}")
}

fn unwatched_id(n: usize) -> String {
    format!("u{n:06}")
}

fn status(id: &str, down: bool) -> Command {
    Command::UpdateNodeStatus {
        id: Id::from(id),
        status: if down {
            NodeStatus::Down
        } else {
            NodeStatus::Ready
        },
    }
}

fn client_error(what: &str) -> impl Fn(schedstate_agent::ClientError) -> CliError + '_ {
    move |e| err(format!("{what}: {e}"))
}

/// Registers nodes in batches; returns each node's modify index.
async fn register(client: &Client, ids: Vec<String>) -> Result<Vec<u64>, CliError> {
    let mut indexes = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let nodes: Vec<Node> = chunk
            .iter()
            .map(|id| Node::new(id.as_str(), id.as_str()))
            .collect();
        let index = client
            .apply(&Command::UpsertNodes { nodes })
            .await
            .map_err(client_error("registering nodes"))?;
        indexes.extend(std::iter::repeat_n(index, chunk.len()));
    }
    Ok(indexes)
}

/// `writes` status changes of unwatched nodes, one after the other; their latencies.
/// `round` makes each phase flip the statuses the last one set.
async fn write_unwatched(
    client: &Client,
    unwatched: usize,
    writes: usize,
    round: usize,
) -> Result<Vec<Duration>, CliError> {
    let mut took = Vec::with_capacity(writes);
    for i in 0..writes {
        let n = i % unwatched;
        let down = (i / unwatched + round).is_multiple_of(2);
        let start = Instant::now();
        client
            .apply(&status(&unwatched_id(n), down))
            .await
            .map_err(client_error("a write"))?;
        took.push(start.elapsed());
    }
    Ok(took)
}

/// The agent's count of waiting blocking queries (its metrics).
async fn waiting(client: &Client) -> Result<u64, CliError> {
    let text = client.metrics().await.map_err(client_error("metrics"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("schedstate_blocking_queries_waiting "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| err("the agent's metrics have no schedstate_blocking_queries_waiting"))
}

async fn wait_leader(client: &Client) -> Result<(), CliError> {
    let start = Instant::now();
    loop {
        if let Ok(Some(_)) = client.leader().await {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(err("the agent elected no leader within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The agent's RSS once it had [`SETTLE`] to settle.
async fn settled_rss(agent: &AgentProcess) -> Result<u64, CliError> {
    tokio::time::sleep(SETTLE).await;
    agent.rss_kib()
}

/// One run, on a new agent in `dir`.
pub async fn run_once(args: &ClientsArgs, dir: &std::path::Path) -> Result<RunReport, CliError> {
    let started = Instant::now();
    let room = 1_024;
    let agent = match (args.address, args.agent_pid) {
        (Some(addr), Some(pid)) => AgentProcess::attach(addr, pid)?,
        _ => tokio::task::block_in_place(|| {
            AgentProcess::start(
                dir,
                args.clients + room,
                args.per_address.max(100),
                args.clients + room,
            )
        })?,
    };
    let client = Client::new(&format!("http://{}", agent.addr), None)
        .map_err(client_error("the agent's address"))?;
    wait_leader(&client).await?;

    let watched = register(&client, (0..args.clients).map(watched_id).collect()).await?;
    register(&client, (0..args.unwatched).map(unwatched_id).collect()).await?;
    let without = write_unwatched(&client, args.unwatched, args.writes, 0).await?;
    let rss_none_kib = settled_rss(&agent).await?;

    // Every watched node blocked with the index it was written at.
    let (tx, mut returned) = mpsc::unbounded_channel::<Returned>();
    let opened = Arc::new(AtomicUsize::new(0));
    let connecting = Arc::new(Semaphore::new(CONNECTING));
    let mut tasks = Vec::with_capacity(args.clients);
    for (n, &index) in watched.iter().enumerate() {
        let (tx, opened, connecting) = (tx.clone(), Arc::clone(&opened), Arc::clone(&connecting));
        let (addr, source) = (agent.addr, long_poll::source_address(n, args.per_address));
        tasks.push(tokio::spawn(async move {
            let answer = async {
                let permit = connecting.acquire().await;
                let mut stream = long_poll::open(source, addr, &watched_id(n), index, WAIT).await?;
                drop(permit);
                opened.fetch_add(1, Ordering::Relaxed);
                long_poll::answer(&mut stream).await
            }
            .await;
            let _ = tx.send(Returned {
                n,
                answer,
                at: Instant::now(),
            });
        }));
    }
    drop(tx);
    // Aborted on every way out: a waiter's connection closes with its task.
    let _abort = AbortOnDrop(tasks);
    let start = Instant::now();
    loop {
        if let Ok(r) = returned.try_recv() {
            let why = match r.answer {
                Err(e) => e.to_string(),
                Ok(a) => format!("answered {} at once", a.status),
            };
            return Err(err(format!("client {} failed before blocking: {why}", r.n)));
        }
        let blocked = waiting(&client).await?;
        if blocked >= args.clients as u64 {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            return Err(err(format!(
                "only {blocked} of {} clients blocked within 120 s ({} connected)",
                args.clients,
                opened.load(Ordering::Relaxed)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_blocked_kib = settled_rss(&agent).await?;
    let with = write_unwatched(&client, args.unwatched, args.writes, 1).await?;

    // Wakes: watched nodes spread over the whole set, one write at a time.
    let mut written = BTreeMap::new();
    let wakes = args.wakes();
    for k in 0..wakes {
        let n = k * args.clients / wakes;
        let sent = Instant::now();
        let index = client
            .apply(&status(&watched_id(n), true))
            .await
            .map_err(client_error("a write to a watched node"))?;
        written.insert(n, (sent, index));
    }
    let mut answers = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    let woken_count = |answers: &[Returned]| {
        answers
            .iter()
            .filter(|r| written.contains_key(&r.n))
            .count()
    };
    while woken_count(&answers) < written.len() {
        match tokio::time::timeout_at(deadline.into(), returned.recv()).await {
            Ok(Some(r)) => answers.push(r),
            Ok(None) | Err(_) => break,
        }
    }
    // Room for a late false wake to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(r) = returned.try_recv() {
        answers.push(r);
    }

    let mut wake = Vec::new();
    let mut false_wakes = 0;
    for r in &answers {
        let answer = r
            .answer
            .as_ref()
            .map_err(|e| err(format!("client {}: {e}", r.n)))?;
        match written.get(&r.n) {
            Some(&(sent, index)) if answer.status == 200 && answer.index >= index => {
                wake.push(r.at.saturating_duration_since(sent));
            }
            // Not written, or an answer that is not the write: it returned early.
            _ => false_wakes += 1,
        }
    }
    let woken = wake.len();
    let rss_per_waiter_kib = if args.clients == 0 {
        0.0
    } else {
        (rss_blocked_kib as f64 - rss_none_kib as f64) / args.clients as f64
    };
    drop(agent);
    Ok(RunReport {
        clients: args.clients,
        rss_none_kib,
        rss_blocked_kib,
        rss_per_waiter_kib,
        commit_without_waiters: Percentiles::of(&without),
        commit_with_waiters: Percentiles::of(&with),
        wake: Percentiles::of(&wake),
        woken,
        missed: written.len() - woken,
        false_wakes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The waiters' tasks, aborted (their connections closed) when the run ends.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}
