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
//!
//! Going the other way, [`AsV2`] writes a current command in its version-2 bytes —
//! what a server of the previous release decodes — when [`Command::fits_format_2`]
//! says it can be: a rolling upgrade replicates to such servers in their shapes until
//! every server reads format 3 (the raft crate's `formats` module).

use serde::ser::{Error as _, SerializeStruct, SerializeStructVariant};
use serde::{Deserialize, Serialize, Serializer};

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

/// The oldest store format a server of the previous release reads: the floor a
/// cluster upgraded one server at a time starts from.
pub const OLDEST_CLUSTER_FORMAT: u32 = 2;

impl Command {
    /// Whether the command has a version-2 shape: none of version 3's additions (a
    /// job's definition, an ACL salt, the commands appended in version 3). A command
    /// that fits is written by [`AsV2`] in the bytes a version-2 server decodes, and
    /// decoded there to the same command.
    pub fn fits_format_2(&self) -> bool {
        // No wildcard: a new variant must say which format it needs.
        match self {
            Command::AclBootstrap { salt, .. } | Command::CreateAclTokens { salt, .. } => {
                salt.is_none()
            }
            Command::UpsertJobs { jobs } => jobs.iter().all(|j| j.definition.is_none()),
            Command::UpdateAclToken { .. }
            | Command::SetAclSalt { .. }
            | Command::StageSnapshotChunk { .. }
            | Command::RestoreSnapshot { .. } => false,
            Command::UpsertNode { .. }
            | Command::DeleteNodes { .. }
            | Command::UpdateNodeStatus { .. }
            | Command::UpdateNodeDrain { .. }
            | Command::UpdateNodeEligibility { .. }
            | Command::UpsertAllocs { .. }
            | Command::DeleteAllocs { .. }
            | Command::RegisterCsiVolumes { .. }
            | Command::DeregisterCsiVolumes { .. }
            | Command::ClaimCsiVolumes { .. }
            | Command::UpsertNodes { .. }
            | Command::DeleteAclTokens { .. }
            | Command::StopAllocs { .. }
            | Command::StopJobs { .. }
            | Command::PurgeJobs { .. } => true,
        }
    }

    /// The oldest store format whose servers can apply the command: 2 when it
    /// [fits](Self::fits_format_2), else 3.
    pub fn format_needed(&self) -> u32 {
        if self.fits_format_2() { 2 } else { 3 }
    }
}

/// A command written in its version-2 bytes (serde, for postcard): the bytes a
/// server of format 2 decodes as its own command. Only a command that
/// [fits](Command::fits_format_2) can be written; any other is an error.
#[derive(Debug, Clone, Copy)]
pub struct AsV2<'a>(pub &'a Command);

/// The variant numbers of the commands whose version-2 bytes differ (postcard
/// numbers variants; these are their places in [`CommandV2`]).
const ACL_BOOTSTRAP: u32 = 11;
const CREATE_ACL_TOKENS: u32 = 12;
const UPSERT_JOBS: u32 = 15;

impl Serialize for AsV2<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Command::AclBootstrap { token, salt: None } => {
                let mut v =
                    s.serialize_struct_variant("CommandV2", ACL_BOOTSTRAP, "AclBootstrap", 1)?;
                v.serialize_field("token", token)?;
                v.end()
            }
            Command::CreateAclTokens { tokens, salt: None } => {
                let mut v = s.serialize_struct_variant(
                    "CommandV2",
                    CREATE_ACL_TOKENS,
                    "CreateAclTokens",
                    1,
                )?;
                v.serialize_field("tokens", tokens)?;
                v.end()
            }
            Command::UpsertJobs { jobs } if jobs.iter().all(|j| j.definition.is_none()) => {
                let mut v =
                    s.serialize_struct_variant("CommandV2", UPSERT_JOBS, "UpsertJobs", 1)?;
                let jobs: Vec<JobV2Ref<'_>> = jobs.iter().map(JobV2Ref).collect();
                v.serialize_field("jobs", &jobs)?;
                v.end()
            }
            c if c.fits_format_2() => {
                // Every other command of version 2 has the same bytes in both.
                c.serialize(s)
            }
            c => Err(S::Error::custom(format!(
                "a {} command needs format 3; a format-2 server cannot decode it",
                c.kind()
            ))),
        }
    }
}

/// A job written in its version-2 bytes (its definition must be `None`).
struct JobV2Ref<'a>(&'a Job);

impl Serialize for JobV2Ref<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let j = self.0;
        let mut v = s.serialize_struct("JobV2", 9)?;
        v.serialize_field("namespace", &j.namespace)?;
        v.serialize_field("id", &j.id)?;
        v.serialize_field("job_type", &j.job_type)?;
        v.serialize_field("status", &j.status)?;
        v.serialize_field("version", &j.version)?;
        v.serialize_field("task_groups", &j.task_groups)?;
        v.serialize_field("create_index", &j.create_index)?;
        v.serialize_field("modify_index", &j.modify_index)?;
        v.serialize_field("job_modify_index", &j.job_modify_index)?;
        v.end()
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

    fn v2_round_trip(c: &Command) -> Command {
        let bytes = postcard::to_allocvec(&AsV2(c)).unwrap();
        let decoded: CommandV2 = postcard::from_bytes(&bytes).unwrap();
        // JobV2's derived encoding and the borrowed one agree.
        if let CommandV2::UpsertJobs { jobs } = &decoded {
            let mut again = vec![UPSERT_JOBS as u8];
            again.extend(postcard::to_allocvec(jobs).unwrap());
            assert_eq!(again, bytes);
        }
        Command::from(decoded)
    }

    #[test]
    fn commands_that_fit_format_2_cross_in_its_bytes_and_come_back_the_same() {
        use crate::model::{AclScope, AclToken};
        let token = AclToken::new("acc", "ops", vec![AclScope::Management], "d1gest");
        let fitting = vec![
            Command::UpsertJobs {
                jobs: vec![Job::new("default", "web"), Job::new("default", "db")],
            },
            Command::AclBootstrap {
                token: token.clone(),
                salt: None,
            },
            Command::CreateAclTokens {
                tokens: vec![token.clone()],
                salt: None,
            },
            Command::DeleteNodes {
                ids: vec![id("n1")],
            },
            Command::StopJobs {
                namespace: id("default"),
                ids: vec![id("web")],
            },
        ];
        for c in &fitting {
            assert!(c.fits_format_2(), "{c:?}");
            assert_eq!(c.format_needed(), 2);
            assert_eq!(&v2_round_trip(c), c);
        }
        let salted = Command::AclBootstrap {
            token,
            salt: Some(crate::model::AclSalt([7; 32])),
        };
        let defined = Command::UpsertJobs {
            jobs: vec![Job {
                definition: Some(JobDefinition::new("{}")),
                ..Job::new("default", "web")
            }],
        };
        for c in [&salted, &defined] {
            assert!(!c.fits_format_2());
            assert_eq!(c.format_needed(), 3);
            assert!(postcard::to_allocvec(&AsV2(c)).is_err());
        }
    }
}
