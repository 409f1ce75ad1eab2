//! The node and allocation writes Nomad's clients make, mapped onto the store's
//! commands (`POST /v1/allocation/{id}/stop` is here too):
//! `POST /v1/node/{id}/eligibility` (`{"Eligibility": "eligible"|"ineligible"}`) and
//! `POST /v1/node/{id}/drain` (`{"DrainSpec": {…}|null, "MarkEligible": bool}`, or the
//! older `?enable=true|false` without a body). The answer is Nomad's
//! `NodeEligibilityUpdateResponse`/`NodeDrainUpdateResponse` (no evaluations: the store
//! schedules nothing).
//!
//! A drain does what Nomad's does: starting one also marks the node ineligible, and
//! ending one with `MarkEligible` marks it eligible again (without, it stays
//! ineligible) — what a system job's expected count follows. The store's own commands
//! keep drain and eligibility apart and none sets both, so this is two writes, ordered
//! so that a request cut between them leaves the node no more eligible than asked:
//! ineligible before the drain starts, eligible after it ends. Each write has its own
//! key under the request's `Idempotency-Key`, so a retry finishes the pair.
//!
//! As in Nomad, a draining node cannot be made eligible through
//! `/v1/node/{id}/eligibility` (400 `NodeDraining`): end the drain with
//! `MarkEligible` instead. The check reads the answering server's state, so a drain
//! started an instant before on another server may not be seen yet; the store's own
//! `POST /v1/commands` keeps the two apart and checks nothing of the kind.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::state::Command;
use serde::Deserialize;

use super::body::ClientBody;
use super::body::read_json;
use super::error::ApiError;
use super::idempotency::IdempotencyKey;
use super::query::Checked;
use super::writes::commit;
use super::{AppState, json};
use crate::api::nomad::nullable;

#[derive(Debug, Default, Deserialize)]
struct EligibilityRequest {
    #[serde(rename = "Eligibility", default, deserialize_with = "nullable")]
    eligibility: String,
}

#[derive(Debug, Default, Deserialize)]
struct DrainRequest {
    #[serde(rename = "DrainSpec", default)]
    drain_spec: Option<serde_json::Value>,
    #[serde(rename = "MarkEligible", default, deserialize_with = "nullable")]
    mark_eligible: bool,
}

fn updated(st: &super::AppState, index: u64, pretty: bool) -> Response {
    let body = serde_json::json!({
        "EvalIDs": [],
        "EvalCreateIndex": 0,
        "NodeModifyIndex": index,
        "Index": index,
    });
    json(st, StatusCode::OK, index, &body, pretty)
}

pub(crate) async fn eligibility(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    let request: EligibilityRequest = match read_json(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let eligible = match request.eligibility.as_str() {
        "eligible" => true,
        "ineligible" => false,
        other => {
            return ApiError::bad_request(format!(
                "Eligibility {other:?}: expected eligible or ineligible"
            ))
            .into_response();
        }
    };
    let draining = eligible
        && st
            .server
            .read_stale()
            .view()
            .node(&id)
            .is_some_and(|n| n.drain);
    if draining {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "NodeDraining",
            "can not set node's scheduling eligibility to eligible while it is draining: end the drain with MarkEligible",
        )
        .into_response();
    }
    let command = Command::UpdateNodeEligibility {
        id: id.as_str().into(),
        eligible,
    };
    match commit(&st, &key, command).await {
        Ok(index) => updated(&st, index, p.pretty),
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn drain(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    let request: DrainRequest = match read_json(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    // `?enable=` is the older form (no body); a `DrainSpec` (even `{}`) turns the
    // drain on, `null` off.
    let enable = match p.enable {
        Some(e) if request.drain_spec.is_none() => e,
        _ => request.drain_spec.as_ref().is_some_and(|s| !s.is_null()),
    };
    let node = || schedstate::model::Id::from(id.as_str());
    let commands = if enable {
        vec![
            Command::UpdateNodeEligibility {
                id: node(),
                eligible: false,
            },
            Command::UpdateNodeDrain {
                id: node(),
                drain: true,
            },
        ]
    } else {
        let mut c = vec![Command::UpdateNodeDrain {
            id: node(),
            drain: false,
        }];
        if request.mark_eligible {
            c.push(Command::UpdateNodeEligibility {
                id: node(),
                eligible: true,
            });
        }
        c
    };
    let mut index = 0;
    for command in commands {
        match commit(&st, &key, command).await {
            Ok(i) => index = i,
            Err(e) => return e.into_response(),
        }
    }
    updated(&st, index, p.pretty)
}

/// `POST /v1/allocation/{id}/stop` (Nomad's `alloc stop`): desired status `stop`.
/// Nomad answers with the evaluation it made; the store schedules nothing, so
/// `EvalID` is empty.
pub(crate) async fn stop_allocation(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
) -> Response {
    let command = Command::StopAllocs {
        ids: vec![id.as_str().into()],
    };
    match commit(&st, &key, command).await {
        Ok(index) => json(
            &st,
            StatusCode::OK,
            index,
            &serde_json::json!({"EvalID": "", "Index": index}),
            p.pretty,
        ),
        Err(e) => e.into_response(),
    }
}
