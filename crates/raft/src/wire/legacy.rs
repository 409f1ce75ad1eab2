//! The RPCs in the shapes of the previous release (store format 2): what a server of
//! that release sends and decodes, so that a cluster can be upgraded one server at a
//! time.
//!
//! The RPCs that carry commands — `AppendEntries` and `Forward`, the first variants
//! of [`RpcRequest`](super::RpcRequest) — keep the bytes the previous release gave
//! them: a command in its format-2 shape ([`AsV2`] writes it, [`CommandV2`] reads it).
//! A command of format 3 (a job's definition, an ACL salt, the commands appended since)
//! has no such shape; it travels in the variants appended for it
//! (`AppendEntriesCurrent`, `ForwardCurrent`), which an older server refuses as
//! undecodable. A sender uses the old variant whenever every command fits it, so a
//! server of the previous release decodes everything a cluster still at format 2
//! sends ([`crate::formats`] keeps format-3 commands out until every server reads
//! them).

use std::sync::Arc;

use openraft::raft::AppendEntriesRequest;
use openraft::{Entry, EntryPayload};
use schedstate::state::Command;
use schedstate::state::v2::{AsV2, CommandV2};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{NodeId, Proposal, ProposalKeys, TypeConfig};

openraft::declare_raft_types!(
    /// openraft's types with a proposal in the previous release's shape: only what
    /// the wire needs (an `AppendEntries` of that shape).
    pub LegacyConfig:
        D = LegacyProposal,
        R = crate::ApplyResponse,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<LegacyConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A proposal that crosses the wire in the previous release's shape: its commands in
/// format 2, its write keys as they were. Holds the current proposal (no copy of a
/// command's rows either way).
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyProposal(pub Proposal);

/// A command that crosses the wire in its format-2 shape.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyCommand(pub Command);

impl Serialize for LegacyCommand {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        AsV2(&self.0).serialize(s)
    }
}

impl<'de> Deserialize<'de> for LegacyCommand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(LegacyCommand(CommandV2::deserialize(d)?.into()))
    }
}

impl Serialize for LegacyProposal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LegacyProposalRef(&self.0).serialize(s)
    }
}

/// The previous release's proposal, as it decodes.
#[derive(Deserialize)]
struct ProposalV2 {
    commands: Vec<CommandV2>,
    keys: Option<ProposalKeys>,
}

impl<'de> Deserialize<'de> for LegacyProposal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = ProposalV2::deserialize(d)?;
        Ok(LegacyProposal(Proposal {
            commands: p
                .commands
                .into_iter()
                .map(|c| Arc::new(Command::from(c)))
                .collect(),
            keys: p.keys,
            raise_format: None,
        }))
    }
}

/// Whether every entry of `rpc` has a format-2 shape (it can go in the old variant).
pub(crate) fn fits_format_2(rpc: &AppendEntriesRequest<TypeConfig>) -> bool {
    rpc.entries.iter().all(|e| match &e.payload {
        EntryPayload::Normal(p) => {
            p.raise_format.is_none() && p.commands.iter().all(|c| c.fits_format_2())
        }
        EntryPayload::Blank | EntryPayload::Membership(_) => true,
    })
}

/// An `AppendEntries` written in the previous release's shape, borrowed: the bytes of
/// openraft's `AppendEntriesRequest<LegacyConfig>` (its fields in their order, each
/// entry's payload with its proposal in format 2) without copying the entries. Only
/// a request that [fits](fits_format_2) can be written.
pub(crate) struct LegacyAppend<'a>(pub &'a AppendEntriesRequest<TypeConfig>);

impl Serialize for LegacyAppend<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let rpc = self.0;
        let entries: Vec<LegacyEntry<'_>> = rpc.entries.iter().map(LegacyEntry).collect();
        let mut r = s.serialize_struct("AppendEntriesRequest", 4)?;
        r.serialize_field("vote", &rpc.vote)?;
        r.serialize_field("prev_log_id", &rpc.prev_log_id)?;
        r.serialize_field("entries", &entries)?;
        r.serialize_field("leader_commit", &rpc.leader_commit)?;
        r.end()
    }
}

struct LegacyEntry<'a>(&'a crate::Entry);

impl Serialize for LegacyEntry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut e = s.serialize_struct("Entry", 2)?;
        e.serialize_field("log_id", &self.0.log_id)?;
        e.serialize_field("payload", &LegacyPayload(&self.0.payload))?;
        e.end()
    }
}

struct LegacyPayload<'a>(&'a EntryPayload<TypeConfig>);

impl Serialize for LegacyPayload<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            EntryPayload::Blank => s.serialize_unit_variant("EntryPayload", 0, "Blank"),
            EntryPayload::Normal(p) => {
                s.serialize_newtype_variant("EntryPayload", 1, "Normal", &LegacyProposalRef(p))
            }
            EntryPayload::Membership(m) => {
                s.serialize_newtype_variant("EntryPayload", 2, "Membership", m)
            }
        }
    }
}

/// A proposal written in its format-2 shape, borrowed.
struct LegacyProposalRef<'a>(&'a Proposal);

impl Serialize for LegacyProposalRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.raise_format.is_some() {
            return Err(serde::ser::Error::custom(
                "an entry raising the cluster's format has no format-2 shape",
            ));
        }
        let commands: Vec<AsV2<'_>> = self.0.commands.iter().map(|c| AsV2(c)).collect();
        let mut p = s.serialize_struct("Proposal", 2)?;
        p.serialize_field("commands", &commands)?;
        p.serialize_field("keys", &self.0.keys)?;
        p.end()
    }
}

/// An `AppendEntries` of the previous release's shape as this build's.
pub(crate) fn from_legacy(
    rpc: AppendEntriesRequest<LegacyConfig>,
) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: rpc.vote,
        prev_log_id: rpc.prev_log_id,
        leader_commit: rpc.leader_commit,
        entries: rpc
            .entries
            .into_iter()
            .map(|e| Entry {
                log_id: e.log_id,
                payload: match e.payload {
                    EntryPayload::Blank => EntryPayload::Blank,
                    EntryPayload::Normal(LegacyProposal(p)) => EntryPayload::Normal(p),
                    EntryPayload::Membership(m) => EntryPayload::Membership(m),
                },
            })
            .collect(),
    }
}
