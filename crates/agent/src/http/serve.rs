//! The accept loop: hyper's HTTP/1 server under the agent's connection limits, in place
//! of `axum::serve` (which sets no timer, so no timeout at all).
//!
//! - A connection over the per-client or total limit is closed as soon as it is
//!   accepted: a client holding many idle connections shuts out only itself. With
//!   mutual TLS, a server's connection is never shut out by clients
//!   (`service/connections.rs`).
//! - Each request's head must arrive within the header-read timeout; hyper starts
//!   that timer whenever a connection waits for a request, so an idle keep-alive
//!   connection is closed after it too, and a slowloris client is cut off.
//! - Running out of file descriptors does not stop the loop: it pauses and goes on.
//! - A connection whose writes make no progress for the write timeout is ended
//!   (`stall.rs`): a client that never reads its answer frees what it held; its
//!   kernel send buffer is fixed (`send_buffer_bytes`), not left to grow to 4 MiB.
//! - With TLS, the handshake runs in the connection's own task within the
//!   header-read timeout; a failure is counted and logged once a minute per address.
//!   What the client's certificate proved ([`Connection`]) goes with every request.
//! - On stop, every connection is asked to finish its request in flight and close.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

use super::stall::StallGuard;
use crate::service::{Admission, Service};
use crate::tls::PeerRole;

/// The largest request head taken (Nomad's clients send a few hundred bytes).
const MAX_HEAD_BYTES: usize = 64 << 10;

/// hyper's read buffer limit. hyper refuses a head once its buffer holds this much
/// without the head's end — but the buffer may grow by one more read first, so a
/// limit of N takes heads up to nearly 2N (a 100 KB head passed a limit of 64 KiB):
/// half of [`MAX_HEAD_BYTES`] keeps every head within it.
const HYPER_BUF_BYTES: usize = MAX_HEAD_BYTES / 2;

/// Serves `app` on `listener` until `stopping` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    st: Arc<Service>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(st.limits.header_read_timeout)
        .max_buf_size(HYPER_BUF_BYTES.max(8192))
        .keep_alive(true);
    let http = Arc::new(http);
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE, ENFILE, ECONNABORTED…: the listener is fine; give the
                // process a moment to close something.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // With mutual TLS, a connection over the client caps may still be a server's:
        // its handshake tells (`service/connections.rs`).
        let servers_provable = st.tls.as_ref().is_some_and(|t| t.has_ca());
        let Some(admission) = st.gates.conns.admit(peer.ip(), servers_provable) else {
            st.metrics.connections_refused.inc();
            drop(stream);
            continue;
        };
        let open = st.metrics.connection_opened();
        let conn = serve_one(
            &http,
            stream,
            peer,
            app.clone(),
            st.clone(),
            stopping.clone(),
            admission,
        );
        conns.spawn(async move {
            conn.await;
            drop(open);
        });
    }
    // Stopping: the port closes first, so a client connecting now is refused at once
    // and goes to another server (left open, the kernel would queue its connection
    // unanswered until the process exits: a write stalled for the whole drain).
    drop(listener);
    // Connections finish their request in flight; the agent waits for them (bounded
    // by its own shutdown deadline).
    while conns.join_next().await.is_some() {}
}

/// What the accept loop knows of a connection, in each of its requests' extensions:
/// whether it is TLS and what its client certificate proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Connection {
    /// The peer's role (`Anonymous` without TLS or without a certificate).
    pub role: PeerRole,
    /// The peer's address: what its requests count against ([`ClientKeys`]).
    ///
    /// [`ClientKeys`]: crate::service::ClientKeys
    pub peer: std::net::IpAddr,
}

/// One connection's future, boxed: the connection's task lives as long as the
/// connection, and a future is as large as its largest state. With the TLS handshake
/// and both kinds of hyper connection inline (and the task's own copy of it), a plain
/// connection's task was 12 KiB (heaptrack under `schedstate bench clients`), the
/// largest part of a blocked client's cost; now its task holds a pointer, and the box
/// only the hyper connection it serves (about 1 KiB).
fn serve_one(
    http: &Arc<http1::Builder>,
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    st: Arc<Service>,
    stopping: watch::Receiver<bool>,
    admission: Admission,
) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
    let _ = stream.set_nodelay(true);
    // A fixed send buffer: the kernel would grow it to 4 MiB for a client that reads
    // nothing, and the agent would make that much of its answer or stream for it.
    let _ = socket2::SockRef::from(&stream).set_send_buffer_size(st.limits.send_buffer_bytes);
    // Under the guard from the first byte: TLS records are writes too.
    let stream = StallGuard::new(stream, st.limits.write_timeout);
    match st.tls.clone() {
        None => {
            let conn = Connection {
                role: PeerRole::Anonymous,
                peer: peer.ip(),
            };
            let head_timeout = st.limits.header_read_timeout;
            let http = http.clone();
            Box::pin(async move {
                serve_conn(http, stream, peer, app, conn, stopping, head_timeout).await;
                drop(admission);
            })
        }
        Some(tls) => Box::pin(serve_tls(
            http.clone(),
            tls,
            stream,
            peer,
            app,
            st,
            stopping,
            admission,
        )),
    }
}

/// The TLS handshake, then HTTP/1 over it.
#[allow(clippy::too_many_arguments)]
async fn serve_tls(
    http: Arc<http1::Builder>,
    tls: crate::tls::Tls,
    stream: StallGuard<TcpStream>,
    peer: SocketAddr,
    app: Router,
    st: Arc<Service>,
    stopping: watch::Receiver<bool>,
    admission: Admission,
) {
    // The handshake is bounded like a request head: a client that opens a connection
    // and sends nothing holds it no longer.
    let handshake = Box::pin(tokio::time::timeout(
        st.limits.header_read_timeout,
        tls.acceptor().accept(stream),
    ))
    .await;
    let stream = match handshake {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            st.metrics.tls_handshakes_failed.inc();
            st.handshake_failures.note(peer, &e.to_string());
            return;
        }
        Err(_) => {
            st.metrics.tls_handshakes_failed.inc();
            st.handshake_failures
                .note(peer, "no handshake within the header-read timeout");
            return;
        }
    };
    let role = tls.peer_role(stream.get_ref().1.peer_certificates());
    // A server's connection moves to the servers' count; one admitted on probation
    // that is no server's is closed now.
    let Some(admission) = st
        .gates
        .conns
        .after_handshake(admission, role == PeerRole::Server)
    else {
        st.metrics.connections_refused.inc();
        return;
    };
    let conn = Connection {
        role,
        peer: peer.ip(),
    };
    let head_timeout = st.limits.header_read_timeout;
    drop(st);
    serve_conn(http, stream, peer, app, conn, stopping, head_timeout).await;
    drop(admission);
}

/// Serves one connection: its plain GETs ourselves (`gets.rs`: a blocked client
/// holds no hyper buffers), then — from the first request that is anything else —
/// hyper, in a box of its own made only then.
async fn serve_conn<IO>(
    http: Arc<http1::Builder>,
    io: IO,
    peer: SocketAddr,
    app: Router,
    conn_info: Connection,
    mut stopping: watch::Receiver<bool>,
    head_timeout: Duration,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let rest = super::gets::serve_gets(io, &app, conn_info, &mut stopping, head_timeout).await;
    if let Some(rest) = rest {
        Box::pin(drive(
            &http,
            TokioIo::new(rest),
            peer,
            app,
            conn_info,
            stopping,
        ))
        .await;
    }
}

/// Serves HTTP/1 on one connection until it ends or the agent stops. The hyper
/// connection is made here, so the future holds it and not the builder.
fn drive<IO>(
    http: &http1::Builder,
    io: TokioIo<IO>,
    peer: SocketAddr,
    app: Router,
    conn_info: Connection,
    mut stopping: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let app = app.map_request(
        move |mut req: axum::extract::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(conn_info);
            req
        },
    );
    let mut conn = http.serve_connection(io, TowerToHyperService::new(app));
    async move {
        let stop = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        let result = tokio::select! {
            r = &mut conn => r,
            () = stop => {
                Pin::new(&mut conn).graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// TLS handshake failures, logged at most once a minute per client address (a port
/// scanner or a misconfigured client must not flood the log); the count is in the
/// metrics.
#[derive(Default)]
pub(crate) struct HandshakeFailures {
    last_logged: parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, Instant>>,
}

/// How often one address's handshake failures are logged.
const HANDSHAKE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Addresses remembered at most; past it the memory is cleared (and each address may
/// be logged once more).
const HANDSHAKE_LOG_ADDRESSES: usize = 4096;

impl HandshakeFailures {
    pub(crate) fn note(&self, peer: SocketAddr, why: &str) {
        let now = Instant::now();
        let mut last = self.last_logged.lock();
        if last.len() >= HANDSHAKE_LOG_ADDRESSES {
            last.clear();
        }
        let due = last
            .get(&peer.ip())
            .is_none_or(|t| now.duration_since(*t) >= HANDSHAKE_LOG_EVERY);
        if due {
            last.insert(peer.ip(), now);
            drop(last);
            tracing::warn!(client = %peer.ip(), error = %why, "TLS handshake failed (logged once a minute per address)");
        }
    }
}
