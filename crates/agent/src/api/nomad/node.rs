//! `Node` and `NodeListStub`: Nomad's names, `SchedulingEligibility` as
//! `eligible`/`ineligible`, the CSI fingerprints as maps of `CSIInfo` by plugin id.

use std::collections::BTreeMap;

use schedstate::model::{Fingerprints, Node, NodeStatus};
use serde::{Deserialize, Serialize};

use super::ShapeError;
use super::csi::{NomadCsiInfo, infos_in, infos_out};

/// `eligible` or `ineligible`.
fn eligibility(eligible: bool) -> String {
    if eligible { "eligible" } else { "ineligible" }.to_string()
}

fn eligible(s: &str) -> Result<bool, ShapeError> {
    match s {
        "eligible" | "" => Ok(true),
        "ineligible" => Ok(false),
        other => Err(ShapeError::new(
            "SchedulingEligibility",
            format!("{other:?} is not eligible or ineligible"),
        )),
    }
}

/// Nomad's `DrainStrategy`, on a draining node. The store keeps whether a node
/// drains, not the spec it was asked with (the deadline is a scheduler's business:
/// the store stops nothing): a draining node reads as a drain with no deadline —
/// `Deadline` 0, Nomad's "no deadline" — and Go's zero time for `ForceDeadline` and
/// `StartedAt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadDrainStrategy {
    /// Nanoseconds (Go's `time.Duration`); 0: no deadline.
    #[serde(rename = "Deadline", default, deserialize_with = "super::nullable")]
    pub deadline: i64,
    #[serde(
        rename = "IgnoreSystemJobs",
        default,
        deserialize_with = "super::nullable"
    )]
    pub ignore_system_jobs: bool,
    /// RFC 3339; Go's zero time with no deadline.
    #[serde(
        rename = "ForceDeadline",
        default,
        deserialize_with = "super::nullable"
    )]
    pub force_deadline: String,
    /// RFC 3339; Go's zero time (the store does not keep when the drain began).
    #[serde(rename = "StartedAt", default, deserialize_with = "super::nullable")]
    pub started_at: String,
}

impl NomadDrainStrategy {
    /// What a draining node answers (see the type's doc).
    fn of_drain() -> NomadDrainStrategy {
        NomadDrainStrategy {
            deadline: 0,
            ignore_system_jobs: false,
            force_deadline: super::time::ZERO_TIME.to_string(),
            started_at: super::time::ZERO_TIME.to_string(),
        }
    }
}

/// Nomad's `Node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadNode {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name", default, deserialize_with = "super::nullable")]
    pub name: String,
    #[serde(rename = "Status")]
    pub status: NodeStatus,
    #[serde(rename = "Drain", default, deserialize_with = "super::nullable")]
    pub drain: bool,
    /// Present (not `null`) while the node drains, as in Nomad; read back as nothing
    /// (`Drain` says whether the node drains).
    #[serde(
        rename = "DrainStrategy",
        default,
        deserialize_with = "super::nullable"
    )]
    pub drain_strategy: Option<NomadDrainStrategy>,
    #[serde(
        rename = "SchedulingEligibility",
        default,
        deserialize_with = "super::nullable"
    )]
    pub scheduling_eligibility: String,
    #[serde(
        rename = "CSIControllerPlugins",
        default,
        deserialize_with = "super::nullable"
    )]
    pub csi_controller_plugins: BTreeMap<String, NomadCsiInfo>,
    #[serde(
        rename = "CSINodePlugins",
        default,
        deserialize_with = "super::nullable"
    )]
    pub csi_node_plugins: BTreeMap<String, NomadCsiInfo>,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&Node> for NomadNode {
    fn from(n: &Node) -> Self {
        NomadNode {
            id: n.id.to_string(),
            name: n.name.clone(),
            status: n.status,
            drain: n.drain,
            drain_strategy: n.drain.then(NomadDrainStrategy::of_drain),
            scheduling_eligibility: eligibility(n.eligible),
            csi_controller_plugins: infos_out(n.csi_controller_plugins.iter()),
            csi_node_plugins: infos_out(n.csi_node_plugins.iter()),
            create_index: n.create_index,
            modify_index: n.modify_index,
        }
    }
}

impl TryFrom<NomadNode> for Node {
    type Error = ShapeError;

    fn try_from(n: NomadNode) -> Result<Self, ShapeError> {
        let fingerprints =
            |map| -> Result<Fingerprints, ShapeError> { Ok(infos_in(map)?.into_iter().collect()) };
        Ok(Node {
            id: n.id.into(),
            name: n.name,
            status: n.status,
            drain: n.drain,
            eligible: eligible(&n.scheduling_eligibility)?,
            csi_controller_plugins: fingerprints(n.csi_controller_plugins)?,
            csi_node_plugins: fingerprints(n.csi_node_plugins)?,
            create_index: n.create_index,
            modify_index: n.modify_index,
        })
    }
}

/// Nomad's `NodeListStub`: the node without its fingerprints' details (Nomad lists
/// drivers and resources here; the store has neither).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadNodeListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name", default, deserialize_with = "super::nullable")]
    pub name: String,
    #[serde(rename = "Status")]
    pub status: NodeStatus,
    #[serde(rename = "Drain", default, deserialize_with = "super::nullable")]
    pub drain: bool,
    #[serde(
        rename = "SchedulingEligibility",
        default,
        deserialize_with = "super::nullable"
    )]
    pub scheduling_eligibility: String,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&Node> for NomadNodeListStub {
    fn from(n: &Node) -> Self {
        NomadNodeListStub {
            id: n.id.to_string(),
            name: n.name.clone(),
            status: n.status,
            drain: n.drain,
            scheduling_eligibility: eligibility(n.eligible),
            create_index: n.create_index,
            modify_index: n.modify_index,
        }
    }
}
