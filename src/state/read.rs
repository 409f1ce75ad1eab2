//! Reads of the scheduler state, on a snapshot or inside a write.
//!
//! Every lookup by id is exact; prefix searches are separate calls. A view made from
//! [`StateSnapshot::watched`](super::StateSnapshot::watched) records what each call
//! read, so a blocking query wakes only when that changes.
//!
//! Names follow one scheme: a read named after a row kind (`node`, `csi_plugin`,
//! `csi_volume`) returns the stored row, shared (`Arc<T>`); `…_ref` borrows the same
//! row from the snapshot without counting a reference; `…_denormalized` returns
//! a new value with the fields derived from other tables filled in;
//! `denormalize_…` fills them in for a row already in hand.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::engine::{Key, KeyBuilder, Rows, View};
use crate::model::{Allocation, ClientStatus, CsiPlugin, CsiVolume, DesiredStatus, Job, Node};

use super::table::Table;
use super::tables::{Tables, job_key, volume_key};

/// Typed reads of one version of the state (from a [`StateSnapshot`](super::StateSnapshot)).
#[derive(Clone, Copy)]
pub struct StateView<'a> {
    pub(crate) view: View<'a>,
    pub(crate) t: &'a Tables,
}

impl<'a> StateView<'a> {
    pub(crate) fn new(view: View<'a>, t: &'a Tables) -> Self {
        StateView { view, t }
    }

    /// The engine view underneath (feature `unstable-internals`).
    #[cfg(feature = "unstable-internals")]
    pub fn raw(&self) -> View<'a> {
        self.view
    }

    /// The table handles (feature `unstable-internals`).
    #[cfg(feature = "unstable-internals")]
    pub fn tables(&self) -> Tables {
        *self.t
    }

    /// The node with exactly this id.
    pub fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.view.get(self.t.nodes, &Key::str(id))
    }

    /// The node with exactly this id, borrowed from the snapshot (see
    /// [`alloc_ref`](Self::alloc_ref)).
    pub fn node_ref(&self, id: &str) -> Option<&'a Node> {
        self.view
            .get_value(self.t.nodes, KeyBuilder::new().str(id).as_bytes())
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = Arc<Node>> + 'a {
        self.view.iter(self.t.nodes)
    }

    /// The allocation with exactly this id.
    pub fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.view.get(self.t.allocs, &Key::str(id))
    }

    /// The allocation with exactly this id, borrowed from the snapshot. Unlike
    /// [`alloc`](Self::alloc) no reference count is touched, so the lookup reads
    /// nothing of the row itself: the cheaper call when a field or two is all the
    /// caller wants. The borrow lives as long as the snapshot.
    ///
    /// ```
    /// use schedstate::model::Allocation;
    /// use schedstate::state::{Command, StateStore};
    ///
    /// let store = StateStore::new();
    /// let alloc = Allocation { id: "a1".into(), node_id: "n1".into(), ..Default::default() };
    /// store.apply(1, &Command::UpsertAllocs { allocs: vec![alloc] }).unwrap();
    /// let snap = store.snapshot();
    /// let view = snap.view();
    /// assert_eq!(view.alloc_ref("a1").map(|a| &*a.node_id), Some("n1"));
    /// assert!(view.alloc_ref("a2").is_none());
    /// ```
    pub fn alloc_ref(&self, id: &str) -> Option<&'a Allocation> {
        self.view
            .get_value(self.t.allocs, KeyBuilder::new().str(id).as_bytes())
    }

    /// Every allocation, in id order.
    pub fn allocs(&self) -> impl Iterator<Item = Arc<Allocation>> + 'a {
        self.view.iter(self.t.allocs)
    }

    /// The allocations placed on a node, in alloc id order (`.borrowed()` reads them
    /// without counting references).
    pub fn allocs_by_node(&self, node_id: &str) -> Rows<'a, Allocation> {
        self.view
            .index_eq(self.t.allocs_by_node, &Key::str(node_id))
    }

    /// The allocations of a job, in alloc id order.
    pub fn allocs_by_job(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> impl Iterator<Item = Arc<Allocation>> + 'a {
        self.view
            .index_eq(self.t.allocs_by_job, &job_key(namespace, job_id))
    }

    /// The job with exactly this (namespace, id).
    pub fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>> {
        self.view.get(self.t.jobs, &job_key(namespace, id))
    }

    /// The job with exactly this (namespace, id), borrowed from the snapshot.
    pub fn job_ref(&self, namespace: &str, id: &str) -> Option<&'a Job> {
        self.view
            .get_value(self.t.jobs, job_key(namespace, id).as_bytes())
    }

    /// Every job, in (namespace, id) order.
    pub fn jobs(&self) -> impl Iterator<Item = Arc<Job>> + 'a {
        self.view.iter(self.t.jobs)
    }

    /// The jobs of one namespace, in id order.
    pub fn jobs_in_namespace(&self, namespace: &str) -> impl Iterator<Item = Arc<Job>> + 'a {
        self.view
            .prefix(self.t.jobs, Key::str(namespace).as_bytes())
    }

    /// The plugin with exactly this id, as stored (its `allocations` are empty; see
    /// [`csi_plugin_denormalized`](Self::csi_plugin_denormalized)).
    pub fn csi_plugin(&self, id: &str) -> Option<Arc<CsiPlugin>> {
        self.view.get(self.t.plugins, &Key::str(id))
    }

    /// The plugin with exactly this id as stored, borrowed from the snapshot (see
    /// [`alloc_ref`](Self::alloc_ref)).
    pub fn csi_plugin_ref(&self, id: &str) -> Option<&'a CsiPlugin> {
        self.view
            .get_value(self.t.plugins, KeyBuilder::new().str(id).as_bytes())
    }

    /// The plugin with exactly this id, denormalized: its `allocations` hold the
    /// stubs of the allocations running its instances (see
    /// [`denormalize_csi_plugin`](Self::denormalize_csi_plugin)).
    pub fn csi_plugin_denormalized(&self, id: &str) -> Option<CsiPlugin> {
        let stored = self.csi_plugin(id)?;
        Some(self.denormalize_csi_plugin(&stored))
    }

    /// [`csi_plugin_denormalized`](Self::csi_plugin_denormalized) with the index of
    /// what the answer was built from (see
    /// [`denormalize_csi_plugin_indexed`](Self::denormalize_csi_plugin_indexed)); a
    /// missing plugin answers with the plugins table's
    /// [`delete_index`](Self::delete_index).
    pub fn csi_plugin_denormalized_indexed(&self, id: &str) -> (u64, Option<CsiPlugin>) {
        match self.csi_plugin(id) {
            Some(stored) => {
                let (index, plugin) = self.denormalize_csi_plugin_indexed(&stored);
                (index, Some(plugin))
            }
            None => (self.delete_index(Table::CsiPlugins), None),
        }
    }

    /// Every plugin, in id order.
    pub fn csi_plugins(&self) -> impl Iterator<Item = Arc<CsiPlugin>> + 'a {
        self.view.iter(self.t.plugins)
    }

    /// The plugins whose id starts with `prefix`, in id order.
    pub fn csi_plugins_by_prefix(&self, prefix: &str) -> impl Iterator<Item = Arc<CsiPlugin>> + 'a {
        self.view.prefix(
            self.t.plugins,
            KeyBuilder::new().str_prefix(prefix).as_bytes(),
        )
    }

    /// The volume `(namespace, id)` exactly as stored.
    pub fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<CsiVolume>> {
        self.view.get(self.t.volumes, &volume_key(namespace, id))
    }

    /// The volume `(namespace, id)` as stored, borrowed from the snapshot (see
    /// [`alloc_ref`](Self::alloc_ref)).
    pub fn csi_volume_ref(&self, namespace: &str, id: &str) -> Option<&'a CsiVolume> {
        self.view
            .get_value(self.t.volumes, &volume_key(namespace, id))
    }

    /// The volume `(namespace, id)`, denormalized from its plugin and with its past
    /// claims repaired (see [`denormalize_csi_volume`](Self::denormalize_csi_volume)).
    pub fn csi_volume_denormalized(&self, namespace: &str, id: &str) -> Option<CsiVolume> {
        let stored = self.csi_volume(namespace, id)?;
        Some(self.denormalize_csi_volume(&stored))
    }

    /// [`csi_volume_denormalized`](Self::csi_volume_denormalized) with the index of
    /// what the answer was built from (see
    /// [`denormalize_csi_volume_indexed`](Self::denormalize_csi_volume_indexed)); a
    /// missing volume answers with the volumes table's
    /// [`delete_index`](Self::delete_index).
    pub fn csi_volume_denormalized_indexed(
        &self,
        namespace: &str,
        id: &str,
    ) -> (u64, Option<CsiVolume>) {
        match self.csi_volume(namespace, id) {
            Some(stored) => {
                let (index, volume) = self.denormalize_csi_volume_indexed(&stored);
                (index, Some(volume))
            }
            None => (self.delete_index(Table::CsiVolumes), None),
        }
    }

    /// Every volume of every namespace, in (namespace, id) order, as stored.
    pub fn csi_volumes(&self) -> impl Iterator<Item = Arc<CsiVolume>> + 'a {
        self.view.iter(self.t.volumes)
    }

    /// The volumes of `namespace` whose id starts with `prefix`, in id order.
    pub fn csi_volumes_by_prefix(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> impl Iterator<Item = Arc<CsiVolume>> + 'a {
        let key = KeyBuilder::new().str(namespace).str_prefix(prefix);
        self.view.prefix(self.t.volumes, key.as_bytes())
    }

    /// The volumes of every namespace whose id starts with `prefix`, in (id,
    /// namespace) order.
    pub fn csi_volumes_by_prefix_all(
        &self,
        prefix: &str,
    ) -> impl Iterator<Item = Arc<CsiVolume>> + 'a {
        let key = KeyBuilder::new().str_prefix(prefix);
        self.view.index_prefix(self.t.volumes_by_id, key.as_bytes())
    }

    /// The volumes of `namespace` served by `plugin_id`, in id order.
    pub fn csi_volumes_by_plugin(
        &self,
        namespace: &str,
        plugin_id: &str,
    ) -> impl Iterator<Item = Arc<CsiVolume>> + 'a {
        let key = Key::builder().str(plugin_id).str(namespace).build();
        self.view.index_eq(self.t.volumes_by_plugin, &key)
    }

    /// The volumes requested by the allocations on `node_id` that are desired running
    /// or client running, each once, in (namespace, id) order. A requested volume that
    /// does not exist is skipped (Nomad stops the listing there).
    pub fn csi_volumes_by_node(&self, node_id: &str) -> Vec<Arc<CsiVolume>> {
        let mut wanted = BTreeSet::new();
        for alloc in self.allocs_by_node(node_id) {
            let live = alloc.desired_status == DesiredStatus::Run
                || alloc.client_status == ClientStatus::Running;
            if !live {
                continue;
            }
            for req in &alloc.csi_volume_requests {
                wanted.insert((alloc.namespace.clone(), req.volume_id.clone()));
            }
        }
        wanted
            .into_iter()
            .filter_map(|(ns, id)| self.csi_volume(&ns, &id))
            .collect()
    }

    /// The table index of `table`: the log index of the last write that changed one
    /// of its rows (0 if none has). This is the index blocking queries answer with.
    pub fn table_index(&self, table: Table) -> u64 {
        self.table_index_by_name(table.name())
    }

    /// The delete index of `table`: the log index of the last write that deleted one
    /// of its rows (0 if none has). A read that finds no row answers with it, as
    /// Nomad does: the row's absence began at that delete or earlier, and the row
    /// can only come back at a greater index, so a blocking query on a missing row
    /// wakes when it appears and not on writes to other rows. Not kept in snapshots:
    /// after a restore (a restart, a replica's snapshot) it starts at the table
    /// index, which is never earlier than the last delete.
    pub fn delete_index(&self, table: Table) -> u64 {
        match table {
            Table::Nodes => self.view.delete_index(self.t.nodes),
            Table::Allocs => self.view.delete_index(self.t.allocs),
            Table::CsiPlugins => self.view.delete_index(self.t.plugins),
            Table::CsiVolumes => self.view.delete_index(self.t.volumes),
            Table::AclTokens => self.view.delete_index(self.t.acl_tokens),
            Table::Jobs => self.view.delete_index(self.t.jobs),
        }
    }

    /// The table index of a table by engine name, derived tables included.
    pub(crate) fn table_index_by_name(&self, name: &str) -> u64 {
        self.view.table_index_by_name(name).unwrap_or(0)
    }

    /// How many rows `table` holds. O(1).
    pub fn row_count(&self, table: Table) -> usize {
        match table {
            Table::Nodes => self.view.len(self.t.nodes),
            Table::Allocs => self.view.len(self.t.allocs),
            Table::CsiPlugins => self.view.len(self.t.plugins),
            Table::CsiVolumes => self.view.len(self.t.volumes),
            Table::AclTokens => self.view.len(self.t.acl_tokens),
            Table::Jobs => self.view.len(self.t.jobs),
        }
    }

    /// The largest table index of the scheduler's tables.
    pub fn latest_index(&self) -> u64 {
        Table::ALL
            .iter()
            .map(|t| self.table_index(*t))
            .max()
            .unwrap_or(0)
    }

    /// The index of the last accepted write (moved even by writes that changed
    /// nothing); the next write must be greater.
    pub fn last_applied(&self) -> u64 {
        self.view.last_applied()
    }
}
