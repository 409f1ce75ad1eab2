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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::network::RpcFailure;
use crate::wire::{MAX_RPC_BYTES, RpcAnswer, RpcRequest, Transport, answer_or_refuse};
use crate::{NodeId, Server};

/// The largest frame sent or accepted (a snapshot chunk, a batch of entries): the
/// wire's [`MAX_RPC_BYTES`].
pub const MAX_FRAME: u32 = MAX_RPC_BYTES as u32;

/// A frame's bytes, or why there are none.
enum Frame {
    Bytes(Vec<u8>),
    TooLarge(usize),
}

fn encode_frame(payload: Vec<u8>) -> Frame {
    if payload.len() > MAX_RPC_BYTES {
        return Frame::TooLarge(payload.len());
    }
    let mut buf = Vec::with_capacity(payload.len() + 4);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&payload);
    Frame::Bytes(buf)
}

/// Reads one frame's payload. The length in its header is a claim: the buffer grows
/// as bytes arrive, never to the claim at once, and a claim over [`MAX_FRAME`] is
/// refused before anything is read.
async fn read_frame(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes exceeds the limit"
        )));
    }
    let mut buf = Vec::with_capacity((len as usize).min(64 << 10));
    let read = (&mut *stream)
        .take(u64::from(len))
        .read_to_end(&mut buf)
        .await?;
    if read != len as usize {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(buf)
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

    /// A pooled connection to `addr` that the peer has not closed. A server that
    /// restarted closed every connection it had: taking one of those would lose the
    /// next RPC — a vote request lost costs an election timeout (a leadership
    /// hand-over to a server that the old leader's connections predate took 350 ms
    /// instead of 30, or failed). An idle connection has nothing to read; one that
    /// reads end-of-stream (or anything) is dropped.
    fn pooled(&self, addr: &str) -> Option<TcpStream> {
        let mut pool = self.pool.lock();
        let idle = pool.get_mut(addr)?;
        while let Some(stream) = idle.pop() {
            let mut probe = [0u8; 1];
            if matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            {
                return Some(stream);
            }
        }
        None
    }

    async fn call(
        &self,
        target: NodeId,
        addr: &str,
        request: RpcRequest,
    ) -> Result<RpcAnswer, RpcFailure> {
        let pooled = self.pooled(addr);
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
        let payload = request.encode().map_err(|e| RpcFailure::Protocol {
            target,
            reason: e.to_string(),
        })?;
        let frame = match encode_frame(payload) {
            Frame::Bytes(b) => b,
            Frame::TooLarge(n) => return Err(request.too_large(target, n)),
        };
        stream
            .write_all(&frame)
            .await
            .map_err(|e| RpcFailure::Unreachable {
                target,
                reason: format!("send to {addr}: {e}"),
            })?;
        let bytes = read_frame(&mut stream)
            .await
            .map_err(|e| RpcFailure::Unreachable {
                target,
                reason: format!("answer from {addr}: {e}"),
            })?;
        let answer = RpcAnswer::decode(&bytes).map_err(|e| RpcFailure::Protocol {
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
        let bytes = read_frame(&mut stream).await?;
        let answer = match RpcRequest::decode(&bytes) {
            Ok(request) => answer_or_refuse(&server, request).await,
            Err(refused) => RpcAnswer::Refused(refused.to_string()),
        };
        drop(bytes);
        let payload = answer.encode().map_err(std::io::Error::other)?;
        match encode_frame(payload) {
            Frame::Bytes(b) => stream.write_all(&b).await?,
            Frame::TooLarge(n) => {
                return Err(std::io::Error::other(format!(
                    "an answer of {n} bytes exceeds the limit"
                )));
            }
        }
    }
}
