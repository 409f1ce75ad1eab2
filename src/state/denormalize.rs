//! Denormalization: filling the derived fields of a plugin or volume on a new value.
//! Never written back; calling it twice gives the same result.
//!
//! The `…_indexed` forms also say the index of what the answer was built from: the
//! largest modify index of the rows read, and for each row looked up and not found,
//! the delete index of its table. Whatever changes the answer is a write at some
//! index W that leaves one of those at W or later (the row read changed: its modify
//! index is W; it went away: its table's delete index is at least W; another row is
//! read now: the row naming it changed), so the answer's index moves past every
//! earlier one whenever the answer changes — and a write to rows it did not read
//! leaves it alone.

use std::cmp::Reverse;

use crate::engine::{KeyBuilder, prefetch};
use crate::model::{
    AllocListStub, CsiInfo, CsiPlugin, CsiVolume, CsiVolumeClaim, CsiVolumeClaimMode,
    CsiVolumeClaimState,
};

use super::{StateView, Table};

impl StateView<'_> {
    /// A copy of `plugin` whose `allocations` holds the stubs of the distinct alloc ids
    /// of its controller and node instances, newest (by modify index) first. Missing
    /// allocs and empty alloc ids are skipped.
    pub fn denormalize_csi_plugin(&self, plugin: &CsiPlugin) -> CsiPlugin {
        self.denormalize_csi_plugin_indexed(plugin).1
    }

    /// [`denormalize_csi_plugin`](Self::denormalize_csi_plugin) with the index of what
    /// it read (the module's rule): the plugin's modify index, its allocations'
    /// modify indexes and, if one of them is gone, the allocs table's delete index.
    pub fn denormalize_csi_plugin_indexed(&self, plugin: &CsiPlugin) -> (u64, CsiPlugin) {
        // The alloc ids sorted and deduplicated: lookups in key order walk the allocs
        // table from left to right, each sharing most of its path with the one before.
        // Encoded string keys sort as the strings do (`Key`'s encoding preserves
        // order), so the ids are sorted as borrowed strings. Sorted by their first
        // eight bytes as an integer, then by the whole id: the same order, but ids
        // (UUIDs) almost never share eight bytes, so the sort compares integers, not
        // strings.
        //
        // Each instance and each id string is a separate allocation, scattered over
        // the heap: the instances are gathered first (reading only the maps' nodes),
        // then each instance's id and each id's first bytes are read with the ones a
        // few places ahead already asked for (`prefetch`), so their cache misses
        // overlap instead of following one another.
        const AHEAD: usize = 8;
        let infos: Vec<&CsiInfo> = plugin
            .controllers
            .iter()
            .chain(plugin.nodes.iter())
            .map(|(_, info)| &**info)
            .collect();
        infos.iter().take(AHEAD).for_each(|i| prefetch(*i));
        let mut strs: Vec<&str> = Vec::with_capacity(infos.len());
        for (i, info) in infos.iter().enumerate() {
            if let Some(later) = infos.get(i + AHEAD) {
                prefetch(*later);
            }
            if !info.alloc_id.is_empty() {
                strs.push(&info.alloc_id);
            }
        }
        strs.iter().take(AHEAD).for_each(|s| prefetch(s.as_ptr()));
        let mut ids: Vec<(u64, &str)> = Vec::with_capacity(strs.len());
        for (i, id) in strs.iter().enumerate() {
            if let Some(later) = strs.get(i + AHEAD) {
                prefetch(later.as_ptr());
            }
            ids.push((leading_u64(id), id));
        }
        ids.sort_unstable();
        ids.dedup_by(|a, b| a.1 == b.1);
        let mut index = plugin.modify_index;
        let mut stubs: Vec<AllocListStub> = Vec::with_capacity(ids.len());
        // Looked up together (`View::get_many`): thousands of scattered rows, whose
        // cache misses overlap instead of following one another.
        let keys: Vec<KeyBuilder> = ids
            .iter()
            .map(|(_, id)| KeyBuilder::new().str(id))
            .collect();
        let mut missing = false;
        self.view
            .get_many(self.t.allocs, &keys, |_, row| match row {
                Some(a) => stubs.push(AllocListStub::new(a)),
                None => missing = true,
            });
        if missing {
            index = index.max(self.delete_index(Table::Allocs));
        }
        // Newest first; the sort is stable, so ties stay in id order (deterministic).
        stubs.sort_by_key(|s| Reverse(s.modify_index));
        if let Some(newest) = stubs.first() {
            index = index.max(newest.modify_index);
        }
        let mut out = plugin.clone();
        out.allocations = stubs;
        (index, out)
    }

    /// A copy of `volume` with its plugin's provider, version, controller requirement,
    /// health counts and schedulability filled in, and its past claims repaired
    /// (docs/rules.md §5).
    pub fn denormalize_csi_volume(&self, volume: &CsiVolume) -> CsiVolume {
        self.denormalize_csi_volume_indexed(volume).1
    }

    /// [`denormalize_csi_volume`](Self::denormalize_csi_volume) with the index of
    /// what it read (the module's rule): the volume's modify index, its plugin's (or,
    /// without one, the plugins table's delete index), and those of the claiming
    /// allocations it looked at (or the allocs table's delete index for one gone).
    pub fn denormalize_csi_volume_indexed(&self, volume: &CsiVolume) -> (u64, CsiVolume) {
        let mut v = volume.clone();
        let mut index = volume.modify_index;
        match self.csi_plugin(&v.plugin_id) {
            Some(p) => {
                index = index.max(p.modify_index);
                v.provider.clone_from(&p.provider);
                v.provider_version.clone_from(&p.version);
                v.controller_required = p.controller_required;
                v.controllers_healthy = p.controllers_healthy();
                v.controllers_expected = p.controllers_expected();
                v.nodes_healthy = p.nodes_healthy();
                v.nodes_expected = p.nodes_expected();
                v.schedulable =
                    v.nodes_healthy > 0 && (!v.controller_required || v.controllers_healthy > 0);
            }
            None => {
                index = index.max(self.delete_index(Table::CsiPlugins));
                // Stored provider and controller requirement are kept: a volume whose
                // plugin vanished must not claim it needs no controller.
                v.clear_denormalized();
            }
        }
        index = index.max(self.repair_past_claims(&mut v));
        (index, v)
    }

    /// Adds an unpublishing past claim for every claiming alloc that is gone or
    /// client-terminal and has none yet; returns the index of the allocations it
    /// looked at (0 if none).
    fn repair_past_claims(&self, v: &mut CsiVolume) -> u64 {
        let mut index = 0;
        let sides = [
            (CsiVolumeClaimMode::Read, &v.read_allocs, &v.read_claims),
            (CsiVolumeClaimMode::Write, &v.write_allocs, &v.write_claims),
        ];
        let mut repaired = Vec::new();
        for (mode, allocs, claims) in sides {
            for alloc_id in allocs {
                if v.past_claims.contains_key(alloc_id) {
                    continue;
                }
                let alloc = self.alloc(alloc_id);
                index = index.max(match &alloc {
                    Some(a) => a.modify_index,
                    None => self.delete_index(Table::Allocs),
                });
                if alloc.as_ref().is_some_and(|a| !a.client_terminal()) {
                    continue;
                }
                let claim = match (claims.get(alloc_id), &alloc) {
                    (Some(c), _) => CsiVolumeClaim {
                        alloc_id: alloc_id.clone(),
                        state: CsiVolumeClaimState::Unpublishing,
                        ..c.clone()
                    },
                    (None, Some(a)) => CsiVolumeClaim {
                        alloc_id: alloc_id.clone(),
                        node_id: a.node_id.clone(),
                        mode,
                        state: CsiVolumeClaimState::Unpublishing,
                        ..Default::default()
                    },
                    (None, None) => CsiVolumeClaim {
                        alloc_id: alloc_id.clone(),
                        mode,
                        state: CsiVolumeClaimState::Unpublishing,
                        ..Default::default()
                    },
                };
                repaired.push(claim);
            }
        }
        for claim in repaired {
            v.past_claims.insert(claim.alloc_id.clone(), claim);
        }
        index
    }
}

/// The first eight bytes of `s` as a big-endian integer, zero padded: ordering these
/// orders the strings by their first eight bytes.
fn leading_u64(s: &str) -> u64 {
    let mut head = [0u8; 8];
    let n = s.len().min(8);
    head[..n].copy_from_slice(&s.as_bytes()[..n]);
    u64::from_be_bytes(head)
}
