//! The network over TCP: each RPC is one request frame and one answer frame on a
//! pooled connection.
//!
//! ```text
//! frame := LEN u32 (little-endian) | postcard(RpcRequest or RpcAnswer)
//! ```
//! A frame over [`MAX_FRAME`] is refused before anything is allocated for it. A
//! connection that fails in any way is dropped (a new one is made for the next RPC);
//! nothing is retried here — openraft retries replication itself, and a forwarded
//! proposal's outcome is then unknown, which the caller is told.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::network::RpcFailure;
use crate::wire::{RpcAnswer, RpcRequest, Transport, answer_rpc};
use crate::{NodeId, Server};

/// The largest frame sent or accepted (a snapshot chunk, a batch of entries).
pub const MAX_FRAME: u32 = 256 << 20;

async fn write_frame<T: Serialize>(stream: &mut TcpStream, value: &T) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4];
    buf = postcard::to_extend(value, buf).map_err(std::io::Error::other)?;
    let len = u32::try_from(buf.len() - 4)
        .ok()
        .filter(|n| *n <= MAX_FRAME)
        .ok_or_else(|| {
            std::io::Error::other(format!("frame of {} bytes is too large", buf.len()))
        })?;
    buf[0..4].copy_from_slice(&len.to_le_bytes());
    stream.write_all(&buf).await
}

async fn read_frame<T: for<'de> Deserialize<'de>>(stream: &mut TcpStream) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes exceeds the limit"
        )));
    }
    let mut buf = vec![0u8; len as usize];
    stream.read_exact(&mut buf).await?;
    postcard::from_bytes(&buf).map_err(std::io::Error::other)
}

/// One server's network over TCP. Cheap to clone; clones share the connection pool.
#[derive(Clone, Default)]
pub struct TcpNetwork {
    pool: Arc<Mutex<HashMap<String, Vec<TcpStream>>>>,
}

impl TcpNetwork {
    /// A network with no connections yet (they are made on first use).
    pub fn new() -> Self {
        Self::default()
    }

    async fn call(
        &self,
        target: NodeId,
        addr: &str,
        request: RpcRequest,
    ) -> Result<RpcAnswer, RpcFailure> {
        let pooled = self.pool.lock().get_mut(addr).and_then(Vec::pop);
        let mut stream = match pooled {
            Some(s) => s,
            None => TcpStream::connect(addr)
                .await
                .map_err(|e| RpcFailure::Unreachable {
                    target,
                    reason: format!("connect to {addr}: {e}"),
                })?,
        };
        let _ = stream.set_nodelay(true);
        write_frame(&mut stream, &request)
            .await
            .map_err(|e| RpcFailure::Unreachable {
                target,
                reason: format!("send to {addr}: {e}"),
            })?;
        let answer: RpcAnswer =
            read_frame(&mut stream)
                .await
                .map_err(|e| RpcFailure::Unreachable {
                    target,
                    reason: format!("answer from {addr}: {e}"),
                })?;
        self.pool
            .lock()
            .entry(addr.to_string())
            .or_default()
            .push(stream);
        Ok(answer)
    }
}

impl Transport for TcpNetwork {
    async fn call(
        &self,
        target: NodeId,
        addr: &str,
        request: RpcRequest,
    ) -> Result<RpcAnswer, RpcFailure> {
        TcpNetwork::call(self, target, addr, request).await
    }
}

/// A running TCP endpoint for one server's Raft RPCs and forwarded proposals.
pub struct TcpEndpoint {
    addr: SocketAddr,
    accept: JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl TcpEndpoint {
    /// Serves `server` on `listener` (bound by the caller: an OS-picked port in tests,
    /// the configured one in an agent) until [`stop`](Self::stop) or drop.
    ///
    /// # Errors
    /// The listener's address cannot be read.
    pub fn serve(listener: TcpListener, server: Server) -> std::io::Result<TcpEndpoint> {
        let addr = listener.local_addr()?;
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let tracked = connections.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of descriptors, or the like: wait rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let server = server.clone();
                let task = tokio::spawn(async move {
                    let _ = serve_connection(stream, server).await;
                });
                let mut open = tracked.lock();
                open.retain(|t| !t.is_finished());
                open.push(task.abort_handle());
            }
        });
        Ok(TcpEndpoint {
            addr,
            accept,
            connections,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections and closes the open ones (peers then reconnect,
    /// to whatever listens on the address next).
    pub fn stop(&self) {
        self.accept.abort();
        for c in self.connections.lock().drain(..) {
            c.abort();
        }
    }
}

impl Drop for TcpEndpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve_connection(mut stream: TcpStream, server: Server) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    loop {
        let request: RpcRequest = read_frame(&mut stream).await?;
        let answer = answer_rpc(&server, request).await;
        write_frame(&mut stream, &answer).await?;
    }
}
