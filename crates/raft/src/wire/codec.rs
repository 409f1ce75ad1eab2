//! [`RpcRequest`]'s bytes: the previous release's variants while the commands fit its
//! format (`legacy.rs`), the appended ones for format 3.

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use schedstate::state::Command;
use schedstate::state::v2::AsV2;
use serde::{Deserialize, Serialize};

use super::{RpcRequest, legacy};
use crate::inbound::RpcRefused;
use crate::pre_vote::PreVoteRequest;
use crate::transfer::TimeoutNowRequest;
use crate::{NodeId, TypeConfig, WriteKey};

/// [`RpcRequest`] as it is written: the commands of `AppendEntries` and `Forward` in
/// their format-2 shape, those that need format 3 in the variants after `TimeoutNow`.
#[derive(Serialize)]
enum WireRequestOut<'a> {
    AppendEntries(legacy::LegacyAppend<'a>),
    Vote(&'a VoteRequest<NodeId>),
    InstallSnapshot(&'a InstallSnapshotRequest<TypeConfig>),
    Forward(AsV2<'a>, &'a Option<WriteKey>),
    ReadIndex,
    PreVote(&'a PreVoteRequest),
    TimeoutNow(&'a TimeoutNowRequest),
    AppendEntriesCurrent(&'a AppendEntriesRequest<TypeConfig>),
    ForwardCurrent(&'a Command, &'a Option<WriteKey>),
    Formats,
}

/// [`RpcRequest`] as it is read (the variants of [`WireRequestOut`], owned).
#[derive(Deserialize)]
enum WireRequestIn {
    AppendEntries(AppendEntriesRequest<legacy::LegacyConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Forward(legacy::LegacyCommand, Option<WriteKey>),
    ReadIndex,
    PreVote(PreVoteRequest),
    TimeoutNow(TimeoutNowRequest),
    AppendEntriesCurrent(AppendEntriesRequest<TypeConfig>),
    ForwardCurrent(Command, Option<WriteKey>),
    Formats,
}

impl RpcRequest {
    fn wire(&self) -> WireRequestOut<'_> {
        match self {
            RpcRequest::AppendEntries(rpc) if legacy::fits_format_2(rpc) => {
                WireRequestOut::AppendEntries(legacy::LegacyAppend(rpc))
            }
            RpcRequest::AppendEntries(rpc) => WireRequestOut::AppendEntriesCurrent(rpc),
            RpcRequest::Vote(rpc) => WireRequestOut::Vote(rpc),
            RpcRequest::InstallSnapshot(rpc) => WireRequestOut::InstallSnapshot(rpc),
            RpcRequest::Forward(command, key) if command.fits_format_2() => {
                WireRequestOut::Forward(AsV2(command), key)
            }
            RpcRequest::Forward(command, key) => WireRequestOut::ForwardCurrent(command, key),
            RpcRequest::ReadIndex => WireRequestOut::ReadIndex,
            RpcRequest::PreVote(rpc) => WireRequestOut::PreVote(rpc),
            RpcRequest::TimeoutNow(rpc) => WireRequestOut::TimeoutNow(rpc),
            RpcRequest::Formats => WireRequestOut::Formats,
        }
    }

    /// Its bytes on the wire (postcard).
    ///
    /// # Errors
    /// A value postcard cannot encode (does not happen for these types).
    pub fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
        postcard::to_extend(&self.wire(), Vec::new())
    }

    /// Reads one from its bytes: all of them, nothing may follow it.
    ///
    /// # Errors
    /// [`RpcRefused::Malformed`]: the bytes are not one value of this type.
    pub fn decode(bytes: &[u8]) -> Result<Self, RpcRefused> {
        let (value, rest) = postcard::take_from_bytes::<WireRequestIn>(bytes)
            .map_err(|e| RpcRefused::Malformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(RpcRefused::Malformed(format!(
                "{} bytes follow the value",
                rest.len()
            )));
        }
        Ok(match value {
            WireRequestIn::AppendEntries(rpc) => {
                RpcRequest::AppendEntries(legacy::from_legacy(rpc))
            }
            WireRequestIn::AppendEntriesCurrent(rpc) => RpcRequest::AppendEntries(rpc),
            WireRequestIn::Vote(rpc) => RpcRequest::Vote(rpc),
            WireRequestIn::InstallSnapshot(rpc) => RpcRequest::InstallSnapshot(rpc),
            WireRequestIn::Forward(legacy::LegacyCommand(command), key)
            | WireRequestIn::ForwardCurrent(command, key) => RpcRequest::Forward(command, key),
            WireRequestIn::ReadIndex => RpcRequest::ReadIndex,
            WireRequestIn::PreVote(rpc) => RpcRequest::PreVote(rpc),
            WireRequestIn::TimeoutNow(rpc) => RpcRequest::TimeoutNow(rpc),
            WireRequestIn::Formats => RpcRequest::Formats,
        })
    }
}
