//! The HTTP floor (`-floor`): what a write costs over this HTTP stack when the server
//! does no work at all. A child process (this binary again, `--floor-server`) serves
//! HTTP/1 with hyper over the agents' own TLS configuration (the same certificate,
//! ALPN and cipher suites; `-security dev`: plain TCP) and answers every request with
//! `{"index":n}` once it has read the body — no routing, no token check, no Raft.
//! The same writers as the write phase (the same [`Client`], commands, token and
//! connection pool) drive it at each `-clients` count.
//!
//! What it separates: a commit over HTTP costs the in-process commit (the Raft
//! cluster's work, `raft_workload`) plus this floor plus what the agent's request
//! path adds (routing, middleware, token check, decoding, the proposal's hand-off).
//! On a machine where the clients share the servers' cores, the floor alone caps
//! what fraction of the in-process throughput HTTP can reach.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use schedstate_agent::{Tls, TlsFiles, TlsOptions};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::Flags;
use crate::cluster::Cluster;
use crate::report::{Out, num};
use crate::system::cpu_cell;
use crate::writes::{Rates, Window, Work, measure_window};

/// The first argument that makes this binary the floor's server.
pub const SERVE_ARG: &str = "--floor-server";

/// The child's `main`: `--floor-server <dir> <tls|plain>` serves on a free loopback
/// port (printed on stdout) with `dir`'s `server-0.pem`, `server-0-key.pem` and
/// `ca.pem` for TLS, until its stdin closes (the parent exited or is done).
pub fn serve_main(args: &[String]) -> ! {
    let dir = Path::new(args.first().expect("--floor-server DIR tls|plain"));
    let tls = match args.get(1).map(String::as_str) {
        Some("tls") => Some(
            Tls::load(TlsOptions::new(TlsFiles {
                cert: dir.join("server-0.pem"),
                key: dir.join("server-0-key.pem"),
                ca: Some(dir.join("ca.pem")),
            }))
            .expect("the bench cluster's TLS files"),
        ),
        Some("plain") => None,
        _ => panic!("--floor-server DIR tls|plain"),
    };
    // The agent's runtime: a worker per core (`schedstate agent`).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("address");
    println!("{addr}");
    std::io::stdout().flush().expect("stdout");
    // Ends with the parent: its end of our stdin closes when it drops the child.
    std::thread::spawn(|| {
        let mut sink = String::new();
        while std::io::stdin().lock().read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
        std::process::exit(0);
    });
    rt.block_on(accept_loop(listener, tls));
    std::process::exit(0)
}

/// Accepts connections and serves each in its own task, as the agent does.
async fn accept_loop(listener: TcpListener, tls: Option<Tls>) {
    let index = Arc::new(AtomicU64::new(0));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let tls = tls.clone();
        let index = index.clone();
        tokio::spawn(async move {
            match tls {
                Some(tls) => {
                    if let Ok(s) = tls.acceptor().accept(stream).await {
                        serve_conn(TokioIo::new(s), index).await;
                    }
                }
                None => serve_conn(TokioIo::new(stream), index).await,
            }
        });
    }
}

/// HTTP/1 with keep-alive on one connection; every request answered at once.
async fn serve_conn<IO>(io: TokioIo<IO>, index: Arc<AtomicU64>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let index = index.clone();
        async move {
            // The body is read whole, as the agent reads a command's.
            let _ = req.into_body().collect().await;
            let n = index.fetch_add(1, Ordering::Relaxed) + 1;
            let body = format!("{{\"index\":{n}}}");
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
        }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .serve_connection(io, service)
        .await;
}

/// The floor's server process, stopped (killed) when dropped.
struct FloorServer {
    child: Child,
    addr: SocketAddr,
}

impl FloorServer {
    fn spawn(cluster: &Cluster) -> FloorServer {
        let exe = std::env::current_exe().expect("this binary");
        let mode = if cluster.tls() { "tls" } else { "plain" };
        let mut child = Command::new(exe)
            .arg(SERVE_ARG)
            .arg(cluster.root.path())
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the floor server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("its address");
        let addr = line.trim().parse().expect("an address");
        FloorServer { child, addr }
    }
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the floor at each `-clients` count: a table and `floor` in the JSON.
pub async fn run_floor(f: &Flags, out: &mut Out, cluster: &Cluster, work: &Arc<Work>) {
    let server = FloorServer::spawn(cluster);
    let pid = [server.child.id()];
    let client = cluster.client_at(&server.addr.to_string());
    out.line(format!(
        "floor: POST /v1/commands to a server that answers at once ({}, hyper HTTP/1, no work; pid {}), the same clients and commands",
        if cluster.tls() { "the agents' TLS" } else { "no TLS" },
        pid[0]
    ));
    out.line(format!(
        "  {:>7} {:>9} {:>8} {:>8} {:>8} {:>6}  {:>15} {:>9}",
        "clients", "writes/s", "p50 ms", "p99 ms", "max ms", "errors", "cores s/b/f", "cpu µs/w"
    ));
    let mut rows = Vec::new();
    for (p, &c) in f.clients.iter().enumerate() {
        let mut window = measure_window(f, &client, work, c, p, &pid, None).await;
        let Rates {
            n,
            lat,
            rate,
            cpu_us,
        } = window.rates(f.secs);
        let Window { errors, cpu, .. } = window;
        out.line(format!(
            "  {c:>7} {rate:>9} {:>8.3} {:>8.3} {:>8.3} {errors:>6}  {:>15} {cpu_us:>9.0}",
            num(&lat, "p50_ms"),
            num(&lat, "p99_ms"),
            num(&lat, "max_ms"),
            cpu_cell(&cpu)
        ));
        rows.push(json!({
            "clients": c,
            "writes": n,
            "writes_per_s": rate,
            "latency": lat,
            "errors": errors,
            "cpu": cpu,
            "cpu_us_per_write": cpu_us.round(),
        }));
    }
    out.put("floor", Value::Array(rows));
}
