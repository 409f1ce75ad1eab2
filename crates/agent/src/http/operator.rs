//! Status and operations: the leader and peers, the Raft configuration and changes to
//! it, a snapshot of the state, metrics, this agent's own status, and the Raft RPC
//! endpoint the servers talk to each other through.

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use schedstate_raft::wire::{RpcRequest, answer_rpc};

use super::error::ApiError;
use super::query::{Checked, OperatorRead, SnapshotRead};
use super::{AppState, json, with_index};
use crate::api::{AgentSelf, MAX_BODY_BYTES, PeerChange, RaftConfiguration, RaftServer};
use crate::transport::RAFT_RPC_CONTENT_TYPE;

/// The largest Raft RPC body (a batch of entries, a snapshot chunk).
const MAX_RPC_BYTES: usize = schedstate_raft::MAX_FRAME as usize;

pub(crate) async fn leader(State(st): State<AppState>) -> Response {
    let addr = st
        .server
        .leader_node()
        .await
        .map(|(_, a)| a)
        .unwrap_or_default();
    json(&st, StatusCode::OK, st.server.last_applied(), &addr, false)
}

pub(crate) async fn peers(State(st): State<AppState>) -> Response {
    let (nodes, voters) = st.server.members();
    let addrs: Vec<&String> = voters.iter().filter_map(|id| nodes.get(id)).collect();
    json(&st, StatusCode::OK, st.server.last_applied(), &addrs, false)
}

pub(crate) async fn raft_configuration(
    State(st): State<AppState>,
    Checked(p, _): Checked<OperatorRead>,
) -> Response {
    let (nodes, voters) = st.server.members();
    let leader = st.server.leader();
    let index = st
        .server
        .raft()
        .metrics()
        .borrow()
        .membership_config
        .log_id()
        .map_or(0, |l| l.index);
    let config = RaftConfiguration {
        index,
        servers: nodes
            .into_iter()
            .map(|(id, address)| RaftServer {
                id,
                address,
                leader: leader == Some(id),
                voter: voters.contains(&id),
            })
            .collect(),
    };
    json(&st, StatusCode::OK, index, &config, p.pretty)
}

pub(crate) async fn change_peer(State(st): State<AppState>, body: Body) -> Response {
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "TooLarge", "body too large")
            .into_response();
    };
    let change: PeerChange = match serde_json::from_slice(&bytes) {
        Ok(c) => c,
        Err(e) => {
            return ApiError::bad_request(format!(
                "the body is not a peer change ({{\"op\":\"add\",\"id\":4,\"address\":\"host:port\"}} or {{\"op\":\"remove\",\"id\":4}}): {e}"
            ))
            .into_response();
        }
    };
    let result = match &change {
        PeerChange::Add { id, address } => {
            tracing::info!(id, address, "adding a server");
            match st.server.add_learner(*id, address.clone()).await {
                Ok(()) => st.server.promote([*id]).await,
                Err(e) => Err(e),
            }
        }
        PeerChange::Remove { id } => {
            tracing::info!(id, "removing a server");
            st.server.remove([*id]).await
        }
    };
    match result {
        Ok(()) => json(
            &st,
            StatusCode::OK,
            st.server.last_applied(),
            &serde_json::json!({ "done": change }),
            false,
        ),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub(crate) async fn snapshot(State(st): State<AppState>, _: Checked<SnapshotRead>) -> Response {
    // The guard made this consistent (or it is stale by request).
    let snap = st.server.read_stale();
    let index = snap.view().last_applied();
    let mut bytes = Vec::new();
    if let Err(e) = snap.write_to(&mut bytes) {
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            format!("writing the snapshot: {e}"),
        )
        .into_response();
    }
    let mut resp = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response();
    with_index(&st, &mut resp, index);
    resp
}

pub(crate) async fn metrics(State(st): State<AppState>) -> Response {
    let text = st.metrics.render(&st.server);
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub(crate) async fn agent_self(State(st): State<AppState>) -> Response {
    let me = AgentSelf {
        id: st.server.id(),
        fresh: crate::agent::is_fresh(&st.server),
        leader: st.server.leader(),
        term: st.server.term(),
        last_applied: st.server.last_applied(),
    };
    json(&st, StatusCode::OK, me.last_applied, &me, false)
}

pub(crate) async fn raft_rpc(State(st): State<AppState>, body: Body) -> Response {
    let bytes = match axum::body::to_bytes(body, MAX_RPC_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "TooLarge", e.to_string())
                .into_response();
        }
    };
    let request = match RpcRequest::decode(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return ApiError::bad_request(format!("not a Raft RPC: {e}")).into_response();
        }
    };
    let answer = answer_rpc(&st.server, request).await;
    match answer.encode() {
        Ok(b) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, RAFT_RPC_CONTENT_TYPE)],
            b,
        )
            .into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal",
            format!("encoding the answer: {e}"),
        )
        .into_response(),
    }
}
