//! `POST /v1/operator/raft/transfer-leader`: the leader hands the leadership to the
//! voter named in the body (`{"to": 2}`) or to the most caught-up one (`{}`), and
//! answers the new leader (`schedstate_raft::Server::transfer_leadership`). The
//! consistency layer in front sends it to the leader.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::{BodyRule, ClientBody, read_body};
use super::error::ApiError;
use super::{AppState, json};
use crate::api::{LeaderTransferred, TransferLeader};

const RULE: BodyRule = BodyRule {
    limit: 4 << 10,
    content_type: "application/json",
};

pub(crate) async fn transfer_leader(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    match transfer(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn transfer(
    st: &crate::service::Service,
    headers: &HeaderMap,
    body: ClientBody,
) -> Result<Response, ApiError> {
    let body = read_body(st, headers, body, &RULE).await?;
    let asked: TransferLeader = serde_json::from_slice(&body.bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a transfer ({{\"to\": 2}}, or {{}} for the most caught-up voter): {e}"
        ))
    })?;
    tracing::info!(to = ?asked.to, "transferring the leadership");
    let leader = st.server.transfer_leadership(asked.to).await?;
    Ok(json(
        st,
        StatusCode::OK,
        st.server.last_applied(),
        &LeaderTransferred { leader },
        false,
    ))
}
