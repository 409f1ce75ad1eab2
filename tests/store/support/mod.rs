//! Shared helpers of the store's integration tests.
//!
//! Here: builders of fingerprints, nodes and allocations, reads of a store, the "the
//! store is exactly as it was" check of a refused command, and temporary directories.
//! The submodules hold what one family of tests needs on top:
//! - [`volumes`]: volumes, claims and `H`, a store applying commands at steps of 10;
//! - [`persist`]: data directories, log segments and a generator of command streams.

pub mod persist;
pub mod volumes;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiPlugin, DesiredStatus,
    Id, Node, id,
};
use schedstate::state::{Command, StateError, StateStore};

/// The provider most fingerprints report.
pub const PROVIDER: &str = "ebs.csi.aws.com";
/// The provider version most fingerprints report.
pub const VERSION: &str = "1.25.0";

/// Ids from string slices.
pub fn ids(list: &[&str]) -> Vec<Id> {
    list.iter().map(|s| id(s)).collect()
}

/// A fingerprint under construction: healthy, provider [`PROVIDER`] [`VERSION`].
#[derive(Debug, Clone)]
pub struct Fp(pub CsiInfo);

fn base(plugin: &str, alloc: &str) -> CsiInfo {
    CsiInfo {
        plugin_id: id(plugin),
        alloc_id: id(alloc),
        healthy: true,
        health_description: "healthy".into(),
        update_time: 1,
        provider: PROVIDER.into(),
        provider_version: VERSION.into(),
        ..Default::default()
    }
}

impl Fp {
    /// A healthy controller fingerprint.
    pub fn controller(plugin: &str, alloc: &str) -> Fp {
        Fp(CsiInfo {
            requires_controller_plugin: true,
            controller_info: Some(CsiControllerInfo {
                supports_attach_detach: true,
                ..Default::default()
            }),
            ..base(plugin, alloc)
        })
    }

    /// A healthy node fingerprint.
    pub fn node(plugin: &str, alloc: &str) -> Fp {
        Fp(CsiInfo {
            node_info: Some(CsiNodeInfo {
                id: format!("i-{alloc}").into(),
                max_volumes: 25,
                accessible_topology: None,
                requires_node_stage_volume: true,
            }),
            ..base(plugin, alloc)
        })
    }

    /// A healthy fingerprint carrying both a controller and a node half (a monolith
    /// plugin).
    pub fn both(plugin: &str, alloc: &str) -> Fp {
        let ctrl = Fp::controller(plugin, alloc).0;
        Fp(CsiInfo {
            node_info: Fp::node(plugin, alloc).0.node_info,
            ..ctrl
        })
    }

    /// Sets health.
    pub fn healthy(mut self, healthy: bool) -> Fp {
        self.0.healthy = healthy;
        self.0.health_description = if healthy { "healthy" } else { "unhealthy" }.into();
        self
    }

    /// Marks unhealthy.
    pub fn unhealthy(self) -> Fp {
        self.healthy(false)
    }

    /// Sets provider and version.
    pub fn provider(mut self, provider: &str, version: &str) -> Fp {
        self.0.provider = provider.into();
        self.0.provider_version = version.into();
        self
    }

    /// Sets `requires_controller_plugin`.
    pub fn requires_controller(mut self, required: bool) -> Fp {
        self.0.requires_controller_plugin = required;
        self
    }

    /// Sets the report time (ignored by equality).
    pub fn at(mut self, update_time: u64) -> Fp {
        self.0.update_time = update_time;
        self
    }

    /// Sets the alloc id.
    pub fn alloc(mut self, alloc: &str) -> Fp {
        self.0.alloc_id = id(alloc);
        self
    }

    /// The finished fingerprint.
    pub fn info(self) -> Arc<CsiInfo> {
        Arc::new(self.0)
    }
}

impl From<Fp> for Arc<CsiInfo> {
    fn from(fp: Fp) -> Arc<CsiInfo> {
        fp.info()
    }
}

/// A node under construction.
#[derive(Debug, Clone)]
pub struct NodeB(pub Node);

/// A ready, eligible node with no plugins.
pub fn node(node_id: &str) -> NodeB {
    NodeB(Node::new(node_id, format!("client-{node_id}")))
}

impl NodeB {
    /// Files `fp` (an [`Fp`] or a finished fingerprint) in the controller map under its
    /// own plugin id.
    pub fn ctrl(mut self, fp: impl Into<Arc<CsiInfo>>) -> NodeB {
        let fp = fp.into();
        self.0
            .csi_controller_plugins
            .insert(fp.plugin_id.clone(), fp);
        self
    }

    /// Files `fp` in the node map under its own plugin id.
    pub fn node(mut self, fp: impl Into<Arc<CsiInfo>>) -> NodeB {
        let fp = fp.into();
        self.0.csi_node_plugins.insert(fp.plugin_id.clone(), fp);
        self
    }

    /// Files `fp` in the controller map under `key` (which may be wrong).
    pub fn ctrl_under(mut self, key: &str, fp: impl Into<Arc<CsiInfo>>) -> NodeB {
        self.0.csi_controller_plugins.insert(id(key), fp.into());
        self
    }

    /// Files `fp` in the node map under `key` (which may be wrong).
    pub fn node_under(mut self, key: &str, fp: impl Into<Arc<CsiInfo>>) -> NodeB {
        self.0.csi_node_plugins.insert(id(key), fp.into());
        self
    }

    /// The finished node.
    pub fn build(self) -> Node {
        self.0
    }
}

/// An allocation of job `plugin-job` (namespace `default`) on `node_id`.
pub fn alloc(
    alloc_id: &str,
    node_id: &str,
    desired: DesiredStatus,
    client: ClientStatus,
) -> Allocation {
    Allocation {
        id: id(alloc_id),
        namespace: id("default"),
        job_id: id("plugin-job"),
        task_group: "csi".into(),
        node_id: id(node_id),
        desired_status: desired,
        client_status: client,
        ..Default::default()
    }
}

/// A running allocation (desired run, client running).
pub fn running(alloc_id: &str, node_id: &str) -> Allocation {
    alloc(alloc_id, node_id, DesiredStatus::Run, ClientStatus::Running)
}

/// A server-terminal allocation (desired stop, still running on the client).
pub fn stopped(alloc_id: &str, node_id: &str) -> Allocation {
    alloc(
        alloc_id,
        node_id,
        DesiredStatus::Stop,
        ClientStatus::Running,
    )
}

/// The plugin as stored.
pub fn plugin(store: &StateStore, plugin_id: &str) -> Option<Arc<CsiPlugin>> {
    store.snapshot().view().csi_plugin(plugin_id)
}

/// The plugin as stored; panics if absent.
pub fn must_plugin(store: &StateStore, plugin_id: &str) -> Arc<CsiPlugin> {
    plugin(store, plugin_id).unwrap_or_else(|| panic!("plugin {plugin_id:?} should exist"))
}

/// (controllers healthy, controller instances, nodes healthy, node instances). The
/// expected counts come from jobs (docs/rules.md §4.10); these tests are about the
/// instances fingerprints derive.
pub fn counts(p: &CsiPlugin) -> (usize, usize, usize, usize) {
    (
        p.controllers_healthy(),
        p.controllers.len(),
        p.nodes_healthy(),
        p.nodes.len(),
    )
}

/// The node ids of a plugin's controller entries, in order.
pub fn controller_nodes(p: &CsiPlugin) -> Vec<String> {
    p.controllers.iter().map(|(k, _)| k.to_string()).collect()
}

/// The node ids of a plugin's node entries, in order.
pub fn node_nodes(p: &CsiPlugin) -> Vec<String> {
    p.nodes.iter().map(|(k, _)| k.to_string()).collect()
}

/// Engine table names, including the derived instance table the tests also check.
pub mod names {
    /// The nodes table.
    pub const NODES: &str = "nodes";
    /// The allocations table.
    pub const ALLOCS: &str = "allocs";
    /// The CSI plugins table.
    pub const CSI_PLUGINS: &str = "csi_plugins";
    /// The CSI volumes table.
    pub const CSI_VOLUMES: &str = "csi_volumes";
    /// The jobs table.
    pub const JOBS: &str = "jobs";
    /// The derived table of plugin instances.
    pub const CSI_PLUGIN_INSTANCES: &str = "csi_plugin_instances";
    /// The four tables of the state.
    pub const STATE: [&str; 4] = [NODES, ALLOCS, CSI_PLUGINS, CSI_VOLUMES];
}

/// `table_index` of one engine table by name (the derived one too; 0 if unknown).
pub fn table_index(store: &StateStore, name: &str) -> u64 {
    store
        .snapshot()
        .view()
        .raw()
        .table_index_by_name(name)
        .unwrap_or(0)
}

/// `table_index(csi_plugins)`.
pub fn plugins_index(store: &StateStore) -> u64 {
    table_index(store, names::CSI_PLUGINS)
}

/// The last applied index.
pub fn last_applied(store: &StateStore) -> u64 {
    store.snapshot().view().last_applied()
}

/// Every table index, by name.
pub fn table_indexes(store: &StateStore) -> Vec<(&'static str, u64)> {
    let snap = store.snapshot();
    names::STATE
        .iter()
        .chain(&[names::CSI_PLUGIN_INSTANCES])
        .map(|n| (*n, snap.view().raw().table_index_by_name(n).unwrap_or(0)))
        .collect()
}

/// The canonical bytes of the current state.
pub fn canonical(store: &StateStore) -> Vec<u8> {
    store
        .snapshot()
        .canonical_bytes()
        .expect("canonical bytes encode")
}

/// Panics if the store breaks an invariant.
#[track_caller]
pub fn assert_invariants(store: &StateStore) {
    if let Err(e) = store.snapshot().view().check_invariants() {
        panic!("{e}");
    }
}

/// Applies `cmd` at `index`, expects it to fail, checks that the store is exactly as it
/// was (canonical bytes, every table index, last applied, latest index), and returns
/// the error.
#[track_caller]
pub fn assert_rejected(store: &StateStore, index: u64, cmd: &Command) -> StateError {
    let before = canonical(store);
    let indexes = table_indexes(store);
    let applied = last_applied(store);
    let latest = store.snapshot().view().latest_index();
    let err = match store.apply(index, cmd) {
        Ok(info) => panic!("{} at {index} should fail, committed {info:?}", cmd.kind()),
        Err(e) => e,
    };
    assert_eq!(
        canonical(store),
        before,
        "{}: state bytes changed ({err})",
        cmd.kind()
    );
    assert_eq!(
        table_indexes(store),
        indexes,
        "{}: table indexes changed",
        cmd.kind()
    );
    assert_eq!(
        last_applied(store),
        applied,
        "{}: last applied moved",
        cmd.kind()
    );
    assert_eq!(store.snapshot().view().latest_index(), latest);
    err
}

/// Applies `cmd` at `index`; panics with the error if it fails.
pub fn ok(store: &StateStore, index: u64, cmd: Command) {
    let kind = cmd.kind();
    if let Err(e) = store.apply(index, &cmd) {
        panic!("{kind} at {index} failed: {e}");
    }
}

/// Upserts `n` at `index`; panics on error.
pub fn up(store: &StateStore, index: u64, n: NodeB) {
    ok(store, index, Command::UpsertNode { node: n.build() });
}

/// Upserts allocs at `index`; panics on error.
pub fn up_allocs(store: &StateStore, index: u64, allocs: Vec<Allocation>) {
    ok(store, index, Command::UpsertAllocs { allocs });
}

/// The plugin rows a commit changed: (plugin id, insert/update/delete), in key order.
pub fn plugin_changes(info: &schedstate::Commit) -> Vec<(String, schedstate::ChangeKind)> {
    info.changes()
        .filter(|c| c.table() == schedstate::Table::CsiPlugins)
        .map(|c| match c.after().or_else(|| c.before()) {
            Some(schedstate::Row::CsiPlugin(row)) => (row.id.to_string(), c.kind()),
            other => panic!("a plugin change carries a plugin row, not {other:?}"),
        })
        .collect()
}

/// A path under the system's temporary directory (`tempfile`), unique, removed
/// (directory or file) when dropped.
#[derive(Debug)]
pub struct TempDir {
    /// The directory `tempfile` made (and removes); `path` is it, or a path inside it.
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TempDir {
    fn base(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("schedstate-test-{tag}-"))
            .tempdir()
            .expect("create temp dir")
    }

    /// A fresh, empty directory named after `tag`.
    pub fn new(tag: &str) -> TempDir {
        let dir = TempDir::base(tag);
        let path = dir.path().to_path_buf();
        TempDir { _dir: dir, path }
    }

    /// A fresh path named after `tag` that does not exist yet: for a directory or file
    /// the code under test is to create, or must not create.
    pub fn absent(tag: &str) -> TempDir {
        let dir = TempDir::base(tag);
        let path = dir.path().join(tag);
        TempDir { _dir: dir, path }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}
