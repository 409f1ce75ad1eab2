//! Job writes: register or update, stop, purge (docs/rules.md §4.10); and the checks
//! an allocation write makes against its job.

use std::sync::Arc;

use crate::model::{Allocation, ClientStatus, Id, Job, JobStatus};

use super::error::{Result, StateError};
use super::expectations::{any_jobs, refresh_job};
use super::tables::job_key;
use super::writer::Writer;

/// Registers jobs or updates their definitions, in order (docs/rules.md §4.10).
pub(crate) fn upsert_jobs(w: &mut Writer, jobs: &[Job]) -> Result<()> {
    for request in jobs {
        let stored = w.view().job(&request.namespace, &request.id);
        let mut job = Job {
            namespace: request.namespace.clone(),
            id: request.id.clone(),
            job_type: request.job_type,
            task_groups: request.task_groups.clone(),
            status: JobStatus::Pending,
            version: 0,
            create_index: w.index,
            modify_index: w.index,
            job_modify_index: w.index,
            definition: request.definition.clone(),
        };
        if let Some(old) = &stored {
            if old.same_definition(&job) && !old.is_dead() {
                // The same job again: nothing changes, nobody wakes.
                continue;
            }
            job.create_index = old.create_index;
            job.version = old.version + 1;
            // A live job keeps its status; a dead one starts over.
            if !old.is_dead() {
                job.status = old.status;
            }
        }
        w.txn.insert(w.t.jobs, Arc::new(job))?;
        refresh_job(w, &request.namespace, &request.id, stored.as_deref());
    }
    w.flush_plugins()
}

/// The stored jobs named, or `JobNotFound` for the first missing one.
fn existing(w: &Writer, namespace: &Id, ids: &[Id]) -> Result<Vec<Arc<Job>>> {
    ids.iter()
        .map(|id| {
            w.view()
                .job(namespace, id)
                .ok_or_else(|| StateError::JobNotFound {
                    namespace: namespace.clone(),
                    id: id.clone(),
                })
        })
        .collect()
}

/// Stops jobs: status dead, everything they expected of plugins gone. One already
/// dead is left as it is. Atomic: an unknown id fails all.
pub(crate) fn stop_jobs(w: &mut Writer, namespace: &Id, ids: &[Id]) -> Result<()> {
    for old in existing(w, namespace, ids)? {
        if old.is_dead() {
            continue;
        }
        let mut job = (*old).clone();
        job.status = JobStatus::Dead;
        job.modify_index = w.index;
        w.txn.insert(w.t.jobs, Arc::new(job))?;
        refresh_job(w, &old.namespace, &old.id, Some(&old));
    }
    w.flush_plugins()
}

/// Purges jobs: rows deleted, everything they expected of plugins gone; their
/// allocations stay. A plugin that no longer exists, or groups renamed since older
/// allocations ran, are no concern. Atomic: an unknown id fails all.
pub(crate) fn purge_jobs(w: &mut Writer, namespace: &Id, ids: &[Id]) -> Result<()> {
    for old in existing(w, namespace, ids)? {
        // A duplicate id in one request: the second finds it gone, which is fine.
        if w.txn
            .delete(w.t.jobs, &job_key(namespace, &old.id))?
            .is_some()
        {
            refresh_job(w, &old.namespace, &old.id, Some(&old));
        }
    }
    w.flush_plugins()
}

/// Checks an allocation (replacing `before`, if stored) against its job, if the jobs
/// table holds it: a job version it names anew must be one the job has had — one it
/// already carried is not checked again, so an allocation of a job purged and
/// registered again (versions start over) can still be updated and stopped. A running
/// allocation moves a pending job to running.
pub(crate) fn check_alloc_job(
    w: &mut Writer,
    before: Option<&Allocation>,
    alloc: &Allocation,
) -> Result<()> {
    if !any_jobs(w) {
        return Ok(());
    }
    let Some(job) = w.view().job(&alloc.namespace, &alloc.job_id) else {
        return Ok(());
    };
    let named_anew = before.is_none_or(|b| {
        (&b.namespace, &b.job_id, b.job_version)
            != (&alloc.namespace, &alloc.job_id, alloc.job_version)
    });
    if named_anew && alloc.job_version > job.version {
        return Err(StateError::JobVersionNotFound {
            alloc_id: alloc.id.clone(),
            namespace: alloc.namespace.clone(),
            job_id: alloc.job_id.clone(),
            version: alloc.job_version,
            current: job.version,
        });
    }
    if job.status == JobStatus::Pending && alloc.client_status == ClientStatus::Running {
        let mut job = (*job).clone();
        job.status = JobStatus::Running;
        job.modify_index = w.index;
        w.txn.insert(w.t.jobs, Arc::new(job))?;
    }
    Ok(())
}
