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

use crate::inbound::{self, RpcRefused};
use crate::network::{Network, RpcFailure, RpcResult};
use crate::pre_vote::{PreVoteAnswer, PreVoteRequest};
use crate::transfer::{TimeoutNowAnswer, TimeoutNowRequest};
use crate::{ClusterError, Committed, NodeId, ProposeError, Server, TypeConfig, WriteKey};

/// The largest RPC either way, encoded (a batch of entries, a snapshot chunk). A
/// sender splits a batch of entries that would be larger (openraft's
/// `PayloadTooLarge`); a receiver refuses a larger one before reading it.
pub const MAX_RPC_BYTES: usize = 64 << 20;

/// One RPC from a server to another.
///
/// On the wire (postcard, [`RpcRequest::encode`]), an `AppendEntries` or a `Forward`
/// whose commands all fit the store's format 2 is written in the previous release's
/// shape, so that a server of that release decodes it; one that does not fit travels
/// in a variant appended for it, which such a server refuses (rolling upgrades:
/// `wire/legacy.rs`, `formats.rs`).
#[derive(Debug)]
pub enum RpcRequest {
    /// Raft's AppendEntries (entries or a heartbeat).
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// Raft's RequestVote.
    Vote(VoteRequest<NodeId>),
    /// One chunk of a snapshot.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A proposal forwarded to the leader, with its write key if it has one.
    Forward(Command, Option<WriteKey>),
    /// A follower asks the leader for a read index ([`Server::read_index`]). Last:
    /// postcard numbers the variants, and a server older than this one refuses it as
    /// undecodable, which the follower takes for "proxy the read instead".
    ReadIndex,
    /// A server asks a voter whether it would vote for it ([`crate::pre_vote`]).
    /// Last, after `ReadIndex`: a server older than this one refuses it as
    /// undecodable, which the candidate counts as a refusal.
    PreVote(PreVoteRequest),
    /// A leader that stepped down for the receiver tells it to stand now
    /// ([`crate::transfer`]). Last, after `PreVote`.
    TimeoutNow(TimeoutNowRequest),
    /// A leader asks which store formats the receiver reads (the newest); a server
    /// older than this one refuses it as undecodable, which counts as format 2.
    Formats,
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
    /// The request was refused before Raft saw it (see [`crate::inbound`]).
    Refused(String),
    /// The answer to [`RpcRequest::ReadIndex`]: the index the leader had applied once
    /// it confirmed its leadership after the request arrived.
    ReadIndex(Result<u64, ReadIndexRefusal>),
    /// The answer to [`RpcRequest::PreVote`].
    PreVote(PreVoteAnswer),
    /// The answer to [`RpcRequest::TimeoutNow`].
    TimeoutNow(TimeoutNowAnswer),
    /// The answer to [`RpcRequest::Formats`]: the newest store format the server
    /// reads.
    Formats(u32),
}

/// Why a server gave no read index, as it crosses the wire (the subset of
/// [`ClusterError`] a leader's confirmation ends in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadIndexRefusal {
    /// The target is not the leader.
    NotLeader {
        /// The leader it knows of.
        leader: Option<NodeId>,
        /// That leader's address.
        address: Option<String>,
    },
    /// No quorum confirmed the leadership in time.
    Unavailable(String),
    /// The target is shutting down.
    Stopped,
}

impl From<ClusterError> for ReadIndexRefusal {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::NotLeader { leader, address } => {
                ReadIndexRefusal::NotLeader { leader, address }
            }
            ClusterError::Stopped => ReadIndexRefusal::Stopped,
            other => ReadIndexRefusal::Unavailable(other.to_string()),
        }
    }
}

impl From<ReadIndexRefusal> for ClusterError {
    fn from(r: ReadIndexRefusal) -> Self {
        match r {
            ReadIndexRefusal::NotLeader { leader, address } => {
                ClusterError::NotLeader { leader, address }
            }
            ReadIndexRefusal::Unavailable(why) => ClusterError::Unavailable(why),
            ReadIndexRefusal::Stopped => ClusterError::Stopped,
        }
    }
}

macro_rules! postcard_codec {
    ($t:ty) => {
        impl $t {
            /// Its bytes on the wire (postcard).
            ///
            /// # Errors
            /// A value postcard cannot encode (does not happen for these types).
            pub fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
                // The flavor the log store writes entries with: one instance of
                // every command serializer in this crate, not one per flavor.
                postcard::to_extend(self, Vec::new())
            }

            /// Reads one from its bytes: all of them, nothing may follow it.
            ///
            /// # Errors
            /// [`RpcRefused::Malformed`]: the bytes are not one value of this type.
            pub fn decode(bytes: &[u8]) -> Result<Self, RpcRefused> {
                let (value, rest) = postcard::take_from_bytes(bytes)
                    .map_err(|e| RpcRefused::Malformed(e.to_string()))?;
                if !rest.is_empty() {
                    return Err(RpcRefused::Malformed(format!(
                        "{} bytes follow the value",
                        rest.len()
                    )));
                }
                Ok(value)
            }
        }
    };
}

postcard_codec!(RpcAnswer);

/// How long the last chunk of a snapshot may take, sent, checked and installed: the
/// receiver restores the whole snapshot into a scratch store (format, checksums,
/// every invariant) and writes it durably before it answers. A 338 MiB snapshot
/// (200,000 nodes, 2,000,000 allocations) takes 6–10 s on a loaded 2-core machine;
/// this leaves room for the largest snapshot a server takes
/// ([`ServerOptions::max_snapshot_bytes`](crate::ServerOptions), 4 GiB) at that
/// rate. Shorter, a large snapshot is never installed: each attempt times out at the
/// leader, which starts over with the whole snapshot while the follower checks the
/// last one.
pub const SNAPSHOT_INSTALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

impl RpcRequest {
    /// Whether this is the last chunk of a snapshot (its answer waits for the
    /// install: [`SNAPSHOT_INSTALL_DEADLINE`]).
    pub fn installs_a_snapshot(&self) -> bool {
        matches!(self, RpcRequest::InstallSnapshot(rpc) if rpc.done)
    }

    /// Why this request, `encoded_len` bytes encoded, cannot be sent to `target`: a
    /// batch of entries can be split (openraft retries with fewer), anything else not.
    pub fn too_large(&self, target: NodeId, encoded_len: usize) -> RpcFailure {
        let entries = match self {
            RpcRequest::AppendEntries(rpc) => rpc.entries.len(),
            _ => 0,
        };
        if entries >= 2 {
            let fit = (entries as u128 * MAX_RPC_BYTES as u128 / encoded_len.max(1) as u128) as u64;
            RpcFailure::PayloadTooLarge {
                target,
                entries_hint: fit.clamp(1, entries as u64 - 1),
            }
        } else {
            RpcFailure::Protocol {
                target,
                reason: format!(
                    "an RPC of {encoded_len} bytes is over the limit of {MAX_RPC_BYTES} and cannot be split"
                ),
            }
        }
    }
}

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
    /// Refused before it was proposed: it breaks an input rule.
    Invalid {
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
    /// The write key was used at `index` for another request.
    KeyReused {
        /// The index the key was first used at.
        index: u64,
    },
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
            Err(ProposeError::Invalid { kind, message }) => WireOutcome::Invalid { kind, message },
            Err(ProposeError::NotLeader { leader, address }) => {
                WireOutcome::NotLeader { leader, address }
            }
            Err(ProposeError::Unavailable(why)) => WireOutcome::Unavailable(why),
            Err(ProposeError::Stopped) => WireOutcome::Stopped,
            Err(ProposeError::KeyReused { index }) => WireOutcome::KeyReused { index },
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
            WireOutcome::Invalid { kind, message } => Err(ProposeError::Invalid { kind, message }),
            WireOutcome::NotLeader { leader, address } => {
                Err(ProposeError::NotLeader { leader, address })
            }
            WireOutcome::Unavailable(why) => Err(ProposeError::Unavailable(why)),
            WireOutcome::Stopped => Err(ProposeError::Stopped),
            WireOutcome::KeyReused { index } => Err(ProposeError::KeyReused { index }),
        }
    }
}

/// Answers one RPC on the receiving server: checks it against what the server knows
/// ([`crate::inbound`]), then hands it to its Raft (a snapshot chunk to the server's
/// snapshot receiver; a forwarded proposal is proposed there) and waits for the
/// result.
///
/// # Errors
/// [`RpcRefused`]: the request broke a rule; nothing changed.
pub async fn answer_rpc(server: &Server, request: RpcRequest) -> Result<RpcAnswer, RpcRefused> {
    if let Some(refused) = older_refusal(server, &request) {
        return Err(refused);
    }
    let view = server.inbound_view();
    Ok(match request {
        RpcRequest::AppendEntries(rpc) => {
            inbound::check_append(&view, &rpc).inspect_err(warn_if_log_reverted)?;
            // From a leader this server follows (its vote at least this server's):
            // heard as it arrives. Raft answers it only once the append ahead of it
            // is durable, which a slow disk held past the lease (`quorum_probe.rs`):
            // the timer would then run out, and pre-votes be told no leader is
            // alive, while the leader was.
            if rpc.vote >= view.vote {
                server.elections().heard();
            }
            let answer = server.raft().append_entries(rpc).await;
            // Taken from a leader (a conflict too: the leader's vote was accepted).
            if matches!(&answer, Ok(a) if !matches!(a, AppendEntriesResponse::HigherVote(_))) {
                server.elections().heard();
            }
            RpcAnswer::AppendEntries(answer)
        }
        RpcRequest::Vote(rpc) => {
            inbound::check_vote(&view, &rpc)?;
            let answer = server.raft().vote(rpc).await;
            if matches!(&answer, Ok(a) if a.vote_granted) {
                server.elections().heard();
            }
            RpcAnswer::Vote(answer)
        }
        RpcRequest::InstallSnapshot(rpc) => {
            inbound::check_snapshot_chunk(&view, &rpc)?;
            let sender = rpc.vote;
            let answer = server.receive_snapshot_chunk(view.vote, rpc).await?;
            if matches!(&answer, Ok(a) if sender >= a.vote) {
                server.elections().heard();
            }
            RpcAnswer::InstallSnapshot(answer)
        }
        RpcRequest::Forward(command, key) => {
            RpcAnswer::Forward(server.propose_keyed(command, key).await.into())
        }
        RpcRequest::ReadIndex => {
            RpcAnswer::ReadIndex(server.answer_read_index().await.map_err(Into::into))
        }
        RpcRequest::PreVote(rpc) => {
            inbound::check_pre_vote(&view, &rpc)?;
            RpcAnswer::PreVote(server.answer_pre_vote(&rpc))
        }
        RpcRequest::TimeoutNow(rpc) => {
            inbound::check_timeout_now(&view, &rpc)?;
            RpcAnswer::TimeoutNow(server.answer_timeout_now(&rpc).await)
        }
        RpcRequest::Formats => RpcAnswer::Formats(server.max_format()),
    })
}

/// What a server of the previous release would refuse as undecodable, on a server
/// limited to format 2 ([`ServerOptions::max_format`](crate::ServerOptions)): the
/// RPCs in variants that release does not know. Lets a test run a mixed cluster
/// without building that release.
fn older_refusal(server: &Server, request: &RpcRequest) -> Option<RpcRefused> {
    if server.max_format() >= 3 {
        return None;
    }
    let fits = match request {
        RpcRequest::AppendEntries(rpc) => legacy::fits_format_2(rpc),
        RpcRequest::Forward(command, _) => return server.refuses_as_older(command),
        RpcRequest::Formats => false,
        _ => true,
    };
    (!fits).then(|| RpcRefused::Malformed(OLDER_REFUSAL.into()))
}

/// The refusal of a server limited to format 2, as that of a server of the previous
/// release reads (postcard's words for a variant it does not know).
pub(crate) const OLDER_REFUSAL: &str =
    "Found an enum discriminant that was not known (this server is limited to format 2)";

/// Entries from index N > 0 "after nothing": what openraft 0.9's leader sends a
/// server it had replicated to, which has come back with an empty log under the same
/// id (its data directory wiped or replaced). Raft does not allow that (the server has
/// forgotten its vote), the leader never finds where to resume it, and the refusals
/// are otherwise logged at debug level only: say what happened, once a minute.
fn warn_if_log_reverted(refused: &RpcRefused) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_WARNED_SECS: AtomicU64 = AtomicU64::new(0);
    let RpcRefused::NotConsecutive {
        got,
        after: None,
        expected: 0,
        ..
    } = refused
    else {
        return;
    };
    if *got == 0 {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST_WARNED_SECS.load(Ordering::Relaxed);
    if now >= last + 60
        && LAST_WARNED_SECS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            first_index = *got,
            "the leader resumes this server's log at entry {got}, but this server holds no log: \
             was its data directory wiped or replaced? A server cannot rejoin under its old id \
             with an empty directory; remove it from the cluster (operator raft remove-peer), \
             then add it back (operator raft add-peer) and it catches up from a snapshot \
             (logged once a minute)"
        );
    }
}

/// Entries of store format 3 refused by `target`: a server of the previous release
/// joined a cluster whose format was raised (it cannot catch up). Said once a minute.
fn warn_older_server(target: NodeId, reason: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_WARNED_SECS: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST_WARNED_SECS.load(Ordering::Relaxed);
    if now >= last + 60
        && LAST_WARNED_SECS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            server = target,
            "server {target} cannot read entries of store format 3 ({reason}): it runs a \
             release older than the cluster's format and cannot catch up; upgrade it \
             (logged once a minute)"
        );
    }
}

/// [`answer_rpc`] with a refusal as an answer (for transports that carry only
/// answers); the refusal is logged at debug level.
pub async fn answer_or_refuse(server: &Server, request: RpcRequest) -> RpcAnswer {
    match answer_rpc(server, request).await {
        Ok(answer) => answer,
        Err(refused) => {
            tracing::debug!(%refused, "Raft RPC refused");
            RpcAnswer::Refused(refused.to_string())
        }
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

/// A refusal, or an answer of another kind than the request, as the sender sees it.
pub(crate) fn unexpected(target: NodeId, answer: RpcAnswer) -> RpcFailure {
    RpcFailure::Protocol {
        target,
        reason: match answer {
            RpcAnswer::Refused(why) => format!("refused: {why}"),
            _ => "answer of another kind than the request".into(),
        },
    }
}

impl<T: Transport> Network for T {
    async fn append_entries(
        &self,
        target: NodeId,
        addr: &str,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let newer = !legacy::fits_format_2(&rpc);
        let answer = match self
            .call(target, addr, RpcRequest::AppendEntries(rpc))
            .await
        {
            Ok(RpcAnswer::AppendEntries(a)) => return Ok(a),
            Ok(other) => Err(unexpected(target, other)),
            Err(failure) => Err(failure),
        };
        if newer && let Err(RpcFailure::Protocol { reason, .. }) = &answer {
            warn_older_server(target, reason);
        }
        answer
    }

    async fn vote(
        &self,
        target: NodeId,
        addr: &str,
        rpc: VoteRequest<NodeId>,
    ) -> RpcResult<VoteResponse<NodeId>> {
        match self.call(target, addr, RpcRequest::Vote(rpc)).await? {
            RpcAnswer::Vote(a) => Ok(a),
            other => Err(unexpected(target, other)),
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
            other => Err(unexpected(target, other)),
        }
    }

    async fn forward(
        &self,
        target: NodeId,
        addr: &str,
        command: Command,
        key: Option<WriteKey>,
    ) -> Result<Result<Committed, ProposeError>, RpcFailure> {
        match self
            .call(target, addr, RpcRequest::Forward(command, key))
            .await?
        {
            RpcAnswer::Forward(outcome) => Ok(outcome.into()),
            other => Err(unexpected(target, other)),
        }
    }

    async fn read_index(
        &self,
        target: NodeId,
        addr: &str,
    ) -> Result<Result<u64, ClusterError>, RpcFailure> {
        match self.call(target, addr, RpcRequest::ReadIndex).await? {
            RpcAnswer::ReadIndex(answer) => Ok(answer.map_err(Into::into)),
            other => Err(unexpected(target, other)),
        }
    }

    async fn pre_vote(
        &self,
        target: NodeId,
        addr: &str,
        request: PreVoteRequest,
    ) -> Result<PreVoteAnswer, RpcFailure> {
        match self
            .call(target, addr, RpcRequest::PreVote(request))
            .await?
        {
            RpcAnswer::PreVote(answer) => Ok(answer),
            other => Err(unexpected(target, other)),
        }
    }

    async fn timeout_now(
        &self,
        target: NodeId,
        addr: &str,
        request: TimeoutNowRequest,
    ) -> Result<TimeoutNowAnswer, RpcFailure> {
        match self
            .call(target, addr, RpcRequest::TimeoutNow(request))
            .await?
        {
            RpcAnswer::TimeoutNow(answer) => Ok(answer),
            other => Err(unexpected(target, other)),
        }
    }

    async fn formats(&self, target: NodeId, addr: &str) -> Result<u32, RpcFailure> {
        match self.call(target, addr, RpcRequest::Formats).await? {
            RpcAnswer::Formats(answer) => Ok(answer),
            other => Err(unexpected(target, other)),
        }
    }
}

mod codec;
mod legacy;
#[cfg(test)]
mod tests;
