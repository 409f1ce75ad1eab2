//! The reads: each one a blocking query over the store on this server (the guard in
//! front already made it consistent, or it asked for `?stale`). A read answers with
//! the largest table index of the tables it read, and waits on exactly the rows and
//! ranges it read: a write elsewhere wakes nothing.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schedstate::QueryOptions;
use schedstate::model::CsiVolume;
use schedstate::state::{StateView, Table};
use serde::Serialize;

use super::error::ApiError;
use super::query::{Checked, Params, Read, VolumeList, VolumeRead};
use super::{AppState, json};
use crate::api::{PluginListStub, redact};
use crate::service::Service;

/// A waiting blocking query: counted in the metrics and against the limit while it
/// lives.
struct Waiting<'a> {
    st: &'a Service,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl<'a> Waiting<'a> {
    /// `Ok(None)` for a read that does not block.
    fn new(st: &'a Service, blocking: bool) -> Result<Option<Waiting<'a>>, ApiError> {
        if !blocking {
            return Ok(None);
        }
        let permit = st
            .gates
            .blocking_query()
            .map_err(|r| ApiError::too_many(r.message(&st.limits)))?;
        st.metrics.blocking_waiting.inc();
        Ok(Some(Waiting {
            st,
            _permit: permit,
        }))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.st.metrics.blocking_waiting.dec();
    }
}

/// Runs `read` as a blocking query with the request's `index` and `wait`; `None`
/// from it is a 404 of `missing`.
async fn blocking<T: Serialize>(
    st: &Service,
    p: &Params,
    missing: impl Fn() -> ApiError,
    mut read: impl FnMut(StateView<'_>) -> (u64, Option<T>),
) -> Response {
    let wait = p.wait.unwrap_or(st.max_wait).min(st.max_wait);
    let opts = QueryOptions::new(p.index, wait);
    let _waiting = match Waiting::new(st, p.index > 0) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let mut stopping = st.stopping.clone();
    let answered = {
        let query = st
            .server
            .reader()
            .blocking_query_async(opts, tokio::time::sleep, &mut read);
        tokio::select! {
            a = query => Some((a.index, a.value)),
            // The agent is stopping: answer now with what is there.
            _ = stopping.wait_for(|s| *s) => None,
        }
    };
    let (index, value) = match answered {
        Some(a) => a,
        None => read(st.server.read_stale().view()),
    };
    match value {
        Some(value) => json(st, StatusCode::OK, index, &value, p.pretty),
        None => {
            let mut resp = missing().into_response();
            super::with_index(st, &mut resp, index);
            resp
        }
    }
}

fn index_of(v: &StateView<'_>, tables: &[Table]) -> u64 {
    tables.iter().map(|t| v.table_index(*t)).max().unwrap_or(0)
}

pub(crate) async fn nodes(State(st): State<AppState>, Checked(p, _): Checked<Read>) -> Response {
    blocking(&st, &p, unreachable_missing, |v| {
        let nodes: Vec<_> = v.nodes().collect();
        (v.table_index(Table::Nodes), Some(nodes))
    })
    .await
}

fn unreachable_missing() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        "a list is never missing",
    )
}

pub(crate) async fn node(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p, _): Checked<Read>,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("NodeNotFound", format!("node {id:?} not found")),
        |v| (v.table_index(Table::Nodes), v.node(&id)),
    )
    .await
}

pub(crate) async fn node_allocations(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p, _): Checked<Read>,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("NodeNotFound", format!("node {id:?} not found")),
        |v| {
            let allocs: Vec<_> = v.allocs_by_node(&id).collect();
            // A node that is gone but still has allocations lists them, as Nomad
            // does; one that never was is a 404.
            let known = !allocs.is_empty() || v.node(&id).is_some();
            (
                index_of(&v, &[Table::Allocs, Table::Nodes]),
                known.then_some(allocs),
            )
        },
    )
    .await
}

pub(crate) async fn allocation(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p, _): Checked<Read>,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("AllocationNotFound", format!("allocation {id:?} not found")),
        |v| (v.table_index(Table::Allocs), v.alloc(&id)),
    )
    .await
}

pub(crate) async fn plugins(State(st): State<AppState>, Checked(p, _): Checked<Read>) -> Response {
    blocking(&st, &p, unreachable_missing, |v| {
        let rows: Vec<PluginListStub> = v.csi_plugins().map(|p| PluginListStub::of(&p)).collect();
        (v.table_index(Table::CsiPlugins), Some(rows))
    })
    .await
}

pub(crate) async fn plugin(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p, _): Checked<Read>,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("PluginNotFound", format!("CSI plugin {id:?} not found")),
        |v| {
            (
                index_of(&v, &[Table::CsiPlugins, Table::Allocs]),
                v.csi_plugin_denormalized(&id),
            )
        },
    )
    .await
}

pub(crate) async fn volumes(
    State(st): State<AppState>,
    Checked(p, _): Checked<VolumeList>,
) -> Response {
    let prefix = p.prefix.clone().unwrap_or_default();
    let namespace = p.namespace.clone();
    blocking(&st, &p, unreachable_missing, |v| {
        let stored: Vec<Arc<CsiVolume>> = match &namespace {
            Some(ns) => v.csi_volumes_by_prefix(ns, &prefix).collect(),
            None if prefix.is_empty() => v.csi_volumes().collect(),
            None => {
                let mut all: Vec<_> = v.csi_volumes_by_prefix_all(&prefix).collect();
                all.sort_by(|a, b| (&a.namespace, &a.id).cmp(&(&b.namespace, &b.id)));
                all
            }
        };
        let out: Vec<CsiVolume> = stored
            .iter()
            .map(|vol| {
                let mut d = v.denormalize_csi_volume(vol);
                redact(&mut d);
                d
            })
            .collect();
        (
            index_of(&v, &[Table::CsiVolumes, Table::CsiPlugins, Table::Allocs]),
            Some(out),
        )
    })
    .await
}

pub(crate) async fn volume(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p, _): Checked<VolumeRead>,
) -> Response {
    let namespace = p.namespace.clone().unwrap_or_else(|| "default".to_string());
    blocking(
        &st,
        &p,
        || {
            ApiError::not_found(
                "VolumeNotFound",
                format!("CSI volume {id:?} not found in namespace {namespace:?}"),
            )
        },
        |v| {
            let found = v.csi_volume_denormalized(&namespace, &id).map(|mut d| {
                redact(&mut d);
                d
            });
            (
                index_of(&v, &[Table::CsiVolumes, Table::CsiPlugins, Table::Allocs]),
                found,
            )
        },
    )
    .await
}
