//! [`StateReader`]: the read side of a store — snapshots and blocking queries — that
//! can be handed to code which must not write.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Db, QueryOptions, QueryResult};
use crate::model::{Allocation, CsiPlugin, CsiVolume, Node};

use super::read::StateView;
use super::snapshot::StateSnapshot;
use super::table::Table;
use super::tables::Tables;

/// Reads of a store: O(1) snapshots and blocking queries. Cheap to clone; it cannot
/// write. Every store kind hands one out (`reader()`), so request handlers, watchers
/// and background jobs can read without holding the write door.
///
/// The blocking queries follow one scheme: `blocking_<read>` runs the
/// [`StateView`] read `<read>` with the same arguments as a blocking query
/// (see [`blocking_query`](Self::blocking_query)) and answers with the
/// [`table_index`](StateView::table_index) of the read's table.
#[derive(Clone, Debug)]
pub struct StateReader {
    pub(crate) db: Db,
    pub(crate) t: Tables,
}

impl StateReader {
    /// The current version, O(1).
    pub fn snapshot(&self) -> StateSnapshot {
        StateSnapshot::new(self.db.snapshot())
    }

    /// Runs `query` as a blocking query: at once when `opts.min_index` is 0,
    /// otherwise, if the index it answers with is not above `min_index`, waits until
    /// something it read changes and runs it again, until the index moves past
    /// `min_index` or the wait (capped at 300 s, plus up to 1/16 jitter) passes; then
    /// answers with what it last saw ([`QueryResult::timed_out`] says which). The
    /// query's reads are what the wait watches: a write to anything else wakes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use schedstate::{QueryOptions, StateStore, Table};
    /// use schedstate::model::Node;
    ///
    /// let store = StateStore::new();
    /// store.upsert_node(1, Node::new("n1", "client-1")).unwrap();
    /// // Nothing newer than index 1 arrives within 10 ms: the answer times out.
    /// let answer = store.reader().blocking_query(
    ///     QueryOptions::new(1, Duration::from_millis(10)),
    ///     |v| (v.table_index(Table::Nodes), v.nodes().count()),
    /// );
    /// assert_eq!((answer.index, answer.value, answer.timed_out), (1, 1, true));
    /// ```
    pub fn blocking_query<T>(
        &self,
        opts: QueryOptions,
        mut query: impl FnMut(StateView<'_>) -> (u64, T),
    ) -> QueryResult<T> {
        let t = &self.t;
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
        let t = &self.t;
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

    /// [`StateView::node`] as a blocking query on the nodes table.
    pub fn blocking_node(&self, opts: QueryOptions, id: &str) -> QueryResult<Option<Arc<Node>>> {
        self.blocking_query(opts, |v| (v.table_index(Table::Nodes), v.node(id)))
    }

    /// [`StateView::nodes`] as a blocking query on the nodes table.
    pub fn blocking_nodes(&self, opts: QueryOptions) -> QueryResult<Vec<Arc<Node>>> {
        self.blocking_query(opts, |v| (v.table_index(Table::Nodes), v.nodes().collect()))
    }

    /// [`StateView::alloc`] as a blocking query on the allocs table.
    pub fn blocking_alloc(
        &self,
        opts: QueryOptions,
        id: &str,
    ) -> QueryResult<Option<Arc<Allocation>>> {
        self.blocking_query(opts, |v| (v.table_index(Table::Allocs), v.alloc(id)))
    }

    /// [`StateView::allocs_by_node`] as a blocking query on the allocs table: what a
    /// client node waits on for its work. Wakes only for allocations on that node.
    pub fn blocking_allocs_by_node(
        &self,
        opts: QueryOptions,
        node_id: &str,
    ) -> QueryResult<Vec<Arc<Allocation>>> {
        self.blocking_query(opts, |v| {
            (
                v.table_index(Table::Allocs),
                v.allocs_by_node(node_id).collect(),
            )
        })
    }

    /// [`StateView::csi_plugin`] (the stored row) as a blocking query on the plugins
    /// table.
    pub fn blocking_csi_plugin(
        &self,
        opts: QueryOptions,
        id: &str,
    ) -> QueryResult<Option<Arc<CsiPlugin>>> {
        self.blocking_query(opts, |v| {
            (v.table_index(Table::CsiPlugins), v.csi_plugin(id))
        })
    }

    /// [`StateView::csi_plugin_denormalized`] as a blocking query on the plugins
    /// table; its reads of the plugin's allocations are watched too.
    pub fn blocking_csi_plugin_denormalized(
        &self,
        opts: QueryOptions,
        id: &str,
    ) -> QueryResult<Option<CsiPlugin>> {
        self.blocking_query(opts, |v| {
            (
                v.table_index(Table::CsiPlugins),
                v.csi_plugin_denormalized(id),
            )
        })
    }

    /// [`StateView::csi_plugins`] as a blocking query on the plugins table.
    pub fn blocking_csi_plugins(&self, opts: QueryOptions) -> QueryResult<Vec<Arc<CsiPlugin>>> {
        self.blocking_query(opts, |v| {
            (v.table_index(Table::CsiPlugins), v.csi_plugins().collect())
        })
    }

    /// [`StateView::csi_volume`] (the stored row) as a blocking query on the volumes
    /// table.
    pub fn blocking_csi_volume(
        &self,
        opts: QueryOptions,
        namespace: &str,
        id: &str,
    ) -> QueryResult<Option<Arc<CsiVolume>>> {
        self.blocking_query(opts, |v| {
            (
                v.table_index(Table::CsiVolumes),
                v.csi_volume(namespace, id),
            )
        })
    }

    /// [`StateView::csi_volume_denormalized`] as a blocking query on the volumes
    /// table; wakes when the volume, its plugin or a claiming allocation changes.
    pub fn blocking_csi_volume_denormalized(
        &self,
        opts: QueryOptions,
        namespace: &str,
        id: &str,
    ) -> QueryResult<Option<CsiVolume>> {
        self.blocking_query(opts, |v| {
            (
                v.table_index(Table::CsiVolumes),
                v.csi_volume_denormalized(namespace, id),
            )
        })
    }

    /// [`StateView::csi_volumes_by_prefix`] as a blocking query on the volumes table.
    pub fn blocking_csi_volumes_by_prefix(
        &self,
        opts: QueryOptions,
        namespace: &str,
        prefix: &str,
    ) -> QueryResult<Vec<Arc<CsiVolume>>> {
        self.blocking_query(opts, |v| {
            (
                v.table_index(Table::CsiVolumes),
                v.csi_volumes_by_prefix(namespace, prefix).collect(),
            )
        })
    }

    /// The engine underneath (feature `unstable-internals`): writes through it skip
    /// the rules and the log.
    #[cfg(feature = "unstable-internals")]
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The table handles (feature `unstable-internals`).
    #[cfg(feature = "unstable-internals")]
    pub fn tables(&self) -> Tables {
        self.t
    }
}
