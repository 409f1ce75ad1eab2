//! Jobs: what the scheduler was asked to run, as far as CSI plugins care — the task
//! groups, their counts, and the tasks that run a CSI plugin — and, beside those parsed
//! parts, the whole definition as it was registered ([`JobDefinition`], opaque here).
//!
//! A job is the source of a plugin's *expected* instances (docs/rules.md §4.10): a
//! plugin's `controllers_expected` / `nodes_expected` are sums over the live jobs that
//! run it, never counts of what happens to be fingerprinted.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Id;

/// How the scheduler places a job's allocations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobType {
    /// Long-running, `count` allocations per group.
    #[default]
    Service,
    /// Run to completion, `count` allocations per group.
    Batch,
    /// One allocation per eligible node, long-running.
    System,
    /// One allocation per eligible node, run to completion.
    Sysbatch,
}

impl JobType {
    /// Whether the job runs one allocation per eligible node (system, sysbatch) rather
    /// than a group's `count`.
    pub fn per_node(self) -> bool {
        matches!(self, JobType::System | JobType::Sysbatch)
    }

    /// The lowercase name (`service`, `batch`, `system`, `sysbatch`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobType::Service => "service",
            JobType::Batch => "batch",
            JobType::System => "system",
            JobType::Sysbatch => "sysbatch",
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Registered; none of its allocations has been seen running yet.
    #[default]
    Pending,
    /// At least one of its allocations was seen running since it was (re)registered.
    Running,
    /// Stopped: it expects nothing any more (the row is kept until purged).
    Dead,
}

impl JobStatus {
    /// The lowercase name (`pending`, `running`, `dead`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Dead => "dead",
        }
    }
}

/// Which instances of a CSI plugin a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CsiPluginType {
    /// A controller instance.
    Controller,
    /// A node instance.
    Node,
    /// Both: one process serving as controller and node.
    Monolith,
}

impl CsiPluginType {
    /// Whether the task runs a controller instance.
    pub fn controller(self) -> bool {
        matches!(self, CsiPluginType::Controller | CsiPluginType::Monolith)
    }

    /// Whether the task runs a node instance.
    pub fn node(self) -> bool {
        matches!(self, CsiPluginType::Node | CsiPluginType::Monolith)
    }
}

/// A task's `csi_plugin` stanza: the task runs an instance of this plugin.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskCsiPlugin {
    /// The plugin id the task's instances register under.
    pub id: Id,
    /// Controller, node or monolith.
    #[serde(rename = "type")]
    pub plugin_type: CsiPluginType,
}

/// A task of a task group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// The task's name (unique within its group).
    pub name: Id,
    /// The CSI plugin the task runs, if it runs one.
    #[serde(default)]
    pub csi_plugin: Option<TaskCsiPlugin>,
}

/// A task group: `count` allocations of the same tasks (for service and batch jobs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskGroup {
    /// The group's name (unique within its job); allocations name it as `task_group`.
    pub name: Id,
    /// How many allocations of the group the job asks for (service and batch jobs;
    /// system and sysbatch jobs place one per eligible node whatever it says).
    pub count: u32,
    /// The group's tasks.
    #[serde(default)]
    pub tasks: Vec<Task>,
}

impl TaskGroup {
    /// The plugins the group's tasks run, each with the instance kinds it runs
    /// (controller, node); a plugin two tasks run counts once per kind.
    pub fn plugins(&self) -> BTreeMap<Id, (bool, bool)> {
        let mut out: BTreeMap<Id, (bool, bool)> = BTreeMap::new();
        for p in self.tasks.iter().filter_map(|t| t.csi_plugin.as_ref()) {
            let kinds = out.entry(p.id.clone()).or_default();
            kinds.0 |= p.plugin_type.controller();
            kinds.1 |= p.plugin_type.node();
        }
        out
    }
}

/// How many instances of one plugin one job expects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Expected {
    /// Controller instances.
    pub controllers: u64,
    /// Node instances.
    pub nodes: u64,
}

impl Expected {
    /// Whether it expects no instance of either kind.
    pub fn is_zero(&self) -> bool {
        self.controllers == 0 && self.nodes == 0
    }
}

/// The largest registered definition a job may carry, in bytes (1 MiB): an input rule
/// (docs/rules.md §4.0).
pub const MAX_DEFINITION_BYTES: usize = 1 << 20;

/// A job's definition as its user registered it — for the agent, the job's JSON object
/// (canonicalised: compact, keys sorted, the fields the store owns left out) — kept
/// whole beside the parsed parts so that a read can answer it back. Opaque to the
/// store: it is stored, compared, encoded and bounded
/// ([`MAX_DEFINITION_BYTES`]), never interpreted. Shared between the versions of a
/// row (a status change does not copy it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobDefinition(Arc<str>);

impl JobDefinition {
    /// A definition holding `text`.
    pub fn new(text: impl Into<Arc<str>>) -> JobDefinition {
        JobDefinition(text.into())
    }

    /// The definition's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A job, by (namespace, id).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The job's namespace.
    pub namespace: Id,
    /// The job's id (unique within its namespace).
    pub id: Id,
    /// Service, batch, system or sysbatch.
    #[serde(rename = "type", default)]
    pub job_type: JobType,
    /// Pending, running or dead; set by the store (registration, allocations seen
    /// running, stop), never taken from a request.
    #[serde(default)]
    pub status: JobStatus,
    /// The job's version: 0 when first registered, one more at each registration that
    /// changes it; set by the store.
    #[serde(default)]
    pub version: u64,
    /// The task groups (names unique).
    #[serde(default)]
    pub task_groups: Vec<TaskGroup>,
    /// The index of the write that created the row.
    #[serde(default)]
    pub create_index: u64,
    /// The index of the last write that changed the row.
    #[serde(default)]
    pub modify_index: u64,
    /// The index of the last registration that changed the job's definition (a
    /// status change moves `modify_index` only).
    #[serde(default)]
    pub job_modify_index: u64,
    /// The whole definition as registered, if the registration carried one (format
    /// version 3; a job registered before has none). Part of what a registration
    /// changes: the same parsed parts with another definition are a new version.
    #[serde(default)]
    pub definition: Option<JobDefinition>,
}

impl Job {
    /// A service job with no task groups.
    pub fn new(namespace: impl Into<Id>, id: impl Into<Id>) -> Job {
        Job {
            namespace: namespace.into(),
            id: id.into(),
            ..Job::default()
        }
    }

    /// Whether the job is stopped (it expects nothing).
    pub fn is_dead(&self) -> bool {
        self.status == JobStatus::Dead
    }

    /// The group called `name`, if the job has one.
    pub fn group(&self, name: &str) -> Option<&TaskGroup> {
        self.task_groups.iter().find(|g| &*g.name == name)
    }

    /// Whether two registrations describe the same job (type, groups and the
    /// registered definition; the fields the store sets are ignored).
    pub fn same_definition(&self, other: &Job) -> bool {
        self.job_type == other.job_type
            && self.task_groups == other.task_groups
            && self.definition == other.definition
    }

    /// The plugins the job runs and how many instances of each it expects by its
    /// groups' counts (service and batch jobs), whatever its status. For system and
    /// sysbatch jobs the expectation follows their allocations instead
    /// (docs/rules.md §4.10); this gives the plugins they name with zero counts.
    pub fn expected_by_count(&self) -> BTreeMap<Id, Expected> {
        let mut out: BTreeMap<Id, Expected> = BTreeMap::new();
        for g in &self.task_groups {
            let count = if self.job_type.per_node() {
                0
            } else {
                u64::from(g.count)
            };
            for (plugin, (controller, node)) in g.plugins() {
                let e = out.entry(plugin).or_default();
                if controller {
                    e.controllers += count;
                }
                if node {
                    e.nodes += count;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::id;
    use super::*;

    fn task(name: &str, plugin: Option<(&str, CsiPluginType)>) -> Task {
        Task {
            name: id(name),
            csi_plugin: plugin.map(|(p, t)| TaskCsiPlugin {
                id: id(p),
                plugin_type: t,
            }),
        }
    }

    #[test]
    fn expectations_by_count_sum_groups_and_count_monoliths_twice() {
        use CsiPluginType::*;
        let mut job = Job::new("default", "csi");
        job.task_groups = vec![
            TaskGroup {
                name: id("controllers"),
                count: 2,
                tasks: vec![task("c", Some(("ebs", Controller))), task("log", None)],
            },
            TaskGroup {
                name: id("nodes"),
                count: 5,
                // Two tasks of one kind in one group: one instance per allocation.
                tasks: vec![
                    task("n", Some(("ebs", Node))),
                    task("n2", Some(("ebs", Node))),
                ],
            },
            TaskGroup {
                name: id("mono"),
                count: 3,
                tasks: vec![task("m", Some(("nfs", Monolith)))],
            },
        ];
        let e = job.expected_by_count();
        assert_eq!(
            e[&id("ebs")],
            Expected {
                controllers: 2,
                nodes: 5
            }
        );
        assert_eq!(
            e[&id("nfs")],
            Expected {
                controllers: 3,
                nodes: 3
            }
        );
        job.job_type = JobType::System;
        assert!(job.expected_by_count().values().all(Expected::is_zero));
        assert_eq!(job.expected_by_count().len(), 2);
    }

    #[test]
    fn definitions_ignore_store_fields() {
        let a = Job::new("default", "web");
        let mut b = a.clone();
        b.version = 4;
        b.status = JobStatus::Dead;
        b.modify_index = 9;
        assert!(a.same_definition(&b));
        b.job_type = JobType::Batch;
        assert!(!a.same_definition(&b));
        let mut c = a.clone();
        c.definition = Some(JobDefinition::new(r#"{"Datacenters":["dc1"]}"#));
        assert!(!a.same_definition(&c));
    }
}
