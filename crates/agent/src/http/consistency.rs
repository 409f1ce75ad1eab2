//! Consistent reads, in front of the read handlers: a read without `?stale` is
//! answered from a state that holds everything committed before it arrived.
//!
//! - On the leader: once it confirmed its leadership with a quorum in a round that
//!   started after the read arrived, and applied everything committed before
//!   (openraft's read index; concurrent reads share rounds).
//! - On a follower: once it got a **read index** from the leader (one ReadIndex RPC
//!   in flight per follower, shared by every read waiting; `schedstate_raft`'s
//!   `read_index`) and applied that index itself. The read then runs here — a
//!   blocking read waits on this follower's store — and costs the leader no
//!   connection of its own: 200 blocked reads on a follower once held 200
//!   connections to the leader (one proxied request each) and shut its Raft out.
//!   A follower cut off from the leader answers 503 within [`FOLLOWER_READ_WAIT`];
//!   it never serves what it has without the leader's word.
//! - Proxied to the leader whole (`proxy.rs`, bounded per leader): the operator
//!   routes that pass through this layer (a snapshot download or restore, a
//!   membership change),
//!   and a read when the leader is an older server that does not know ReadIndex.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use schedstate_raft::{READ_INDEX_WAIT, ReadIndexError};

use super::AppState;
use super::error::ApiError;
use super::proxy::{PROXIED_HEADER, proxy};
use crate::service::Service;

/// How long a consistent read waits for the leader to confirm its leadership.
pub(super) const CONFIRM_WAIT: std::time::Duration = READ_INDEX_WAIT;

/// How long a read on a follower waits for its read index and its own apply of it:
/// a round under way when it arrived, then its own (each bounded by
/// [`READ_INDEX_WAIT`]), and a moment to apply.
const FOLLOWER_READ_WAIT: std::time::Duration =
    std::time::Duration::from_secs(2 * READ_INDEX_WAIT.as_secs() + 1);

fn is_stale(req: &Request) -> bool {
    req.uri().query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "stale" && v != "false" && v != "0")
    })
}

/// Whether the request reads the state (nodes, allocations, plugins, volumes, jobs),
/// which a follower answers itself after a read index; the operator routes behind
/// this layer are proxied to the leader.
fn reads_the_state(req: &Request) -> bool {
    !req.uri().path().starts_with("/v1/operator/")
}

/// The steps before the read (confirming leadership, the read index, proxying) are
/// boxed: this future lives as long as the read, a blocking one for minutes, and is
/// as large as its largest state — with openraft's read and the proxied request
/// inline it was the largest part of a blocked request's futures.
pub(crate) async fn consistent(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if is_stale(&req) {
        return next.run(req).await;
    }
    if st.server.is_leader() {
        // openraft waits for a quorum's heartbeat answers and then for the apply;
        // neither may hold a request forever.
        let confirmed = Box::pin(tokio::time::timeout(
            CONFIRM_WAIT,
            st.server.read_consistent(),
        ))
        .await;
        return match confirmed {
            Ok(Ok(_)) => next.run(req).await,
            Ok(Err(e)) => ApiError::from(e).into_response(),
            Err(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                format!("leadership not confirmed by a quorum within {CONFIRM_WAIT:?}"),
            )
            .into_response(),
        };
    }
    if req.headers().contains_key(PROXIED_HEADER) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "NotLeader",
            "proxied to a server that is no longer the leader; retry",
        )
        .into_response();
    }
    if reads_the_state(&req) {
        let read_index = Box::pin(st.server.read_index(FOLLOWER_READ_WAIT)).await;
        return match read_index {
            Ok(_) => next.run(req).await,
            Err(ReadIndexError::Unsupported {
                leader,
                address,
                reason,
            }) => {
                tracing::debug!(leader, %address, %reason, "the leader does not answer ReadIndex; the read is proxied to it");
                Box::pin(proxy(&st, leader, &address, req)).await
            }
            Err(e) => ApiError::from(e).into_response(),
        };
    }
    let leader = Box::pin(find_leader(&st)).await;
    match leader {
        Some((id, _)) if id == st.server.id() => next.run(req).await,
        Some((id, addr)) if !addr.is_empty() => Box::pin(proxy(&st, id, &addr, req)).await,
        _ => ApiError::no_leader().into_response(),
    }
}

/// The leader's id and address, waiting a moment for an election under way.
async fn find_leader(st: &Service) -> Option<(u64, String)> {
    match st.server.leader_node().await {
        Some(l) => Some(l),
        None => {
            let _ = st
                .server
                .wait_for_leader(std::time::Duration::from_secs(3))
                .await;
            st.server.leader_node().await
        }
    }
}
