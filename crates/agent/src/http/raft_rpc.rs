//! `POST /v1/raft/rpc`: the servers' Raft RPCs. Taken only from a server of the
//! cluster — one whose request carries a valid MAC under the cluster key — and only
//! within bounds; the client token plays no part. In order, before anything reaches
//! Raft:
//!
//! 1. the head: the cluster key's head MAC (the time and the body's length), the
//!    content type, the claimed length against [`MAX_RPC_BYTES`] — a stranger is
//!    refused before a byte of the body is read;
//! 2. room for the body in the agent's budget of bytes in flight (429 otherwise), the
//!    body read within the body timeout, its MAC checked;
//! 3. the RPC decoded (no trailing bytes) and checked by `schedstate_raft` against
//!    this server's state (terms, consecutive entries, membership, snapshot offsets)
//!    before openraft sees it.
//!
//! With TLS and a CA, the connection must also have presented a server certificate
//! of the cluster's CA (mutual TLS, checked first); that alone authenticates a server
//! when no cluster key is configured.
//!
//! The answer carries a MAC of its own, so the sender knows it came from a server.
//! Without a cluster key or mutual TLS the route refuses everything, unless the agent
//! runs `--dev`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schedstate_raft::wire::{RpcRequest, answer_rpc};

use super::body::{BodyRule, check_head, read_checked};
use super::error::ApiError;
use super::{AppState, Connection};
use crate::cluster_key::{CLUSTER_AUTH_HEADER, ClusterKeyError};
use crate::tls::PeerRole;
use crate::transport::{MAX_RPC_BYTES, RAFT_RPC_CONTENT_TYPE};
use axum::Extension;

const RULE: BodyRule = BodyRule {
    limit: MAX_RPC_BYTES,
    content_type: RAFT_RPC_CONTENT_TYPE,
};

fn refused(e: &ClusterKeyError) -> ApiError {
    match e {
        ClusterKeyError::Missing => {
            ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", e.to_string())
        }
        ClusterKeyError::Malformed => ApiError::bad_request(e.to_string()),
        ClusterKeyError::Skewed(_) => {
            ApiError::new(StatusCode::FORBIDDEN, "ClockSkew", e.to_string())
        }
        _ => ApiError::new(StatusCode::FORBIDDEN, "Forbidden", e.to_string()),
    }
}

pub(crate) async fn raft_rpc(
    State(st): State<AppState>,
    conn: Option<Extension<Connection>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let role = conn.map_or(PeerRole::Anonymous, |Extension(c)| c.role);
    match answer(&st, role, &headers, body).await {
        Ok(r) => r,
        Err(e) => {
            st.metrics.raft_rpcs_refused.inc();
            tracing::debug!(kind = %e.body.kind, message = %e.body.message, "Raft RPC refused");
            e.into_response()
        }
    }
}

async fn answer(
    st: &crate::service::Service,
    role: PeerRole,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if let Some(why) = st.fatal.get() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Stopped",
            format!("this server's Raft stopped: {why}"),
        ));
    }
    // With a CA, servers prove themselves by certificate too: a connection without
    // one, or with a client's, sends no Raft RPC whatever key it holds.
    let mutual_tls = st.tls.as_ref().is_some_and(|t| t.has_ca());
    if mutual_tls && role != PeerRole::Server {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "NotAServer",
            "Raft RPCs need a server certificate of this cluster's CA (server.<region>.schedstate)",
        ));
    }
    let claimed = super::body::content_length(headers)?;
    let signed = match &st.cluster_key {
        Some(key) => {
            let given = headers
                .get(CLUSTER_AUTH_HEADER)
                .and_then(|v| v.to_str().ok());
            Some(key.verify_head(given, claimed).map_err(|e| refused(&e))?)
        }
        None if st.dev || mutual_tls => None,
        None => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "NoClusterKey",
                "this agent has no cluster key: it takes Raft RPCs from no one",
            ));
        }
    };
    check_head(headers, &RULE)?;
    // Authenticated by its head (and certificate): the servers' own budget.
    let read = read_checked(st, st.gates.raft_body(), body, RULE.limit).await?;
    if let (Some(key), Some(head)) = (&st.cluster_key, &signed) {
        key.verify_body(head, &read.bytes)
            .map_err(|e| refused(&e))?;
    }
    let request =
        RpcRequest::decode(&read.bytes).map_err(|e| ApiError::bad_request(e.to_string()))?;
    drop(read);
    let answer = answer_rpc(&st.server, request)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "RaftRpcRefused", e.to_string()))?;
    // A server heard from: what `X-Nomad-LastContact` measures on a follower.
    *st.last_contact.lock() = Some(std::time::Instant::now());
    let bytes = answer.encode().map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            format!("encoding the answer: {e}"),
        )
    })?;
    let mac = match (&st.cluster_key, &signed) {
        (Some(key), Some(head)) => HeaderValue::from_str(&key.sign_answer(head, &bytes)).ok(),
        _ => None,
    };
    let mut resp = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, RAFT_RPC_CONTENT_TYPE)],
        bytes,
    )
        .into_response();
    if let Some(mac) = mac {
        resp.headers_mut().insert(CLUSTER_AUTH_HEADER, mac);
    }
    Ok(resp)
}
