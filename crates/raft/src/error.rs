//! What a replicated server's calls can fail with.

use openraft::BasicNode;
use openraft::error::{ClientWriteError, ForwardToLeader, RaftError};
use schedstate::persist::PersistError;
use schedstate::state::StateError;

use crate::NodeId;

/// Why a proposal did not commit — or, for the last three, why its outcome is not
/// known: a command accepted by a leader that then lost its leadership or its network
/// may still commit. A client that retries such a command should first check whether
/// it took effect (commands that carry their own ids make that a read).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProposeError {
    /// The command committed at `index` and every server refused it identically: the
    /// state is unchanged, the last applied index moved.
    #[error("command refused at index {index}: {error}")]
    Refused {
        /// The log index of the refused entry.
        index: u64,
        /// The rule it breaks.
        error: StateError,
    },
    /// As [`Refused`](Self::Refused), reported by the leader over a network that
    /// carries the error's kind and message only.
    #[error("command refused at index {index}: {message}")]
    RefusedRemotely {
        /// The log index of the refused entry.
        index: u64,
        /// The error's variant name (`VolumeInUse`, …).
        kind: String,
        /// The error's message.
        message: String,
    },
    /// The command breaks an input rule (sizes, characters, required fields: rules
    /// that need no state); it was refused before it was proposed — no log entry, no
    /// index, nothing changed anywhere.
    #[error("command refused before proposing it: {message}")]
    Invalid {
        /// The error's variant name (`InvalidInput`, `MissingField`, …).
        kind: String,
        /// The error's message.
        message: String,
    },
    /// This server is not the leader; `leader` is the one it knows of, if any.
    #[error("not the leader (leader is {})", describe_leader(*.leader, .address.as_deref()))]
    NotLeader {
        /// The leader's id, if known.
        leader: Option<NodeId>,
        /// The leader's address, if known.
        address: Option<String>,
    },
    /// The write key was first used at `index` for another request: nothing was
    /// applied. (A retry must send the same request under the same key.)
    #[error("the write key was used at index {index} for another request; nothing was applied")]
    KeyReused {
        /// The index the key was first used at.
        index: u64,
    },
    /// No answer (the network, or no quorum within the deadline).
    #[error("no answer: {0}")]
    Unavailable(String),
    /// The server is shutting down or has stopped.
    #[error("the server has stopped")]
    Stopped,
}

fn describe_leader(leader: Option<NodeId>, address: Option<&str>) -> String {
    match (leader, address) {
        (Some(id), Some(addr)) => format!("{id} at {addr}"),
        (Some(id), None) => id.to_string(),
        _ => "unknown".into(),
    }
}

impl ProposeError {
    /// The refusal of a command that breaks an input rule.
    pub fn invalid(error: &StateError) -> Self {
        ProposeError::Invalid {
            kind: error.kind().to_string(),
            message: error.to_string(),
        }
    }

    pub(crate) fn not_leader(f: ForwardToLeader<NodeId, BasicNode>) -> Self {
        ProposeError::NotLeader {
            leader: f.leader_id,
            address: f.leader_node.map(|n| n.addr),
        }
    }

    pub(crate) fn from_write(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> Self {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Self::not_leader(f),
            RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
                ProposeError::Unavailable(c.to_string())
            }
            RaftError::Fatal(_) => ProposeError::Stopped,
        }
    }

    /// The error's variant name, as a refusal crosses a network.
    pub fn kind(&self) -> &str {
        match self {
            ProposeError::Refused { error, .. } => error.kind(),
            ProposeError::RefusedRemotely { kind, .. } | ProposeError::Invalid { kind, .. } => kind,
            ProposeError::NotLeader { .. } => "NotLeader",
            ProposeError::KeyReused { .. } => "KeyReused",
            ProposeError::Unavailable(_) => "Unavailable",
            ProposeError::Stopped => "Stopped",
        }
    }

    /// Whether the command is known not to have changed the state (refused, or never
    /// accepted by a leader: a non-leader refuses before appending).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ProposeError::Refused { .. }
                | ProposeError::RefusedRemotely { .. }
                | ProposeError::Invalid { .. }
                | ProposeError::KeyReused { .. }
        )
    }
}

/// Why a read, a membership change or initialization failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// This server is not the leader; `leader` is the one it knows of, if any.
    #[error("not the leader (leader is {})", describe_leader(*.leader, .address.as_deref()))]
    NotLeader {
        /// The leader's id, if known.
        leader: Option<NodeId>,
        /// The leader's address, if known.
        address: Option<String>,
    },
    /// No quorum answered, or the change was refused by Raft (with openraft's reason).
    #[error("{0}")]
    Unavailable(String),
    /// The server is shutting down or has stopped.
    #[error("the server has stopped")]
    Stopped,
    /// A membership change that is malformed (id 0, an address that is not
    /// `host:port`); nothing was proposed.
    #[error("{0}")]
    Invalid(String),
    /// A membership change the current membership does not allow (an id taken by
    /// another address, the last voter removed); nothing was proposed.
    #[error("{0}")]
    Conflict(String),
    /// A membership change naming a server that is not a member.
    #[error("server {0} is not a member of the cluster")]
    NotAMember(NodeId),
    /// A new server did not catch up within the deadline: it was not made a voter and
    /// was removed again; the membership is as it was.
    #[error(
        "server {id} at {address} did not catch up within {waited_ms} ms (unreachable or too slow); \
         it was not added"
    )]
    NotCaughtUp {
        /// The server.
        id: NodeId,
        /// Its address.
        address: String,
        /// How long it was given.
        waited_ms: u64,
    },
}

impl From<ProposeError> for ClusterError {
    fn from(e: ProposeError) -> Self {
        match e {
            ProposeError::NotLeader { leader, address } => {
                ClusterError::NotLeader { leader, address }
            }
            ProposeError::Stopped => ClusterError::Stopped,
            other => ClusterError::Unavailable(other.to_string()),
        }
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Its log, metadata or snapshot on disk.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// The Raft configuration was refused.
    #[error("raft configuration: {0}")]
    Config(#[from] openraft::ConfigError),
    /// Raft failed to start.
    #[error("raft failed to start: {0}")]
    Raft(#[from] openraft::error::Fatal<NodeId>),
    /// A server option this build cannot take.
    #[error("server options: {0}")]
    Options(String),
}
