//! The agent against a hostile network: Raft RPCs from strangers, lengths that lie,
//! connections held open, slow clients, floods of work, browsers of other sites.
//! Every case is refused with a typed answer (or a closed connection), costs no memory
//! to speak of, changes nothing, and leaves the agent serving everyone else.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use schedstate_agent::{AgentConfig, CLUSTER_AUTH_HEADER, ClusterKey, Limits, Peers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::{error_of, state_bytes, upsert};
use crate::support::{Agents, cluster_key, free_ports};

/// This process's resident memory, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn addr(agents: &Agents, i: usize) -> SocketAddr {
    format!("127.0.0.1:{}", agents.ports[i]).parse().unwrap()
}

/// Sends `head` (a request head, `\r\n\r\n` included) and returns the status line of
/// the answer, or `None` when the connection was closed without one.
async fn status_of_head(to: SocketAddr, head: &str) -> Option<String> {
    let mut s = TcpStream::connect(to).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("an answer within 10 s")
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    text.lines()
        .next()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_rpcs_without_the_cluster_key_are_refused_and_the_cluster_writes_on() {
    let agents = Agents::start(3, Some("client-token-0123456789")).await;
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    let before = state_bytes(&agents, follower).await;
    let http = crate::support::http();
    let body = b"any bytes: the MAC is checked before the body is decoded".to_vec();
    let ours = cluster_key();
    let theirs = ClusterKey::from_bytes(*b"another cluster's key, also 32+ bytes").unwrap();
    let (signed_by_them, _) = theirs.sign_request(&body);
    let (signed_by_us, _) = ours.sign_request(&body);
    let rpc = || {
        http.post(agents.url(follower, "/v1/raft/rpc"))
            .header("content-type", "application/x-schedstate-raft")
    };
    let cases = [
        (
            "no credentials",
            rpc().body(body.clone()),
            401,
            "Unauthorized",
        ),
        (
            "the client token",
            rpc()
                .bearer_auth("client-token-0123456789")
                .body(body.clone()),
            401,
            "Unauthorized",
        ),
        (
            "another cluster's key",
            rpc()
                .header(CLUSTER_AUTH_HEADER, &signed_by_them)
                .body(body.clone()),
            403,
            "Forbidden",
        ),
        (
            "our key, an altered body",
            rpc().header(CLUSTER_AUTH_HEADER, &signed_by_us).body({
                let mut b = body.clone();
                b[0] ^= 1;
                b
            }),
            403,
            "Forbidden",
        ),
        (
            "a malformed header",
            rpc()
                .header(CLUSTER_AUTH_HEADER, "v1.x.y.z")
                .body(body.clone()),
            400,
            "BadRequest",
        ),
        (
            "our key, a body that is no RPC",
            rpc()
                .header(CLUSTER_AUTH_HEADER, &signed_by_us)
                .body(body.clone()),
            400,
            "BadRequest",
        ),
    ];
    for (what, req, status, kind) in cases {
        let (got, e) = error_of(req.send().await.unwrap()).await;
        assert_eq!(
            (got, e.kind.as_str()),
            (status, kind),
            "{what}: {}",
            e.message
        );
    }
    assert_eq!(state_bytes(&agents, follower).await, before);
    // The cluster is untouched and takes writes through the same follower.
    let index = agents
        .client(follower)
        .apply(&upsert("after", "ebs"))
        .await
        .unwrap();
    assert!(index > 0);
    let metrics = agents.client(follower).metrics().await.unwrap();
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("schedstate_raft_rpcs_refused_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("the refusals are counted");
    assert!(refused >= 6.0, "{refused}");
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_rpc_signed_with_the_key_is_still_checked_before_raft() {
    use openraft::Vote;
    use openraft::raft::VoteRequest;
    use schedstate_raft::wire::RpcRequest;

    let agents = Agents::start(3, None).await;
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    let term = agents.agents[follower].as_ref().unwrap().server().term();
    // A holder of the key (a server with a bug, a stolen key) asking for a vote at the
    // largest term: the brick of the review. Refused; the term is unchanged.
    let forged = RpcRequest::Vote(VoteRequest::new(Vote::new(u64::MAX, 1), None))
        .encode()
        .unwrap();
    let (header, _) = cluster_key().sign_request(&forged);
    let resp = crate::support::http()
        .post(agents.url(follower, "/v1/raft/rpc"))
        .header("content-type", "application/x-schedstate-raft")
        .header(CLUSTER_AUTH_HEADER, header)
        .body(forged)
        .send()
        .await
        .unwrap();
    let (status, e) = error_of(resp).await;
    assert_eq!(
        (status, e.kind.as_str()),
        (400, "RaftRpcRefused"),
        "{}",
        e.message
    );
    assert!(e.message.contains("term"), "{}", e.message);
    assert_eq!(
        agents.agents[follower].as_ref().unwrap().server().term(),
        term
    );
    agents
        .client(follower)
        .apply(&upsert("after", "ebs"))
        .await
        .unwrap();
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_a_key_and_dev_on_a_network_address_do_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(2);
    let peers: Peers = format!("1=127.0.0.1:{},2=127.0.0.1:{}", ports[0], ports[1])
        .parse()
        .unwrap();
    let bind: SocketAddr = format!("127.0.0.1:{}", ports[0]).parse().unwrap();
    let config = AgentConfig::new(1, bind, dir.path().join("a"), peers.clone());
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("cluster key"), "{e}");
    let mut dev = config.clone();
    dev.dev = true;
    dev.validate()
        .expect("--dev on loopback runs without a key");
    dev.bind = "0.0.0.0:4646".parse().unwrap();
    let e = dev.validate().unwrap_err().to_string();
    assert!(e.contains("loopback"), "{e}");
    let mut open = config.clone();
    open.cluster_key = Some(cluster_key());
    open.acl = false;
    open.validate().expect("ACL off on loopback");
    open.bind = "0.0.0.0:4646".parse().unwrap();
    let e = open.validate().unwrap_err().to_string();
    assert!(e.contains("ACL is off only on loopback"), "{e}");
    assert!(
        schedstate_agent::Agent::start(config).await.is_err(),
        "the agent refuses to start as validate() does"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_claimed_lengths_and_oversized_bodies_cost_no_memory() {
    let agents = Agents::start(1, None).await;
    let to = addr(&agents, 0);
    let before_state = state_bytes(&agents, 0).await;
    let rss_before = rss_kib();

    // Lengths that lie: answered from the head, nothing read or reserved.
    let huge = 10u64 << 30;
    let (signed, _) = {
        // A holder of the key claiming 10 GiB: still refused on the claim.
        let key = cluster_key();
        let header = key.sign_request(&[]);
        (header.0, header.1)
    };
    let heads = [
        (
            format!(
                "POST /v1/raft/rpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-schedstate-raft\r\nContent-Length: {huge}\r\n\r\n"
            ),
            "401",
        ),
        (
            format!(
                "POST /v1/raft/rpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-schedstate-raft\r\n{CLUSTER_AUTH_HEADER}: {signed}\r\nContent-Length: {huge}\r\n\r\n"
            ),
            // The MAC covers the length: a claim other than the signed one is another key's.
            "403",
        ),
        (
            format!(
                "POST /v1/commands HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                1u64 << 40
            ),
            "413",
        ),
    ];
    for (head, status) in &heads {
        let line = status_of_head(to, head).await.expect("an answer");
        assert!(line.contains(status), "{line:?} for {head:?}");
    }

    // Six strangers streaming 60 MiB each at the Raft route at once: refused on the
    // head, the connections closed; the agent never holds their bodies.
    let mut senders = Vec::new();
    for _ in 0..6 {
        senders.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(to).await.unwrap();
            let head = format!(
                "POST /v1/raft/rpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-schedstate-raft\r\nContent-Length: {}\r\n\r\n",
                60u64 << 20
            );
            s.write_all(head.as_bytes()).await.unwrap();
            let zeros = vec![0u8; 64 << 10];
            let mut sent = 0usize;
            while sent < (60 << 20) {
                match tokio::time::timeout(Duration::from_secs(5), s.write_all(&zeros)).await {
                    Ok(Ok(())) => sent += zeros.len(),
                    _ => break, // closed by the agent, or it stopped reading
                }
            }
            sent
        }));
    }
    for s in senders {
        let sent = s.await.unwrap();
        assert!(
            sent < (60 << 20),
            "a refused body was read whole ({sent} bytes)"
        );
    }

    // A chunked body (no claim) over the write limit: cut off while reading.
    let http = crate::support::http();
    let chunks =
        futures_util::stream::iter((0..20).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1 << 20])));
    let resp = http
        .post(agents.url(0, "/v1/commands"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await;
    if let Ok(resp) = resp {
        assert_eq!(resp.status().as_u16(), 413);
    }

    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 24 << 10, "RSS grew {grown} KiB");
    assert_eq!(state_bytes(&agents, 0).await, before_state);
    // Still serving.
    agents.client(0).apply(&upsert("n1", "ebs")).await.unwrap();
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_holding_many_idle_connections_shuts_out_only_itself() {
    schedstate_agent::raise_open_file_limit().expect("raise the open-file limit");
    let agents = Agents::start(1, None).await;
    let to = addr(&agents, 0);
    // 1,100 idle connections from 127.0.0.2 (Linux routes all of 127/8 to loopback).
    let mut idle = Vec::new();
    for _ in 0..1_100 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        match socket.connect(to).await {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connecting from 127.0.0.2: {e}"),
        }
    }
    // Another address is served at once.
    let start = Instant::now();
    let leader = tokio::time::timeout(Duration::from_secs(2), agents.client(0).leader())
        .await
        .expect("served within 2 s")
        .unwrap();
    assert!(leader.is_some());
    assert!(start.elapsed() < Duration::from_secs(2));
    // All but the per-client limit were closed by the agent.
    let mut closed = 0;
    for s in &mut idle {
        let mut b = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(20), s.read(&mut b)).await
        {
            closed += 1;
        }
    }
    let kept = idle.len() - closed;
    assert!(
        kept <= Limits::default().conns_per_client,
        "{kept} kept open"
    );
    drop(idle);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed() {
    let agents = Agents::start_with(1, None, |c| {
        c.limits.header_read_timeout = Duration::from_millis(800);
    })
    .await;
    let to = addr(&agents, 0);
    // Slowloris: a header line every 200 ms, never the end of the head.
    let mut s = TcpStream::connect(to).await.unwrap();
    s.write_all(b"GET /v1/nodes HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let closed_after = loop {
        let mut b = [0u8; 256];
        tokio::select! {
            r = s.read(&mut b) => match r {
                Ok(0) | Err(_) => break start.elapsed(),
                Ok(_) => {} // an error answer (408) before the close
            },
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    break start.elapsed();
                }
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still open after 10 s"
        );
    };
    assert!(closed_after < Duration::from_secs(5), "{closed_after:?}");

    // An idle keep-alive connection after a whole request: closed too.
    let mut s = TcpStream::connect(to).await.unwrap();
    s.write_all(b"GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answered = Vec::new();
    let start = Instant::now();
    loop {
        let mut b = [0u8; 1024];
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => answered.extend_from_slice(&b[..n]),
            Err(_) => panic!("an idle connection still open after 10 s"),
        }
    }
    assert!(String::from_utf8_lossy(&answered).starts_with("HTTP/1.1 200"));
    assert!(start.elapsed() < Duration::from_secs(5));
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_over_a_limit_is_429_with_retry_after() {
    let agents = Agents::start_with(1, None, |c| {
        c.limits.blocking_queries = 2;
        c.limits.event_streams = 1;
    })
    .await;
    let index = agents.client(0).apply(&upsert("n1", "ebs")).await.unwrap();
    let http = crate::support::http();
    let blocked = |i: usize| {
        http.get(agents.url(
            0,
            &format!("/v1/node/n1?index={}&wait=3s", index + i as u64),
        ))
        .send()
    };
    let (a, b) = (tokio::spawn(blocked(1)), tokio::spawn(blocked(2)));
    // Let both start waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let third = blocked(3).await.unwrap();
    assert_eq!(third.status().as_u16(), 429);
    assert_eq!(
        third
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    let (_, e) = error_of(third).await;
    assert_eq!(e.kind, "TooManyRequests");
    // A read that does not block is not counted.
    let plain = http.get(agents.url(0, "/v1/node/n1")).send().await.unwrap();
    assert_eq!(plain.status().as_u16(), 200);

    let stream = http
        .get(agents.url(0, "/v1/event/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    let second = http
        .get(agents.url(0, "/v1/event/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status().as_u16(), 429);
    drop(stream);
    let (sa, sb) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    assert_eq!((sa.status().as_u16(), sb.status().as_u16()), (200, 200));
    // Room again once they answered.
    assert_eq!(blocked(1).await.unwrap().status().as_u16(), 200);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_of_other_sites_and_bodies_of_other_types_are_refused() {
    let agents = Agents::start(1, None).await;
    let before = state_bytes(&agents, 0).await;
    let http = crate::support::http();
    let body = serde_json::to_vec(&upsert("n1", "ebs")).unwrap();
    let cases = [
        (
            "a page of another site (CSRF, text/plain)",
            http.post(agents.url(0, "/v1/commands"))
                .header("content-type", "text/plain")
                .header("origin", "http://evil.example")
                .body(body.clone()),
            403,
            "CrossOrigin",
        ),
        (
            "DNS rebinding (same origin, a name for the host)",
            http.get(agents.url(0, "/v1/operator/snapshot"))
                .header("host", "evil.example:4646")
                .header("sec-fetch-site", "same-origin"),
            403,
            "CrossOrigin",
        ),
        (
            "text/plain from a script",
            http.post(agents.url(0, "/v1/commands"))
                .header("content-type", "text/plain")
                .body(body.clone()),
            415,
            "UnsupportedMediaType",
        ),
        (
            "an HTML form's type",
            http.post(agents.url(0, "/v1/commands"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body.clone()),
            415,
            "UnsupportedMediaType",
        ),
    ];
    for (what, req, status, kind) in cases {
        let (got, e) = error_of(req.send().await.unwrap()).await;
        assert_eq!(
            (got, e.kind.as_str()),
            (status, kind),
            "{what}: {}",
            e.message
        );
    }
    assert_eq!(state_bytes(&agents, 0).await, before);
    // The agent's own page-less clients are unaffected.
    agents.client(0).apply(&upsert("n1", "ebs")).await.unwrap();
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_over_64_kib_are_refused() {
    let agents = Agents::start(1, None).await;
    let to = addr(&agents, 0);
    let head_of = |bytes: usize| {
        let start = "GET /v1/status/leader HTTP/1.1\r\nHost: a\r\nX-Padding: ";
        let end = "\r\n\r\n";
        let pad = "a".repeat(bytes - start.len() - end.len());
        format!("{start}{pad}{end}")
    };
    for (bytes, taken) in [
        (4 << 10, true),
        (30 << 10, true),
        (65 << 10, false),
        (66 << 10, false),
        (100 << 10, false),
        (200 << 10, false),
    ] {
        let status = status_of_head(to, &head_of(bytes)).await;
        let served = status.as_deref().is_some_and(|s| s.contains(" 200 "));
        assert_eq!(served, taken, "a head of {bytes} bytes: {status:?}");
        if !taken {
            // hyper's answer to a head over its buffer, or the connection closed
            // while the client was still sending.
            assert!(
                status.as_deref().is_none_or(|s| s.contains(" 431 ")),
                "a head of {bytes} bytes: {status:?}"
            );
        }
    }
    agents.shutdown().await;
}
