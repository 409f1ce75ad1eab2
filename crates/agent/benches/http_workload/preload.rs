//! The preload phase: the dataset's nodes and their allocations, in batches, through
//! the leader; done when every agent has applied the last batch.

use std::time::{Duration, Instant};

use schedstate::model::{Allocation, CsiVolume, Node};
use schedstate::state::Command;
use schedstate_agent::ReadOptions;
use serde_json::json;

use crate::Flags;
use crate::cluster::Cluster;
use crate::dataset::Dataset;
use crate::report::{Out, memory_json, round2};
use crate::system::{CpuMark, cpu_cell};
use crate::writes::Work;

/// Writes the dataset's `-nodes` nodes and their allocations to the leader of
/// `cluster` (agent `li`), `UpsertAllocs` then `UpsertNodes` per `-batch` nodes, and
/// waits until all three agents have them; what the later phases write from.
pub async fn preload(f: &Flags, out: &mut Out, cluster: &Cluster, li: usize) -> Work {
    let pids = cluster.pids();
    let leader = &cluster.clients[li];
    let ds = Dataset::generate(f.nodes, f.allocs_per, f.plugins, f.seed);
    let (nodes, allocs) = ds.objects();
    let cpu = CpuMark::new(&pids);
    let t = Instant::now();
    let mut last = 0;
    let batches = f.nodes.div_ceil(f.batch);
    for b in 0..batches {
        let lo = b * f.batch;
        let hi = (lo + f.batch).min(f.nodes);
        let batch_allocs: Vec<Allocation> = allocs[lo * f.allocs_per..hi * f.allocs_per]
            .iter()
            .map(|a| (**a).clone())
            .collect();
        let batch_nodes: Vec<Node> = nodes[lo..hi].iter().map(|n| (**n).clone()).collect();
        leader
            .apply(&Command::UpsertAllocs {
                allocs: batch_allocs,
            })
            .await
            .expect("preload allocations");
        last = leader
            .apply(&Command::UpsertNodes { nodes: batch_nodes })
            .await
            .expect("preload nodes");
        if f.pace > 0 && (b + 1) % f.pace == 0 {
            // Every agent has this batch before the next ones go: no follower falls
            // behind by more than `-pace` batches.
            all_applied(cluster, LastWrite::Node(ds.node_ids[hi - 1].as_ref()), last).await;
        }
    }
    // Volumes, registered a batch at a time, each on one of the plugins in turn.
    for lo in (0..f.volumes).step_by(f.batch.max(1) * 10) {
        let hi = (lo + f.batch.max(1) * 10).min(f.volumes);
        let volumes = (lo..hi)
            .map(|v| {
                let id = format!("vol-{v:07}");
                let plugin = ds.plugin_ids[v % ds.plugin_ids.len()].clone();
                let mut vol = CsiVolume::new("default", id.as_str(), plugin);
                vol.name = id;
                vol
            })
            .collect();
        last = leader
            .apply(&Command::RegisterCsiVolumes { volumes })
            .await
            .expect("preload volumes");
    }
    let total = t.elapsed();
    let last_volume = format!("vol-{:07}", f.volumes.saturating_sub(1));
    let row = if f.volumes > 0 {
        LastWrite::Volume(&last_volume)
    } else {
        LastWrite::Node(ds.node_ids[f.nodes - 1].as_ref())
    };
    all_applied(cluster, row, last).await;
    let all = t.elapsed();
    let cpu_json = cpu.json(&pids);
    out.line(format!(
        "preload: {} nodes + {} allocs + {} volumes in {} batches ({} entries): {:.0} ms, on all 3 agents after {:.0} ms, {:.0} nodes/s; cores agents/bench/foreign {}",
        f.nodes,
        f.nodes * f.allocs_per,
        f.volumes,
        batches,
        2 * batches,
        total.as_secs_f64() * 1e3,
        all.as_secs_f64() * 1e3,
        f.nodes as f64 / total.as_secs_f64(),
        cpu_cell(&cpu_json)
    ));
    out.put(
        "preload",
        json!({
            "nodes": f.nodes,
            "allocs": f.nodes * f.allocs_per,
            "volumes": f.volumes,
            "batches": batches,
            "entries": 2 * batches,
            "total_ms": round2(total.as_secs_f64() * 1e3),
            "all_applied_ms": round2(all.as_secs_f64() * 1e3),
            "last_index": last,
            "cpu": cpu_json,
            "memory": memory_json(&cluster.memory()),
        }),
    );
    drop(allocs);
    Work::new(ds, nodes, f.write_nodes)
}

/// The row a preload's last write wrote, read back to know it was applied.
enum LastWrite<'a> {
    /// The node with this id.
    Node(&'a str),
    /// The volume with this id, in the default namespace.
    Volume(&'a str),
}

/// Waits until every agent has applied `last`, the write of `row`: a stale
/// blocking read of it on each.
async fn all_applied(cluster: &Cluster, row: LastWrite<'_>, last: u64) {
    for c in &cluster.clients {
        let opts = ReadOptions {
            index: last - 1,
            wait: Some(Duration::from_secs(60)),
            stale: true,
        };
        let (index, present) = match row {
            LastWrite::Node(id) => {
                let r = c.node(id, opts).await.expect("read after preload");
                (r.index, r.value.is_some())
            }
            LastWrite::Volume(id) => {
                let r = c
                    .volume("default", id, opts)
                    .await
                    .expect("read after preload");
                (r.index, r.value.is_some())
            }
        };
        assert!(index >= last && present, "preload not applied");
    }
}
