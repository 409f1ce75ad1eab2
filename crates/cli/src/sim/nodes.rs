//! The node side of the simulated cluster: nodes going down and coming back, being
//! drained and returning.

use std::sync::Arc;

use schedstate::model::{Id, Node, NodeStatus};
use schedstate::state::Command;

use super::Cluster;
use crate::catalog::node_id;
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
        self.apply(Command::UpdateNodeEligibility { id, eligible: back })
    }
}
