//! [`ApiError`]: every error answer — a status and a JSON [`ErrorBody`] with a stable
//! kind — and how the store's and Raft's errors map to them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schedstate_raft::{ClusterError, ProposeError, ReadIndexError};

use crate::api::ErrorBody;

/// What a 429 tells the client to wait, in seconds.
const RETRY_AFTER_SECS: &str = "1";

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: ErrorBody,
}

impl ApiError {
    /// An error with `status`, `kind` and `message`.
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                kind: kind.to_string(),
                message: message.into(),
                index: None,
            },
        }
    }

    /// 400: the request itself is wrong (a query parameter, the body).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// 404 for a row that does not exist (`NodeNotFound`, …).
    pub fn not_found(kind: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, kind, message)
    }

    /// 429: a limit of this server is reached; retry later (`Retry-After` says when).
    pub fn too_many(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", message)
    }

    /// 503: no leader is known.
    pub fn no_leader() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "NoLeader",
            "no cluster leader: the servers are electing one or too few are up",
        )
    }
}

/// What of an error from Raft's internals an answer may show: its words, not the
/// structures openraft prints with them (memberships with every server's address,
/// log ids, votes). The whole text goes to the agent's log.
fn public(why: &str) -> String {
    let cut = why.find(['{', '[', '(']).unwrap_or(why.len());
    let head = why[..cut].trim_end_matches([' ', ':', ',', '=']);
    if cut == why.len() {
        return why.to_string();
    }
    tracing::info!(detail = %why, "an error answer left out Raft's details");
    if head.is_empty() {
        "the cluster is unavailable (details in the server's log)".to_string()
    } else {
        format!("{head} (details in the server's log)")
    }
}

/// What an answer whose outcome is unknown tells the client to do.
pub(crate) const RETRY_ADVICE: &str =
    "retry with the same Idempotency-Key, or read before retrying without one";

impl From<ProposeError> for ApiError {
    fn from(e: ProposeError) -> Self {
        let message = e.to_string();
        match e {
            ProposeError::Refused { index, error } => ApiError {
                status: StatusCode::CONFLICT,
                body: ErrorBody {
                    kind: error.kind().to_string(),
                    message: error.to_string(),
                    index: Some(index),
                },
            },
            ProposeError::RefusedRemotely {
                index,
                kind,
                message,
            } => ApiError {
                status: StatusCode::CONFLICT,
                body: ErrorBody {
                    kind,
                    message,
                    index: Some(index),
                },
            },
            // A rolling upgrade under way: the request is fine, the cluster is not
            // ready for it yet (nothing was proposed).
            ProposeError::Invalid { kind, message }
                if kind == schedstate_raft::FORMAT_NOT_ENABLED =>
            {
                ApiError::new(StatusCode::CONFLICT, &kind, message)
            }
            ProposeError::Invalid { kind, message } => {
                ApiError::new(StatusCode::BAD_REQUEST, &kind, message)
            }
            ProposeError::NotLeader { leader: None, .. } => ApiError::no_leader(),
            ProposeError::NotLeader { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NotLeader",
                format!("{message}; the outcome is unknown: {RETRY_ADVICE}"),
            ),
            ProposeError::Unavailable(why) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                format!(
                    "no answer from the cluster ({}); the outcome is unknown: {RETRY_ADVICE}",
                    public(&why)
                ),
            ),
            ProposeError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ShuttingDown",
                "the server is shutting down",
            ),
            ProposeError::KeyReused { index } => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                body: ErrorBody {
                    kind: "IdempotencyKeyReused".into(),
                    message: format!(
                        "this Idempotency-Key was used at index {index} for another request; nothing was applied (a retry must send the same request)"
                    ),
                    index: Some(index),
                },
            },
        }
    }
}

/// A follower's read that got no read index: 503, the kind saying why (a client
/// retries it, here or elsewhere).
impl From<ReadIndexError> for ApiError {
    fn from(e: ReadIndexError) -> Self {
        match e {
            ReadIndexError::NoLeader => ApiError::no_leader(),
            ReadIndexError::Refused(c) => ApiError::from(c),
            ReadIndexError::LeaderMoved { .. }
            | ReadIndexError::Unsupported { .. }
            | ReadIndexError::Unreachable { .. }
            | ReadIndexError::Behind { .. }
            | ReadIndexError::Timeout { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                public(&e.to_string()),
            ),
        }
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::NotLeader { leader: None, .. } => ApiError::no_leader(),
            ClusterError::NotLeader { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "NotLeader", e.to_string())
            }
            ClusterError::Unavailable(why) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", public(&why))
            }
            ClusterError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ShuttingDown",
                "the server is shutting down",
            ),
            ClusterError::Invalid(why) => ApiError::bad_request(why),
            ClusterError::Conflict(why) => ApiError::new(StatusCode::CONFLICT, "PeerConflict", why),
            ClusterError::NotAMember(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "PeerNotFound", e.to_string())
            }
            ClusterError::NotCaughtUp { .. } => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "NotCaughtUp", e.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body).unwrap_or_default();
        let mut resp = (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::public;

    #[test]
    fn raft_structures_stay_out_of_error_answers() {
        assert_eq!(public("timed out"), "timed out");
        let shown = public(
            "quorum not enough: cluster: {voters:[{1:BasicNode { addr: \"10.0.0.1:4646\" }}]}, got: {1}",
        );
        assert_eq!(
            shown,
            "quorum not enough: cluster (details in the server's log)"
        );
        assert!(!public("{1: 10.0.0.1}").contains("10.0.0.1"));
    }
}
