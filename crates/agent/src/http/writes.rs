//! `POST /v1/commands`: one [`Command`] as JSON, proposed through Raft (forwarded to
//! the leader from a follower); answered once committed and applied on this server,
//! so a `?stale` read here right after sees it.
//!
//! Nothing reaches Raft unless the body is a whole, known command: a body over
//! [`MAX_BODY_BYTES`] is 413, bad JSON or an unknown field or variant 400. A command
//! the rules refuse is committed as a no-op and answered 409 with the rule's kind.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schedstate::state::Command;

use super::error::ApiError;
use super::query::{Checked, Write};
use super::{AppState, json};
use crate::api::{MAX_BODY_BYTES, WriteResponse};

/// How long a write waits for a leader to be elected before answering 503.
const LEADER_WAIT: Duration = Duration::from_secs(5);

/// How long a write waits to be committed: a leader cut off from its quorum keeps
/// believing it leads, and its writes would otherwise wait forever.
const COMMIT_WAIT: Duration = Duration::from_secs(30);

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "TooLarge",
        format!("the body is over the limit of {MAX_BODY_BYTES} bytes"),
    )
}

/// Reads the body as one command.
async fn read_command(body: Body) -> Result<Command, ApiError> {
    // The limit is enforced while reading, not from Content-Length: answering before
    // the body is read would close the connection under a client still sending it,
    // which then sees a broken pipe instead of the 413.
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| too_large())?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty: send one command as JSON, like {\"UpsertNode\": {\"node\": {…}}}",
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not a command: {e}")))
}

pub(crate) async fn command(
    State(st): State<AppState>,
    Checked(p, _): Checked<Write>,
    body: Body,
) -> Response {
    let command = match read_command(body).await {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if st.server.leader().is_none() && st.server.wait_for_leader(LEADER_WAIT).await.is_err() {
        return ApiError::no_leader().into_response();
    }
    let kind = command.kind();
    let proposed = tokio::time::timeout(COMMIT_WAIT, st.server.propose_or_forward(command)).await;
    let Ok(proposed) = proposed else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            format!(
                "not committed within {COMMIT_WAIT:?} (no quorum?); the outcome is unknown: read before retrying"
            ),
        )
        .into_response();
    };
    match proposed {
        Ok(committed) => {
            // Applied on the leader; make it visible here too before answering.
            if let Err(e) = st
                .server
                .wait_applied(committed.index, Duration::from_secs(10))
                .await
            {
                tracing::warn!(index = committed.index, error = %e, "committed but not yet applied here");
            }
            json(
                &st,
                StatusCode::OK,
                committed.index,
                &WriteResponse {
                    index: committed.index,
                },
                p.pretty,
            )
        }
        Err(e) => {
            let e = ApiError::from(e);
            if e.status == StatusCode::CONFLICT {
                tracing::info!(
                    command = kind,
                    index = e.body.index,
                    error = %e.body.message,
                    "command refused"
                );
            }
            e.into_response()
        }
    }
}
