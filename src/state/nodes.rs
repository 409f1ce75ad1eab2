//! Node writes: upsert (with plugin derivation), delete, status, drain, eligibility.

use std::sync::Arc;

use crate::engine::Key;
use crate::model::{Id, Node, NodeStatus};

use super::error::{Result, StateError};
use super::expectations::node_eligibility_changed;
use super::shared_ids::{SharedIds, reuse_node_parts, share_fingerprint_strings};
use super::tables::InstanceKind;
use super::writer::Writer;

/// Replaces node `n` and derives its plugin instances (docs/rules.md §4.1).
pub(crate) fn upsert_node(w: &mut Writer, node: Node) -> Result<()> {
    upsert_one(w, node, &mut SharedIds::default())?;
    w.flush_plugins()
}

/// Upserts nodes in order, each as [`upsert_node`], writing each plugin once.
pub(crate) fn upsert_nodes(w: &mut Writer, nodes: Vec<Node>) -> Result<()> {
    // An empty batch, an empty id and misfiled fingerprints are input rules
    // (`input.rs`), checked before any of this runs.
    let mut descriptions = SharedIds::default();
    for node in nodes {
        upsert_one(w, node, &mut descriptions)?;
    }
    w.flush_plugins()
}

/// The node row and its plugin entries; plugins stay in the writer until flushed.
fn upsert_one(w: &mut Writer, mut node: Node, descriptions: &mut SharedIds) -> Result<()> {
    // Borrowed: only the create index is needed, not a counted reference.
    let existing = w.txn.view().get_value(w.t.nodes, &Key::str(&node.id));
    node.create_index = existing.map_or(w.index, |n| n.create_index);
    let was_eligible = existing.is_some_and(|n| n.eligible);
    if let Some(old) = existing {
        reuse_node_parts(&mut node, old);
    } else if let Some(id) = w
        .txn
        .view()
        .index_eq(w.t.allocs_by_node, Key::str(&node.id).as_bytes())
        .borrowed()
        .map(|a| &a.node_id)
        .find(|id| **id == node.id)
    {
        // A new node: its allocations may have been placed before it registered
        // (`shared_ids.rs`).
        node.id = id.clone();
    }
    share_fingerprint_strings(
        &mut node,
        existing,
        |plugin_id| w.plugin_provider(plugin_id),
        |alloc_id| {
            w.txn
                .view()
                .get_value(w.t.allocs, &Key::str(alloc_id))
                .map(|a| &a.id)
        },
        descriptions,
    );
    node.modify_index = w.index;
    let node = Arc::new(node);
    w.txn.insert(w.t.nodes, Arc::clone(&node))?;
    node_eligibility_changed(w, &node.id, was_eligible, node.eligible);

    for info in node.csi_controller_plugins.values() {
        w.apply_fingerprint(&node.id, InstanceKind::Controller, info)?;
    }
    for info in node.csi_node_plugins.values() {
        w.apply_fingerprint(&node.id, InstanceKind::Node, info)?;
    }
    // The removal sweep, per kind: instances this node no longer reports.
    for inst in w.instances_on_node(&node.id) {
        let still_reported = match inst.kind {
            InstanceKind::Controller => node.csi_controller_plugins.contains_key(&inst.plugin_id),
            InstanceKind::Node => node.csi_node_plugins.contains_key(&inst.plugin_id),
        };
        if !still_reported {
            w.remove_entry(inst.kind, &inst.plugin_id, &node.id)?;
        }
    }
    Ok(())
}

/// Refuses fingerprints filed under another plugin id, or whose halves do not match
/// the maps they are filed in: an entry of the controller map needs a controller half,
/// an entry of the node map a node half, and a half the fingerprint carries needs an
/// entry for its plugin in the map of that kind.
pub(super) fn check_fingerprints(node: &Node) -> Result<()> {
    let maps = [
        (InstanceKind::Controller, &node.csi_controller_plugins),
        (InstanceKind::Node, &node.csi_node_plugins),
    ];
    for (key, info) in maps.iter().flat_map(|(_, map)| map.iter()) {
        if key.is_empty() || *key != info.plugin_id {
            return Err(StateError::FingerprintMismatch {
                node_id: node.id.clone(),
                key: key.clone(),
                plugin_id: info.plugin_id.clone(),
            });
        }
    }
    for (kind, map) in maps {
        for (key, info) in map.iter() {
            // Its own map's half first (the more telling error), then the other.
            let other = match kind {
                InstanceKind::Controller => InstanceKind::Node,
                InstanceKind::Node => InstanceKind::Controller,
            };
            let carries = |half| match half {
                InstanceKind::Controller => info.is_controller(),
                InstanceKind::Node => info.is_node(),
            };
            let other_map = match other {
                InstanceKind::Controller => &node.csi_controller_plugins,
                InstanceKind::Node => &node.csi_node_plugins,
            };
            let problem = if !carries(kind) {
                Some((kind, false))
            } else if carries(other) && !other_map.contains_key(key) {
                Some((other, true))
            } else {
                None
            };
            if let Some((half, carried)) = problem {
                return Err(StateError::FingerprintHalves {
                    node_id: node.id.clone(),
                    plugin_id: key.clone(),
                    filed_in: kind,
                    half,
                    carried,
                });
            }
        }
    }
    Ok(())
}

/// Deletes nodes and every plugin instance on them (docs/rules.md §4.2).
pub(crate) fn delete_nodes(w: &mut Writer, ids: &[Id]) -> Result<()> {
    for id in ids {
        if w.view().node(id).is_none() {
            return Err(StateError::NodeNotFound(id.clone()));
        }
    }
    for id in ids {
        if let Some(node) = w.txn.delete(w.t.nodes, &Key::str(id))? {
            node_eligibility_changed(w, id, node.eligible, false);
        }
        // Through the plugins' instance index, not the node's own maps: an instance
        // the node row no longer lists still goes.
        for inst in w.instances_on_node(id) {
            w.remove_entry(inst.kind, &inst.plugin_id, id)?;
        }
    }
    w.flush_plugins()
}

/// Replaces a node with `change` applied, if that changes it. Never touches plugins.
fn update_node(w: &mut Writer, id: &Id, change: impl FnOnce(&mut Node)) -> Result<()> {
    let Some(stored) = w.view().node(id) else {
        return Err(StateError::NodeNotFound(id.clone()));
    };
    let mut node = (*stored).clone();
    change(&mut node);
    if node == *stored {
        return Ok(());
    }
    node.modify_index = w.index;
    let eligible = (stored.eligible, node.eligible);
    w.txn.insert(w.t.nodes, Arc::new(node))?;
    node_eligibility_changed(w, id, eligible.0, eligible.1);
    w.flush_plugins()
}

pub(crate) fn update_status(w: &mut Writer, id: &Id, status: NodeStatus) -> Result<()> {
    update_node(w, id, |n| n.status = status)
}

pub(crate) fn update_drain(w: &mut Writer, id: &Id, drain: bool) -> Result<()> {
    update_node(w, id, |n| n.drain = drain)
}

pub(crate) fn update_eligibility(w: &mut Writer, id: &Id, eligible: bool) -> Result<()> {
    update_node(w, id, |n| n.eligible = eligible)
}
