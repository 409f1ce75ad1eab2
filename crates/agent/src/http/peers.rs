//! `POST /v1/operator/raft/peer`: changes to the cluster's servers — add one (a
//! learner, made a voter once it caught up, removed again if it does not within the
//! request's `wait`), remove one, or leave a joint configuration a lost leader left
//! behind. Checked before anything is proposed (the body, the address as `host:port`
//! here, the id and the membership in `schedstate_raft`'s membership module); every
//! step has a deadline there. The answer is a
//! [`PeerChangeDone`](crate::api::PeerChangeDone). The consistency layer in front
//! sends it to the leader.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::ClientBody;
use super::body::{BodyRule, read_body};
use super::error::ApiError;
use super::{AppState, json};
use crate::api::{PeerChange, PeerChangeDone};

const RULE: BodyRule = BodyRule {
    limit: 64 << 10,
    content_type: super::body::JSON,
};

/// The longest address taken (as the Raft crate bounds a membership's addresses).
const MAX_ADDRESS_BYTES: usize = 255;

/// An agent's address, what the others dial: `host:port`, the host non-empty (an
/// IPv6 one in brackets), the port a number from 1 to 65535 in digits only, at most
/// 255 printable bytes in all.
fn check_address(address: &str) -> Result<(), ApiError> {
    let printable = !address.is_empty()
        && address.len() <= MAX_ADDRESS_BYTES
        && address.bytes().all(|b| b.is_ascii_graphic());
    let host_port = address.rsplit_once(':').is_some_and(|(host, port)| {
        let host_ok = match host.strip_prefix('[') {
            Some(v6) => v6.strip_suffix(']').is_some_and(|a| !a.is_empty()),
            None => !host.is_empty() && !host.contains([':', '[', ']']),
        };
        let port_ok = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p != 0);
        host_ok && port_ok
    });
    if printable && host_port {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "the address {:?} is not host:port (at most {MAX_ADDRESS_BYTES} printable \
             ASCII bytes, an IPv6 host in brackets, a port from 1 to 65535)",
            address.chars().take(64).collect::<String>()
        )))
    }
}

pub(crate) async fn change_peer(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    match change(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn change(
    st: &crate::service::Service,
    headers: &HeaderMap,
    body: ClientBody,
) -> Result<Response, ApiError> {
    let body = read_body(st, headers, body, &RULE).await?;
    let change: PeerChange = serde_json::from_slice(&body.bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a peer change ({{\"op\":\"add\",\"id\":4,\"address\":\"host:port\"}}, \
             {{\"op\":\"remove\",\"id\":4}} or {{\"op\":\"recover\"}}): {e}"
        ))
    })?;
    let catch_up = change.catch_up().map_err(ApiError::bad_request)?;
    let server = &st.server;
    let mut left_joint = None;
    match &change {
        PeerChange::Add { id, address, .. } => {
            check_address(address)?;
            tracing::info!(id, address, ?catch_up, "adding a server");
            server.add_server(*id, address, catch_up).await?;
        }
        PeerChange::Remove { id } => {
            tracing::info!(id, "removing a server");
            server.remove_server(*id).await?;
        }
        PeerChange::Recover => {
            left_joint = Some(server.recover_membership().await?);
        }
    }
    let done = PeerChangeDone {
        done: change,
        left_joint,
    };
    Ok(json(
        st,
        StatusCode::OK,
        server.last_applied(),
        &done,
        false,
    ))
}
