//! Client nodes and their status.

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::{CsiInfo, Fingerprints, Id};

/// The lifecycle status of a client node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    /// The node registered but is not yet ready for work.
    Initializing,
    /// The node is up and can run work.
    Ready,
    /// The node is down.
    Down,
    /// The node lost contact with the servers but may come back.
    Disconnected,
}

/// A client node: a machine that runs allocations and CSI plugin instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// The node's id (the key of the nodes table).
    pub id: Id,
    /// The node's human-readable name.
    pub name: String,
    /// The node's lifecycle status.
    pub status: NodeStatus,
    /// Whether the node is being drained of work.
    pub drain: bool,
    /// Whether the scheduler may place new work on the node.
    pub eligible: bool,
    /// Fingerprints of the CSI controller plugin instances the node runs, by plugin id.
    #[serde(default)]
    pub csi_controller_plugins: Fingerprints,
    /// Fingerprints of the CSI node plugin instances the node runs, by plugin id.
    #[serde(default)]
    pub csi_node_plugins: Fingerprints,
    /// The index of the write that created the row.
    pub create_index: u64,
    /// The index of the last write that changed the row.
    pub modify_index: u64,
}

impl Node {
    /// A ready, eligible, undrained node with no plugins and zero indexes.
    pub fn new(id: impl Into<Id>, name: impl Into<String>) -> Self {
        Node {
            id: id.into(),
            name: name.into(),
            status: NodeStatus::Ready,
            drain: false,
            eligible: true,
            csi_controller_plugins: Fingerprints::new(),
            csi_node_plugins: Fingerprints::new(),
            create_index: 0,
            modify_index: 0,
        }
    }

    /// Files a CSI plugin fingerprint where its halves say: in
    /// `csi_controller_plugins` if it has a controller half, in `csi_node_plugins` if
    /// it has a node half (both for a monolith), under its plugin id, replacing what
    /// was there. A fingerprint with neither half is filed nowhere. Returns the node,
    /// for chaining.
    ///
    /// ```
    /// use schedstate::model::{CsiInfo, CsiNodeInfo, Node};
    ///
    /// let mut node = Node::new("node-1", "client-1");
    /// node.add_csi_plugin(CsiInfo::node_instance("nfs", "alloc-1", CsiNodeInfo::default()));
    /// assert!(node.csi_node_plugins.contains_key("nfs"));
    /// assert!(node.csi_controller_plugins.is_empty());
    /// ```
    pub fn add_csi_plugin(&mut self, info: CsiInfo) -> &mut Self {
        let info = Arc::new(info);
        if info.is_controller() {
            self.csi_controller_plugins
                .insert(info.plugin_id.clone(), Arc::clone(&info));
        }
        if info.is_node() {
            self.csi_node_plugins
                .insert(info.plugin_id.clone(), Arc::clone(&info));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_node_is_ready_and_empty() {
        let n = Node::new("n1", "alpha");
        assert_eq!(&*n.id, "n1");
        assert_eq!(n.name, "alpha");
        assert_eq!(n.status, NodeStatus::Ready);
        assert!(!n.drain);
        assert!(n.eligible);
        assert!(n.csi_controller_plugins.is_empty());
        assert!(n.csi_node_plugins.is_empty());
        assert_eq!((n.create_index, n.modify_index), (0, 0));
    }

    #[test]
    fn equality_sees_plugins() {
        let a = Node::new("n1", "alpha");
        let mut b = a.clone();
        assert_eq!(a, b);
        b.csi_node_plugins
            .insert(super::super::id("p"), Arc::new(CsiInfo::default()));
        assert_ne!(a, b);
    }
}
