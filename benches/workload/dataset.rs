//! The dataset (RESULTS.md §4.2): ids, plugin assignment and row objects drawn with the
//! peer's SplitMix64, and the peer's `# dataset …` check line.

use std::sync::Arc;

use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiNodeInfo, DesiredStatus, Id, Node,
};

use crate::splitmix::SplitMix64;

pub struct Dataset {
    pub nodes: usize,
    pub allocs_per: usize,
    pub plugins: usize,
    pub plugin_ids: Vec<Id>,
    pub node_ids: Vec<Id>,
    /// Two distinct node-plugin indexes per node.
    pub node_plugins: Vec<[usize; 2]>,
    /// Controller fingerprint for `node_plugins[i][0]`.
    pub has_ctrl: Vec<bool>,
    /// Node fingerprint `[0]` references a never-inserted alloc.
    pub missing_alloc: Vec<bool>,
    /// Allocs of node i: `[i * allocs_per, (i + 1) * allocs_per)`.
    pub alloc_ids: Vec<Id>,
}

fn provider(p: usize) -> String {
    format!("org.example.csi.driver-{p:02}")
}

fn missing_alloc_id(i: usize) -> String {
    format!("ffffffff-0000-0000-0000-{i:012x}")
}

impl Dataset {
    pub fn generate(nodes: usize, allocs_per: usize, plugins: usize, seed: u64) -> Dataset {
        let mut g = SplitMix64(seed);
        let mut ds = Dataset {
            nodes,
            allocs_per,
            plugins,
            plugin_ids: (0..plugins)
                .map(|p| Id::from(format!("plugin-{p:02}")))
                .collect(),
            node_ids: Vec::with_capacity(nodes),
            node_plugins: Vec::with_capacity(nodes),
            has_ctrl: Vec::with_capacity(nodes),
            missing_alloc: Vec::with_capacity(nodes),
            alloc_ids: Vec::with_capacity(nodes * allocs_per),
        };
        for i in 0..nodes {
            ds.node_ids.push(Id::from(g.uuid()));
            let p1 = g.intn(plugins);
            let p2 = (p1 + 1 + g.intn(plugins - 1)) % plugins;
            ds.node_plugins.push([p1, p2]);
            ds.has_ctrl.push(i % 10 == 0);
            ds.missing_alloc.push(i % 20 == 7);
            for _ in 0..allocs_per {
                ds.alloc_ids.push(Id::from(g.uuid()));
            }
        }
        ds
    }

    /// The peer's check line, byte for byte.
    pub fn check_line(&self) -> String {
        let mut nc = vec![0usize; self.plugins];
        let mut cc = vec![0usize; self.plugins];
        for (i, p) in self.node_plugins.iter().enumerate() {
            nc[p[0]] += 1;
            nc[p[1]] += 1;
            if self.has_ctrl[i] {
                cc[p[0]] += 1;
            }
        }
        let join = |v: &[usize]| {
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for id in self.node_ids.iter().chain(&self.alloc_ids) {
            for &b in id.as_bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01B3);
            }
        }
        format!(
            "# dataset node0={} alloc0={} node0_plugins={},{} plugin_nodes={} plugin_ctrls={} fnv1a64_ids={h:016x}",
            self.node_ids[0],
            self.alloc_ids[0],
            self.node_plugins[0][0],
            self.node_plugins[0][1],
            join(&nc),
            join(&cc)
        )
    }

    pub fn node_fingerprint(&self, i: usize, k: usize) -> Arc<CsiInfo> {
        let p = self.node_plugins[i][k];
        let alloc_id = if k == 0 && self.missing_alloc[i] {
            Id::from(missing_alloc_id(i))
        } else {
            self.alloc_ids[i * self.allocs_per + (k % self.allocs_per)].clone()
        };
        Arc::new(CsiInfo {
            plugin_id: self.plugin_ids[p].clone(),
            alloc_id,
            healthy: true,
            health_description: "healthy".into(),
            provider: provider(p).into(),
            provider_version: "1.2.3".into(),
            requires_controller_plugin: true,
            node_info: Some(CsiNodeInfo {
                id: self.node_ids[i].to_string().into(),
                max_volumes: 64,
                accessible_topology: None,
                requires_node_stage_volume: true,
            }),
            ..Default::default()
        })
    }

    /// The row objects, built before any timing (as the peer does).
    pub fn objects(&self) -> (Vec<Arc<Node>>, Vec<Arc<Allocation>>) {
        // Shared, as the peer's string literals are: one "default", one "tg".
        let default_ns = Id::from("default");
        let task_group = Id::from("tg");
        let mut nodes = Vec::with_capacity(self.nodes);
        let mut allocs = Vec::with_capacity(self.nodes * self.allocs_per);
        for i in 0..self.nodes {
            let nid = &self.node_ids[i];
            let mut n = Node::new(nid.clone(), format!("node-{i:05}"));
            for k in 0..2 {
                let f = self.node_fingerprint(i, k);
                n.csi_node_plugins.insert(f.plugin_id.clone(), f);
            }
            if self.has_ctrl[i] {
                let p = self.node_plugins[i][0];
                let f = Arc::new(CsiInfo {
                    plugin_id: self.plugin_ids[p].clone(),
                    alloc_id: self.alloc_ids[i * self.allocs_per + (2 % self.allocs_per)].clone(),
                    healthy: true,
                    health_description: "healthy".into(),
                    provider: provider(p).into(),
                    provider_version: "1.2.3".into(),
                    requires_controller_plugin: true,
                    controller_info: Some(CsiControllerInfo {
                        supports_attach_detach: true,
                        supports_list_volumes: true,
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                n.csi_controller_plugins.insert(f.plugin_id.clone(), f);
            }
            nodes.push(Arc::new(n));
            for j in 0..self.allocs_per {
                let k = i * self.allocs_per + j;
                allocs.push(Arc::new(Allocation {
                    id: self.alloc_ids[k].clone(),
                    namespace: default_ns.clone(),
                    job_id: Id::from(format!("job-{:03}", k % 500)),
                    job_version: 0,
                    task_group: task_group.clone(),
                    node_id: nid.clone(),
                    desired_status: DesiredStatus::Run,
                    client_status: ClientStatus::Running,
                    csi_volume_requests: Default::default(),
                    create_index: 0,
                    modify_index: 0,
                }));
            }
        }
        (nodes, allocs)
    }
}
