//! `Job` and `JobListStub`: the parts of Nomad's job a CSI-aware state store parses —
//! type, status, version, task groups with their counts, and each task's
//! `CSIPluginConfig` (plugin id and type, in Nomad's spellings).
//!
//! A registration may carry everything else of a Nomad job (datacenters, drivers,
//! resources, a plugin's `MountDir`): not parsed, but kept whole as the job's
//! definition and answered back (`job_definition.rs`). What Go sends as `null` for a
//! nil pointer, map or slice reads as Nomad's default (`Count` 1, `Type` service, no
//! groups or tasks).

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
    /// Absent (or `null`) means 1, as in Nomad's job specification.
    #[serde(rename = "Count", default = "one", deserialize_with = "count")]
    pub count: u32,
    #[serde(rename = "Tasks", default, deserialize_with = "super::nullable")]
    pub tasks: Vec<NomadTask>,
}

fn one() -> u32 {
    1
}

/// A group's count: a whole number from 0 to 2³²-1, or `null` for 1.
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match Option::<i64>::deserialize(d)? {
        None => Ok(1),
        Some(n) => u32::try_from(n).map_err(|_| {
            serde::de::Error::custom(format!(
                "TaskGroups[].Count {n}: a task group's count is 0 or more (and below 2^32)"
            ))
        }),
    }
}

/// Nomad's `Job`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadJob {
    #[serde(rename = "ID")]
    pub id: String,
    /// Nomad's display name; the id here (the store keeps no separate name).
    #[serde(rename = "Name", default, deserialize_with = "super::nullable")]
    pub name: String,
    #[serde(rename = "Namespace", default, deserialize_with = "super::nullable")]
    pub namespace: String,
    #[serde(rename = "Type", default, deserialize_with = "super::nullable")]
    pub job_type: JobType,
    #[serde(rename = "Status", default, deserialize_with = "super::nullable")]
    pub status: JobStatus,
    /// Whether the job is stopped (Nomad's `Stop`): status dead.
    #[serde(rename = "Stop", default, deserialize_with = "super::nullable")]
    pub stop: bool,
    #[serde(rename = "Version", default, deserialize_with = "super::nullable")]
    pub version: u64,
    #[serde(rename = "TaskGroups", default, deserialize_with = "super::nullable")]
    pub task_groups: Vec<NomadTaskGroup>,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
    #[serde(
        rename = "JobModifyIndex",
        default,
        deserialize_with = "super::nullable"
    )]
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
            definition: None,
        })
    }
}

/// Nomad's `JobListStub`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadJobListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name", default, deserialize_with = "super::nullable")]
    pub name: String,
    #[serde(rename = "Namespace", default, deserialize_with = "super::nullable")]
    pub namespace: String,
    #[serde(rename = "Type", default, deserialize_with = "super::nullable")]
    pub job_type: JobType,
    #[serde(rename = "Status", default, deserialize_with = "super::nullable")]
    pub status: JobStatus,
    #[serde(rename = "Stop", default, deserialize_with = "super::nullable")]
    pub stop: bool,
    #[serde(rename = "Version", default, deserialize_with = "super::nullable")]
    pub version: u64,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
    #[serde(
        rename = "JobModifyIndex",
        default,
        deserialize_with = "super::nullable"
    )]
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

    #[test]
    fn gos_nulls_read_as_nomads_defaults() {
        let shape: NomadJob = serde_json::from_str(
            r#"{"ID":"web","Name":null,"Namespace":null,"Type":null,"Status":null,"Stop":null,
                "Version":null,"Datacenters":["dc1"],
                "TaskGroups":[{"Name":"g","Count":null,"Tasks":null},
                              {"Name":"h","Count":3,"Tasks":[{"Name":"t","Driver":"docker",
                               "CSIPluginConfig":{"ID":"p","Type":"node","MountDir":"/csi"}}]}]}"#,
        )
        .unwrap();
        let job = Job::try_from(shape).unwrap();
        assert_eq!(
            (&*job.namespace, job.job_type),
            ("default", JobType::Service)
        );
        assert_eq!(job.task_groups[0].count, 1);
        assert!(job.task_groups[0].tasks.is_empty());
        let plugin = job.task_groups[1].tasks[0].csi_plugin.as_ref().unwrap();
        assert_eq!(
            (&*plugin.id, plugin.plugin_type),
            ("p", CsiPluginType::Node)
        );
        let none: NomadJob = serde_json::from_str(r#"{"ID":"x","TaskGroups":null}"#).unwrap();
        assert!(none.task_groups.is_empty());
    }
}
