//! [`SnapshotReceiver`]: a snapshot sent in chunks, received here rather than by
//! openraft's own chunk path, so that no chunk can make the server allocate what a
//! sender claims or hand openraft a snapshot that fails to install.
//!
//! openraft 0.9 writes each chunk at its offset into the snapshot buffer (a chunk at
//! offset 2^40 allocated a terabyte) and, on the last chunk, installs whatever the
//! buffer holds: a snapshot that does not decode is a storage error, and its core
//! stops. Here:
//!
//! - a chunk is taken only at exactly the offset received so far; offset 0 starts a
//!   new snapshot (and drops a partial one), anything else out of place is openraft's
//!   own `SnapshotMismatch` answer, on which a leader starts over from offset 0;
//! - the bytes received never exceed the cap ([`ServerOptions::max_snapshot_bytes`](crate::ServerOptions));
//! - on the last chunk the whole snapshot is decoded ([`check_snapshot`], off the
//!   async runtime's threads) (format, checksums, the metadata
//!   against the transfer's) and restored into a scratch store, which checks every
//!   invariant — only a snapshot that passes is handed to openraft
//!   (`Raft::install_full_snapshot`), so installing it cannot fail on its content.

use std::path::Path;

use openraft::error::{InstallSnapshotError, SnapshotMismatch};
use openraft::raft::InstallSnapshotRequest;
use openraft::{BasicNode, SnapshotMeta, SnapshotSegmentId, Vote};
use schedstate::state::{StateSnapshot, StateStore};

use crate::inbound::RpcRefused;
use crate::snapshot_file;
use crate::{NodeId, TypeConfig};

/// A snapshot being received.
#[derive(Debug)]
struct Partial {
    vote: Vote<NodeId>,
    meta: SnapshotMeta<NodeId, BasicNode>,
    bytes: Vec<u8>,
}

/// What a chunk did.
#[derive(Debug)]
pub enum Received {
    /// Taken; more chunks are expected.
    More,
    /// The last chunk: the whole snapshot, to be checked ([`check_snapshot`]) before
    /// it is installed.
    Done {
        /// The leader's vote.
        vote: Vote<NodeId>,
        /// The snapshot's metadata.
        meta: SnapshotMeta<NodeId, BasicNode>,
        /// The snapshot file's bytes.
        bytes: Vec<u8>,
    },
    /// Out of place: openraft's answer, telling the leader to start over.
    Mismatch(InstallSnapshotError),
}

/// The chunks received so far of at most one snapshot.
#[derive(Debug, Default)]
pub struct SnapshotReceiver {
    partial: Option<Partial>,
}

impl SnapshotReceiver {
    /// Bytes held for the snapshot being received.
    pub fn held(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.bytes.len())
    }

    /// Takes one chunk (its vote already found current by the caller), up to `cap`
    /// bytes of snapshot in all.
    ///
    /// # Errors
    /// [`RpcRefused::Snapshot`]: over the cap; the partial snapshot is dropped.
    pub fn accept(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        cap: u64,
    ) -> Result<Received, RpcRefused> {
        let InstallSnapshotRequest {
            vote,
            meta,
            offset,
            data,
            done,
        } = rpc;
        if offset == 0 {
            self.partial = Some(Partial {
                vote,
                meta,
                bytes: Vec::new(),
            });
        } else {
            let expect = self.partial.as_ref().map(|p| SnapshotSegmentId {
                id: p.meta.snapshot_id.clone(),
                offset: p.bytes.len() as u64,
            });
            let fits = self.partial.as_ref().is_some_and(|p| {
                p.meta.snapshot_id == meta.snapshot_id
                    && p.vote == vote
                    && p.bytes.len() as u64 == offset
            });
            if !fits {
                let got = SnapshotSegmentId {
                    id: meta.snapshot_id,
                    offset,
                };
                let expect = expect.unwrap_or(SnapshotSegmentId {
                    id: String::new(),
                    offset: 0,
                });
                return Ok(Received::Mismatch(InstallSnapshotError::SnapshotMismatch(
                    SnapshotMismatch { expect, got },
                )));
            }
        }
        let Some(partial) = self.partial.as_mut() else {
            unreachable!("a partial snapshot was set or found above");
        };
        let total = (partial.bytes.len() as u64).saturating_add(data.len() as u64);
        if total > cap {
            self.partial = None;
            return Err(RpcRefused::Snapshot(format!(
                "the snapshot grows past the limit of {cap} bytes"
            )));
        }
        partial.bytes.extend_from_slice(&data);
        if !done {
            return Ok(Received::More);
        }
        let Partial { vote, meta, bytes } = self.partial.take().expect("checked above");
        Ok(Received::Done { vote, meta, bytes })
    }
}

/// A received snapshot restored into a scratch store and checked, waiting for the
/// state machine to install it: the install takes the scratch store's state as it
/// is (O(1), [`StateStore::restore_state_of`]) instead of decoding the snapshot a
/// second time.
pub struct CheckedSnapshot {
    /// The snapshot's metadata (the install takes the state only for the same one).
    pub meta: SnapshotMeta<NodeId, BasicNode>,
    /// The state it holds.
    pub state: StateSnapshot,
}

/// Decodes a received snapshot and restores it into a scratch store: its format,
/// checksums, metadata (against the transfer's) and every state invariant. Returns
/// the scratch store's state.
///
/// # Errors
/// [`RpcRefused::Snapshot`] saying what is wrong.
pub fn check_snapshot(
    meta: &SnapshotMeta<NodeId, BasicNode>,
    bytes: &[u8],
) -> Result<StateSnapshot, RpcRefused> {
    let refuse = |why: String| RpcRefused::Snapshot(why);
    let snapshot_file::Decoded {
        meta: inner,
        mut body,
        ..
    } = snapshot_file::decode(Path::new("<received snapshot>"), bytes)
        .map_err(|e| refuse(e.to_string()))?;
    if inner.last_log_id != meta.last_log_id || inner.last_membership != meta.last_membership {
        return Err(refuse(format!(
            "the snapshot says it ends at {:?}, its transfer at {:?}",
            inner.last_log_id, meta.last_log_id
        )));
    }
    let scratch = StateStore::new();
    scratch
        .restore_from(&mut body)
        .map_err(|e| refuse(format!("the snapshot does not restore: {e}")))?;
    Ok(scratch.snapshot())
}

/// A snapshot file as a leader sends it: `meta` in front of the state `snap` in the
/// store's format. For tests and fuzzing of the receiving side; servers build theirs
/// when openraft asks.
///
/// # Errors
/// The state cannot be written (it always can in memory).
pub fn encode_snapshot(
    meta: &SnapshotMeta<NodeId, BasicNode>,
    snap: &schedstate::state::StateSnapshot,
) -> Result<Vec<u8>, schedstate::persist::PersistError> {
    snapshot_file::encode(
        meta,
        &crate::WriteKeys::default(),
        None,
        snap,
        crate::NEWEST_FORMAT,
    )
}
