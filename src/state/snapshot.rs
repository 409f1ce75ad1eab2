//! [`StateSnapshot`]: one immutable version of the state.

use std::sync::Arc;

use serde::Serialize;

use crate::engine::{Snapshot, WatchSet};
use crate::model::{AclToken, Allocation, CsiPlugin, CsiVolume, Node};

use super::read::StateView;
use super::table::Table;
use super::tables::Tables;

/// One version of the state: immutable, O(1) to take, `Send + Sync + 'static`.
/// Reads go through [`view`](Self::view), or [`watched`](Self::watched) to record
/// what they read for a wait.
#[derive(Clone, Debug)]
pub struct StateSnapshot {
    pub(crate) snap: Snapshot,
    pub(crate) t: Tables,
}

impl StateSnapshot {
    /// Reads without watching.
    pub fn view(&self) -> StateView<'_> {
        StateView::new(self.snap.view(), self.t)
    }

    /// Reads that record what they read into `ws`, which can then wait until exactly
    /// that changes.
    pub fn watched<'a>(&'a self, ws: &'a WatchSet) -> StateView<'a> {
        StateView::new(self.snap.watched(ws), self.t)
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
            allocs: Vec<Arc<Allocation>>,
            plugins: Vec<Arc<CsiPlugin>>,
            volumes: Vec<Arc<CsiVolume>>,
        }
        let v = self.view();
        // The tokens table is encoded only once written, so the encoding of a state
        // that never had one is what it was before the table existed (golden files).
        let acl = v.acl_bootstrapped();
        let table_indexes = Table::ALL
            .iter()
            .filter(|t| acl || **t != Table::AclTokens)
            .map(|t| (t.name(), v.table_index(*t)))
            .collect();
        let c = Canonical {
            last_applied: v.last_applied(),
            table_indexes,
            nodes: v.nodes().collect(),
            allocs: v.allocs().collect(),
            plugins: v.csi_plugins().collect(),
            volumes: v.csi_volumes().collect(),
        };
        let mut bytes = postcard::to_allocvec(&c)?;
        if acl {
            let tokens: Vec<Arc<AclToken>> = v.acl_tokens().collect();
            bytes.extend(postcard::to_allocvec(&tokens)?);
        }
        Ok(bytes)
    }

    /// The engine snapshot underneath (feature `unstable-internals`).
    #[cfg(feature = "unstable-internals")]
    pub fn raw(&self) -> &Snapshot {
        &self.snap
    }
}
