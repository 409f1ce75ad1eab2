//! The volume side of the simulated cluster: registering and deregistering volumes,
//! apps claiming them, and claims going through their release steps.

use schedstate::model::{
    CsiVolumeAccessMode, CsiVolumeClaim, CsiVolumeClaimMode, CsiVolumeClaimState, CsiVolumeRequest,
    Id, NodeStatus,
};
use schedstate::state::{Command, CsiVolumeClaimRequest};

use super::{Cluster, alloc, stopped};
use crate::catalog::{Kind, PLUGINS, STOPPED_PLUGIN, node_id, volume};
use crate::output::CliError;

impl<B: super::Backend> Cluster<B> {
    /// Registers the next volume on a running plugin, chosen by weight.
    pub(super) fn register(&mut self) -> Result<(), CliError> {
        let snap = self.db.snapshot();
        let v = snap.view();
        let next = v
            .csi_volumes()
            .filter_map(|vol| vol.id.rsplit('-').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let live: Vec<usize> = (0..PLUGINS.len())
            .filter(|&p| self.plugin_running(p) && v.csi_plugin(PLUGINS[p].id).is_some())
            .collect();
        let total: u64 = live.iter().map(|&p| PLUGINS[p].weight).sum();
        if total == 0 {
            return Ok(());
        }
        let mut roll = self.rng.next_u64() % total;
        let mut p = live[0];
        for &q in &live {
            if roll < PLUGINS[q].weight {
                p = q;
                break;
            }
            roll -= PLUGINS[q].weight;
        }
        let app = *self.rng.pick(PLUGINS[p].apps);
        let uuid = self.rng.uuid();
        self.stats.registered += 1;
        self.apply(Command::RegisterCsiVolumes {
            volumes: vec![volume(p, next, app, &uuid)],
        })
    }

    pub(super) fn register_or_deregister(&mut self) -> Result<(), CliError> {
        let snap = self.db.snapshot();
        let count = snap.view().csi_volumes().count();
        if count < self.target_volumes || self.rng.chance(30) {
            return self.register();
        }
        // Volumes of a vanished plugin stay: they show what the store keeps for them.
        let idle: Vec<_> = snap
            .view()
            .csi_volumes()
            .filter(|v| !v.has_claims() && &*v.plugin_id != PLUGINS[STOPPED_PLUGIN].id)
            .collect();
        if idle.is_empty() {
            return Ok(());
        }
        let vol = self.rng.pick(&idle).clone();
        self.stats.deregistered += 1;
        self.apply(Command::DeregisterCsiVolumes {
            namespace: vol.namespace.clone(),
            ids: vec![vol.id.clone()],
            force: false,
        })
    }

    /// An app allocation is placed on a node running the volume's plugin, and claims
    /// the volume (write, or read/write at random on shared volumes).
    pub(super) fn claim(&mut self) -> Result<(), CliError> {
        let snap = self.db.snapshot();
        let v = snap.view();
        let vols: Vec<_> = v.csi_volumes().collect();
        if vols.is_empty() {
            return Ok(());
        }
        for _ in 0..4 {
            let stored = self.rng.pick(&vols);
            let vol = v.denormalize_csi_volume(stored);
            let Some(p) = PLUGINS.iter().position(|s| *s.id == *vol.plugin_id) else {
                continue;
            };
            let spec = &PLUGINS[p];
            // Shared (multi-writer) volumes get readers too; the others one writer.
            let write =
                spec.access != CsiVolumeAccessMode::MultiNodeMultiWriter || self.rng.chance(40);
            let ok = if write {
                vol.write_schedulable() && vol.has_free_write_claims()
            } else {
                vol.read_schedulable() && vol.has_free_read_claims()
            };
            if !ok || !self.plugin_running(p) {
                continue;
            }
            let hosts: Vec<usize> = (0..self.nodes)
                .filter(|&i| {
                    self.allocs.contains_key(&(p, Kind::Node, i))
                        && !self.unhealthy.contains_key(&(p, Kind::Node, i))
                        && v.node(&node_id(i)).is_some_and(|n| {
                            n.status == NodeStatus::Ready && n.eligible && !n.drain
                        })
                })
                .collect();
            if hosts.is_empty() {
                continue;
            }
            let i = *self.rng.pick(&hosts);
            let nid = node_id(i);
            let app = vol.id.rsplit_once('-').map_or(&*vol.id, |(a, _)| a);
            let id = Id::from(self.rng.uuid());
            let mut a = alloc(&id, &vol.namespace, app, "app", &nid);
            a.csi_volume_requests = vec![CsiVolumeRequest {
                volume_id: vol.id.clone(),
                read_only: !write,
            }]
            .into();
            let external_node_id = v
                .node(&nid)
                .and_then(|n| n.csi_node_plugins.get(spec.id).cloned())
                .and_then(|fp| fp.node_info.as_ref().map(|ni| ni.id.to_string()))
                .unwrap_or_default();
            let claim = CsiVolumeClaim {
                alloc_id: id,
                node_id: Id::from(nid.as_str()),
                external_node_id,
                mode: if write {
                    CsiVolumeClaimMode::Write
                } else {
                    CsiVolumeClaimMode::Read
                },
                access_mode: spec.access,
                attachment_mode: spec.attachment,
                state: CsiVolumeClaimState::Taken,
            };
            self.apply(Command::UpsertAllocs { allocs: vec![a] })?;
            self.stats.claims += 1;
            return self.apply(Command::ClaimCsiVolumes {
                claims: vec![CsiVolumeClaimRequest {
                    namespace: vol.namespace.clone(),
                    volume_id: vol.id.clone(),
                    claim,
                }],
            });
        }
        Ok(())
    }

    /// The app holding a claim stops and the claim goes through its release steps.
    pub(super) fn release(
        &mut self,
        namespace: &Id,
        volume_id: &Id,
        c: &CsiVolumeClaim,
    ) -> Result<(), CliError> {
        let snap = self.db.snapshot();
        if let Some(a) = snap.view().alloc(&c.alloc_id)
            && !a.terminal()
        {
            self.apply(Command::UpsertAllocs {
                allocs: vec![stopped(&a)],
            })?;
        }
        let controller = snap
            .view()
            .csi_volume_denormalized(namespace, volume_id)
            .is_some_and(|v| v.controller_required);
        let mut states = vec![CsiVolumeClaimState::NodeDetached];
        if controller {
            states.push(CsiVolumeClaimState::ControllerDetached);
        }
        states.push(CsiVolumeClaimState::ReadyToFree);
        for state in states {
            let claim = CsiVolumeClaim { state, ..c.clone() };
            self.apply(Command::ClaimCsiVolumes {
                claims: vec![CsiVolumeClaimRequest {
                    namespace: namespace.clone(),
                    volume_id: volume_id.clone(),
                    claim,
                }],
            })?;
        }
        self.stats.releases += 1;
        Ok(())
    }

    /// Releases one claim, once about half of the volumes are in use (until then the
    /// cluster keeps claiming).
    pub(super) fn release_one(&mut self) -> Result<(), CliError> {
        let snap = self.db.snapshot();
        let total = snap.view().csi_volumes().count();
        let claimed: Vec<_> = snap.view().csi_volumes().filter(|v| v.in_use()).collect();
        if claimed.is_empty() || claimed.len() * 2 < total {
            return self.claim();
        }
        let vol = self.rng.pick(&claimed).clone();
        let claims: Vec<&CsiVolumeClaim> = vol
            .read_claims
            .values()
            .chain(vol.write_claims.values())
            .collect();
        let c = (*self.rng.pick(&claims)).clone();
        self.release(&vol.namespace, &vol.id, &c)
    }
}
