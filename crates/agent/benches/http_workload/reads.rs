//! The read phase (`-reads N`): consistent point reads, `GET /v1/node/<id>` of a
//! random preloaded node, one at a time, through a follower (which asks the leader
//! for its read index, waits to have applied it, and answers from its own copy) and,
//! for comparison, on the leader (which confirms its leadership with a heartbeat
//! round). Issue 52 asks for the follower's p50 and p99.

use std::time::Instant;

use schedstate_agent::{Client, ReadOptions};
use serde_json::json;

use crate::Flags;
use crate::cluster::Cluster;
use crate::report::{Out, latency_json, latency_text};
use crate::splitmix::SplitMix64;
use crate::writes::Work;

/// `n` consistent point reads through `client`, one at a time; their latencies (ns).
async fn point_reads(client: &Client, work: &Work, n: usize, seed: u64) -> Vec<i64> {
    let mut g = SplitMix64(seed);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let id = work.ds.node_ids[g.intn(work.ds.nodes)].to_string();
        let t = Instant::now();
        let r = client.node(&id, ReadOptions::default()).await;
        samples.push(i64::try_from(t.elapsed().as_nanos()).unwrap_or(i64::MAX));
        assert!(r.expect("point read").value.is_some(), "node {id} missing");
    }
    samples
}

/// Runs the read phase: a line in the table and `reads` in the JSON.
pub async fn run_reads(f: &Flags, out: &mut Out, cluster: &Cluster, leader: usize, work: &Work) {
    let follower = (leader + 1) % cluster.clients.len();
    // A few reads first, so that neither measurement pays for opening a connection.
    point_reads(&cluster.clients[follower], work, 10, f.seed).await;
    point_reads(&cluster.clients[leader], work, 10, f.seed).await;
    let mut on_follower =
        point_reads(&cluster.clients[follower], work, f.reads, f.seed ^ 0x5EAD).await;
    let mut on_leader = point_reads(&cluster.clients[leader], work, f.reads, f.seed ^ 0x1EAD).await;
    let (on_follower, on_leader) = (latency_json(&mut on_follower), latency_json(&mut on_leader));
    out.line(format!(
        "reads: consistent GET /v1/node/<id>, one at a time, {} each: through a follower {}; on the leader {}",
        f.reads,
        latency_text(&on_follower),
        latency_text(&on_leader)
    ));
    out.put(
        "reads",
        json!({ "n": f.reads, "follower": on_follower, "leader": on_leader }),
    );
}
