//! What the live jobs expect of each plugin (docs/rules.md §4.10), derived from the
//! jobs table and — for system and sysbatch jobs — the allocations and nodes.
//!
//! A plugin's `jobs` list is a cache of [`job_expectations`] over every job, kept in
//! step by the writes that can change it: a job's own writes recompute that job; an
//! allocation or node write adjusts the per-node jobs whose counted allocations it
//! changes by ±1, so no write scans a job's allocations unless the job itself changed.
//! The invariant checker recomputes the whole cache from scratch.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Allocation, ClientStatus, DesiredStatus, Expected, Id, Job};

use super::StateView;
use super::table::Table;
use super::writer::Writer;

/// Whether an allocation counts toward its per-node job's expectations: the servers
/// want it running, it is starting (pending) or running, and its node is eligible.
pub(crate) fn counts(alloc: &Allocation, node_eligible: bool) -> bool {
    node_eligible
        && alloc.desired_status == DesiredStatus::Run
        && matches!(
            alloc.client_status,
            ClientStatus::Pending | ClientStatus::Running
        )
}

/// Whether the node exists and is eligible for scheduling.
fn eligible(view: &StateView<'_>, node_id: &str) -> bool {
    view.node_ref(node_id).is_some_and(|n| n.eligible)
}

/// What `job` expects of each plugin as the state `view` stands, zero entries left
/// out: nothing for a dead job; its groups' counts for a service or batch job; for a
/// system or sysbatch job, per group, its counted allocations ([`counts`]) of that
/// group, by the group's name in the job's current version.
pub(crate) fn job_expectations(view: &StateView<'_>, job: &Job) -> BTreeMap<Id, Expected> {
    if job.is_dead() {
        return BTreeMap::new();
    }
    let mut out = job.expected_by_count();
    if job.job_type.per_node() {
        for alloc in view.allocs_by_job(&job.namespace, &job.id) {
            if !counts(&alloc, eligible(view, &alloc.node_id)) {
                continue;
            }
            if let Some(group) = job.group(&alloc.task_group) {
                for (plugin, (controller, node)) in group.plugins() {
                    let e = out.entry(plugin).or_default();
                    e.controllers += u64::from(controller);
                    e.nodes += u64::from(node);
                }
            }
        }
    }
    out.retain(|_, e| !e.is_zero());
    out
}

/// Sets every plugin `before` or the job as now stored names (or names `namespace`
/// / `id` for a purged job) to what the stored job now expects of it.
pub(crate) fn refresh_job(w: &mut Writer, namespace: &Id, id: &Id, before: Option<&Job>) {
    let view = w.view();
    let now = view.job(namespace, id);
    let expected = now
        .as_deref()
        .map(|j| job_expectations(&view, j))
        .unwrap_or_default();
    let mut plugins: BTreeSet<Id> = expected.keys().cloned().collect();
    for job in before.into_iter().chain(now.as_deref()) {
        plugins.extend(job.expected_by_count().into_keys());
    }
    for plugin in plugins {
        let e = expected.get(&plugin).copied().unwrap_or_default();
        w.set_job_expectation(&plugin, namespace, id, e);
    }
}

/// The ±1 adjustments of one allocation to its per-node job's expectations, if it
/// counts there with its node's eligibility `node_eligible`.
fn contribution(
    view: &StateView<'_>,
    alloc: &Allocation,
    node_eligible: bool,
) -> Vec<(Id, bool, bool)> {
    if !counts(alloc, node_eligible) {
        return Vec::new();
    }
    let Some(job) = view.job_ref(&alloc.namespace, &alloc.job_id) else {
        return Vec::new();
    };
    if !job.job_type.per_node() || job.is_dead() {
        return Vec::new();
    }
    job.group(&alloc.task_group).map_or(Vec::new(), |g| {
        g.plugins()
            .into_iter()
            .map(|(plugin, (c, n))| (plugin, c, n))
            .collect()
    })
}

/// Adds (`add`) or takes away the adjustments of one allocation.
fn adjust(w: &mut Writer, alloc: &Allocation, changes: Vec<(Id, bool, bool)>, add: bool) {
    for (plugin, controller, node) in changes {
        let mut e = w.job_expectation(&plugin, &alloc.namespace, &alloc.job_id);
        let step = |v: &mut u64, on: bool| {
            if on {
                // Never below zero: the cache counted this alloc when it was written.
                *v = if add { *v + 1 } else { v.saturating_sub(1) };
            }
        };
        step(&mut e.controllers, controller);
        step(&mut e.nodes, node);
        w.set_job_expectation(&plugin, &alloc.namespace, &alloc.job_id, e);
    }
}

/// Whether any job exists: without one nothing here has work to do, and the writes
/// that call in pay one O(1) row count.
pub(crate) fn any_jobs(w: &Writer) -> bool {
    w.view().row_count(Table::Jobs) > 0
}

/// An allocation was written or deleted (`before` → `after`, either absent), nodes as
/// they stand: per-node jobs' expectations follow.
pub(crate) fn alloc_changed(
    w: &mut Writer,
    before: Option<&Allocation>,
    after: Option<&Allocation>,
) {
    let view = w.view();
    let old = before.map(|a| contribution(&view, a, eligible(&view, &a.node_id)));
    let new = after.map(|a| contribution(&view, a, eligible(&view, &a.node_id)));
    let same_job = match (before, after) {
        (Some(b), Some(a)) => b.namespace == a.namespace && b.job_id == a.job_id,
        _ => false,
    };
    if same_job && old == new {
        // Counted before and after, or neither (a status report of a running
        // allocation): nothing moves, and no plugin is so much as read.
        return;
    }
    if let (Some(a), Some(changes)) = (before, old) {
        adjust(w, a, changes, false);
    }
    if let (Some(a), Some(changes)) = (after, new) {
        adjust(w, a, changes, true);
    }
}

/// A node's eligibility changed (created, deleted, or its flag set): the counted
/// allocations on it move in or out of their per-node jobs' expectations.
pub(crate) fn node_eligibility_changed(w: &mut Writer, node_id: &str, before: bool, after: bool) {
    if before == after || !any_jobs(w) {
        return;
    }
    let allocs: Vec<_> = w.view().allocs_by_node(node_id).collect();
    for alloc in allocs {
        let view = w.view();
        let old = contribution(&view, &alloc, before);
        let new = contribution(&view, &alloc, after);
        adjust(w, &alloc, old, false);
        adjust(w, &alloc, new, true);
    }
}
