//! Publishing committed versions: the newest swapped in for readers, then the watches
//! of each version fired, in order, from its changes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Change;
use crate::database::Shared;
use crate::last_seen::next_uid;
use crate::registry::Registry;
use crate::root::Root;
use crate::schema::{Schema, TableId};
use crate::staged::Staged;

/// What publishing one version fires: its changes, by table.
pub(crate) struct Fire {
    pub(super) restore: bool,
    pub(super) changed_tables: Vec<bool>,
    pub(super) change_tables: Vec<TableId>,
    pub(crate) changes: Vec<Change>,
}

impl Shared {
    /// Publishes the versions `take` takes from the staged queue, in order (each
    /// includes the ones before it; readers end on the last), then fires the watches of
    /// each, in order, under the registry lock. The swaps happen under the staged
    /// queue's lock, so two publishers can never leave readers on an older version.
    /// Returns the superseded versions, for the caller to drop once it has released
    /// the writer lock, and the fire lists.
    pub(crate) fn publish(
        &self,
        take: impl FnOnce(&mut Staged) -> Vec<(Arc<Root>, Fire)>,
    ) -> (Vec<Arc<Root>>, Vec<Fire>) {
        let mut staged = self.staged.lock();
        let versions = take(&mut staged);
        let mut superseded = Vec::with_capacity(versions.len());
        let mut fires = Vec::with_capacity(versions.len());
        let mut newest = None;
        for (root, fire) in versions {
            // Only the newest is swapped in (each includes the ones before it); the
            // others were never visible and go with the superseded.
            superseded.extend(newest.replace(root));
            fires.push(fire);
        }
        if let Some(root) = newest {
            superseded.push(self.current.swap(root));
            // After the swap: a thread that reads this number loads the new version
            // or a newer one (`last_seen.rs`).
            self.current_uid.store(next_uid(), Ordering::Release);
        }
        drop(staged);
        if let Some(root) = superseded.first() {
            let schema = Arc::clone(&root.schema);
            let registry = self.registry.lock();
            for fire in &fires {
                fire_watches(&registry, &schema, fire);
            }
        }
        (superseded, fires)
    }
}

fn fire_watches(registry: &Registry, schema: &Schema, fire: &Fire) {
    if fire.restore {
        registry.fire_all();
        return;
    }
    let mut keys = Vec::new();
    for (table, changed) in fire.changed_tables.iter().enumerate() {
        if *changed && registry.watches_table(table) {
            registry.fire_table(table);
        }
    }
    for (change, &table) in fire.changes.iter().zip(&fire.change_tables) {
        if !registry.watches_table(table) {
            continue;
        }
        let def = &schema.tables[table];
        registry.fire_key(table, 0, &change.key);
        for map in 1..=def.indexes.len() {
            keys.clear();
            for row in change.before.iter().chain(change.after.iter()) {
                def.map_keys(map, row, &mut keys);
            }
            keys.sort_unstable();
            keys.dedup();
            for k in &keys {
                registry.fire_key(table, map, k);
            }
        }
    }
}
