//! The store as openraft's state machine: committed entries are applied to a
//! [`StateStore`] at their log index; snapshots are the store's O(1) snapshot written
//! in its own format behind the Raft metadata.
//!
//! A command the rules refuse is applied all the same — as a no-op: every server
//! refuses it identically (the rules are deterministic), the state is unchanged, the
//! last applied log id moves on, and the refusal goes back to the proposer.
//!
//! A command with a write key the state machine already kept ([`WriteKeys`]) is not
//! applied at all: it answers the first apply's outcome and index (or, with another
//! request under the same key, a refusal). The keys move with the state: into every
//! snapshot, out of every snapshot restored or installed.

use std::collections::HashMap;
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
use schedstate::state::{Command, Commit, StateError, StateSnapshot, StateStore};
use serde::{Deserialize, Serialize};

use crate::observe::{ApplyEvent, ApplyObserver};
use crate::restore::{self, Staging};
use crate::snapshot_cadence::SnapshotCadence;
use crate::snapshot_file::{self, snapshot_files, snapshot_name};
use crate::snapshot_receiver::CheckedSnapshot;
use crate::write_keys::{KeyCheck, WriteKeys};
use crate::{Entry, NodeId, Proposal, TypeConfig};

/// What applying one entry gave, per command of its proposal. Only the proposer's
/// server hands it on; it is not sent over the network (hence skipped by serde).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ApplyResponse {
    #[serde(skip)]
    pub(crate) outcomes: Vec<Outcome>,
}

/// What one command of an entry came to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Applied at the entry's index.
    Applied,
    /// Refused by the rules at the entry's index (a no-op).
    Refused(StateError),
    /// Its write key was kept: not applied again; this is the first apply's outcome.
    Replayed {
        /// The index the first apply was at.
        index: u64,
        /// The first apply's refusal (kind, message), if it was refused.
        refusal: Option<(String, String)>,
    },
    /// Its write key was kept for another request: not applied.
    KeyReused {
        /// The index the key was first used at.
        index: u64,
    },
}

/// What applying an entry's proposal did.
pub(crate) struct ProposalApplied {
    /// The rows the applied commands changed, if any.
    pub commit: Option<Commit>,
    /// Per command of the proposal.
    pub outcomes: Vec<Outcome>,
    /// The commands actually applied (accepted or refused by the rules) and the
    /// refusals among them, when some were answered from their keys instead; `None`
    /// when every command was applied.
    pub applied_only: Option<AppliedOnly>,
}

/// The commands of an entry that were applied, and per command its refusal, if any.
pub(crate) type AppliedOnly = (Vec<Arc<Command>>, Vec<Option<StateError>>);

/// The last applied log id and membership, shared with the server handle.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    pub last: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// Snapshots installed from a leader since the server started.
    pub installs: u64,
    /// The last snapshot this server built, since it started.
    pub last_built: Option<SnapshotBuilt>,
    /// The cluster's store format ([`crate::Server::cluster_format`]).
    pub format: u32,
}

impl Default for Applied {
    fn default() -> Self {
        Applied {
            last: None,
            membership: StoredMembership::default(),
            installs: 0,
            last_built: None,
            format: crate::OLDEST_CLUSTER_FORMAT,
        }
    }
}

/// A snapshot a server built: where it ends, its size, and how long encoding and
/// writing it took (off the apply path; what an operator watches as the state grows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotBuilt {
    /// The last log index it holds.
    pub index: u64,
    /// Its size on disk.
    pub bytes: u64,
    /// Encoding it and writing it durably.
    pub took: std::time::Duration,
}

/// The state machine of one server.
pub(crate) struct StateMachine {
    store: StateStore,
    dir: PathBuf,
    applied: Arc<Mutex<Applied>>,
    /// The write keys, shared with the server handle (which answers a known key
    /// without proposing it again).
    keys: Arc<Mutex<WriteKeys>>,
    /// The newest snapshot on disk.
    current: Option<(SnapshotMeta<NodeId, BasicNode>, PathBuf)>,
    built: u64,
    observer: Option<ApplyObserver>,
    /// A received snapshot already restored and checked by the server.
    checked: Arc<Mutex<Option<CheckedSnapshot>>>,
    /// Commands applied since the last snapshot, and when to ask for the next.
    cadence: SnapshotCadence,
    /// The pieces of a restore staged so far (`restore.rs`): moves with the state
    /// into and out of every snapshot.
    staging: Option<Staging>,
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
        keys: Arc<Mutex<WriteKeys>>,
        checked: Arc<Mutex<Option<CheckedSnapshot>>>,
        observer: Option<ApplyObserver>,
        cadence: SnapshotCadence,
    ) -> Result<StateMachine, PersistError> {
        let mut sm = StateMachine {
            store,
            dir: dir.to_path_buf(),
            applied,
            keys,
            current: None,
            built: 0,
            observer,
            checked,
            cadence,
            staging: None,
        };
        if let Some((_, path)) = snapshot_files(dir)?.pop() {
            let bytes = std::fs::read(&path).map_err(|source| PersistError::Io {
                path: path.clone(),
                source,
            })?;
            let (meta, _, keys, staging) = snapshot_file::restore(&path, &bytes, &sm.store)?;
            let format = snapshot_file::stream_format(snapshot_file::decode(&path, &bytes)?.body);
            *sm.keys.lock() = keys;
            sm.staging = staging;
            let mut a = sm.applied.lock();
            a.last = meta.last_log_id;
            a.membership = meta.last_membership.clone();
            a.format = format;
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
    keys: WriteKeys,
    staging: Option<Staging>,
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    /// The cluster's format: the oldest version the store's stream is written in.
    format: u32,
    dir: PathBuf,
    id: String,
    /// Where the build is recorded ([`Applied::last_built`]).
    applied: Arc<Mutex<Applied>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let started = Instant::now();
        let meta = SnapshotMeta {
            last_log_id: self.last,
            last_membership: self.membership.clone(),
            snapshot_id: self.id.clone(),
        };
        let bytes = snapshot_file::encode(
            &meta,
            &self.keys,
            self.staging.as_ref(),
            &self.snap,
            self.format,
        )
        .map_err(snap_err)?;
        StateMachine::keep_snapshot(&self.dir, &meta, &bytes).map_err(snap_err)?;
        let built = SnapshotBuilt {
            index: meta.last_log_id.map_or(0, |l| l.index),
            bytes: bytes.len() as u64,
            took: started.elapsed(),
        };
        tracing::info!(
            index = built.index,
            bytes = built.bytes,
            took_ms = built.took.as_millis() as u64,
            "built a snapshot"
        );
        self.applied.lock().last_built = Some(built);
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
        let applied = apply_proposal_to(&self.store, &mut self.keys.lock(), index, proposal)
            .map_err(sm_err)?;
        if let Some(observer) = &self.observer {
            let all;
            let (commands, refused) = match &applied.applied_only {
                Some((commands, refused)) => (commands.as_slice(), refused.as_slice()),
                None => {
                    all = refusals(&applied.outcomes);
                    (proposal.commands.as_slice(), all.as_slice())
                }
            };
            observer.tell(&ApplyEvent::Applied {
                index,
                commit: applied.commit.as_ref(),
                commands,
                refused,
                took: started.elapsed(),
            });
        }
        Ok(ApplyResponse {
            outcomes: applied.outcomes,
        })
    }
}

impl StateMachine {
    /// Applies an entry of a restore (`restore.rs`): a piece is staged, the last entry
    /// restores the staged file at `index`. A restore's command shares its entry with
    /// no other (the leader proposes each alone); an entry that mixes them is refused
    /// whole, a no-op on every server. Also says whether the state was replaced.
    fn apply_restore(&mut self, index: u64, proposal: &Proposal) -> (ApplyResponse, bool) {
        let started = Instant::now();
        let (outcomes, restored) =
            restore::apply_entry(&mut self.staging, &self.store, index, proposal);
        if let Some(observer) = &self.observer {
            if restored {
                // The whole state changed at `index`: as an installed snapshot.
                observer.tell(&ApplyEvent::SnapshotInstalled { index });
            } else {
                observer.tell(&ApplyEvent::Applied {
                    index,
                    commit: None,
                    commands: &proposal.commands,
                    refused: &refusals(&outcomes),
                    took: started.elapsed(),
                });
            }
        }
        (ApplyResponse { outcomes }, restored)
    }
}

/// Per outcome of applied commands: the refusal, if refused.
fn refusals(outcomes: &[Outcome]) -> Vec<Option<StateError>> {
    outcomes
        .iter()
        .map(|o| match o {
            Outcome::Refused(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Applies a proposal's commands to `store` at `index`, as every server does: one
/// alone, several as a batch (one transaction, each command kept or undone on its
/// own); a command whose write key `keys` holds is answered from it instead, and the
/// keys of the commands applied are kept.
///
/// # Errors
/// [`StateError::StaleIndex`]: not a refusal, but the log and the state disagreeing,
/// which must stop a server (nothing applied).
pub(crate) fn apply_proposal_to(
    store: &StateStore,
    keys: &mut WriteKeys,
    index: u64,
    proposal: &Proposal,
) -> Result<ProposalApplied, StateError> {
    let Some(proposal_keys) = &proposal.keys else {
        let (commit, outcomes) = apply_commands(store, index, &proposal.commands)?;
        return Ok(ProposalApplied {
            commit,
            outcomes,
            applied_only: None,
        });
    };
    keys.advance(proposal_keys.at_ms);
    // Which commands to apply: those without a key, and the first of each key not
    // kept yet. A later command of the same entry with that key waits for its outcome.
    let n = proposal.commands.len();
    let mut answered: Vec<Option<Outcome>> = vec![None; n];
    let mut same_as: Vec<Option<usize>> = vec![None; n];
    let mut first_of: HashMap<[u8; 32], usize> = HashMap::new();
    let mut fresh = Vec::new();
    for i in 0..n {
        let Some(key) = proposal.key(i) else {
            fresh.push(i);
            continue;
        };
        match keys.check(key) {
            KeyCheck::Replay(kept) => {
                answered[i] = Some(Outcome::Replayed {
                    index: kept.index,
                    refusal: kept.refusal,
                });
            }
            KeyCheck::Reused { index } => answered[i] = Some(Outcome::KeyReused { index }),
            KeyCheck::Fresh => match first_of.get(&key.id) {
                Some(&j) if proposal.key(j).map(|k| k.fingerprint) == Some(key.fingerprint) => {
                    same_as[i] = Some(j);
                }
                Some(_) => answered[i] = Some(Outcome::KeyReused { index }),
                None => {
                    first_of.insert(key.id, i);
                    fresh.push(i);
                }
            },
        }
    }
    let commands: Vec<Arc<Command>> = fresh
        .iter()
        .map(|&i| proposal.commands[i].clone())
        .collect();
    let (commit, applied) = apply_commands(store, index, &commands)?;
    for (&i, outcome) in fresh.iter().zip(applied) {
        if let Some(key) = proposal.key(i) {
            let refusal = match &outcome {
                Outcome::Refused(e) => Some((e.kind().to_string(), e.to_string())),
                _ => None,
            };
            keys.keep(key, index, refusal);
        }
        answered[i] = Some(outcome);
    }
    for i in 0..n {
        if let Some(j) = same_as[i] {
            let refusal = match &answered[j] {
                Some(Outcome::Refused(e)) => Some((e.kind().to_string(), e.to_string())),
                _ => None,
            };
            answered[i] = Some(Outcome::Replayed { index, refusal });
        }
    }
    let outcomes: Vec<Outcome> = answered
        .into_iter()
        .map(|o| o.expect("every command is answered"))
        .collect();
    let applied_only = (fresh.len() < n).then(|| {
        let refused = fresh
            .iter()
            .map(|&i| match &outcomes[i] {
                Outcome::Refused(e) => Some(e.clone()),
                _ => None,
            })
            .collect();
        (commands, refused)
    });
    Ok(ProposalApplied {
        commit,
        outcomes,
        applied_only,
    })
}

/// Applies `commands` at `index`: none, one alone, or several as a batch.
fn apply_commands(
    store: &StateStore,
    index: u64,
    commands: &[Arc<Command>],
) -> Result<(Option<Commit>, Vec<Outcome>), StateError> {
    let outcome = |r: Result<(), StateError>| match r {
        Ok(()) => Outcome::Applied,
        Err(e) => Outcome::Refused(e),
    };
    match commands {
        [] => Ok((None, Vec::new())),
        [one] => match store.apply(index, one) {
            Ok(commit) => Ok((Some(commit), vec![Outcome::Applied])),
            Err(e @ StateError::StaleIndex { .. }) => Err(e),
            Err(refused) => Ok((None, vec![Outcome::Refused(refused)])),
        },
        many => {
            let applied = store.apply_batch(index, many.iter().map(|c| &**c))?;
            let outcomes = applied.results.into_iter().map(outcome).collect();
            Ok((applied.commit, outcomes))
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
            let mut restored_at = None;
            let response = match &entry.payload {
                EntryPayload::Blank => ApplyResponse::default(),
                EntryPayload::Normal(Proposal {
                    raise_format: Some(format),
                    ..
                }) => {
                    let mut a = self.applied.lock();
                    a.format = a.format.max(*format);
                    ApplyResponse::default()
                }
                EntryPayload::Normal(proposal)
                    if proposal.commands.iter().any(|c| c.is_restore()) =>
                {
                    let (response, restored) = self.apply_restore(index, proposal);
                    if restored {
                        restored_at = Some(index);
                    }
                    response
                }
                EntryPayload::Normal(proposal) => self.apply_proposal(index, proposal)?,
                EntryPayload::Membership(m) => {
                    self.applied.lock().membership =
                        StoredMembership::new(Some(entry.log_id), m.clone());
                    ApplyResponse::default()
                }
            };
            self.applied.lock().last = Some(entry.log_id);
            let commands = match &entry.payload {
                EntryPayload::Normal(proposal) => proposal.commands.len(),
                _ => 0,
            };
            self.cadence.applied(commands, &self.store);
            if restored_at == Some(index) {
                self.cadence.ask_now();
            }
            out.push(response);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.built += 1;
        self.cadence.covered();
        let a = self.applied.lock();
        SnapshotBuilder {
            snap: self.store.snapshot(),
            keys: self.keys.lock().clone(),
            staging: self.staging.clone(),
            last: a.last,
            membership: a.membership.clone(),
            format: a.format,
            dir: self.dir.clone(),
            id: format!("{}-{}", a.last.map_or(0, |l| l.index), self.built),
            applied: self.applied.clone(),
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
        let snapshot_file::Decoded {
            meta: inner_meta,
            keys,
            staging,
            mut body,
        } = snapshot_file::decode(Path::new("<received snapshot>"), &bytes).map_err(snap_err)?;
        if inner_meta.last_log_id != meta.last_log_id {
            return Err(snap_err(std::io::Error::other(format!(
                "snapshot says it ends at {:?}, its transfer at {:?}",
                inner_meta.last_log_id, meta.last_log_id
            ))));
        }
        // The state the server restored and checked when the snapshot arrived, if
        // this is that snapshot; otherwise the bytes, checked (format, checksums,
        // every invariant) before anything changes. Either fires every watch
        // (blocking queries re-run on the new state).
        let checked = self.checked.lock().take();
        let format = snapshot_file::stream_format(body);
        match checked {
            Some(c) if c.meta == *meta => {
                self.store.restore_state_of(&c.state).map_err(snap_err)?
            }
            _ => {
                self.store.restore_from(&mut body).map_err(snap_err)?;
            }
        }
        *self.keys.lock() = keys;
        self.staging = staging;
        let path = StateMachine::keep_snapshot(&self.dir, meta, &bytes).map_err(snap_err)?;
        {
            let mut a = self.applied.lock();
            a.last = meta.last_log_id;
            a.membership = meta.last_membership.clone();
            a.installs += 1;
            a.format = format;
        }
        self.cadence.covered();
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
        let meta = snapshot_file::decode(&path, &bytes).map_err(snap_err)?.meta;
        self.current = Some((meta.clone(), path));
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
