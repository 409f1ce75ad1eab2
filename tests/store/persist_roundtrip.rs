//! Round trips of the durable store: the state after N generated commands equals the
//! state after reopening (with and without compaction, foreground and background, with
//! every sync policy, with concurrent group commits); a snapshot plus the replay of
//! the rest equals the replay of everything; `restore_from(snapshot_to(s))` equals `s`
//! byte for byte and wakes every watch.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::support::persist::{
    Gen, apply_durable, fast, file_name, options, replay, replay_bytes, run_durable, run_mem,
    segments, snapshot_bytes, snapshots,
};
use crate::support::{TempDir, assert_invariants, canonical, last_applied};
use schedstate::model::{Id, Node};
use schedstate::persist::{DurableStore, PersistError, SyncPolicy};
use schedstate::state::{Command, StateError, StateStore};
use schedstate::{WaitOutcome, WatchSet};

/// Opens `dir` again and checks its state against `expected` and against a fresh
/// replay of `accepted`; returns the reopened store.
#[track_caller]
fn reopen_and_check(
    dir: &std::path::Path,
    expected: &[u8],
    accepted: &[(u64, Command)],
) -> (DurableStore, schedstate::persist::OpenReport) {
    let (db, report) = DurableStore::open(dir, fast()).expect("reopen");
    assert_eq!(canonical(db.store()), expected, "reopened state differs");
    assert_eq!(
        replay_bytes(accepted),
        expected,
        "durable state differs from a plain replay"
    );
    assert_eq!(report.torn_tail, None);
    assert_eq!(
        report.last_applied,
        accepted.last().map_or(0, |(i, _)| *i),
        "last applied"
    );
    assert_invariants(db.store());
    (db, report)
}

#[test]
fn generator_is_deterministic_and_mostly_valid() {
    let a: Vec<_> = {
        let mut g = Gen::new(7);
        (0..200).map(|_| g.next()).collect()
    };
    let b: Vec<_> = {
        let mut g = Gen::new(7);
        (0..200).map(|_| g.next()).collect()
    };
    assert_eq!(a, b, "same seed, same stream");
    let c: Vec<_> = {
        let mut g = Gen::new(8);
        (0..200).map(|_| g.next()).collect()
    };
    assert_ne!(a, c, "another seed, another stream");

    let store = StateStore::new();
    let mut g = Gen::new(7);
    let mut by_kind: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for _ in 0..1500 {
        let (index, cmd) = g.next();
        let ok = crate::support::persist::apply_mem(&store, index, &cmd);
        let e = by_kind.entry(cmd.kind()).or_default();
        e.0 += 1;
        e.1 += usize::from(ok);
    }
    let total: usize = by_kind.values().map(|v| v.0).sum();
    let accepted: usize = by_kind.values().map(|v| v.1).sum();
    assert!(
        accepted * 100 >= total * 55,
        "mostly valid: {accepted}/{total} accepted ({by_kind:?})"
    );
    assert!(accepted < total, "some commands are refused");
    for (kind, (seen, ok)) in &by_kind {
        assert!(*ok > 0, "{kind}: none of {seen} accepted ({by_kind:?})");
    }
    assert_eq!(by_kind.len(), 10, "every command kind: {by_kind:?}");
    let v = store.snapshot();
    let v = v.view();
    assert!(v.nodes().count() >= 5);
    assert!(v.allocs().count() >= 20);
    assert!(v.csi_plugins().count() >= 2);
    assert!(v.csi_volumes().count() >= 3);
    assert!(
        v.csi_volumes()
            .any(|vol| !vol.read_claims.is_empty() || !vol.write_claims.is_empty()),
        "some volume is claimed"
    );
    assert_invariants(&store);
}

#[test]
fn reopen_equals_state_without_sync() {
    let dir = TempDir::new("rt-never");
    let mut g = Gen::new(1);
    let (db, report) = DurableStore::open(dir.path(), fast()).unwrap();
    assert_eq!(report.last_applied, 0);
    let accepted = run_durable(&db, &mut g, 400);
    assert!(accepted.len() > 200);
    let expected = canonical(db.store());
    drop(db);
    let (db, report) = reopen_and_check(dir.path(), &expected, &accepted);
    assert_eq!(report.snapshot_index, None);
    assert_eq!(report.replayed, accepted.len() as u64);

    // Appending to the reopened segment and reopening again.
    let more = run_durable(&db, &mut g, 100);
    let expected = canonical(db.store());
    drop(db);
    let all: Vec<_> = accepted.into_iter().chain(more).collect();
    let (_db, report) = reopen_and_check(dir.path(), &expected, &all);
    assert_eq!(report.segments.len(), 1);
    assert_eq!(report.replayed, all.len() as u64);
}

#[test]
fn reopen_equals_state_with_fsync_per_commit() {
    let dir = TempDir::new("rt-every");
    let mut g = Gen::new(2);
    let (db, _) =
        DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, 1 << 30)).expect("open");
    let accepted = run_durable(&db, &mut g, 80);
    let expected = canonical(db.store());
    drop(db);
    reopen_and_check(dir.path(), &expected, &accepted);
}

#[test]
fn reopen_after_explicit_compaction() {
    let dir = TempDir::new("rt-compact");
    let mut g = Gen::new(3);
    let (db, _) = DurableStore::open(dir.path(), fast()).unwrap();
    let mut accepted = run_durable(&db, &mut g, 200);
    let at = last_applied(db.store());
    db.compact().expect("compact");
    assert_eq!(
        snapshots(dir.path())
            .iter()
            .map(|p| file_name(p))
            .collect::<Vec<_>>(),
        vec![format!("snapshot-{at:020}.snap")]
    );
    assert_eq!(
        segments(dir.path()).len(),
        1,
        "covered segments are deleted"
    );
    let after = run_durable(&db, &mut g, 200);
    let replayed = after.len() as u64;
    accepted.extend(after);
    let expected = canonical(db.store());
    drop(db);
    let (db, report) = reopen_and_check(dir.path(), &expected, &accepted);
    assert_eq!(report.snapshot_index, Some(at));
    assert_eq!(report.replayed, replayed);

    // Compacting with nothing logged since, twice, and reopening.
    db.compact().unwrap();
    db.compact().unwrap();
    drop(db);
    let (_db, report) = reopen_and_check(dir.path(), &expected, &accepted);
    assert_eq!(report.replayed, 0);
    assert_eq!(report.snapshot_index, Some(report.last_applied));
    assert_eq!(snapshots(dir.path()).len(), 1);
}

#[test]
fn reopen_after_background_compactions() {
    let dir = TempDir::new("rt-background");
    let mut g = Gen::new(4);
    let (db, _) = DurableStore::open(dir.path(), options(SyncPolicy::Never, 4096)).unwrap();
    let mut accepted = Vec::new();
    let mut snapshot_names = std::collections::BTreeSet::new();
    for _ in 0..10 {
        accepted.extend(run_durable(&db, &mut g, 50));
        db.wait_for_compaction().expect("background compaction");
        snapshot_names.extend(snapshots(dir.path()).iter().map(|p| file_name(p)));
    }
    assert!(
        snapshot_names.len() >= 3,
        "background compaction ran several times: {snapshot_names:?}"
    );
    let expected = canonical(db.store());
    drop(db);
    assert_eq!(
        snapshots(dir.path()).len(),
        1,
        "older snapshots are deleted"
    );
    let (_db, report) = reopen_and_check(dir.path(), &expected, &accepted);
    let seq = file_name(report.segments.last().expect("a segment"));
    assert!(
        seq.as_str() >= "wal-00000000000000000004.log",
        "segments rotated several times: {seq}"
    );
    assert!(report.snapshot_index.is_some());
    assert!(report.segments.len() <= 2, "{:?}", report.segments);
}

#[test]
fn several_open_cycles_equal_one_replay() {
    let dir = TempDir::new("rt-cycles");
    let mut g = Gen::new(5);
    let mut accepted = Vec::new();
    for round in 0..6 {
        let (db, report) = DurableStore::open(dir.path(), options(SyncPolicy::Never, 6000))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(
            canonical(db.store()),
            replay_bytes(&accepted),
            "round {round}"
        );
        assert_eq!(report.last_applied, accepted.last().map_or(0, |(i, _)| *i));
        accepted.extend(run_durable(&db, &mut g, 60));
        if round % 2 == 1 {
            db.compact().unwrap();
        }
    }
    let expected = replay_bytes(&accepted);
    reopen_and_check(dir.path(), &expected, &accepted);
}

#[test]
fn snapshot_plus_replay_equals_replay_alone() {
    for seed in [10, 11, 12] {
        let full = StateStore::new();
        let mut g = Gen::new(seed);
        let first = run_mem(&full, &mut g, 150);
        let snap = snapshot_bytes(&full);
        let rest_gen = g.clone();
        let rest = run_mem(&full, &mut g, 150);

        let partial = StateStore::new();
        let header = partial.restore_from(&mut snap.as_slice()).expect("restore");
        assert_eq!(header.last_applied, first.last().unwrap().0);
        // The rest of the stream, refused commands included, is accepted or refused
        // exactly as on the original.
        let again = run_mem(&partial, &mut rest_gen.clone(), 150);
        assert_eq!(again, rest, "seed {seed}: same commands accepted");
        assert_eq!(canonical(&partial), canonical(&full), "seed {seed}");
        assert_eq!(canonical(&full), replay_bytes(&[first, rest].concat()));
        assert_invariants(&partial);
    }
}

#[test]
fn restore_of_a_snapshot_is_byte_for_byte() {
    for (seed, n) in [(20, 0), (21, 1), (22, 30), (23, 400)] {
        let s = StateStore::new();
        run_mem(&s, &mut Gen::new(seed), n);
        let bytes = snapshot_bytes(&s);
        let r = StateStore::new();
        r.restore_from(&mut bytes.as_slice()).expect("restore");
        assert_eq!(canonical(&r), canonical(&s), "seed {seed}: canonical bytes");
        assert_eq!(snapshot_bytes(&r), bytes, "seed {seed}: snapshot bytes");
        let (a, b) = (s.snapshot(), r.snapshot());
        assert_eq!(a.view().latest_index(), b.view().latest_index());
        assert_eq!(a.view().last_applied(), b.view().last_applied());
        assert_invariants(&r);
        // The restored state also answers derived reads the same way.
        for p in a.view().csi_plugins() {
            let q = b.view().csi_plugin(&p.id).expect("plugin restored");
            assert_eq!(
                a.view().denormalize_csi_plugin(&p),
                b.view().denormalize_csi_plugin(&q)
            );
        }
        // Restoring over a store that already holds another state replaces it.
        let other = StateStore::new();
        run_mem(&other, &mut Gen::new(seed + 100), 100);
        other.restore_from(&mut bytes.as_slice()).expect("restore");
        assert_eq!(canonical(&other), canonical(&s));
        assert_eq!(snapshot_bytes(&other), bytes);
        // And the snapshot written by a version equals snapshot_to of the store.
        let mut written = Vec::new();
        s.snapshot().write_to(&mut written).unwrap();
        assert_eq!(written, bytes);
    }
}

#[test]
fn a_failed_restore_leaves_the_store_unchanged() {
    let s = StateStore::new();
    run_mem(&s, &mut Gen::new(30), 200);
    let bytes = snapshot_bytes(&s);
    let target = StateStore::new();
    run_mem(&target, &mut Gen::new(31), 100);
    let before = canonical(&target);
    for cut in [0, 7, 20, bytes.len() / 2, bytes.len() - 1] {
        let err = target
            .restore_from(&mut &bytes[..cut])
            .expect_err("a truncated snapshot is refused");
        assert!(!matches!(err, PersistError::Io { .. }), "{err}");
        assert_eq!(canonical(&target), before, "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        target.restore_from(&mut longer.as_slice()),
        Err(PersistError::Corrupt { .. })
    ));
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    assert!(target.restore_from(&mut flipped.as_slice()).is_err());
    assert_eq!(canonical(&target), before);
    // The store still takes writes after the failed restores.
    let next = last_applied(&target) + 1;
    target
        .upsert_node(next, Node::new("after", "after"))
        .expect("writes still work");
}

#[test]
fn restore_fires_every_watch() {
    let s = StateStore::new();
    run_mem(&s, &mut Gen::new(40), 200);
    let node = s.snapshot().view().nodes().next().expect("a node");
    let same = snapshot_bytes(&s);
    let empty = snapshot_bytes(&StateStore::new());

    for (name, bytes) in [("identical state", &same), ("another state", &empty)] {
        let watches: Vec<WatchSet> = (0..3).map(|_| WatchSet::new()).collect();
        let snap = s.snapshot();
        // A present key, an absent key, and a whole-table scan.
        let _ = snap.watched(&watches[0]).node(&node.id);
        let _ = snap.watched(&watches[1]).node("no-such-node");
        let _ = snap.watched(&watches[2]).csi_volumes().count();
        for ws in &watches {
            assert_eq!(ws.wait_timeout(Duration::ZERO), WaitOutcome::TimedOut);
        }
        let restorer = {
            let s = s.clone();
            let bytes = bytes.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(20));
                s.restore_from(&mut bytes.as_slice()).expect("restore");
            })
        };
        assert_eq!(
            watches[1].wait_timeout(Duration::from_secs(10)),
            WaitOutcome::Changed,
            "{name}: a blocked waiter is woken"
        );
        restorer.join().unwrap();
        for (i, ws) in watches.iter().enumerate() {
            assert!(ws.is_fired(), "{name}: watch {i} fired by restore");
        }
        // Put the original state back for the next case.
        s.restore_from(&mut same.as_slice()).unwrap();
    }
}

#[test]
fn concurrent_group_commits_reopen_equal() {
    let dir = TempDir::new("rt-group");
    let (db, _) =
        DurableStore::open(dir.path(), options(SyncPolicy::Group, 1 << 30)).expect("open");
    let next_index = Arc::new(AtomicU64::new(1));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let db = db.clone();
            let next_index = Arc::clone(&next_index);
            let accepted = Arc::clone(&accepted);
            thread::spawn(move || {
                let mut g = Gen::new(50 + t);
                for _ in 0..150 {
                    let cmd = g.command();
                    loop {
                        let index = next_index.fetch_add(1, Ordering::SeqCst);
                        match db.apply(index, &cmd) {
                            Ok(_) => {
                                accepted.lock().unwrap().push((index, cmd));
                                break;
                            }
                            // Another thread took a later index first: take a new one.
                            Err(PersistError::State(StateError::StaleIndex { .. })) => continue,
                            Err(PersistError::State(_)) => break,
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut accepted = Arc::try_unwrap(accepted).unwrap().into_inner().unwrap();
    accepted.sort_by_key(|(i, _)| *i);
    assert!(accepted.len() > 300, "{} accepted", accepted.len());
    let expected = canonical(db.store());
    assert_eq!(
        canonical(&replay(&accepted)),
        expected,
        "the durable order is the index order"
    );
    drop(db);
    reopen_and_check(dir.path(), &expected, &accepted);
}

#[test]
fn concurrent_writers_with_background_compaction_reopen_equal() {
    let dir = TempDir::new("rt-group-compact");
    let (db, _) = DurableStore::open(dir.path(), options(SyncPolicy::Group, 3000)).expect("open");
    let lock = Arc::new(Mutex::new((1u64, Vec::new())));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let db = db.clone();
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let mut g = Gen::new(60 + t);
                for _ in 0..100 {
                    let cmd = g.command();
                    // Index taken and applied under one lock: increasing in apply order.
                    let mut guard = lock.lock().unwrap();
                    let index = guard.0;
                    guard.0 += 1;
                    if apply_durable(&db, index, &cmd) {
                        guard.1.push((index, cmd));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    db.wait_for_compaction().expect("compaction");
    let accepted = std::mem::take(&mut lock.lock().unwrap().1);
    let expected = canonical(db.store());
    drop(db);
    let (_db, report) = reopen_and_check(dir.path(), &expected, &accepted);
    assert!(report.snapshot_index.is_some(), "compaction ran");
}

#[test]
fn owned_applies_log_the_same_records_as_borrowed_ones() {
    // The same generated commands, applied by reference to one directory and by value
    // to another: same state, same log bytes, and both reopen to it. Refused commands
    // are logged by neither.
    let (borrowed_dir, owned_dir) = (TempDir::new("rt-borrowed"), TempDir::new("rt-owned"));
    let (borrowed, _) = DurableStore::open(borrowed_dir.path(), fast()).expect("open");
    let (owned, _) = DurableStore::open(owned_dir.path(), fast()).expect("open");
    let mut g = Gen::new(7);
    let mut accepted = Vec::new();
    for _ in 0..300 {
        let (index, cmd) = g.next();
        let by_ref = apply_durable(&borrowed, index, &cmd);
        let by_value = match owned.apply_owned(index, cmd.clone()) {
            Ok(_) => true,
            Err(PersistError::State(_)) => false,
            Err(e) => panic!("{} at {index} failed: {e}", cmd.kind()),
        };
        assert_eq!(by_ref, by_value, "{} at {index}", cmd.kind());
        if by_ref {
            accepted.push((index, cmd));
        }
    }
    assert!(accepted.len() > 150);
    let expected = canonical(borrowed.store());
    assert_eq!(canonical(owned.store()), expected);
    drop((borrowed, owned));
    let log = |dir: &TempDir| {
        segments(dir.path())
            .iter()
            .map(|p| std::fs::read(p).expect("read segment"))
            .collect::<Vec<_>>()
    };
    assert_eq!(log(&borrowed_dir), log(&owned_dir), "log bytes differ");
    reopen_and_check(owned_dir.path(), &expected, &accepted);
}

/// A restored state shares its rows' repeated ids as an applied one does
/// (`shared_ids.rs`): every allocation's namespace, job and task group one copy, its
/// node id the node row's.
#[test]
fn a_restored_state_shares_repeated_ids() {
    use crate::support::{node, running, up, up_allocs};

    let store = StateStore::new();
    up(&store, 1, node("n1"));
    up_allocs(&store, 2, vec![running("x1", "n1"), running("x2", "n1")]);
    let mut bytes = Vec::new();
    store.snapshot_to(&mut bytes).expect("snapshot");
    let restored = StateStore::new();
    restored
        .restore_from(&mut bytes.as_slice())
        .expect("restore");
    let snap = restored.snapshot();
    let view = snap.view();
    let (x1, x2) = (view.alloc("x1").unwrap(), view.alloc("x2").unwrap());
    assert!(Id::ptr_eq(&x1.namespace, &x2.namespace));
    assert!(Id::ptr_eq(&x1.job_id, &x2.job_id));
    assert!(Id::ptr_eq(&x1.task_group, &x2.task_group));
    assert!(Id::ptr_eq(&x1.node_id, &view.node("n1").unwrap().id));
    assert!(Id::ptr_eq(&x2.node_id, &x1.node_id));
    assert_eq!(canonical(&restored), canonical(&store));
}
