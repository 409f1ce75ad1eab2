//! The context of one command being applied: its transaction, its index, and the
//! plugin rows it is editing.
//!
//! Plugin rows are edited in place in a working copy (their instance maps are
//! persistent, so the copy is O(1)) and written once, at the end of the command:
//! deleted if the command emptied them, stored with `modify_index` = this index if the
//! command changed them, left alone otherwise. That is what keeps an empty plugin from
//! ever being stored, and a plugin that did not change from being rewritten.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::engine::{Key, WriteTxn};
use crate::model::{CsiInfo, CsiPlugin, Expected, Id};

use super::StateView;
use super::error::Result;
use super::tables::{InstanceKind, PluginInstance, Tables};

/// A plugin being edited by the current command.
struct PluginEdit {
    plugin: CsiPlugin,
    /// The stored row the edit started from (`None`: created by this command).
    original: Option<Arc<CsiPlugin>>,
    /// The instance entries this command wrote or removed.
    touched: Vec<(InstanceKind, Id)>,
    /// Created by this command for a job's expectation, and not yet reached by a
    /// fingerprint: to the command's own rules it does not exist yet (an unhealthy
    /// report leaves it alone, as it would leave a missing plugin), since expectations
    /// are settled after a command's rules, not before.
    expectation_only: bool,
}

impl PluginEdit {
    /// Whether the edited plugin differs from the stored one. Compares only what the
    /// command touched, so a value changed and changed back within one command (a
    /// both-halves fingerprint recorded then swept, per-kind versions during a rolling
    /// upgrade) is not rewritten and wakes nobody.
    fn changed(&self) -> bool {
        let Some(original) = &self.original else {
            return true;
        };
        let (p, o) = (&self.plugin, &**original);
        if p.provider != o.provider
            || p.version != o.version
            || p.controller_required != o.controller_required
            || p.jobs != o.jobs
        {
            return true;
        }
        self.touched.iter().any(|(kind, node)| {
            let (now, before) = match kind {
                InstanceKind::Controller => (p.controllers.get(node), o.controllers.get(node)),
                InstanceKind::Node => (p.nodes.get(node), o.nodes.get(node)),
            };
            match (now, before) {
                (None, None) => false,
                (Some(a), Some(b)) => !(Arc::ptr_eq(a, b) || **a == **b),
                _ => true,
            }
        })
    }
}

/// The command in progress.
pub(crate) struct Writer {
    pub(crate) txn: WriteTxn,
    pub(crate) t: Tables,
    pub(crate) index: u64,
    plugins: BTreeMap<Id, PluginEdit>,
    /// The instance rows as they were before this command first wrote them, by key.
    instance_originals: BTreeMap<Key, Option<Arc<PluginInstance>>>,
    /// Instance rows written (`None`: deleted) and not yet in the transaction: they go
    /// in together when the command flushes (`WriteTxn::insert_many`, one walk down
    /// each map of the table instead of one per row). Reads of instances see them.
    pending_instances: BTreeMap<Key, Option<Arc<PluginInstance>>>,
}

impl Writer {
    pub(crate) fn new(txn: WriteTxn, t: Tables) -> Writer {
        let index = txn.index();
        Writer {
            txn,
            t,
            index,
            plugins: BTreeMap::new(),
            instance_originals: BTreeMap::new(),
            pending_instances: BTreeMap::new(),
        }
    }

    /// Ends the command: the transaction, to go on with (plugin edits must have been
    /// flushed; every command does so at its end).
    pub(crate) fn into_txn(self) -> WriteTxn {
        debug_assert!(
            self.pending_instances.is_empty(),
            "a command ended without flushing"
        );
        self.txn
    }

    /// Reads of the transaction's state so far. Plugin edits not yet flushed are not
    /// visible here; read plugins through [`plugin`](Self::plugin).
    pub(crate) fn view(&self) -> StateView<'_> {
        StateView::new(self.txn.view(), &self.t)
    }

    /// The plugin as this command currently sees it.
    pub(crate) fn plugin(&self, id: &str) -> Option<CsiPlugin> {
        match self.plugins.get(id) {
            Some(edit) if edit.plugin.is_empty() => None,
            Some(edit) => Some(edit.plugin.clone()),
            None => self.view().csi_plugin(id).map(|p| (*p).clone()),
        }
    }

    /// The vendor name and version of plugin `id` as this command currently sees it
    /// (for fingerprints to share; see `shared_ids`).
    pub(crate) fn plugin_provider(&self, id: &str) -> Option<(&Id, &Id)> {
        match self.plugins.get(id) {
            Some(edit) => Some((&edit.plugin.provider, &edit.plugin.version)),
            None => self
                .txn
                .view()
                .get_value(self.t.plugins, &Key::str(id))
                .map(|p| (&p.provider, &p.version)),
        }
    }

    /// Starts (or continues) editing plugin `id`; creates it if `create` and absent.
    fn edit(&mut self, id: &Id, create: bool) -> Option<&mut PluginEdit> {
        if !self.plugins.contains_key(id) {
            let stored = self.txn.view().get(self.t.plugins, &Key::str(id));
            let edit = match stored {
                Some(p) => PluginEdit {
                    plugin: (*p).clone(),
                    original: Some(p),
                    touched: Vec::new(),
                    expectation_only: false,
                },
                None if create => PluginEdit {
                    plugin: CsiPlugin::new(id.clone(), self.index),
                    original: None,
                    touched: Vec::new(),
                    expectation_only: false,
                },
                None => return None,
            };
            self.plugins.insert(id.clone(), edit);
        }
        self.plugins.get_mut(id)
    }

    /// Applies one fingerprint of node `node_id`, filed in the map of `kind`, as the
    /// instance of that kind (docs/rules.md, upsert node). A monolith's fingerprint is
    /// filed in both maps and applied once per map.
    pub(crate) fn apply_fingerprint(
        &mut self,
        node_id: &Id,
        kind: InstanceKind,
        info: &Arc<CsiInfo>,
    ) -> Result<()> {
        let Some(edit) = self.edit(&info.plugin_id, info.healthy) else {
            // An unhealthy report never creates a plugin.
            return Ok(());
        };
        if edit.expectation_only {
            if !info.healthy {
                return Ok(());
            }
            edit.expectation_only = false;
        }
        let p = &mut edit.plugin;
        if p.provider != info.provider || p.version != info.provider_version {
            p.provider.clone_from(&info.provider);
            p.version.clone_from(&info.provider_version);
        }
        if kind == InstanceKind::Controller {
            p.controller_required = info.requires_controller_plugin;
        }
        // An unhealthy report updates an instance but never adds one.
        self.set_entry(kind, node_id, info, !info.healthy)
    }

    /// Records `info` as the `kind` instance of its plugin on `node_id` (the plugin
    /// must be under edit), keeping the instance row in step; with `only_if_present`,
    /// only if the plugin has that instance already.
    fn set_entry(
        &mut self,
        kind: InstanceKind,
        node_id: &Id,
        info: &Arc<CsiInfo>,
        only_if_present: bool,
    ) -> Result<()> {
        let Some(edit) = self.plugins.get_mut(&info.plugin_id) else {
            return Ok(());
        };
        let map = match kind {
            InstanceKind::Controller => &mut edit.plugin.controllers,
            InstanceKind::Node => &mut edit.plugin.nodes,
        };
        // One search for both questions (is it there, is it the same), not two.
        let old = map.get(node_id);
        if old.is_none() && only_if_present {
            return Ok(());
        }
        // The same copy when the node row kept its stored fingerprint (`shared_ids.rs`).
        if old.is_some_and(|o| Arc::ptr_eq(o, info) || **o == **info) {
            // Same report (update time aside): nothing to change, nobody to wake.
            return Ok(());
        }
        let alloc_changed = old.is_none_or(|o| o.alloc_id != info.alloc_id);
        map.insert(node_id.clone(), Arc::clone(info));
        edit.touched.push((kind, node_id.clone()));
        if alloc_changed {
            let row = PluginInstance {
                node_id: node_id.clone(),
                kind,
                plugin_id: info.plugin_id.clone(),
                alloc_id: info.alloc_id.clone(),
            };
            self.put_instance(
                PluginInstance::key(node_id, kind, &info.plugin_id),
                Some(row),
            )?;
        }
        Ok(())
    }

    /// Writes (or with `None` deletes) the instance row at `key`. A row set back to what
    /// it was before this command (two fingerprints of one plugin on one node, applied
    /// in turn) is restored as the stored row itself, so the commit sees no change.
    fn put_instance(&mut self, key: Key, row: Option<PluginInstance>) -> Result<()> {
        let original = match self.instance_originals.get(&key) {
            Some(original) => original.clone(),
            None => {
                let stored = self.txn.view().get(self.t.instances, &key);
                self.instance_originals.insert(key.clone(), stored.clone());
                stored
            }
        };
        let row = row.map(|row| match original {
            Some(o) if *o == row => o,
            _ => Arc::new(row),
        });
        self.pending_instances.insert(key, row);
        Ok(())
    }

    /// Puts the pending instance writes in the transaction.
    fn flush_instances(&mut self) -> Result<()> {
        let mut rows = Vec::new();
        for (key, row) in std::mem::take(&mut self.pending_instances) {
            match row {
                Some(row) => rows.push(row),
                None => {
                    self.txn.delete(self.t.instances, &key)?;
                }
            }
        }
        self.txn.insert_many(self.t.instances, rows)?;
        Ok(())
    }

    /// Removes the `kind` instance of `plugin_id` on `node_id`, if any. A plugin that no
    /// longer exists is skipped; the instance row goes either way.
    pub(crate) fn remove_entry(
        &mut self,
        kind: InstanceKind,
        plugin_id: &Id,
        node_id: &Id,
    ) -> Result<()> {
        self.put_instance(PluginInstance::key(node_id, kind, plugin_id), None)?;
        let Some(edit) = self.edit(plugin_id, false) else {
            return Ok(());
        };
        let map = match kind {
            InstanceKind::Controller => &mut edit.plugin.controllers,
            InstanceKind::Node => &mut edit.plugin.nodes,
        };
        if map.remove(node_id).is_some() {
            edit.touched.push((kind, node_id.clone()));
        }
        Ok(())
    }

    /// The instance rows on `node_id`.
    pub(crate) fn instances_on_node(&self, node_id: &str) -> Vec<Arc<PluginInstance>> {
        let prefix = Key::str(node_id);
        let view = self.txn.view();
        let stored = view.prefix(self.t.instances, prefix.as_bytes());
        let mut pending = self
            .pending_instances
            .range::<[u8], _>((Bound::Included(prefix.as_bytes()), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix.as_bytes()))
            .peekable();
        if pending.peek().is_none() {
            return stored.collect();
        }
        // The stored rows with this command's pending writes over them, in key order.
        let mut rows: BTreeMap<Key, Arc<PluginInstance>> = stored
            .map(|row| {
                (
                    PluginInstance::key(&row.node_id, row.kind, &row.plugin_id),
                    row,
                )
            })
            .collect();
        for (key, row) in pending {
            match row {
                Some(row) => rows.insert(key.clone(), Arc::clone(row)),
                None => rows.remove(key),
            };
        }
        rows.into_values().collect()
    }

    /// The instance rows naming `alloc_id`.
    pub(crate) fn instances_of_alloc(
        &mut self,
        alloc_id: &str,
    ) -> Result<Vec<Arc<PluginInstance>>> {
        if alloc_id.is_empty() {
            return Ok(Vec::new());
        }
        // Read through the index: the pending writes go in first.
        if !self.pending_instances.is_empty() {
            self.flush_instances()?;
        }
        Ok(self
            .txn
            .view()
            .index_eq(self.t.instances_by_alloc, &Key::str(alloc_id))
            .collect())
    }

    /// What job (`namespace`, `job_id`) expects of plugin `plugin_id` as this command
    /// currently sees it (zero if the plugin does not exist).
    pub(crate) fn job_expectation(
        &self,
        plugin_id: &str,
        namespace: &str,
        job_id: &str,
    ) -> Expected {
        match self.plugins.get(plugin_id) {
            Some(edit) => edit.plugin.job_expectation(namespace, job_id),
            None => self
                .txn
                .view()
                .get_value(self.t.plugins, Key::str(plugin_id).as_bytes())
                .map_or(Expected::default(), |p| {
                    p.job_expectation(namespace, job_id)
                }),
        }
    }

    /// Sets what a job expects of a plugin, creating the plugin (no provider, no
    /// instances) if it is missing and the expectation is not zero. Zero on a missing
    /// plugin is nothing to do (purging a job whose plugin is gone is not an error).
    pub(crate) fn set_job_expectation(
        &mut self,
        plugin_id: &Id,
        namespace: &Id,
        job_id: &Id,
        expected: Expected,
    ) {
        let created = !self.plugins.contains_key(&**plugin_id);
        if let Some(edit) = self.edit(plugin_id, !expected.is_zero()) {
            if created && edit.original.is_none() {
                edit.expectation_only = true;
            }
            edit.plugin.set_job_expectation(namespace, job_id, expected);
        }
    }

    /// Writes every plugin the command changed: deleted if empty, stored otherwise.
    pub(crate) fn flush_plugins(&mut self) -> Result<()> {
        self.flush_instances()?;
        let edits = std::mem::take(&mut self.plugins);
        for (id, edit) in edits {
            if edit.plugin.is_empty() {
                if edit.original.is_some() {
                    self.txn.delete(self.t.plugins, &Key::str(&id))?;
                }
                continue;
            }
            if !edit.changed() {
                continue;
            }
            let mut plugin = edit.plugin;
            plugin.modify_index = self.index;
            self.txn.insert(self.t.plugins, Arc::new(plugin))?;
        }
        Ok(())
    }
}
