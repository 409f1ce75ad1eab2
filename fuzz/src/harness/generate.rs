//! Commands decoded from fuzz bytes, over small id pools so that operations collide:
//! 8 nodes, 6 plugins, 16 allocs, 6 volumes, 2 namespaces, 3 jobs (ids that prefix each
//! other included, to catch a prefix match where an exact one is due).

use std::collections::BTreeMap;
use std::sync::Arc;

use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiMountOptions, CsiNodeInfo,
    CsiPluginType, CsiTopology, CsiVolume, CsiVolumeAccessMode, CsiVolumeAttachmentMode,
    CsiVolumeCapability, CsiVolumeClaim, CsiVolumeClaimMode, CsiVolumeClaimState, CsiVolumeRequest,
    DesiredStatus, Fingerprints, Id, Job, JobType, Node, NodeStatus, Task, TaskCsiPlugin,
    TaskGroup, id,
};
use schedstate::state::{Command, CsiVolumeClaimRequest};

use super::input::Input;

/// Node ids ("n1" prefixes "n10").
pub const NODES: [&str; 8] = ["n1", "n10", "n2", "n3", "n4", "n5", "n6", "n7"];
/// Plugin ids ("ebs" prefixes "ebs2", "p1" prefixes "p10").
pub const PLUGINS: [&str; 6] = ["ebs", "ebs2", "nfs", "p1", "p10", "ceph"];
/// Alloc ids.
pub const ALLOCS: [&str; 16] = [
    "a1", "a10", "a11", "a12", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b1", "b2", "b3",
    "b4",
];
/// Volume ids (namespace-relative).
pub const VOLUMES: [&str; 6] = ["v1", "v10", "v2", "v3", "v4", "v5"];
/// Namespaces.
pub const NAMESPACES: [&str; 2] = ["default", "prod"];
const JOBS: [&str; 3] = ["web", "db", "cache"];
/// Task group names (allocations and jobs draw from the same ones).
const GROUPS: [&str; 2] = ["group", "g2"];
const PROVIDERS: [&str; 2] = ["ebs.csi.aws.com", "nfs.csi.k8s.io"];
const VERSIONS: [&str; 3] = ["1.0", "1.1", "2.0"];

/// Every access mode.
pub const ACCESS_MODES: [CsiVolumeAccessMode; 6] = [
    CsiVolumeAccessMode::Unknown,
    CsiVolumeAccessMode::SingleNodeReaderOnly,
    CsiVolumeAccessMode::SingleNodeWriter,
    CsiVolumeAccessMode::MultiNodeReaderOnly,
    CsiVolumeAccessMode::MultiNodeSingleWriter,
    CsiVolumeAccessMode::MultiNodeMultiWriter,
];
/// Every attachment mode.
pub const ATTACHMENT_MODES: [CsiVolumeAttachmentMode; 3] = [
    CsiVolumeAttachmentMode::Unknown,
    CsiVolumeAttachmentMode::BlockDevice,
    CsiVolumeAttachmentMode::FileSystem,
];
/// Every claim state.
pub const CLAIM_STATES: [CsiVolumeClaimState; 5] = [
    CsiVolumeClaimState::Taken,
    CsiVolumeClaimState::NodeDetached,
    CsiVolumeClaimState::ControllerDetached,
    CsiVolumeClaimState::ReadyToFree,
    CsiVolumeClaimState::Unpublishing,
];

/// The generator's memory: the nodes it sent (for heartbeats: the same report again,
/// taken later, which must change nothing).
///
/// It also remembers the ids it used for plugins, allocs and volumes, and picks those
/// more often than the rest of the pools, so that claims meet a registered volume, an
/// existing alloc and a plugin with healthy instances often enough to go deep.
#[derive(Debug, Default, Clone)]
pub struct Gen {
    sent: BTreeMap<Id, Node>,
    plugins: Vec<&'static str>,
    /// Alloc ids of fingerprints and upserts.
    allocs: Vec<&'static str>,
    /// Alloc ids upserted (so they exist, and claims by them can succeed).
    upserted: Vec<&'static str>,
    volumes: Vec<(&'static str, &'static str)>,
}

/// Remembers `value` (a few of the latest distinct ones).
fn remember<T: PartialEq + Copy>(list: &mut Vec<T>, value: T) {
    list.retain(|v| *v != value);
    list.push(value);
    if list.len() > 8 {
        list.remove(0);
    }
}

/// Mostly one of the remembered values, else one of the pool.
fn recall<T: Copy>(inp: &mut Input<'_>, list: &[T], pool: &[T]) -> T {
    if !list.is_empty() && !inp.chance(30) {
        inp.pick(list)
    } else {
        inp.pick(pool)
    }
}

impl Gen {
    /// The index of the next command, given the store's last applied index: mostly the
    /// next one, sometimes a jump, sometimes stale (equal or lower).
    pub fn index(&mut self, inp: &mut Input<'_>, last_applied: u64) -> u64 {
        match inp.below(32) {
            0 => last_applied,
            1 => last_applied.saturating_sub(1 + inp.below(3) as u64),
            2..=3 => last_applied + 2 + inp.below(50) as u64,
            _ => last_applied + 1,
        }
    }

    /// One command.
    pub fn command(&mut self, inp: &mut Input<'_>) -> Command {
        match inp.below(100) {
            0..=16 => {
                let node = self.node(inp);
                Command::UpsertNode { node }
            }
            17..=19 => Command::UpsertNodes {
                // Sometimes empty (refused), sometimes the same node twice.
                nodes: (0..inp.below(4) + usize::from(!inp.chance(5)))
                    .map(|_| match self.heartbeat(inp) {
                        Some(node) if inp.chance(50) => node,
                        _ => self.node(inp),
                    })
                    .collect(),
            },
            20..=25 => match self.heartbeat(inp) {
                Some(node) => Command::UpsertNode { node },
                None => Command::UpsertNode {
                    node: self.node(inp),
                },
            },
            26..=29 => Command::DeleteNodes {
                ids: (0..inp.below(3) + usize::from(!inp.chance(5)))
                    .map(|_| id(inp.pick(&NODES)))
                    .collect(),
            },
            30..=31 => Command::UpdateNodeStatus {
                id: node_id(inp),
                status: inp.pick(&[
                    NodeStatus::Initializing,
                    NodeStatus::Ready,
                    NodeStatus::Down,
                    NodeStatus::Disconnected,
                ]),
            },
            32..=33 => Command::UpdateNodeDrain {
                id: node_id(inp),
                drain: inp.bool(),
            },
            34..=35 => Command::UpdateNodeEligibility {
                id: node_id(inp),
                eligible: inp.bool(),
            },
            36..=53 => Command::UpsertAllocs {
                allocs: (0..inp.below(3) + usize::from(!inp.chance(3)))
                    .map(|_| self.alloc(inp))
                    .collect(),
            },
            54..=57 => Command::DeleteAllocs {
                ids: (0..inp.below(4)).map(|_| id(inp.pick(&ALLOCS))).collect(),
            },
            58..=69 => Command::RegisterCsiVolumes {
                volumes: (0..inp.below(2) + usize::from(!inp.chance(3)))
                    .map(|_| self.volume(inp))
                    .collect(),
            },
            70..=75 => Command::DeregisterCsiVolumes {
                namespace: id(inp.pick(&NAMESPACES)),
                ids: (0..inp.below(2) + usize::from(!inp.chance(3)))
                    .map(|_| id(inp.pick(&VOLUMES)))
                    .collect(),
                force: inp.bool(),
            },
            76..=89 => Command::ClaimCsiVolumes {
                claims: (0..inp.below(3) + usize::from(!inp.chance(3)))
                    .map(|_| self.claim_request(inp))
                    .collect(),
            },
            90..=95 => Command::UpsertJobs {
                jobs: (0..inp.below(2) + usize::from(!inp.chance(5)))
                    .map(|_| job(inp))
                    .collect(),
            },
            _ => {
                let namespace = id(inp.pick(&NAMESPACES));
                let ids = (0..inp.below(2) + usize::from(!inp.chance(5)))
                    .map(|_| id(inp.pick(&JOBS)))
                    .collect();
                if inp.bool() {
                    Command::StopJobs { namespace, ids }
                } else {
                    Command::PurgeJobs { namespace, ids }
                }
            }
        }
    }

    /// A node report: status, flags and up to four fingerprints of every shape.
    pub fn node(&mut self, inp: &mut Input<'_>) -> Node {
        let node_id = if inp.chance(2) { "" } else { inp.pick(&NODES) };
        let mut n = Node::new(node_id, format!("client-{node_id}"));
        n.status = inp.pick(&[NodeStatus::Ready, NodeStatus::Ready, NodeStatus::Down]);
        n.drain = inp.chance(10);
        n.eligible = !inp.chance(10);
        for _ in 0..inp.below(5) {
            let plugin = inp.pick(&PLUGINS);
            // Mostly reports the rules accept; 1 in 8 breaks a rule of fingerprints
            // (halves that do not match their map, or the wrong key), refusing the node.
            match inp.below(32) {
                0..=7 => file(&mut n.csi_controller_plugins, fingerprint(inp, plugin, 1)),
                8..=17 => file(&mut n.csi_node_plugins, fingerprint(inp, plugin, 2)),
                18..=21 => {
                    file(&mut n.csi_controller_plugins, fingerprint(inp, plugin, 1));
                    file(&mut n.csi_node_plugins, fingerprint(inp, plugin, 2));
                }
                22..=25 => {
                    // A monolith: one fingerprint with both halves, in both maps.
                    let both = fingerprint(inp, plugin, 3);
                    file(&mut n.csi_controller_plugins, Arc::clone(&both));
                    file(&mut n.csi_node_plugins, both);
                }
                26..=27 => {
                    // A controller report, and a monolith report in the node map: each
                    // map's entry is the instance of its kind.
                    file(&mut n.csi_controller_plugins, fingerprint(inp, plugin, 1));
                    file(&mut n.csi_node_plugins, fingerprint(inp, plugin, 3));
                }
                28 => {
                    // A monolith filed in one map only (refused).
                    let both = fingerprint(inp, plugin, 3);
                    if inp.bool() {
                        file(&mut n.csi_controller_plugins, both);
                    } else {
                        file(&mut n.csi_node_plugins, both);
                    }
                }
                29 => {
                    // Filed in the map of the other kind (refused).
                    if inp.bool() {
                        file(&mut n.csi_controller_plugins, fingerprint(inp, plugin, 2));
                    } else {
                        file(&mut n.csi_node_plugins, fingerprint(inp, plugin, 1));
                    }
                }
                _ => {
                    // Filed under another plugin's id (or none): the upsert is refused.
                    // Also the only place a fingerprint with neither half is made.
                    let halves = inp.below(4) as u8;
                    let info = fingerprint(inp, plugin, halves);
                    let key = match inp.below(4) {
                        0 => "",
                        1 => plugin,
                        _ => inp.pick(&PLUGINS),
                    };
                    n.csi_node_plugins.insert(id(key), info);
                }
            }
        }
        for info in n
            .csi_controller_plugins
            .values()
            .chain(n.csi_node_plugins.values())
        {
            if info.healthy
                && let Some(p) = PLUGINS.iter().find(|p| **p == &*info.plugin_id)
            {
                remember(&mut self.plugins, *p);
            }
            if let Some(a) = ALLOCS.iter().find(|a| **a == &*info.alloc_id) {
                remember(&mut self.allocs, *a);
            }
        }
        if !n.id.is_empty() {
            self.sent.insert(n.id.clone(), n.clone());
        }
        n
    }

    /// An allocation, mostly one seen before (so that stops hit running instances).
    pub fn alloc(&mut self, inp: &mut Input<'_>) -> Allocation {
        let mut a = alloc(inp);
        if !a.id.is_empty() {
            let known = recall(inp, &self.allocs, &ALLOCS);
            a.id = id(known);
            remember(&mut self.upserted, known);
        }
        a
    }

    /// A volume registration, mostly of a plugin that was reported healthy.
    pub fn volume(&mut self, inp: &mut Input<'_>) -> CsiVolume {
        let mut v = volume(inp);
        if !v.plugin_id.is_empty() && &*v.plugin_id != "missing" {
            v.plugin_id = id(recall(inp, &self.plugins, &PLUGINS));
        }
        let ns = NAMESPACES.iter().find(|n| **n == &*v.namespace);
        let vid = VOLUMES.iter().find(|x| **x == &*v.id);
        if let (Some(ns), Some(vid)) = (ns, vid) {
            remember(&mut self.volumes, (*ns, *vid));
        }
        v
    }

    /// A claim, mostly on a volume registered before by an alloc seen before.
    pub fn claim_request(&mut self, inp: &mut Input<'_>) -> CsiVolumeClaimRequest {
        let mut req = claim_request(inp);
        if !self.volumes.is_empty() && !inp.chance(30) {
            let (ns, vid) = inp.pick(&self.volumes);
            req.namespace = id(ns);
            req.volume_id = id(vid);
        }
        if !req.claim.alloc_id.is_empty() {
            req.claim.alloc_id = id(recall(inp, &self.upserted, &ALLOCS));
        }
        req
    }

    /// A node sent before, again: as it was but reported later, or with one
    /// fingerprint's health flipped.
    fn heartbeat(&mut self, inp: &mut Input<'_>) -> Option<Node> {
        if self.sent.is_empty() {
            return None;
        }
        let which = inp.below(self.sent.len().min(256));
        let mut n = self.sent.values().nth(which)?.clone();
        let later = inp.u16().into();
        let flip = inp.chance(30);
        for info in n
            .csi_controller_plugins
            .values_mut()
            .chain(n.csi_node_plugins.values_mut())
        {
            let info = Arc::make_mut(info);
            info.update_time = later;
            if flip && inp.chance(50) {
                info.healthy = !info.healthy;
            }
        }
        self.sent.insert(n.id.clone(), n.clone());
        Some(n)
    }
}

fn node_id(inp: &mut Input<'_>) -> Id {
    id(inp.pick(&NODES))
}

fn file(map: &mut Fingerprints, info: Arc<CsiInfo>) {
    map.insert(info.plugin_id.clone(), info);
}

/// A fingerprint of `plugin`; `halves`: 0 none, 1 controller, 2 node, 3 both.
pub fn fingerprint(inp: &mut Input<'_>, plugin: &str, halves: u8) -> Arc<CsiInfo> {
    let healthy = !inp.chance(25);
    let alloc_id = if inp.chance(15) {
        ""
    } else {
        inp.pick(&ALLOCS)
    };
    Arc::new(CsiInfo {
        plugin_id: id(plugin),
        alloc_id: id(alloc_id),
        healthy,
        health_description: if healthy { "healthy" } else { "unhealthy" }.into(),
        update_time: inp.below(4) as u64,
        provider: inp.pick(&PROVIDERS).into(),
        provider_version: inp.pick(&VERSIONS).into(),
        requires_controller_plugin: inp.bool(),
        requires_topologies: inp.chance(10),
        controller_info: (halves & 1 != 0).then(|| CsiControllerInfo {
            supports_read_only_attach: inp.bool(),
            supports_attach_detach: inp.bool(),
            supports_list_volumes: false,
            supports_list_volumes_attached_nodes: false,
        }),
        node_info: (halves & 2 != 0).then(|| CsiNodeInfo {
            id: format!("i-{alloc_id}").into(),
            max_volumes: inp.below(4) as u64,
            accessible_topology: inp.chance(20).then(|| CsiTopology {
                segments: [("zone".to_string(), inp.pick(&["a", "b"]).to_string())].into(),
            }),
            requires_node_stage_volume: inp.bool(),
        }),
    })
}

/// An allocation: random statuses (server-terminal ones take their plugin instances),
/// some volume requests.
pub fn alloc(inp: &mut Input<'_>) -> Allocation {
    let alloc_id = if inp.chance(2) { "" } else { inp.pick(&ALLOCS) };
    Allocation {
        id: id(alloc_id),
        namespace: id(inp.pick(&NAMESPACES)),
        job_id: id(inp.pick(&JOBS)),
        job_version: if inp.chance(80) {
            0
        } else {
            inp.below(3) as u64
        },
        task_group: id(inp.pick(&GROUPS)),
        node_id: node_id(inp),
        desired_status: match inp.below(20) {
            0..=6 => DesiredStatus::Stop,
            7..=9 => DesiredStatus::Evict,
            _ => DesiredStatus::Run,
        },
        client_status: inp.pick(&[
            ClientStatus::Pending,
            ClientStatus::Running,
            ClientStatus::Running,
            ClientStatus::Complete,
            ClientStatus::Failed,
            ClientStatus::Lost,
        ]),
        csi_volume_requests: (0..inp.below(3))
            .map(|_| CsiVolumeRequest {
                volume_id: id(inp.pick(&VOLUMES)),
                read_only: inp.bool(),
            })
            .collect(),
        create_index: 0,
        modify_index: 0,
    }
}

/// A job registration: any type, up to three groups (names may repeat: refused) with
/// small counts, tasks running any kind of any plugin (sometimes with an empty id).
pub fn job(inp: &mut Input<'_>) -> Job {
    let job_id = if inp.chance(2) { "" } else { inp.pick(&JOBS) };
    Job {
        namespace: id(inp.pick(&NAMESPACES)),
        id: id(job_id),
        job_type: inp.pick(&[
            JobType::Service,
            JobType::Batch,
            JobType::System,
            JobType::Sysbatch,
        ]),
        task_groups: (0..inp.below(4))
            .map(|_| TaskGroup {
                name: id(inp.pick(&GROUPS)),
                count: inp.below(4) as u32,
                tasks: (0..inp.below(3))
                    .map(|i| Task {
                        name: id(if inp.chance(5) {
                            "t"
                        } else {
                            ["t0", "t1", "t2"][i]
                        }),
                        csi_plugin: (!inp.chance(30)).then(|| TaskCsiPlugin {
                            id: id(if inp.chance(2) {
                                ""
                            } else {
                                inp.pick(&PLUGINS)
                            }),
                            plugin_type: inp.pick(&[
                                CsiPluginType::Controller,
                                CsiPluginType::Node,
                                CsiPluginType::Monolith,
                            ]),
                        }),
                    })
                    .collect(),
            })
            .collect(),
        ..Job::default()
    }
}

/// A volume registration: identity mostly stable (so re-registration updates), user
/// fields random.
pub fn volume(inp: &mut Input<'_>) -> CsiVolume {
    let namespace = if inp.chance(2) {
        ""
    } else {
        inp.pick(&NAMESPACES)
    };
    let vol_id = if inp.chance(2) {
        ""
    } else {
        inp.pick(&VOLUMES)
    };
    let plugin = match inp.below(40) {
        0 => "",
        1 => "missing",
        _ => inp.pick(&PLUGINS),
    };
    let mut v = CsiVolume::new(namespace, vol_id, plugin);
    v.external_id = if inp.chance(5) {
        "ext-other".into()
    } else {
        format!("ext-{vol_id}")
    };
    v.name = inp.pick(&["", "data", "logs"]).into();
    v.requested_capabilities = (0..inp.below(3))
        .map(|_| CsiVolumeCapability {
            access_mode: inp.pick(&ACCESS_MODES),
            attachment_mode: inp.pick(&ATTACHMENT_MODES),
        })
        .collect();
    if inp.chance(20) {
        v.mount_options = Some(CsiMountOptions {
            fs_type: "ext4".into(),
            mount_flags: vec!["noatime".into()],
        });
    }
    if inp.chance(20) {
        v.parameters
            .insert("type".into(), inp.pick(&["gp2", "gp3"]).into());
    }
    if inp.chance(10) {
        v.secrets.insert("key".into(), "s3cr3t".into());
    }
    if inp.chance(10) {
        v.context.insert("ctx".into(), "1".into());
    }
    if inp.chance(10) {
        v.topologies.push(CsiTopology {
            segments: [("zone".to_string(), "a".to_string())].into(),
        });
    }
    // Claims and modes in a registration request are ignored for a new volume and kept
    // from the stored one for an existing volume: send some to check that.
    if inp.chance(5) {
        let c = claim(inp);
        v.access_mode = c.access_mode;
        v.write_allocs.insert(c.alloc_id.clone());
        v.write_claims.insert(c.alloc_id.clone(), c);
    }
    v
}

/// A claim of any mode and state.
pub fn claim(inp: &mut Input<'_>) -> CsiVolumeClaim {
    let alloc_id = if inp.chance(8) { "" } else { inp.pick(&ALLOCS) };
    let node = inp.pick(&NODES);
    CsiVolumeClaim {
        alloc_id: id(alloc_id),
        node_id: id(node),
        external_node_id: format!("i-{node}"),
        mode: match inp.below(20) {
            0..=8 => CsiVolumeClaimMode::Read,
            9..=17 => CsiVolumeClaimMode::Write,
            _ => CsiVolumeClaimMode::Gc,
        },
        access_mode: inp.pick(&ACCESS_MODES),
        attachment_mode: inp.pick(&ATTACHMENT_MODES),
        state: if inp.chance(55) {
            CsiVolumeClaimState::Taken
        } else {
            inp.pick(&CLAIM_STATES)
        },
    }
}

/// A claim of one volume.
pub fn claim_request(inp: &mut Input<'_>) -> CsiVolumeClaimRequest {
    CsiVolumeClaimRequest {
        namespace: id(inp.pick(&NAMESPACES)),
        volume_id: id(inp.pick(&VOLUMES)),
        claim: claim(inp),
    }
}
