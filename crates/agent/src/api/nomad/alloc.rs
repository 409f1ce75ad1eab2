//! `Allocation` and `AllocListStub`: Nomad's names and status spellings; the CSI
//! volumes an allocation claims (a task group's volume requests in Nomad) under a
//! name of Nomad's style, `CSIVolumeRequests`.

use schedstate::model::{Allocation, ClientStatus, CsiVolumeRequest, DesiredStatus};
use serde::{Deserialize, Serialize};

use super::ShapeError;

/// One CSI volume an allocation uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiVolumeRequest {
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
    #[serde(rename = "ReadOnly", default, deserialize_with = "super::nullable")]
    pub read_only: bool,
}

/// Nomad's `Allocation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadAllocation {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace", default, deserialize_with = "super::nullable")]
    pub namespace: String,
    #[serde(rename = "JobID", default, deserialize_with = "super::nullable")]
    pub job_id: String,
    #[serde(rename = "JobVersion", default, deserialize_with = "super::nullable")]
    pub job_version: u64,
    #[serde(rename = "TaskGroup", default, deserialize_with = "super::nullable")]
    pub task_group: String,
    #[serde(rename = "NodeID", default, deserialize_with = "super::nullable")]
    pub node_id: String,
    #[serde(rename = "DesiredStatus")]
    pub desired_status: DesiredStatus,
    #[serde(rename = "ClientStatus")]
    pub client_status: ClientStatus,
    #[serde(
        rename = "CSIVolumeRequests",
        default,
        deserialize_with = "super::nullable"
    )]
    pub csi_volume_requests: Vec<NomadCsiVolumeRequest>,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&Allocation> for NomadAllocation {
    fn from(a: &Allocation) -> Self {
        NomadAllocation {
            id: a.id.to_string(),
            namespace: a.namespace.to_string(),
            job_id: a.job_id.to_string(),
            job_version: a.job_version,
            task_group: a.task_group.to_string(),
            node_id: a.node_id.to_string(),
            desired_status: a.desired_status,
            client_status: a.client_status,
            csi_volume_requests: a
                .csi_volume_requests
                .iter()
                .map(|r| NomadCsiVolumeRequest {
                    volume_id: r.volume_id.to_string(),
                    read_only: r.read_only,
                })
                .collect(),
            create_index: a.create_index,
            modify_index: a.modify_index,
        }
    }
}

impl TryFrom<NomadAllocation> for Allocation {
    type Error = ShapeError;

    fn try_from(a: NomadAllocation) -> Result<Self, ShapeError> {
        Ok(Allocation {
            id: a.id.into(),
            namespace: a.namespace.into(),
            job_id: a.job_id.into(),
            job_version: a.job_version,
            task_group: a.task_group.into(),
            node_id: a.node_id.into(),
            desired_status: a.desired_status,
            client_status: a.client_status,
            csi_volume_requests: a
                .csi_volume_requests
                .into_iter()
                .map(|r| CsiVolumeRequest {
                    volume_id: r.volume_id.into(),
                    read_only: r.read_only,
                })
                .collect(),
            create_index: a.create_index,
            modify_index: a.modify_index,
        })
    }
}

/// Nomad's `AllocListStub`: the allocation without its volume requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadAllocListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace", default, deserialize_with = "super::nullable")]
    pub namespace: String,
    #[serde(rename = "JobID", default, deserialize_with = "super::nullable")]
    pub job_id: String,
    #[serde(rename = "JobVersion", default, deserialize_with = "super::nullable")]
    pub job_version: u64,
    #[serde(rename = "TaskGroup", default, deserialize_with = "super::nullable")]
    pub task_group: String,
    #[serde(rename = "NodeID", default, deserialize_with = "super::nullable")]
    pub node_id: String,
    #[serde(rename = "DesiredStatus")]
    pub desired_status: DesiredStatus,
    #[serde(rename = "ClientStatus")]
    pub client_status: ClientStatus,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&Allocation> for NomadAllocListStub {
    fn from(a: &Allocation) -> Self {
        NomadAllocListStub {
            id: a.id.to_string(),
            namespace: a.namespace.to_string(),
            job_id: a.job_id.to_string(),
            job_version: a.job_version,
            task_group: a.task_group.to_string(),
            node_id: a.node_id.to_string(),
            desired_status: a.desired_status,
            client_status: a.client_status,
            create_index: a.create_index,
            modify_index: a.modify_index,
        }
    }
}

impl TryFrom<NomadAllocListStub> for Allocation {
    type Error = ShapeError;

    /// The allocation a stub stands for (no volume requests: a stub has none).
    fn try_from(a: NomadAllocListStub) -> Result<Self, ShapeError> {
        Allocation::try_from(NomadAllocation {
            id: a.id,
            namespace: a.namespace,
            job_id: a.job_id,
            job_version: a.job_version,
            task_group: a.task_group,
            node_id: a.node_id,
            desired_status: a.desired_status,
            client_status: a.client_status,
            csi_volume_requests: Default::default(),
            create_index: a.create_index,
            modify_index: a.modify_index,
        })
    }
}
