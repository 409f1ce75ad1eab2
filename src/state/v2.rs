//! The shapes of format version 2 (jobs, before job definitions and salted token
//! digests): what snapshots, log segments and canonical bytes held for the rows and
//! commands whose encoding version 3 changed.
//!
//! Version 3 added `Job::definition` (the whole job as registered) and, for ACL, the
//! salt carried by `AclBootstrap` and `CreateAclTokens` (and the `acl_salt` state
//! item). postcard is not self-describing, so a job row or a command written by
//! version 2 decodes only through its version-2 shape; these types are those shapes,
//! converted to the current types on reading (no definition, no salt: digests stay
//! unsalted until a salt is set). The canonical encoding uses [`JobV2`] for every job,
//! and adds the definitions apart, so that a state with none encodes byte for byte as
//! in version 2 (the golden files pin that).

use serde::{Deserialize, Serialize};

use crate::model::{
    AclToken, Allocation, CsiVolume, Id, Job, JobStatus, JobType, Node, NodeStatus, TaskGroup,
};

use super::command::{Command, CsiVolumeClaimRequest};

/// A job as version 2 encoded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobV2 {
    namespace: Id,
    id: Id,
    job_type: JobType,
    status: JobStatus,
    version: u64,
    task_groups: Vec<TaskGroup>,
    create_index: u64,
    modify_index: u64,
    job_modify_index: u64,
}

impl From<JobV2> for Job {
    fn from(j: JobV2) -> Job {
        Job {
            namespace: j.namespace,
            id: j.id,
            job_type: j.job_type,
            status: j.status,
            version: j.version,
            task_groups: j.task_groups,
            create_index: j.create_index,
            modify_index: j.modify_index,
            job_modify_index: j.job_modify_index,
            definition: None,
        }
    }
}

impl From<&Job> for JobV2 {
    /// The version-2 fields (the definition is dropped).
    fn from(j: &Job) -> JobV2 {
        JobV2 {
            namespace: j.namespace.clone(),
            id: j.id.clone(),
            job_type: j.job_type,
            status: j.status,
            version: j.version,
            task_groups: j.task_groups.clone(),
            create_index: j.create_index,
            modify_index: j.modify_index,
            job_modify_index: j.job_modify_index,
        }
    }
}

/// A command as version 2 encoded it: the variants of that version, in their order,
/// with jobs in their version-2 shape and the ACL commands without a salt.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[allow(missing_docs)] // each variant is the `Command` variant of the same name
pub enum CommandV2 {
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
        allocs: Vec<Allocation>,
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
    UpsertJobs {
        jobs: Vec<JobV2>,
    },
    StopJobs {
        namespace: Id,
        ids: Vec<Id>,
    },
    PurgeJobs {
        namespace: Id,
        ids: Vec<Id>,
    },
}

impl From<CommandV2> for Command {
    fn from(c: CommandV2) -> Command {
        match c {
            CommandV2::UpsertNode { node } => Command::UpsertNode { node },
            CommandV2::DeleteNodes { ids } => Command::DeleteNodes { ids },
            CommandV2::UpdateNodeStatus { id, status } => Command::UpdateNodeStatus { id, status },
            CommandV2::UpdateNodeDrain { id, drain } => Command::UpdateNodeDrain { id, drain },
            CommandV2::UpdateNodeEligibility { id, eligible } => {
                Command::UpdateNodeEligibility { id, eligible }
            }
            CommandV2::UpsertAllocs { allocs } => Command::UpsertAllocs { allocs },
            CommandV2::DeleteAllocs { ids } => Command::DeleteAllocs { ids },
            CommandV2::RegisterCsiVolumes { volumes } => Command::RegisterCsiVolumes { volumes },
            CommandV2::DeregisterCsiVolumes {
                namespace,
                ids,
                force,
            } => Command::DeregisterCsiVolumes {
                namespace,
                ids,
                force,
            },
            CommandV2::ClaimCsiVolumes { claims } => Command::ClaimCsiVolumes { claims },
            CommandV2::UpsertNodes { nodes } => Command::UpsertNodes { nodes },
            CommandV2::AclBootstrap { token } => Command::AclBootstrap { token, salt: None },
            CommandV2::CreateAclTokens { tokens } => {
                Command::CreateAclTokens { tokens, salt: None }
            }
            CommandV2::DeleteAclTokens { accessor_ids } => {
                Command::DeleteAclTokens { accessor_ids }
            }
            CommandV2::StopAllocs { ids } => Command::StopAllocs { ids },
            CommandV2::UpsertJobs { jobs } => Command::UpsertJobs {
                jobs: jobs.into_iter().map(Job::from).collect(),
            },
            CommandV2::StopJobs { namespace, ids } => Command::StopJobs { namespace, ids },
            CommandV2::PurgeJobs { namespace, ids } => Command::PurgeJobs { namespace, ids },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobDefinition, id};

    #[test]
    fn a_version_2_job_upsert_decodes_with_no_definition() {
        let job = Job {
            job_type: JobType::Batch,
            version: 2,
            ..Job::new("default", "web")
        };
        // The variant index of `UpsertJobs` (15), then its one field.
        let mut bytes = vec![15u8];
        bytes.extend(postcard::to_allocvec(&vec![JobV2::from(&job)]).unwrap());
        let decoded: CommandV2 = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(
            Command::from(decoded),
            Command::UpsertJobs {
                jobs: vec![job.clone()]
            }
        );
        // Version 3 encodes the definition after the version-2 fields.
        let with = Job {
            definition: Some(JobDefinition::new("{}")),
            ..job.clone()
        };
        let v2 = postcard::to_allocvec(&JobV2::from(&with)).unwrap();
        let v3 = postcard::to_allocvec(&with).unwrap();
        assert_eq!(&v3[..v2.len()], &v2[..]);
        let purge = Command::PurgeJobs {
            namespace: id("default"),
            ids: vec![id("web")],
        };
        let decoded: CommandV2 =
            postcard::from_bytes(&postcard::to_allocvec(&purge).unwrap()).unwrap();
        assert_eq!(Command::from(decoded), purge);
    }
}
