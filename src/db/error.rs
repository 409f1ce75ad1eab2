//! The engine's error type.

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

/// Shorthand for results of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;
