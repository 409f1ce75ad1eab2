//! One committed version of the database: the immutable root every snapshot shares.

use std::sync::{Arc, Weak};

use super::database::Shared;
use super::pmap::PMap;
use super::schema::{Row, Schema, TableId};

/// A persistent map from encoded keys to rows (the engine's own B+tree, `pmap/`).
/// Cloning it is O(1); a write path-copies O(log n) nodes and shares the rest with
/// every other version.
pub(crate) type RowMap = PMap<Row>;

/// The data of one table: map 0 is the primary map, map `i + 1` secondary index `i`.
#[derive(Clone)]
pub(crate) struct TableData {
    pub(crate) maps: Vec<RowMap>,
}

/// One version of the whole database.
///
/// Cloning a root copies one small vector per table plus reference counts; a snapshot
/// shares the root itself through an `Arc`, which is what makes it O(1).
#[derive(Clone)]
pub(crate) struct Root {
    pub(crate) schema: Arc<Schema>,
    pub(crate) tables: Vec<TableData>,
    /// Per table: the log index of the last commit that changed it.
    pub(crate) table_index: Vec<u64>,
    /// Per table: the log index of the last commit that deleted one of its rows. Not
    /// persisted: a restored version starts it at the table index, which is at least
    /// as late as any delete it replaces (see `View::delete_index`).
    pub(crate) delete_index: Vec<u64>,
    /// The log index of the last accepted write, whether or not it changed anything.
    pub(crate) last_applied: u64,
    /// Commit sequence number of this version (increases by one per publish).
    pub(crate) seq: u64,
    /// Bumped when the whole state is replaced (restore): watches taken on an older
    /// epoch have been abandoned.
    pub(crate) epoch: u64,
    /// The database this version belongs to (weak: the database owns its roots).
    pub(crate) shared: Weak<Shared>,
}

impl Root {
    pub(crate) fn empty(schema: Arc<Schema>, shared: Weak<Shared>) -> Root {
        let tables = schema
            .tables
            .iter()
            .map(|t| TableData {
                maps: vec![RowMap::new(); t.indexes.len() + 1],
            })
            .collect();
        let table_index = vec![0; schema.tables.len()];
        let delete_index = vec![0; schema.tables.len()];
        Root {
            schema,
            tables,
            table_index,
            delete_index,
            last_applied: 0,
            seq: 0,
            epoch: 0,
            shared,
        }
    }

    pub(crate) fn map(&self, table: TableId, map: usize) -> Option<&RowMap> {
        self.tables.get(table)?.maps.get(map)
    }

    /// The largest table index.
    pub(crate) fn latest_index(&self) -> u64 {
        self.table_index.iter().copied().max().unwrap_or(0)
    }
}
