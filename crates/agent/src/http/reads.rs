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

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use schedstate::model::{Allocation, CsiPlugin, CsiVolume, Node};
use schedstate::state::{StateView, Table};
use serde::Serialize;

use super::AppState;
pub(super) use super::blocking::{absent, blocking, index_of, scan};
use super::error::ApiError;
use super::list_body::Listed;
use super::listing::Listing;
use super::query::{Checked, Params};
use crate::api::nomad::{
    NomadAllocListStub, NomadAllocation, NomadCsiPlugin, NomadCsiPluginListStub, NomadCsiVolume,
    NomadCsiVolumeListStub, NomadNode, NomadNodeListStub,
};
use crate::api::redact;

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
    let show = move |_: &StateView<'_>, n: &Arc<Node>| {
        if full {
            Item::Full(NomadNode::from(&**n))
        } else {
            Item::Stub(NomadNodeListStub::from(&**n))
        }
    };
    scan(&st, &p, Table::Nodes, |v, budget| {
        let page = list.cut(
            budget,
            v.nodes().map(|n| (n.id.to_string(), n.id.to_string(), n)),
            |n| show(&v, n),
        )?;
        Ok((
            v.table_index(Table::Nodes),
            Some(Listed::new(page.items, show)),
            page.next_token,
        ))
    })
    .await
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
    let show = move |_: &StateView<'_>, a: &Arc<Allocation>| {
        if full {
            Item::Full(NomadAllocation::from(&**a))
        } else {
            Item::Stub(NomadAllocListStub::from(&**a))
        }
    };
    scan(&st, &p, Table::Allocs, |v, budget| {
        let page = list.cut(
            budget,
            v.allocs()
                .filter(|a| namespace.as_deref().is_none_or(|ns| *a.namespace == *ns))
                .map(|a| (a.id.to_string(), a.id.to_string(), a)),
            |a| show(&v, a),
        )?;
        Ok((
            v.table_index(Table::Allocs),
            Some(Listed::new(page.items, show)),
            page.next_token,
        ))
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
    let show = move |_: &StateView<'_>, plugin: &Arc<CsiPlugin>| {
        if full {
            Item::Full(NomadCsiPlugin::from(&**plugin))
        } else {
            Item::Stub(NomadCsiPluginListStub::from(&**plugin))
        }
    };
    scan(&st, &p, Table::CsiPlugins, |v, budget| {
        let page = list.cut(
            budget,
            v.csi_plugins()
                .map(|plugin| (plugin.id.to_string(), plugin.id.to_string(), plugin)),
            |plugin| show(&v, plugin),
        )?;
        Ok((
            v.table_index(Table::CsiPlugins),
            Some(Listed::new(page.items, show)),
            page.next_token,
        ))
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
    // A volume is shown with its plugin and claiming allocations, from the snapshot
    // the list read.
    let show = move |v: &StateView<'_>, vol: &Arc<CsiVolume>| {
        let mut d = v.denormalize_csi_volume(vol);
        redact(&mut d);
        if full {
            Item::Full(
                NomadCsiVolume::from(&d)
                    .with_allocations(&d, |a| v.alloc(a).map(|a| NomadAllocListStub::from(&*a))),
            )
        } else {
            Item::Stub(NomadCsiVolumeListStub::from(&d))
        }
    };
    scan(&st, &p, Table::CsiVolumes, |v, budget| {
        let stored: Vec<Arc<CsiVolume>> = match &namespace {
            Some(ns) => v.csi_volumes_by_prefix(ns, &prefix).collect(),
            None if prefix.is_empty() => v.csi_volumes().collect(),
            None => {
                let mut all: Vec<_> = v.csi_volumes_by_prefix_all(&prefix).collect();
                all.sort_by(|a, b| (&a.namespace, &a.id).cmp(&(&b.namespace, &b.id)));
                all
            }
        };
        let page = list.cut(
            budget,
            stored.into_iter().map(|vol| {
                (
                    vol.id.to_string(),
                    format!("{}/{}", vol.namespace, vol.id),
                    vol,
                )
            }),
            |vol| show(&v, vol),
        )?;
        Ok((
            index_of(&v, &[Table::CsiVolumes, Table::CsiPlugins, Table::Allocs]),
            Some(Listed::new(page.items, show)),
            page.next_token,
        ))
    })
    .await
}

pub(crate) async fn volume(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Checked(p): Checked,
) -> Response {
    let namespace = match super::namespaces::one_namespace(&p, "a read of one volume") {
        Ok(ns) => ns,
        Err(e) => return e.into_response(),
    };
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
                    .with_allocations(&d, |a| v.alloc(a).map(|a| NomadAllocListStub::from(&*a)))
            });
            (index, found, None)
        },
    )
    .await
}
