//! `POST /v1/operator/raft/peer`: changes to the cluster's servers — add one (a
//! learner, made a voter once it caught up, removed again if it does not in time),
//! remove one, or leave a joint configuration a lost leader left behind. Checked
//! before anything is proposed; every step has a deadline (`schedstate_raft`'s
//! membership module). The consistency layer in front sends it to the leader.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::{BodyRule, read_body};
use super::error::ApiError;
use super::{AppState, json};
use crate::api::PeerChange;

const RULE: BodyRule = BodyRule {
    limit: 64 << 10,
    content_type: "application/json",
};

/// How long a new server may take to catch up when the request does not say.
const DEFAULT_CATCH_UP: Duration = Duration::from_secs(30);

/// The longest a request may give a new server.
const MAX_CATCH_UP: Duration = Duration::from_secs(600);

/// An agent's address: what the others dial, `host:port`.
fn check_address(address: &str) -> Result<(), ApiError> {
    let ok = address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "the address {:?} is not host:port",
            address.chars().take(64).collect::<String>()
        )))
    }
}

pub(crate) async fn change_peer(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match change(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn change(
    st: &crate::service::Service,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_body(st, headers, body, &RULE).await?;
    let change: PeerChange = serde_json::from_slice(&body.bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a peer change ({{\"op\":\"add\",\"id\":4,\"address\":\"host:port\"}}, \
             {{\"op\":\"remove\",\"id\":4}} or {{\"op\":\"recover\"}}): {e}"
        ))
    })?;
    let server = &st.server;
    let done = match &change {
        PeerChange::Add { id, address, wait } => {
            check_address(address)?;
            let catch_up = match wait {
                None => DEFAULT_CATCH_UP,
                Some(w) => humantime::parse_duration(w)
                    .map_err(|e| ApiError::bad_request(format!("wait={w:?}: {e}")))?
                    .min(MAX_CATCH_UP),
            };
            tracing::info!(id, address, "adding a server");
            server.add_server(*id, address, catch_up).await?;
            serde_json::json!({ "done": change })
        }
        PeerChange::Remove { id } => {
            tracing::info!(id, "removing a server");
            server.remove_server(*id).await?;
            serde_json::json!({ "done": change })
        }
        PeerChange::Recover => {
            let left = server.recover_membership().await?;
            serde_json::json!({ "done": change, "left_joint": left })
        }
    };
    Ok(json(
        st,
        StatusCode::OK,
        server.last_applied(),
        &done,
        false,
    ))
}
