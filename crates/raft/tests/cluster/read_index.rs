//! ReadIndex: consistent reads on a follower (`Server::read_index`) — a write the
//! leader acknowledged is seen through a follower, thousands of concurrent reads
//! share a few RPCs, a follower cut off from the leader says so promptly, and a
//! leader too old for the RPC is named for the caller's fallback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use schedstate::state::Command;
use schedstate_raft::{
    ClusterError, Committed, Network, NodeId, ProposeError, READ_INDEX_WAIT, ReadIndexError,
    Router, RouterNetwork, RpcFailure, RpcResult, Server, ServerOptions, TypeConfig, WriteKey,
};

use crate::support::{Cluster, DEADLINE, marker_node, propose_until_known};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_leader_acknowledged_is_read_through_every_follower() {
    let cluster = Cluster::start(3, ServerOptions::default()).await;
    for seq in 0..40 {
        let node = marker_node("ryw", seq);
        let index = propose_until_known(&cluster, &node).await;
        // A server other than the leader that took the write (if the leadership
        // moved meanwhile, perhaps the new leader: its own confirmation then).
        let leader = cluster.wait_leader(&[]).await.id();
        let others: Vec<_> = cluster
            .live()
            .into_iter()
            .filter(|s| s.id() != leader)
            .collect();
        let f = &others[seq as usize % others.len()];
        let start = Instant::now();
        let read = loop {
            // A round the leader could not confirm (an election on a loaded
            // machine) is an error, retried as a client would.
            match f.read_index(DEADLINE).await {
                Ok(read) => break read,
                Err(e) => assert!(start.elapsed() < DEADLINE, "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(read >= index, "read index {read} below the write's {index}");
        assert!(
            f.read_stale().view().node(node.id.as_str()).is_some(),
            "server {} does not see write {seq} after its read index",
            f.id()
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_concurrent_reads_on_a_follower_share_a_few_rpcs() {
    let cluster = Cluster::start(3, ServerOptions::default()).await;
    let leader = cluster.wait_leader(&[]).await;
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != leader.id())
        .unwrap();
    // Each RPC takes a while, as across a network: reads pile up behind each round.
    cluster.router.set_delay(Duration::from_millis(5));
    let before = follower.read_index_rounds();
    let reads = 15_000;
    let mut tasks = Vec::new();
    for _ in 0..reads {
        let f = follower.clone();
        // A round the leader could not confirm in time (a loaded machine misses
        // openraft's one-heartbeat timeout) fails every read it covered; a client
        // retries those.
        tasks.push(tokio::spawn(async move {
            let mut tries = 0;
            loop {
                match f.read_index(DEADLINE).await {
                    Ok(index) => return index,
                    Err(e) if tries < 20 => {
                        tries += 1;
                        eprintln!("retrying a read: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rounds = follower.read_index_rounds() - before;
    eprintln!("{reads} concurrent reads on a follower: {rounds} ReadIndex rounds");
    cluster.router.set_delay(Duration::ZERO);
    // Measured: 3 rounds for 15,000 reads (2 cores, debug build).
    assert!(
        (1..=100).contains(&rounds),
        "{rounds} ReadIndex rounds for {reads} reads"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_the_leader_refuses_promptly_and_recovers() {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    let leader = cluster.wait_leader(&[]).await;
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != leader.id())
        .unwrap();
    let others: Vec<u64> = (1..=3).filter(|&id| id != follower.id()).collect();
    cluster.router.partition(&[&[follower.id()], &others]);
    // Writes go on in the majority; the follower must not serve reads without them.
    let written = propose_until_known(&cluster, &marker_node("cut", 0)).await;
    let start = Instant::now();
    let e = follower.read_index(DEADLINE).await.unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(
            e,
            ReadIndexError::Unreachable { .. }
                | ReadIndexError::NoLeader
                | ReadIndexError::LeaderMoved { .. }
                | ReadIndexError::Refused(_)
        ),
        "{e:?}"
    );
    assert!(took < READ_INDEX_WAIT * 2, "refused after {took:?}");
    assert!(follower.last_applied() < written);
    cluster.router.heal();
    let start = Instant::now();
    loop {
        match follower.read_index(Duration::from_secs(5)).await {
            Ok(index) => {
                assert!(index >= written);
                assert!(follower.last_applied() >= written);
                break;
            }
            Err(e) => assert!(start.elapsed() < DEADLINE, "after the heal: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.shutdown().await;
}

/// The network of a cluster whose servers predate ReadIndex, as a newer follower
/// sees it: every RPC goes through, a ReadIndex is refused as undecodable (the
/// agent's transport reports an older server's 400 answer so).
#[derive(Clone)]
struct OlderServers(RouterNetwork);

impl Network for OlderServers {
    async fn append_entries(
        &self,
        target: NodeId,
        addr: &str,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        self.0.append_entries(target, addr, rpc).await
    }

    async fn vote(
        &self,
        target: NodeId,
        addr: &str,
        rpc: VoteRequest<NodeId>,
    ) -> RpcResult<VoteResponse<NodeId>> {
        self.0.vote(target, addr, rpc).await
    }

    async fn install_snapshot(
        &self,
        target: NodeId,
        addr: &str,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        self.0.install_snapshot(target, addr, rpc).await
    }

    async fn forward(
        &self,
        target: NodeId,
        addr: &str,
        command: Command,
        key: Option<WriteKey>,
    ) -> Result<Result<Committed, ProposeError>, RpcFailure> {
        self.0.forward(target, addr, command, key).await
    }

    async fn pre_vote(
        &self,
        target: NodeId,
        addr: &str,
        request: schedstate_raft::pre_vote::PreVoteRequest,
    ) -> Result<schedstate_raft::pre_vote::PreVoteAnswer, RpcFailure> {
        self.0.pre_vote(target, addr, request).await
    }

    async fn timeout_now(
        &self,
        target: NodeId,
        addr: &str,
        request: schedstate_raft::transfer::TimeoutNowRequest,
    ) -> Result<schedstate_raft::transfer::TimeoutNowAnswer, RpcFailure> {
        self.0.timeout_now(target, addr, request).await
    }

    async fn read_index(
        &self,
        target: NodeId,
        _addr: &str,
    ) -> Result<Result<u64, ClusterError>, RpcFailure> {
        Err(RpcFailure::Protocol {
            target,
            reason: "answered 400 Bad Request: malformed RPC".into(),
        })
    }

    async fn formats(&self, target: NodeId, addr: &str) -> Result<u32, RpcFailure> {
        self.0.formats(target, addr).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_does_not_know_read_index_is_named_for_the_fallback() {
    let root = tempfile::tempdir().unwrap();
    let router = Router::new();
    let mut servers = Vec::new();
    for id in 1..=3 {
        let net = OlderServers(router.network(id));
        let dir = root.path().join(format!("s{id}"));
        let s = Server::open(id, &dir, ServerOptions::default(), net)
            .await
            .unwrap();
        router.add(s.clone());
        servers.push(s);
    }
    servers[0]
        .initialize((1..=3).map(|id| (id, format!("server-{id}"))))
        .await
        .unwrap();
    let leader = servers[0].wait_for_leader(DEADLINE).await.unwrap();
    for s in &servers {
        s.wait_for_leader(DEADLINE).await.unwrap();
    }
    let follower = servers.iter().find(|s| s.id() != leader).unwrap();
    match follower.read_index(DEADLINE).await {
        Err(ReadIndexError::Unsupported {
            leader: named,
            address,
            ..
        }) => {
            assert_eq!(named, leader);
            assert_eq!(address, format!("server-{leader}"));
        }
        other => panic!("{other:?}"),
    }
    // The leader itself needs no RPC.
    let l = servers.iter().find(|s| s.id() == leader).unwrap();
    assert!(l.read_index(DEADLINE).await.is_ok());
    for s in &servers {
        s.shutdown().await;
    }
}
