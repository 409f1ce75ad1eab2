//! Blocking reads parked on their connection (`http/gets.rs`, `http/park.rs`), seen
//! from a raw keep-alive connection: a parked read answers what it would have
//! answered inside its request — on its write, at its deadline, when the agent
//! stops — keeps its place under the limit, frees it when the client leaves, and the
//! same connection goes on to other requests (pipelined ones too, and ones hyper
//! serves).

use std::time::{Duration, Instant};

use schedstate::model::{Id, NodeStatus};
use schedstate::state::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Agents, DEADLINE, node};

/// One answer read from a raw connection: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn index(&self) -> u64 {
        self.header("x-nomad-index")
            .and_then(|v| v.parse().ok())
            .expect("an X-Nomad-Index")
    }
}

/// A raw HTTP/1.1 connection to agent 0, reading answers with `Content-Length`.
struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn open(agents: &Agents) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", agents.ports[0]))
            .await
            .expect("connect");
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, raw: &str) {
        self.stream.write_all(raw.as_bytes()).await.expect("send");
    }

    async fn get(&mut self, path: &str) {
        self.send(&format!("GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n"))
            .await;
    }

    /// The next answer, within `within`.
    async fn answer(&mut self, within: Duration) -> Answer {
        tokio::time::timeout(within, self.read_answer())
            .await
            .expect("an answer in time")
    }

    async fn read_answer(&mut self) -> Answer {
        loop {
            let mut lines = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut lines);
            if let httparse::Status::Complete(len) = resp.parse(&self.buf).expect("HTTP") {
                let headers: Vec<(String, String)> = resp
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                let status = resp.code.expect("status");
                let body_len: usize = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .map(|(_, v)| v.parse().expect("length"))
                    .expect("a content-length");
                if self.buf.len() >= len + body_len {
                    let body = self.buf[len..len + body_len].to_vec();
                    self.buf.drain(..len + body_len);
                    return Answer {
                        status,
                        headers,
                        body,
                    };
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Whether an answer is already there or arrives within `within`.
    async fn answers_within(&mut self, within: Duration) -> bool {
        tokio::time::timeout(within, self.read_answer())
            .await
            .is_ok()
    }
}

/// The agent's count of waiting blocking queries.
async fn waiting(agents: &Agents) -> u64 {
    let text = agents.client(0).metrics().await.expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("schedstate_blocking_queries_waiting "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the waiting gauge")
}

async fn until_waiting(agents: &Agents, n: u64) {
    let start = Instant::now();
    while waiting(agents).await != n {
        assert!(start.elapsed() < DEADLINE, "never {n} waiting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn down(id: &str) -> Command {
    Command::UpdateNodeStatus {
        id: Id::from(id),
        status: NodeStatus::Down,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_read_answers_its_write_and_the_connection_goes_on() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    let first = c
        .apply(&Command::UpsertNode {
            node: node("n1", "ebs"),
        })
        .await
        .unwrap();
    c.apply(&Command::UpsertNode {
        node: node("n2", "ebs"),
    })
    .await
    .unwrap();

    let mut raw = Raw::open(&agents).await;
    raw.get(&format!("/v1/node/n1?index={first}&wait=1m")).await;
    until_waiting(&agents, 1).await;
    // A write elsewhere: still parked.
    c.apply(&down("n2")).await.unwrap();
    assert!(!raw.answers_within(Duration::from_millis(300)).await);
    assert_eq!(waiting(&agents).await, 1);
    // Its own row: answered with that write's index, in Nomad's shape.
    let wrote = c.apply(&down("n1")).await.unwrap();
    let a = raw.answer(DEADLINE).await;
    assert_eq!((a.status, a.index()), (200, wrote));
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert!(a.header("date").is_some());
    let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(
        (v["ID"].as_str(), v["Status"].as_str()),
        (Some("n1"), Some("down"))
    );
    assert_eq!(
        waiting(&agents).await,
        0,
        "the place is freed with the answer"
    );

    // Two requests in one write (pipelined): answered in order.
    raw.send(&format!(
        "GET /v1/node/n1?index={wrote}&wait=200ms HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /v1/node/ghost HTTP/1.1\r\nHost: a\r\n\r\n"
    ))
    .await;
    let start = Instant::now();
    let timed_out = raw.answer(DEADLINE).await;
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_eq!((timed_out.status, timed_out.index()), (200, wrote));
    let missing = raw.answer(DEADLINE).await;
    assert_eq!(missing.status, 404);

    // A write on the same connection (hyper serves it and what follows)…
    let body = serde_json::to_string(&down("n2")).unwrap();
    raw.send(&format!(
        "POST /v1/commands HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    ))
    .await;
    assert_eq!(raw.answer(DEADLINE).await.status, 200);
    // … and a blocking read after it still waits and answers.
    let now = c.apply(&down("n1")).await.unwrap();
    raw.get(&format!("/v1/node/n1?index={now}&wait=1m")).await;
    until_waiting(&agents, 1).await;
    let again = c
        .apply(&Command::UpdateNodeStatus {
            id: Id::from("n1"),
            status: NodeStatus::Ready,
        })
        .await
        .unwrap();
    assert_eq!(raw.answer(DEADLINE).await.index(), again);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_reads_hold_their_place_until_answered_or_abandoned() {
    let agents = Agents::start_with(1, None, |c| c.limits.blocking_queries = 2).await;
    let c = agents.client(0);
    let index = c
        .apply(&Command::UpsertNode {
            node: node("n1", "ebs"),
        })
        .await
        .unwrap();
    let mut a = Raw::open(&agents).await;
    let mut b = Raw::open(&agents).await;
    a.get(&format!("/v1/node/n1?index={index}&wait=1m")).await;
    b.get(&format!("/v1/node/n1?index={index}&wait=1m")).await;
    until_waiting(&agents, 2).await;
    // At the limit: a third is refused, the two keep waiting.
    let mut third = Raw::open(&agents).await;
    third
        .get(&format!("/v1/node/n1?index={index}&wait=1m"))
        .await;
    let refused = third.answer(DEADLINE).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after"), Some("1"));
    // A client that leaves frees its place at once.
    drop(a);
    until_waiting(&agents, 1).await;
    third
        .get(&format!("/v1/node/n1?index={index}&wait=1m"))
        .await;
    until_waiting(&agents, 2).await;
    // The agent stops: every parked read answers with what is there.
    let stopping = tokio::spawn(agents.shutdown());
    let (ab, at) = (b.answer(DEADLINE).await, third.answer(DEADLINE).await);
    assert_eq!((ab.status, ab.index()), (200, index));
    assert_eq!((at.status, at.index()), (200, index));
    stopping.await.unwrap();
}
