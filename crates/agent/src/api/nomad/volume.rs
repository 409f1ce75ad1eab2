//! `CSIVolume`, `CSIVolumeListStub` and `CSIVolumeClaim`: Nomad's names; access and
//! attachment modes as Nomad spells them (an unknown one as `""`); a claim's mode and
//! state as Nomad's integers; `ReadAllocs`/`WriteAllocs` as maps from allocation id
//! (to `null`, as Nomad stores them).

use std::collections::{BTreeMap, BTreeSet};

use schedstate::model::{
    CsiMountOptions, CsiVolume, CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeCapability,
    CsiVolumeClaim, CsiVolumeClaimMode, CsiVolumeClaimState, Id,
};
use serde::{Deserialize, Serialize};

use super::ShapeError;
use super::alloc::NomadAllocListStub;
use super::csi::NomadCsiTopology;

fn access_out(m: CsiVolumeAccessMode) -> String {
    match m {
        CsiVolumeAccessMode::Unknown => "",
        CsiVolumeAccessMode::SingleNodeReaderOnly => "single-node-reader-only",
        CsiVolumeAccessMode::SingleNodeWriter => "single-node-writer",
        CsiVolumeAccessMode::MultiNodeReaderOnly => "multi-node-reader-only",
        CsiVolumeAccessMode::MultiNodeSingleWriter => "multi-node-single-writer",
        CsiVolumeAccessMode::MultiNodeMultiWriter => "multi-node-multi-writer",
    }
    .to_string()
}

fn access_in(field: &'static str, s: &str) -> Result<CsiVolumeAccessMode, ShapeError> {
    Ok(match s {
        "" | "unknown" => CsiVolumeAccessMode::Unknown,
        "single-node-reader-only" => CsiVolumeAccessMode::SingleNodeReaderOnly,
        "single-node-writer" => CsiVolumeAccessMode::SingleNodeWriter,
        "multi-node-reader-only" => CsiVolumeAccessMode::MultiNodeReaderOnly,
        "multi-node-single-writer" => CsiVolumeAccessMode::MultiNodeSingleWriter,
        "multi-node-multi-writer" => CsiVolumeAccessMode::MultiNodeMultiWriter,
        other => {
            return Err(ShapeError::new(
                field,
                format!("{other:?} is not a CSI access mode"),
            ));
        }
    })
}

fn attachment_out(m: CsiVolumeAttachmentMode) -> String {
    match m {
        CsiVolumeAttachmentMode::Unknown => "",
        CsiVolumeAttachmentMode::BlockDevice => "block-device",
        CsiVolumeAttachmentMode::FileSystem => "file-system",
    }
    .to_string()
}

fn attachment_in(field: &'static str, s: &str) -> Result<CsiVolumeAttachmentMode, ShapeError> {
    Ok(match s {
        "" | "unknown" => CsiVolumeAttachmentMode::Unknown,
        "block-device" => CsiVolumeAttachmentMode::BlockDevice,
        "file-system" => CsiVolumeAttachmentMode::FileSystem,
        other => {
            return Err(ShapeError::new(
                field,
                format!("{other:?} is not a CSI attachment mode"),
            ));
        }
    })
}

/// Nomad's integer for a claim mode (`CSIVolumeClaimRead` = 0, write 1, gc 2).
fn claim_mode_out(m: CsiVolumeClaimMode) -> u8 {
    match m {
        CsiVolumeClaimMode::Read => 0,
        CsiVolumeClaimMode::Write => 1,
        CsiVolumeClaimMode::Gc => 2,
    }
}

fn claim_mode_in(n: u8) -> Result<CsiVolumeClaimMode, ShapeError> {
    match n {
        0 => Ok(CsiVolumeClaimMode::Read),
        1 => Ok(CsiVolumeClaimMode::Write),
        2 => Ok(CsiVolumeClaimMode::Gc),
        other => Err(ShapeError::new("Mode", format!("{other} is not 0, 1 or 2"))),
    }
}

/// Nomad's integer for a claim state (`CSIVolumeClaimStateTaken` = 0 … unpublishing 4).
fn claim_state_out(s: CsiVolumeClaimState) -> u8 {
    match s {
        CsiVolumeClaimState::Taken => 0,
        CsiVolumeClaimState::NodeDetached => 1,
        CsiVolumeClaimState::ControllerDetached => 2,
        CsiVolumeClaimState::ReadyToFree => 3,
        CsiVolumeClaimState::Unpublishing => 4,
    }
}

fn claim_state_in(n: u8) -> Result<CsiVolumeClaimState, ShapeError> {
    Ok(match n {
        0 => CsiVolumeClaimState::Taken,
        1 => CsiVolumeClaimState::NodeDetached,
        2 => CsiVolumeClaimState::ControllerDetached,
        3 => CsiVolumeClaimState::ReadyToFree,
        4 => CsiVolumeClaimState::Unpublishing,
        other => return Err(ShapeError::new("State", format!("{other} is not 0 to 4"))),
    })
}

/// Nomad's `CSIVolumeClaim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiVolumeClaim {
    #[serde(rename = "AllocationID")]
    pub allocation_id: String,
    #[serde(rename = "NodeID", default, deserialize_with = "super::nullable")]
    pub node_id: String,
    #[serde(
        rename = "ExternalNodeID",
        default,
        deserialize_with = "super::nullable"
    )]
    pub external_node_id: String,
    #[serde(rename = "Mode", default, deserialize_with = "super::nullable")]
    pub mode: u8,
    #[serde(rename = "AccessMode", default, deserialize_with = "super::nullable")]
    pub access_mode: String,
    #[serde(
        rename = "AttachmentMode",
        default,
        deserialize_with = "super::nullable"
    )]
    pub attachment_mode: String,
    #[serde(rename = "State", default, deserialize_with = "super::nullable")]
    pub state: u8,
}

impl From<&CsiVolumeClaim> for NomadCsiVolumeClaim {
    fn from(c: &CsiVolumeClaim) -> Self {
        NomadCsiVolumeClaim {
            allocation_id: c.alloc_id.to_string(),
            node_id: c.node_id.to_string(),
            external_node_id: c.external_node_id.clone(),
            mode: claim_mode_out(c.mode),
            access_mode: access_out(c.access_mode),
            attachment_mode: attachment_out(c.attachment_mode),
            state: claim_state_out(c.state),
        }
    }
}

impl TryFrom<NomadCsiVolumeClaim> for CsiVolumeClaim {
    type Error = ShapeError;

    fn try_from(c: NomadCsiVolumeClaim) -> Result<Self, ShapeError> {
        Ok(CsiVolumeClaim {
            alloc_id: c.allocation_id.into(),
            node_id: c.node_id.into(),
            external_node_id: c.external_node_id,
            mode: claim_mode_in(c.mode)?,
            access_mode: access_in("AccessMode", &c.access_mode)?,
            attachment_mode: attachment_in("AttachmentMode", &c.attachment_mode)?,
            state: claim_state_in(c.state)?,
        })
    }
}

/// Nomad's `CSIVolumeCapability`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiVolumeCapability {
    #[serde(rename = "AccessMode", default, deserialize_with = "super::nullable")]
    pub access_mode: String,
    #[serde(
        rename = "AttachmentMode",
        default,
        deserialize_with = "super::nullable"
    )]
    pub attachment_mode: String,
}

/// Nomad's `CSIMountOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiMountOptions {
    #[serde(rename = "FSType", default, deserialize_with = "super::nullable")]
    pub fs_type: String,
    #[serde(rename = "MountFlags", default, deserialize_with = "super::nullable")]
    pub mount_flags: Vec<String>,
}

type Claims = BTreeMap<String, NomadCsiVolumeClaim>;

fn claims_out(m: &BTreeMap<Id, CsiVolumeClaim>) -> Claims {
    m.iter()
        .map(|(k, v)| (k.to_string(), NomadCsiVolumeClaim::from(v)))
        .collect()
}

fn claims_in(m: Claims) -> Result<BTreeMap<Id, CsiVolumeClaim>, ShapeError> {
    m.into_iter()
        .map(|(k, v)| Ok((Id::from(k.as_str()), v.try_into()?)))
        .collect()
}

fn allocs_out(s: &BTreeSet<Id>) -> BTreeMap<String, Option<()>> {
    s.iter().map(|a| (a.to_string(), None)).collect()
}

/// Nomad's `CSIVolume`, with the fields the store denormalizes from the plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiVolume {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace", default, deserialize_with = "super::nullable")]
    pub namespace: String,
    #[serde(rename = "Name", default, deserialize_with = "super::nullable")]
    pub name: String,
    #[serde(rename = "ExternalID", default, deserialize_with = "super::nullable")]
    pub external_id: String,
    #[serde(rename = "PluginID", default, deserialize_with = "super::nullable")]
    pub plugin_id: String,
    #[serde(rename = "Provider", default, deserialize_with = "super::nullable")]
    pub provider: Id,
    #[serde(
        rename = "ProviderVersion",
        default,
        deserialize_with = "super::nullable"
    )]
    pub provider_version: Id,
    #[serde(rename = "Topologies", default, deserialize_with = "super::nullable")]
    pub topologies: Vec<NomadCsiTopology>,
    #[serde(
        rename = "RequestedCapabilities",
        default,
        deserialize_with = "super::nullable"
    )]
    pub requested_capabilities: Vec<NomadCsiVolumeCapability>,
    #[serde(rename = "MountOptions", default, deserialize_with = "super::nullable")]
    pub mount_options: Option<NomadCsiMountOptions>,
    /// `null` when empty, as Nomad answers every volume (the server answers none).
    #[serde(
        rename = "Secrets",
        default,
        deserialize_with = "super::nullable",
        serialize_with = "null_if_empty"
    )]
    pub secrets: BTreeMap<String, String>,
    #[serde(rename = "Parameters", default, deserialize_with = "super::nullable")]
    pub parameters: BTreeMap<String, String>,
    #[serde(rename = "Context", default, deserialize_with = "super::nullable")]
    pub context: BTreeMap<String, String>,
    #[serde(rename = "AccessMode", default, deserialize_with = "super::nullable")]
    pub access_mode: String,
    #[serde(
        rename = "AttachmentMode",
        default,
        deserialize_with = "super::nullable"
    )]
    pub attachment_mode: String,
    #[serde(rename = "ReadAllocs", default, deserialize_with = "super::nullable")]
    pub read_allocs: BTreeMap<String, Option<()>>,
    #[serde(rename = "WriteAllocs", default, deserialize_with = "super::nullable")]
    pub write_allocs: BTreeMap<String, Option<()>>,
    #[serde(rename = "ReadClaims", default, deserialize_with = "super::nullable")]
    pub read_claims: Claims,
    #[serde(rename = "WriteClaims", default, deserialize_with = "super::nullable")]
    pub write_claims: Claims,
    #[serde(rename = "PastClaims", default, deserialize_with = "super::nullable")]
    pub past_claims: Claims,
    /// The claiming allocations (of `ReadAllocs` and `WriteAllocs`, read first, each
    /// once) as Nomad fills them in on a read; empty from `From<&CsiVolume>`, which
    /// has no allocations to read: see [`NomadCsiVolume::with_allocations`]. Ignored
    /// in input.
    #[serde(rename = "Allocations", default, deserialize_with = "super::nullable")]
    pub allocations: Vec<NomadAllocListStub>,
    #[serde(
        rename = "ControllerRequired",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controller_required: bool,
    #[serde(
        rename = "ControllersHealthy",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_healthy: usize,
    #[serde(
        rename = "ControllersExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_expected: usize,
    #[serde(rename = "NodesHealthy", default, deserialize_with = "super::nullable")]
    pub nodes_healthy: usize,
    #[serde(
        rename = "NodesExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub nodes_expected: usize,
    #[serde(rename = "Schedulable", default, deserialize_with = "super::nullable")]
    pub schedulable: bool,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&CsiVolume> for NomadCsiVolume {
    fn from(v: &CsiVolume) -> Self {
        NomadCsiVolume {
            id: v.id.to_string(),
            namespace: v.namespace.to_string(),
            name: v.name.clone(),
            external_id: v.external_id.clone(),
            plugin_id: v.plugin_id.to_string(),
            provider: v.provider.clone(),
            provider_version: v.provider_version.clone(),
            topologies: v.topologies.iter().map(Into::into).collect(),
            requested_capabilities: v
                .requested_capabilities
                .iter()
                .map(|c| NomadCsiVolumeCapability {
                    access_mode: access_out(c.access_mode),
                    attachment_mode: attachment_out(c.attachment_mode),
                })
                .collect(),
            mount_options: v.mount_options.as_ref().map(|m| NomadCsiMountOptions {
                fs_type: m.fs_type.clone(),
                mount_flags: m.mount_flags.clone(),
            }),
            secrets: v.secrets.clone(),
            parameters: v.parameters.clone(),
            context: v.context.clone(),
            access_mode: access_out(v.access_mode),
            attachment_mode: attachment_out(v.attachment_mode),
            read_allocs: allocs_out(&v.read_allocs),
            write_allocs: allocs_out(&v.write_allocs),
            read_claims: claims_out(&v.read_claims),
            write_claims: claims_out(&v.write_claims),
            past_claims: claims_out(&v.past_claims),
            allocations: Vec::new(),
            controller_required: v.controller_required,
            controllers_healthy: v.controllers_healthy,
            controllers_expected: v.controllers_expected,
            nodes_healthy: v.nodes_healthy,
            nodes_expected: v.nodes_expected,
            schedulable: v.schedulable,
            create_index: v.create_index,
            modify_index: v.modify_index,
        }
    }
}

impl TryFrom<NomadCsiVolume> for CsiVolume {
    type Error = ShapeError;

    fn try_from(v: NomadCsiVolume) -> Result<Self, ShapeError> {
        let mut out = CsiVolume::new(v.namespace.as_str(), v.id.as_str(), v.plugin_id.as_str());
        out.name = v.name;
        out.external_id = v.external_id;
        out.provider = v.provider;
        out.provider_version = v.provider_version;
        out.topologies = v.topologies.into_iter().map(Into::into).collect();
        out.requested_capabilities = v
            .requested_capabilities
            .into_iter()
            .map(|c| {
                Ok(CsiVolumeCapability {
                    access_mode: access_in("RequestedCapabilities.AccessMode", &c.access_mode)?,
                    attachment_mode: attachment_in(
                        "RequestedCapabilities.AttachmentMode",
                        &c.attachment_mode,
                    )?,
                })
            })
            .collect::<Result<_, ShapeError>>()?;
        out.mount_options = v.mount_options.map(|m| CsiMountOptions {
            fs_type: m.fs_type,
            mount_flags: m.mount_flags,
        });
        out.secrets = v.secrets;
        out.parameters = v.parameters;
        out.context = v.context;
        out.access_mode = access_in("AccessMode", &v.access_mode)?;
        out.attachment_mode = attachment_in("AttachmentMode", &v.attachment_mode)?;
        out.read_allocs = v
            .read_allocs
            .into_keys()
            .map(|k| Id::from(k.as_str()))
            .collect();
        out.write_allocs = v
            .write_allocs
            .into_keys()
            .map(|k| Id::from(k.as_str()))
            .collect();
        out.read_claims = claims_in(v.read_claims)?;
        out.write_claims = claims_in(v.write_claims)?;
        out.past_claims = claims_in(v.past_claims)?;
        out.controller_required = v.controller_required;
        out.controllers_healthy = v.controllers_healthy;
        out.controllers_expected = v.controllers_expected;
        out.nodes_healthy = v.nodes_healthy;
        out.nodes_expected = v.nodes_expected;
        out.schedulable = v.schedulable;
        out.create_index = v.create_index;
        out.modify_index = v.modify_index;
        Ok(out)
    }
}

fn null_if_empty<S: serde::Serializer>(
    m: &BTreeMap<String, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    if m.is_empty() {
        s.serialize_none()
    } else {
        m.serialize(s)
    }
}

impl NomadCsiVolume {
    /// The volume with its claiming allocations filled in (`Allocations`), as Nomad
    /// answers a read: each id of `ReadAllocs` then `WriteAllocs` once, looked up by
    /// `alloc`; one no longer stored is left out.
    pub fn with_allocations(
        mut self,
        v: &CsiVolume,
        alloc: impl Fn(&Id) -> Option<NomadAllocListStub>,
    ) -> NomadCsiVolume {
        let mut seen = BTreeSet::new();
        self.allocations = v
            .read_allocs
            .iter()
            .chain(&v.write_allocs)
            .filter(|id| seen.insert(*id))
            .filter_map(alloc)
            .collect();
        self
    }
}

/// Nomad's `CSIVolumeListStub`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NomadCsiVolumeListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace", default, deserialize_with = "super::nullable")]
    pub namespace: String,
    #[serde(rename = "Name", default, deserialize_with = "super::nullable")]
    pub name: String,
    #[serde(rename = "ExternalID", default, deserialize_with = "super::nullable")]
    pub external_id: String,
    #[serde(rename = "Topologies", default, deserialize_with = "super::nullable")]
    pub topologies: Vec<NomadCsiTopology>,
    #[serde(rename = "AccessMode", default, deserialize_with = "super::nullable")]
    pub access_mode: String,
    #[serde(
        rename = "AttachmentMode",
        default,
        deserialize_with = "super::nullable"
    )]
    pub attachment_mode: String,
    #[serde(
        rename = "CurrentReaders",
        default,
        deserialize_with = "super::nullable"
    )]
    pub current_readers: usize,
    #[serde(
        rename = "CurrentWriters",
        default,
        deserialize_with = "super::nullable"
    )]
    pub current_writers: usize,
    #[serde(rename = "Schedulable", default, deserialize_with = "super::nullable")]
    pub schedulable: bool,
    #[serde(rename = "PluginID", default, deserialize_with = "super::nullable")]
    pub plugin_id: String,
    #[serde(rename = "Provider", default, deserialize_with = "super::nullable")]
    pub provider: Id,
    #[serde(
        rename = "ControllerRequired",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controller_required: bool,
    #[serde(
        rename = "ControllersHealthy",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_healthy: usize,
    #[serde(
        rename = "ControllersExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub controllers_expected: usize,
    #[serde(rename = "NodesHealthy", default, deserialize_with = "super::nullable")]
    pub nodes_healthy: usize,
    #[serde(
        rename = "NodesExpected",
        default,
        deserialize_with = "super::nullable"
    )]
    pub nodes_expected: usize,
    #[serde(rename = "CreateIndex", default, deserialize_with = "super::nullable")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex", default, deserialize_with = "super::nullable")]
    pub modify_index: u64,
}

impl From<&CsiVolume> for NomadCsiVolumeListStub {
    fn from(v: &CsiVolume) -> Self {
        NomadCsiVolumeListStub {
            id: v.id.to_string(),
            namespace: v.namespace.to_string(),
            name: v.name.clone(),
            external_id: v.external_id.clone(),
            topologies: v.topologies.iter().map(Into::into).collect(),
            access_mode: access_out(v.access_mode),
            attachment_mode: attachment_out(v.attachment_mode),
            current_readers: v.read_allocs.len(),
            current_writers: v.write_allocs.len(),
            schedulable: v.schedulable,
            plugin_id: v.plugin_id.to_string(),
            provider: v.provider.clone(),
            controller_required: v.controller_required,
            controllers_healthy: v.controllers_healthy,
            controllers_expected: v.controllers_expected,
            nodes_healthy: v.nodes_healthy,
            nodes_expected: v.nodes_expected,
            create_index: v.create_index,
            modify_index: v.modify_index,
        }
    }
}
