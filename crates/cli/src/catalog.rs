//! What the demo cluster is made of: the CSI plugins with their real providers and
//! versions, where their instances run, the jobs that run them, how their volumes
//! look, node names, and a small deterministic random source for ids.

use std::collections::BTreeMap;
use std::sync::Arc;

use schedstate::model::{
    CsiControllerInfo, CsiInfo, CsiMountOptions, CsiNodeInfo, CsiPluginType, CsiTopology,
    CsiVolume, CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeCapability, Id, Job, JobType,
    Task, TaskCsiPlugin, TaskGroup,
};

/// The namespace of plugin jobs and most volumes.
pub const NAMESPACE: &str = "default";

/// One CSI plugin of the demo cluster.
pub struct PluginSpec {
    /// The plugin id.
    pub id: &'static str,
    /// The vendor name (CSI GetPluginInfo).
    pub provider: &'static str,
    /// The vendor version.
    pub version: &'static str,
    /// Whether it needs a controller (and runs controller instances).
    pub controller: bool,
    /// The prefix of its plugin jobs (`<job>-controller`, `<job>-nodes`).
    pub job: &'static str,
    /// The apps that use its volumes (volume ids start with these).
    pub apps: &'static [&'static str],
    /// The access and attachment mode its volumes are claimed with.
    pub access: CsiVolumeAccessMode,
    /// How its volumes are attached.
    pub attachment: CsiVolumeAttachmentMode,
    /// The topology key of its node instances, if volumes are zonal.
    pub topology_key: Option<(&'static str, &'static str)>,
    /// Most volumes per node.
    pub max_volumes: u64,
    /// Relative weight when registering volumes.
    pub weight: u64,
}

/// The plugins: AWS EBS and GCE PD (controllers, zonal), NFS (node-only, shared), and
/// Ceph RBD (its job is stopped during each run, so the plugin disappears).
pub const PLUGINS: [PluginSpec; 4] = [
    PluginSpec {
        id: "aws-ebs0",
        provider: "ebs.csi.aws.com",
        version: "1.25.0",
        controller: true,
        job: "csi-aws-ebs",
        apps: &["postgres", "mysql", "redis", "kafka"],
        access: CsiVolumeAccessMode::SingleNodeWriter,
        attachment: CsiVolumeAttachmentMode::FileSystem,
        topology_key: Some(("topology.ebs.csi.aws.com/zone", "us-east-1")),
        max_volumes: 25,
        weight: 35,
    },
    PluginSpec {
        id: "gcp-pd",
        provider: "pd.csi.storage.gke.io",
        version: "1.13.2",
        controller: true,
        job: "csi-gcp-pd",
        apps: &["mongodb", "elasticsearch", "prometheus"],
        access: CsiVolumeAccessMode::SingleNodeWriter,
        attachment: CsiVolumeAttachmentMode::FileSystem,
        topology_key: Some(("topology.gke.io/zone", "us-central1-")),
        max_volumes: 127,
        weight: 30,
    },
    PluginSpec {
        id: "nfs",
        provider: "nfs.csi.k8s.io",
        version: "4.6.0",
        controller: false,
        job: "csi-nfs",
        apps: &["shared-media", "ci-cache", "home"],
        access: CsiVolumeAccessMode::MultiNodeMultiWriter,
        attachment: CsiVolumeAttachmentMode::FileSystem,
        topology_key: None,
        max_volumes: 0,
        weight: 25,
    },
    PluginSpec {
        id: "ceph-rbd",
        provider: "rbd.csi.ceph.com",
        version: "3.10.2",
        controller: true,
        job: "csi-ceph-rbd",
        apps: &["minio", "etcd"],
        access: CsiVolumeAccessMode::SingleNodeWriter,
        attachment: CsiVolumeAttachmentMode::BlockDevice,
        topology_key: None,
        max_volumes: 32,
        weight: 10,
    },
];

/// The plugin whose job is stopped during a run.
pub const STOPPED_PLUGIN: usize = 3;
/// The plugin the demo's blocking query watches.
pub const WATCHED_PLUGIN: usize = 0;

/// A controller or a node instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A controller instance.
    Controller,
    /// A node instance.
    Node,
}

impl Kind {
    /// The job suffix and task group of this kind of plugin instance.
    pub fn group(self) -> &'static str {
        match self {
            Kind::Controller => "controller",
            Kind::Node => "nodes",
        }
    }
}

/// Whether plugin `p` runs a `kind` instance on node `i`. AWS nodes are the even ones,
/// GCP the odd ones; NFS runs everywhere, Ceph on every fourth node. Controllers run
/// on the first two nodes of a plugin (one for Ceph).
pub fn runs(p: usize, kind: Kind, i: usize) -> bool {
    let node = match p {
        0 => i.is_multiple_of(2),
        1 => i % 2 == 1,
        2 => true,
        _ => i % 4 == 3,
    };
    match kind {
        Kind::Node => node,
        Kind::Controller => {
            PLUGINS[p].controller
                && node
                && match p {
                    0 => i == 0 || i == 2,
                    1 => i == 1 || i == 3,
                    _ => i == 3,
                }
        }
    }
}

/// The plugin job running `kind` instances of plugin `p`.
pub fn job_id(p: usize, kind: Kind) -> String {
    format!("{}-{}", PLUGINS[p].job, kind.group())
}

/// The plugin whose node job asks for more instances than run: its service job
/// counts every node it runs on plus [`PENDING_NODE_ALLOCS`], whose allocations are
/// placed but never start (an image that cannot be pulled), so `plugin status` shows
/// fewer healthy node instances than expected.
pub const PENDING_PLUGIN: usize = 0;
/// How many allocations of [`PENDING_PLUGIN`]'s node job stay pending.
pub const PENDING_NODE_ALLOCS: usize = 2;

/// The nodes the pending allocations are placed on: the first nodes that do not run
/// [`PENDING_PLUGIN`]'s node instances (always there: a cluster has four nodes or more).
pub fn pending_hosts(nodes: usize) -> Vec<usize> {
    (0..nodes)
        .filter(|&i| !runs(PENDING_PLUGIN, Kind::Node, i))
        .take(PENDING_NODE_ALLOCS)
        .collect()
}

/// The job running `kind` instances of plugin `p` in a cluster of `nodes` nodes, if
/// the plugin has that kind: controllers are a service job counting the controllers
/// placed; node instances a system job (one per eligible node), except
/// [`PENDING_PLUGIN`]'s, a service job counting more than run (see there).
pub fn plugin_job(p: usize, kind: Kind, nodes: usize) -> Option<Job> {
    let spec = &PLUGINS[p];
    if kind == Kind::Controller && !spec.controller {
        return None;
    }
    let placed = (0..nodes).filter(|&i| runs(p, kind, i)).count();
    let (job_type, count, plugin_type) = match kind {
        Kind::Controller => (JobType::Service, placed, CsiPluginType::Controller),
        Kind::Node if p == PENDING_PLUGIN => (
            JobType::Service,
            placed + PENDING_NODE_ALLOCS,
            CsiPluginType::Node,
        ),
        Kind::Node => (JobType::System, 1, CsiPluginType::Node),
    };
    let mut job = Job::new(NAMESPACE, job_id(p, kind).as_str());
    job.job_type = job_type;
    job.task_groups = vec![TaskGroup {
        name: kind.group().into(),
        count: u32::try_from(count).unwrap_or(u32::MAX),
        tasks: vec![Task {
            name: "plugin".into(),
            csi_plugin: Some(TaskCsiPlugin {
                id: Id::from(spec.id),
                plugin_type,
            }),
        }],
    }];
    Some(job)
}

/// The id of node `i`.
pub fn node_id(i: usize) -> String {
    format!("node-{i:04}")
}

/// The index of a node id made by [`node_id`].
pub fn node_index(id: &str) -> Option<usize> {
    let digits = id.strip_prefix("node-")?;
    (digits.len() >= 4 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A host name for node `i`: EC2 style for AWS nodes, GKE style for GCP nodes.
pub fn node_name(i: usize) -> String {
    if i.is_multiple_of(2) {
        let n = i / 2;
        format!("ip-10-0-{}-{}.ec2.internal", n / 250, n % 250 + 4)
    } else {
        format!("gke-prod-pool-1-{:08x}", mix(i as u64) as u32)
    }
}

/// The zone of node `i` for plugin `p` (a, b or c).
fn zone(p: usize, i: usize) -> Option<(String, String)> {
    let (key, region) = PLUGINS[p].topology_key?;
    let letter = ['a', 'b', 'c'][i / 2 % 3];
    Some((key.to_string(), format!("{region}{letter}")))
}

/// The provider's id for node `i` (an EC2 instance id, a GCE instance, a host name).
fn provider_node_id(p: usize, i: usize) -> String {
    match p {
        0 => format!("i-0{:016x}", mix(i as u64 ^ 0xec2)),
        1 => format!(
            "projects/acme-prod/zones/us-central1-a/instances/{}",
            node_name(i)
        ),
        _ => node_name(i),
    }
}

/// The fingerprint node `i` reports for its `kind` instance of plugin `p`.
pub fn fingerprint(
    p: usize,
    kind: Kind,
    i: usize,
    alloc_id: &Id,
    healthy: Option<&str>,
    time: u64,
) -> Arc<CsiInfo> {
    let spec = &PLUGINS[p];
    Arc::new(CsiInfo {
        plugin_id: Id::from(spec.id),
        alloc_id: alloc_id.clone(),
        healthy: healthy.is_none(),
        health_description: healthy.unwrap_or("healthy").into(),
        update_time: time,
        provider: spec.provider.into(),
        provider_version: spec.version.into(),
        requires_controller_plugin: spec.controller,
        requires_topologies: spec.topology_key.is_some(),
        controller_info: (kind == Kind::Controller).then_some(CsiControllerInfo {
            supports_read_only_attach: true,
            supports_attach_detach: true,
            supports_list_volumes: true,
            supports_list_volumes_attached_nodes: p != 1,
        }),
        node_info: (kind == Kind::Node).then(|| CsiNodeInfo {
            id: provider_node_id(p, i).into(),
            max_volumes: spec.max_volumes,
            accessible_topology: zone(p, i).map(|(k, v)| CsiTopology {
                segments: BTreeMap::from([(k, v)]),
            }),
            requires_node_stage_volume: spec.controller,
        }),
    })
}

/// Why an unhealthy instance is unhealthy (a few real-looking probe failures).
pub const FAILURES: [&str; 3] = [
    "CSI plugin probe failed: rpc error: code = Unavailable desc = connection refused",
    "CSI plugin probe timed out after 5s",
    "NodeGetInfo: rpc error: code = DeadlineExceeded desc = context deadline exceeded",
];

/// Volume number `n` of plugin `p`, for app `app`.
pub fn volume(p: usize, n: u64, app: &str, uuid: &str) -> CsiVolume {
    let spec = &PLUGINS[p];
    let id = format!("{app}-{n:03}");
    let namespace = if n % 4 == 3 { "batch" } else { NAMESPACE };
    let mut v = CsiVolume::new(namespace, id.as_str(), spec.id);
    v.name = format!("{app}-data");
    v.external_id = match p {
        0 => format!("vol-0{}", &uuid.replace('-', "")[..16]),
        1 => format!("projects/acme-prod/zones/us-central1-a/disks/pvc-{uuid}"),
        2 => format!("nfs-1.internal#exports#{id}"),
        _ => format!("0001-0009-rook-ceph-0000000000000002-{uuid}"),
    };
    v.requested_capabilities = vec![CsiVolumeCapability {
        access_mode: spec.access,
        attachment_mode: spec.attachment,
    }];
    v.mount_options = match p {
        0 | 1 => Some(CsiMountOptions {
            fs_type: "ext4".into(),
            mount_flags: vec!["noatime".into()],
        }),
        2 => Some(CsiMountOptions {
            fs_type: "nfs".into(),
            mount_flags: vec!["nfsvers=4.1".into()],
        }),
        _ => None,
    };
    let params: &[(&str, &str)] = match p {
        0 => &[("type", "gp3"), ("encrypted", "true")],
        1 => &[("type", "pd-ssd")],
        2 => &[("server", "nfs-1.internal"), ("share", "/exports")],
        _ => &[("clusterID", "rook-ceph"), ("pool", "replicapool")],
    };
    v.parameters = params
        .iter()
        .map(|(k, val)| (k.to_string(), val.to_string()))
        .collect();
    v
}

/// SplitMix64's output function.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic random source (SplitMix64).
pub struct Rng(u64);

impl Rng {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(mix(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// A random element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A random UUID (version 4 layout).
    pub fn uuid(&mut self) -> String {
        let (a, b) = (self.next_u64(), self.next_u64());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            (b >> 48) & 0x3fff | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_cover_every_plugin_from_four_nodes() {
        for (p, spec) in PLUGINS.iter().enumerate() {
            assert!((0..4).any(|i| runs(p, Kind::Node, i)), "{}", spec.id);
            let controllers = (0..4).filter(|&i| runs(p, Kind::Controller, i)).count();
            assert_eq!(controllers > 0, spec.controller, "{}", spec.id);
            for i in 0..4 {
                assert!(!runs(p, Kind::Controller, i) || runs(p, Kind::Node, i));
            }
        }
    }

    #[test]
    fn plugin_jobs_expect_what_runs_and_the_pending_plugin_more() {
        for (p, spec) in PLUGINS.iter().enumerate() {
            let ctrl = plugin_job(p, Kind::Controller, 12);
            assert_eq!(ctrl.is_some(), spec.controller, "{}", spec.id);
            if let Some(j) = ctrl {
                let placed = (0..12).filter(|&i| runs(p, Kind::Controller, i)).count();
                assert_eq!(j.task_groups[0].count as usize, placed);
                assert_eq!(j.job_type, JobType::Service);
            }
            let nodes = plugin_job(p, Kind::Node, 12).expect("every plugin runs nodes");
            assert_eq!(&*nodes.id, job_id(p, Kind::Node));
            assert_eq!(nodes.job_type.per_node(), p != PENDING_PLUGIN);
        }
        let ebs = plugin_job(PENDING_PLUGIN, Kind::Node, 12).unwrap();
        assert_eq!(ebs.task_groups[0].count, 6 + 2);
        let hosts = pending_hosts(12);
        assert_eq!(hosts.len(), PENDING_NODE_ALLOCS);
        assert!(hosts.iter().all(|&i| !runs(PENDING_PLUGIN, Kind::Node, i)));
        assert_eq!(pending_hosts(4).len(), PENDING_NODE_ALLOCS);
    }

    #[test]
    fn ids_are_deterministic_and_well_formed() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let u = a.uuid();
        assert_eq!(u, b.uuid());
        assert_eq!(u.len(), 36);
        assert_eq!(u.matches('-').count(), 4);
        assert_eq!(node_index(&node_id(12)), Some(12));
        assert_eq!(node_index("node-12"), None);
        assert_eq!(node_index("other"), None);
    }
}
