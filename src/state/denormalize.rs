//! Denormalization: filling the derived fields of a plugin or volume on a new value.
//! Never written back; calling it twice gives the same result.

use std::cmp::Reverse;

use crate::engine::KeyBuilder;
use crate::model::{
    AllocListStub, CsiPlugin, CsiVolume, CsiVolumeClaim, CsiVolumeClaimMode, CsiVolumeClaimState,
};

use super::StateView;

impl StateView<'_> {
    /// A copy of `plugin` whose `allocations` holds the stubs of the distinct alloc ids
    /// of its controller and node instances, newest (by modify index) first. Missing
    /// allocs and empty alloc ids are skipped.
    pub fn denormalize_csi_plugin(&self, plugin: &CsiPlugin) -> CsiPlugin {
        // The alloc ids sorted and deduplicated: lookups in key order walk the allocs
        // table from left to right, each sharing most of its path with the one before.
        // Encoded string keys sort as the strings do (`Key`'s encoding preserves
        // order), so the ids are sorted as borrowed strings and each key is built on
        // the stack only for its lookup.
        let mut ids: Vec<&str> = plugin
            .controllers
            .iter()
            .chain(plugin.nodes.iter())
            .map(|(_, info)| &*info.alloc_id)
            .filter(|id| !id.is_empty())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut stubs: Vec<AllocListStub> = ids
            .iter()
            .filter_map(|id| {
                let key = KeyBuilder::new().str(id);
                self.view.get(self.t.allocs, key.as_bytes())
            })
            .map(AllocListStub::new)
            .collect();
        // Newest first; the sort is stable, so ties stay in id order (deterministic).
        stubs.sort_by_key(|s| Reverse(s.modify_index));
        let mut out = plugin.clone();
        out.allocations = stubs;
        out
    }

    /// A copy of `volume` with its plugin's provider, version, controller requirement,
    /// health counts and schedulability filled in, and its past claims repaired
    /// (docs/rules.md §5).
    pub fn denormalize_csi_volume(&self, volume: &CsiVolume) -> CsiVolume {
        let mut v = volume.clone();
        match self.csi_plugin(&v.plugin_id) {
            Some(p) => {
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
                // Stored provider and controller requirement are kept: a volume whose
                // plugin vanished must not claim it needs no controller.
                v.clear_denormalized();
            }
        }
        self.repair_past_claims(&mut v);
        v
    }

    /// Adds an unpublishing past claim for every claiming alloc that is gone or
    /// client-terminal and has none yet.
    fn repair_past_claims(&self, v: &mut CsiVolume) {
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
    }
}
