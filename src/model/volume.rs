//! CSI volumes, their capabilities and claims, and the rules for claiming them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{CsiTopology, Id};

/// How a volume may be shared between nodes and writers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CsiVolumeAccessMode {
    /// Not known yet (a volume not in use).
    #[default]
    #[serde(rename = "unknown")]
    Unknown,
    /// Readers on one node only, no writers.
    #[serde(rename = "single-node-reader-only")]
    SingleNodeReaderOnly,
    /// One node, which may write.
    #[serde(rename = "single-node-writer")]
    SingleNodeWriter,
    /// Readers on many nodes, no writers.
    #[serde(rename = "multi-node-reader-only")]
    MultiNodeReaderOnly,
    /// Readers on many nodes and at most one writer.
    #[serde(rename = "multi-node-single-writer")]
    MultiNodeSingleWriter,
    /// Readers and writers on many nodes.
    #[serde(rename = "multi-node-multi-writer")]
    MultiNodeMultiWriter,
}

impl CsiVolumeAccessMode {
    /// Whether a volume in this mode can be written ([`Unknown`](Self::Unknown) cannot).
    pub fn can_write(self) -> bool {
        matches!(
            self,
            Self::SingleNodeWriter | Self::MultiNodeSingleWriter | Self::MultiNodeMultiWriter
        )
    }

    /// Whether a volume in this mode, holding `readers` read and `writers`
    /// write claims, has room for one more read claim.
    pub fn read_claim_free(self, readers: usize, writers: usize) -> bool {
        match self {
            Self::SingleNodeReaderOnly | Self::SingleNodeWriter => readers == 0 && writers == 0,
            Self::MultiNodeReaderOnly
            | Self::MultiNodeSingleWriter
            | Self::MultiNodeMultiWriter
            | Self::Unknown => true,
        }
    }

    /// Whether a volume in this mode, holding `writers` write claims, has room
    /// for one more write claim.
    pub fn write_claim_free(self, writers: usize) -> bool {
        match self {
            Self::SingleNodeReaderOnly | Self::MultiNodeReaderOnly => false,
            Self::SingleNodeWriter | Self::MultiNodeSingleWriter => writers == 0,
            Self::MultiNodeMultiWriter | Self::Unknown => true,
        }
    }
}

/// How a volume is presented to a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CsiVolumeAttachmentMode {
    /// Not known yet (a volume not in use).
    #[default]
    Unknown,
    /// As a raw block device.
    BlockDevice,
    /// As a mounted file system.
    FileSystem,
}

/// What a claim on a volume is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CsiVolumeClaimMode {
    /// Reading.
    #[default]
    Read,
    /// Writing.
    Write,
    /// Garbage collection of released claims.
    Gc,
}

/// Where a claim is in its lifecycle, from taken to freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CsiVolumeClaimState {
    /// The allocation holds the claim.
    #[default]
    Taken,
    /// The volume has been unpublished from the node.
    NodeDetached,
    /// The volume has been detached by the controller.
    ControllerDetached,
    /// Every release step is done; the claim can be dropped.
    ReadyToFree,
    /// The claim is being released.
    Unpublishing,
}

/// One way a volume may be used: an access mode with an attachment mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiVolumeCapability {
    /// The access mode.
    pub access_mode: CsiVolumeAccessMode,
    /// The attachment mode.
    pub attachment_mode: CsiVolumeAttachmentMode,
}

/// Options for mounting a file-system volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiMountOptions {
    /// The file-system type.
    #[serde(default)]
    pub fs_type: String,
    /// The mount flags.
    #[serde(default)]
    pub mount_flags: Vec<String>,
}

/// An allocation's claim on a volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiVolumeClaim {
    /// The claiming allocation; empty for a garbage-collection claim.
    pub alloc_id: Id,
    /// The node the allocation runs on.
    pub node_id: Id,
    /// The provider's id for that node.
    #[serde(default)]
    pub external_node_id: String,
    /// What the claim is for.
    pub mode: CsiVolumeClaimMode,
    /// The access mode the claim asks for.
    pub access_mode: CsiVolumeAccessMode,
    /// The attachment mode the claim asks for.
    pub attachment_mode: CsiVolumeAttachmentMode,
    /// Where the claim is in its lifecycle.
    pub state: CsiVolumeClaimState,
}

/// A registered CSI volume and the claims on it.
///
/// The denormalized fields (`provider_version`, the health counts and
/// `schedulable`) stay at their defaults in stored rows; the state layer fills
/// them in on a copy when the volume is read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiVolume {
    /// The namespace the volume belongs to.
    pub namespace: Id,
    /// The volume's id within its namespace.
    pub id: Id,
    /// The provider's id for the volume.
    #[serde(default)]
    pub external_id: String,
    /// The plugin that serves the volume.
    pub plugin_id: Id,
    /// The plugin's vendor name, copied at registration.
    #[serde(default)]
    pub provider: Id,

    /// The volume's human-readable name.
    #[serde(default)]
    pub name: String,
    /// The topologies from which the volume can be reached.
    #[serde(default)]
    pub topologies: Vec<CsiTopology>,
    /// The ways the volume may be used.
    #[serde(default)]
    pub requested_capabilities: Vec<CsiVolumeCapability>,
    /// How to mount the volume, when it is a file system.
    #[serde(default)]
    pub mount_options: Option<CsiMountOptions>,
    /// Secrets passed to the plugin.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// Parameters passed to the plugin.
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// Context the plugin returned when the volume was created.
    #[serde(default)]
    pub context: BTreeMap<String, String>,

    /// The access mode in use; unknown while there are no claims.
    #[serde(default)]
    pub access_mode: CsiVolumeAccessMode,
    /// The attachment mode in use; unknown while there are no claims.
    #[serde(default)]
    pub attachment_mode: CsiVolumeAttachmentMode,

    /// Allocations holding a read claim.
    #[serde(default)]
    pub read_allocs: BTreeSet<Id>,
    /// Allocations holding a write claim.
    #[serde(default)]
    pub write_allocs: BTreeSet<Id>,
    /// Read claims, by allocation id.
    #[serde(default)]
    pub read_claims: BTreeMap<Id, CsiVolumeClaim>,
    /// Write claims, by allocation id.
    #[serde(default)]
    pub write_claims: BTreeMap<Id, CsiVolumeClaim>,
    /// Claims being released, by allocation id.
    #[serde(default)]
    pub past_claims: BTreeMap<Id, CsiVolumeClaim>,

    /// Whether the plugin needs a controller, as last known.
    #[serde(default)]
    pub controller_required: bool,

    /// The plugin's vendor version (denormalized on read).
    #[serde(default)]
    pub provider_version: Id,
    /// The plugin's healthy controller count (denormalized on read).
    #[serde(default)]
    pub controllers_healthy: usize,
    /// The plugin's controller count (denormalized on read).
    #[serde(default)]
    pub controllers_expected: usize,
    /// The plugin's healthy node count (denormalized on read).
    #[serde(default)]
    pub nodes_healthy: usize,
    /// The plugin's node count (denormalized on read).
    #[serde(default)]
    pub nodes_expected: usize,
    /// Whether the plugin can currently serve the volume (denormalized on read).
    #[serde(default)]
    pub schedulable: bool,

    /// The index of the write that created the row.
    pub create_index: u64,
    /// The index of the last write that changed the row.
    pub modify_index: u64,
}

/// What a redacted volume's mount flags read as ([`CsiVolume::redact`]), Nomad's word.
pub const MOUNT_FLAGS_REDACTED: &str = "[REDACTED]";

impl CsiVolume {
    /// An unclaimed volume with the given identity and every other field at its default.
    pub fn new(namespace: impl Into<Id>, id: impl Into<Id>, plugin_id: impl Into<Id>) -> Self {
        CsiVolume {
            namespace: namespace.into(),
            id: id.into(),
            plugin_id: plugin_id.into(),
            ..Default::default()
        }
    }

    /// What a volume shows to anyone outside the server, as Nomad shows it: no
    /// secrets at all (Nomad answers `Secrets: null`) and, when there are mount flags,
    /// one [`MOUNT_FLAGS_REDACTED`] in their place (flags may carry credentials).
    pub fn redact(&mut self) {
        self.secrets.clear();
        if let Some(m) = &mut self.mount_options
            && !m.mount_flags.is_empty()
        {
            m.mount_flags = vec![MOUNT_FLAGS_REDACTED.to_string()];
        }
    }

    /// Resets the fields that are only meaningful on a denormalized copy (provider
    /// version, health counts, schedulability) to what a stored row holds.
    pub fn clear_denormalized(&mut self) {
        self.provider_version = Id::new();
        self.controllers_healthy = 0;
        self.controllers_expected = 0;
        self.nodes_healthy = 0;
        self.nodes_expected = 0;
        self.schedulable = false;
    }

    /// Whether the access mode in use leaves room for another read claim.
    pub fn has_free_read_claims(&self) -> bool {
        self.access_mode
            .read_claim_free(self.read_allocs.len(), self.write_allocs.len())
    }

    /// Whether the access mode in use leaves room for another write claim.
    pub fn has_free_write_claims(&self) -> bool {
        self.access_mode.write_claim_free(self.write_allocs.len())
    }

    /// Whether the volume can be claimed for reading, plugin health permitting.
    pub fn read_schedulable(&self) -> bool {
        self.schedulable
    }

    /// Whether the volume can be claimed for writing: it is schedulable and its
    /// access mode (or, while that is unknown, some requested capability) can write.
    pub fn write_schedulable(&self) -> bool {
        self.schedulable
            && match self.access_mode {
                CsiVolumeAccessMode::Unknown => self
                    .requested_capabilities
                    .iter()
                    .any(|c| c.access_mode.can_write()),
                mode => mode.can_write(),
            }
    }

    /// Whether any allocation holds a read or write claim.
    pub fn in_use(&self) -> bool {
        !self.read_allocs.is_empty() || !self.write_allocs.is_empty()
    }

    /// Whether any claim is recorded at all: claiming allocations, current or past claims.
    pub fn has_claims(&self) -> bool {
        self.in_use()
            || !self.read_claims.is_empty()
            || !self.write_claims.is_empty()
            || !self.past_claims.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::id;
    use super::CsiVolumeAccessMode as M;
    use super::*;

    fn vol(mode: M, readers: usize, writers: usize) -> CsiVolume {
        let mut v = CsiVolume::new("default", "v", "p");
        v.access_mode = mode;
        v.read_allocs = (0..readers).map(|i| id(&format!("r{i}"))).collect();
        v.write_allocs = (0..writers).map(|i| id(&format!("w{i}"))).collect();
        v
    }

    #[test]
    fn redacting_drops_secrets_and_hides_mount_flags_only_when_there_are_some() {
        let mut v = CsiVolume::new("default", "v", "p");
        v.secrets.insert("password".into(), "s3cr3t".into());
        v.mount_options = Some(CsiMountOptions {
            fs_type: "ext4".into(),
            mount_flags: vec!["ro".into(), "password=x".into()],
        });
        v.redact();
        assert!(v.secrets.is_empty());
        let m = v.mount_options.as_ref().unwrap();
        assert_eq!(
            (m.fs_type.as_str(), &m.mount_flags[..]),
            ("ext4", &[MOUNT_FLAGS_REDACTED.to_string()][..])
        );
        let mut bare = CsiVolume::new("default", "v", "p");
        bare.mount_options = Some(CsiMountOptions::default());
        let before = bare.clone();
        bare.redact();
        assert_eq!(bare, before);
    }

    /// (mode, readers, writers, read free, write free) — docs/rules.md §4.8, "Free claims".
    const TABLE: &[(M, usize, usize, bool, bool)] = &[
        (M::SingleNodeReaderOnly, 0, 0, true, false),
        (M::SingleNodeReaderOnly, 1, 0, false, false),
        (M::SingleNodeReaderOnly, 0, 1, false, false),
        (M::SingleNodeWriter, 0, 0, true, true),
        (M::SingleNodeWriter, 1, 0, false, true),
        (M::SingleNodeWriter, 0, 1, false, false),
        (M::MultiNodeReaderOnly, 0, 0, true, false),
        (M::MultiNodeReaderOnly, 3, 0, true, false),
        (M::MultiNodeReaderOnly, 0, 1, true, false),
        (M::MultiNodeSingleWriter, 0, 0, true, true),
        (M::MultiNodeSingleWriter, 3, 0, true, true),
        (M::MultiNodeSingleWriter, 2, 1, true, false),
        (M::MultiNodeMultiWriter, 0, 0, true, true),
        (M::MultiNodeMultiWriter, 3, 2, true, true),
        (M::Unknown, 0, 0, true, true),
        (M::Unknown, 2, 2, true, true),
    ];

    #[test]
    fn free_claims_follow_the_table() {
        for &(mode, r, w, read, write) in TABLE {
            let v = vol(mode, r, w);
            assert_eq!(v.has_free_read_claims(), read, "read {mode:?} r={r} w={w}");
            assert_eq!(
                v.has_free_write_claims(),
                write,
                "write {mode:?} r={r} w={w}"
            );
        }
    }

    #[test]
    fn writable_modes_and_serde_names() {
        use serde::de::{IntoDeserializer, value::Error};
        let names = [
            (M::Unknown, "unknown", false),
            (M::SingleNodeReaderOnly, "single-node-reader-only", false),
            (M::SingleNodeWriter, "single-node-writer", true),
            (M::MultiNodeReaderOnly, "multi-node-reader-only", false),
            (M::MultiNodeSingleWriter, "multi-node-single-writer", true),
            (M::MultiNodeMultiWriter, "multi-node-multi-writer", true),
        ];
        for (mode, name, writes) in names {
            assert_eq!(mode.can_write(), writes, "{mode:?}");
            let de = IntoDeserializer::<Error>::into_deserializer(name);
            assert_eq!(M::deserialize(de), Ok(mode));
        }
        let de = IntoDeserializer::<Error>::into_deserializer("ready-to-free");
        assert_eq!(
            CsiVolumeClaimState::deserialize(de),
            Ok(CsiVolumeClaimState::ReadyToFree)
        );
        let de = IntoDeserializer::<Error>::into_deserializer("block-device");
        assert_eq!(
            CsiVolumeAttachmentMode::deserialize(de),
            Ok(CsiVolumeAttachmentMode::BlockDevice)
        );
    }

    #[test]
    fn schedulable_rules() {
        let cap = |access_mode| CsiVolumeCapability {
            access_mode,
            attachment_mode: CsiVolumeAttachmentMode::FileSystem,
        };
        // Not schedulable: neither side, whatever the mode.
        let mut v = vol(M::MultiNodeMultiWriter, 0, 0);
        assert!(!v.read_schedulable() && !v.write_schedulable());
        v.schedulable = true;
        assert!(v.read_schedulable() && v.write_schedulable());
        // A known read-only mode never writes, even if a capability could.
        v.access_mode = M::MultiNodeReaderOnly;
        v.requested_capabilities = vec![cap(M::MultiNodeMultiWriter)];
        assert!(v.read_schedulable() && !v.write_schedulable());
        // Unknown mode: decided by the requested capabilities.
        v.access_mode = M::Unknown;
        v.requested_capabilities = vec![];
        assert!(v.read_schedulable() && !v.write_schedulable());
        v.requested_capabilities = vec![cap(M::SingleNodeReaderOnly), cap(M::MultiNodeReaderOnly)];
        assert!(!v.write_schedulable());
        v.requested_capabilities.push(cap(M::SingleNodeWriter));
        assert!(v.write_schedulable());
        v.schedulable = false;
        assert!(!v.read_schedulable() && !v.write_schedulable());
    }

    #[test]
    fn usage_and_claims() {
        let mut v = CsiVolume::new("ns", "v", "p");
        assert_eq!((&*v.namespace, &*v.id, &*v.plugin_id), ("ns", "v", "p"));
        assert_eq!(v.access_mode, M::Unknown);
        assert_eq!(v.attachment_mode, CsiVolumeAttachmentMode::Unknown);
        assert!(!v.in_use() && !v.has_claims() && !v.schedulable);
        v.past_claims.insert(id("a"), CsiVolumeClaim::default());
        assert!(!v.in_use() && v.has_claims());
        v.past_claims.clear();
        v.write_allocs.insert(id("a"));
        assert!(v.in_use() && v.has_claims());
        v.write_allocs.clear();
        v.read_allocs.insert(id("b"));
        assert!(v.in_use());
    }
}
