//! Jobs in Nomad's shapes (`api::nomad::job`), reads and writes.
//!
//! Reads, blocking queries like every read (`reads.rs`): `GET /v1/jobs` — Nomad's
//! `JobListStub`s, whole jobs with `?full`; `namespace` is `default` unless named, `*`
//! for every one; `prefix`, `filter`, `reverse`, `per_page`/`next_token` as on every
//! list; answered with the jobs table's index. `GET /v1/job/{id}?namespace=` answers
//! with the job's own modify index, so a client blocking with it wakes on a write of
//! that job only (a missing job: the jobs' delete index). `GET /v1/job/{id}/allocations`: the job's allocations as
//! `AllocListStub`s (404 when neither the job nor an allocation of it exists).
//!
//! A read of one job (and a list with `?full`) answers the job as it was registered —
//! drivers, configs, resources, everything the store does not parse — with the row's
//! own fields laid over it (`api::nomad::job_answer`).
//!
//! Writes, the calls Nomad's clients make: `POST`/`PUT /v1/jobs` and
//! `POST /v1/job/{id}` with Nomad's register body `{"Job": {…}}` register a job or
//! update its definition; what the store sets (status, version, indexes) is ignored in
//! the body, and what it cannot honour is refused (400): `Stop: true` (stop a job
//! with `DELETE`) and `EnforceIndex` (no check-and-set). The `Job` object is kept whole
//! as the job's definition (`api::nomad::definition_of`), up to 1 MiB: a larger one is
//! 413 `JobDefinitionTooLarge`, and nothing is proposed. `DELETE
//! /v1/job/{id}?namespace=&purge=` stops the job (status dead, row kept) or, with
//! `purge=true`, deletes it; an unknown job is a 404 `JobNotFound`. The answers are
//! Nomad's `JobRegisterResponse` / `JobDeregisterResponse` without an evaluation (the
//! store schedules nothing): `EvalID` is empty.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::model::{Job, JobDefinition};
use schedstate::state::{Command, StateView, Table};
use serde::Deserialize;

use super::body::ClientBody;
use super::body::read_write_json;
use super::error::ApiError;
use super::idempotency::IdempotencyKey;
use super::list_body::Listed;
use super::listing::Listing;
use super::namespaces::{body_namespace, one_namespace};
use super::query::{Checked, Params};
use super::reads::{Item, absent, blocking, index_of, namespace_of, scan};
use super::writes::commit;
use super::{AppState, json};
use crate::api::nomad::{
    DefinitionTooLarge, NomadAllocListStub, NomadJob, NomadJobListStub, definition_of, job_answer,
    nullable,
};
use crate::service::Service;
use schedstate::model::MAX_DEFINITION_BYTES;
use serde_json::{Map, Value};

fn job_not_found(namespace: &str, id: &str) -> ApiError {
    ApiError::not_found(
        "JobNotFound",
        format!("job {id:?} not found in namespace {namespace:?}"),
    )
}

pub(crate) async fn list(State(st): State<AppState>, Checked(p): Checked) -> Response {
    let list = match Listing::of(&p) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let (full, namespace) = (p.full, namespace_of(&p));
    let show = move |_: &StateView<'_>, j: &Arc<Job>| {
        if full {
            Item::Full(job_answer(j))
        } else {
            Item::Stub(NomadJobListStub::from(&**j))
        }
    };
    scan(&st, &p, Table::Jobs, |v, budget| {
        let jobs: Box<dyn Iterator<Item = _>> = match &namespace {
            Some(ns) => Box::new(v.jobs_in_namespace(ns)),
            None => Box::new(v.jobs()),
        };
        let page = list.cut(
            budget,
            jobs.map(|j| (j.id.to_string(), format!("{}/{}", j.namespace, j.id), j)),
            |j| show(&v, j),
        )?;
        Ok((
            v.table_index(Table::Jobs),
            Some(Listed::new(page.items, show)),
            page.next_token,
        ))
    })
    .await
}

pub(crate) async fn read(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    let namespace = match one_namespace(&p, "a read of one job") {
        Ok(ns) => ns,
        Err(e) => return e.into_response(),
    };
    blocking(
        &st,
        &p,
        || job_not_found(&namespace, &id),
        // Its own modify index (as a node read does): a blocking read wakes on a
        // write of this job only; once it is gone, the jobs' delete index.
        |v| match v.job(&namespace, &id) {
            Some(j) => (j.modify_index, Some(job_answer(&j)), None),
            None => (absent(&v, Table::Jobs), None, None),
        },
    )
    .await
}

pub(crate) async fn allocations(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    let namespace = match one_namespace(&p, "a read of one job's allocations") {
        Ok(ns) => ns,
        Err(e) => return e.into_response(),
    };
    blocking(
        &st,
        &p,
        || job_not_found(&namespace, &id),
        |v| {
            let allocs: Vec<NomadAllocListStub> = v
                .allocs_by_job(&namespace, &id)
                .map(|a| NomadAllocListStub::from(&*a))
                .collect();
            // A purged job's allocations are still listed (they stay until
            // collected); a job that never was and ran nothing is a 404.
            let known = !allocs.is_empty() || v.job(&namespace, &id).is_some();
            (
                index_of(&v, &[Table::Allocs, Table::Jobs]),
                known.then_some(allocs),
                None,
            )
        },
    )
    .await
}

/// Nomad's `JobRegisterRequest`, the parts read.
#[derive(Debug, Deserialize)]
struct RegisterRequest {
    #[serde(rename = "Job", default)]
    job: Option<NomadJob>,
    #[serde(rename = "EnforceIndex", default, deserialize_with = "nullable")]
    enforce_index: bool,
}

/// Reads a register body: JSON, up to the write limit (a job with its templates and
/// environment can outgrow the small bodies' limit). Returns the parsed request and
/// the body's `Job` object as sent (its definition).
async fn read_register(
    st: &Service,
    headers: &HeaderMap,
    body: ClientBody,
) -> Result<(RegisterRequest, Option<Map<String, Value>>), ApiError> {
    const WHAT: &str = "a job registration";
    let value: Value = read_write_json(
        st,
        headers,
        body,
        WHAT,
        "{\"Job\": {\"ID\": …, \"TaskGroups\": […]}}",
    )
    .await?;
    let object = value.get("Job").and_then(Value::as_object).cloned();
    let request = serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("the body is not {WHAT}: {e}")))?;
    Ok((request, object))
}

/// The definition kept for a registration's `Job` object.
fn definition(
    object: Option<&Map<String, Value>>,
    parsed: &Job,
) -> Result<Option<JobDefinition>, ApiError> {
    let Some(object) = object else {
        return Ok(None);
    };
    definition_of(object, parsed).map(Some).map_err(|DefinitionTooLarge(bytes)| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "JobDefinitionTooLarge",
            format!(
                "the job's definition is {bytes} bytes (without the fields the store sets); a job may hold at most {MAX_DEFINITION_BYTES}"
            ),
        )
    })
}

/// The job a register body carries, checked against what the store can do and the
/// path's id; its namespace, if it names none, is `?namespace=`, else `default` (`*`
/// in either is refused).
fn job_of(
    (request, object): (RegisterRequest, Option<Map<String, Value>>),
    path_id: Option<&str>,
    p: &Params,
) -> Result<Job, ApiError> {
    let Some(mut shape) = request.job else {
        return Err(ApiError::bad_request(
            "no job in the request: send {\"Job\": {\"ID\": …, \"TaskGroups\": […]}}",
        ));
    };
    if request.enforce_index {
        return Err(ApiError::bad_request(
            "EnforceIndex: registering only at a given JobModifyIndex (check-and-set) is not supported; send the registration without it",
        ));
    }
    if shape.stop {
        return Err(ApiError::bad_request(
            "Stop: a registration cannot stop a job here; stop it with DELETE /v1/job/<id> (or register it with \"Stop\": false)",
        ));
    }
    if let Some(id) = path_id
        && shape.id != id
    {
        return Err(ApiError::bad_request(format!(
            "the job's ID {:?} is not {id:?}, the one the path names",
            shape.id
        )));
    }
    shape.namespace = body_namespace(&shape.namespace, p, "a job registration")?;
    let mut job = Job::try_from(shape).map_err(|e| ApiError::bad_request(e.to_string()))?;
    job.definition = definition(object.as_ref(), &job)?;
    Ok(job)
}

async fn register_job(
    st: &Service,
    key: &IdempotencyKey,
    path_id: Option<&str>,
    p: &Params,
    headers: &HeaderMap,
    body: ClientBody,
) -> Response {
    let job = match read_register(st, headers, body)
        .await
        .and_then(|r| job_of(r, path_id, p))
    {
        Ok(j) => j,
        Err(e) => return e.into_response(),
    };
    let (namespace, id) = (job.namespace.clone(), job.id.clone());
    let index = match commit(st, key, Command::UpsertJobs { jobs: vec![job] }).await {
        Ok(i) => i,
        Err(e) => return e.into_response(),
    };
    // The write was applied here before `commit` answered: the job as it now stands
    // (registering the same definition again changes nothing, and says so).
    let job_modify_index = st
        .server
        .read_stale()
        .view()
        .job(&namespace, &id)
        .map_or(index, |j| j.job_modify_index);
    let answer = serde_json::json!({
        "EvalID": "",
        "EvalCreateIndex": 0,
        "JobModifyIndex": job_modify_index,
        "Warnings": "",
        "Index": index,
    });
    json(st, StatusCode::OK, index, &answer, p.pretty)
}

/// `POST`/`PUT /v1/jobs`.
pub(crate) async fn register(
    State(st): State<AppState>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    register_job(&st, &key, None, &p, &headers, body).await
}

/// `POST /v1/job/{id}`: the body's job must be the one the path names.
pub(crate) async fn register_at(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    register_job(&st, &key, Some(&id), &p, &headers, body).await
}

/// `DELETE /v1/job/{id}?namespace=&purge=`.
pub(crate) async fn deregister(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
) -> Response {
    let namespace = match one_namespace(&p, "a job write") {
        Ok(ns) => ns,
        Err(e) => return e.into_response(),
    };
    let (namespace, ids) = (namespace.as_str().into(), vec![id.as_str().into()]);
    let command = if p.purge {
        Command::PurgeJobs { namespace, ids }
    } else {
        Command::StopJobs { namespace, ids }
    };
    match commit(&st, &key, command).await {
        Ok(index) => json(
            &st,
            StatusCode::OK,
            index,
            &serde_json::json!({
                "EvalID": "",
                "EvalCreateIndex": 0,
                "JobModifyIndex": index,
                "Index": index,
            }),
            p.pretty,
        ),
        // The store refuses an unknown job (a no-op entry, whose index the body
        // keeps); over HTTP that is the job not found, as a read of it would say.
        Err(mut e) if e.status == StatusCode::CONFLICT && e.body.kind == "JobNotFound" => {
            e.status = StatusCode::NOT_FOUND;
            e.into_response()
        }
        Err(e) => e.into_response(),
    }
}
