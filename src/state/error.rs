//! Errors of the state layer: every rejected write names what was wrong, and leaves
//! the store exactly as it was.

use crate::db;
use crate::model::{CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeClaimMode, Id};

/// Why a write was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The engine refused (for example a log index not greater than the last applied).
    #[error(transparent)]
    Db(#[from] db::Error),
    /// A request that must name at least one thing named none.
    #[error("{what}: the request names no ids")]
    EmptyRequest {
        /// The kind of write.
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
}

/// Shorthand for results of the state layer.
pub type Result<T, E = StateError> = std::result::Result<T, E>;
