//! The scheduler's tables and their indexes, declared on the generic engine.

use serde::{Deserialize, Serialize};

use crate::engine::{Index, Key, Schema, Table};
use crate::model::{AclSalt, AclToken, Allocation, CsiPlugin, CsiVolume, Id, Job, Node};

/// Engine table names (the four of [`Table`](super::Table) and the derived one).
pub(crate) mod names {
    /// The nodes table.
    pub const NODES: &str = "nodes";
    /// The allocations table.
    pub const ALLOCS: &str = "allocs";
    /// The CSI plugins table.
    pub const CSI_PLUGINS: &str = "csi_plugins";
    /// The CSI volumes table.
    pub const CSI_VOLUMES: &str = "csi_volumes";
    /// The derived index of plugin instances (see [`PluginInstance`](super::PluginInstance)).
    pub const CSI_PLUGIN_INSTANCES: &str = "csi_plugin_instances";
    /// The ACL tokens table.
    pub const ACL_TOKENS: &str = "acl_tokens";
    /// The jobs table.
    pub const JOBS: &str = "jobs";
    /// The ACL salt: one row once set (format 3), not a [`Table`](super::Table) of
    /// its own (snapshots list it under this name).
    pub const ACL_SALT: &str = "acl_salt";
}

/// The cluster's ACL salt as stored: the one row of the `acl_salt` table, from the
/// write that set it on (docs/rules.md §4.9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclSaltRow {
    /// The salt.
    pub salt: AclSalt,
    /// The index of the write that set it.
    pub create_index: u64,
}

impl AclSaltRow {
    /// The one key of the table.
    pub(crate) fn key() -> Key {
        Key::str("salt")
    }
}

/// Which map of a plugin an instance lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum InstanceKind {
    /// `CsiPlugin::controllers`.
    Controller,
    /// `CsiPlugin::nodes`.
    Node,
}

impl InstanceKind {
    fn tag(self) -> u64 {
        match self {
            InstanceKind::Controller => 0,
            InstanceKind::Node => 1,
        }
    }
}

/// One entry of a plugin's `controllers` or `nodes` map, as its own row.
///
/// Derived data, written in the same transaction as the plugin entry it mirrors. It
/// exists so that "the plugins holding an instance on node n" and "the instances of
/// alloc a" are index lookups instead of a scan over every plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInstance {
    /// The node the instance runs on.
    pub node_id: Id,
    /// Controller or node instance.
    pub kind: InstanceKind,
    /// The plugin.
    pub plugin_id: Id,
    /// The allocation running it (may be empty).
    pub alloc_id: Id,
}

impl PluginInstance {
    pub(crate) fn key(node_id: &str, kind: InstanceKind, plugin_id: &str) -> Key {
        Key::builder()
            .str(node_id)
            .u64(kind.tag())
            .str(plugin_id)
            .build()
    }
}

/// Handles of every table and index of the state store.
#[derive(Debug, Clone, Copy)]
pub struct Tables {
    /// Nodes by id.
    pub nodes: Table<Node>,
    /// Allocations by id.
    pub allocs: Table<Allocation>,
    /// Allocations by node id.
    pub allocs_by_node: Index<Allocation>,
    /// Allocations by (namespace, job id).
    pub allocs_by_job: Index<Allocation>,
    /// Plugins by id.
    pub plugins: Table<CsiPlugin>,
    /// Volumes by (namespace, id).
    pub volumes: Table<CsiVolume>,
    /// Volumes by (plugin id, namespace).
    pub volumes_by_plugin: Index<CsiVolume>,
    /// Volumes by (id, namespace), for id-prefix searches across namespaces.
    pub volumes_by_id: Index<CsiVolume>,
    /// Plugin instances by (node id, kind, plugin id).
    pub instances: Table<PluginInstance>,
    /// Plugin instances by alloc id (instances with an empty alloc id are not indexed).
    pub instances_by_alloc: Index<PluginInstance>,
    /// ACL tokens by accessor id.
    pub acl_tokens: Table<AclToken>,
    /// ACL tokens by secret hash (unique).
    pub acl_tokens_by_secret: Index<AclToken>,
    /// Jobs by (namespace, id).
    pub jobs: Table<Job>,
    /// The ACL salt (one row at most).
    pub acl_salt: Table<AclSaltRow>,
}

/// The primary key of a job (and of an allocation's job in `allocs_by_job`).
pub(crate) fn job_key(namespace: &str, id: &str) -> Key {
    Key::builder().str(namespace).str(id).build()
}

/// The primary key of a volume.
pub(crate) fn volume_key(namespace: &str, id: &str) -> Key {
    Key::builder().str(namespace).str(id).build()
}

impl Tables {
    /// Declares the tables on a new schema, and attaches them to it.
    pub(crate) fn declare() -> (Schema, Tables) {
        let mut s = Schema::new();
        // Names are distinct constants, so declaring cannot fail; the expect documents
        // an invariant of this function, not of any input.
        let tables = (|| -> crate::engine::Result<Tables> {
            let nodes = s.table(names::NODES, |n: &Node| Key::str(&n.id))?;
            let allocs = s.table(names::ALLOCS, |a: &Allocation| Key::str(&a.id))?;
            let allocs_by_node = s.index(allocs, "node", false, |a: &Allocation| {
                Some(Key::str(&a.node_id))
            })?;
            let allocs_by_job = s.index(allocs, "job", false, |a: &Allocation| {
                Some(job_key(&a.namespace, &a.job_id))
            })?;
            let plugins = s.table(names::CSI_PLUGINS, |p: &CsiPlugin| Key::str(&p.id))?;
            let volumes = s.table(names::CSI_VOLUMES, |v: &CsiVolume| {
                volume_key(&v.namespace, &v.id)
            })?;
            let volumes_by_plugin = s.index(volumes, "plugin", false, |v: &CsiVolume| {
                Some(Key::builder().str(&v.plugin_id).str(&v.namespace).build())
            })?;
            let volumes_by_id = s.index(volumes, "id", true, |v: &CsiVolume| {
                Some(Key::builder().str(&v.id).str(&v.namespace).build())
            })?;
            let instances = s.table(names::CSI_PLUGIN_INSTANCES, |i: &PluginInstance| {
                PluginInstance::key(&i.node_id, i.kind, &i.plugin_id)
            })?;
            let instances_by_alloc = s.index(instances, "alloc", false, |i: &PluginInstance| {
                (!i.alloc_id.is_empty()).then(|| Key::str(&i.alloc_id))
            })?;
            let acl_tokens = s.table(names::ACL_TOKENS, |t: &AclToken| Key::str(&t.accessor_id))?;
            let acl_tokens_by_secret = s.index(acl_tokens, "secret", true, |t: &AclToken| {
                Some(Key::str(&t.secret_hash))
            })?;
            let jobs = s.table(names::JOBS, |j: &Job| job_key(&j.namespace, &j.id))?;
            let acl_salt = s.table(names::ACL_SALT, |_: &AclSaltRow| AclSaltRow::key())?;
            Ok(Tables {
                nodes,
                allocs,
                allocs_by_node,
                allocs_by_job,
                plugins,
                volumes,
                volumes_by_plugin,
                volumes_by_id,
                instances,
                instances_by_alloc,
                acl_tokens,
                acl_tokens_by_secret,
                jobs,
                acl_salt,
            })
        })()
        .expect("the state schema declares distinct names");
        // Every snapshot reads its handles from the schema (see `StateSnapshot::view`)
        // instead of carrying a copy of them.
        s.attach(tables);
        (s, tables)
    }
}
