//! The node side of the simulated cluster: nodes going down and coming back, being
//! drained and returning. A drain moves the plugins' system-job allocations off the
//! node (as Nomad's drain does at its end) and they are placed again when it returns;
//! the node is ineligible meanwhile, so those jobs expect one instance less.

use std::sync::Arc;

use schedstate::model::{Id, Node, NodeStatus};
use schedstate::state::Command;

use super::{Cluster, alloc, stopped};
use crate::catalog::{Kind, NAMESPACE, PLUGINS, job_id, node_id, node_index, plugin_job, runs};
use crate::output::CliError;

impl<B: super::Backend> Cluster<B> {
    /// A node to change: one that is `away` (down, drained) comes back, or one that
    /// is not goes away, keeping about a tenth of the nodes away at most.
    fn pick_node(&mut self, away: impl Fn(&Node) -> bool) -> Option<(Id, bool)> {
        let snap = self.db.snapshot();
        let (gone, here): (Vec<Arc<Node>>, Vec<Arc<Node>>) = (0..self.nodes)
            .filter_map(|i| snap.view().node(&node_id(i)))
            .partition(|n| away(n));
        let back = !gone.is_empty() && (self.rng.chance(60) || gone.len() * 10 >= self.nodes);
        let list = if back { &gone } else { &here };
        if list.is_empty() {
            return None;
        }
        Some((self.rng.pick(list).id.clone(), back))
    }

    /// A node goes down, or a down node comes back.
    pub(super) fn node_status(&mut self) -> Result<(), CliError> {
        let Some((id, back)) = self.pick_node(|n| n.status != NodeStatus::Ready) else {
            return Ok(());
        };
        let status = if back {
            NodeStatus::Ready
        } else {
            NodeStatus::Down
        };
        self.stats.node_changes += 1;
        self.apply(Command::UpdateNodeStatus { id, status })
    }

    /// A node is drained (and made ineligible), or a drained one returns.
    pub(super) fn drain(&mut self) -> Result<(), CliError> {
        let Some((id, back)) = self.pick_node(|n| n.drain) else {
            return Ok(());
        };
        self.stats.node_changes += 1;
        self.apply(Command::UpdateNodeDrain {
            id: id.clone(),
            drain: !back,
        })?;
        self.apply(Command::UpdateNodeEligibility {
            id: id.clone(),
            eligible: back,
        })?;
        match node_index(&id) {
            Some(i) => self.place_system_allocs(i, back),
            None => Ok(()),
        }
    }

    /// The node instances node `i` runs for system jobs: stopped when it drains
    /// (`back` false), placed again when it returns; the node reports the change.
    fn place_system_allocs(&mut self, i: usize, back: bool) -> Result<(), CliError> {
        let system: Vec<usize> = (0..PLUGINS.len())
            .filter(|&p| {
                self.plugin_running(p)
                    && runs(p, Kind::Node, i)
                    && plugin_job(p, Kind::Node, self.nodes).is_some_and(|j| j.job_type.per_node())
            })
            .collect();
        let snap = self.db.snapshot();
        let mut allocs = Vec::new();
        for p in system {
            let slot = (p, Kind::Node, i);
            if back && !self.allocs.contains_key(&slot) {
                let id = Id::from(self.rng.uuid());
                let job = job_id(p, Kind::Node);
                let mut a = alloc(&id, NAMESPACE, &job, Kind::Node.group(), &node_id(i));
                a.job_version = self.job_version(&job);
                allocs.push(a);
                self.allocs.insert(slot, id);
            } else if !back && let Some(id) = self.allocs.remove(&slot) {
                self.unhealthy.remove(&slot);
                if let Some(a) = snap.view().alloc(&id).filter(|a| !a.terminal()) {
                    allocs.push(stopped(&a));
                }
            }
        }
        if allocs.is_empty() {
            return Ok(());
        }
        // New allocations run before the node reports their instances; stopped ones
        // take theirs with them.
        self.apply(Command::UpsertAllocs { allocs })?;
        let node = self.node_row(i);
        self.apply(Command::UpsertNode { node })
    }
}
