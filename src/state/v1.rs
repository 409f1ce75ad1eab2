//! The shapes of format version 1 (before jobs): what snapshots, log segments and
//! canonical bytes held for the rows and commands whose encoding jobs changed.
//!
//! Version 2 added `Allocation::job_version`, `CsiPlugin::jobs`, the jobs table and
//! the job commands. postcard is not self-describing, so a row or command written by
//! version 1 decodes only through its version-1 shape; these types are those shapes,
//! converted to the current types on reading (no job version, no job expectations).
//! The canonical encoding also uses them, so that a state with no jobs encodes byte
//! for byte as it did in version 1 (the golden files pin that).

use serde::{Deserialize, Serialize};

use crate::model::{
    AclToken, AllocListStub, Allocation, ClientStatus, CsiPlugin, CsiVolume, DesiredStatus, Id,
    Node, NodeStatus, PluginInstances, VolumeRequests,
};

use super::command::{Command, CsiVolumeClaimRequest};

/// An allocation as version 1 encoded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationV1 {
    id: Id,
    namespace: Id,
    job_id: Id,
    task_group: Id,
    node_id: Id,
    desired_status: DesiredStatus,
    client_status: ClientStatus,
    csi_volume_requests: VolumeRequests,
    create_index: u64,
    modify_index: u64,
}

impl From<AllocationV1> for Allocation {
    fn from(a: AllocationV1) -> Allocation {
        Allocation {
            id: a.id,
            namespace: a.namespace,
            job_id: a.job_id,
            job_version: 0,
            task_group: a.task_group,
            node_id: a.node_id,
            desired_status: a.desired_status,
            client_status: a.client_status,
            csi_volume_requests: a.csi_volume_requests,
            create_index: a.create_index,
            modify_index: a.modify_index,
        }
    }
}

impl From<&Allocation> for AllocationV1 {
    /// The version-1 fields (the job version is dropped).
    fn from(a: &Allocation) -> AllocationV1 {
        AllocationV1 {
            id: a.id.clone(),
            namespace: a.namespace.clone(),
            job_id: a.job_id.clone(),
            task_group: a.task_group.clone(),
            node_id: a.node_id.clone(),
            desired_status: a.desired_status,
            client_status: a.client_status,
            csi_volume_requests: a.csi_volume_requests.clone(),
            create_index: a.create_index,
            modify_index: a.modify_index,
        }
    }
}

/// A plugin as version 1 encoded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsiPluginV1 {
    id: Id,
    provider: Id,
    version: Id,
    controller_required: bool,
    controllers: PluginInstances,
    nodes: PluginInstances,
    allocations: Vec<AllocListStub>,
    create_index: u64,
    modify_index: u64,
}

impl From<CsiPluginV1> for CsiPlugin {
    fn from(p: CsiPluginV1) -> CsiPlugin {
        CsiPlugin {
            id: p.id,
            provider: p.provider,
            version: p.version,
            controller_required: p.controller_required,
            controllers: p.controllers,
            nodes: p.nodes,
            jobs: Vec::new(),
            allocations: p.allocations,
            create_index: p.create_index,
            modify_index: p.modify_index,
        }
    }
}

impl From<&CsiPlugin> for CsiPluginV1 {
    /// The version-1 fields (the job expectations are dropped).
    fn from(p: &CsiPlugin) -> CsiPluginV1 {
        CsiPluginV1 {
            id: p.id.clone(),
            provider: p.provider.clone(),
            version: p.version.clone(),
            controller_required: p.controller_required,
            controllers: p.controllers.clone(),
            nodes: p.nodes.clone(),
            allocations: p.allocations.clone(),
            create_index: p.create_index,
            modify_index: p.modify_index,
        }
    }
}

/// A command as version 1 encoded it: the variants of that version, in their order,
/// with allocations in their version-1 shape.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[allow(missing_docs)] // each variant is the `Command` variant of the same name
pub enum CommandV1 {
    UpsertNode {
        node: Node,
    },
    DeleteNodes {
        ids: Vec<Id>,
    },
    UpdateNodeStatus {
        id: Id,
        status: NodeStatus,
    },
    UpdateNodeDrain {
        id: Id,
        drain: bool,
    },
    UpdateNodeEligibility {
        id: Id,
        eligible: bool,
    },
    UpsertAllocs {
        allocs: Vec<AllocationV1>,
    },
    DeleteAllocs {
        ids: Vec<Id>,
    },
    RegisterCsiVolumes {
        volumes: Vec<CsiVolume>,
    },
    DeregisterCsiVolumes {
        namespace: Id,
        ids: Vec<Id>,
        force: bool,
    },
    ClaimCsiVolumes {
        claims: Vec<CsiVolumeClaimRequest>,
    },
    UpsertNodes {
        nodes: Vec<Node>,
    },
    AclBootstrap {
        token: AclToken,
    },
    CreateAclTokens {
        tokens: Vec<AclToken>,
    },
    DeleteAclTokens {
        accessor_ids: Vec<Id>,
    },
    StopAllocs {
        ids: Vec<Id>,
    },
}

impl From<CommandV1> for Command {
    fn from(c: CommandV1) -> Command {
        match c {
            CommandV1::UpsertNode { node } => Command::UpsertNode { node },
            CommandV1::DeleteNodes { ids } => Command::DeleteNodes { ids },
            CommandV1::UpdateNodeStatus { id, status } => Command::UpdateNodeStatus { id, status },
            CommandV1::UpdateNodeDrain { id, drain } => Command::UpdateNodeDrain { id, drain },
            CommandV1::UpdateNodeEligibility { id, eligible } => {
                Command::UpdateNodeEligibility { id, eligible }
            }
            CommandV1::UpsertAllocs { allocs } => Command::UpsertAllocs {
                allocs: allocs.into_iter().map(Allocation::from).collect(),
            },
            CommandV1::DeleteAllocs { ids } => Command::DeleteAllocs { ids },
            CommandV1::RegisterCsiVolumes { volumes } => Command::RegisterCsiVolumes { volumes },
            CommandV1::DeregisterCsiVolumes {
                namespace,
                ids,
                force,
            } => Command::DeregisterCsiVolumes {
                namespace,
                ids,
                force,
            },
            CommandV1::ClaimCsiVolumes { claims } => Command::ClaimCsiVolumes { claims },
            CommandV1::UpsertNodes { nodes } => Command::UpsertNodes { nodes },
            CommandV1::AclBootstrap { token } => Command::AclBootstrap { token, salt: None },
            CommandV1::CreateAclTokens { tokens } => {
                Command::CreateAclTokens { tokens, salt: None }
            }
            CommandV1::DeleteAclTokens { accessor_ids } => {
                Command::DeleteAclTokens { accessor_ids }
            }
            CommandV1::StopAllocs { ids } => Command::StopAllocs { ids },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::id;

    #[test]
    fn a_version_1_command_decodes_to_the_same_command() {
        // Every variant but the allocation upsert encodes as it did; the upsert's
        // allocations lose nothing but the job version, which version 1 did not have.
        let alloc = Allocation {
            id: id("a1"),
            namespace: id("default"),
            job_id: id("web"),
            task_group: id("g"),
            node_id: id("n1"),
            create_index: 3,
            modify_index: 4,
            ..Allocation::default()
        };
        // The variant index of `UpsertAllocs` (5), then its one field.
        let mut bytes = vec![5u8];
        bytes.extend(postcard::to_allocvec(&vec![AllocationV1::from(&alloc)]).unwrap());
        let decoded: CommandV1 = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(
            Command::from(decoded),
            Command::UpsertAllocs {
                allocs: vec![alloc.clone()]
            }
        );
        let stop = Command::StopAllocs {
            ids: vec![id("a1")],
        };
        let decoded: CommandV1 =
            postcard::from_bytes(&postcard::to_allocvec(&stop).unwrap()).unwrap();
        assert_eq!(Command::from(decoded), stop);
    }
}
