//! The jobs part of the reference model (docs/rules.md §4.10), written as plainly as
//! possible: job writes on a map, and the plugins' job expectations recomputed from
//! scratch after every command — where the store keeps them incrementally (±1 per
//! allocation or node write). The two must agree after every step.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use schedstate::model::{
    Allocation, ClientStatus, CsiPluginType, DesiredStatus, Expected, Id, Job, JobStatus, JobType,
    Task, TaskCsiPlugin, TaskGroup, id,
};

use super::{MPlugin, Model, NAMESPACES, PLUGINS, Refused, pick};

/// Job ids, task groups and task names the strategies draw from (small: they collide,
/// duplicate group and task names included).
pub(super) const JOBS: [&str; 3] = ["job", "job2", "sys"];
pub(super) const GROUPS: [&str; 2] = ["tg", "tg2"];
const TASKS: [&str; 2] = ["t1", "t2"];

/// A job key.
pub(super) type JobKey = (Id, Id);

/// The input rules of one job (before anything is written).
fn job_shape(job: &Job) -> Result<(), Refused> {
    if job.namespace.is_empty() || job.id.is_empty() {
        return Err(Refused::MissingField);
    }
    let mut groups = BTreeSet::new();
    for g in &job.task_groups {
        if g.name.is_empty() {
            return Err(Refused::MissingField);
        }
        if !groups.insert(&g.name) {
            return Err(Refused::Invalid);
        }
        let mut tasks = BTreeSet::new();
        for t in &g.tasks {
            if t.name.is_empty() {
                return Err(Refused::MissingField);
            }
            if !tasks.insert(&t.name) {
                return Err(Refused::Invalid);
            }
            if t.csi_plugin.as_ref().is_some_and(|p| p.id.is_empty()) {
                return Err(Refused::MissingField);
            }
        }
    }
    Ok(())
}

impl Model {
    pub(super) fn upsert_jobs(&mut self, index: u64, jobs: &[Job]) -> Result<(), Refused> {
        if jobs.is_empty() {
            return Err(Refused::Empty);
        }
        for job in jobs {
            job_shape(job)?;
        }
        for req in jobs {
            let key = (req.namespace.clone(), req.id.clone());
            let mut row = Job {
                namespace: req.namespace.clone(),
                id: req.id.clone(),
                job_type: req.job_type,
                task_groups: req.task_groups.clone(),
                status: JobStatus::Pending,
                version: 0,
                create_index: index,
                modify_index: index,
                job_modify_index: index,
                definition: req.definition.clone(),
            };
            if let Some(old) = self.jobs.get(&key) {
                let same = old.job_type == row.job_type
                    && old.task_groups == row.task_groups
                    && old.definition == row.definition;
                if same && old.status != JobStatus::Dead {
                    continue;
                }
                row.create_index = old.create_index;
                row.version = old.version + 1;
                if old.status != JobStatus::Dead {
                    row.status = old.status;
                }
            }
            self.jobs.insert(key, row);
        }
        Ok(())
    }

    /// Stop (`purge` false) or purge jobs of one namespace; atomic.
    pub(super) fn end_jobs(
        &mut self,
        index: u64,
        namespace: &Id,
        ids: &[Id],
        purge: bool,
    ) -> Result<(), Refused> {
        if ids.is_empty() {
            return Err(Refused::Empty);
        }
        if namespace.is_empty() {
            return Err(Refused::MissingField);
        }
        if let Some(missing) = ids
            .iter()
            .find(|j| !self.jobs.contains_key(&(namespace.clone(), (*j).clone())))
        {
            return Err(Refused::JobNotFound(missing.clone()));
        }
        for j in ids {
            let key = (namespace.clone(), j.clone());
            if purge {
                self.jobs.remove(&key);
            } else if let Some(job) = self.jobs.get_mut(&key)
                && job.status != JobStatus::Dead
            {
                job.status = JobStatus::Dead;
                job.modify_index = index;
            }
        }
        Ok(())
    }

    /// An allocation batch against the jobs: every version named anew (not already the
    /// stored allocation's, for the same job) must exist — checked in order, each
    /// against the allocations the batch wrote before it.
    pub(super) fn check_alloc_versions(&self, allocs: &[Allocation]) -> Result<(), Refused> {
        let mut written: BTreeMap<Id, &Allocation> = BTreeMap::new();
        for a in allocs {
            let before = written
                .get(&a.id)
                .copied()
                .or_else(|| self.allocs.get(&a.id));
            let anew = before.is_none_or(|b| {
                (&b.namespace, &b.job_id, b.job_version) != (&a.namespace, &a.job_id, a.job_version)
            });
            if anew
                && let Some(job) = self.jobs.get(&(a.namespace.clone(), a.job_id.clone()))
                && a.job_version > job.version
            {
                return Err(Refused::JobVersion);
            }
            written.insert(a.id.clone(), a);
        }
        Ok(())
    }

    pub(super) fn alloc_started(&mut self, index: u64, a: &Allocation) {
        if a.client_status != ClientStatus::Running {
            return;
        }
        if let Some(job) = self.jobs.get_mut(&(a.namespace.clone(), a.job_id.clone()))
            && job.status == JobStatus::Pending
        {
            job.status = JobStatus::Running;
            job.modify_index = index;
        }
    }

    /// What every live job expects of every plugin, from scratch.
    fn expectations(&self) -> BTreeMap<Id, BTreeMap<JobKey, Expected>> {
        let mut out: BTreeMap<Id, BTreeMap<JobKey, Expected>> = BTreeMap::new();
        for (key, job) in &self.jobs {
            if job.status == JobStatus::Dead {
                continue;
            }
            let per_node = matches!(job.job_type, JobType::System | JobType::Sysbatch);
            for g in &job.task_groups {
                let weight = if per_node {
                    self.allocs
                        .values()
                        .filter(|a| {
                            a.namespace == key.0
                                && a.job_id == key.1
                                && a.task_group == g.name
                                && a.desired_status == DesiredStatus::Run
                                && matches!(
                                    a.client_status,
                                    ClientStatus::Pending | ClientStatus::Running
                                )
                                && self.nodes.get(&a.node_id).is_some_and(|n| n.eligible)
                        })
                        .count() as u64
                } else {
                    u64::from(g.count)
                };
                // Each (plugin, kind) once per group.
                let mut kinds: BTreeSet<(Id, bool)> = BTreeSet::new();
                for p in g.tasks.iter().filter_map(|t| t.csi_plugin.as_ref()) {
                    if matches!(
                        p.plugin_type,
                        CsiPluginType::Controller | CsiPluginType::Monolith
                    ) {
                        kinds.insert((p.id.clone(), true));
                    }
                    if matches!(p.plugin_type, CsiPluginType::Node | CsiPluginType::Monolith) {
                        kinds.insert((p.id.clone(), false));
                    }
                }
                for (plugin, controller) in kinds {
                    let e = out
                        .entry(plugin)
                        .or_default()
                        .entry(key.clone())
                        .or_default();
                    if controller {
                        e.controllers += weight;
                    } else {
                        e.nodes += weight;
                    }
                }
            }
        }
        for per_job in out.values_mut() {
            per_job.retain(|_, e| !e.is_zero());
        }
        out.retain(|_, per_job| !per_job.is_empty());
        out
    }

    /// Sets every plugin's job list to what the live jobs expect, creating plugins
    /// something is expected of (their indexes are settled by `finish_plugins`).
    pub(super) fn recompute_expectations(&mut self, index: u64) {
        let mut want = self.expectations();
        for (pid, p) in self.plugins.iter_mut() {
            p.jobs = want.remove(pid).unwrap_or_default();
        }
        for (pid, jobs) in want {
            let mut p = MPlugin::new(index);
            p.jobs = jobs;
            self.plugins.insert(pid, p);
        }
    }
}

fn task_strategy() -> impl Strategy<Value = Task> {
    (
        pick(&TASKS),
        prop_oneof![
            2 => Just(None),
            5 => (
                prop_oneof![20 => pick(&PLUGINS), 1 => Just(id(""))],
                prop::sample::select(
                    &[
                        CsiPluginType::Controller,
                        CsiPluginType::Node,
                        CsiPluginType::Node,
                        CsiPluginType::Monolith,
                    ][..]
                ),
            )
                .prop_map(|(p, t)| Some(TaskCsiPlugin {
                    id: p,
                    plugin_type: t
                })),
        ],
    )
        .prop_map(|(name, csi_plugin)| Task { name, csi_plugin })
}

fn group_strategy() -> impl Strategy<Value = TaskGroup> {
    (
        pick(&GROUPS),
        0..4u32,
        prop::collection::vec(task_strategy(), 0..3),
    )
        .prop_map(|(name, count, tasks)| TaskGroup { name, count, tasks })
}

/// A job registration: small pools, so that groups and tasks collide (duplicates are
/// refused), plugin ids change between registrations, types vary.
pub(super) fn job_strategy() -> impl Strategy<Value = Job> {
    (
        pick(&NAMESPACES),
        prop_oneof![30 => pick(&JOBS), 1 => Just(id(""))],
        prop::sample::select(
            &[
                JobType::Service,
                JobType::Batch,
                JobType::System,
                JobType::Sysbatch,
            ][..],
        ),
        prop::collection::vec(group_strategy(), 0..3),
        // Registered definitions: none (as before format 3), or one of two.
        prop::option::of(prop::sample::select(
            &["{}", "{\"Datacenters\":[\"dc1\"]}"][..],
        )),
    )
        .prop_map(
            |(namespace, job_id, job_type, task_groups, definition)| Job {
                namespace,
                id: job_id,
                job_type,
                task_groups,
                definition: definition.map(schedstate::model::JobDefinition::new),
                ..Job::default()
            },
        )
}
