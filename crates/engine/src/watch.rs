//! Watches: what a query read, and waiting until exactly that changes.
//!
//! A [`WatchSet`] collects the keys, ranges and tables a query read through a watched
//! [`View`](super::View). Waiting on it registers those items with the database's
//! registry under one shared [`Signal`]; a commit looks up the keys it changed and
//! fires the signals of exactly the sets that read one of them.
//!
//! No missed wake-up: a set remembers the version it read. When it registers, under the
//! same lock commits use to fire, it compares what it read in that version with the
//! current one; if anything it read changed in between, it fires at once instead of
//! waiting for a commit that already happened.

use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use event_listener::{Event, EventListener, Listener};
use parking_lot::Mutex;

use super::Key;
use super::database::Shared;
use super::reclaim::PinnedRoot;
use super::schema::TableId;

/// Default number of items a set records before it falls back to table-level watches.
pub const DEFAULT_WATCH_LIMIT: usize = 4096;

/// One thing a query read.
#[derive(Debug, Clone)]
pub(crate) enum WatchItem {
    /// An exact key of map `map` (0 = primary) of `table`, present or absent.
    Key {
        table: TableId,
        map: usize,
        key: Key,
    },
    /// Every key of one map that starts with `prefix` (an `index_eq` of a
    /// non-unique index, whose entries are `value ‖ primary key`, or any prefix scan).
    /// Registered under the prefix itself, so a commit finds it with a lookup of the
    /// changed key's own prefix instead of comparing it with every watched range.
    Prefix {
        table: TableId,
        map: usize,
        prefix: Key,
    },
    /// A range of keys of one map, other than a prefix.
    Range {
        table: TableId,
        map: usize,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    },
    /// Anything in a table.
    Table { table: TableId },
}

/// The flag a commit raises to wake one watch set.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    fired: AtomicBool,
    event: Event,
}

impl Signal {
    pub(crate) fn fire(&self) {
        if !self.fired.swap(true, Ordering::AcqRel) {
            self.event.notify(usize::MAX);
        }
    }

    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// A listener, or `None` when already fired (checked after listening, so a fire
    /// between the check and the listen is not lost).
    fn listen(&self) -> Option<EventListener> {
        if self.is_fired() {
            return None;
        }
        let listener = self.event.listen();
        if self.is_fired() {
            None
        } else {
            Some(listener)
        }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Something the set watches changed (or the state was replaced by a restore).
    Changed,
    /// The deadline passed first.
    TimedOut,
}

/// What a query read, to wait until it changes.
///
/// Fill it by reading through [`Snapshot::watched`](super::Snapshot::watched), then wait
/// with [`wait_timeout`](Self::wait_timeout), [`wait_deadline`](Self::wait_deadline) or
/// [`changed`](Self::changed) (async). Dropping the set removes every registration it
/// made. Use one snapshot per set: items are compared against the first version read.
/// The set keeps that version alive only until it registers (its first wait).
///
/// ```
/// use std::time::Duration;
/// use schedstate_engine::{Db, Key, Schema, WaitOutcome, WatchSet};
/// use std::sync::Arc;
///
/// let mut schema = Schema::new();
/// let t = schema.table("kv", |r: &(String, u64)| Key::str(&r.0)).unwrap();
/// let db = Db::new(schema);
///
/// let ws = WatchSet::new();
/// let snap = db.snapshot();
/// assert!(snap.watched(&ws).get(t, &Key::str("a")).is_none()); // watch an absent key
///
/// let mut txn = db.begin_write(1).unwrap();
/// txn.insert(t, Arc::new(("b".to_string(), 1))).unwrap();
/// txn.commit().unwrap();
/// assert_eq!(ws.wait_timeout(Duration::from_millis(10)), WaitOutcome::TimedOut);
///
/// let mut txn = db.begin_write(2).unwrap();
/// txn.insert(t, Arc::new(("a".to_string(), 2))).unwrap();
/// txn.commit().unwrap();
/// assert_eq!(ws.wait_timeout(Duration::from_secs(5)), WaitOutcome::Changed);
/// ```
pub struct WatchSet {
    inner: Mutex<Inner>,
    signal: Arc<Signal>,
}

struct Inner {
    /// The version the watched reads came from.
    base: Option<PinnedRoot>,
    items: Vec<WatchItem>,
    /// Tables already watched whole (after the limit, or by a full scan).
    whole: Vec<TableId>,
    limit: usize,
    registered: Option<Registration>,
}

struct Registration {
    id: u64,
    shared: std::sync::Weak<Shared>,
    items: Vec<WatchItem>,
}

impl Default for WatchSet {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WatchSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("WatchSet")
            .field("items", &inner.items.len())
            .field("whole_tables", &inner.whole)
            .field("fired", &self.signal.is_fired())
            .finish()
    }
}

impl WatchSet {
    /// An empty set with the default item limit ([`DEFAULT_WATCH_LIMIT`]).
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_WATCH_LIMIT)
    }

    /// An empty set that, past `limit` items, watches whole tables instead of further
    /// keys: it bounds the cost of very large queries at the price of early wakes.
    pub fn with_limit(limit: usize) -> Self {
        WatchSet {
            inner: Mutex::new(Inner {
                base: None,
                items: Vec::new(),
                whole: Vec::new(),
                limit,
                registered: None,
            }),
            signal: Arc::new(Signal::default()),
        }
    }

    /// Number of recorded items (keys, ranges and whole tables).
    pub fn len(&self) -> usize {
        let inner = self.inner.lock();
        inner.items.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a change has already been seen.
    pub fn is_fired(&self) -> bool {
        self.signal.is_fired()
    }

    pub(crate) fn set_base(&self, root: &PinnedRoot) {
        let mut inner = self.inner.lock();
        if inner.registered.is_some() {
            // Reads after the first wait are not watched, so nothing is compared
            // against their version: do not pin it.
            return;
        }
        match &inner.base {
            // Keep the oldest version: comparing against it can only wake early.
            Some(b) if b.epoch == root.epoch && b.seq <= root.seq => {}
            _ => inner.base = Some(root.clone()),
        }
    }

    pub(crate) fn add(&self, item: WatchItem, table: TableId) {
        let mut inner = self.inner.lock();
        if inner.registered.is_some() {
            // Reads after the first wait are not watched: the set is already live.
            return;
        }
        if inner.whole.contains(&table) {
            return;
        }
        let item = if inner.items.len() >= inner.limit {
            WatchItem::Table { table }
        } else {
            item
        };
        if let WatchItem::Table { table } = item {
            inner.whole.push(table);
        }
        inner.items.push(item);
    }

    /// Fires this set by hand (for example to cancel a waiter).
    pub fn fire(&self) {
        self.signal.fire();
    }

    /// Registers with the database (once). Returns false if the database is gone.
    fn ensure_registered(&self) -> bool {
        let mut inner = self.inner.lock();
        if inner.registered.is_some() {
            return true;
        }
        // The base version is needed only for the comparison inside `register`: let
        // go of it afterwards. A set parked for minutes would otherwise pin the
        // version it read, and thousands of waiters registered at different times
        // would keep thousands of versions alive.
        let Some(base) = inner.base.take() else {
            // Nothing was read through a database: nothing can change.
            return true;
        };
        let Some(shared) = base.shared.upgrade() else {
            self.signal.fire();
            return false;
        };
        let items = std::mem::take(&mut inner.items);
        let id = shared.register(&base, &items, &self.signal);
        inner.registered = Some(Registration {
            id,
            shared: Arc::downgrade(&shared),
            items,
        });
        true
    }

    /// Blocks until something watched changes or `deadline` passes.
    pub fn wait_deadline(&self, deadline: Instant) -> WaitOutcome {
        self.ensure_registered();
        loop {
            let Some(listener) = self.signal.listen() else {
                return WaitOutcome::Changed;
            };
            if listener.wait_deadline(deadline).is_none() && !self.signal.is_fired() {
                return WaitOutcome::TimedOut;
            }
        }
    }

    /// Blocks until something watched changes or `timeout` passes.
    pub fn wait_timeout(&self, timeout: Duration) -> WaitOutcome {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.wait_deadline(deadline),
            None => self.wait_forever(),
        }
    }

    /// Blocks until something watched changes.
    pub fn wait_forever(&self) -> WaitOutcome {
        self.ensure_registered();
        while let Some(listener) = self.signal.listen() {
            listener.wait();
        }
        WaitOutcome::Changed
    }

    /// Resolves when something watched changes. Runtime-agnostic; combine it with your
    /// runtime's timer for a deadline (or use the blocking-query helper).
    pub fn changed(&self) -> Changed<'_> {
        self.ensure_registered();
        Changed {
            set: self,
            listener: None,
        }
    }
}

/// The future returned by [`WatchSet::changed`].
pub struct Changed<'a> {
    set: &'a WatchSet,
    listener: Option<Pin<Box<EventListener>>>,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.set.signal.is_fired() {
                return Poll::Ready(());
            }
            match &mut self.listener {
                Some(l) => match l.as_mut().poll(cx) {
                    Poll::Ready(()) => self.listener = None,
                    Poll::Pending => return Poll::Pending,
                },
                None => match self.set.signal.listen() {
                    Some(l) => self.listener = Some(Box::pin(l)),
                    None => return Poll::Ready(()),
                },
            }
        }
    }
}

impl Drop for WatchSet {
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        if let Some(reg) = inner.registered.take()
            && let Some(shared) = reg.shared.upgrade()
        {
            shared.unregister(reg.id, &reg.items);
        }
    }
}
