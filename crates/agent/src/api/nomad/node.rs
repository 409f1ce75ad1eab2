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
