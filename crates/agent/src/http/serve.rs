//! The accept loop: hyper's HTTP/1 server under the agent's connection limits, in place
//! of `axum::serve` (which sets no timer, so no timeout at all).
//!
//! - A connection over the per-client or total limit is closed as soon as it is
//!   accepted: a client holding many idle connections shuts out only itself.
//! - Each request's head must arrive within the header-read timeout; hyper starts
//!   that timer whenever a connection waits for a request, so an idle keep-alive
//!   connection is closed after it too, and a slowloris client is cut off.
//! - Running out of file descriptors does not stop the loop: it pauses and goes on.
//! - On stop, every connection is asked to finish its request in flight and close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::service::Service;

/// The largest request head hyper buffers (Nomad's clients send a few hundred bytes).
const MAX_HEAD_BYTES: usize = 64 << 10;

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
        .max_buf_size(MAX_HEAD_BYTES.max(8192))
        .keep_alive(true);
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
        let Some(permit) = st.gates.connection(peer.ip()) else {
            st.metrics.connections_refused.inc();
            drop(stream);
            continue;
        };
        let conn = serve_one(&http, stream, peer, app.clone(), stopping.clone());
        conns.spawn(async move {
            conn.await;
            drop(permit);
        });
    }
    // Stopping: connections finish their request in flight; the agent waits for them
    // (bounded by its own shutdown deadline).
    while conns.join_next().await.is_some() {}
}

fn serve_one(
    http: &http1::Builder,
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    mut stopping: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let _ = stream.set_nodelay(true);
    let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    async move {
        let mut conn = std::pin::pin!(conn);
        let stop = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        let result = tokio::select! {
            r = conn.as_mut() => r,
            () = stop => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}
