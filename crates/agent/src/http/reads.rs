//! The reads, in Nomad's shapes (`api::nomad`; jobs are in `jobs.rs`): each one a blocking query over the
//! store on this server (the guard in front already made it consistent, or it asked
//! for `?stale`). Each answers with the index of what it read (docs/rules.md §5,
//! "The index of an answer"): one row, its modify index; a plugin or volume, the
//! largest index of the rows it was built from; a row that is not there, its table's
//! delete index; a list, the largest table index of the tables it read. Each waits on
//! exactly the rows and ranges it read, and a wake whose answer is still at or below
//! the index asked for waits on (the engine's loop): a write elsewhere wakes nothing
//! and returns nothing. Lists take Nomad's
//! `prefix`, `filter`, `reverse`, `per_page`/`next_token` (`listing.rs`) and, for
//! allocations and volumes, `namespace` (`default` unless named; `*` for all); they
//! answer Nomad's list stubs, or whole objects with schedstate's `?full`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::model::CsiVolume;
use schedstate::state::{StateView, Table};
use schedstate::{QueryOptions, WatchSet};
use serde::Serialize;

use super::error::ApiError;
use super::listing::Listing;
use super::park::{Parked, ParkedWait, Place, Waiting};
use super::query::{Checked, Params};
use super::{AppState, json};
use crate::api::nomad::{
    NomadAllocListStub, NomadAllocation, NomadCsiPlugin, NomadCsiPluginListStub, NomadCsiVolume,
    NomadCsiVolumeListStub, NomadNode, NomadNodeListStub,
};
use crate::api::{NOMAD_NEXT_TOKEN_HEADER, redact};
use crate::service::Service;

/// What a read found: the value (`None`: 404) and, for a page of a list, the token
/// of the next page.
type Found<T> = (u64, Option<T>, Option<String>);

/// Runs `read` as a blocking query with the request's `index` and `wait`; `None`
/// from it is a 404 of `missing`. When the request's connection offers to park the
/// wait (`park.rs`), one round: the answer, or a [`Parked`] mark to wait on.
pub(super) async fn blocking<T: Serialize>(
    st: &AppState,
    p: &Params,
    missing: impl Fn() -> ApiError,
    mut read: impl FnMut(StateView<'_>) -> Found<T>,
) -> Response {
    let wait = p.wait.unwrap_or(st.max_wait).min(st.max_wait);
    let opts = QueryOptions::new(p.index, wait);
    let place = p.park.as_ref().and_then(|o| o.place.as_ref());
    let waiting = if p.index > 0 {
        match Place::take_or_new(place, st) {
            Ok(w) => Some(w),
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    let waiting = match (&p.park, waiting) {
        (Some(offer), Some(waiting)) => {
            return park_round(st, p, opts, offer.deadline, waiting, missing, read);
        }
        (_, waiting) => waiting,
    };
    let _waiting = waiting;
    let mut stopping = st.stopping.clone();
    let mut next_token = None;
    let answered = {
        let query = st.server.reader().blocking_query_async(
            opts,
            tokio::time::sleep,
            |v: StateView<'_>| {
                let (index, value, next) = read(v);
                let index = at_least_one(&v, index);
                // An answer that does not end the query is dropped here, not held
                // while the query waits: a waiting query keeps its watch set and its
                // index, and reads once more if its wait runs out.
                if !opts.is_answered_by(index) {
                    return (index, None);
                }
                next_token = next;
                (index, Some(value))
            },
        );
        tokio::select! {
            a = query => a.value.map(|value| (a.index, value)),
            // The agent is stopping: answer now with what is there.
            _ = stopping.wait_for(|s| *s) => None,
        }
    };
    let (index, value) = match answered {
        Some(a) => a,
        // The wait ran out (or the agent is stopping): what is there now.
        None => {
            let snapshot = st.server.read_stale();
            let (index, value, next) = read(snapshot.view());
            next_token = next;
            (at_least_one(&snapshot.view(), index), value)
        }
    };
    answer(st, p, index, value, next_token, missing)
}

/// One round of a parked blocking read: it reads with a watch set; answered (or its
/// wait over, or the agent stopping), the answer; otherwise a [`Parked`] mark with
/// the watch set, the deadline and `waiting`. The value read is dropped either way
/// before the mark is made: a parked read keeps no rows.
fn park_round<T: Serialize>(
    st: &AppState,
    p: &Params,
    opts: QueryOptions,
    deadline: Option<Instant>,
    waiting: Waiting,
    missing: impl Fn() -> ApiError,
    mut read: impl FnMut(StateView<'_>) -> Found<T>,
) -> Response {
    let deadline = deadline.unwrap_or_else(|| Instant::now() + opts.effective_wait());
    let watch = WatchSet::new();
    let snapshot = st.server.reader().snapshot();
    let (index, value, next) = read(snapshot.watched(&watch));
    let index = at_least_one(&snapshot.view(), index);
    drop(snapshot);
    if opts.is_answered_by(index) || Instant::now() >= deadline || *st.stopping.borrow() {
        drop(waiting);
        return answer(st, p, index, value, next, missing);
    }
    drop(value);
    Parked::response(ParkedWait {
        watch,
        deadline,
        waiting,
    })
}

/// The answer to a read: the value as JSON with its index, or `missing` (a 404)
/// with the index of the absence.
fn answer<T: Serialize>(
    st: &Service,
    p: &Params,
    index: u64,
    value: Option<T>,
    next_token: Option<String>,
    missing: impl Fn() -> ApiError,
) -> Response {
    match value {
        Some(value) => {
            let mut resp = json(st, StatusCode::OK, index, &value, p.pretty);
            if let Some(token) = next_token.and_then(|t| HeaderValue::from_str(&t).ok()) {
                resp.headers_mut().insert(NOMAD_NEXT_TOKEN_HEADER, token);
            }
            resp
        }
        None => {
            let mut resp = missing().into_response();
            super::with_index(st, &mut resp, index);
            resp
        }
    }
}

/// An answer's index raised to 1 once the store holds anything, as Nomad does: a
/// client that blocks with 0 is answered at once, so an empty table or a row never
/// deleted (index 0) would make it poll in a loop. Safe: every later write is above
/// 1, so the raised index still moves when the answer changes.
fn at_least_one(v: &StateView<'_>, index: u64) -> u64 {
    index.max(v.last_applied().min(1))
}

/// The index of a row that is not there: its table's delete index (raised to 1).
pub(super) fn absent(v: &StateView<'_>, table: Table) -> u64 {
    at_least_one(v, v.delete_index(table))
}

pub(super) fn index_of(v: &StateView<'_>, tables: &[Table]) -> u64 {
    tables.iter().map(|t| v.table_index(*t)).max().unwrap_or(0)
}

/// A list item in Nomad's stub shape, or whole with `?full` (schedstate's own
/// parameter, which its client and CLI use).
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Item<S, F> {
    Stub(S),
    Full(F),
}

/// The namespaces a list covers: `None` for every one (`*`), else the one asked
/// (`default` when none is).
pub(super) fn namespace_of(p: &Params) -> Option<String> {
    match p.namespace.as_deref() {
        Some("*") => None,
        Some(ns) if !ns.is_empty() => Some(ns.to_string()),
        _ => Some("default".to_string()),
    }
}

pub(crate) async fn nodes(State(st): State<AppState>, Checked(p): Checked) -> Response {
    let list = match Listing::of(&p) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let full = p.full;
    blocking(&st, &p, unreachable_missing, |v| {
        let page = list.cut(v.nodes().map(|n| {
            let item = if full {
                Item::Full(NomadNode::from(&*n))
            } else {
                Item::Stub(NomadNodeListStub::from(&*n))
            };
            (n.id.to_string(), n.id.to_string(), item)
        }));
        (
            v.table_index(Table::Nodes),
            Some(page.items),
            page.next_token,
        )
    })
    .await
}

pub(super) fn unreachable_missing() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        "a list is never missing",
    )
}

pub(crate) async fn node(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("NodeNotFound", format!("node {id:?} not found")),
        // A node answers with its own modify index (as Nomad does), so a client that
        // blocks with it is woken by a change of this node only; once it is gone,
        // with the nodes' delete index, which writes to other nodes do not move.
        |v| match v.node(&id) {
            Some(n) => (n.modify_index, Some(NomadNode::from(&*n)), None),
            None => (absent(&v, Table::Nodes), None, None),
        },
    )
    .await
}

pub(crate) async fn node_allocations(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("NodeNotFound", format!("node {id:?} not found")),
        |v| {
            let allocs: Vec<NomadAllocation> = v
                .allocs_by_node(&id)
                .map(|a| NomadAllocation::from(&*a))
                .collect();
            // A node that is gone but still has allocations lists them, as Nomad
            // does; one that never was is a 404.
            let known = !allocs.is_empty() || v.node(&id).is_some();
            (
                index_of(&v, &[Table::Allocs, Table::Nodes]),
                known.then_some(allocs),
                None,
            )
        },
    )
    .await
}

pub(crate) async fn allocations(State(st): State<AppState>, Checked(p): Checked) -> Response {
    let list = match Listing::of(&p) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let (full, namespace) = (p.full, namespace_of(&p));
    blocking(&st, &p, unreachable_missing, |v| {
        let page = list.cut(
            v.allocs()
                .filter(|a| namespace.as_deref().is_none_or(|ns| *a.namespace == *ns))
                .map(|a| {
                    let item = if full {
                        Item::Full(NomadAllocation::from(&*a))
                    } else {
                        Item::Stub(NomadAllocListStub::from(&*a))
                    };
                    (a.id.to_string(), a.id.to_string(), item)
                }),
        );
        (
            v.table_index(Table::Allocs),
            Some(page.items),
            page.next_token,
        )
    })
    .await
}

pub(crate) async fn allocation(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("AllocationNotFound", format!("allocation {id:?} not found")),
        |v| match v.alloc(&id) {
            Some(a) => (a.modify_index, Some(NomadAllocation::from(&*a)), None),
            None => (absent(&v, Table::Allocs), None, None),
        },
    )
    .await
}

pub(crate) async fn plugins(State(st): State<AppState>, Checked(p): Checked) -> Response {
    let list = match Listing::of(&p) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let full = p.full;
    blocking(&st, &p, unreachable_missing, |v| {
        let page = list.cut(v.csi_plugins().map(|plugin| {
            let item = if full {
                Item::Full(NomadCsiPlugin::from(&*plugin))
            } else {
                Item::Stub(NomadCsiPluginListStub::from(&*plugin))
            };
            (plugin.id.to_string(), plugin.id.to_string(), item)
        }));
        (
            v.table_index(Table::CsiPlugins),
            Some(page.items),
            page.next_token,
        )
    })
    .await
}

pub(crate) async fn plugin(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    blocking(
        &st,
        &p,
        || ApiError::not_found("PluginNotFound", format!("CSI plugin {id:?} not found")),
        // Denormalized from its allocations too: the largest index of the rows it
        // was built from, so a change of an allocation it lists moves it and a write
        // to any other allocation does not.
        |v| {
            let (index, plugin) = v.csi_plugin_denormalized_indexed(&id);
            (index, plugin.map(|p| NomadCsiPlugin::from(&p)), None)
        },
    )
    .await
}

pub(crate) async fn volumes(State(st): State<AppState>, Checked(p): Checked) -> Response {
    let list = match Listing::of(&p) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    let prefix = p.prefix.clone().unwrap_or_default();
    let (full, namespace) = (p.full, namespace_of(&p));
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
        let page = list.cut(stored.iter().map(|vol| {
            let mut d = v.denormalize_csi_volume(vol);
            redact(&mut d);
            let item = if full {
                Item::Full(NomadCsiVolume::from(&d))
            } else {
                Item::Stub(NomadCsiVolumeListStub::from(&d))
            };
            (
                vol.id.to_string(),
                format!("{}/{}", vol.namespace, vol.id),
                item,
            )
        }));
        (
            index_of(&v, &[Table::CsiVolumes, Table::CsiPlugins, Table::Allocs]),
            Some(page.items),
            page.next_token,
        )
    })
    .await
}

pub(crate) async fn volume(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    let namespace = namespace_of(&p).unwrap_or_else(|| "default".to_string());
    blocking(
        &st,
        &p,
        || {
            ApiError::not_found(
                "VolumeNotFound",
                format!("CSI volume {id:?} not found in namespace {namespace:?}"),
            )
        },
        // Built from its plugin and claiming allocations too: the largest index of
        // those rows and the volume's.
        |v| {
            let (index, found) = v.csi_volume_denormalized_indexed(&namespace, &id);
            let found = found.map(|mut d| {
                redact(&mut d);
                NomadCsiVolume::from(&d)
            });
            (index, found, None)
        },
    )
    .await
}
