//! Replacing the whole state with rows read from elsewhere (a snapshot file, a
//! replication snapshot), row by row, published at once.

use std::sync::Arc;

use crate::db::WriteTxn;
use crate::model::{Allocation, CsiPlugin, CsiVolume, Node};

use super::error::Result;
use super::store::StateStore;
use super::tables::{InstanceKind, PluginInstance, Tables, names};

/// A restore in progress: nothing is visible until [`commit`](Self::commit), which
/// replaces the whole state and wakes every watch (the old state is abandoned).
/// Dropping it leaves the store as it was.
pub struct Restore {
    txn: WriteTxn,
    t: Tables,
}

impl StateStore {
    /// Starts replacing the whole state; `last_applied` is the index the restored state
    /// was taken at. Waits for the write in progress, if any.
    pub fn begin_restore(&self, last_applied: u64) -> Restore {
        Restore {
            txn: self.db().begin_restore(last_applied),
            t: self.tables(),
        }
    }
}

impl Restore {
    /// Adds a node row as it was stored.
    ///
    /// # Errors
    /// Only engine errors (none expected for these tables).
    pub fn node(&mut self, node: Node) -> Result<()> {
        self.txn.insert(self.t.nodes, Arc::new(node))?;
        Ok(())
    }

    /// Adds an allocation row as it was stored.
    ///
    /// # Errors
    /// Only engine errors.
    pub fn alloc(&mut self, alloc: Allocation) -> Result<()> {
        self.txn.insert(self.t.allocs, Arc::new(alloc))?;
        Ok(())
    }

    /// Adds a plugin row as it was stored, and rebuilds its derived instance rows.
    ///
    /// # Errors
    /// Only engine errors.
    pub fn plugin(&mut self, plugin: CsiPlugin) -> Result<()> {
        let kinds = [
            (InstanceKind::Controller, &plugin.controllers),
            (InstanceKind::Node, &plugin.nodes),
        ];
        for (kind, map) in kinds {
            for (node_id, info) in map.iter() {
                let row = PluginInstance {
                    node_id: node_id.clone(),
                    kind,
                    plugin_id: plugin.id.clone(),
                    alloc_id: info.alloc_id.clone(),
                };
                self.txn.insert(self.t.instances, Arc::new(row))?;
            }
        }
        self.txn.insert(self.t.plugins, Arc::new(plugin))?;
        Ok(())
    }

    /// Adds a volume row as it was stored.
    ///
    /// # Errors
    /// Only engine errors.
    pub fn volume(&mut self, volume: CsiVolume) -> Result<()> {
        self.txn.insert(self.t.volumes, Arc::new(volume))?;
        Ok(())
    }

    /// Sets the table index of table `name` (see [`names`]); unknown names are
    /// ignored. The derived instance table follows the plugins table.
    pub fn table_index(&mut self, name: &str, index: u64) {
        match name {
            names::NODES => self.txn.set_table_index(self.t.nodes, index),
            names::ALLOCS => self.txn.set_table_index(self.t.allocs, index),
            names::CSI_PLUGINS => {
                self.txn.set_table_index(self.t.plugins, index);
                self.txn.set_table_index(self.t.instances, index);
            }
            names::CSI_VOLUMES => self.txn.set_table_index(self.t.volumes, index),
            _ => {}
        }
    }

    /// Publishes the restored state and wakes every watch.
    ///
    /// # Errors
    /// Only engine errors.
    pub fn commit(self) -> Result<()> {
        self.txn.commit()?;
        Ok(())
    }
}
