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
mod tests {
    use std::path::Path;

    use openraft::{BasicNode, SnapshotMeta};
    use schedstate::model::Node;
    use schedstate::state::Table;

    use super::*;
    use crate::WriteKeys;
    use crate::snapshot_file;

    /// A snapshot file of a store with `nodes` nodes written at indexes 1..=nodes.
    fn file(nodes: usize) -> Vec<u8> {
        let store = StateStore::new();
        for i in 0..nodes {
            let node = Node::new(format!("node-{i}"), format!("client-{i}"));
            store
                .apply(i as u64 + 1, &Command::UpsertNode { node })
                .unwrap();
        }
        let mut bytes = Vec::new();
        store.snapshot_to(&mut bytes).unwrap();
        bytes
    }

    /// The commands a leader proposes for `bytes`, in pieces of `piece` bytes.
    fn commands(restore: u64, bytes: &[u8], piece: usize) -> (Vec<Arc<Command>>, Command) {
        let pieces: Vec<Arc<Command>> = bytes
            .chunks(piece)
            .enumerate()
            .map(|(seq, b)| {
                Arc::new(Command::StageSnapshotChunk {
                    restore,
                    seq: seq as u32,
                    bytes: b.to_vec(),
                })
            })
            .collect();
        let last = Command::RestoreSnapshot {
            restore,
            chunks: pieces.len() as u32,
            len: bytes.len() as u64,
            sha256: Sha256::digest(bytes).into(),
        };
        (pieces, last)
    }

    fn canonical(store: &StateStore) -> Vec<u8> {
        store.snapshot().canonical_bytes().unwrap()
    }

    #[test]
    fn pieces_then_the_last_entry_restore_the_file_with_every_index_at_the_entry() {
        let bytes = file(5);
        let (pieces, last) = commands(7, &bytes, 100);
        assert!(pieces.len() > 2);
        let store = StateStore::new();
        let mut staging = None;
        for p in &pieces {
            stage(&mut staging, p).unwrap();
        }
        commit(&mut staging, &store, 40, &last).unwrap();
        assert!(staging.is_none());
        let v = store.snapshot();
        let v = v.view();
        assert_eq!(v.last_applied(), 40);
        assert_eq!(v.table_index(Table::Nodes), 40);
        assert_eq!(v.table_index(Table::Jobs), 40);
        // Never bootstrapped: the tokens table stays at 0.
        assert!(!v.acl_bootstrapped());
        assert_eq!(v.nodes().count(), 5);
        assert!(
            v.nodes()
                .all(|n| n.create_index == 40 && n.modify_index == 40)
        );
        // The next write applies after it.
        let node = Node::new("node-new", "client-new");
        store.apply(41, &Command::UpsertNode { node }).unwrap();
    }

    #[test]
    fn staging_survives_a_raft_snapshot_taken_between_pieces() {
        let bytes = file(20);
        let (pieces, last) = commands(9, &bytes, 64);
        let half = pieces.len() / 2;
        let state = StateStore::new();
        state
            .apply(
                1,
                &Command::UpsertNode {
                    node: Node::new("before", "before"),
                },
            )
            .unwrap();
        let mut staging = None;
        for p in &pieces[..half] {
            stage(&mut staging, p).unwrap();
        }
        // A snapshot built now holds the staged pieces; a server installs it.
        let meta = SnapshotMeta::<NodeId, BasicNode>::default();
        let snap = snapshot_file::encode(
            &meta,
            &WriteKeys::default(),
            staging.as_ref(),
            &state.snapshot(),
            3,
        )
        .unwrap();
        assert_eq!(
            u32::from_le_bytes(snap[8..12].try_into().unwrap()),
            snapshot_file::RAFT_SNAPSHOT_STAGED_VERSION
        );
        let other = StateStore::new();
        let (_, _, _, mut installed) =
            snapshot_file::restore(Path::new("<test>"), &snap, &other).unwrap();
        assert_eq!(installed, staging);
        for p in &pieces[half..] {
            stage(&mut installed, p).unwrap();
        }
        commit(&mut installed, &other, 90, &last).unwrap();
        assert_eq!(other.snapshot().view().nodes().count(), 20);

        // Without staging the file is version 2, as before restores existed.
        let plain = snapshot_file::encode(&meta, &WriteKeys::default(), None, &state.snapshot(), 3)
            .unwrap();
        assert_eq!(u32::from_le_bytes(plain[8..12].try_into().unwrap()), 2);
        let (_, _, _, none) =
            snapshot_file::restore(Path::new("<test>"), &plain, &StateStore::new()).unwrap();
        assert!(none.is_none());
    }

    #[test]
    fn a_piece_out_of_order_abandons_the_restore_and_its_last_entry_changes_nothing() {
        let bytes = file(5);
        let (pieces, last) = commands(3, &bytes, 50);
        let store = StateStore::new();
        store
            .apply(
                1,
                &Command::UpsertNode {
                    node: Node::new("kept", "kept"),
                },
            )
            .unwrap();
        let before = canonical(&store);
        let mut staging = None;
        stage(&mut staging, &pieces[0]).unwrap();
        let e = stage(&mut staging, &pieces[2]).unwrap_err();
        assert_eq!(e.kind(), "RestoreRefused");
        assert!(staging.is_none());
        for p in &pieces[1..] {
            assert!(stage(&mut staging, p).is_err());
        }
        let e = commit(&mut staging, &store, 50, &last).unwrap_err();
        assert_eq!(e.kind(), "RestoreRefused", "{e}");
        assert_eq!(canonical(&store), before);
    }

    #[test]
    fn a_hash_or_length_mismatch_or_a_bad_file_is_refused() {
        let bytes = file(3);
        let store = StateStore::new();
        let before = canonical(&store);

        let (pieces, last) = commands(4, &bytes, 40);
        let mut staging = None;
        for p in &pieces {
            stage(&mut staging, p).unwrap();
        }
        let Command::RestoreSnapshot {
            restore,
            chunks,
            len,
            mut sha256,
        } = last
        else {
            unreachable!()
        };
        sha256[0] ^= 1;
        let wrong = Command::RestoreSnapshot {
            restore,
            chunks,
            len,
            sha256,
        };
        let e = commit(&mut staging, &store, 10, &wrong).unwrap_err();
        assert!(e.to_string().contains("SHA-256"), "{e}");
        assert!(staging.is_none());

        // A file whose hash matches but whose bytes are damaged: the checks refuse it.
        let mut bad = bytes.clone();
        let at = bad.len() - 10;
        bad[at] ^= 0xff;
        let (pieces, last) = commands(5, &bad, 40);
        for p in &pieces {
            stage(&mut staging, p).unwrap();
        }
        let e = commit(&mut staging, &store, 11, &last).unwrap_err();
        assert!(e.to_string().contains("fails its checks"), "{e}");
        assert_eq!(canonical(&store), before);
    }

    #[test]
    fn a_new_restore_abandons_the_one_staged() {
        let a = file(2);
        let b = file(4);
        let (pa, la) = commands(1, &a, 30);
        let (pb, lb) = commands(2, &b, 30);
        let store = StateStore::new();
        let mut staging = None;
        stage(&mut staging, &pa[0]).unwrap();
        for p in &pb {
            stage(&mut staging, p).unwrap();
        }
        assert!(stage(&mut staging, &pa[1]).is_err());
        assert!(commit(&mut staging, &store, 5, &la).is_err());
        // The refused entry dropped restore 2's staging too: it must start again.
        assert!(commit(&mut staging, &store, 6, &lb).is_err());
        for p in &pb {
            stage(&mut staging, p).unwrap();
        }
        commit(&mut staging, &store, 7, &lb).unwrap();
        assert_eq!(store.snapshot().view().nodes().count(), 4);
    }

    #[test]
    fn a_durable_store_refuses_restore_commands_and_logs_nothing() {
        use schedstate::persist::{DurableStore, Options, PersistError};
        let dir = tempfile::tempdir().unwrap();
        let (pieces, last) = commands(1, &file(1), 1 << 20);
        {
            let (db, _) = DurableStore::open(dir.path(), Options::default()).unwrap();
            let node = Node::new("kept", "kept");
            db.apply(1, &Command::UpsertNode { node }).unwrap();
            for (i, c) in [&*pieces[0], &last].into_iter().enumerate() {
                match db.apply(2 + i as u64, c) {
                    Err(PersistError::State(e)) => assert_eq!(e.kind(), "ReplicatedOnly"),
                    other => panic!("{other:?}"),
                }
            }
        }
        let (db, report) = DurableStore::open(dir.path(), Options::default()).unwrap();
        assert_eq!(report.last_applied, 1, "nothing but the node was logged");
        assert_eq!(db.snapshot().view().nodes().count(), 1);
    }

    #[test]
    fn a_store_outside_a_cluster_refuses_restore_commands() {
        let store = StateStore::new();
        let (pieces, last) = commands(1, &file(1), 1 << 20);
        for c in [&*pieces[0], &last] {
            let e = store.apply(1, c).unwrap_err();
            assert_eq!(e.kind(), "ReplicatedOnly", "{e}");
        }
    }
}
