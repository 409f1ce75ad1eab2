//! The invariant checker: every property a state must have whatever commands built
//! it. Used by property tests, fuzz targets and `inspect --verify`.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    CsiPlugin, CsiVolume, CsiVolumeAccessMode, CsiVolumeClaim, CsiVolumeClaimMode,
    CsiVolumeClaimState, Id, Node, PluginInstances, PluginJob,
};

use super::expectations::job_expectations;
use super::read::StateView;
use super::table::Table;
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
    /// one broken. O(rows). The invariants, by the name a violation carries:
    /// - `secondary-indexes`: every index agrees with its rows (engine
    ///   [`verify_indexes`](crate::engine::View::verify_indexes));
    /// - `latest-index`, `row-indexes`, `derived-table-index`: `create_index ≤
    ///   modify_index ≤ table_index(T) ≤ latest_index() ≤ last_applied`, and the derived
    ///   instance table never ahead of the plugins table;
    /// - `no-empty-plugin`, `derived-counts`, `denormalized-fields-not-stored`;
    /// - `entry-names-its-plugin`, `entries-on-existing-nodes`,
    ///   `entries-follow-fingerprints`: each plugin entry is on an existing node that
    ///   lists the plugin in the map of that kind;
    /// - `fingerprints-match-maps`, `entries-match-fingerprints`,
    ///   `fingerprints-reach-plugins`: conversely, a node's fingerprint carries the half
    ///   of the map it is filed in, an entry is the node's report in the map of its
    ///   kind, and a healthy report has its entry unless the allocation running it was
    ///   stopped;
    /// - `instances-mirror-plugins`: the derived instance rows are exactly the entries;
    /// - `claim-sides-disjoint`, `claims-match-allocs`, `claims-filed-by-alloc`,
    ///   `current-claims-taken`, `claims-within-access-mode`, `unclaimed-modes-unknown`:
    ///   volume claims are consistent and within their access mode's limits;
    /// - `job-rows`, `job-expectations`: job rows are well formed, and each plugin's
    ///   job list is what the live jobs expect of it (docs/rules.md §4.10).
    ///
    /// # Errors
    /// The broken invariant.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.view
            .verify_indexes()
            .map_err(|e| broken("secondary-indexes", e.to_string()))?;
        self.check_rows()
    }

    /// Every invariant of [`check_invariants`](Self::check_invariants) but
    /// `secondary-indexes`: what a restore checks, whose indexes were just built
    /// from its rows by the engine ([`BulkLoad`](crate::engine::BulkLoad)), so they
    /// agree with them by construction; what came from the file is the rows, and
    /// those are all checked. O(rows).
    ///
    /// # Errors
    /// The broken invariant.
    pub(crate) fn check_rows(&self) -> Result<(), InvariantViolation> {
        self.check_indexes_order()?;
        let mut instances: BTreeSet<(String, InstanceKind, String, String)> = self
            .view
            .iter(self.t.instances)
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
        for node in self.nodes() {
            self.check_fingerprints(&node)?;
        }
        for volume in self.csi_volumes() {
            check_volume(&volume)?;
        }
        self.check_acl_salt()?;
        self.check_jobs()
    }

    /// `acl-salt`: a salt is set only on a bootstrapped state, at an index no later
    /// than the last applied.
    fn check_acl_salt(&self) -> Result<(), InvariantViolation> {
        let Some(at) = self.acl_salt_index() else {
            return Ok(());
        };
        if !self.acl_bootstrapped() || at == 0 || at > self.last_applied() {
            return Err(broken(
                "acl-salt",
                format!(
                    "salt set at {at}, tokens table index {}, last applied {}",
                    self.table_index(Table::AclTokens),
                    self.last_applied()
                ),
            ));
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
        // The id is formatted only for the message: a restore checks every row.
        let row = |table: Table, id: &dyn std::fmt::Display, create: u64, modify: u64| {
            let t = self.table_index(table);
            if create <= modify && modify <= t {
                Ok(())
            } else {
                Err(broken(
                    "row-indexes",
                    format!("{table} {id}: create {create}, modify {modify}, table {t}"),
                ))
            }
        };
        let (instances, plugins) = (
            self.table_index_by_name(names::CSI_PLUGIN_INSTANCES),
            self.table_index(Table::CsiPlugins),
        );
        if instances > plugins {
            // Every instance row change comes with a change of its plugin's entry.
            return Err(broken(
                "derived-table-index",
                format!("instance table index {instances} > plugins table index {plugins}"),
            ));
        }
        for n in self.nodes() {
            row(Table::Nodes, &n.id, n.create_index, n.modify_index)?;
        }
        for a in self.allocs() {
            row(Table::Allocs, &a.id, a.create_index, a.modify_index)?;
        }
        for p in self.csi_plugins() {
            row(Table::CsiPlugins, &p.id, p.create_index, p.modify_index)?;
        }
        for v in self.csi_volumes() {
            let id = format_args!("{}/{}", v.namespace, v.id);
            row(Table::CsiVolumes, &id, v.create_index, v.modify_index)?;
        }
        for t in self.acl_tokens() {
            row(
                Table::AclTokens,
                &t.accessor_id,
                t.create_index,
                t.modify_index,
            )?;
        }
        for j in self.jobs() {
            let id = format_args!("{}/{}", j.namespace, j.id);
            row(Table::Jobs, &id, j.create_index, j.modify_index)?;
        }
        Ok(())
    }

    /// `job-expectations`: each plugin's job list is exactly what the live jobs expect
    /// of it, recomputed from scratch (jobs, and for per-node jobs their allocations and
    /// nodes); a plugin some live job expects instances of exists. `job-rows`: a job's
    /// `job_modify_index` lies between its create and modify indexes, and its groups
    /// pass the input rules.
    fn check_jobs(&self) -> Result<(), InvariantViolation> {
        let mut want: BTreeMap<Id, Vec<PluginJob>> = BTreeMap::new();
        for job in self.jobs() {
            if !(job.create_index <= job.job_modify_index
                && job.job_modify_index <= job.modify_index)
            {
                return Err(broken(
                    "job-rows",
                    format!(
                        "job {}/{}: create {}, job modify {}, modify {}",
                        job.namespace,
                        job.id,
                        job.create_index,
                        job.job_modify_index,
                        job.modify_index
                    ),
                ));
            }
            let upsert = super::Command::UpsertJobs {
                jobs: vec![(*job).clone()],
            };
            if let Err(e) = upsert.check_input() {
                return Err(broken(
                    "job-rows",
                    format!("job {}/{}: {e}", job.namespace, job.id),
                ));
            }
            for (plugin, expected) in job_expectations(self, &job) {
                want.entry(plugin).or_default().push(PluginJob {
                    namespace: job.namespace.clone(),
                    job_id: job.id.clone(),
                    expected,
                });
            }
        }
        for plugin in self.csi_plugins() {
            let expected = want.remove(&plugin.id).unwrap_or_default();
            if plugin.jobs != expected {
                return Err(broken(
                    "job-expectations",
                    format!(
                        "plugin {}: jobs {:?}, the live jobs expect {:?}",
                        plugin.id, plugin.jobs, expected
                    ),
                ));
            }
        }
        if let Some((plugin, jobs)) = want.into_iter().next() {
            return Err(broken(
                "job-expectations",
                format!("plugin {plugin} does not exist, but jobs expect it: {jobs:?}"),
            ));
        }
        Ok(())
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
                let node = self.node(node_id).ok_or_else(|| {
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

impl StateView<'_> {
    /// The converse of "entries follow fingerprints": what a node reports is what its
    /// plugins hold. Each fingerprint in a node's map of one kind carries that kind's
    /// half and is applied as the instance of that kind, so an entry present is that
    /// fingerprint; and if it is healthy the entry is present, unless the allocation
    /// running it (so, a non-empty alloc id) was stopped since.
    fn check_fingerprints(&self, node: &Node) -> Result<(), InvariantViolation> {
        let maps = [
            (InstanceKind::Controller, &node.csi_controller_plugins),
            (InstanceKind::Node, &node.csi_node_plugins),
        ];
        for (kind, listed) in maps {
            for (plugin_id, info) in listed.iter() {
                let has_half = match kind {
                    InstanceKind::Controller => info.is_controller(),
                    InstanceKind::Node => info.is_node(),
                };
                // A second half needs an entry of the plugin in the other map.
                let stray_half = match kind {
                    InstanceKind::Controller => {
                        info.is_node() && !node.csi_node_plugins.contains_key(plugin_id)
                    }
                    InstanceKind::Node => {
                        info.is_controller() && !node.csi_controller_plugins.contains_key(plugin_id)
                    }
                };
                if !has_half || stray_half {
                    return Err(broken(
                        "fingerprints-match-maps",
                        format!(
                            "node {}: the fingerprint of plugin {plugin_id} in its {kind:?} map \
                             does not match the maps it is filed in",
                            node.id
                        ),
                    ));
                }
                let plugin = self.csi_plugin(plugin_id);
                let entry = plugin.as_ref().and_then(|p| match kind {
                    InstanceKind::Controller => p.controllers.get(&node.id),
                    InstanceKind::Node => p.nodes.get(&node.id),
                });
                match entry {
                    Some(e) if **e != **info => {
                        return Err(broken(
                            "entries-match-fingerprints",
                            format!(
                                "plugin {plugin_id} {kind:?} entry on {} is not the node's report",
                                node.id
                            ),
                        ));
                    }
                    None if info.alloc_id.is_empty() && info.healthy => {
                        return Err(broken(
                            "fingerprints-reach-plugins",
                            format!(
                                "node {} reports plugin {plugin_id} healthy, no {kind:?} entry",
                                node.id
                            ),
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Each claim is filed under its own alloc id; current claims are taken claims of their
/// side's mode.
fn check_claim_map(
    id: &str,
    map: &BTreeMap<Id, CsiVolumeClaim>,
    side: Option<CsiVolumeClaimMode>,
) -> Result<(), InvariantViolation> {
    for (alloc_id, claim) in map {
        if claim.alloc_id != *alloc_id {
            return Err(broken(
                "claims-filed-by-alloc",
                format!("{id}: claim of {} filed under {alloc_id}", claim.alloc_id),
            ));
        }
        if let Some(mode) = side
            && (claim.mode != mode || claim.state != CsiVolumeClaimState::Taken)
        {
            return Err(broken(
                "current-claims-taken",
                format!(
                    "{id}: {alloc_id} holds a {:?} {:?} claim among {mode:?} claims",
                    claim.state, claim.mode
                ),
            ));
        }
    }
    Ok(())
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
    check_claim_map(&id, &v.read_claims, Some(CsiVolumeClaimMode::Read))?;
    check_claim_map(&id, &v.write_claims, Some(CsiVolumeClaimMode::Write))?;
    check_claim_map(&id, &v.past_claims, None)?;
    let (readers, writers) = (v.read_allocs.len(), v.write_allocs.len());
    let within = match v.access_mode {
        CsiVolumeAccessMode::SingleNodeReaderOnly => readers <= 1 && writers == 0,
        CsiVolumeAccessMode::SingleNodeWriter => readers <= 1 && writers <= 1,
        CsiVolumeAccessMode::MultiNodeReaderOnly => writers == 0,
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
