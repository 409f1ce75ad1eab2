//! Allocation writes: upsert (server-terminal allocs take their plugin instances with
//! them) and delete (garbage collection).

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::{Key, sorted_order};
use crate::model::{Allocation, DesiredStatus, Id};

use super::error::{Result, StateError};
use super::expectations::{alloc_changed, any_jobs};
use super::jobs::check_alloc_job;
use super::shared_ids::{AllocIds, reuse_alloc_ids};
use super::tables::job_key;
use super::writer::Writer;

/// Inserts or replaces allocations (docs/rules.md §4.4).
///
/// In three steps, which give what the allocations written one after the other
/// would: each row is made (its create index, its shared ids, its job's checks and
/// expectations, against the stored row or an earlier one of this command with the
/// same id); then all go in as one batch (`WriteTxn::insert_many`: each map of the
/// table takes its keys sorted, in one walk down its tree); then the server-terminal
/// ones take their plugin instances with them, in order. Nothing in the first step
/// reads the plugin instances the last one removes, and nothing in the last reads
/// the allocations the batch writes but their instance index.
pub(crate) fn upsert_allocs(w: &mut Writer, allocs: Vec<Allocation>) -> Result<()> {
    // An empty id is an input rule (`input.rs`).
    let jobs = any_jobs(w);
    let mut shared = (allocs.len() > 1).then(AllocIds::default);
    let mut rows: Vec<Arc<Allocation>> = Vec::with_capacity(allocs.len());
    // The rows of this command by id, for an id given twice: the later row replaces
    // the earlier as it would the stored one.
    let mut earlier: HashMap<Id, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(allocs.len(), Default::default());
    let mut server_terminal = Vec::new();
    let mut stored = stored_rows(w, &allocs).into_iter();
    for mut alloc in allocs {
        let before_in_command = earlier.get(&alloc.id).map(|&i| Arc::clone(&rows[i]));
        let stored = stored.next().flatten();
        let before = before_in_command.or(stored);
        alloc.create_index = before.as_ref().map_or(w.index, |a| a.create_index);
        share_ids(w, &mut alloc, before.as_deref(), shared.as_mut());
        alloc.modify_index = w.index;
        let alloc = Arc::new(alloc);
        if jobs {
            check_alloc_job(w, before.as_deref(), &alloc)?;
            alloc_changed(w, before.as_deref(), Some(&alloc));
        }
        if alloc.server_terminal() {
            server_terminal.push(Arc::clone(&alloc));
        }
        earlier.insert(alloc.id.clone(), rows.len());
        rows.push(alloc);
    }
    w.txn.insert_many(w.t.allocs, rows)?;
    for alloc in server_terminal {
        // Exactly the instances this alloc ran on its node: a newer instance of the
        // same plugin on the same node (another alloc id) stays. Reads see this
        // command's earlier removals, so several stopped allocs all take effect.
        for inst in w.instances_of_alloc(&alloc.id)? {
            if inst.node_id == alloc.node_id {
                w.remove_entry(inst.kind, &inst.plugin_id, &inst.node_id)?;
            }
        }
    }
    w.flush_plugins()
}

/// The stored row of each of `allocs` (by id, in order), looked up together: their
/// lookups descend the table's tree side by side (`View::get_many`), in id order.
fn stored_rows(w: &Writer, allocs: &[Allocation]) -> Vec<Option<Arc<Allocation>>> {
    let keys: Vec<Key> = allocs.iter().map(|a| Key::str(&a.id)).collect();
    let order = sorted_order(&keys);
    let sorted: Vec<&Key> = order.iter().map(|&i| &keys[i]).collect();
    let mut rows = vec![None; allocs.len()];
    w.txn
        .view()
        .get_many(w.t.allocs, &sorted, |k, row| rows[order[k]] = row);
    rows
}

/// Points the allocation's ids at copies the state or this command already holds
/// (`shared_ids.rs`): the replaced row's, an earlier row's of the command, the node's.
fn share_ids(
    w: &Writer,
    alloc: &mut Allocation,
    existing: Option<&Allocation>,
    shared: Option<&mut AllocIds>,
) {
    if let Some(old) = existing {
        reuse_alloc_ids(alloc, old);
    }
    let node_kept = existing.is_some_and(|old| Id::ptr_eq(&old.node_id, &alloc.node_id));
    let node_row = |id: &Id| -> Option<Id> {
        if node_kept || id.is_empty() {
            return None;
        }
        let view = w.txn.view();
        view.get_value(w.t.nodes, &Key::str(id))
            .map(|n| n.id.clone())
    };
    let job_kept = existing.is_some_and(|old| Id::ptr_eq(&old.job_id, &alloc.job_id));
    // An allocation of the same job (most jobs have several), else the job's row.
    let job_row = |namespace: &Id, job: &Id| -> Option<Id> {
        if job_kept || job.is_empty() {
            return None;
        }
        let view = w.txn.view();
        let key = job_key(namespace, job);
        let from_alloc = view
            .index_eq(w.t.allocs_by_job, key.as_bytes())
            .borrowed()
            .map(|a| &a.job_id)
            .find(|id| *id == job);
        from_alloc
            .or_else(|| view.get_value(w.t.jobs, &key).map(|j| &j.id))
            .filter(|id| *id == job)
            .cloned()
    };
    match shared {
        Some(ids) => ids.share(alloc, job_row, node_row),
        None => {
            let namespace = alloc.namespace.clone();
            if let Some(id) = job_row(&namespace, &alloc.job_id) {
                alloc.job_id = id;
            }
            if let Some(id) = node_row(&alloc.node_id) {
                alloc.node_id = id;
            }
        }
    }
}

/// Stops allocations: desired status `stop`, as an upsert of the stored row with
/// that one change would (so the plugin instances they ran go, docs/rules.md §4.4);
/// one already stopped is left as it is. Atomic: an unknown id fails all.
pub(crate) fn stop_allocs(w: &mut Writer, ids: &[Id]) -> Result<()> {
    let mut changed = Vec::new();
    for id in ids {
        let Some(stored) = w.view().alloc(id) else {
            return Err(StateError::AllocNotFound(id.clone()));
        };
        if stored.desired_status != DesiredStatus::Stop {
            let mut alloc = (*stored).clone();
            alloc.desired_status = DesiredStatus::Stop;
            changed.push(alloc);
        }
    }
    if changed.is_empty() {
        return Ok(());
    }
    upsert_allocs(w, changed)
}

/// Deletes allocations; missing ids are skipped. Plugin instances are not changed;
/// the expectations of per-node jobs that counted them are.
pub(crate) fn delete_allocs(w: &mut Writer, ids: &[Id]) -> Result<()> {
    let jobs = any_jobs(w);
    for id in ids {
        let deleted = w.txn.delete(w.t.allocs, &Key::str(id))?;
        if let (true, Some(alloc)) = (jobs, deleted) {
            alloc_changed(w, Some(&alloc), None);
        }
    }
    w.flush_plugins()
}
