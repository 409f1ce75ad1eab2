//! `CSIInfo` (one plugin instance as a node fingerprints it, and as a plugin lists
//! it), `CSIPlugin` and `CSIPluginListStub`; a plugin's live jobs as Nomad lists
//! them (`ControllerJobs`, `NodeJobs`: namespace → job id → `JobDescription`), from
//! which its `ControllersExpected` / `NodesExpected` are the sums.

use std::collections::BTreeMap;
use std::sync::Arc;

use schedstate::model::{
    CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiPlugin, CsiTopology, Expected, Id, PluginInstances,
    PluginJob,
};
use serde::{Deserialize, Serialize};

use super::ShapeError;
use super::alloc::NomadAllocListStub;
use super::time::{from_rfc3339, to_rfc3339};

/// Nomad's `CSIInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiInfo {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "AllocID", default, deserialize_with = "super::nullable")]
    pub alloc_id: String,
    #[serde(rename = "Healthy", default, deserialize_with = "super::nullable")]
    pub healthy: bool,
    #[serde(
        rename = "HealthDescription",
        default,
        deserialize_with = "super::nullable"
    )]
    pub health_description: Id,
    /// RFC 3339.
    #[serde(rename = "UpdateTime", default, deserialize_with = "super::nullable")]
    pub update_time: String,
    #[serde(rename = "Provider", default, deserialize_with = "super::nullable")]
    pub provider: Id,
    #[serde(
        rename = "ProviderVersion",
        default,
        deserialize_with = "super::nullable"
    )]
    pub provider_version: Id,
    #[serde(
        rename = "RequiresControllerPlugin",
        default,
        deserialize_with = "super::nullable"
    )]
    pub requires_controller_plugin: bool,
    #[serde(
        rename = "RequiresTopologies",
        default,
        deserialize_with = "super::nullable"
    )]
    pub requires_topologies: bool,
    #[serde(
        rename = "ControllerInfo",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controller_info: Option<NomadCsiControllerInfo>,
    #[serde(rename = "NodeInfo", default, deserialize_with = "super::nullable")]
    pub node_info: Option<NomadCsiNodeInfo>,
}

/// Nomad's `CSIControllerInfo` (the capabilities the store keeps).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiControllerInfo {
    #[serde(
        rename = "SupportsReadOnlyAttach",
        default,
        deserialize_with = "super::nullable"
    )]
    pub supports_read_only_attach: bool,
    #[serde(
        rename = "SupportsAttachDetach",
        default,
        deserialize_with = "super::nullable"
    )]
    pub supports_attach_detach: bool,
    #[serde(
        rename = "SupportsListVolumes",
        default,
        deserialize_with = "super::nullable"
    )]
    pub supports_list_volumes: bool,
    #[serde(
        rename = "SupportsListVolumesAttachedNodes",
        default,
        deserialize_with = "super::nullable"
    )]
    pub supports_list_volumes_attached_nodes: bool,
}

/// Nomad's `CSINodeInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiNodeInfo {
    #[serde(rename = "ID", default, deserialize_with = "super::nullable")]
    pub id: Id,
    #[serde(rename = "MaxVolumes", default, deserialize_with = "super::nullable")]
    pub max_volumes: u64,
    #[serde(
        rename = "AccessibleTopology",
        default,
        deserialize_with = "super::nullable"
    )]
    pub accessible_topology: Option<NomadCsiTopology>,
    #[serde(
        rename = "RequiresNodeStageVolume",
        default,
        deserialize_with = "super::nullable"
    )]
    pub requires_node_stage_volume: bool,
}

/// Nomad's `CSITopology`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiTopology {
    #[serde(rename = "Segments", default, deserialize_with = "super::nullable")]
    pub segments: BTreeMap<String, String>,
}

impl From<&CsiTopology> for NomadCsiTopology {
    fn from(t: &CsiTopology) -> Self {
        NomadCsiTopology {
            segments: t.segments.clone(),
        }
    }
}

impl From<NomadCsiTopology> for CsiTopology {
    fn from(t: NomadCsiTopology) -> Self {
        CsiTopology {
            segments: t.segments,
        }
    }
}

impl From<&CsiInfo> for NomadCsiInfo {
    fn from(i: &CsiInfo) -> Self {
        NomadCsiInfo {
            plugin_id: i.plugin_id.to_string(),
            alloc_id: i.alloc_id.to_string(),
            healthy: i.healthy,
            health_description: i.health_description.clone(),
            update_time: to_rfc3339(i.update_time),
            provider: i.provider.clone(),
            provider_version: i.provider_version.clone(),
            requires_controller_plugin: i.requires_controller_plugin,
            requires_topologies: i.requires_topologies,
            controller_info: i.controller_info.as_ref().map(|c| NomadCsiControllerInfo {
                supports_read_only_attach: c.supports_read_only_attach,
                supports_attach_detach: c.supports_attach_detach,
                supports_list_volumes: c.supports_list_volumes,
                supports_list_volumes_attached_nodes: c.supports_list_volumes_attached_nodes,
            }),
            node_info: i.node_info.as_ref().map(|n| NomadCsiNodeInfo {
                id: n.id.clone(),
                max_volumes: n.max_volumes,
                accessible_topology: n.accessible_topology.as_ref().map(Into::into),
                requires_node_stage_volume: n.requires_node_stage_volume,
            }),
        }
    }
}

impl TryFrom<NomadCsiInfo> for CsiInfo {
    type Error = ShapeError;

    fn try_from(i: NomadCsiInfo) -> Result<Self, ShapeError> {
        Ok(CsiInfo {
            plugin_id: i.plugin_id.into(),
            alloc_id: i.alloc_id.into(),
            healthy: i.healthy,
            health_description: i.health_description,
            update_time: from_rfc3339("UpdateTime", &i.update_time)?,
            provider: i.provider,
            provider_version: i.provider_version,
            requires_controller_plugin: i.requires_controller_plugin,
            requires_topologies: i.requires_topologies,
            controller_info: i.controller_info.map(|c| CsiControllerInfo {
                supports_read_only_attach: c.supports_read_only_attach,
                supports_attach_detach: c.supports_attach_detach,
                supports_list_volumes: c.supports_list_volumes,
                supports_list_volumes_attached_nodes: c.supports_list_volumes_attached_nodes,
            }),
            node_info: i.node_info.map(|n| CsiNodeInfo {
                id: n.id,
                max_volumes: n.max_volumes,
                accessible_topology: n.accessible_topology.map(Into::into),
                requires_node_stage_volume: n.requires_node_stage_volume,
            }),
        })
    }
}

/// A map of instances (node id, or plugin id on a node) in Nomad's shape.
pub(crate) fn infos_out<'a>(
    entries: impl Iterator<Item = (&'a schedstate::model::Id, &'a Arc<CsiInfo>)>,
) -> BTreeMap<String, NomadCsiInfo> {
    entries
        .map(|(k, v)| (k.to_string(), NomadCsiInfo::from(&**v)))
        .collect()
}

/// The same map back, as `(key, info)` pairs.
pub(crate) fn infos_in(
    map: BTreeMap<String, NomadCsiInfo>,
) -> Result<Vec<(schedstate::model::Id, Arc<CsiInfo>)>, ShapeError> {
    map.into_iter()
        .map(|(k, v)| Ok((k.as_str().into(), Arc::new(CsiInfo::try_from(v)?))))
        .collect()
}

/// Nomad's `CSIPluginListStub`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiPluginListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Provider", default, deserialize_with = "super::nullable")]
    pub provider: Id,
    #[serde(
        rename = "ControllerRequired",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controller_required: bool,
    #[serde(
        rename = "ControllersHealthy",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_healthy: usize,
    #[serde(
        rename = "ControllersExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_expected: usize,
    #[serde(rename = "NodesHealthy", default, deserialize_with = "super::nullable")]
    pub nodes_healthy: usize,
    #[serde(
        rename = "NodesExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub nodes_expected: usize,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&CsiPlugin> for NomadCsiPluginListStub {
    fn from(p: &CsiPlugin) -> Self {
        NomadCsiPluginListStub {
            id: p.id.to_string(),
            provider: p.provider.clone(),
            controller_required: p.controller_required,
            controllers_healthy: p.controllers_healthy(),
            controllers_expected: p.controllers_expected(),
            nodes_healthy: p.nodes_healthy(),
            nodes_expected: p.nodes_expected(),
            create_index: p.create_index,
            modify_index: p.modify_index,
        }
    }
}

/// Nomad's `JobDescription`: how many instances of one kind (controller or node) one
/// job expects of a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadJobDescription {
    #[serde(rename = "Namespace", default, deserialize_with = "super::nullable")]
    pub namespace: String,
    #[serde(rename = "ID", default, deserialize_with = "super::nullable")]
    pub id: String,
    #[serde(rename = "Expected", default, deserialize_with = "super::nullable")]
    pub expected: u64,
}

/// Nomad's `JobDescriptions`: namespace → job id → description.
pub type NomadJobDescriptions = BTreeMap<String, BTreeMap<String, NomadJobDescription>>;

/// A plugin's job expectations as Nomad lists them: one map for controllers, one for
/// nodes; a job appears in a map only when it expects instances of that kind.
fn jobs_out(jobs: &[PluginJob]) -> (NomadJobDescriptions, NomadJobDescriptions) {
    let (mut controllers, mut nodes) = (BTreeMap::new(), BTreeMap::new());
    for j in jobs {
        for (map, expected) in [
            (&mut controllers, j.expected.controllers),
            (&mut nodes, j.expected.nodes),
        ] {
            if expected == 0 {
                continue;
            }
            let by_id: &mut BTreeMap<String, NomadJobDescription> =
                map.entry(j.namespace.to_string()).or_default();
            by_id.insert(
                j.job_id.to_string(),
                NomadJobDescription {
                    namespace: j.namespace.to_string(),
                    id: j.job_id.to_string(),
                    expected,
                },
            );
        }
    }
    (controllers, nodes)
}

/// The two maps back as the model's list: one entry per job, in (namespace, id)
/// order, the maps' keys naming the job; a job expecting nothing is left out.
fn jobs_in(controllers: NomadJobDescriptions, nodes: NomadJobDescriptions) -> Vec<PluginJob> {
    let mut merged: BTreeMap<(String, String), Expected> = BTreeMap::new();
    for (map, controller) in [(controllers, true), (nodes, false)] {
        for (namespace, by_id) in map {
            for (id, d) in by_id {
                let e = merged.entry((namespace.clone(), id)).or_default();
                if controller {
                    e.controllers += d.expected;
                } else {
                    e.nodes += d.expected;
                }
            }
        }
    }
    merged
        .into_iter()
        .filter(|(_, e)| !e.is_zero())
        .map(|((namespace, id), expected)| PluginJob {
            namespace: namespace.as_str().into(),
            job_id: id.as_str().into(),
            expected,
        })
        .collect()
}

/// Nomad's `CSIPlugin`: the instances by node id, the allocations running them, the
/// live jobs that run it (`ControllerJobs`, `NodeJobs`), the health and expected
/// counts (derived: ignored in input).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiPlugin {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Provider", default, deserialize_with = "super::nullable")]
    pub provider: Id,
    #[serde(rename = "Version", default, deserialize_with = "super::nullable")]
    pub version: Id,
    #[serde(
        rename = "ControllerRequired",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controller_required: bool,
    #[serde(rename = "Controllers", default, deserialize_with = "super::nullable")]
    pub controllers: BTreeMap<String, NomadCsiInfo>,
    #[serde(rename = "Nodes", default, deserialize_with = "super::nullable")]
    pub nodes: BTreeMap<String, NomadCsiInfo>,
    #[serde(rename = "Allocations", default, deserialize_with = "super::nullable")]
    pub allocations: Vec<NomadAllocListStub>,
    /// The live jobs expecting controller instances.
    #[serde(
        rename = "ControllerJobs",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controller_jobs: NomadJobDescriptions,
    /// The live jobs expecting node instances.
    #[serde(rename = "NodeJobs", default, deserialize_with = "super::nullable")]
    pub node_jobs: NomadJobDescriptions,
    #[serde(
        rename = "ControllersHealthy",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_healthy: usize,
    #[serde(
        rename = "ControllersExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_expected: usize,
    #[serde(rename = "NodesHealthy", default, deserialize_with = "super::nullable")]
    pub nodes_healthy: usize,
    #[serde(
        rename = "NodesExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub nodes_expected: usize,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&CsiPlugin> for NomadCsiPlugin {
    fn from(p: &CsiPlugin) -> Self {
        let (controller_jobs, node_jobs) = jobs_out(&p.jobs);
        NomadCsiPlugin {
            id: p.id.to_string(),
            provider: p.provider.clone(),
            version: p.version.clone(),
            controller_required: p.controller_required,
            controllers: infos_out(p.controllers.iter()),
            nodes: infos_out(p.nodes.iter()),
            allocations: p
                .allocations
                .iter()
                .map(|a| NomadAllocListStub::from(&**a))
                .collect(),
            controller_jobs,
            node_jobs,
            controllers_healthy: p.controllers_healthy(),
            controllers_expected: p.controllers_expected(),
            nodes_healthy: p.nodes_healthy(),
            nodes_expected: p.nodes_expected(),
            create_index: p.create_index,
            modify_index: p.modify_index,
        }
    }
}

impl TryFrom<NomadCsiPlugin> for CsiPlugin {
    type Error = ShapeError;

    fn try_from(p: NomadCsiPlugin) -> Result<Self, ShapeError> {
        let mut plugin = CsiPlugin::new(p.id.as_str(), p.create_index);
        plugin.provider = p.provider;
        plugin.version = p.version;
        plugin.controller_required = p.controller_required;
        plugin.controllers = instances(p.controllers)?;
        plugin.nodes = instances(p.nodes)?;
        plugin.allocations = p
            .allocations
            .into_iter()
            .map(|a| {
                Ok(schedstate::model::AllocListStub::new(Arc::new(
                    a.try_into()?,
                )))
            })
            .collect::<Result<_, ShapeError>>()?;
        plugin.jobs = jobs_in(p.controller_jobs, p.node_jobs);
        plugin.modify_index = p.modify_index;
        Ok(plugin)
    }
}

fn instances(map: BTreeMap<String, NomadCsiInfo>) -> Result<PluginInstances, ShapeError> {
    let mut out = PluginInstances::new();
    for (node, info) in infos_in(map)? {
        out.insert(node, info);
    }
    Ok(out)
}
