//! The store as openraft's state machine: committed entries are applied to a
//! [`StateStore`] at their log index; snapshots are the store's O(1) snapshot written
//! in its own format behind the Raft metadata.
//!
//! A command the rules refuse is applied all the same — as a no-op: every server
//! refuses it identically (the rules are deterministic), the state is unchanged, the
//! last applied log id moves on, and the refusal goes back to the proposer.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use parking_lot::Mutex;
use schedstate::persist::PersistError;
use schedstate::persist::segment::{remove_file_durably, write_file_atomically};
use schedstate::state::{Commit, StateError, StateSnapshot, StateStore};
use serde::{Deserialize, Serialize};

use crate::observe::{ApplyEvent, ApplyObserver};
use crate::snapshot_file::{self, snapshot_files, snapshot_name};
use crate::{Entry, NodeId, Proposal, TypeConfig};

/// What applying one entry gave, per command of its proposal: nothing for a command
/// that committed, the rule it broke for one the rules refused. Only the proposer's
/// server hands it on; it is not sent over the network (hence skipped by serde).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ApplyResponse {
    #[serde(skip)]
    pub(crate) refused: Vec<Option<StateError>>,
}

/// The last applied log id and membership, shared with the server handle.
#[derive(Debug, Clone, Default)]
pub(crate) struct Applied {
    pub last: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// Snapshots installed from a leader since the server started.
    pub installs: u64,
}

/// The state machine of one server.
pub(crate) struct StateMachine {
    store: StateStore,
    dir: PathBuf,
    applied: Arc<Mutex<Applied>>,
    /// The newest snapshot on disk.
    current: Option<(SnapshotMeta<NodeId, BasicNode>, PathBuf)>,
    built: u64,
    observer: Option<ApplyObserver>,
}

fn sm_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_state_machine(&e).into()
}

fn snap_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_snapshot(None, &e).into()
}

impl StateMachine {
    /// Opens the state machine in `dir`: the newest snapshot there, if any, restored
    /// (checked) into `store`.
    pub(crate) fn open(
        dir: &Path,
        store: StateStore,
        applied: Arc<Mutex<Applied>>,
        observer: Option<ApplyObserver>,
    ) -> Result<StateMachine, PersistError> {
        let mut sm = StateMachine {
            store,
            dir: dir.to_path_buf(),
            applied,
            current: None,
            built: 0,
            observer,
        };
        if let Some((_, path)) = snapshot_files(dir)?.pop() {
            let bytes = std::fs::read(&path).map_err(|source| PersistError::Io {
                path: path.clone(),
                source,
            })?;
            let (meta, _) = snapshot_file::restore(&path, &bytes, &sm.store)?;
            let mut a = sm.applied.lock();
            a.last = meta.last_log_id;
            a.membership = meta.last_membership.clone();
            drop(a);
            sm.current = Some((meta, path));
        }
        if let Some(observer) = &sm.observer {
            let index = sm.applied.lock().last.map_or(0, |l| l.index);
            observer.tell(&ApplyEvent::Opened { index });
        }
        Ok(sm)
    }

    /// Makes `bytes` (a snapshot with `meta`) the current snapshot on disk and removes
    /// older ones.
    fn keep_snapshot(
        dir: &Path,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        bytes: &[u8],
    ) -> Result<PathBuf, PersistError> {
        let index = meta.last_log_id.map_or(0, |l| l.index);
        let path = dir.join(snapshot_name(index));
        write_file_atomically(&path, bytes)?;
        for (i, old) in snapshot_files(dir)? {
            if i < index {
                remove_file_durably(&old)?;
            }
        }
        Ok(path)
    }
}

/// Builds a snapshot from the O(1) store snapshot taken when the builder was made,
/// off the apply path.
pub(crate) struct SnapshotBuilder {
    snap: StateSnapshot,
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    dir: PathBuf,
    id: String,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let meta = SnapshotMeta {
            last_log_id: self.last,
            last_membership: self.membership.clone(),
            snapshot_id: self.id.clone(),
        };
        let bytes = snapshot_file::encode(&meta, &self.snap).map_err(snap_err)?;
        StateMachine::keep_snapshot(&self.dir, &meta, &bytes).map_err(snap_err)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl StateMachine {
    /// Applies a proposal's commands at `index`: one alone, several as a batch (one
    /// transaction, each command kept or undone on its own).
    fn apply_proposal(
        &self,
        index: u64,
        proposal: &Proposal,
    ) -> Result<ApplyResponse, StorageError<NodeId>> {
        let started = Instant::now();
        let (commit, refused) = apply_proposal_to(&self.store, index, proposal).map_err(sm_err)?;
        if let Some(observer) = &self.observer {
            observer.tell(&ApplyEvent::Applied {
                index,
                commit: commit.as_ref(),
                commands: &proposal.commands,
                refused: &refused,
                took: started.elapsed(),
            });
        }
        Ok(ApplyResponse { refused })
    }
}

/// Applies a proposal's commands to `store` at `index`, as every server does: one
/// alone, several as a batch (one transaction, each command kept or undone on its
/// own). Returns the write, if any, and per command the rule that refused it.
///
/// # Errors
/// [`StateError::StaleIndex`]: not a refusal, but the log and the state disagreeing,
/// which must stop a server (nothing applied).
pub(crate) fn apply_proposal_to(
    store: &StateStore,
    index: u64,
    proposal: &Proposal,
) -> Result<(Option<Commit>, Vec<Option<StateError>>), StateError> {
    match proposal.commands.as_slice() {
        [one] => match store.apply(index, one) {
            Ok(commit) => Ok((Some(commit), vec![None])),
            Err(e @ StateError::StaleIndex { .. }) => Err(e),
            Err(refused) => Ok((None, vec![Some(refused)])),
        },
        many => {
            let outcome = store.apply_batch(index, many.iter().map(|c| &**c))?;
            let refused = outcome.results.into_iter().map(Result::err).collect();
            Ok((outcome.commit, refused))
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let a = self.applied.lock();
        Ok((a.last, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyResponse>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        for entry in entries {
            let index = entry.log_id.index;
            let response = match &entry.payload {
                EntryPayload::Blank => ApplyResponse::default(),
                EntryPayload::Normal(proposal) => self.apply_proposal(index, proposal)?,
                EntryPayload::Membership(m) => {
                    self.applied.lock().membership =
                        StoredMembership::new(Some(entry.log_id), m.clone());
                    ApplyResponse::default()
                }
            };
            self.applied.lock().last = Some(entry.log_id);
            out.push(response);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.built += 1;
        let a = self.applied.lock();
        SnapshotBuilder {
            snap: self.store.snapshot(),
            last: a.last,
            membership: a.membership.clone(),
            dir: self.dir.clone(),
            id: format!("{}-{}", a.last.map_or(0, |l| l.index), self.built),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let (inner_meta, mut body) =
            snapshot_file::decode(Path::new("<received snapshot>"), &bytes).map_err(snap_err)?;
        if inner_meta.last_log_id != meta.last_log_id {
            return Err(snap_err(std::io::Error::other(format!(
                "snapshot says it ends at {:?}, its transfer at {:?}",
                inner_meta.last_log_id, meta.last_log_id
            ))));
        }
        // Checks the format, the checksums and every invariant before anything
        // changes; fires every watch (blocking queries re-run on the new state).
        self.store.restore_from(&mut body).map_err(snap_err)?;
        let path = StateMachine::keep_snapshot(&self.dir, meta, &bytes).map_err(snap_err)?;
        {
            let mut a = self.applied.lock();
            a.last = meta.last_log_id;
            a.membership = meta.last_membership.clone();
            a.installs += 1;
        }
        tracing::info!(last = ?meta.last_log_id, "installed a snapshot from the leader");
        if let Some(observer) = &self.observer {
            observer.tell(&ApplyEvent::SnapshotInstalled {
                index: meta.last_log_id.map_or(0, |l| l.index),
            });
        }
        self.current = Some((meta.clone(), path));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        // The newest file on disk: a builder may have written one since.
        let Some((_, path)) = snapshot_files(&self.dir).map_err(snap_err)?.pop() else {
            return Ok(None);
        };
        let bytes = std::fs::read(&path).map_err(snap_err)?;
        let (meta, _) = snapshot_file::decode(&path, &bytes).map_err(snap_err)?;
        self.current = Some((meta.clone(), path));
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
