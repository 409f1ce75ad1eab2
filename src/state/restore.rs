//! Replacing the whole state with rows read from elsewhere (a snapshot file, a
//! replication snapshot): gathered, built into the tables in bulk, checked,
//! published at once; or with another store's state, shared as it is. Crate-internal:
//! the public door is `StateStore::restore_from`, which reads the snapshot format.

use std::sync::Arc;

use crate::engine::BulkLoad;
use crate::model::{AclToken, Allocation, CsiPlugin, CsiVolume, Job, Node};

use super::error::Result;
use super::read::StateView;
use super::shared_ids::AllocIds;
use super::snapshot::StateSnapshot;
use super::store::StateStore;
use super::table::Table;
use super::tables::{AclSaltRow, InstanceKind, PluginInstance, Tables};

/// A restore in progress: nothing is visible until [`commit`](Self::commit), which
/// checks every invariant of the new state, then replaces the whole state and wakes
/// every watch (the old state is abandoned). Dropping it, or a failed check, leaves the
/// store as it was.
pub(crate) struct Restore {
    /// Rows gathered; every map is built at once when the restore commits.
    txn: BulkLoad,
    t: Tables,
    /// Namespaces, jobs, task groups and node ids seen so far: decoded rows share
    /// them, as applied ones do (`shared_ids.rs`), so a state restored from a
    /// snapshot takes no more heap than the one it was taken from.
    ids: AllocIds,
    /// With `Some(at)`, every index of the restored state is `at`
    /// ([`StateStore::restore_from_at`]).
    at: Option<u64>,
}

impl StateStore {
    /// Starts replacing the whole state; `last_applied` is the index the restored state
    /// was taken at. Waits for the write in progress, if any. With `Some(at)`, the
    /// restored state gets the indexes of one write at `at` instead of those it was taken with: its
    /// last applied index, every table's index and delete index (but the ACL tokens
    /// table's 0, which says the state was never bootstrapped), and every row's.
    pub(crate) fn begin_restore_at(&self, last_applied: u64, at: Option<u64>) -> Restore {
        let mut txn = self.db().begin_bulk_restore(at.unwrap_or(last_applied));
        let t = self.tables();
        if let Some(at) = at {
            txn.set_table_index(t.nodes, at);
            txn.set_table_index(t.allocs, at);
            txn.set_table_index(t.plugins, at);
            txn.set_table_index(t.instances, at);
            txn.set_table_index(t.volumes, at);
            txn.set_table_index(t.jobs, at);
        }
        Restore {
            txn,
            t,
            ids: Default::default(),
            at,
        }
    }
}

impl StateStore {
    /// Replaces the whole state with `from`, a version of another store (which
    /// held every invariant, as every store's versions do), sharing its rows
    /// instead of copying them: O(tables). Every watch fires. How a server installs
    /// a snapshot it has just restored and checked in a scratch store, without
    /// decoding it a second time.
    ///
    /// # Errors
    /// An engine error if the two stores differ in layout (never for stores of one
    /// build); the store is unchanged.
    pub fn restore_state_of(&self, from: &StateSnapshot) -> Result<()> {
        self.db().begin_restore_from(&from.snap)?.commit()?;
        Ok(())
    }
}

impl Restore {
    /// Adds a node row as it was stored.
    ///
    /// # Errors
    /// Only engine errors (none expected for these tables).
    pub(crate) fn node(&mut self, mut node: Node) -> Result<()> {
        if let Some(at) = self.at {
            (node.create_index, node.modify_index) = (at, at);
        }
        self.ids.share_node_id(&mut node.id);
        self.txn.insert(self.t.nodes, Arc::new(node))?;
        Ok(())
    }

    /// Adds an allocation row as it was stored.
    ///
    /// # Errors
    /// Only engine errors.
    pub(crate) fn alloc(&mut self, mut alloc: Allocation) -> Result<()> {
        if let Some(at) = self.at {
            (alloc.create_index, alloc.modify_index) = (at, at);
        }
        self.ids.share(&mut alloc, |_, _| None, |_| None);
        self.txn.insert(self.t.allocs, Arc::new(alloc))?;
        Ok(())
    }

    /// Adds a plugin row as it was stored, and rebuilds its derived instance rows.
    ///
    /// # Errors
    /// Only engine errors.
    pub(crate) fn plugin(&mut self, mut plugin: CsiPlugin) -> Result<()> {
        if let Some(at) = self.at {
            (plugin.create_index, plugin.modify_index) = (at, at);
        }
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
    pub(crate) fn volume(&mut self, mut volume: CsiVolume) -> Result<()> {
        if let Some(at) = self.at {
            (volume.create_index, volume.modify_index) = (at, at);
        }
        self.txn.insert(self.t.volumes, Arc::new(volume))?;
        Ok(())
    }

    /// Adds an ACL token row as it was stored.
    ///
    /// # Errors
    /// An engine error (a secret hash used twice is found at [`commit`](Self::commit),
    /// where the unique index is built).
    pub(crate) fn acl_token(&mut self, mut token: AclToken) -> Result<()> {
        if let Some(at) = self.at {
            (token.create_index, token.modify_index) = (at, at);
        }
        self.txn.insert(self.t.acl_tokens, Arc::new(token))?;
        Ok(())
    }

    /// Adds a job row as it was stored.
    ///
    /// # Errors
    /// An engine error.
    pub(crate) fn job(&mut self, mut job: Job) -> Result<()> {
        if let Some(at) = self.at {
            (job.create_index, job.job_modify_index, job.modify_index) = (at, at, at);
        }
        self.txn.insert(self.t.jobs, Arc::new(job))?;
        Ok(())
    }

    /// Adds the ACL salt row as it was stored (its table's index is the row's).
    ///
    /// # Errors
    /// An engine error.
    pub(crate) fn acl_salt(&mut self, mut row: AclSaltRow) -> Result<()> {
        if let Some(at) = self.at {
            row.create_index = at;
        }
        self.txn.set_table_index(self.t.acl_salt, row.create_index);
        self.txn.insert(self.t.acl_salt, Arc::new(row))?;
        Ok(())
    }

    /// Sets the table index of `table`. The derived instance table follows the
    /// plugins table.
    pub(crate) fn table_index(&mut self, table: Table, index: u64) {
        // Rebased: every table is at `at` already, but a tokens table listed at 0
        // (never bootstrapped) stays so.
        let index = match self.at {
            Some(at) if index > 0 || table != Table::AclTokens => at,
            _ => index,
        };
        match table {
            Table::Nodes => self.txn.set_table_index(self.t.nodes, index),
            Table::Allocs => self.txn.set_table_index(self.t.allocs, index),
            Table::CsiPlugins => {
                self.txn.set_table_index(self.t.plugins, index);
                self.txn.set_table_index(self.t.instances, index);
            }
            Table::CsiVolumes => self.txn.set_table_index(self.t.volumes, index),
            Table::AclTokens => self.txn.set_table_index(self.t.acl_tokens, index),
            Table::Jobs => self.txn.set_table_index(self.t.jobs, index),
        }
    }

    /// Checks every invariant of the restored state (checksums say the bytes are
    /// what was written, not that what was written makes sense), then publishes it
    /// and wakes every watch.
    ///
    /// # Errors
    /// An engine error if two rows share a unique index key (two tokens with one
    /// secret);
    /// [`StateError::BrokenInvariant`](super::StateError::BrokenInvariant) naming the
    /// first invariant broken; the store is unchanged.
    pub(crate) fn commit(self) -> Result<()> {
        let txn = self.txn.finish()?;
        // The indexes were built from these rows just now; the rows are checked.
        StateView::new(txn.view(), &self.t).check_rows()?;
        txn.commit()?;
        Ok(())
    }
}
