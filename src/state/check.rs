//! The invariant checker: every property a state must have whatever commands built
//! it. Used by property tests, fuzz targets and `inspect --verify`.

use std::collections::BTreeSet;

use crate::model::{CsiPlugin, CsiVolume, CsiVolumeAccessMode, PluginInstances};

use super::read::StateView;
use super::tables::{InstanceKind, PluginInstance, names};

/// The first invariant a state breaks, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant {invariant} broken: {detail}")]
pub struct InvariantViolation {
    /// A short name of the invariant.
    pub invariant: &'static str,
    /// What was found.
    pub detail: String,
}

fn broken(invariant: &'static str, detail: String) -> InvariantViolation {
    InvariantViolation { invariant, detail }
}

impl StateView<'_> {
    /// Checks every invariant of the state (see `ARCHITECTURE.md`); returns the first
    /// one broken. O(rows).
    ///
    /// # Errors
    /// The broken invariant.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.raw()
            .verify_indexes()
            .map_err(|detail| broken("secondary-indexes", detail))?;
        self.check_indexes_order()?;
        let mut instances: BTreeSet<(String, InstanceKind, String, String)> = self
            .raw()
            .iter(self.tables().instances)
            .map(|i: std::sync::Arc<PluginInstance>| {
                (
                    i.node_id.to_string(),
                    i.kind,
                    i.plugin_id.to_string(),
                    i.alloc_id.to_string(),
                )
            })
            .collect();
        for plugin in self.csi_plugins() {
            self.check_plugin(&plugin, &mut instances)?;
        }
        if let Some(extra) = instances.into_iter().next() {
            return Err(broken(
                "instances-mirror-plugins",
                format!("instance row {extra:?} has no plugin entry"),
            ));
        }
        for volume in self.csi_volumes() {
            check_volume(&volume)?;
        }
        Ok(())
    }

    fn check_indexes_order(&self) -> Result<(), InvariantViolation> {
        let latest = self.latest_index();
        if latest > self.last_applied() {
            return Err(broken(
                "latest-index",
                format!(
                    "latest index {latest} > last applied {}",
                    self.last_applied()
                ),
            ));
        }
        let rows = |table: &'static str, rows: Vec<(String, u64, u64)>| {
            let t = self.table_index(table);
            for (id, create, modify) in rows {
                if !(create <= modify && modify <= t) {
                    return Err(broken(
                        "row-indexes",
                        format!("{table} {id}: create {create}, modify {modify}, table {t}"),
                    ));
                }
            }
            Ok(())
        };
        rows(
            names::NODES,
            self.nodes()
                .map(|n| (n.id.to_string(), n.create_index, n.modify_index))
                .collect(),
        )?;
        rows(
            names::ALLOCS,
            self.allocs()
                .map(|a| (a.id.to_string(), a.create_index, a.modify_index))
                .collect(),
        )?;
        rows(
            names::CSI_PLUGINS,
            self.csi_plugins()
                .map(|p| (p.id.to_string(), p.create_index, p.modify_index))
                .collect(),
        )?;
        rows(
            names::CSI_VOLUMES,
            self.csi_volumes()
                .map(|v| {
                    (
                        format!("{}/{}", v.namespace, v.id),
                        v.create_index,
                        v.modify_index,
                    )
                })
                .collect(),
        )
    }

    fn check_plugin(
        &self,
        p: &CsiPlugin,
        instances: &mut BTreeSet<(String, InstanceKind, String, String)>,
    ) -> Result<(), InvariantViolation> {
        if p.is_empty() {
            return Err(broken(
                "no-empty-plugin",
                format!("plugin {} is stored empty", p.id),
            ));
        }
        if !p.allocations.is_empty() {
            return Err(broken(
                "denormalized-fields-not-stored",
                format!("plugin {} stores allocations", p.id),
            ));
        }
        let kinds: [(InstanceKind, &PluginInstances); 2] = [
            (InstanceKind::Controller, &p.controllers),
            (InstanceKind::Node, &p.nodes),
        ];
        for (kind, map) in kinds {
            let healthy = map.iter().filter(|(_, i)| i.healthy).count();
            if healthy != map.healthy() || map.iter().count() != map.len() {
                return Err(broken(
                    "derived-counts",
                    format!("plugin {} {kind:?}: counted {healthy} healthy", p.id),
                ));
            }
            for (node_id, info) in map.iter() {
                if info.plugin_id != p.id {
                    return Err(broken(
                        "entry-names-its-plugin",
                        format!("plugin {} holds an entry of {}", p.id, info.plugin_id),
                    ));
                }
                let node = self.node_by_id(node_id).ok_or_else(|| {
                    broken(
                        "entries-on-existing-nodes",
                        format!(
                            "plugin {} has a {kind:?} entry on missing node {node_id}",
                            p.id
                        ),
                    )
                })?;
                let listed = match kind {
                    InstanceKind::Controller => node.csi_controller_plugins.contains_key(&p.id),
                    InstanceKind::Node => node.csi_node_plugins.contains_key(&p.id),
                };
                if !listed {
                    return Err(broken(
                        "entries-follow-fingerprints",
                        format!(
                            "plugin {} has a {kind:?} entry on {node_id}, which does not report it",
                            p.id
                        ),
                    ));
                }
                let key = (
                    node_id.to_string(),
                    kind,
                    p.id.to_string(),
                    info.alloc_id.to_string(),
                );
                if !instances.remove(&key) {
                    return Err(broken(
                        "instances-mirror-plugins",
                        format!(
                            "plugin {} {kind:?} entry on {node_id} has no instance row",
                            p.id
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn check_volume(v: &CsiVolume) -> Result<(), InvariantViolation> {
    let id = format!("{}/{}", v.namespace, v.id);
    if let Some(a) = v.read_allocs.intersection(&v.write_allocs).next() {
        return Err(broken(
            "claim-sides-disjoint",
            format!("{id}: {a} both reads and writes"),
        ));
    }
    let read_keys: BTreeSet<_> = v.read_claims.keys().collect();
    let write_keys: BTreeSet<_> = v.write_claims.keys().collect();
    if read_keys != v.read_allocs.iter().collect() || write_keys != v.write_allocs.iter().collect()
    {
        return Err(broken(
            "claims-match-allocs",
            format!("{id}: claim maps and alloc sets differ"),
        ));
    }
    let (readers, writers) = (v.read_allocs.len(), v.write_allocs.len());
    let within = match v.access_mode {
        CsiVolumeAccessMode::SingleNodeReader => readers <= 1 && writers == 0,
        CsiVolumeAccessMode::SingleNodeWriter => readers <= 1 && writers <= 1,
        CsiVolumeAccessMode::MultiNodeReader => writers == 0,
        CsiVolumeAccessMode::MultiNodeSingleWriter => writers <= 1,
        CsiVolumeAccessMode::MultiNodeMultiWriter | CsiVolumeAccessMode::Unknown => true,
    };
    if !within {
        return Err(broken(
            "claims-within-access-mode",
            format!(
                "{id}: {readers} readers, {writers} writers in {:?}",
                v.access_mode
            ),
        ));
    }
    if !v.in_use()
        && (v.access_mode != CsiVolumeAccessMode::Unknown
            || v.attachment_mode != crate::model::CsiVolumeAttachmentMode::Unknown)
    {
        return Err(broken(
            "unclaimed-modes-unknown",
            format!("{id}: no claims but a mode set"),
        ));
    }
    if v.schedulable
        || v.nodes_expected > 0
        || v.controllers_expected > 0
        || !v.provider_version.is_empty()
    {
        return Err(broken(
            "denormalized-fields-not-stored",
            format!("{id} stores denormalized fields"),
        ));
    }
    Ok(())
}
