//! Node writes: upsert (with plugin derivation), delete, status, drain, eligibility.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::Key;
use crate::model::{Id, Node, NodeStatus};

use super::error::{Result, StateError};
use super::expectations::node_eligibility_changed;
use super::shared_ids::{SharedIds, reuse_node_parts, share_fingerprint_strings, stored_alloc_id};
use super::tables::{InstanceKind, PluginInstance};
use super::writer::Writer;

/// Replaces node `n` and derives its plugin instances (docs/rules.md §4.1).
pub(crate) fn upsert_node(w: &mut Writer, node: Node) -> Result<()> {
    let stored = w.txn.view().get(w.t.nodes, Key::str(&node.id).as_bytes());
    let allocs = FingerprintAllocs::look_up(w, [(&node, stored.as_deref())]);
    let row = upsert_one(
        w,
        node,
        stored.as_deref(),
        &mut SharedIds::default(),
        &allocs,
    )?;
    w.txn.insert(w.t.nodes, row)?;
    w.flush_plugins()
}

/// Upserts nodes in order, each as [`upsert_node`], writing each plugin once and the
/// node rows as one batch (`WriteTxn::insert_many`) once all are derived: nothing in
/// a node's derivation reads another node's row but a repeated id's, which is taken
/// from this command's rows.
pub(crate) fn upsert_nodes(w: &mut Writer, nodes: Vec<Node>) -> Result<()> {
    // An empty batch, an empty id and misfiled fingerprints are input rules
    // (`input.rs`), checked before any of this runs.
    let mut descriptions = SharedIds::default();
    // The stored rows, looked up together (their lookups descend the nodes' tree
    // side by side, `View::get_many`).
    let keys: Vec<Key> = nodes.iter().map(|n| Key::str(&n.id)).collect();
    let mut stored: Vec<Option<Arc<Node>>> = Vec::with_capacity(nodes.len());
    w.txn
        .view()
        .get_many(w.t.nodes, &keys, |_, row| stored.push(row));
    let allocs =
        FingerprintAllocs::look_up(w, nodes.iter().zip(stored.iter().map(Option::as_deref)));
    let mut rows: Vec<Arc<Node>> = Vec::with_capacity(nodes.len());
    let mut earlier: HashMap<Id, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(nodes.len(), Default::default());
    for (node, stored) in nodes.into_iter().zip(stored) {
        let before = match earlier.get(&node.id) {
            Some(&i) => Some(Arc::clone(&rows[i])),
            None => stored,
        };
        let row = upsert_one(w, node, before.as_deref(), &mut descriptions, &allocs)?;
        earlier.insert(row.id.clone(), rows.len());
        rows.push(row);
    }
    w.txn.insert_many(w.t.nodes, rows)?;
    w.flush_plugins()
}

/// The allocations the fingerprints of a command's nodes name, by id, looked up
/// together before any node is derived (their lookups descend the allocations' tree
/// side by side, `View::get_many`): a fingerprint's allocation id points at the
/// row's copy (`shared_ids.rs`). Node writes do not change the allocations table.
///
/// An id the node's stored fingerprint of the same plugin and kind already names is
/// not looked up: the fingerprint takes the stored fingerprint's copy, which is the
/// allocation row's unless the allocation was placed after that report. A node that
/// reports again mostly names the same allocations, and these lookups (random reads
/// of a large table) were the node upsert's largest cost after the plugin entries.
struct FingerprintAllocs {
    /// (the id a fingerprint names, the row's copy of it), sorted.
    found: Vec<(Id, Id)>,
}

impl FingerprintAllocs {
    /// The allocations `nodes` name (each with its stored row, if any) that their
    /// stored rows do not.
    fn look_up<'n>(
        w: &Writer,
        nodes: impl IntoIterator<Item = (&'n Node, Option<&'n Node>)>,
    ) -> FingerprintAllocs {
        let mut named: Vec<&Id> = Vec::new();
        for (node, stored) in nodes {
            let maps = [
                (
                    &node.csi_controller_plugins,
                    stored.map(|s| &s.csi_controller_plugins),
                ),
                (&node.csi_node_plugins, stored.map(|s| &s.csi_node_plugins)),
            ];
            for (map, stored_map) in maps {
                for info in map.values() {
                    if !info.alloc_id.is_empty() && stored_alloc_id(stored_map, info).is_none() {
                        named.push(&info.alloc_id);
                    }
                }
            }
        }
        named.sort_unstable();
        named.dedup();
        let keys: Vec<Key> = named.iter().map(|id| Key::str(id)).collect();
        let mut found = Vec::with_capacity(named.len());
        w.txn.view().get_many(w.t.allocs, &keys, |i, row| {
            if let Some(row) = row {
                found.push((named[i].clone(), row.id.clone()));
            }
        });
        FingerprintAllocs { found }
    }

    /// The row's copy of allocation id `id`, if the allocation exists and was looked
    /// up.
    fn get(&self, id: &str) -> Option<&Id> {
        let i = self
            .found
            .binary_search_by(|(named, _)| (**named).cmp(id))
            .ok()?;
        Some(&self.found[i].1)
    }
}

/// The node row and its plugin entries, not yet stored; plugins stay in the writer
/// until flushed. `existing`: the row this one replaces (this command's earlier row
/// of the same id, else the stored one).
fn upsert_one(
    w: &mut Writer,
    mut node: Node,
    existing: Option<&Node>,
    descriptions: &mut SharedIds,
    allocs: &FingerprintAllocs,
) -> Result<Arc<Node>> {
    let view = w.txn.view();
    node.create_index = existing.map_or(w.index, |n| n.create_index);
    let was_eligible = existing.is_some_and(|n| n.eligible);
    if let Some(old) = existing {
        reuse_node_parts(&mut node, old);
    } else if let Some(id) = view
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
        |alloc_id| allocs.get(alloc_id),
        descriptions,
    );
    node.modify_index = w.index;
    let node = Arc::new(node);
    node_eligibility_changed(w, &node.id, was_eligible, node.eligible);

    for info in node.csi_controller_plugins.values() {
        w.apply_fingerprint(&node.id, InstanceKind::Controller, info)?;
    }
    for info in node.csi_node_plugins.values() {
        w.apply_fingerprint(&node.id, InstanceKind::Node, info)?;
    }
    // The removal sweep, per kind: instances this node no longer reports. A node's
    // instances are always among the plugins its row lists in the map of their kind
    // (`entries-follow-fingerprints`, checked of every restored state), so when the
    // new row lists every plugin the one it replaces did, there is nothing to sweep.
    let reports_all_it_did = existing.is_none_or(|old| {
        old.csi_controller_plugins
            .keys()
            .all(|id| node.csi_controller_plugins.contains_key(id))
            && old
                .csi_node_plugins
                .keys()
                .all(|id| node.csi_node_plugins.contains_key(id))
    });
    let gone = |inst: &PluginInstance| match inst.kind {
        InstanceKind::Controller => !node.csi_controller_plugins.contains_key(&inst.plugin_id),
        InstanceKind::Node => !node.csi_node_plugins.contains_key(&inst.plugin_id),
    };
    if reports_all_it_did {
        debug_assert!(
            !w.instances_on_node(&node.id).iter().any(|i| gone(i)),
            "node {}: an instance of a plugin its row did not list",
            node.id
        );
    } else {
        for inst in w.instances_on_node(&node.id) {
            if gone(&inst) {
                w.remove_entry(inst.kind, &inst.plugin_id, &node.id)?;
            }
        }
    }
    Ok(node)
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
