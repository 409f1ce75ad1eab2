//! `repair_data_dir` (and `schedstate repair`): a directory damaged in the middle of its
//! log, or in its snapshot, is cut back to what it can prove, the damaged files are
//! moved to `damaged-N`, and the report says exactly what was dropped.

use std::fs;

use schedstate::persist::{DurableStore, PersistError, SyncPolicy, repair_data_dir};
use schedstate::state::Command;

use crate::support::TempDir;
use crate::support::persist::{
    Gen, files, options, record_spans, replay_bytes, segments, snapshots, trim_zero_tails,
};

/// A data directory and the commands it accepted, in order.
struct Built {
    dir: TempDir,
    accepted: Vec<(u64, Command)>,
}

/// `n` accepted commands in one segment, no snapshot.
fn built(tag: &str, n: usize) -> Built {
    let dir = TempDir::absent(tag);
    let (db, _) =
        DurableStore::open(dir.path(), options(SyncPolicy::Never, u64::MAX)).expect("open");
    let mut g = Gen::new(21);
    let mut accepted = Vec::new();
    while accepted.len() < n {
        let (index, cmd) = g.next();
        if db.apply(index, &cmd).is_ok() {
            accepted.push((index, cmd));
        }
    }
    drop(db);
    trim_zero_tails(dir.path());
    Built { dir, accepted }
}

fn state(dir: &std::path::Path) -> (Vec<u8>, u64) {
    let (store, report) = DurableStore::open_read_only(dir).expect("opens");
    (
        store.snapshot().canonical_bytes().expect("encode"),
        report.last_applied,
    )
}

#[test]
fn a_healthy_directory_is_left_alone() {
    let b = built("repair-healthy", 10);
    let before = files(b.dir.path());
    let report = repair_data_dir(b.dir.path()).expect("repair");
    assert!(report.healthy && report.dropped.is_empty() && report.damaged_dir.is_none());
    assert_eq!(report.last_applied, b.accepted.last().expect("some").0);
    assert_eq!(files(b.dir.path()), before, "nothing changed");
}

#[test]
fn damage_in_the_middle_of_the_log_keeps_every_record_before_it() {
    let b = built("repair-middle", 30);
    let segment = segments(b.dir.path()).pop().expect("a segment");
    let original = fs::read(&segment).expect("read");
    let spans = record_spans(&original);
    assert_eq!(spans.len(), 30);
    // Damage record 12 (0-based 11): records 12.. are lost, 1..=11 kept.
    let mut damaged = original.clone();
    damaged[spans[11].start + 10] ^= 0x5a;
    fs::write(&segment, &damaged).expect("write");
    let err = DurableStore::open_read_only(b.dir.path()).expect_err("damaged");
    assert!(matches!(err, PersistError::Checksum { .. }), "{err}");

    let report = repair_data_dir(b.dir.path()).expect("repair");
    assert!(!report.healthy);
    let folder = report.damaged_dir.clone().expect("a damaged folder");
    assert!(folder.ends_with("damaged-1"));
    assert_eq!(report.dropped.len(), 1, "{report:?}");
    let d = &report.dropped[0];
    assert_eq!(d.path, segment);
    assert_eq!(d.kept_bytes, spans[11].start as u64);
    assert_eq!(d.dropped_bytes, (original.len() - spans[11].start) as u64);
    // The damaged record does not decode; the 18 after it do, and are reported lost.
    assert_eq!(d.lost_records, 18);
    assert_eq!(
        d.lost_indexes,
        Some((b.accepted[12].0, b.accepted[29].0)),
        "{d:?}"
    );
    assert!(d.reason.contains("checksum"), "{}", d.reason);
    // The damaged file is kept whole, as found.
    let name = segment.file_name().expect("name");
    assert_eq!(fs::read(folder.join(name)).expect("kept"), damaged);

    let (bytes, last) = state(b.dir.path());
    assert!(
        bytes == replay_bytes(&b.accepted[..11]),
        "not the records before the damage"
    );
    assert_eq!(last, b.accepted[10].0);
    assert_eq!(report.last_applied, last);
    // It takes writes again, and a second repair finds it healthy.
    let (db, _) =
        DurableStore::open(b.dir.path(), options(SyncPolicy::EveryCommit, u64::MAX)).expect("open");
    db.upsert_node(last + 1, schedstate::model::Node::new("after", "client"))
        .expect("write");
    drop(db);
    assert!(repair_data_dir(b.dir.path()).expect("repair").healthy);
}

#[test]
fn segments_after_the_damaged_one_are_moved_aside() {
    let b = built("repair-chain", 20);
    // Two more segments, rolled by compactions that keep their segments around:
    // copy the directory aside before each compaction prunes.
    let (db, _) =
        DurableStore::open(b.dir.path(), options(SyncPolicy::Never, u64::MAX)).expect("open");
    let mut g = Gen::new(99);
    let mut accepted = b.accepted.clone();
    let keep = TempDir::new("repair-chain-keep");
    let mut kept = Vec::new();
    for round in 0..2 {
        for seg in segments(b.dir.path()) {
            let to = keep.join(&crate::support::persist::file_name(&seg));
            fs::copy(&seg, &to).expect("copy");
            kept.push(to);
        }
        db.compact().expect("compact");
        let mut n = 0;
        while n < 10 {
            let (index, cmd) = g.next();
            let index = index + 10_000 * (round + 1);
            if db.apply(index, &cmd).is_ok() {
                accepted.push((index, cmd));
                n += 1;
            }
        }
    }
    drop(db);
    // Put the pruned segments back and drop the snapshots: a log from index 0.
    for path in &kept {
        fs::copy(path, b.dir.join(&crate::support::persist::file_name(path)))
            .expect("restore segment");
    }
    for snap in snapshots(b.dir.path()) {
        fs::remove_file(snap).expect("remove snapshot");
    }
    trim_zero_tails(b.dir.path());
    assert!(state(b.dir.path()).0 == replay_bytes(&accepted));
    let segs = segments(b.dir.path());
    assert_eq!(segs.len(), 3);
    // Damage the first record of the middle segment.
    let mut middle = fs::read(&segs[1]).expect("read");
    let first = record_spans(&middle)[0].clone();
    middle[first.start + 9] ^= 0xff;
    fs::write(&segs[1], &middle).expect("write");

    let report = repair_data_dir(b.dir.path()).expect("repair");
    let dropped: Vec<_> = report.dropped.iter().map(|d| d.path.clone()).collect();
    assert_eq!(dropped, [segs[1].clone(), segs[2].clone()], "{report:?}");
    assert_eq!(report.dropped[1].reason, "follows the damaged segment");
    assert_eq!(report.dropped[1].lost_records, 10);
    assert!(state(b.dir.path()).0 == replay_bytes(&accepted[..20]));
}

#[test]
fn a_damaged_snapshot_falls_back_to_the_previous_one() {
    let b = built("repair-snapshot", 15);
    let (db, _) =
        DurableStore::open(b.dir.path(), options(SyncPolicy::Never, u64::MAX)).expect("open");
    db.compact().expect("first compaction");
    let mut g = Gen::new(5);
    let mut accepted = b.accepted.clone();
    while accepted.len() < 25 {
        let (index, cmd) = g.next();
        let index = index + 10_000;
        if db.apply(index, &cmd).is_ok() {
            accepted.push((index, cmd));
        }
    }
    // Keep the first snapshot and the segment after it as they are now; the second
    // compaction prunes them.
    db.wait_for_compaction().expect("first compaction done");
    let keep = TempDir::new("repair-snapshot-keep");
    let mut kept = Vec::new();
    for f in snapshots(b.dir.path())
        .into_iter()
        .chain(segments(b.dir.path()))
    {
        let to = keep.join(&crate::support::persist::file_name(&f));
        fs::copy(&f, &to).expect("copy");
        kept.push(to);
    }
    db.compact().expect("second compaction");
    drop(db);
    for path in &kept {
        fs::copy(path, b.dir.join(&crate::support::persist::file_name(path))).expect("put back");
    }
    let snaps = snapshots(b.dir.path());
    assert_eq!(snaps.len(), 2);
    let newest = snaps.last().expect("newest").clone();
    let mut bytes = fs::read(&newest).expect("read");
    let at = bytes.len() - 10;
    bytes[at] ^= 1;
    fs::write(&newest, &bytes).expect("write");
    DurableStore::open_read_only(b.dir.path()).expect_err("damaged snapshot");

    let report = repair_data_dir(b.dir.path()).expect("repair");
    assert_eq!(report.dropped[0].path, newest, "{report:?}");
    assert_eq!(report.dropped[0].kept_bytes, 0);
    // The older snapshot and the log after it hold every write: nothing is lost.
    assert!(
        state(b.dir.path()).0 == replay_bytes(&accepted),
        "writes lost"
    );
}

#[test]
fn a_directory_held_by_a_writer_is_not_repaired() {
    let b = built("repair-locked", 3);
    let (_db, _) =
        DurableStore::open(b.dir.path(), options(SyncPolicy::Never, u64::MAX)).expect("open");
    let err = repair_data_dir(b.dir.path()).expect_err("locked");
    assert!(matches!(err, PersistError::Locked { .. }), "{err}");
}
