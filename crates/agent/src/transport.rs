//! [`HttpTransport`]: the Raft RPCs as `POST /v1/raft/rpc` on the agents' public port
//! — a postcard-encoded [`RpcRequest`] in, its [`RpcAnswer`] out — so one port carries
//! the API and Raft. Each request is signed with the cluster key and each answer
//! checked against it ([`ClusterKey`]); a client token is never sent to a peer.

use std::time::Duration;

use hyper::Method;
use schedstate_raft::wire::{RpcAnswer, RpcRequest, SNAPSHOT_INSTALL_DEADLINE, Transport};
use schedstate_raft::{NodeId, RpcFailure};

use crate::cluster_key::{CLUSTER_AUTH_HEADER, ClusterKey};
use crate::outbound::{HttpClient, PeerDialer};
use crate::tls::{Tls, TlsError};

/// The path of the Raft RPC endpoint.
pub const RAFT_RPC_PATH: &str = "/v1/raft/rpc";

/// The content type of its bodies.
pub const RAFT_RPC_CONTENT_TYPE: &str = "application/x-schedstate-raft";

/// The largest Raft RPC body, either way (a batch of entries, a snapshot chunk).
pub use schedstate_raft::wire::MAX_RPC_BYTES;

/// One server's way to the others over HTTP. Cheap to clone (a pooled client).
#[derive(Clone, Debug)]
pub struct HttpTransport {
    http: HttpClient,
    key: Option<ClusterKey>,
    scheme: &'static str,
}

impl HttpTransport {
    /// A transport signing its RPCs with `key` (none: `--dev`, or mutual TLS alone),
    /// over HTTPS with `tls` (presenting this server's certificate, taking only peers
    /// with a server certificate of the cluster's CA), else plain HTTP.
    ///
    /// # Errors
    /// TLS without a CA, or the HTTP client cannot be built.
    pub fn new(
        key: Option<ClusterKey>,
        tls: Option<&Tls>,
    ) -> Result<HttpTransport, TransportError> {
        HttpTransport::with_source(key, tls, None)
    }

    /// [`new`](Self::new), its connections leaving from `source` (the agent's bind
    /// address) when that address can reach the peer.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_source(
        key: Option<ClusterKey>,
        tls: Option<&Tls>,
        source: Option<std::net::IpAddr>,
    ) -> Result<HttpTransport, TransportError> {
        let dialer = PeerDialer::new(tls, source)?;
        let http = dialer.client(Duration::from_secs(2));
        Ok(HttpTransport {
            http,
            key,
            scheme: dialer.scheme(),
        })
    }
}

/// Why a transport could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The TLS material cannot make a server-to-server config.
    #[error("TLS between servers: {0}")]
    Tls(#[from] TlsError),
}

/// How long one RPC may take, whole: an append of a full batch or a snapshot chunk
/// to a server that fsyncs (a paused server must not hold its caller longer). The
/// last chunk of a snapshot waits for its install: [`SNAPSHOT_INSTALL_DEADLINE`].
const RPC_DEADLINE: Duration = Duration::from_secs(10);

impl Transport for HttpTransport {
    async fn call(
        &self,
        target: NodeId,
        addr: &str,
        request: RpcRequest,
    ) -> Result<RpcAnswer, RpcFailure> {
        let protocol = |reason: String| RpcFailure::Protocol { target, reason };
        let unreachable = |reason: String| RpcFailure::Unreachable { target, reason };
        let body = request.encode().map_err(|e| protocol(e.to_string()))?;
        if body.len() > MAX_RPC_BYTES {
            // A batch of entries is split by openraft on this answer.
            return Err(request.too_large(target, body.len()));
        }
        let deadline = if request.installs_a_snapshot() {
            SNAPSHOT_INSTALL_DEADLINE
        } else {
            RPC_DEADLINE
        };
        let signed = self.key.as_ref().map(|key| key.sign_request(&body));
        let mut headers = vec![("content-type", RAFT_RPC_CONTENT_TYPE)];
        if let Some((header, _)) = &signed {
            headers.push((CLUSTER_AUTH_HEADER, header.as_str()));
        }
        // An answer is read up to the limit, never to whatever length it claims.
        let answer = self
            .http
            .call(
                Method::POST,
                &format!("{}://{addr}{RAFT_RPC_PATH}", self.scheme),
                &headers,
                body.into(),
                MAX_RPC_BYTES,
                deadline,
            )
            .await
            .map_err(|e| {
                if e.is_too_large() {
                    protocol(format!("{addr}: {e}"))
                } else {
                    unreachable(format!("{addr}: {e}"))
                }
            })?;
        let body_mac = signed.map(|(_, mac)| mac);
        let status = answer.status;
        let mac = answer
            .headers
            .get(CLUSTER_AUTH_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = answer.body;
        if !status.is_success() {
            return Err(protocol(format!(
                "{addr} answered {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )));
        }
        if let (Some(key), Some(body_mac)) = (&self.key, &body_mac) {
            key.verify_answer(body_mac, mac.as_deref(), &bytes)
                .map_err(|e| protocol(format!("{addr}: the answer: {e}")))?;
        }
        RpcAnswer::decode(&bytes).map_err(|e| protocol(format!("{addr}: {e}")))
    }
}
