//! Noisy neighbours (issue 48): a client holding an ordinary token — hostile or only
//! careless — must not stall the cluster. Each case runs an attack against three
//! agents while an honest client writes through a follower, and checks that the
//! attack is refused or cut with a typed answer, that no election happens (no server's
//! term moves), and that the honest writes stay within twice their unloaded p99 (plus
//! a small allowance for this 2-core machine's noise: the attacker is in this process
//! and takes CPU of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use schedstate::state::Command;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use schedstate_agent::api::ErrorBody;
use support::{Agents, node};

// The api tests' agents and requests (some of it unused here).
#[allow(dead_code)]
#[path = "../api/support.rs"]
mod support;

async fn error_of(resp: reqwest::Response) -> (u16, ErrorBody) {
    let status = resp.status().as_u16();
    let body = resp.bytes().await.expect("body");
    let e: ErrorBody = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "not an error body ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, e)
}

const TOKEN: &str = "isolation-test-management-token";

/// Allowance above twice the unloaded p99 for the machine's own noise (the other
/// tests of this binary run beside these).
const NOISE: Duration = Duration::from_millis(150);

/// Honest writes measured per phase: 60, or `ISOLATION_HONEST` (the noisy-neighbour
/// figures in BENCHMARKS.md are these tests in release with 1,000).
fn honest() -> usize {
    std::env::var("ISOLATION_HONEST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

/// One attack at a time: each measures the honest client against its own attack only.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `n` honest writes through agent `via`, one at a time: their latencies.
async fn honest_writes(agents: &Agents, via: usize, tag: &str, n: usize) -> Vec<Duration> {
    let client = agents.client(via);
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        client
            .apply(&Command::UpsertNode {
                node: node(&format!("honest-{tag}-{i}"), "ebs"),
            })
            .await
            .expect("an honest write commits");
        took.push(start.elapsed());
    }
    took
}

fn percentile(d: &[Duration], p: usize) -> Duration {
    let mut d = d.to_vec();
    d.sort();
    d[(d.len() * p).div_ceil(100).max(1) - 1]
}

fn terms(agents: &Agents) -> Vec<u64> {
    agents
        .agents
        .iter()
        .flatten()
        .map(|a| a.server().term())
        .collect()
}

/// Checks what every attack case must show: no election, honest p99 within bounds.
fn assert_isolated(
    what: &str,
    terms_before: &[u64],
    agents: &Agents,
    unloaded: Vec<Duration>,
    loaded: Vec<Duration>,
) {
    assert_eq!(terms(agents), terms_before, "{what}: an election happened");
    let (calm, busy) = (percentile(&unloaded, 99), percentile(&loaded, 99));
    eprintln!(
        "{what}: honest writes through a follower, p50/p99 {:?}/{calm:?} unloaded, {:?}/{busy:?} under the attack",
        percentile(&unloaded, 50),
        percentile(&loaded, 50),
    );
    assert!(
        busy <= calm * 2 + NOISE,
        "{what}: honest p99 {busy:?} under the attack, {calm:?} without"
    );
}

/// `n` nodes, in batches.
async fn load_nodes(agents: &Agents, via: usize, n: usize) {
    let client = agents.client(via);
    for start in (0..n).step_by(500) {
        let nodes = (start..(start + 500).min(n))
            .map(|i| node(&format!("n{i:05}"), "ebs"))
            .collect();
        // The setup, not what is tested: an election on a loaded machine is waited out.
        let command = Command::UpsertNodes { nodes };
        let mut tries = 0;
        while let Err(e) = client.apply(&command).await {
            tries += 1;
            assert!(tries < 20, "nodes load: {e}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Three agents as `adjust` sets them up, `nodes` loaded, and what every case
/// measures before its attack: the honest writes' latencies and every server's term.
struct Bed {
    agents: Agents,
    leader: usize,
    follower: usize,
    unloaded: Vec<Duration>,
    terms: Vec<u64>,
}

async fn bed(nodes: usize, adjust: impl Fn(&mut schedstate_agent::AgentConfig)) -> Bed {
    let agents = Agents::start_with(3, Some(TOKEN), adjust).await;
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    if nodes > 0 {
        load_nodes(&agents, leader, nodes).await;
        agents.wait_applied_everywhere().await;
    }
    let unloaded = honest_writes(&agents, follower, "calm", honest()).await;
    let terms = terms(&agents);
    Bed {
        agents,
        leader,
        follower,
        unloaded,
        terms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_costly_filter_is_cut_at_its_budget_and_the_cluster_writes_on() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Bed {
        agents,
        leader,
        follower,
        unloaded,
        terms: before,
    } = bed(3_000, |c| {
        c.limits.scan_budget = Duration::from_millis(300);
        c.limits.scan_queue_wait = Duration::from_secs(2);
    })
    .await;

    // Four requests at once, again and again, each a 600-way regular expression over
    // every node (12 s for one on the unguarded agent).
    let pattern: Vec<String> = (0..600).map(|i| format!("x{i}")).collect();
    let filter = format!("Name matches \"{}\"", pattern.join("|"));
    let url = format!(
        "{}?filter={}",
        agents.url(leader, "/v1/nodes"),
        url_escape(&filter)
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = Vec::new();
    for _ in 0..4 {
        let (url, stop) = (url.clone(), stop.clone());
        attackers.push(tokio::spawn(async move {
            let http = support::http();
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                let resp = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
                let (status, e) = error_of(resp).await;
                seen.push((
                    status,
                    format!("{}: {}", e.kind, e.message),
                    start.elapsed(),
                ));
                if status != 422 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = honest_writes(&agents, follower, "busy", honest()).await;
    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for a in attackers {
        answers.extend(a.await.unwrap());
    }
    let cut = answers
        .iter()
        .filter(|(s, k, _)| *s == 422 && k.starts_with("BudgetExceeded"))
        .count();
    assert!(cut > 0, "no request was cut at its budget: {answers:?}");
    for (status, kind, took) in &answers {
        assert!(
            matches!(
                (status, kind.split(':').next().unwrap_or("")),
                (422, "BudgetExceeded") | (429, "TooManyRequests") | (503, "Busy")
            ),
            "{status} {kind}"
        );
        // The budget, the wait for a thread, and slack for a loaded machine.
        assert!(*took < Duration::from_secs(5), "answered after {took:?}");
    }
    assert_isolated("costly filter", &before, &agents, unloaded, loaded);
    // An honest list through the same agent is still answered.
    let nodes = agents
        .client(leader)
        .nodes(Default::default())
        .await
        .expect("an honest list");
    assert!(nodes.value.len() >= 3_000);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_hold_what_they_sent_and_raft_keeps_its_own_budget() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Bed {
        agents,
        leader: _,
        follower,
        unloaded,
        terms: before,
    } = bed(0, |c| {
        c.limits.body_timeout = Duration::from_secs(20);
    })
    .await;
    // 40 connections to each server, each claiming the largest write (16 MiB) and
    // sending one byte of it: 640 MiB claimed on each server, more than all the
    // bodies it holds (512 MiB), which once made it refuse every write and Raft RPC.
    let mut held = Vec::new();
    for i in 0..3 {
        for _ in 0..40 {
            let mut s = TcpStream::connect(("127.0.0.1", agents.ports[i]))
                .await
                .unwrap();
            let head = format!(
                "POST /v1/commands HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
                16 << 20
            );
            s.write_all(head.as_bytes()).await.unwrap();
            held.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let loaded = honest_writes(&agents, follower, "busy", honest()).await;
    assert_isolated("slow bodies", &before, &agents, unloaded, loaded);
    drop(held);
    agents.shutdown().await;
}

/// Percent-encodes a query value.
fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// This process's resident memory, in KiB, once the allocator gave back what it
/// holds free (glibc keeps freed memory in per-thread arenas: without the trim, RSS
/// says how much garbage was made, not what is held).
fn rss_kib() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Opens `n` connections to agent `i`, `per_address` from each loopback address from
/// 127.0.0.2 on (other clients than the honest one and the servers, all on
/// 127.0.0.1), each sending `head` and reading nothing.
async fn unread(
    agents: &Agents,
    i: usize,
    n: usize,
    per_address: usize,
    head: &str,
) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for k in 0..n {
        let from = std::net::Ipv4Addr::new(
            127,
            0,
            1 + (k / per_address / 250) as u8,
            2 + (k / per_address % 250) as u8,
        );
        // A small receive window, as a client that reads nothing soon has.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let to = format!("127.0.0.1:{}", agents.ports[i]).parse().unwrap();
        let mut s = socket.connect(to).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        held.push(s);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_large_answers_hold_a_bounded_share_and_end_at_the_write_timeout() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Bed {
        agents,
        leader,
        follower,
        unloaded,
        terms: before,
    } = bed(3_000, |c| {
        c.limits.write_timeout = Duration::from_secs(8);
    })
    .await;
    let rss_before = rss_kib();
    // 100 clients, each from an address of its own, ask for the largest answer (every
    // node, whole, indented: several MB) and read none of it.
    let head = format!(
        "GET /v1/nodes?full&pretty&stale HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    let held = unread(&agents, leader, 100, 1, &head).await;
    // The honest writes meanwhile; the most the process grew, looked at every 200 ms
    // while the answers are made and held (until the write timeout ends them).
    let peak = {
        let watch = async {
            let mut peak = 0;
            let until = Instant::now() + Duration::from_secs(6);
            while Instant::now() < until {
                peak = peak.max(rss_kib().saturating_sub(rss_before));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            peak
        };
        let writes = honest_writes(&agents, follower, "busy", honest());
        tokio::join!(watch, writes)
    };
    let (grown, loaded) = peak;
    eprintln!(
        "100 unread answers: RSS grew {grown} KiB at most ({} KiB each)",
        grown / 100
    );
    // A long list is written as it is read (`list_body.rs`): each connection holds a
    // piece or two of 64 KiB, not the answer. 400 KiB each at most, allocator's slack
    // included (about 200 KiB each measured).
    assert!(grown < 40 << 10, "RSS grew {grown} KiB");
    assert_isolated("unread answers", &before, &agents, unloaded, loaded);
    // The write timeout ends the connections that read nothing; an honest list is
    // answered whole meanwhile and after.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let nodes = agents
        .client(leader)
        .nodes(Default::default())
        .await
        .expect("an honest list");
    assert!(nodes.value.len() >= 3_000);
    drop(held);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_event_streams_hold_a_bounded_amount_each() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // Writes for the streams to carry: 3,000 nodes in six large writes.
    let Bed {
        agents,
        leader: _,
        follower,
        unloaded,
        terms: before,
    } = bed(3_000, |c| {
        c.event_buffer = 10_000;
        c.limits.write_timeout = Duration::from_secs(30);
        // One token for every stream here: many clients' streams, as far as the
        // share goes (64 each by default).
        c.limits.event_streams_per_client = 1_024;
    })
    .await;
    let rss_before = rss_kib();
    // Streams from the start of the buffer, never read, 50 from each address (the
    // per-client share is raised above: many clients, each under its share).
    let head = format!(
        "GET /v1/event/stream?index=0 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    // 100, or `ISOLATION_STREAMS` (1,000 for BENCHMARKS.md; the limit is 1,024).
    let streams: usize = std::env::var("ISOLATION_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut held = unread(&agents, follower, streams, 50, &head).await;
    // Each was answered (its status line read, nothing more).
    for s in &mut held {
        let mut status = [0u8; 12];
        tokio::time::timeout(
            Duration::from_secs(20),
            tokio::io::AsyncReadExt::read_exact(s, &mut status),
        )
        .await
        .expect("a status line")
        .unwrap();
        assert_eq!(&status, b"HTTP/1.1 200");
    }
    let loaded = honest_writes(&agents, follower, "busy", honest()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown = rss_kib().saturating_sub(rss_before);
    eprintln!(
        "{streams} stalled streams: RSS grew {grown} KiB ({} KiB each)",
        grown / streams as u64
    );
    // A few hundred KiB each at most (25–240 KiB measured).
    assert!(grown < streams as u64 * 400, "RSS grew {grown} KiB");
    assert_isolated("stalled streams", &before, &agents, unloaded, loaded);
    drop(held);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_filling_the_leaders_cap_on_the_servers_address_do_not_shut_the_servers_out() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let pki = Arc::new(support::Pki::new(3));
    let p = pki.clone();
    let Bed {
        agents,
        leader,
        follower,
        unloaded,
        terms: before,
    } = bed(0, move |c| {
        c.tls = Some(p.options(c.id));
        c.cluster_key = None;
        c.limits.conns_per_client = 20;
        // Idle connections (the servers' pooled ones too) close after this.
        c.limits.header_read_timeout = Duration::from_secs(1);
    })
    .await;
    // Clients on the servers' own address (one host, or one NAT) keep the leader's
    // per-address cap full: each connection sends nothing, is closed at the header
    // timeout, and is opened again at once.
    let stop = Arc::new(AtomicBool::new(false));
    let mut holders = Vec::new();
    for _ in 0..20 {
        let (stop, port) = (stop.clone(), agents.ports[leader]);
        holders.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await {
                    let mut buf = [0u8; 64];
                    let _ = tokio::time::timeout(
                        Duration::from_secs(3),
                        tokio::io::AsyncReadExt::read(&mut s, &mut buf),
                    )
                    .await;
                }
            }
        }));
    }
    // The follower's pooled connections to the leader go idle and close; its
    // forwarded writes need new ones, which arrive over the cap.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = honest_writes(&agents, follower, "busy", honest()).await;
    stop.store(true, Ordering::Relaxed);
    for h in holders {
        h.abort();
    }
    assert_isolated("the leader's cap full", &before, &agents, unloaded, loaded);
    agents.shutdown().await;
}
