//! Group commit: concurrent writers let the store number their writes
//! (`DurableStore::apply_next`) and share fsyncs; every acknowledged write is durable
//! and visible to its writer when `apply_next` returns, and under `EveryCommit` no
//! reader ever sees a write before it is durable.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use schedstate::model::Node;
use schedstate::persist::faults::{Faults, Op};
use schedstate::persist::{DurableStore, SyncPolicy};
use schedstate::state::Command;

use crate::support::TempDir;
use crate::support::persist::options;

const WRITERS: usize = 16;
const PER_WRITER: usize = 40;

#[test]
fn concurrent_writers_share_fsyncs_and_every_acknowledged_write_is_durable() {
    for sync in [SyncPolicy::EveryCommit, SyncPolicy::Group] {
        let dir = TempDir::absent("group-commit");
        let faults = Faults::scope(dir.path()); // counts the fsyncs, injects nothing
        let (db, _) = DurableStore::open(dir.path(), options(sync, u64::MAX)).expect("open");
        let syncs_at_open = faults.counts().get(&Op::Sync).copied().unwrap_or(0);
        let stop = Arc::new(AtomicBool::new(false));
        // A reader: the index it sees never goes back.
        let reader = {
            let db = db.clone();
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let mut last = 0;
                while !stop.load(Ordering::Acquire) {
                    let now = db.snapshot().view().last_applied();
                    assert!(now >= last, "readers went back from {last} to {now}");
                    last = now;
                }
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let db = db.clone();
                thread::spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0..PER_WRITER {
                        let id = format!("w{t}-{i}");
                        let node = Node::new(id.as_str(), "client");
                        let commit = db
                            .apply_next(Command::UpsertNode { node })
                            .expect("apply_next");
                        // Visible to its writer as soon as it is acknowledged.
                        assert!(db.snapshot().view().node(&id).is_some(), "{id}");
                        acked.push((commit.index(), id));
                    }
                    acked
                })
            })
            .collect();
        let acked: Vec<(u64, String)> = writers
            .into_iter()
            .flat_map(|w| w.join().expect("writer"))
            .collect();
        stop.store(true, Ordering::Release);
        reader.join().expect("reader");
        let commits = (WRITERS * PER_WRITER) as u64;
        // The store numbered them 1..=n, each once.
        let indexes: BTreeSet<u64> = acked.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, (1..=commits).collect(), "{sync:?}");
        let syncs = faults.counts().get(&Op::Sync).copied().unwrap_or(0) - syncs_at_open;
        assert!(
            syncs < commits / 2,
            "{sync:?}: {syncs} fsyncs for {commits} commits: not shared"
        );
        drop(db);
        drop(faults);
        let (db, report) = DurableStore::open(dir.path(), options(sync, u64::MAX)).expect("reopen");
        assert_eq!(report.last_applied, commits);
        let v = db.snapshot();
        for (_, id) in &acked {
            assert!(v.view().node(id).is_some(), "{sync:?}: {id} lost");
        }
    }
}
