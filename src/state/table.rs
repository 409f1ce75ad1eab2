//! [`Table`]: the scheduler's tables by name, for table indexes and change sets.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::tables::names;

/// One of the scheduler's tables.
///
/// Every row carries its create and modify index; each table also has a *table
/// index*, the index of the last write that changed one of its rows
/// ([`StateView::table_index`](super::StateView::table_index)), which is what
/// blocking queries answer with.
///
/// ```
/// use schedstate::Table;
///
/// assert_eq!(Table::CsiPlugins.name(), "csi_plugins");
/// assert_eq!("csi_volumes".parse::<Table>(), Ok(Table::CsiVolumes));
/// assert!("plugins".parse::<Table>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Table {
    /// Client nodes, by id.
    Nodes,
    /// Allocations, by id.
    Allocs,
    /// CSI plugins, by id (derived from node fingerprints).
    CsiPlugins,
    /// CSI volumes, by (namespace, id).
    CsiVolumes,
    /// ACL tokens, by accessor id (secrets stored as hashes only).
    AclTokens,
    /// Jobs, by (namespace, id).
    Jobs,
}

impl Table {
    /// Every table, in the order snapshots and canonical bytes list them.
    pub const ALL: [Table; 6] = [
        Table::Nodes,
        Table::Allocs,
        Table::CsiPlugins,
        Table::CsiVolumes,
        Table::AclTokens,
        Table::Jobs,
    ];

    /// The table's name, as snapshot files, `inspect` and change sets spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Table::Nodes => names::NODES,
            Table::Allocs => names::ALLOCS,
            Table::CsiPlugins => names::CSI_PLUGINS,
            Table::CsiVolumes => names::CSI_VOLUMES,
            Table::AclTokens => names::ACL_TOKENS,
            Table::Jobs => names::JOBS,
        }
    }

    /// The table called `name`, if it is one of the scheduler's tables.
    pub fn from_name(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A table name that is not one of the scheduler's tables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no table named {0:?} (tables: nodes, allocs, csi_plugins, csi_volumes, acl_tokens, jobs)")]
pub struct UnknownTable(pub String);

impl FromStr for Table {
    type Err = UnknownTable;

    fn from_str(s: &str) -> Result<Table, UnknownTable> {
        Table::from_name(s).ok_or_else(|| UnknownTable(s.to_string()))
    }
}
