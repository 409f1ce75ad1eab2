//! Sending a request to the leader whole, and relaying its answer: what a follower
//! still does for the operator routes behind the consistency layer (a snapshot
//! download or restore, a membership change) and for a read when the leader is a server too old
//! to answer ReadIndex (`consistency.rs`). Once only: a proxied request that lands on
//! a non-leader is 503, never proxied again.
//!
//! Bounded: at most [`PROXIED_PER_TARGET`] requests in flight to one leader (each
//! holds one of the outbound pool's connections while it waits); one more is
//! answered 503 `Busy` at once, never queued and never given a connection of its
//! own. Before this cap, 130 blocked reads over two followers opened 130 connections
//! to the leader and filled its per-client limit: the servers' Raft RPCs were then
//! refused with them.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::consistency::CONFIRM_WAIT;
use super::error::ApiError;
use crate::service::Service;

/// The largest body of a proxied request.
const PROXIED_BODY_BYTES: usize = 64 << 10;

/// The largest answer relayed from the leader (a snapshot download of a large
/// cluster is the biggest); read as it arrives, never allocated from a claimed length.
const PROXIED_ANSWER_BYTES: usize = 4 << 30;

/// Beyond a blocking read's longest wait (plus the server's jitter), how long a
/// proxied request may take: the leader's answer, a snapshot download.
const PROXIED_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Beyond what the leader itself may take before it answers ([`CONFIRM_WAIT`], and
/// a blocking read's wait), how long its answer may take to *begin*: a leader
/// that is cut off, paused or blackholed is given up on then, not after
/// [`PROXIED_MARGIN`] (seen by the partition nemesis: a follower that could not
/// reach the leader but still heard its heartbeats held consistent reads for
/// minutes).
const PROXIED_HEAD_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Marks a request a follower proxied to the leader.
pub(super) const PROXIED_HEADER: &str = "X-Schedstate-Proxied";

/// Requests proxied to one server at a time, at most: each holds a connection to it
/// for as long as the leader takes (a blocking read, minutes). Well under an
/// agent's connections per client (100 by default), so a follower's proxied
/// requests never shut out its own Raft RPCs.
pub(crate) const PROXIED_PER_TARGET: usize = 32;

/// The proxied requests in flight, per target address.
#[derive(Default)]
pub(crate) struct ProxySlots {
    by_target: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl ProxySlots {
    /// A slot for one more request to `addr`, or `None` when it has
    /// [`PROXIED_PER_TARGET`] in flight. Targets are the members' addresses: few.
    fn take(&self, addr: &str) -> Option<OwnedSemaphorePermit> {
        let sem = self
            .by_target
            .lock()
            .entry(addr.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(PROXIED_PER_TARGET)))
            .clone();
        sem.try_acquire_owned().ok()
    }
}

/// How long the leader may take to begin answering a proxied request: for a read,
/// its confirmation of the read ([`CONFIRM_WAIT`]), then a blocking read's wait
/// (capped as the read caps it) plus its jitter, and a margin. A membership change waits as long as it asked
/// for its server to catch up, and a snapshot download's answer begins once the
/// snapshot is being written: those keep the whole deadline.
fn head_deadline(
    st: &Service,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
    whole: std::time::Duration,
) -> std::time::Duration {
    if method != axum::http::Method::GET || uri.path() == "/v1/operator/snapshot" {
        return whole;
    }
    let p = super::query::parse(uri.query()).unwrap_or_default();
    let blocking = if p.index > 0 {
        let wait = p.wait.unwrap_or(st.max_wait).min(st.max_wait);
        wait + wait / 16
    } else {
        std::time::Duration::ZERO
    };
    CONFIRM_WAIT + blocking + PROXIED_HEAD_MARGIN
}

/// Whether the request restores a snapshot (`PUT`/`POST /v1/operator/snapshot`).
fn is_restore(method: &axum::http::Method, uri: &axum::http::Uri) -> bool {
    method != axum::http::Method::GET && uri.path() == "/v1/operator/snapshot"
}

/// Resolves once this server no longer takes `id` for the leader (an election
/// began, another server won one, this server's election timer ran out without word
/// from it) or its Raft stopped ([`schedstate_raft::Server::leader_moves_from`]):
/// woken by the vote, the leader or the membership changing — not by every entry, as
/// a blocked proxied read would otherwise be.
async fn leader_moves_from(st: &Service, id: u64) {
    st.server.leader_moves_from(id).await;
}

/// Sends `req` to the leader (`leader` at `addr`) and relays its answer; gives up
/// with 503 when the answer does not begin within [`head_deadline`] or this server
/// stops taking `leader` for the leader meanwhile (a read may simply be retried; a
/// membership change's outcome is then unknown), and answers 503 `Busy` at once when
/// [`PROXIED_PER_TARGET`] requests to it are in flight.
pub(super) async fn proxy(st: &Service, leader: u64, addr: &str, req: Request) -> Response {
    let Some(_slot) = st.proxy_slots.take(addr) else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Busy",
            format!(
                "{PROXIED_PER_TARGET} requests are being sent on to the leader at {addr} \
                 already; retry, or ask the leader directly"
            ),
        )
        .into_response();
    };
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    // Only reads and operator calls are proxied: their bodies are small, but for a
    // snapshot restore's file (capped as the leader caps it).
    // A restore's file is read as the leader reads it: the type and the claimed
    // length checked first (413 before a byte is read), the bytes counted against the
    // clients' budgets as they arrive, within the body timeout.
    let mut _held = None;
    let body = if is_restore(&parts.method, &parts.uri) {
        let client = parts
            .extensions
            .get::<crate::service::ClientKeys>()
            .cloned()
            .unwrap_or_else(|| {
                crate::service::ClientKeys::new(std::net::Ipv4Addr::UNSPECIFIED.into(), None)
            });
        let rule = super::body::BodyRule {
            limit: st.limits.snapshot_restore_bytes,
            content_type: super::operator::SNAPSHOT_TYPE,
        };
        let read = super::body::read_body(
            st,
            &parts.headers,
            super::body::ClientBody { client, body },
            &rule,
        )
        .await;
        match read {
            Ok(read) => {
                let bytes = read.bytes.clone();
                _held = Some(read);
                bytes
            }
            Err(e) => return e.into_response(),
        }
    } else {
        match axum::body::to_bytes(body, PROXIED_BODY_BYTES).await {
            Ok(b) => b,
            Err(e) => {
                return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "TooLarge", e.to_string())
                    .into_response();
            }
        }
    };
    let url = format!("{}://{addr}{path}", st.dialer.scheme());
    let mut headers = vec![(PROXIED_HEADER, "1")];
    for name in [
        "authorization",
        "content-type",
        "x-nomad-token",
        "x-schedstate-token",
    ] {
        if let Some(v) = parts.headers.get(name).and_then(|v| v.to_str().ok()) {
            headers.push((name, v));
        }
    }
    let deadline = st.max_wait + st.max_wait / 16 + PROXIED_MARGIN;
    let call = st.proxy.call_timed(
        parts.method.clone(),
        &url,
        &headers,
        body,
        PROXIED_ANSWER_BYTES,
        head_deadline(st, &parts.method, &parts.uri, deadline),
        deadline,
    );
    // A leadership transfer moves the leadership by design: its answer (bounded by
    // the transfer's own deadline) is awaited, not abandoned when the move is seen.
    let moves_leader = parts.uri.path() == "/v1/operator/raft/transfer-leader";
    let answer = tokio::select! {
        answer = call => answer,
        () = leader_moves_from(st, leader), if !moves_leader => {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                format!(
                    "server {leader} at {addr} stopped leading while the request was proxied to it; \
                     a read may be retried, a membership change's outcome is unknown (read the \
                     configuration before retrying)"
                ),
            )
            .into_response();
        }
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                format!("the leader at {addr} gave no whole answer: {e}"),
            )
            .into_response();
        }
    };
    let (status, headers, bytes) = (answer.status, answer.headers, answer.body);
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = status;
    for (name, value) in &headers {
        let keep = name == header::CONTENT_TYPE || name.as_str().starts_with("x-");
        if keep {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
    }
    resp.headers_mut().insert(
        "X-Schedstate-Answered-By",
        HeaderValue::from_str(addr).unwrap_or(HeaderValue::from_static("leader")),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_to_one_leader_are_capped_and_the_slots_come_back() {
        let slots = ProxySlots::default();
        let held: Vec<_> = (0..PROXIED_PER_TARGET)
            .map(|_| slots.take("10.0.0.1:4646").expect("a slot"))
            .collect();
        assert!(slots.take("10.0.0.1:4646").is_none());
        // Another target has its own.
        assert!(slots.take("10.0.0.2:4646").is_some());
        drop(held);
        assert!(slots.take("10.0.0.1:4646").is_some());
    }
}
