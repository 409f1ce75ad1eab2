//! Consistent reads, in front of the read handlers: a read without `?stale` is
//! answered by the leader after it confirmed its leadership with a quorum (openraft's
//! read index); a follower proxies it to the leader (once: a proxied request that
//! lands on a non-leader is 503, never proxied again), as Nomad forwards non-stale
//! reads.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use crate::service::Service;

/// How long a consistent read waits for the leader to confirm its leadership.
const CONFIRM_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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
const PROXIED_HEADER: &str = "X-Schedstate-Proxied";

fn is_stale(req: &Request) -> bool {
    req.uri().query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "stale" && v != "false" && v != "0")
    })
}

/// The steps before the read (confirming leadership, finding the leader, proxying)
/// are boxed: this future lives as long as the read, a blocking one for minutes, and
/// is as large as its largest state — with openraft's read and the proxied request
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

/// Resolves once this server no longer takes `id` for the leader (an election
/// began, another server won one) or its Raft stopped. Watches openraft's server
/// metrics, which change only with the vote, the leader or the membership — not
/// with every entry, as a blocked proxied read would otherwise be woken by.
async fn leader_moves_from(st: &Service, id: u64) {
    let mut metrics = st.server.raft().server_metrics();
    loop {
        if metrics.borrow_and_update().current_leader != Some(id) {
            return;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Sends `req` to the leader (`leader` at `addr`) and relays its answer; gives up
/// with 503 when the answer does not begin within [`head_deadline`] or this server
/// stops taking `leader` for the leader meanwhile (a read may simply be retried; a
/// membership change's outcome is then unknown).
async fn proxy(st: &Service, leader: u64, addr: &str, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    // Only reads and operator calls are proxied: their bodies are small.
    let body = match axum::body::to_bytes(body, PROXIED_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "TooLarge", e.to_string())
                .into_response();
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
    let answer = tokio::select! {
        answer = call => answer,
        () = leader_moves_from(st, leader) => {
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
