//! `Job` and `JobListStub`: the parts of Nomad's job a CSI-aware state store keeps —
//! type, status, version, task groups with their counts, and each task's
//! `CSIPluginConfig` (plugin id and type, in Nomad's spellings).

use schedstate::model::{CsiPluginType, Job, JobStatus, JobType, Task, TaskCsiPlugin, TaskGroup};
use serde::{Deserialize, Serialize};

use super::ShapeError;

/// Nomad's `TaskCSIPluginConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadTaskCsiPluginConfig {
    #[serde(rename = "ID")]
    pub id: String,
    /// `controller`, `node` or `monolith`.
    #[serde(rename = "Type")]
    pub plugin_type: CsiPluginType,
}

/// Nomad's `Task` (name and CSI plugin stanza).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadTask {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(
        rename = "CSIPluginConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub csi_plugin: Option<NomadTaskCsiPluginConfig>,
}

/// Nomad's `TaskGroup` (name, count, tasks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadTaskGroup {
    #[serde(rename = "Name")]
    pub name: String,
    /// Absent means 1, as in Nomad's job specification.
    #[serde(rename = "Count", default = "one")]
    pub count: u32,
    #[serde(rename = "Tasks", default)]
    pub tasks: Vec<NomadTask>,
}

fn one() -> u32 {
    1
}

/// Nomad's `Job`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadJob {
    #[serde(rename = "ID")]
    pub id: String,
    /// Nomad's display name; the id here (the store keeps no separate name).
    #[serde(rename = "Name", default)]
    pub name: String,
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
    #[serde(rename = "Type", default)]
    pub job_type: JobType,
    #[serde(rename = "Status", default)]
    pub status: JobStatus,
    /// Whether the job is stopped (Nomad's `Stop`): status dead.
    #[serde(rename = "Stop", default)]
    pub stop: bool,
    #[serde(rename = "Version", default)]
    pub version: u64,
    #[serde(rename = "TaskGroups", default)]
    pub task_groups: Vec<NomadTaskGroup>,
    #[serde(rename = "CreateIndex", default)]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default)]
    pub modify_index: u64,
    #[serde(rename = "JobModifyIndex", default)]
    pub job_modify_index: u64,
}

impl From<&Job> for NomadJob {
    fn from(j: &Job) -> Self {
        NomadJob {
            id: j.id.to_string(),
            name: j.id.to_string(),
            namespace: j.namespace.to_string(),
            job_type: j.job_type,
            status: j.status,
            stop: j.is_dead(),
            version: j.version,
            task_groups: j
                .task_groups
                .iter()
                .map(|g| NomadTaskGroup {
                    name: g.name.to_string(),
                    count: g.count,
                    tasks: g
                        .tasks
                        .iter()
                        .map(|t| NomadTask {
                            name: t.name.to_string(),
                            csi_plugin: t.csi_plugin.as_ref().map(|p| NomadTaskCsiPluginConfig {
                                id: p.id.to_string(),
                                plugin_type: p.plugin_type,
                            }),
                        })
                        .collect(),
                })
                .collect(),
            create_index: j.create_index,
            modify_index: j.modify_index,
            job_modify_index: j.job_modify_index,
        }
    }
}

impl TryFrom<NomadJob> for Job {
    type Error = ShapeError;

    /// The job a registration carries; the namespace defaults to `default`.
    fn try_from(j: NomadJob) -> Result<Self, ShapeError> {
        let namespace = if j.namespace.is_empty() {
            "default".to_string()
        } else {
            j.namespace
        };
        Ok(Job {
            namespace: namespace.into(),
            id: j.id.into(),
            job_type: j.job_type,
            status: j.status,
            version: j.version,
            task_groups: j
                .task_groups
                .into_iter()
                .map(|g| TaskGroup {
                    name: g.name.into(),
                    count: g.count,
                    tasks: g
                        .tasks
                        .into_iter()
                        .map(|t| Task {
                            name: t.name.into(),
                            csi_plugin: t.csi_plugin.map(|p| TaskCsiPlugin {
                                id: p.id.into(),
                                plugin_type: p.plugin_type,
                            }),
                        })
                        .collect(),
                })
                .collect(),
            create_index: j.create_index,
            modify_index: j.modify_index,
            job_modify_index: j.job_modify_index,
        })
    }
}

/// Nomad's `JobListStub`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadJobListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name", default)]
    pub name: String,
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
    #[serde(rename = "Type", default)]
    pub job_type: JobType,
    #[serde(rename = "Status", default)]
    pub status: JobStatus,
    #[serde(rename = "Stop", default)]
    pub stop: bool,
    #[serde(rename = "Version", default)]
    pub version: u64,
    #[serde(rename = "CreateIndex", default)]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default)]
    pub modify_index: u64,
    #[serde(rename = "JobModifyIndex", default)]
    pub job_modify_index: u64,
}

impl From<&Job> for NomadJobListStub {
    fn from(j: &Job) -> Self {
        NomadJobListStub {
            id: j.id.to_string(),
            name: j.id.to_string(),
            namespace: j.namespace.to_string(),
            job_type: j.job_type,
            status: j.status,
            stop: j.is_dead(),
            version: j.version,
            create_index: j.create_index,
            modify_index: j.modify_index,
            job_modify_index: j.job_modify_index,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_round_trips_in_nomads_spellings() {
        let mut job = Job::new("default", "ebs");
        job.job_type = JobType::System;
        job.status = JobStatus::Running;
        job.version = 3;
        job.task_groups = vec![TaskGroup {
            name: "nodes".into(),
            count: 1,
            tasks: vec![Task {
                name: "plugin".into(),
                csi_plugin: Some(TaskCsiPlugin {
                    id: "aws-ebs0".into(),
                    plugin_type: CsiPluginType::Monolith,
                }),
            }],
        }];
        let shape = NomadJob::from(&job);
        let json = serde_json::to_value(&shape).unwrap();
        assert_eq!(json["Type"], "system");
        assert_eq!(json["Status"], "running");
        assert_eq!(json["Stop"], false);
        let tg = &json["TaskGroups"][0];
        assert_eq!(tg["Count"], 1);
        assert_eq!(tg["Tasks"][0]["CSIPluginConfig"]["ID"], "aws-ebs0");
        assert_eq!(tg["Tasks"][0]["CSIPluginConfig"]["Type"], "monolith");
        let back: NomadJob = serde_json::from_value(json).unwrap();
        assert_eq!(Job::try_from(back).unwrap(), job);
    }

    #[test]
    fn a_minimal_registration_fills_nomads_defaults() {
        let shape: NomadJob = serde_json::from_str(
            r#"{"ID":"web","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t"}]}]}"#,
        )
        .unwrap();
        let job = Job::try_from(shape).unwrap();
        assert_eq!(&*job.namespace, "default");
        assert_eq!(job.job_type, JobType::Service);
        assert_eq!(job.task_groups[0].count, 1);
        let bad = serde_json::from_str::<NomadJob>(
            r#"{"ID":"web","TaskGroups":[{"Name":"g","Count":-1}]}"#,
        );
        assert!(bad.is_err());
        let bad = serde_json::from_str::<NomadJob>(
            r#"{"ID":"web","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","CSIPluginConfig":{"ID":"p","Type":"sidecar"}}]}]}"#,
        );
        assert!(bad.unwrap_err().to_string().contains("unknown variant"));
    }
}
