//! [`StateSnapshot`]: one immutable version of the state.

use std::sync::Arc;

use serde::Serialize;

use crate::engine::{Snapshot, WatchSet};
use crate::model::{AclToken, CsiVolume, Id, JobDefinition, Node, PluginJob};

use super::read::StateView;
use super::table::Table;
use super::tables::Tables;
use super::v1::{AllocationV1, CsiPluginV1};
use super::v2::JobV2;

/// One version of the state: immutable, O(1) to take, `Send + Sync + 'static`.
/// Reads go through [`view`](Self::view), or [`watched`](Self::watched) to record
/// what they read for a wait.
///
/// It is one pointer: the table handles are read from the version's schema, where
/// `Tables::declare` attached them, so taking a snapshot copies nothing.
#[derive(Clone, Debug)]
pub struct StateSnapshot {
    pub(crate) snap: Snapshot,
}

impl StateSnapshot {
    /// A snapshot of a database whose schema `Tables::declare` made.
    pub(crate) fn new(snap: Snapshot) -> Self {
        StateSnapshot { snap }
    }

    /// The table handles of this version's schema.
    #[inline]
    pub(crate) fn tables(&self) -> &Tables {
        // Every database the state layer opens has a schema from `Tables::declare`,
        // which attaches the handles: the one way to make a `StateSnapshot` is from
        // such a database.
        self.snap
            .attached::<Tables>()
            .expect("a state schema carries its table handles")
    }

    /// Reads without watching.
    #[inline]
    pub fn view(&self) -> StateView<'_> {
        StateView::new(self.snap.view(), self.tables())
    }

    /// Reads that record what they read into `ws`, which can then wait until exactly
    /// that changes.
    pub fn watched<'a>(&'a self, ws: &'a WatchSet) -> StateView<'a> {
        StateView::new(self.snap.watched(ws), self.tables())
    }

    /// Whether `other` is the very same version (no write committed between them).
    pub fn same_version(&self, other: &StateSnapshot) -> bool {
        self.snap.same_version(&other.snap)
    }

    /// A deterministic encoding (postcard) of the state: last applied index, the table
    /// indexes and rows of the scheduler tables (the ACL tokens once written). Two stores fed the same commands
    /// at the same indexes give the same bytes. The derived instance table is left out:
    /// it is rebuilt from the plugins.
    ///
    /// # Errors
    /// An encoding error from postcard (not expected for these types).
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, postcard::Error> {
        #[derive(Serialize)]
        struct Canonical<'a> {
            last_applied: u64,
            table_indexes: Vec<(&'a str, u64)>,
            nodes: Vec<Arc<Node>>,
            allocs: Vec<AllocationV1>,
            plugins: Vec<CsiPluginV1>,
            volumes: Vec<Arc<CsiVolume>>,
        }
        /// What jobs added: the jobs, the allocations' job versions and the plugins'
        /// job expectations (each non-default one, with its row's key).
        #[derive(Serialize)]
        struct JobsPart {
            jobs: Vec<JobV2>,
            alloc_versions: Vec<(Id, u64)>,
            plugin_jobs: Vec<(Id, Vec<PluginJob>)>,
        }
        let v = self.view();
        // The tokens and jobs tables are encoded only once written, and rows in their
        // version-1 shape, so the encoding of a state that never had tokens or jobs is
        // what it was before those existed (golden files).
        let acl = v.acl_bootstrapped();
        let jobs = v.table_index(Table::Jobs) > 0;
        let table_indexes = Table::ALL
            .iter()
            .filter(|t| (acl || **t != Table::AclTokens) && (jobs || **t != Table::Jobs))
            .map(|t| (t.name(), v.table_index(*t)))
            .collect();
        let c = Canonical {
            last_applied: v.last_applied(),
            table_indexes,
            nodes: v.nodes().collect(),
            allocs: v.allocs().map(|a| AllocationV1::from(&*a)).collect(),
            plugins: v.csi_plugins().map(|p| CsiPluginV1::from(&*p)).collect(),
            volumes: v.csi_volumes().collect(),
        };
        let mut bytes = postcard::to_allocvec(&c)?;
        if acl {
            let tokens: Vec<Arc<AclToken>> = v.acl_tokens().collect();
            bytes.extend(postcard::to_allocvec(&tokens)?);
        }
        let part = JobsPart {
            jobs: v.jobs().map(|j| JobV2::from(&*j)).collect(),
            alloc_versions: v
                .allocs()
                .filter(|a| a.job_version != 0)
                .map(|a| (a.id.clone(), a.job_version))
                .collect(),
            plugin_jobs: v
                .csi_plugins()
                .filter(|p| !p.jobs.is_empty())
                .map(|p| (p.id.clone(), p.jobs.clone()))
                .collect(),
        };
        if jobs || !part.alloc_versions.is_empty() || !part.plugin_jobs.is_empty() {
            bytes.extend(postcard::to_allocvec(&part)?);
        }
        // What version 3 added, each only when there is any: the jobs' registered
        // definitions (with their row's key).
        let definitions: Vec<(Id, Id, JobDefinition)> = v
            .jobs()
            .filter_map(|j| {
                let d = j.definition.clone()?;
                Some((j.namespace.clone(), j.id.clone(), d))
            })
            .collect();
        if !definitions.is_empty() {
            bytes.extend(postcard::to_allocvec(&definitions)?);
        }
        // And the ACL salt, once set (with the index that set it).
        if let Some(salt) = v.acl_salt_row() {
            bytes.push(0xA5);
            bytes.extend(postcard::to_allocvec(&*salt)?);
        }
        Ok(bytes)
    }

    /// The engine snapshot underneath (feature `unstable-internals`).
    #[cfg(feature = "unstable-internals")]
    pub fn raw(&self) -> &Snapshot {
        &self.snap
    }
}
