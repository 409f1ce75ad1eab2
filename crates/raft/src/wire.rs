//! The RPCs between servers as values: what any transport carries.
//!
//! A transport moves one [`RpcRequest`] to the target and brings its [`RpcAnswer`]
//! back; it implements [`Transport`], and every transport is then a [`Network`]. The
//! receiving side hands the request to [`answer_rpc`]. Two transports exist: this
//! crate's [`TcpNetwork`](crate::TcpNetwork) (length-prefixed frames) and the agent's
//! HTTP one (one `POST` per RPC on the public port). Both encode with postcard
//! ([`RpcRequest::encode`], [`RpcRequest::decode`] and the same on the answer), so a
//! request never depends on which transport brought it.

use std::future::Future;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use schedstate::state::Command;
use serde::{Deserialize, Serialize};

use crate::network::{Network, RpcFailure, RpcResult};
use crate::{Committed, NodeId, ProposeError, Server, TypeConfig};

/// One RPC from a server to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcRequest {
    /// Raft's AppendEntries (entries or a heartbeat).
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// Raft's RequestVote.
    Vote(VoteRequest<NodeId>),
    /// One chunk of a snapshot.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A proposal forwarded to the leader.
    Forward(Command),
}

/// The answer to an [`RpcRequest`], of the same kind.
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcAnswer {
    /// The answer to [`RpcRequest::AppendEntries`].
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// The answer to [`RpcRequest::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// The answer to [`RpcRequest::InstallSnapshot`].
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    /// The answer to [`RpcRequest::Forward`].
    Forward(WireOutcome),
}

macro_rules! postcard_codec {
    ($t:ty) => {
        impl $t {
            /// Its bytes on the wire (postcard).
            ///
            /// # Errors
            /// A value postcard cannot encode (does not happen for these types).
            pub fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
                postcard::to_stdvec(self)
            }

            /// Reads one from its bytes.
            ///
            /// # Errors
            /// The bytes are not a value of this type.
            pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
                postcard::from_bytes(bytes)
            }
        }
    };
}

postcard_codec!(RpcRequest);
postcard_codec!(RpcAnswer);

/// A proposal's outcome as it crosses the wire: a refusal as kind and message (the
/// store's error types are not serializable; their kind names them).
#[derive(Debug, Serialize, Deserialize)]
pub enum WireOutcome {
    /// Committed and applied at this index.
    Committed(Committed),
    /// Committed as a no-op: the rules refused it.
    Refused {
        /// The entry's index.
        index: u64,
        /// [`StateError::kind`](schedstate::state::StateError::kind).
        kind: String,
        /// The error's message.
        message: String,
    },
    /// The target is not the leader.
    NotLeader {
        /// The leader it knows of.
        leader: Option<NodeId>,
        /// That leader's address.
        address: Option<String>,
    },
    /// No answer could be had; the outcome is unknown.
    Unavailable(String),
    /// The target is shutting down.
    Stopped,
}

impl From<Result<Committed, ProposeError>> for WireOutcome {
    fn from(r: Result<Committed, ProposeError>) -> Self {
        match r {
            Ok(c) => WireOutcome::Committed(c),
            Err(ProposeError::Refused { index, error }) => WireOutcome::Refused {
                index,
                kind: error.kind().to_string(),
                message: error.to_string(),
            },
            Err(ProposeError::RefusedRemotely {
                index,
                kind,
                message,
            }) => WireOutcome::Refused {
                index,
                kind,
                message,
            },
            Err(ProposeError::NotLeader { leader, address }) => {
                WireOutcome::NotLeader { leader, address }
            }
            Err(ProposeError::Unavailable(why)) => WireOutcome::Unavailable(why),
            Err(ProposeError::Stopped) => WireOutcome::Stopped,
        }
    }
}

impl From<WireOutcome> for Result<Committed, ProposeError> {
    fn from(w: WireOutcome) -> Self {
        match w {
            WireOutcome::Committed(c) => Ok(c),
            WireOutcome::Refused {
                index,
                kind,
                message,
            } => Err(ProposeError::RefusedRemotely {
                index,
                kind,
                message,
            }),
            WireOutcome::NotLeader { leader, address } => {
                Err(ProposeError::NotLeader { leader, address })
            }
            WireOutcome::Unavailable(why) => Err(ProposeError::Unavailable(why)),
            WireOutcome::Stopped => Err(ProposeError::Stopped),
        }
    }
}

/// Answers one RPC on the receiving server: hands it to its Raft (or, for a forwarded
/// proposal, proposes it there) and waits for the result.
pub async fn answer_rpc(server: &Server, request: RpcRequest) -> RpcAnswer {
    match request {
        RpcRequest::AppendEntries(rpc) => {
            RpcAnswer::AppendEntries(server.raft().append_entries(rpc).await)
        }
        RpcRequest::Vote(rpc) => RpcAnswer::Vote(server.raft().vote(rpc).await),
        RpcRequest::InstallSnapshot(rpc) => {
            RpcAnswer::InstallSnapshot(server.raft().install_snapshot(rpc).await)
        }
        RpcRequest::Forward(command) => RpcAnswer::Forward(server.propose(command).await.into()),
    }
}

/// A way to carry one [`RpcRequest`] to a server and bring back its answer. Every
/// transport is a [`Network`].
pub trait Transport: Clone + Send + Sync + 'static {
    /// Sends `request` to server `target` at `addr` and waits for the answer.
    fn call(
        &self,
        target: NodeId,
        addr: &str,
        request: RpcRequest,
    ) -> impl Future<Output = Result<RpcAnswer, RpcFailure>> + Send;
}

fn unexpected(target: NodeId) -> RpcFailure {
    RpcFailure::Protocol {
        target,
        reason: "answer of another kind than the request".into(),
    }
}

impl<T: Transport> Network for T {
    async fn append_entries(
        &self,
        target: NodeId,
        addr: &str,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        match self
            .call(target, addr, RpcRequest::AppendEntries(rpc))
            .await?
        {
            RpcAnswer::AppendEntries(a) => Ok(a),
            _ => Err(unexpected(target)),
        }
    }

    async fn vote(
        &self,
        target: NodeId,
        addr: &str,
        rpc: VoteRequest<NodeId>,
    ) -> RpcResult<VoteResponse<NodeId>> {
        match self.call(target, addr, RpcRequest::Vote(rpc)).await? {
            RpcAnswer::Vote(a) => Ok(a),
            _ => Err(unexpected(target)),
        }
    }

    async fn install_snapshot(
        &self,
        target: NodeId,
        addr: &str,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        match self
            .call(target, addr, RpcRequest::InstallSnapshot(rpc))
            .await?
        {
            RpcAnswer::InstallSnapshot(a) => Ok(a),
            _ => Err(unexpected(target)),
        }
    }

    async fn forward(
        &self,
        target: NodeId,
        addr: &str,
        command: Command,
    ) -> Result<Result<Committed, ProposeError>, RpcFailure> {
        match self
            .call(target, addr, RpcRequest::Forward(command))
            .await?
        {
            RpcAnswer::Forward(outcome) => Ok(outcome.into()),
            _ => Err(unexpected(target)),
        }
    }
}
