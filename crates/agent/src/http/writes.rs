//! `POST /v1/commands`: one [`Command`] as JSON, proposed through Raft (forwarded to
//! the leader from a follower); answered once committed and applied on this server,
//! so a `?stale` read here right after sees it.
//!
//! Nothing reaches Raft unless the body is a whole, known command sent as
//! `application/json` or with no `Content-Type` (415 for another declared type): a body over the write limit is 413 (from its
//! `Content-Length` before it is read, or while reading), bad JSON or an unknown field
//! or variant 400, a command breaking an input rule (sizes, characters) 400. A
//! command the rules refuse on the state is committed as a no-op and answered 409
//! with the rule's kind. With an `Idempotency-Key` (see [`super::idempotency`]) a
//! retry answers the first outcome instead of applying again.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::state::Command;

use super::body::ClientBody;
use super::body::read_write_json;
use super::error::ApiError;
use super::idempotency::IdempotencyKey;
use super::query::Checked;
use super::{AppState, json};
use crate::api::WriteResponse;
use crate::service::Service;

/// How long a write waits for a leader to be elected before answering 503.
const LEADER_WAIT: Duration = Duration::from_secs(5);

/// How long a write waits to be committed: a leader cut off from its quorum keeps
/// believing it leads, and its writes would otherwise wait forever.
const COMMIT_WAIT: Duration = Duration::from_secs(30);

/// Reads the body as one command.
async fn read_command(
    st: &Service,
    headers: &HeaderMap,
    body: ClientBody,
) -> Result<Command, ApiError> {
    read_write_json(
        st,
        headers,
        body,
        "a command",
        "{\"UpsertNode\": {\"node\": {…}}}",
    )
    .await
}

pub(crate) async fn command(
    State(st): State<AppState>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    let command = match read_command(&st, &headers, body).await {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if command.is_acl() {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "PermissionDenied",
            "ACL tokens are managed through /v1/acl/ with a management token, not written as commands",
        )
        .into_response();
    }
    if command.is_restore() {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "PermissionDenied",
            "a snapshot is restored through PUT /v1/operator/snapshot with a management token, not written as commands",
        )
        .into_response();
    }
    match commit(&st, &key, command).await {
        Ok(index) => json(
            &st,
            StatusCode::OK,
            index,
            &WriteResponse { index },
            p.pretty,
        ),
        Err(e) => e.into_response(),
    }
}

/// Proposes `command` (forwarded to the leader from a follower) under the request's
/// next write key, if it sent one, and answers its index once it committed and this
/// server applied it — so a `?stale` read here right after sees it. A replayed
/// outcome answers the first apply's index. Shared by every write route.
pub(crate) async fn commit(
    st: &Service,
    key: &IdempotencyKey,
    command: Command,
) -> Result<u64, ApiError> {
    if st.server.leader().is_none() && st.server.wait_for_leader(LEADER_WAIT).await.is_err() {
        return Err(ApiError::no_leader());
    }
    let kind = command.kind();
    // A write this agent forwards gets a key of its own when its client sent none, so
    // that it can be sent again to a new leader if the one it went to stops answering.
    let write_key = key
        .next_key(&command)
        .or_else(|| (!st.server.is_leader()).then(|| IdempotencyKey::internal(&command))?);
    let proposing = std::time::Instant::now();
    let proposed = tokio::time::timeout(
        COMMIT_WAIT,
        st.server.propose_or_forward_keyed(command, write_key),
    )
    .await;
    let Ok(proposed) = proposed else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            format!(
                "not committed within {COMMIT_WAIT:?} (no quorum?); the outcome is unknown: {}",
                super::error::RETRY_ADVICE
            ),
        ));
    };
    match proposed {
        Ok(committed) => {
            if committed.replayed && key.is_some() {
                key.mark_replayed();
            }
            // Applied on the leader; make it visible here too before answering.
            if let Err(e) = st
                .server
                .wait_applied(committed.index, Duration::from_secs(10))
                .await
            {
                tracing::warn!(index = committed.index, error = %e, "committed but not yet applied here");
            }
            st.metrics
                .commit_seconds
                .observe(proposing.elapsed().as_secs_f64());
            Ok(committed.index)
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
            Err(e)
        }
    }
}
