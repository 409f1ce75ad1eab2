//! [`HttpTransport`]: the Raft RPCs as `POST /v1/raft/rpc` on the agents' public port
//! — a postcard-encoded [`RpcRequest`] in, its [`RpcAnswer`] out — so one port carries
//! the API and Raft, and the token guards both.

use std::time::Duration;

use schedstate_raft::wire::{RpcAnswer, RpcRequest, Transport};
use schedstate_raft::{NodeId, RpcFailure};

/// The path of the Raft RPC endpoint.
pub const RAFT_RPC_PATH: &str = "/v1/raft/rpc";

/// The content type of its bodies.
pub const RAFT_RPC_CONTENT_TYPE: &str = "application/x-schedstate-raft";

/// One server's way to the others over HTTP. Cheap to clone (a pooled client).
#[derive(Clone, Debug)]
pub struct HttpTransport {
    http: reqwest::Client,
    token: Option<String>,
}

impl HttpTransport {
    /// A transport sending `token` as a bearer token when given.
    ///
    /// # Errors
    /// The HTTP client cannot be built (no TLS or resolver is involved; this does not
    /// happen in practice).
    pub fn new(token: Option<String>) -> Result<HttpTransport, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(HttpTransport { http, token })
    }
}

/// The innermost cause (reqwest's own message says only "error sending request").
fn root(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

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
        let mut req = self
            .http
            .post(format!("http://{addr}{RAFT_RPC_PATH}"))
            .header(reqwest::header::CONTENT_TYPE, RAFT_RPC_CONTENT_TYPE)
            .body(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| unreachable(format!("{addr}: {}", root(&e))))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| unreachable(format!("{addr}: {}", root(&e))))?;
        if !status.is_success() {
            return Err(protocol(format!(
                "{addr} answered {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )));
        }
        RpcAnswer::decode(&bytes).map_err(|e| protocol(format!("{addr}: {e}")))
    }
}
