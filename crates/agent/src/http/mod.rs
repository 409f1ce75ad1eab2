//! The HTTP side of the agent: one axum router on one port for the public API and
//! the Raft RPCs, served by our own accept loop. Each file is one resource or one
//! layer; handlers are thin adapters over the [`Service`].
//!
//! | file | what |
//! |---|---|
//! | `serve.rs` | the accept loop: connections per client and in all, header and idle timeouts |
//! | `stall.rs` | the write timeout: a connection whose client reads nothing is ended |
//! | `gets.rs`, `park.rs` | plain GETs served without hyper; a blocking read's wait parked on its connection |
//! | `answers.rs` | large answers: their unsent bytes budgeted per client, handed out in pieces |
//! | `list_body.rs` | a list's answer written as its reader takes it, a piece at a time |
//! | `auth.rs` | layers: a stopped Raft and browsers from other sites (every API route); the ACL token and its scope (per group of routes) |
//! | `acl.rs` | `/v1/acl/…`: bootstrap, tokens, the caller's own token |
//! | `consistency.rs` | in front of the reads: the leader's confirmation, a follower's read index (the read then runs on the follower), or the proxy |
//! | `proxy.rs` | a request sent on to the leader whole (operator routes; reads when the leader is too old for ReadIndex), at most 32 in flight per leader |
//! | `body.rs` | reading a body: content type, claimed and real size, budget, timeout |
//! | `blocking.rs` | every read as a blocking query; lists as scans (off the workers, budgeted) |
//! | `reads.rs` | `GET` of nodes, allocations, plugins, volumes — all blocking queries |
//! | `jobs.rs` | jobs: `GET` (blocking), register, stop and purge in Nomad's shapes |
//! | `node_writes.rs`, `volume_writes.rs` | the node, allocation and volume writes Nomad's clients make |
//! | `listing.rs` | Nomad's list parameters: prefix, filter, reverse, pages |
//! | `namespaces.rs` | the namespace a request names: one, or `*` for every one (lists only) |
//! | `writes.rs` | `POST /v1/commands`; `commit`, which every write goes through |
//! | `idempotency.rs` | `Idempotency-Key`: exactly-once writes, the replay mark |
//! | `stream.rs` | `GET /v1/event/stream` |
//! | `operator.rs` | status, Raft configuration and peers, snapshot (save, and restore into the cluster), metrics, `/v1/agent/self` |
//! | `peers.rs` | `POST /v1/operator/raft/peer`: add, remove, recover |
//! | `transfer.rs` | `POST /v1/operator/raft/transfer-leader`: hand the leadership over |
//! | `raft_rpc.rs` | `POST /v1/raft/rpc`: the servers' RPCs, under the cluster key |
//! | `query.rs`, `error.rs` | strict query parameters; error answers |
//! | `pretty.rs` | `?pretty`: the compact answer re-indented (one JSON serializer per answer type) |
//! | `ui.rs` | `GET /ui/`: the read-only web UI's compiled-in files, with their Content-Security-Policy |

mod acl;
mod answers;
mod auth;
mod blocking;
mod body;
mod consistency;
mod error;
mod gets;
mod idempotency;
mod jobs;
mod list_body;
mod listing;
mod namespaces;
mod node_writes;
mod operator;
mod park;
mod peers;
mod pretty;
mod proxy;
pub(crate) mod query;
mod raft_rpc;
mod reads;
mod serve;
mod stall;
mod stream;
mod transfer;
mod ui;
mod volume_writes;
mod writes;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Serialize;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{
    DefaultPredicate, NotForContentType, Predicate, SizeAbove,
};

pub use error::ApiError;
pub(crate) use proxy::ProxySlots;
pub(crate) use serve::{Connection, HandshakeFailures, serve};

use auth::Need;
use schedstate::model::AclScope;

use crate::api::{
    INDEX_HEADER, KNOWN_LEADER_HEADER, NOMAD_INDEX_HEADER, NOMAD_KNOWN_LEADER_HEADER,
    NOMAD_LAST_CONTACT_HEADER,
};
use crate::service::Service;

pub(crate) type AppState = Arc<Service>;

/// A JSON answer with the index headers.
pub(crate) fn json<T: Serialize + ?Sized>(
    st: &Service,
    status: StatusCode,
    index: u64,
    value: &T,
    pretty: bool,
) -> Response {
    let mut resp = json_body(status, value, pretty);
    with_index(st, &mut resp, index);
    resp
}

/// A JSON answer without the index headers.
pub(crate) fn json_body<T: Serialize + ?Sized>(
    status: StatusCode,
    value: &T,
    pretty: bool,
) -> Response {
    // One serializer for every answer: `?pretty` re-indents the compact bytes.
    let body = serde_json::to_vec(value);
    match body {
        Ok(mut b) => {
            if pretty {
                b = pretty::reindent(&b);
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
    }
}

/// Adds the index (`X-Schedstate-Index`, `X-Nomad-Index`), the known-leader headers
/// (ours and Nomad's) and `X-Nomad-LastContact`: Nomad's Go client reads them in that
/// order and stops at the first one missing.
pub(crate) fn with_index(st: &Service, resp: &mut Response, index: u64) {
    let h = resp.headers_mut();
    let v = HeaderValue::from(index);
    h.insert(INDEX_HEADER, v.clone());
    h.insert(NOMAD_INDEX_HEADER, v);
    let known = HeaderValue::from_static(if st.server.leader().is_some() {
        "true"
    } else {
        "false"
    });
    h.insert(KNOWN_LEADER_HEADER, known.clone());
    h.insert(NOMAD_KNOWN_LEADER_HEADER, known);
    h.insert(
        NOMAD_LAST_CONTACT_HEADER,
        HeaderValue::from(st.last_contact_ms()),
    );
}

/// The router: every route in groups by the scope they need (the `require` layer of
/// each group), the consistency layer on the reads, the guard on every API route and
/// on the web UI's files; the Raft route checks the cluster key itself.
pub(crate) fn router(st: AppState) -> Router {
    let need = |need: Need| from_fn_with_state((st.clone(), need), auth::require);
    let consistent = || from_fn_with_state(st.clone(), consistency::consistent);
    let read = Router::new()
        .route("/v1/nodes", get(reads::nodes))
        .route("/v1/node/{id}", get(reads::node))
        .route("/v1/node/{id}/allocations", get(reads::node_allocations))
        .route("/v1/allocations", get(reads::allocations))
        .route("/v1/allocation/{id}", get(reads::allocation))
        .route("/v1/plugins", get(reads::plugins))
        .route("/v1/plugin/csi/{id}", get(reads::plugin))
        .route("/v1/volumes", get(reads::volumes))
        .route("/v1/volume/csi/{id}", get(reads::volume))
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/job/{id}", get(jobs::read))
        .route("/v1/job/{id}/allocations", get(jobs::allocations))
        .route_layer(consistent())
        .route("/v1/event/stream", get(stream::events))
        .route_layer(need(Need::Scope(AclScope::Read)));
    // Nomad routes PUT and POST alike on every write path (its Go client writes with
    // PUT, python-nomad with POST): so does every write route here.
    let write = Router::new()
        .route("/v1/commands", post(writes::command).put(writes::command))
        .route(
            "/v1/node/{id}/eligibility",
            post(node_writes::eligibility).put(node_writes::eligibility),
        )
        .route(
            "/v1/node/{id}/drain",
            post(node_writes::drain).put(node_writes::drain),
        )
        .route(
            "/v1/allocation/{id}/stop",
            post(node_writes::stop_allocation).put(node_writes::stop_allocation),
        )
        .route(
            "/v1/volume/csi/{id}",
            put(volume_writes::register)
                .post(volume_writes::register)
                .delete(volume_writes::deregister),
        )
        .route("/v1/jobs", post(jobs::register).put(jobs::register))
        .route(
            "/v1/job/{id}",
            post(jobs::register_at)
                .put(jobs::register_at)
                .delete(jobs::deregister),
        )
        .route_layer(from_fn(idempotency::mark_replays))
        .route_layer(need(Need::Scope(AclScope::Write)));
    let operator = Router::new()
        .route(
            "/v1/operator/raft/peer",
            post(peers::change_peer).put(peers::change_peer),
        )
        .route(
            "/v1/operator/raft/transfer-leader",
            post(transfer::transfer_leader).put(transfer::transfer_leader),
        )
        .route_layer(consistent())
        .route("/v1/status/peers", get(operator::peers))
        .route(
            "/v1/operator/raft/configuration",
            get(operator::raft_configuration),
        )
        .route("/v1/metrics", get(operator::metrics))
        .route("/v1/agent/self", get(operator::agent_self))
        .route_layer(need(Need::Scope(AclScope::Operator)));
    // The snapshot holds every token's digest and every volume's secrets: the
    // management scope's, as Nomad's `operator snapshot save` needs a management token.
    let management = Router::new()
        .route(
            "/v1/operator/snapshot",
            get(operator::snapshot)
                .put(operator::restore)
                .post(operator::restore),
        )
        .route_layer(consistent())
        .route("/v1/acl/tokens", get(acl::list))
        .route("/v1/acl/token", post(acl::create).put(acl::create))
        .route(
            "/v1/acl/token/{accessor}",
            get(acl::read)
                .delete(acl::revoke)
                .post(acl::update)
                .put(acl::update),
        )
        .route_layer(from_fn(idempotency::mark_replays))
        .route_layer(need(Need::Scope(AclScope::Management)));
    let any_token = Router::new()
        .route("/v1/acl/token/self", get(acl::own))
        .route_layer(need(Need::AnyToken));
    // Without a token: what a load balancer, a bootstrapping peer and the one-time ACL
    // bootstrap need, and nothing of the state.
    let public = Router::new()
        .route("/v1/status/leader", get(operator::leader))
        .route("/v1/agent/health", get(operator::health))
        .route("/v1/regions", get(operator::regions))
        .route(
            "/v1/acl/bootstrap",
            post(acl::bootstrap).put(acl::bootstrap),
        );
    // The web UI's files: no data in them, so no token; the page reads the API with
    // the token its user types.
    let ui = Router::new()
        .route("/ui", get(ui::redirect))
        .route("/ui/", get(ui::index))
        .route("/ui/{asset}", get(ui::asset));
    let api = Router::new()
        .merge(read)
        .merge(write)
        .merge(operator)
        .merge(management)
        .merge(any_token)
        .merge(public)
        .merge(ui)
        .fallback(not_found)
        .layer(from_fn_with_state(st.clone(), answers::meter))
        .layer(compression())
        .layer(from_fn_with_state(st.clone(), auth::guard));
    // The servers' route answers to the cluster key, not to a client token.
    Router::new()
        .route(crate::transport::RAFT_RPC_PATH, post(raft_rpc::raft_rpc))
        .merge(api)
        .with_state(st)
}

/// gzip for clients that ask (`Accept-Encoding: gzip`), on answers of 1 KiB or more —
/// except the event stream (each line must leave at once, not wait in a compressor)
/// and snapshot downloads (streamed; compressing a few hundred MiB would hold a core).
fn compression() -> CompressionLayer<impl Predicate> {
    let predicate = DefaultPredicate::new()
        .and(SizeAbove::new(1024))
        .and(NotForContentType::const_new("application/x-ndjson"))
        .and(NotForContentType::const_new("application/octet-stream"));
    CompressionLayer::new().gzip(true).compress_when(predicate)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NoSuchPath",
        format!("no endpoint at {}", uri.path()),
    )
}
