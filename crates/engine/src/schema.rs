//! Tables and secondary indexes, declared once and shared by every version of a
//! database.
//!
//! A [`Schema`] is built before the [`Db`](super::Db): each table gets a name and a
//! function computing a row's primary key; each secondary index gets a name, a
//! uniqueness flag and a function computing zero, one or several index keys of a row.
//! The typed handles [`Table`] and [`Index`] returned by the builder are what reads and
//! writes name; they are `Copy` and tie a row type to its table at compile time.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Error, Key, Result};

/// A stored row: an immutable value shared by every version that contains it.
pub(crate) type Row = Arc<dyn Any + Send + Sync>;

type PrimaryFn = Arc<dyn Fn(&(dyn Any + Send + Sync)) -> Option<Key> + Send + Sync>;
type IndexFn = Arc<dyn Fn(&(dyn Any + Send + Sync), &mut Vec<Key>) + Send + Sync>;

/// Position of a table in the schema.
pub(crate) type TableId = usize;

static NEXT_SCHEMA_ID: AtomicU64 = AtomicU64::new(1);

/// The declared tables and indexes of a database.
///
/// ```
/// use schedstate_engine::{Db, Key, Schema};
/// #[derive(Debug)]
/// struct Alloc { id: String, node: String }
///
/// let mut schema = Schema::new();
/// let allocs = schema.table("allocs", |a: &Alloc| Key::str(&a.id)).unwrap();
/// let by_node = schema
///     .index(allocs, "node", false, |a: &Alloc| Some(Key::str(&a.node)))
///     .unwrap();
/// let db = Db::new(schema);
/// # let _ = (db, by_node);
/// ```
pub struct Schema {
    pub(crate) id: u64,
    pub(crate) tables: Vec<TableDef>,
    /// A value of the user's, shared by every version (see [`attach`](Self::attach)).
    pub(crate) attached: Option<Box<dyn Any + Send + Sync>>,
}

pub(crate) struct TableDef {
    pub(crate) name: Arc<str>,
    pub(crate) primary: PrimaryFn,
    pub(crate) indexes: Vec<IndexDef>,
}

pub(crate) struct IndexDef {
    pub(crate) name: String,
    pub(crate) unique: bool,
    pub(crate) keys: IndexFn,
}

impl Default for Schema {
    fn default() -> Self {
        Self::new()
    }
}

impl Schema {
    /// An empty schema.
    pub fn new() -> Self {
        Schema {
            id: NEXT_SCHEMA_ID.fetch_add(1, Ordering::Relaxed),
            tables: Vec::new(),
            attached: None,
        }
    }

    /// Attaches `value` to the schema, replacing what was attached before: every
    /// snapshot of the database hands it out by reference
    /// ([`Snapshot::attached`](super::Snapshot::attached)). Meant for the typed
    /// handles a layer above keeps (its tables and indexes), so that a snapshot need not
    /// carry a copy of them.
    ///
    /// ```
    /// use schedstate_engine::{Db, Key, Schema, Table};
    /// let mut schema = Schema::new();
    /// let kv = schema.table("kv", |r: &(String, u64)| Key::str(&r.0)).unwrap();
    /// schema.attach(kv);
    /// let db = Db::new(schema);
    /// let snap = db.snapshot();
    /// let handle: &Table<(String, u64)> = snap.attached().unwrap();
    /// assert!(snap.view().get(*handle, &Key::str("a")).is_none());
    /// ```
    pub fn attach<T: Any + Send + Sync>(&mut self, value: T) {
        self.attached = Some(Box::new(value));
    }

    /// The attached value, if it is a `T`.
    #[inline]
    pub(crate) fn attached<T: Any>(&self) -> Option<&T> {
        self.attached.as_deref()?.downcast_ref()
    }

    /// Declares a table of rows of type `V`, keyed by `primary(row)`.
    pub fn table<V, F>(&mut self, name: &str, primary: F) -> Result<Table<V>>
    where
        V: Any + Send + Sync,
        F: Fn(&V) -> Key + Send + Sync + 'static,
    {
        if self.tables.iter().any(|t| &*t.name == name) {
            return Err(Error::DuplicateName(name.to_string()));
        }
        let primary: PrimaryFn = Arc::new(move |row| row.downcast_ref::<V>().map(&primary));
        self.tables.push(TableDef {
            name: Arc::from(name),
            primary,
            indexes: Vec::new(),
        });
        Ok(Table {
            id: self.tables.len() - 1,
            schema: self.id,
            _row: PhantomData,
        })
    }

    /// Declares a secondary index with at most one key per row (`None`: the row is not
    /// indexed, a conditional index).
    ///
    /// A non-unique index stores `key ‖ primary key`, so every key it returns must be
    /// self-delimiting (built from whole [`Key`] components, which all are).
    pub fn index<V, F>(
        &mut self,
        table: Table<V>,
        name: &str,
        unique: bool,
        key: F,
    ) -> Result<Index<V>>
    where
        V: Any + Send + Sync,
        F: Fn(&V) -> Option<Key> + Send + Sync + 'static,
    {
        // Straight into the caller's list: no list of its own per row.
        self.add_index(table, name, unique, move |row: &V, out: &mut Vec<Key>| {
            out.extend(key(row));
        })
    }

    /// Declares a secondary index with any number of keys per row (for example one per
    /// element of a list field).
    pub fn multi_index<V, F>(
        &mut self,
        table: Table<V>,
        name: &str,
        unique: bool,
        keys: F,
    ) -> Result<Index<V>>
    where
        V: Any + Send + Sync,
        F: Fn(&V) -> Vec<Key> + Send + Sync + 'static,
    {
        self.add_index(table, name, unique, move |row: &V, out: &mut Vec<Key>| {
            out.extend(keys(row));
        })
    }

    /// Declares an index whose function appends a row's keys to a list.
    fn add_index<V, F>(
        &mut self,
        table: Table<V>,
        name: &str,
        unique: bool,
        keys: F,
    ) -> Result<Index<V>>
    where
        V: Any + Send + Sync,
        F: Fn(&V, &mut Vec<Key>) + Send + Sync + 'static,
    {
        let def = self
            .tables
            .get_mut(table.id)
            .filter(|_| table.schema == self.id)
            .ok_or_else(|| Error::ForeignHandle {
                table: format!("#{}", table.id),
            })?;
        if def.indexes.iter().any(|i| i.name == name) {
            return Err(Error::DuplicateName(format!("{}.{}", def.name, name)));
        }
        let keys: IndexFn = Arc::new(move |row, out| {
            if let Some(row) = row.downcast_ref::<V>() {
                keys(row, out);
            }
        });
        def.indexes.push(IndexDef {
            name: name.to_string(),
            unique,
            keys,
        });
        Ok(Index {
            table: table.id,
            // Map 0 of a table is its primary map; secondary index i lives in map i + 1.
            map: def.indexes.len(),
            unique,
            schema: self.id,
            _row: PhantomData,
        })
    }

    /// The names of the tables, in declaration order.
    pub fn table_names(&self) -> impl Iterator<Item = &str> {
        self.tables.iter().map(|t| &*t.name)
    }
}

impl TableDef {
    /// The primary key of `row`.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] if `row` is not of this table's type (a handle of
    /// another schema led here).
    pub(crate) fn primary_key(&self, row: &Row) -> Result<Key> {
        (self.primary)(&**row).ok_or_else(|| Error::ForeignHandle {
            table: self.name.to_string(),
        })
    }

    /// The index keys of `row` in map `map` (0 = primary).
    pub(crate) fn map_keys(&self, map: usize, row: &Row, out: &mut Vec<Key>) {
        match map {
            0 => out.extend((self.primary)(&**row)),
            m => {
                let index = &self.indexes[m - 1];
                let start = out.len();
                (index.keys)(&**row, out);
                if !index.unique
                    && let Some(pk) = (self.primary)(&**row)
                {
                    suffix_keys(&mut out[start..], &pk);
                }
            }
        }
    }

    /// [`map_keys`](Self::map_keys) of index map `map` (not 0) for a row whose
    /// primary key `pk` the caller has already.
    pub(crate) fn index_keys(&self, map: usize, row: &Row, pk: &Key, out: &mut Vec<Key>) {
        let index = &self.indexes[map - 1];
        let start = out.len();
        (index.keys)(&**row, out);
        if !index.unique {
            suffix_keys(&mut out[start..], pk);
        }
    }
}

/// A typed handle naming one table of a schema.
pub struct Table<V> {
    pub(crate) id: TableId,
    pub(crate) schema: u64,
    _row: PhantomData<fn() -> V>,
}

/// A typed handle naming one secondary index of a table.
pub struct Index<V> {
    pub(crate) table: TableId,
    pub(crate) map: usize,
    pub(crate) unique: bool,
    pub(crate) schema: u64,
    _row: PhantomData<fn() -> V>,
}

impl<V> Index<V> {
    /// Whether the index is unique.
    pub fn is_unique(&self) -> bool {
        self.unique
    }
}

// Manual impls: derives would demand `V: Clone`.
impl<V> Clone for Table<V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<V> Copy for Table<V> {}
impl<V> Clone for Index<V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<V> Copy for Index<V> {}
impl<V> std::fmt::Debug for Table<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table(#{})", self.id)
    }
}
impl<V> std::fmt::Debug for Index<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Index(#{}.{})", self.table, self.map)
    }
}

/// Appends the primary key to each key of a non-unique index, so two rows never share
/// an entry.
fn suffix_keys(keys: &mut [Key], pk: &Key) {
    for k in keys {
        k.append(pk);
    }
}
