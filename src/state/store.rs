//! [`StateStore`]: the in-memory store — the one place commands are applied.

use std::borrow::Cow;

use crate::engine::{Db, WritePause};

use super::command::Command;
use super::commit::Commit;
use super::error::{Result, StateError};
use super::reader::StateReader;
use super::snapshot::StateSnapshot;
use super::tables::Tables;
use super::writer::Writer;
use super::writes::typed_writes;
use super::{acl, allocs, claims, jobs, nodes, volumes};

/// The scheduler's state in memory: nodes, allocations, CSI plugins and volumes, on
/// the MVCC engine. Cheap to clone; every clone is the same store.
///
/// The write door is [`apply`](Self::apply) (and [`apply_owned`](Self::apply_owned),
/// which moves the command's rows into the store): one [`Command`] at one log index,
/// all of it or none of it. The typed methods (`upsert_node`, `register_csi_volumes`,
/// …) build the command and apply it. Reads go through [`snapshot`](Self::snapshot)
/// or a [`StateReader`] ([`reader`](Self::reader)), which also runs blocking queries.
/// For writes that must survive a crash, use
/// [`DurableStore`](crate::persist::DurableStore), which has the same door.
///
/// ```
/// use schedstate::model::{CsiInfo, CsiNodeInfo, Node};
/// use schedstate::{StateStore, Table};
///
/// let store = StateStore::new();
/// let mut node = Node::new("node-1", "client-1");
/// node.add_csi_plugin(
///     CsiInfo::node_instance("ebs", "alloc-1", CsiNodeInfo::default())
///         .with_provider("ebs.csi.aws.com", "1.25.0"),
/// );
/// store.upsert_node(10, node).unwrap();
///
/// let snap = store.snapshot();
/// let plugin = snap.view().csi_plugin("ebs").unwrap();
/// assert_eq!(plugin.provider, "ebs.csi.aws.com");
/// // One healthy node instance; no job runs the plugin, so none is expected.
/// assert_eq!((plugin.nodes_healthy(), plugin.nodes_expected()), (1, 0));
/// assert_eq!(snap.view().table_index(Table::CsiPlugins), 10);
/// ```
#[derive(Clone, Debug)]
pub struct StateStore {
    reader: StateReader,
}

impl Default for StateStore {
    fn default() -> Self {
        Self::new()
    }
}

impl StateStore {
    /// An empty store.
    pub fn new() -> Self {
        let (schema, t) = Tables::declare();
        StateStore {
            reader: StateReader {
                db: Db::new(schema),
                t,
            },
        }
    }

    /// The read side of the store, to hand to code that must not write.
    pub fn reader(&self) -> &StateReader {
        &self.reader
    }

    /// The current version, O(1).
    pub fn snapshot(&self) -> StateSnapshot {
        self.reader.snapshot()
    }

    pub(crate) fn db(&self) -> &Db {
        &self.reader.db
    }

    pub(crate) fn tables(&self) -> Tables {
        self.reader.t
    }

    /// Publishes the staged writes through the one `apply_staged` returned `seq` for
    /// (and fires their watches); see the engine's `Db::publish_through`.
    pub(crate) fn publish_through(&self, seq: u64) -> u64 {
        self.db().publish_through(seq)
    }

    /// The sequence number of the newest staged write, if any.
    pub(crate) fn staged_tip(&self) -> Option<u64> {
        self.db().staged_tip()
    }

    /// Drops every staged write: they will never be seen.
    pub(crate) fn discard_staged(&self) {
        self.db().discard_staged();
    }

    /// Keeps writers out until the guard is dropped, and returns the version as of that
    /// moment (compaction cuts its consistent point with it).
    pub(crate) fn pause_writes(&self) -> (WritePause, StateSnapshot) {
        let (pause, snap) = self.db().pause_writes();
        (pause, StateSnapshot::new(snap))
    }

    /// Applies `command` at log index `index`: all of it commits, or none of it and an
    /// error saying why. The only way the state changes.
    ///
    /// # Errors
    /// [`StateError`]: a stale index ([`StateError::StaleIndex`]), or the rule the
    /// command breaks. The store is then exactly as it was.
    pub fn apply(&self, index: u64, command: &Command) -> Result<Commit> {
        self.apply_with(index, command, || Ok(()))
    }

    /// Like [`apply`](Self::apply), taking the command by value: the nodes and
    /// allocations it carries become the stored rows without being copied. The typed
    /// write methods use it.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn apply_owned(&self, index: u64, command: Command) -> Result<Commit> {
        self.apply_owned_with(index, command, || Ok(()))
    }

    typed_writes!(StateError);

    /// Like [`apply`](Self::apply), running `before_publish` after the command has been
    /// applied in its transaction and before it is published. If the hook fails, the
    /// write is abandoned and its error returned. This is where the write-ahead log
    /// records the command: only commands that succeed are logged, and a command is
    /// logged before anyone can see its effects.
    pub(crate) fn apply_with<E: From<StateError>>(
        &self,
        index: u64,
        command: &Command,
        before_publish: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Commit, E> {
        self.apply_cow(index, Cow::Borrowed(command), before_publish)
    }

    /// [`apply_owned`](Self::apply_owned) with the hook of `apply_with`. The hook does
    /// not see the command (it has been consumed): a log that needs its bytes encodes
    /// them before the call.
    pub(crate) fn apply_owned_with<E: From<StateError>>(
        &self,
        index: u64,
        command: Command,
        before_publish: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Commit, E> {
        self.apply_cow(index, Cow::Owned(command), before_publish)
    }

    /// [`apply_owned`](Self::apply_owned) running `before_publish` after the command
    /// has been applied and before it is published (feature `unstable-internals`; the
    /// benchmarks time the publish step with it).
    ///
    /// # Errors
    /// The command's [`StateError`] (converted), or the hook's error.
    #[cfg(feature = "unstable-internals")]
    pub fn apply_owned_with_hook<E: From<StateError>>(
        &self,
        index: u64,
        command: Command,
        before_publish: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Commit, E> {
        self.apply_owned_with(index, command, before_publish)
    }

    fn apply_cow<E: From<StateError>>(
        &self,
        index: u64,
        command: Cow<'_, Command>,
        before_publish: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Commit, E> {
        let (info, _) = self.run(Some(index), command, |_| before_publish(), false, true)?;
        Ok(info)
    }

    /// [`apply`](Self::apply) of a command replayed from a log segment of format 1 or
    /// 2: the input rules those formats knew (a registration in namespace `*` is
    /// taken, as it was when it was logged), so that replay rebuilds the state the log
    /// made.
    pub(crate) fn apply_replayed_legacy(&self, index: u64, command: &Command) -> Result<Commit> {
        let (info, _) = self.run(
            Some(index),
            Cow::Borrowed(command),
            |_| Ok::<(), StateError>(()),
            false,
            false,
        )?;
        Ok(info)
    }

    /// Applies `command` at `index` (or, with `None`, at the next index, assigned under
    /// the writer lock) and *stages* it (see the engine's `WriteTxn::stage`): the write
    /// is committed but readers see it only once it is published
    /// (`Db::publish_through` with the returned sequence number). `before_stage` gets
    /// the index; this is where the durable store logs the command.
    pub(crate) fn apply_staged<E: From<StateError>>(
        &self,
        index: Option<u64>,
        command: Cow<'_, Command>,
        before_stage: impl FnOnce(u64) -> std::result::Result<(), E>,
    ) -> std::result::Result<(Commit, u64), E> {
        self.run(index, command, before_stage, true, true)
    }

    fn run<E: From<StateError>>(
        &self,
        index: Option<u64>,
        command: Cow<'_, Command>,
        hook: impl FnOnce(u64) -> std::result::Result<(), E>,
        stage: bool,
        wildcard_rule: bool,
    ) -> std::result::Result<(Commit, u64), E> {
        let txn = match index {
            Some(index) => self.db().begin_write(index).map_err(StateError::from)?,
            None => self.db().begin_next_write(),
        };
        let index = txn.index();
        let span = tracing::debug_span!(
            "apply",
            kind = command.kind(),
            index,
            rows = tracing::field::Empty
        );
        let _enter = span.enter();
        let mut w = Writer::new(txn, self.tables());
        // Rows a command carries are moved into the store when it is owned (copied by
        // `apply_by_ref` when it is borrowed); everything else is read by reference.
        // The input rules first: the same refusal whichever path brought the command.
        let applied = match command.check_input_as(wildcard_rule) {
            Err(e) => Err(e),
            Ok(()) => match command {
                Cow::Owned(Command::UpsertNode { node }) => nodes::upsert_node(&mut w, node),
                Cow::Owned(Command::UpsertNodes { nodes }) => nodes::upsert_nodes(&mut w, nodes),
                Cow::Owned(Command::UpsertAllocs { allocs }) => {
                    allocs::upsert_allocs(&mut w, allocs)
                }
                other => apply_by_ref(&mut w, &other),
            },
        };
        if let Err(e) = applied {
            tracing::debug!(error = %e, "rejected");
            return Err(e.into());
        }
        hook(index)?;
        let (info, seq) = if stage {
            let (seq, info) = w.txn.stage().map_err(StateError::from)?;
            (info, seq)
        } else {
            (w.txn.commit().map_err(StateError::from)?, 0)
        };
        span.record("rows", info.changes.len());
        Ok((Commit::new(info), seq))
    }
}

/// A borrowed command: rows it carries are copied, the rest is read by reference.
pub(super) fn apply_by_ref(w: &mut Writer, command: &Command) -> Result<()> {
    match command {
        Command::UpsertNode { node } => nodes::upsert_node(w, node.clone()),
        Command::UpsertNodes { nodes } => nodes::upsert_nodes(w, nodes.clone()),
        Command::UpsertAllocs { allocs } => allocs::upsert_allocs(w, allocs.clone()),
        Command::DeleteNodes { ids } => nodes::delete_nodes(w, ids),
        Command::UpdateNodeStatus { id, status } => nodes::update_status(w, id, *status),
        Command::UpdateNodeDrain { id, drain } => nodes::update_drain(w, id, *drain),
        Command::UpdateNodeEligibility { id, eligible } => {
            nodes::update_eligibility(w, id, *eligible)
        }
        Command::DeleteAllocs { ids } => allocs::delete_allocs(w, ids),
        Command::RegisterCsiVolumes { volumes } => volumes::register_volumes(w, volumes),
        Command::DeregisterCsiVolumes {
            namespace,
            ids,
            force,
        } => volumes::deregister_volumes(w, namespace, ids, *force),
        Command::ClaimCsiVolumes { claims } => claims::claim_volumes(w, claims),
        Command::AclBootstrap { token, salt } => acl::bootstrap(w, token, *salt),
        Command::CreateAclTokens { tokens, salt } => acl::create(w, tokens, *salt),
        Command::SetAclSalt { salt } => acl::set_salt(w, *salt),
        Command::StageSnapshotChunk { .. } | Command::RestoreSnapshot { .. } => {
            Err(StateError::ReplicatedOnly {
                command: command.kind(),
            })
        }
        Command::DeleteAclTokens { accessor_ids } => acl::delete(w, accessor_ids),
        Command::StopAllocs { ids } => allocs::stop_allocs(w, ids),
        Command::UpsertJobs { jobs: list } => jobs::upsert_jobs(w, list),
        Command::StopJobs { namespace, ids } => jobs::stop_jobs(w, namespace, ids),
        Command::PurgeJobs { namespace, ids } => jobs::purge_jobs(w, namespace, ids),
        Command::UpdateAclToken {
            accessor_id,
            name,
            scopes,
        } => acl::update(w, accessor_id, name, scopes),
    }
}
