//! The in-process network: servers in one process call each other directly, through
//! a router that can cut links (partitions), delay messages and drop a share of them —
//! for tests and examples.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use parking_lot::Mutex;
use schedstate::state::Command;

use crate::network::{Network, RpcFailure, RpcResult};
use crate::pre_vote::{PreVoteAnswer, PreVoteRequest};
use crate::transfer::{TimeoutNowAnswer, TimeoutNowRequest};
use crate::wire::{RpcAnswer, RpcRequest, answer_or_refuse, unexpected};
use crate::{ClusterError, Committed, NodeId, ProposeError, Server, TypeConfig, WriteKey};

/// Connects servers of one process. Cheap to clone.
///
/// ```
/// use schedstate_raft::Router;
/// let router = Router::new();
/// router.partition(&[&[1], &[2, 3]]); // 1 cannot reach 2 or 3, nor they it
/// assert!(!router.connected(1, 2));
/// assert!(router.connected(2, 3));
/// router.heal();
/// assert!(router.connected(1, 2));
/// ```
#[derive(Clone, Default)]
pub struct Router {
    state: Arc<Mutex<RouterState>>,
}

#[derive(Default)]
struct RouterState {
    servers: HashMap<NodeId, Server>,
    cut: HashSet<(NodeId, NodeId)>,
    delay: Duration,
    drop_percent: u8,
    append_answer_delay: Duration,
}

impl Router {
    /// A router with no servers and every link up.
    pub fn new() -> Self {
        Self::default()
    }

    /// The network server `from` sends through.
    pub fn network(&self, from: NodeId) -> RouterNetwork {
        RouterNetwork {
            router: self.clone(),
            from,
        }
    }

    /// Makes `server` reachable (replacing one with the same id).
    pub fn add(&self, server: Server) {
        self.state.lock().servers.insert(server.id(), server);
    }

    /// Makes server `id` unreachable and returns it: what a crash looks like to the
    /// others.
    pub fn remove(&self, id: NodeId) -> Option<Server> {
        self.state.lock().servers.remove(&id)
    }

    /// The server `id`, if reachable.
    pub fn server(&self, id: NodeId) -> Option<Server> {
        self.state.lock().servers.get(&id).cloned()
    }

    /// Splits the servers into `groups`: every link between servers of different
    /// groups is cut (both ways), every other link is up (an earlier partition is
    /// replaced, not added to).
    pub fn partition(&self, groups: &[&[NodeId]]) {
        let mut s = self.state.lock();
        s.cut.clear();
        for (i, a) in groups.iter().enumerate() {
            for b in &groups[i + 1..] {
                for &x in *a {
                    for &y in *b {
                        s.cut.insert((x, y));
                        s.cut.insert((y, x));
                    }
                }
            }
        }
    }

    /// Cuts the one link from `from` to `to`: what `from` sends to `to` (requests,
    /// and answers to `to`'s requests) is lost; the other way stays up. Added to the
    /// links already cut.
    pub fn cut_one_way(&self, from: NodeId, to: NodeId) {
        self.state.lock().cut.insert((from, to));
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.state.lock().cut.clear();
    }

    /// Whether `from` can reach `to`.
    pub fn connected(&self, from: NodeId, to: NodeId) -> bool {
        !self.state.lock().cut.contains(&(from, to))
    }

    /// Delays every message by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.state.lock().delay = delay;
    }

    /// Holds every AppendEntries answer back by `delay` after the receiver's Raft gave
    /// it, while every other RPC is answered at once: servers whose disks are slow
    /// (Raft answers only once the append ahead is durable) but which are up.
    pub fn set_append_answer_delay(&self, delay: Duration) {
        self.state.lock().append_answer_delay = delay;
    }

    /// Drops `percent` % of messages (each request and each answer on its own).
    pub fn set_drop_percent(&self, percent: u8) {
        self.state.lock().drop_percent = percent.min(100);
    }

    /// The target if the link is up and the message is not dropped, after the delay.
    async fn route(&self, from: NodeId, to: NodeId) -> Result<Server, RpcFailure> {
        let (server, delay) = self.check(from, to)?;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(server)
    }

    fn check(&self, from: NodeId, to: NodeId) -> Result<(Server, Duration), RpcFailure> {
        let s = self.state.lock();
        let unreachable = |reason: &str| RpcFailure::Unreachable {
            target: to,
            reason: reason.into(),
        };
        // A server removed from the router (crashed) can no longer send either.
        if !s.servers.contains_key(&from) {
            return Err(unreachable("the sender is down"));
        }
        if s.cut.contains(&(from, to)) {
            return Err(unreachable("link cut"));
        }
        if s.drop_percent > 0 && fastrand::u8(0..100) < s.drop_percent {
            return Err(unreachable("message dropped"));
        }
        let server = s
            .servers
            .get(&to)
            .cloned()
            .ok_or_else(|| unreachable("no such server (down)"))?;
        Ok((server, s.delay))
    }

    /// The answer's way back: the link may have been cut meanwhile.
    fn answer<T>(&self, from: NodeId, to: NodeId, answer: T) -> Result<T, RpcFailure> {
        self.check(to, from).map(|_| answer).map_err(|e| match e {
            // The sender itself may be gone (crashed); its answer is lost with it.
            RpcFailure::Unreachable { .. } => RpcFailure::Unreachable {
                target: to,
                reason: "answer lost".into(),
            },
            other => other,
        })
    }
}

/// One server's view of a [`Router`]. Requests go through the same checks as on a
/// real network ([`answer_or_refuse`]), so every in-process test exercises them.
#[derive(Clone)]
pub struct RouterNetwork {
    router: Router,
    from: NodeId,
}

impl Network for RouterNetwork {
    async fn append_entries(
        &self,
        target: NodeId,
        _addr: &str,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let server = self.router.route(self.from, target).await?;
        let answer = answer_or_refuse(&server, RpcRequest::AppendEntries(rpc)).await;
        let held = self.router.state.lock().append_answer_delay;
        if !held.is_zero() {
            tokio::time::sleep(held).await;
        }
        match answer {
            RpcAnswer::AppendEntries(answer) => self.router.answer(self.from, target, answer),
            other => Err(unexpected(target, other)),
        }
    }

    async fn vote(
        &self,
        target: NodeId,
        _addr: &str,
        rpc: VoteRequest<NodeId>,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let server = self.router.route(self.from, target).await?;
        match answer_or_refuse(&server, RpcRequest::Vote(rpc)).await {
            RpcAnswer::Vote(answer) => self.router.answer(self.from, target, answer),
            other => Err(unexpected(target, other)),
        }
    }

    async fn install_snapshot(
        &self,
        target: NodeId,
        _addr: &str,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let server = self.router.route(self.from, target).await?;
        match answer_or_refuse(&server, RpcRequest::InstallSnapshot(rpc)).await {
            RpcAnswer::InstallSnapshot(answer) => self.router.answer(self.from, target, answer),
            other => Err(unexpected(target, other)),
        }
    }

    async fn forward(
        &self,
        target: NodeId,
        _addr: &str,
        command: Command,
        key: Option<WriteKey>,
    ) -> Result<Result<Committed, ProposeError>, RpcFailure> {
        let server = self.router.route(self.from, target).await?;
        if let Some(refused) = server.refuses_as_older(&command) {
            return Err(unexpected(target, RpcAnswer::Refused(refused.to_string())));
        }
        let answer = server.propose_keyed(command, key).await;
        self.router.answer(self.from, target, answer)
    }

    async fn formats(&self, target: NodeId, _addr: &str) -> Result<u32, RpcFailure> {
        let server = self.router.route(self.from, target).await?;
        match answer_or_refuse(&server, RpcRequest::Formats).await {
            RpcAnswer::Formats(answer) => self.router.answer(self.from, target, answer),
            other => Err(unexpected(target, other)),
        }
    }

    async fn read_index(
        &self,
        target: NodeId,
        _addr: &str,
    ) -> Result<Result<u64, ClusterError>, RpcFailure> {
        let server = self.router.route(self.from, target).await?;
        match answer_or_refuse(&server, RpcRequest::ReadIndex).await {
            RpcAnswer::ReadIndex(answer) => {
                self.router
                    .answer(self.from, target, answer.map_err(Into::into))
            }
            other => Err(unexpected(target, other)),
        }
    }

    async fn pre_vote(
        &self,
        target: NodeId,
        _addr: &str,
        request: PreVoteRequest,
    ) -> Result<PreVoteAnswer, RpcFailure> {
        let server = self.router.route(self.from, target).await?;
        match answer_or_refuse(&server, RpcRequest::PreVote(request)).await {
            RpcAnswer::PreVote(answer) => self.router.answer(self.from, target, answer),
            other => Err(unexpected(target, other)),
        }
    }

    async fn timeout_now(
        &self,
        target: NodeId,
        _addr: &str,
        request: TimeoutNowRequest,
    ) -> Result<TimeoutNowAnswer, RpcFailure> {
        let server = self.router.route(self.from, target).await?;
        match answer_or_refuse(&server, RpcRequest::TimeoutNow(request)).await {
            RpcAnswer::TimeoutNow(answer) => self.router.answer(self.from, target, answer),
            other => Err(unexpected(target, other)),
        }
    }
}
