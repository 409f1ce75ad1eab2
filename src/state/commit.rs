//! [`Commit`]: what an accepted write did, for its caller, a change feed or a log.

use std::sync::Arc;

use crate::engine::{Change, ChangeKind, CommitInfo};
use crate::model::{AclToken, Allocation, CsiPlugin, CsiVolume, Job, Node};

use super::table::Table;

/// An accepted write: the index it was applied at and the rows it changed.
///
/// A write that changed nothing (a heartbeat, a status already set) is still a
/// commit: the last applied index moved to [`index`](Self::index), and
/// [`changes`](Self::changes) is empty.
#[derive(Debug, Clone)]
pub struct Commit {
    info: CommitInfo,
}

impl Commit {
    pub(crate) fn new(info: CommitInfo) -> Self {
        Commit { info }
    }

    /// The log index the write was applied at.
    pub fn index(&self) -> u64 {
        self.info.index
    }

    /// Every row the write created, replaced or removed, one entry per row (a row
    /// written twice in one write appears once, with its first `before` and its last
    /// `after`), in (table, key) order.
    pub fn changes(&self) -> impl Iterator<Item = RowChange<'_>> + '_ {
        self.info.changes.iter().filter_map(|change| {
            Table::from_name(change.table()).map(|table| RowChange { table, change })
        })
    }

    /// The tables whose table index this write moved, each once, in [`Table::ALL`]
    /// order.
    pub fn tables_changed(&self) -> Vec<Table> {
        let mut tables: Vec<Table> = self.changes().map(|c| c.table()).collect();
        tables.sort_unstable();
        tables.dedup();
        tables
    }

    /// Whether the write changed no row.
    pub fn is_empty(&self) -> bool {
        self.changes().next().is_none()
    }
}

/// One row a write changed.
#[derive(Debug, Clone, Copy)]
pub struct RowChange<'a> {
    table: Table,
    change: &'a Change,
}

impl RowChange<'_> {
    /// The row's table.
    pub fn table(&self) -> Table {
        self.table
    }

    /// Whether the row was created, replaced or removed.
    pub fn kind(&self) -> ChangeKind {
        self.change.kind()
    }

    /// The row before the write (`None` if it was created).
    pub fn before(&self) -> Option<Row> {
        let c = self.change;
        match self.table {
            Table::Nodes => c.before().map(Row::Node),
            Table::Allocs => c.before().map(Row::Alloc),
            Table::CsiPlugins => c.before().map(Row::CsiPlugin),
            Table::CsiVolumes => c.before().map(Row::CsiVolume),
            Table::AclTokens => c.before().map(Row::AclToken),
            Table::Jobs => c.before().map(Row::Job),
        }
    }

    /// The row after the write (`None` if it was removed).
    pub fn after(&self) -> Option<Row> {
        let c = self.change;
        match self.table {
            Table::Nodes => c.after().map(Row::Node),
            Table::Allocs => c.after().map(Row::Alloc),
            Table::CsiPlugins => c.after().map(Row::CsiPlugin),
            Table::CsiVolumes => c.after().map(Row::CsiVolume),
            Table::AclTokens => c.after().map(Row::AclToken),
            Table::Jobs => c.after().map(Row::Job),
        }
    }
}

/// A stored row of any table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "table", content = "row")]
pub enum Row {
    /// A node.
    Node(Arc<Node>),
    /// An allocation.
    Alloc(Arc<Allocation>),
    /// A CSI plugin, as stored (not denormalized).
    CsiPlugin(Arc<CsiPlugin>),
    /// A CSI volume, as stored (not denormalized).
    CsiVolume(Arc<CsiVolume>),
    /// An ACL token (its secret's hash, never the secret).
    AclToken(Arc<AclToken>),
    /// A job.
    Job(Arc<Job>),
}

impl Row {
    /// The row's table.
    pub fn table(&self) -> Table {
        match self {
            Row::Node(_) => Table::Nodes,
            Row::Alloc(_) => Table::Allocs,
            Row::CsiPlugin(_) => Table::CsiPlugins,
            Row::CsiVolume(_) => Table::CsiVolumes,
            Row::AclToken(_) => Table::AclTokens,
            Row::Job(_) => Table::Jobs,
        }
    }
}
