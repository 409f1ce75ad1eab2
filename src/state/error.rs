//! Errors of the state layer: every rejected write names what was wrong, and leaves
//! the store exactly as it was.

use crate::engine;

use super::check::InvariantViolation;
use super::tables::InstanceKind;
use crate::model::{CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeClaimMode, Id};

/// Why a write was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A write at a log index not greater than the last applied one.
    #[error("log index {index} is not greater than the last applied index {last_applied}")]
    StaleIndex {
        /// The index the write asked for.
        index: u64,
        /// The last index the store applied.
        last_applied: u64,
    },
    /// The state a restore would install breaks an invariant; nothing was installed.
    #[error("the restored state breaks an invariant: {0}")]
    BrokenInvariant(#[from] InvariantViolation),
    /// The engine underneath failed in a way no input should cause (a bug).
    #[error("engine error: {0}")]
    Engine(engine::Error),
    /// A request that must name at least one thing named none.
    #[error("{what}: the request names no ids")]
    EmptyRequest {
        /// The kind of write.
        what: &'static str,
    },
    /// A command breaks an input rule (a size or character limit): known before any
    /// state is read, so a replicated server refuses it before proposing it.
    #[error("{field}: {reason}")]
    InvalidInput {
        /// The field (or list) at fault.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A job or volume registered in namespace `*`, which names every namespace in a
    /// read: no read or write of one row could name it (an input rule).
    #[error(
        "a {what} cannot be registered in namespace \"*\", which names every namespace in a read; name one namespace"
    )]
    WildcardNamespace {
        /// `job` or `volume`.
        what: &'static str,
    },
    /// A required field is empty.
    #[error("{what}: {field} is required")]
    MissingField {
        /// The kind of row.
        what: &'static str,
        /// The empty field.
        field: &'static str,
    },
    /// A node fingerprint's halves do not match the maps it is filed in: an entry of
    /// the controller map without a controller half (or of the node map without a
    /// node half), or a fingerprint carrying a half of a kind whose map has no entry
    /// for the plugin. ([`Node::add_csi_plugin`](crate::model::Node::add_csi_plugin)
    /// files fingerprints where their halves say.)
    #[error(
        "node {node_id:?}: the fingerprint of plugin {plugin_id:?} in its {filed_in:?} map {}",
        halves_problem(*half, *carried)
    )]
    FingerprintHalves {
        /// The node.
        node_id: Id,
        /// The plugin.
        plugin_id: Id,
        /// The map the offending entry is filed in.
        filed_in: InstanceKind,
        /// The half that does not match.
        half: InstanceKind,
        /// Whether the fingerprint carries that half (then the map of that kind lacks
        /// the plugin), or lacks it (then it is filed in the map of that kind).
        carried: bool,
    },
    /// A node fingerprint is filed under a plugin id other than its own (or none).
    #[error("node {node_id:?}: fingerprint filed under {key:?} names plugin {plugin_id:?}")]
    FingerprintMismatch {
        /// The node.
        node_id: Id,
        /// The map key the fingerprint is filed under.
        key: Id,
        /// The plugin id inside the fingerprint.
        plugin_id: Id,
    },
    /// A write named a node that does not exist.
    #[error("node {0:?} not found")]
    NodeNotFound(Id),
    /// A claim named an allocation that does not exist.
    #[error("allocation {0:?} not found")]
    AllocNotFound(Id),
    /// A volume registration named a plugin that does not exist.
    #[error("plugin {0:?} not found")]
    PluginNotFound(Id),
    /// A write named a volume that does not exist.
    #[error("volume {namespace}/{id} not found")]
    VolumeNotFound {
        /// The namespace.
        namespace: Id,
        /// The volume id.
        id: Id,
    },
    /// A registration tried to change a volume's identity.
    #[error("volume {namespace}/{id}: identity cannot be updated ({field} {old:?} -> {new:?})")]
    VolumeIdentityChanged {
        /// The namespace.
        namespace: Id,
        /// The volume id.
        id: Id,
        /// The identity field that differs.
        field: &'static str,
        /// The stored value.
        old: String,
        /// The requested value.
        new: String,
    },
    /// A deregistration named a volume that is still claimed.
    #[error("volume {namespace}/{id} is in use (allocation {alloc_id:?})")]
    VolumeInUse {
        /// The namespace.
        namespace: Id,
        /// The volume id.
        id: Id,
        /// A claiming allocation that is neither gone nor terminal.
        alloc_id: Id,
    },
    /// A claim's attachment mode differs from the one the volume is in use with.
    #[error("volume {namespace}/{id}: attachment mode {requested:?} conflicts with {current:?}")]
    AttachmentModeConflict {
        /// The namespace.
        namespace: Id,
        /// The volume id.
        id: Id,
        /// The volume's mode.
        current: CsiVolumeAttachmentMode,
        /// The claim's mode.
        requested: CsiVolumeAttachmentMode,
    },
    /// A write claim asked for an access mode that cannot write.
    #[error("volume {namespace}/{id}: a write claim cannot use access mode {access_mode:?}")]
    ReadOnlyAccessMode {
        /// The namespace.
        namespace: Id,
        /// The volume id.
        id: Id,
        /// The claim's access mode.
        access_mode: CsiVolumeAccessMode,
    },
    /// The volume's plugin cannot serve a claim of that mode now.
    #[error("volume {namespace}/{id} is unschedulable for {mode:?} claims")]
    Unschedulable {
        /// The namespace.
        namespace: Id,
        /// The volume id.
        id: Id,
        /// The claim mode.
        mode: CsiVolumeClaimMode,
    },
    /// The volume's access mode leaves no free claim of that mode.
    #[error("volume {namespace}/{id}: max {mode:?} claims reached")]
    MaxClaimsReached {
        /// The namespace.
        namespace: Id,
        /// The volume id.
        id: Id,
        /// The claim mode.
        mode: CsiVolumeClaimMode,
    },
    /// ACL bootstrap after a token was already written: it runs once per cluster.
    #[error("the ACL system was already bootstrapped (at index {bootstrapped_at})")]
    AclAlreadyBootstrapped {
        /// The tokens table's index: the last write of a token.
        bootstrapped_at: u64,
    },
    /// A token was created before the ACL system was bootstrapped.
    #[error("the ACL system is not bootstrapped yet")]
    AclNotBootstrapped,
    /// A new token reuses an accessor id.
    #[error("an ACL token with accessor id {0:?} already exists")]
    AclTokenExists(Id),
    /// A new token's secret is already another token's. (The secret is not named.)
    #[error("that secret is already another token's")]
    AclSecretInUse,
    /// A token write's digests are keyed with another salt than the cluster's (or with
    /// none, once the cluster has one): a server computed them before it saw the
    /// salt; compute them again with the cluster's.
    #[error(
        "the tokens' digests are not keyed with the cluster's ACL salt; compute them again with it"
    )]
    AclSaltMismatch,
    /// A salt was set on a cluster that has one already.
    #[error("the cluster's ACL salt is set already (at index {set_at}); it never changes")]
    AclAlreadySalted {
        /// The index of the write that set it.
        set_at: u64,
    },
    /// A revocation named a token that does not exist.
    #[error("ACL token {0:?} not found")]
    AclTokenNotFound(Id),
    /// A revocation would leave no management token that never expires.
    #[error(
        "that would revoke the last management token that never expires (create another first)"
    )]
    LastManagementToken,
    /// A write named a job that does not exist.
    #[error("job {namespace}/{id} not found")]
    JobNotFound {
        /// The namespace.
        namespace: Id,
        /// The job id.
        id: Id,
    },
    /// An allocation names a version its job never had.
    #[error(
        "allocation {alloc_id:?} names version {version} of job {namespace}/{job_id}, which is at version {current}"
    )]
    JobVersionNotFound {
        /// The allocation.
        alloc_id: Id,
        /// The job's namespace.
        namespace: Id,
        /// The job id.
        job_id: Id,
        /// The version the allocation names.
        version: u64,
        /// The job's current version.
        current: u64,
    },
    /// A command only a replicated server's state machine applies (restoring a
    /// snapshot into a cluster) was given to a store outside one, or proposed as a
    /// write (an input rule: only a server's restore proposes it). An embedded or
    /// durable store restores a snapshot with `restore_from` or
    /// `schedstate snapshot restore` instead.
    #[error(
        "{command} is applied only by a replicated cluster's servers (PUT /v1/operator/snapshot); \
         restore a store outside a cluster with `schedstate snapshot restore`"
    )]
    ReplicatedOnly {
        /// The command's kind ([`Command::kind`](super::Command::kind)).
        command: &'static str,
    },
    /// A replicated restore was refused where it applies, identically on every
    /// server: its staged pieces were incomplete, out of order or over the limit,
    /// their hash or length differed from what the restore's last entry states, or
    /// the file they make failed its checks. Nothing changed.
    #[error("snapshot restore refused: {reason}")]
    RestoreRefused {
        /// Why.
        reason: String,
    },
}

/// Shorthand for results of the state layer.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

impl StateError {
    /// The variant's name (`VolumeInUse`, …): a stable, machine-readable kind for
    /// errors that cross a network or an HTTP API as kind and message.
    ///
    /// ```
    /// use schedstate::state::StateError;
    /// assert_eq!(StateError::NodeNotFound("n1".into()).kind(), "NodeNotFound");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            StateError::StaleIndex { .. } => "StaleIndex",
            StateError::BrokenInvariant(_) => "BrokenInvariant",
            StateError::Engine(_) => "Engine",
            StateError::EmptyRequest { .. } => "EmptyRequest",
            StateError::MissingField { .. } => "MissingField",
            StateError::InvalidInput { .. } => "InvalidInput",
            StateError::WildcardNamespace { .. } => "WildcardNamespace",
            StateError::FingerprintHalves { .. } => "FingerprintHalves",
            StateError::FingerprintMismatch { .. } => "FingerprintMismatch",
            StateError::NodeNotFound(_) => "NodeNotFound",
            StateError::AllocNotFound(_) => "AllocNotFound",
            StateError::PluginNotFound(_) => "PluginNotFound",
            StateError::VolumeNotFound { .. } => "VolumeNotFound",
            StateError::VolumeIdentityChanged { .. } => "VolumeIdentityChanged",
            StateError::VolumeInUse { .. } => "VolumeInUse",
            StateError::AttachmentModeConflict { .. } => "AttachmentModeConflict",
            StateError::ReadOnlyAccessMode { .. } => "ReadOnlyAccessMode",
            StateError::Unschedulable { .. } => "Unschedulable",
            StateError::MaxClaimsReached { .. } => "MaxClaimsReached",
            StateError::AclAlreadyBootstrapped { .. } => "AclAlreadyBootstrapped",
            StateError::AclNotBootstrapped => "AclNotBootstrapped",
            StateError::AclTokenExists(_) => "AclTokenExists",
            StateError::AclSecretInUse => "AclSecretInUse",
            StateError::AclTokenNotFound(_) => "AclTokenNotFound",
            StateError::AclSaltMismatch => "AclSaltMismatch",
            StateError::AclAlreadySalted { .. } => "AclAlreadySalted",
            StateError::LastManagementToken => "LastManagementToken",
            StateError::JobNotFound { .. } => "JobNotFound",
            StateError::JobVersionNotFound { .. } => "JobVersionNotFound",
            StateError::ReplicatedOnly { .. } => "ReplicatedOnly",
            StateError::RestoreRefused { .. } => "RestoreRefused",
        }
    }
}

impl From<engine::Error> for StateError {
    fn from(e: engine::Error) -> Self {
        match e {
            engine::Error::StaleIndex {
                index,
                last_applied,
            } => StateError::StaleIndex {
                index,
                last_applied,
            },
            other => StateError::Engine(other),
        }
    }
}

fn halves_problem(half: InstanceKind, carried: bool) -> &'static str {
    match (half, carried) {
        (InstanceKind::Controller, true) => {
            "has a controller half, but the node lists no controller instance of the plugin"
        }
        (InstanceKind::Controller, false) => "has no controller half",
        (InstanceKind::Node, true) => {
            "has a node half, but the node lists no node instance of the plugin"
        }
        (InstanceKind::Node, false) => "has no node half",
    }
}
