//! The CSI volume writes Nomad's clients make, mapped onto the store's commands:
//! `PUT /v1/volume/csi/{id}` with Nomad's `{"Volumes": [CSIVolume…]}` registers (or
//! updates the user fields of) volumes — server-assigned and derived fields in the
//! input are ignored; `DELETE /v1/volume/csi/{id}?namespace=&force=` deregisters one.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::model::CsiVolume;
use schedstate::state::Command;
use serde::Deserialize;

use super::body::ClientBody;
use super::body::read_json;
use super::error::ApiError;
use super::idempotency::IdempotencyKey;
use super::namespaces::{body_namespace, one_namespace};
use super::query::Checked;
use super::writes::commit;
use super::{AppState, json};
use crate::api::nomad::{NomadCsiVolume, nullable};

#[derive(Debug, Default, Deserialize)]
struct RegisterRequest {
    #[serde(rename = "Volumes", default, deserialize_with = "nullable")]
    volumes: Vec<NomadCsiVolume>,
}

fn written(st: &super::AppState, index: u64, pretty: bool) -> Response {
    json(
        st,
        StatusCode::OK,
        index,
        &serde_json::json!({"Index": index}),
        pretty,
    )
}

pub(crate) async fn register(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    let request: RegisterRequest = match read_json(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if request.volumes.is_empty() {
        return ApiError::bad_request("no volumes in the request (\"Volumes\": [...])")
            .into_response();
    }
    let mut volumes = Vec::with_capacity(request.volumes.len());
    for mut shape in request.volumes {
        shape.namespace = match body_namespace(&shape.namespace, &p, "a volume registration") {
            Ok(ns) => ns,
            Err(e) => return e.into_response(),
        };
        // Server-assigned and derived fields are the server's to set.
        shape.create_index = 0;
        shape.modify_index = 0;
        let mut v = match CsiVolume::try_from(shape) {
            Ok(v) => v,
            Err(e) => return ApiError::bad_request(e.to_string()).into_response(),
        };
        v.clear_denormalized();
        volumes.push(v);
    }
    // Nomad registers the volume the path names: a body naming others is refused.
    if volumes.iter().any(|v| *v.id != *id) {
        return ApiError::bad_request(format!(
            "the request registers volumes other than {id:?}, the one its path names"
        ))
        .into_response();
    }
    match commit(&st, &key, Command::RegisterCsiVolumes { volumes }).await {
        Ok(index) => written(&st, index, p.pretty),
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn deregister(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
) -> Response {
    let namespace = match one_namespace(&p, "a volume deregistration") {
        Ok(ns) => ns,
        Err(e) => return e.into_response(),
    };
    let command = Command::DeregisterCsiVolumes {
        namespace: namespace.as_str().into(),
        ids: vec![id.as_str().into()],
        force: p.force,
    };
    match commit(&st, &key, command).await {
        Ok(index) => written(&st, index, p.pretty),
        Err(e) => e.into_response(),
    }
}
