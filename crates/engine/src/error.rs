//! The engine's error types.

/// Everything that can go wrong in the engine. Every failing call leaves the database
/// (and, for transaction methods, the transaction) exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A write was begun at a log index not greater than the last applied one.
    #[error("log index {index} is not greater than the last applied index {last_applied}")]
    StaleIndex {
        /// The index the write asked for.
        index: u64,
        /// The last index the database applied.
        last_applied: u64,
    },
    /// A table or index handle built for another schema was used on this database.
    #[error("the handle for table {table:?} does not belong to this database's schema")]
    ForeignHandle {
        /// The table the handle names.
        table: String,
    },
    /// An insert would give a unique secondary index key to a second row.
    #[error("unique index {table}.{index} already maps {key:?} to another row")]
    UniqueViolation {
        /// The table written.
        table: String,
        /// The unique index.
        index: String,
        /// The index key held by the other row (decoded where possible).
        key: String,
    },
    /// A schema declared two tables, or two indexes of one table, with the same name.
    #[error("duplicate name {0:?} in the schema")]
    DuplicateName(String),
    /// A table name that the schema does not know.
    #[error("no table named {0:?}")]
    UnknownTable(String),
    /// The database was dropped while a watch set was waiting on it.
    #[error("the database was dropped")]
    Closed,
}

/// A disagreement between a table and its secondary indexes, found by
/// [`View::verify_indexes`](crate::View::verify_indexes). Only a bug (or a file
/// restored without its checks) can produce one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexInconsistency {
    /// The version holds no data for a table of its schema.
    #[error("table {table} has no data")]
    MissingTable {
        /// The table.
        table: String,
    },
    /// A table's index is greater than the last applied index.
    #[error(
        "table index of {table} ({table_index}) exceeds the last applied index ({last_applied})"
    )]
    TableIndexAhead {
        /// The table.
        table: String,
        /// Its table index.
        table_index: u64,
        /// The version's last applied index.
        last_applied: u64,
    },
    /// A row is stored under a key other than its own primary key.
    #[error("{table}: the row stored under {key} has another primary key")]
    MisplacedRow {
        /// The table.
        table: String,
        /// The key it is stored under (as its `Debug` form shows it).
        key: String,
    },
    /// A row is not reachable through one of its index keys (or reaches another row).
    #[error("{table}: index {index} lacks {key} for the row {row}")]
    MissingEntry {
        /// The table.
        table: String,
        /// The secondary index.
        index: String,
        /// The index key the row has (as its `Debug` form shows it).
        key: String,
        /// The row's primary key (as its `Debug` form shows it).
        row: String,
    },
    /// An index (or the primary map) holds entries that no row accounts for.
    #[error("{table}: {index} holds {entries} entries, its rows account for {rows_account_for}")]
    EntryCount {
        /// The table.
        table: String,
        /// The index, or `(primary)`.
        index: String,
        /// Entries found.
        entries: usize,
        /// Entries the rows call for.
        rows_account_for: usize,
    },
}

/// Shorthand for results of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;
