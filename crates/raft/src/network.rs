//! How one server reaches the others: the [`Network`] trait, and the adapter that
//! makes any implementation openraft's network.
//!
//! A [`Network`] value belongs to one server (it knows who is sending, so a test
//! router can cut links). It carries the three Raft RPCs and three of ours: forwarding a
//! proposal to the leader, asking it for a read index (a follower's consistent
//! read, [`Server::read_index`](crate::Server::read_index)), and asking a voter
//! whether it would vote for this server ([`crate::pre_vote`]). Two implementations:
//! [`Router`](crate::Router), in process, able to drop, delay and partition;
//! [`TcpNetwork`](crate::TcpNetwork), over TCP.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use schedstate::state::Command;

use crate::pre_vote::{PreVoteAnswer, PreVoteRequest};
use crate::transfer::{TimeoutNowAnswer, TimeoutNowRequest};
use crate::{ClusterError, Committed, NodeId, ProposeError, TypeConfig, WriteKey};

/// Why an RPC got no answer from the remote Raft.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcFailure {
    /// The target could not be reached (no route, refused, cut, dropped, timed out).
    #[error("server {target} unreachable: {reason}")]
    Unreachable {
        /// The server the RPC was for.
        target: NodeId,
        /// Why.
        reason: String,
    },
    /// The answer could not be read (a protocol error on the wire).
    #[error("bad answer from server {target}: {reason}")]
    Protocol {
        /// The server the RPC was for.
        target: NodeId,
        /// What was wrong.
        reason: String,
    },
    /// The request was too large to send: openraft sends fewer entries next time.
    #[error("an RPC to server {target} over the size limit; at most {entries_hint} entries fit")]
    PayloadTooLarge {
        /// The server the RPC was for.
        target: NodeId,
        /// How many entries would fit.
        entries_hint: u64,
    },
}

/// The result of one RPC: the remote Raft's own answer, or why there was none.
pub type RpcResult<T, E = RaftError<NodeId>> = Result<Result<T, E>, RpcFailure>;

/// A boxed, sendable future (what a forwarded proposal returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One server's way to reach the others.
pub trait Network: Clone + Send + Sync + 'static {
    /// Sends entries (or a heartbeat) to `target` at `addr`.
    fn append_entries(
        &self,
        target: NodeId,
        addr: &str,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> impl Future<Output = RpcResult<AppendEntriesResponse<NodeId>>> + Send;

    /// Asks `target` for its vote.
    fn vote(
        &self,
        target: NodeId,
        addr: &str,
        rpc: VoteRequest<NodeId>,
    ) -> impl Future<Output = RpcResult<VoteResponse<NodeId>>> + Send;

    /// Sends one chunk of a snapshot.
    fn install_snapshot(
        &self,
        target: NodeId,
        addr: &str,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> impl Future<
        Output = RpcResult<
            InstallSnapshotResponse<NodeId>,
            RaftError<NodeId, InstallSnapshotError>,
        >,
    > + Send;

    /// Proposes `command` with its write key, if any, on `target` (the leader, as far
    /// as the caller knows) and waits for its answer.
    fn forward(
        &self,
        target: NodeId,
        addr: &str,
        command: Command,
        key: Option<WriteKey>,
    ) -> impl Future<Output = Result<Result<Committed, ProposeError>, RpcFailure>> + Send;

    /// Asks `target` (the leader, as far as the caller knows) for a read index: the
    /// index it had applied once it confirmed its leadership with a quorum, in a
    /// round that started after the request arrived. A target that does not know the
    /// RPC (an older server) fails with [`RpcFailure::Protocol`].
    fn read_index(
        &self,
        target: NodeId,
        addr: &str,
    ) -> impl Future<Output = Result<Result<u64, ClusterError>, RpcFailure>> + Send;

    /// Asks `target` whether it would vote for this server ([`crate::pre_vote`]). A
    /// target that does not know the RPC (an older server) fails with
    /// [`RpcFailure::Protocol`], which counts as a refusal.
    fn pre_vote(
        &self,
        target: NodeId,
        addr: &str,
        request: PreVoteRequest,
    ) -> impl Future<Output = Result<PreVoteAnswer, RpcFailure>> + Send;

    /// Tells `target` to stand for election now: this server, its leader, stepped
    /// down and voted for it ([`crate::transfer`]).
    fn timeout_now(
        &self,
        target: NodeId,
        addr: &str,
        request: TimeoutNowRequest,
    ) -> impl Future<Output = Result<TimeoutNowAnswer, RpcFailure>> + Send;

    /// Asks `target` for the newest store format it reads (rolling upgrades,
    /// [`Server::cluster_format`](crate::Server::cluster_format)). A target that does
    /// not know the RPC (a server of the previous release) fails with
    /// [`RpcFailure::Protocol`], which counts as format 2.
    fn formats(
        &self,
        target: NodeId,
        addr: &str,
    ) -> impl Future<Output = Result<u32, RpcFailure>> + Send;
}

/// A [`Network`] without its type: what the server handle and openraft's adapter hold.
///
/// Why erase it: openraft's whole Raft core is generic over the network, and a generic
/// is compiled again in every crate that names a concrete network (the agent, the
/// CLI binary, each test binary). Behind this trait the core is compiled once, here,
/// for one network type; each RPC pays one boxed future, next to a network round trip.
pub(crate) trait ErasedNetwork: Send + Sync + 'static {
    fn append_entries<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> BoxFuture<'a, RpcResult<AppendEntriesResponse<NodeId>>>;

    fn vote<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        rpc: VoteRequest<NodeId>,
    ) -> BoxFuture<'a, RpcResult<VoteResponse<NodeId>>>;

    #[allow(clippy::type_complexity)]
    fn install_snapshot<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> BoxFuture<
        'a,
        RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    >;

    fn forward<'a>(
        &'a self,
        target: NodeId,
        addr: String,
        command: Command,
        key: Option<WriteKey>,
    ) -> BoxFuture<'a, Result<Result<Committed, ProposeError>, RpcFailure>>;

    fn read_index(
        &self,
        target: NodeId,
        addr: String,
    ) -> BoxFuture<'_, Result<Result<u64, ClusterError>, RpcFailure>>;

    fn pre_vote(
        &self,
        target: NodeId,
        addr: String,
        request: PreVoteRequest,
    ) -> BoxFuture<'_, Result<PreVoteAnswer, RpcFailure>>;

    fn timeout_now(
        &self,
        target: NodeId,
        addr: String,
        request: TimeoutNowRequest,
    ) -> BoxFuture<'_, Result<TimeoutNowAnswer, RpcFailure>>;

    fn formats(&self, target: NodeId, addr: String) -> BoxFuture<'_, Result<u32, RpcFailure>>;
}

impl<N: Network> ErasedNetwork for N {
    fn append_entries<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> BoxFuture<'a, RpcResult<AppendEntriesResponse<NodeId>>> {
        Box::pin(Network::append_entries(self, target, addr, rpc))
    }

    fn vote<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        rpc: VoteRequest<NodeId>,
    ) -> BoxFuture<'a, RpcResult<VoteResponse<NodeId>>> {
        Box::pin(Network::vote(self, target, addr, rpc))
    }

    fn install_snapshot<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> BoxFuture<
        'a,
        RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Box::pin(Network::install_snapshot(self, target, addr, rpc))
    }

    fn forward<'a>(
        &'a self,
        target: NodeId,
        addr: String,
        command: Command,
        key: Option<WriteKey>,
    ) -> BoxFuture<'a, Result<Result<Committed, ProposeError>, RpcFailure>> {
        Box::pin(async move { Network::forward(self, target, &addr, command, key).await })
    }

    fn read_index(
        &self,
        target: NodeId,
        addr: String,
    ) -> BoxFuture<'_, Result<Result<u64, ClusterError>, RpcFailure>> {
        Box::pin(async move { Network::read_index(self, target, &addr).await })
    }

    fn pre_vote(
        &self,
        target: NodeId,
        addr: String,
        request: PreVoteRequest,
    ) -> BoxFuture<'_, Result<PreVoteAnswer, RpcFailure>> {
        Box::pin(async move { Network::pre_vote(self, target, &addr, request).await })
    }

    fn timeout_now(
        &self,
        target: NodeId,
        addr: String,
        request: TimeoutNowRequest,
    ) -> BoxFuture<'_, Result<TimeoutNowAnswer, RpcFailure>> {
        Box::pin(async move { Network::timeout_now(self, target, &addr, request).await })
    }

    fn formats(&self, target: NodeId, addr: String) -> BoxFuture<'_, Result<u32, RpcFailure>> {
        Box::pin(async move { Network::formats(self, target, &addr).await })
    }
}

/// openraft's network factory over an erased [`Network`].
pub(crate) struct Factory(pub Arc<dyn ErasedNetwork>);

/// openraft's connection to one target over an erased [`Network`].
pub(crate) struct Connection {
    net: Arc<dyn ErasedNetwork>,
    target: NodeId,
    addr: String,
}

impl RaftNetworkFactory<TypeConfig> for Factory {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        Connection {
            net: self.0.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

#[derive(Debug)]
struct Failure(RpcFailure);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Failure {}

type Answer<T, E> = Result<T, RaftError<NodeId, E>>;
type OpenraftRpcError<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

/// Maps our failures to openraft's: unreachable (openraft backs off and retries) or a
/// network error.
fn rpc_error<T, E: std::error::Error>(
    result: RpcResult<T, RaftError<NodeId, E>>,
) -> Result<Answer<T, E>, OpenraftRpcError<E>> {
    match result {
        Ok(answer) => Ok(answer),
        Err(f @ RpcFailure::Unreachable { .. }) => {
            Err(RPCError::Unreachable(Unreachable::new(&Failure(f))))
        }
        Err(f @ RpcFailure::Protocol { .. }) => {
            Err(RPCError::Network(NetworkError::new(&Failure(f))))
        }
        Err(RpcFailure::PayloadTooLarge { entries_hint, .. }) => Err(RPCError::PayloadTooLarge(
            PayloadTooLarge::new_entries_hint(entries_hint.max(1)),
        )),
    }
}

fn remote<T, E: std::error::Error>(
    target: NodeId,
    answer: Answer<T, E>,
) -> Result<T, OpenraftRpcError<E>> {
    answer.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
}

/// Bounds an RPC by openraft's hard time-to-live.
async fn within<T, E>(
    ttl: std::time::Duration,
    target: NodeId,
    fut: impl Future<Output = RpcResult<T, RaftError<NodeId, E>>>,
) -> RpcResult<T, RaftError<NodeId, E>> {
    match tokio::time::timeout(ttl, fut).await {
        Ok(r) => r,
        Err(_) => Err(RpcFailure::Unreachable {
            target,
            reason: format!("no answer within {ttl:?}"),
        }),
    }
}

/// The pauses between retries to a follower that did not answer: 20 ms, doubling to
/// at most 200 ms. openraft's own default is 500 ms every time, which alone kept a
/// restarted server waiting up to half a second for the leader's first entries; a
/// connection refused by a dead server costs microseconds, so trying more often is
/// cheap, and the cap keeps a long outage from being polled hard.
fn unreachable_backoff() -> Backoff {
    Backoff::new((0u32..).map(|i| Duration::from_millis((20u64 << i.min(4)).min(200))))
}

impl RaftNetwork<TypeConfig> for Connection {
    fn backoff(&self) -> Backoff {
        unreachable_backoff()
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let answer = within(
            option.hard_ttl(),
            self.target,
            self.net.append_entries(self.target, &self.addr, rpc),
        )
        .await;
        remote(self.target, rpc_error(answer)?)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let answer = within(
            option.hard_ttl(),
            self.target,
            self.net.install_snapshot(self.target, &self.addr, rpc),
        )
        .await;
        remote(self.target, rpc_error(answer)?)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let answer = within(
            option.hard_ttl(),
            self.target,
            self.net.vote(self.target, &self.addr, rpc),
        )
        .await;
        remote(self.target, rpc_error(answer)?)
    }
}
