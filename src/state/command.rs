//! Every write to the state is one [`Command`], applied at one log index.
//!
//! The same values are what the write-ahead log records, what a Raft log would carry,
//! and what fuzzers and model tests generate.

use serde::{Deserialize, Serialize};

use crate::model::{
    AclSalt, AclScope, AclToken, Allocation, CsiVolume, CsiVolumeClaim, Id, Job, Node, NodeStatus,
};

/// One write.
///
/// New kinds of writes may be added (appended, since the variant number is part of the
/// log format): code outside this crate that matches on a command needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
#[serde(deny_unknown_fields)]
pub enum Command {
    /// Insert or replace a node, and derive its plugin instances from its fingerprints.
    UpsertNode {
        /// The node as the client reports it.
        node: Node,
    },
    /// Delete nodes and every plugin instance on them. Atomic: an unknown id fails all.
    DeleteNodes {
        /// The node ids.
        ids: Vec<Id>,
    },
    /// Set a node's status (touches nothing else).
    UpdateNodeStatus {
        /// The node.
        id: Id,
        /// The new status.
        status: NodeStatus,
    },
    /// Set a node's drain flag (touches nothing else).
    UpdateNodeDrain {
        /// The node.
        id: Id,
        /// Whether the node drains.
        drain: bool,
    },
    /// Set a node's scheduling eligibility (touches nothing else).
    UpdateNodeEligibility {
        /// The node.
        id: Id,
        /// Whether the node is eligible.
        eligible: bool,
    },
    /// Insert or replace allocations; server-terminal ones remove the plugin instances
    /// they ran.
    UpsertAllocs {
        /// The allocations.
        allocs: Vec<Allocation>,
    },
    /// Delete allocations (garbage collection); missing ids are skipped.
    DeleteAllocs {
        /// The alloc ids.
        ids: Vec<Id>,
    },
    /// Register (or update the user fields of) volumes. Atomic.
    RegisterCsiVolumes {
        /// The volumes.
        volumes: Vec<CsiVolume>,
    },
    /// Deregister volumes of one namespace. Atomic.
    DeregisterCsiVolumes {
        /// The namespace.
        namespace: Id,
        /// The volume ids (exact).
        ids: Vec<Id>,
        /// Deregister even if claimed, when every claiming alloc is gone or terminal.
        force: bool,
    },
    /// Claim or release volumes. Atomic.
    ClaimCsiVolumes {
        /// The claims, applied in order.
        claims: Vec<CsiVolumeClaimRequest>,
    },
    /// Insert or replace many nodes in one write, each exactly as
    /// [`UpsertNode`](Command::UpsertNode) would, in order; atomic (one bad node fails
    /// all). Each plugin is written once for the whole batch, which is what makes a bulk
    /// registration (a cluster coming up, an import) cheap. A plugin that exists before
    /// and after the batch keeps its create index even if an intermediate node emptied
    /// it. (Appended last: variant numbers are part of the log format.)
    UpsertNodes {
        /// The nodes as their clients report them.
        nodes: Vec<Node>,
    },
    /// Make the cluster's first token — a management token that never expires — once:
    /// refused as soon as any token was ever written. (Appended: variant numbers are
    /// part of the log format.)
    AclBootstrap {
        /// The token (its secret's digest only).
        token: AclToken,
        /// The cluster's new ACL salt, made by the proposing server, which the token's
        /// digest is keyed with (format 3; `None` in a command of format 1 or 2: an
        /// unsalted SHA-256, docs/rules.md §4.9).
        #[serde(default)]
        salt: Option<AclSalt>,
    },
    /// Create tokens. Atomic: an accessor id or secret hash already in use fails all.
    CreateAclTokens {
        /// The tokens (their secrets' digests only).
        tokens: Vec<AclToken>,
        /// The salt the digests are keyed with: the cluster's, or — when it has none
        /// yet — a new one this command sets (re-keying every stored digest). `None`:
        /// unsalted, only in a state without a salt (format 1 and 2 commands).
        #[serde(default)]
        salt: Option<AclSalt>,
    },
    /// Revoke tokens. Atomic: an unknown accessor id fails all; the last management
    /// token that never expires cannot be revoked.
    DeleteAclTokens {
        /// The tokens' accessor ids.
        accessor_ids: Vec<Id>,
    },
    /// Stop allocations (Nomad's `alloc stop`): desired status `stop`, with what an
    /// upsert of that change does (their plugin instances go). Atomic: an unknown id
    /// fails all; one already stopped is unchanged. (Appended: variant numbers are part
    /// of the log format.)
    StopAllocs {
        /// The alloc ids.
        ids: Vec<Id>,
    },
    /// Register jobs, or update their definitions; each sets what it expects of the
    /// plugins its tasks run (docs/rules.md §4.10). Atomic. (Appended: variant numbers
    /// are part of the log format.)
    UpsertJobs {
        /// The jobs (status, version and indexes are set by the store).
        jobs: Vec<Job>,
    },
    /// Stop jobs of one namespace: status dead, rows kept, expectations gone.
    /// Atomic: an unknown id fails all; one already dead is unchanged.
    StopJobs {
        /// The namespace.
        namespace: Id,
        /// The job ids.
        ids: Vec<Id>,
    },
    /// Purge jobs of one namespace: rows deleted, expectations gone (their
    /// allocations stay until collected). Atomic: an unknown id fails all.
    PurgeJobs {
        /// The namespace.
        namespace: Id,
        /// The job ids.
        ids: Vec<Id>,
    },
    /// Change one token's name and scopes (Nomad's token update); its secret, create
    /// time, expiry and create index stay. An unknown accessor id is refused; so is a
    /// change that would leave no management token without an expiry. Setting what
    /// the token already has stores nothing. (Appended: variant numbers are part of
    /// the log format.)
    UpdateAclToken {
        /// The token's accessor id.
        accessor_id: Id,
        /// Its new label.
        name: String,
        /// Its new scopes (one to four).
        scopes: Vec<AclScope>,
    },
    /// Set the cluster's ACL salt on a bootstrapped state that has none (one of format
    /// 1 or 2): every stored digest is re-keyed with it in the same write, so every
    /// token keeps working (docs/rules.md §4.9). Refused once a salt is set.
    /// (Appended: variant numbers are part of the log format.)
    SetAclSalt {
        /// The salt, made by the proposing server.
        salt: AclSalt,
    },
    /// One piece of a snapshot file being restored into a running replicated cluster
    /// (`PUT /v1/operator/snapshot`): the leader checks the whole file, proposes its
    /// pieces in order, then [`Command::RestoreSnapshot`]. Every server's state
    /// machine stages the piece; nothing in the state changes. A store outside a
    /// cluster refuses it ([`StateError::ReplicatedOnly`](super::StateError::ReplicatedOnly)).
    /// (Appended: variant numbers are part of the log format.)
    StageSnapshotChunk {
        /// The restore it belongs to (a number the leader chose).
        restore: u64,
        /// Its place in the file: piece 0 begins the restore (and abandons any other
        /// one staged).
        seq: u32,
        /// The file's bytes of this piece.
        bytes: Vec<u8>,
    },
    /// Ends a restore: every server checks that its staged pieces make `len` bytes
    /// hashing to `sha256`, then restores them (format, checksums, every invariant),
    /// replacing the whole state at this entry's index. Staging that is incomplete or
    /// fails a check makes it a refused no-op on every server. A store outside a
    /// cluster refuses it. (Appended: variant numbers are part of the log format.)
    RestoreSnapshot {
        /// The restore it ends.
        restore: u64,
        /// How many pieces were proposed.
        chunks: u32,
        /// The file's length.
        len: u64,
        /// The file's SHA-256.
        sha256: [u8; 32],
    },
}

/// One claim of a [`Command::ClaimCsiVolumes`] batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiVolumeClaimRequest {
    /// The volume's namespace.
    pub namespace: Id,
    /// The volume id.
    pub volume_id: Id,
    /// The claim.
    pub claim: CsiVolumeClaim,
}

impl Command {
    /// The command's postcard bytes, as the write-ahead log encodes it: the same bytes
    /// for the same command everywhere. Not generic on purpose: a crate above that
    /// needs the bytes reuses this crate's encoder instead of compiling its own copy
    /// of every row type's serializer. Empty if postcard refused the command (it
    /// refuses only sequences of unknown length, which no command holds).
    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_extend(self, Vec::new()).unwrap_or_default()
    }

    /// A short name of the command's kind, for logs and spans.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::UpsertNode { .. } => "upsert_node",
            Command::DeleteNodes { .. } => "delete_nodes",
            Command::UpdateNodeStatus { .. } => "update_node_status",
            Command::UpdateNodeDrain { .. } => "update_node_drain",
            Command::UpdateNodeEligibility { .. } => "update_node_eligibility",
            Command::UpsertAllocs { .. } => "upsert_allocs",
            Command::DeleteAllocs { .. } => "delete_allocs",
            Command::RegisterCsiVolumes { .. } => "register_volumes",
            Command::DeregisterCsiVolumes { .. } => "deregister_volumes",
            Command::ClaimCsiVolumes { .. } => "claim_volumes",
            Command::UpsertNodes { .. } => "upsert_nodes",
            Command::AclBootstrap { .. } => "acl_bootstrap",
            Command::CreateAclTokens { .. } => "create_acl_tokens",
            Command::DeleteAclTokens { .. } => "delete_acl_tokens",
            Command::StopAllocs { .. } => "stop_allocs",
            Command::UpsertJobs { .. } => "upsert_jobs",
            Command::StopJobs { .. } => "stop_jobs",
            Command::PurgeJobs { .. } => "purge_jobs",
            Command::UpdateAclToken { .. } => "update_acl_token",
            Command::SetAclSalt { .. } => "set_acl_salt",
            Command::StageSnapshotChunk { .. } => "stage_snapshot_chunk",
            Command::RestoreSnapshot { .. } => "restore_snapshot",
        }
    }

    /// Whether the command manages ACL tokens: a server takes those only through its
    /// ACL endpoints, from a management token, never as an ordinary write.
    pub fn is_acl(&self) -> bool {
        matches!(
            self,
            Command::AclBootstrap { .. }
                | Command::CreateAclTokens { .. }
                | Command::DeleteAclTokens { .. }
                | Command::UpdateAclToken { .. }
                | Command::SetAclSalt { .. }
        )
    }

    /// Whether the command is part of restoring a snapshot into a replicated cluster
    /// ([`Command::StageSnapshotChunk`], [`Command::RestoreSnapshot`]): only a
    /// server's restore proposes those, never a client's write.
    pub fn is_restore(&self) -> bool {
        matches!(
            self,
            Command::StageSnapshotChunk { .. } | Command::RestoreSnapshot { .. }
        )
    }
}
