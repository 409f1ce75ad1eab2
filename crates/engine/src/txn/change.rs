//! What a commit reports: each row it changed, with the row before and after.

use std::any::Any;
use std::sync::Arc;

use crate::Key;
use crate::schema::Row;
use crate::view::downcast;

/// What a commit changed in one row: collapsed per (table, primary key), so a row
/// inserted and deleted in the same transaction does not appear.
#[derive(Clone)]
pub struct Change {
    pub(super) table: Arc<str>,
    pub(super) key: Key,
    pub(super) before: Option<Row>,
    pub(super) after: Option<Row>,
}

impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Change")
            .field("table", &self.table)
            .field("key", &self.key)
            .field("kind", &self.kind())
            .finish()
    }
}

/// Whether a change created, replaced or removed its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The row did not exist before.
    Insert,
    /// The row was replaced.
    Update,
    /// The row was removed.
    Delete,
}

impl Change {
    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The row's primary key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Insert, update or delete.
    pub fn kind(&self) -> ChangeKind {
        match (&self.before, &self.after) {
            (None, _) => ChangeKind::Insert,
            (Some(_), Some(_)) => ChangeKind::Update,
            (Some(_), None) => ChangeKind::Delete,
        }
    }

    /// The row before the transaction, as `V` (`None` if absent or of another type).
    pub fn before<V: Any + Send + Sync>(&self) -> Option<Arc<V>> {
        self.before.as_ref().and_then(downcast)
    }

    /// The row after the transaction, as `V` (`None` if deleted or of another type).
    pub fn after<V: Any + Send + Sync>(&self) -> Option<Arc<V>> {
        self.after.as_ref().and_then(downcast)
    }
}

/// The result of a commit.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    /// The log index committed.
    pub index: u64,
    /// Every row changed, in (table, key) order.
    pub changes: Vec<Change>,
}
