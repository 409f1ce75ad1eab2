//! The HTTP side of the agent: one axum router on one port for the public API and
//! the Raft RPCs.
//!
//! | file | what |
//! |---|---|
//! | `guard.rs` | the token check (every route), consistent reads (leader check, or proxy to the leader) |
//! | `reads.rs` | `GET` of nodes, allocations, plugins, volumes — all blocking queries |
//! | `writes.rs` | `POST /v1/commands` |
//! | `stream.rs` | `GET /v1/event/stream` |
//! | `operator.rs` | status, Raft configuration and peers, snapshot, metrics, `/v1/agent/self`, the Raft RPC endpoint |
//! | `query.rs`, `error.rs` | strict query parameters; error answers |

mod error;
mod guard;
mod operator;
pub(crate) mod query;
mod reads;
mod stream;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schedstate::model::CsiVolume;
use schedstate_raft::Server;
use serde::Serialize;
use tokio::sync::watch;

pub use error::ApiError;

use crate::api::{INDEX_HEADER, KNOWN_LEADER_HEADER, NOMAD_INDEX_HEADER};
use crate::events::EventBuffer;
use crate::metrics::Metrics;

/// What every handler shares.
pub(crate) struct Shared {
    pub server: Server,
    pub events: Arc<EventBuffer>,
    pub metrics: Arc<Metrics>,
    pub token: Option<String>,
    pub max_wait: Duration,
    pub heartbeat: Duration,
    /// For proxying consistent reads to the leader.
    pub proxy: reqwest::Client,
    /// Turns `true` when the agent stops: blocking queries and streams end.
    pub stopping: watch::Receiver<bool>,
}

pub(crate) type AppState = Arc<Shared>;

/// Secrets never leave the server.
pub(crate) fn redact(v: &mut CsiVolume) {
    for value in v.secrets.values_mut() {
        *value = "<redacted>".to_string();
    }
}

/// A JSON answer with the index headers.
pub(crate) fn json<T: Serialize + ?Sized>(
    st: &Shared,
    status: StatusCode,
    index: u64,
    value: &T,
    pretty: bool,
) -> Response {
    let body = if pretty {
        serde_json::to_vec_pretty(value)
    } else {
        serde_json::to_vec(value)
    };
    let mut resp = match body {
        Ok(mut b) => {
            if pretty {
                b.push(b'\n');
            }
            (status, [(header::CONTENT_TYPE, "application/json")], b).into_response()
        }
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            format!("encoding the answer: {e}"),
        )
        .into_response(),
    };
    with_index(st, &mut resp, index);
    resp
}

/// Adds `X-Schedstate-Index`, `X-Nomad-Index` and the known-leader header.
pub(crate) fn with_index(st: &Shared, resp: &mut Response, index: u64) {
    let h = resp.headers_mut();
    let v = HeaderValue::from(index);
    h.insert(INDEX_HEADER, v.clone());
    h.insert(NOMAD_INDEX_HEADER, v);
    h.insert(
        KNOWN_LEADER_HEADER,
        HeaderValue::from_static(if st.server.leader().is_some() {
            "true"
        } else {
            "false"
        }),
    );
}

/// The router: every route, the consistency guard on the reads, the token guard on
/// everything.
pub(crate) fn router(st: AppState) -> Router {
    let reads = Router::new()
        .route("/v1/nodes", get(reads::nodes))
        .route("/v1/node/{id}", get(reads::node))
        .route("/v1/node/{id}/allocations", get(reads::node_allocations))
        .route("/v1/allocation/{id}", get(reads::allocation))
        .route("/v1/plugins", get(reads::plugins))
        .route("/v1/plugin/csi/{id}", get(reads::plugin))
        .route("/v1/volumes", get(reads::volumes))
        .route("/v1/volume/csi/{id}", get(reads::volume))
        .route("/v1/operator/snapshot", get(operator::snapshot))
        .route("/v1/operator/raft/peer", post(operator::change_peer))
        .route_layer(from_fn_with_state(st.clone(), guard::consistent));
    Router::new()
        .merge(reads)
        .route("/v1/commands", post(writes::command))
        .route("/v1/event/stream", get(stream::events))
        .route("/v1/status/leader", get(operator::leader))
        .route("/v1/status/peers", get(operator::peers))
        .route(
            "/v1/operator/raft/configuration",
            get(operator::raft_configuration),
        )
        .route("/v1/metrics", get(operator::metrics))
        .route("/v1/agent/self", get(operator::agent_self))
        .route(crate::transport::RAFT_RPC_PATH, post(operator::raft_rpc))
        .fallback(not_found)
        .layer(from_fn_with_state(st.clone(), guard::token))
        .with_state(st)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NoSuchPath",
        format!("no endpoint at {}", uri.path()),
    )
}
