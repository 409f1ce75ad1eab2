//! The state store: the one place commands are applied, snapshots taken and blocking
//! queries run.

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::db::{CommitInfo, Db, QueryOptions, QueryResult, Snapshot, WatchSet};
use crate::model::{Allocation, CsiPlugin, CsiVolume, CsiVolumeClaim, Id, Node, NodeStatus};

use super::command::{Command, VolumeClaimRequest};
use super::error::{Result, StateError};
use super::read::StateView;
use super::tables::{Tables, names};
use super::writer::Writer;
use super::{allocs, claims, nodes, volumes};

/// The scheduler's state: nodes, allocations, CSI plugins and volumes, on the MVCC
/// engine. Cheap to clone; every clone is the same store.
///
/// ```
/// use std::sync::Arc;
/// use schedstate::model::{CsiInfo, CsiNodeInfo, Node};
/// use schedstate::state::StateStore;
///
/// let store = StateStore::new();
/// let mut node = Node::new("node-1", "client-1");
/// node.csi_node_plugins.insert(
///     "ebs".into(),
///     Arc::new(CsiInfo {
///         plugin_id: "ebs".into(),
///         alloc_id: "alloc-1".into(),
///         healthy: true,
///         provider: "ebs.csi.aws.com".into(),
///         provider_version: "1.25.0".into(),
///         node_info: Some(CsiNodeInfo::default()),
///         ..Default::default()
///     }),
/// );
/// store.upsert_node(10, node).unwrap();
///
/// let snap = store.snapshot();
/// let plugin = snap.view().csi_plugin_by_id("ebs").unwrap();
/// assert_eq!(plugin.provider, "ebs.csi.aws.com");
/// assert_eq!((plugin.nodes_healthy(), plugin.nodes_expected()), (1, 1));
/// assert_eq!(snap.view().plugins_index(), 10);
/// ```
#[derive(Clone, Debug)]
pub struct StateStore {
    db: Db,
    t: Tables,
}

impl Default for StateStore {
    fn default() -> Self {
        Self::new()
    }
}

/// One version of the state: immutable, O(1) to take, `Send + Sync + 'static`.
#[derive(Clone, Debug)]
pub struct StateSnapshot {
    snap: Snapshot,
    t: Tables,
}

impl StateSnapshot {
    /// Reads without watching.
    pub fn view(&self) -> StateView<'_> {
        StateView::new(self.snap.view(), self.t)
    }

    /// Reads that record what they read into `ws`.
    pub fn watched<'a>(&'a self, ws: &'a WatchSet) -> StateView<'a> {
        StateView::new(self.snap.watched(ws), self.t)
    }

    /// The engine snapshot underneath.
    pub fn raw(&self) -> &Snapshot {
        &self.snap
    }

    /// A deterministic encoding (postcard) of the state: last applied index, the table
    /// indexes and rows of the four scheduler tables. Two stores fed the same commands
    /// at the same indexes give the same bytes. The derived instance table is left out:
    /// it is rebuilt from the plugins.
    ///
    /// # Errors
    /// An encoding error from postcard (not expected for these types).
    pub fn canonical_bytes(&self) -> std::result::Result<Vec<u8>, postcard::Error> {
        #[derive(Serialize)]
        struct Canonical<'a> {
            last_applied: u64,
            table_indexes: Vec<(&'a str, u64)>,
            nodes: Vec<Arc<Node>>,
            allocs: Vec<Arc<Allocation>>,
            plugins: Vec<Arc<CsiPlugin>>,
            volumes: Vec<Arc<CsiVolume>>,
        }
        let v = self.view();
        let table_indexes = names::STATE
            .iter()
            .map(|n| (*n, v.table_index(n)))
            .collect();
        let c = Canonical {
            last_applied: v.last_applied(),
            table_indexes,
            nodes: v.nodes().collect(),
            allocs: v.allocs().collect(),
            plugins: v.csi_plugins().collect(),
            volumes: v.csi_volumes().collect(),
        };
        postcard::to_allocvec(&c)
    }
}

impl StateStore {
    /// An empty store.
    pub fn new() -> Self {
        let (schema, t) = Tables::declare();
        StateStore {
            db: Db::new(schema),
            t,
        }
    }

    /// The engine underneath (for generic reads, watches and change sets).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The table handles.
    pub fn tables(&self) -> Tables {
        self.t
    }

    /// Keeps writers out until the guard is dropped, and returns the version as of that
    /// moment (see [`Db::pause_writes`]).
    pub fn pause_writes(&self) -> (crate::db::WritePause, StateSnapshot) {
        let (pause, snap) = self.db.pause_writes();
        (pause, StateSnapshot { snap, t: self.t })
    }

    /// The current version, O(1).
    pub fn snapshot(&self) -> StateSnapshot {
        StateSnapshot {
            snap: self.db.snapshot(),
            t: self.t,
        }
    }

    /// Applies `command` at log index `index`: all of it commits, or none of it and an
    /// error saying why. The only way the state changes.
    ///
    /// # Errors
    /// [`StateError`](super::StateError): a stale index, or whatever rule the command
    /// breaks. The store is then exactly as it was.
    pub fn apply(&self, index: u64, command: &Command) -> Result<CommitInfo> {
        self.apply_with(index, command, || Ok(()))
    }

    /// Like [`apply`](Self::apply), running `before_publish` after the command has been
    /// applied in its transaction and before it is published. If the hook fails, the
    /// write is abandoned and its error returned. This is where a write-ahead log
    /// records the command: only commands that succeed are logged, and a command is
    /// logged before anyone can see its effects.
    ///
    /// # Errors
    /// The command's [`StateError`](super::StateError) (converted), or the hook's error.
    pub fn apply_with<E: From<StateError>>(
        &self,
        index: u64,
        command: &Command,
        before_publish: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<CommitInfo, E> {
        self.apply_cow(index, Cow::Borrowed(command), before_publish)
    }

    /// Like [`apply`](Self::apply), taking the command by value: the nodes and
    /// allocations it carries become the stored rows without being copied. The typed
    /// write methods use it.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn apply_owned(&self, index: u64, command: Command) -> Result<CommitInfo> {
        self.apply_owned_with(index, command, || Ok(()))
    }

    /// [`apply_owned`](Self::apply_owned) with the hook of
    /// [`apply_with`](Self::apply_with). The hook does not see the command (it has
    /// been consumed): a log that needs its bytes encodes them before the call.
    ///
    /// # Errors
    /// The command's [`StateError`](super::StateError) (converted), or the hook's error.
    pub fn apply_owned_with<E: From<StateError>>(
        &self,
        index: u64,
        command: Command,
        before_publish: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<CommitInfo, E> {
        self.apply_cow(index, Cow::Owned(command), before_publish)
    }

    fn apply_cow<E: From<StateError>>(
        &self,
        index: u64,
        command: Cow<'_, Command>,
        before_publish: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<CommitInfo, E> {
        let span = tracing::debug_span!(
            "apply",
            kind = command.kind(),
            index,
            rows = tracing::field::Empty
        );
        let _enter = span.enter();
        let txn = self.db.begin_write(index).map_err(StateError::from)?;
        let mut w = Writer::new(txn, self.t);
        // Rows a command carries are moved into the store when it is owned (copied by
        // `apply_by_ref` when it is borrowed); everything else is read by reference.
        let applied = match command {
            Cow::Owned(Command::UpsertNode { node }) => nodes::upsert_node(&mut w, node),
            Cow::Owned(Command::UpsertNodes { nodes }) => nodes::upsert_nodes(&mut w, nodes),
            Cow::Owned(Command::UpsertAllocs { allocs }) => allocs::upsert_allocs(&mut w, allocs),
            other => apply_by_ref(&mut w, &other),
        };
        if let Err(e) = applied {
            tracing::debug!(error = %e, "rejected");
            return Err(e.into());
        }
        before_publish()?;
        let info = w.txn.commit().map_err(StateError::from)?;
        span.record("rows", info.changes.len());
        Ok(info)
    }

    /// Upserts a node and derives its plugin instances.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn upsert_node(&self, index: u64, node: Node) -> Result<CommitInfo> {
        self.apply_owned(index, Command::UpsertNode { node })
    }

    /// Upserts many nodes in one write (see [`Command::UpsertNodes`]).
    ///
    /// # Errors
    /// See [`apply`](Self::apply); nothing is written if any node is rejected.
    pub fn upsert_nodes(&self, index: u64, nodes: Vec<Node>) -> Result<CommitInfo> {
        self.apply_owned(index, Command::UpsertNodes { nodes })
    }

    /// Deletes nodes (atomic; an unknown id fails the whole write).
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn delete_nodes(&self, index: u64, ids: &[Id]) -> Result<CommitInfo> {
        self.apply(index, &Command::DeleteNodes { ids: ids.to_vec() })
    }

    /// Sets a node's status.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn update_node_status(
        &self,
        index: u64,
        id: &str,
        status: NodeStatus,
    ) -> Result<CommitInfo> {
        self.apply(
            index,
            &Command::UpdateNodeStatus {
                id: id.into(),
                status,
            },
        )
    }

    /// Sets a node's drain flag.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn update_node_drain(&self, index: u64, id: &str, drain: bool) -> Result<CommitInfo> {
        self.apply(
            index,
            &Command::UpdateNodeDrain {
                id: id.into(),
                drain,
            },
        )
    }

    /// Sets a node's scheduling eligibility.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn update_node_eligibility(
        &self,
        index: u64,
        id: &str,
        eligible: bool,
    ) -> Result<CommitInfo> {
        self.apply(
            index,
            &Command::UpdateNodeEligibility {
                id: id.into(),
                eligible,
            },
        )
    }

    /// Upserts allocations.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn upsert_allocs(&self, index: u64, allocs: Vec<Allocation>) -> Result<CommitInfo> {
        self.apply_owned(index, Command::UpsertAllocs { allocs })
    }

    /// Deletes allocations (missing ids are skipped).
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn delete_allocs(&self, index: u64, ids: &[Id]) -> Result<CommitInfo> {
        self.apply(index, &Command::DeleteAllocs { ids: ids.to_vec() })
    }

    /// Registers volumes (atomic batch).
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn csi_volume_register(&self, index: u64, volumes: Vec<CsiVolume>) -> Result<CommitInfo> {
        self.apply(index, &Command::RegisterVolumes { volumes })
    }

    /// Deregisters volumes of one namespace (atomic batch).
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn csi_volume_deregister(
        &self,
        index: u64,
        namespace: &str,
        ids: &[Id],
        force: bool,
    ) -> Result<CommitInfo> {
        self.apply(
            index,
            &Command::DeregisterVolumes {
                namespace: namespace.into(),
                ids: ids.to_vec(),
                force,
            },
        )
    }

    /// Applies one claim (or release step) to a volume.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn csi_volume_claim(
        &self,
        index: u64,
        namespace: &str,
        volume_id: &str,
        claim: CsiVolumeClaim,
    ) -> Result<CommitInfo> {
        let claims = vec![VolumeClaimRequest {
            namespace: namespace.into(),
            volume_id: volume_id.into(),
            claim,
        }];
        self.apply(index, &Command::ClaimVolumes { claims })
    }

    /// Applies a batch of claims atomically.
    ///
    /// # Errors
    /// See [`apply`](Self::apply).
    pub fn csi_volume_claims(
        &self,
        index: u64,
        claims: Vec<VolumeClaimRequest>,
    ) -> Result<CommitInfo> {
        self.apply(index, &Command::ClaimVolumes { claims })
    }

    /// Runs `query` as a blocking query (SPEC §4): at once with `min_index` 0,
    /// otherwise until the index it returns exceeds `min_index` or the wait passes.
    /// The query's reads are what the wait watches.
    pub fn blocking_query<T>(
        &self,
        opts: QueryOptions,
        mut query: impl FnMut(StateView<'_>) -> (u64, T),
    ) -> QueryResult<T> {
        let t = self.t;
        let res = self
            .db
            .blocking_query(opts, |v| Ok::<_, Infallible>(query(StateView::new(v, t))));
        match res {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// The async form of [`blocking_query`](Self::blocking_query); `sleep` is your
    /// runtime's timer (for tokio, `tokio::time::sleep`).
    pub async fn blocking_query_async<T, S, SF>(
        &self,
        opts: QueryOptions,
        sleep: S,
        mut query: impl FnMut(StateView<'_>) -> (u64, T),
    ) -> QueryResult<T>
    where
        S: FnOnce(Duration) -> SF,
        SF: Future<Output = ()>,
    {
        let t = self.t;
        let res = self
            .db
            .blocking_query_async(opts, sleep, |v| {
                Ok::<_, Infallible>(query(StateView::new(v, t)))
            })
            .await;
        match res {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// A plugin, denormalized, as a blocking query answering with the plugins table
    /// index. Wakes when the plugin or one of its allocations changes.
    pub fn blocking_csi_plugin(
        &self,
        opts: QueryOptions,
        id: &str,
    ) -> QueryResult<Option<CsiPlugin>> {
        self.blocking_query(opts, |v| {
            let plugin = v.csi_plugin_by_id(id).map(|p| v.csi_plugin_denormalize(&p));
            (v.plugins_index(), plugin)
        })
    }

    /// Every plugin, as a blocking query answering with the plugins table index.
    pub fn blocking_csi_plugins(&self, opts: QueryOptions) -> QueryResult<Vec<Arc<CsiPlugin>>> {
        self.blocking_query(opts, |v| (v.plugins_index(), v.csi_plugins().collect()))
    }

    /// A volume, denormalized, as a blocking query answering with the volumes table
    /// index. Wakes when the volume, its plugin or a claiming allocation changes.
    pub fn blocking_csi_volume(
        &self,
        opts: QueryOptions,
        namespace: &str,
        id: &str,
    ) -> QueryResult<Option<CsiVolume>> {
        self.blocking_query(opts, |v| {
            (v.volumes_index(), v.csi_volume_by_id(namespace, id))
        })
    }

    /// The volumes of a namespace, denormalized (as Nomad's list does), as a blocking
    /// query answering with the volumes table index.
    pub fn blocking_csi_volumes(
        &self,
        opts: QueryOptions,
        namespace: &str,
    ) -> QueryResult<Vec<CsiVolume>> {
        self.blocking_query(opts, |v| {
            let vols = v
                .csi_volumes_by_id_prefix(namespace, "")
                .map(|vol| v.csi_volume_denormalize(&vol))
                .collect();
            (v.volumes_index(), vols)
        })
    }
}

/// A borrowed command: rows it carries are copied, the rest is read by reference.
fn apply_by_ref(w: &mut Writer, command: &Command) -> Result<()> {
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
        Command::RegisterVolumes { volumes } => volumes::register_volumes(w, volumes),
        Command::DeregisterVolumes {
            namespace,
            ids,
            force,
        } => volumes::deregister_volumes(w, namespace, ids, *force),
        Command::ClaimVolumes { claims } => claims::claim_volumes(w, claims),
    }
}
