//! Staged commits: a transaction can be committed without being published, so that a
//! durable store can make a batch of writes durable with one fsync and only then let
//! readers see them.
//!
//! [`WriteTxn::stage`](crate::WriteTxn::stage) computes the new version exactly as
//! `commit` does, queues it here and releases the writer lock; the next transaction
//! builds on the newest staged version (the *tip*), so writers never wait for the disk.
//! [`Db::publish_through`](crate::Db::publish_through) publishes the staged versions up
//! to one of them — readers jump to it — and fires the watches of each, in order.
//! [`Db::discard_staged`](crate::Db::discard_staged) drops them (their writes will
//! never be seen). Readers only ever see published versions.

use std::collections::VecDeque;
use std::sync::Arc;

use super::root::Root;
use super::txn::Fire;

/// The staged versions of a database, oldest first.
#[derive(Default)]
pub(crate) struct Staged {
    queue: VecDeque<(Arc<Root>, Fire)>,
}

impl Staged {
    /// The newest staged version, which the next transaction builds on.
    pub(crate) fn tip(&self) -> Option<&Arc<Root>> {
        self.queue.back().map(|(root, _)| root)
    }

    pub(crate) fn push(&mut self, root: Arc<Root>, fire: Fire) {
        self.queue.push_back((root, fire));
    }

    /// Takes every staged version up to the one with sequence number `seq`.
    pub(crate) fn take_through(&mut self, seq: u64) -> Vec<(Arc<Root>, Fire)> {
        let n = self
            .queue
            .iter()
            .take_while(|(root, _)| root.seq <= seq)
            .count();
        self.queue.drain(..n).collect()
    }

    /// Takes every staged version.
    pub(crate) fn take_all(&mut self) -> Vec<(Arc<Root>, Fire)> {
        self.queue.drain(..).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::{Db, Key, Schema, Table, WaitOutcome, WatchSet};

    fn db() -> (Db, Table<(String, u64)>) {
        let mut schema = Schema::new();
        let kv = schema
            .table("kv", |r: &(String, u64)| Key::str(&r.0))
            .expect("table");
        (Db::new(schema), kv)
    }

    fn put(db: &Db, kv: Table<(String, u64)>, key: &str, n: u64) -> u64 {
        let mut txn = db.begin_next_write();
        txn.insert(kv, Arc::new((key.to_string(), n)))
            .expect("insert");
        txn.stage().expect("stage").0
    }

    #[test]
    fn staged_writes_are_invisible_until_published_and_the_next_write_builds_on_them() {
        let (db, kv) = db();
        let a = put(&db, kv, "a", 1);
        let b = put(&db, kv, "b", 2);
        assert_eq!(db.staged_len(), 2);
        assert_eq!(db.staged_tip(), Some(b));
        // Readers see nothing yet; the next write sees both (its index follows them).
        assert!(db.snapshot().view().get(kv, &Key::str("a")).is_none());
        assert_eq!(db.last_applied(), 0);
        let txn = db.begin_next_write();
        assert_eq!(txn.index(), 3);
        assert!(txn.view().get(kv, &Key::str("b")).is_some());
        drop(txn);

        // Publishing through `a` shows `a` only, at index 1.
        assert_eq!(db.publish_through(a), 1);
        let v = db.snapshot();
        assert!(v.view().get(kv, &Key::str("a")).is_some());
        assert!(v.view().get(kv, &Key::str("b")).is_none());
        assert_eq!(db.publish_through(b), 2);
        assert_eq!(db.staged_len(), 0);
        // Publishing again is a no-op.
        assert_eq!(db.publish_through(b), 2);
    }

    #[test]
    fn a_watch_fires_when_the_staged_write_is_published_not_before() {
        let (db, kv) = db();
        let snap = db.snapshot();
        let ws = WatchSet::new();
        assert!(snap.watched(&ws).get(kv, &Key::str("a")).is_none());
        assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::TimedOut); // registers
        let a = put(&db, kv, "a", 1);
        assert_eq!(
            ws.wait_timeout(Duration::ZERO),
            WaitOutcome::TimedOut,
            "staged"
        );
        db.publish_through(a);
        assert_eq!(
            ws.wait_timeout(Duration::ZERO),
            WaitOutcome::Changed,
            "published"
        );
    }

    #[test]
    fn discarded_writes_are_never_seen_and_a_commit_publishes_what_is_staged_under_it() {
        let (db, kv) = db();
        put(&db, kv, "a", 1);
        db.discard_staged();
        assert_eq!(db.staged_len(), 0);
        let txn = db.begin_next_write();
        assert_eq!(txn.index(), 1, "the discarded write's index is free again");
        assert!(txn.view().get(kv, &Key::str("a")).is_none());
        drop(txn);

        put(&db, kv, "b", 2);
        let mut txn = db.begin_write(5).expect("begin");
        txn.insert(kv, Arc::new(("c".to_string(), 3)))
            .expect("insert");
        txn.commit().expect("commit");
        let v = db.snapshot();
        assert!(
            v.view().get(kv, &Key::str("b")).is_some(),
            "published under the commit"
        );
        assert!(v.view().get(kv, &Key::str("c")).is_some());
        assert_eq!(db.staged_len(), 0);
    }
}
