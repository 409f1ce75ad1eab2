//! Restoring a snapshot file (the store's `SCHEDSNP` format) into the running cluster,
//! through the log, so that every server — one that was down included — ends with the
//! same state.
//!
//! The leader checks the whole file first (format, checksums, every invariant, in a
//! scratch store): a bad file is refused before anything is proposed. It then
//! proposes the file in pieces of at most [`RESTORE_CHUNK_BYTES`], each alone in its
//! entry ([`Command::StageSnapshotChunk`]), and last [`Command::RestoreSnapshot`]
//! with the file's length and SHA-256. Every state machine, deterministically:
//!
//! - stages each piece in order (piece 0 begins a restore and abandons any other one
//!   staged; a piece out of order, of another restore, or past
//!   [`MAX_RESTORE_BYTES`] is refused and drops the staging);
//! - keeps the staging in every Raft snapshot it builds (a trailing section of the
//!   snapshot file, [`crate::snapshot_file`]), so a server that installs a snapshot
//!   taken between two pieces still holds the earlier ones;
//! - on the last entry, at index `R`, checks that the staged pieces make the stated
//!   length and hash, restores them with every check
//!   ([`StateStore::restore_from_at`]), the state's indexes all becoming `R`, and
//!   fires every watch. A staging that is incomplete or fails a check makes the entry
//!   a refused no-op everywhere (the refusal answers the proposer). The staging is
//!   dropped either way.
//!
//! Pieces are entries like others: they are replicated, kept in the log until a
//! snapshot covers them, and each fits well inside an RPC
//! ([`MAX_RPC_BYTES`](crate::wire::MAX_RPC_BYTES)).

use std::io::Read;
use std::sync::Arc;

use schedstate::persist::PersistError;
use schedstate::state::{Command, StateError, StateStore};
use sha2::{Digest, Sha256};

use crate::error::ProposeError;
use crate::server::{Committed, Server};
use crate::state_machine::Outcome;
use crate::{NodeId, Proposal};

/// The largest piece of a file one log entry carries.
pub const RESTORE_CHUNK_BYTES: usize = 4 << 20;

/// The largest file a cluster restores: what every server may stage (in memory, and in
/// its Raft snapshots while a restore is under way).
pub const MAX_RESTORE_BYTES: u64 = 1 << 30;

/// A restore's pieces staged by a state machine, waiting for its last entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Staging {
    /// The restore they belong to.
    pub restore: u64,
    /// The pieces, in order: the commands of the entries that carried them (shared
    /// with the log's cache, not copied).
    pub pieces: Vec<Arc<Command>>,
    /// Their bytes in all.
    pub len: u64,
}

/// The bytes of a piece (empty for any other command).
pub(crate) fn piece_bytes(command: &Command) -> &[u8] {
    match command {
        Command::StageSnapshotChunk { bytes, .. } => bytes,
        _ => &[],
    }
}

impl Staging {
    /// Staging rebuilt from its pieces' bytes (a Raft snapshot's section).
    pub(crate) fn from_pieces(restore: u64, pieces: Vec<Vec<u8>>) -> Staging {
        let len = pieces.iter().map(|p| p.len() as u64).sum();
        let pieces = pieces
            .into_iter()
            .enumerate()
            .map(|(seq, bytes)| {
                Arc::new(Command::StageSnapshotChunk {
                    restore,
                    seq: seq as u32,
                    bytes,
                })
            })
            .collect();
        Staging {
            restore,
            pieces,
            len,
        }
    }

    /// The staged bytes, piece by piece.
    pub(crate) fn bytes(&self) -> impl Iterator<Item = &[u8]> {
        self.pieces.iter().map(|p| piece_bytes(p))
    }
}

fn refused(reason: impl Into<String>) -> StateError {
    StateError::RestoreRefused {
        reason: reason.into(),
    }
}

/// Applies a [`Command::StageSnapshotChunk`] to `staging` (see the module's doc).
///
/// # Errors
/// [`StateError::RestoreRefused`] when the piece does not follow the staged ones or
/// would take the staging past [`MAX_RESTORE_BYTES`]; the staging of its restore is
/// then dropped.
pub(crate) fn stage(
    staging: &mut Option<Staging>,
    command: &Arc<Command>,
) -> Result<(), StateError> {
    let Command::StageSnapshotChunk {
        restore,
        seq,
        bytes,
    } = &**command
    else {
        return Err(refused(format!("{} is not a piece", command.kind())));
    };
    if *seq == 0 {
        if let Some(old) = staging.take()
            && old.restore != *restore
        {
            tracing::info!(
                abandoned = old.restore,
                pieces = old.pieces.len(),
                restore,
                "a new restore abandons the one staged"
            );
        }
        *staging = Some(Staging::default());
    } else {
        match staging {
            Some(s) if s.restore == *restore && s.pieces.len() as u64 == u64::from(*seq) => {}
            Some(s) if s.restore == *restore => {
                let expected = s.pieces.len();
                *staging = None;
                return Err(refused(format!(
                    "piece {seq} of restore {restore} arrived when piece {expected} was due; \
                     the restore is abandoned"
                )));
            }
            _ => {
                return Err(refused(format!(
                    "piece {seq} of restore {restore}, which is not staged (a newer restore \
                     began, or its first piece was refused)"
                )));
            }
        }
    }
    let s = staging.get_or_insert_with(Staging::default);
    let len = s.len + bytes.len() as u64;
    if len > MAX_RESTORE_BYTES {
        *staging = None;
        return Err(refused(format!(
            "restore {restore} is over the limit of {MAX_RESTORE_BYTES} bytes; abandoned"
        )));
    }
    s.restore = *restore;
    s.len = len;
    s.pieces.push(command.clone());
    Ok(())
}

/// Reads staged pieces as one stream.
struct PiecesReader<'s> {
    pieces: Vec<&'s [u8]>,
    at: usize,
}

impl Read for PiecesReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at < self.pieces.len() {
            let piece = &mut self.pieces[self.at];
            if piece.is_empty() {
                self.at += 1;
                continue;
            }
            return piece.read(buf);
        }
        Ok(0)
    }
}

/// Applies a [`Command::RestoreSnapshot`] at `index`: the staged file checked against
/// the command's length and hash, then restored into `store` with every check, its
/// indexes all `index` ([`StateStore::restore_from_at`]; every watch fires). The
/// staging is dropped whatever the outcome.
///
/// # Errors
/// [`StateError::RestoreRefused`] saying what did not match or which check failed;
/// the store is unchanged.
pub(crate) fn commit(
    staging: &mut Option<Staging>,
    store: &StateStore,
    index: u64,
    command: &Command,
) -> Result<(), StateError> {
    let Command::RestoreSnapshot {
        restore,
        chunks,
        len,
        sha256,
    } = command
    else {
        return Err(refused(format!("{} is not a restore", command.kind())));
    };
    let Some(s) = staging.take().filter(|s| s.restore == *restore) else {
        return Err(refused(format!(
            "restore {restore} is not staged (a newer restore began, or a piece was refused)"
        )));
    };
    if s.pieces.len() as u64 != u64::from(*chunks) || s.len != *len {
        return Err(refused(format!(
            "restore {restore} staged {} pieces of {} bytes, its last entry says {chunks} of {len}",
            s.pieces.len(),
            s.len
        )));
    }
    let mut hash = Sha256::new();
    for piece in s.bytes() {
        hash.update(piece);
    }
    if hash.finalize().as_slice() != sha256 {
        return Err(refused(format!(
            "restore {restore}: the staged bytes do not hash to the SHA-256 its last entry states"
        )));
    }
    let mut reader = PiecesReader {
        pieces: s.bytes().collect(),
        at: 0,
    };
    store
        .restore_from_at(&mut reader, index)
        .map_err(|e| refused(format!("restore {restore}: the file fails its checks: {e}")))?;
    tracing::info!(
        restore,
        index,
        bytes = s.len,
        "restored a snapshot file into the cluster's state"
    );
    Ok(())
}

/// Applies an entry holding a restore's command at `index`, as every state machine
/// (and `inspect`'s replay) does: a piece is staged, the last entry restores. A
/// restore's command shares its entry with no other (the leader proposes each alone);
/// an entry that mixes them, or carries write keys, is refused whole — a no-op. Returns
/// the outcome per command and whether the state was replaced.
pub(crate) fn apply_entry(
    staging: &mut Option<Staging>,
    store: &StateStore,
    index: u64,
    proposal: &Proposal,
) -> (Vec<Outcome>, bool) {
    match proposal.commands.as_slice() {
        [one] if proposal.keys.is_none() => {
            let result = match &**one {
                Command::RestoreSnapshot { .. } => commit(staging, store, index, one),
                _ => stage(staging, one),
            };
            let restored = result.is_ok() && matches!(&**one, Command::RestoreSnapshot { .. });
            let outcome = match result {
                Ok(()) => Outcome::Applied,
                Err(e) => Outcome::Refused(e),
            };
            (vec![outcome], restored)
        }
        many => {
            let e = refused("a restore's command must be alone in its entry, without a write key");
            (vec![Outcome::Refused(e); many.len()], false)
        }
    }
}

/// Why a restore was not done.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The file is larger than [`MAX_RESTORE_BYTES`]; nothing was proposed.
    #[error("the snapshot file is {bytes} bytes, over the limit of {limit}")]
    TooLarge {
        /// The file's size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The file failed its checks (format, checksums, an invariant); nothing was
    /// proposed, nothing changed.
    #[error("the snapshot file fails its checks: {0}")]
    Invalid(#[source] PersistError),
    /// Another restore is under way on this server.
    #[error("another restore is under way on this server; retry when it is done")]
    Busy,
    /// Proposing a piece or the last entry failed: not the leader, the leadership
    /// lost meanwhile, or the last entry refused (see [`ProposeError`]). The state is
    /// unchanged unless the error says the outcome is unknown; a retry restores the
    /// file again from its first piece.
    #[error(transparent)]
    Propose(#[from] ProposeError),
}

/// A restore done: the index of its last entry (every index of the restored state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The entry that replaced the state: every index of the restored state is this.
    pub index: u64,
    /// The file's size.
    pub bytes: u64,
    /// How many pieces carried it.
    pub pieces: u32,
}

/// A restore's number: unique enough among the restores of one cluster (the leader's
/// id, the time, randomness).
fn restore_id(server: NodeId) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ fastrand::u64(..)).rotate_left(16) ^ server
}

impl Server {
    /// Restores `file` (a `SCHEDSNP` snapshot, as `GET /v1/operator/snapshot` or
    /// `schedstate snapshot save` wrote it) into the whole cluster, on its leader: the
    /// file is checked entirely first, then proposed in pieces and restored by every
    /// server at the index of the last entry (see the module's doc). Returns once
    /// that entry is applied here.
    ///
    /// # Errors
    /// [`RestoreError::TooLarge`] and [`RestoreError::Invalid`] before anything is
    /// proposed; [`RestoreError::Busy`]; [`RestoreError::Propose`] with
    /// [`ProposeError::NotLeader`] on a follower, of kind
    /// [`FORMAT_NOT_ENABLED`](crate::FORMAT_NOT_ENABLED) while a server of the
    /// previous release is a member (it could not decode the pieces), or when a piece
    /// or the last entry was not committed or was refused.
    pub async fn restore_snapshot(&self, file: Arc<[u8]>) -> Result<Restored, RestoreError> {
        let bytes = file.len() as u64;
        if bytes > MAX_RESTORE_BYTES {
            return Err(RestoreError::TooLarge {
                bytes,
                limit: MAX_RESTORE_BYTES,
            });
        }
        let Ok(_one) = self.restoring().try_lock() else {
            return Err(RestoreError::Busy);
        };
        // Every check, in a scratch store, off the async workers.
        let checked = file.clone();
        tokio::task::spawn_blocking(move || {
            StateStore::new()
                .restore_from(&mut &checked[..])
                .map(|_| ())
        })
        .await
        .map_err(|e| {
            RestoreError::Invalid(PersistError::Io {
                path: "<restore>".into(),
                source: std::io::Error::other(e.to_string()),
            })
        })?
        .map_err(RestoreError::Invalid)?;
        if !self.is_leader() {
            let leader = self.leader_node().await;
            return Err(RestoreError::Propose(ProposeError::NotLeader {
                leader: leader.as_ref().map(|(id, _)| *id),
                address: leader.map(|(_, addr)| addr),
            }));
        }
        let restore = restore_id(self.id());
        // Every server must read the restore's commands (format 3): the cluster's
        // format is raised first if every member reads it, else the restore is
        // refused before anything is proposed (`formats.rs`).
        self.fit_to_cluster(Command::RestoreSnapshot {
            restore,
            chunks: 0,
            len: 0,
            sha256: [0; 32],
        })
        .await?;
        let mut hash = Sha256::new();
        let mut pieces = 0u32;
        for (seq, piece) in file.chunks(RESTORE_CHUNK_BYTES).enumerate() {
            hash.update(piece);
            pieces += 1;
            self.propose_restore(Command::StageSnapshotChunk {
                restore,
                seq: seq as u32,
                bytes: piece.to_vec(),
            })
            .await?;
        }
        let index = self
            .propose_restore(Command::RestoreSnapshot {
                restore,
                chunks: pieces,
                len: bytes,
                sha256: hash.finalize().into(),
            })
            .await?
            .index;
        Ok(Restored {
            index,
            bytes,
            pieces,
        })
    }

    /// Proposes one command of a restore alone in its entry (never batched with
    /// others) and waits for its apply here.
    async fn propose_restore(&self, command: Command) -> Result<Committed, ProposeError> {
        let written = self
            .raft()
            .client_write(Proposal::new(vec![Arc::new(command)]))
            .await
            .map_err(ProposeError::from_write)?;
        let index = written.log_id.index;
        match written.data.outcomes.into_iter().next() {
            Some(Outcome::Refused(error)) => Err(ProposeError::Refused { index, error }),
            _ => Ok(Committed::at(index)),
        }
    }
}

#[cfg(test)]
mod tests;
