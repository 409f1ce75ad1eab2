//! The zeros a log segment is extended with ahead of its records (`segment.rs`,
//! `PREALLOCATE`): a live segment is longer than its records, a crash leaves the zeros
//! behind, and they read as the log's clean end, never as a torn tail; a record torn
//! before them still is one.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::persist::{
    Gen, copy_dir, fast, records_end, replay_bytes, run_durable, segments, whole_records,
};
use crate::support::{TempDir, canonical};
use schedstate::persist::segment::PREALLOCATE;
use schedstate::persist::{DurableStore, TornTail};
use schedstate::state::Command;

type Records = Vec<(u64, Command)>;

/// A store with `n` accepted commands, still open, and the directory as a crash at
/// that moment would leave it (a copy of its files).
struct Crashed {
    _live: DurableStore,
    _live_dir: TempDir,
    dir: TempDir,
    writes: Gen,
    accepted: Records,
}

impl Crashed {
    fn new(tag: &str, seed: u64, n: usize) -> Crashed {
        let live_dir = TempDir::new(tag);
        let mut writes = Gen::new(seed);
        let (live, _) = DurableStore::open(live_dir.path(), fast()).expect("open");
        let accepted = run_durable(&live, &mut writes, n);
        let dir = TempDir::new(&format!("{tag}-crashed"));
        copy_dir(live_dir.path(), dir.path());
        Crashed {
            _live: live,
            _live_dir: live_dir,
            dir,
            writes,
            accepted,
        }
    }

    fn segment(&self) -> PathBuf {
        let mut all = segments(self.dir.path());
        assert_eq!(all.len(), 1, "one segment");
        all.pop().expect("a segment")
    }

    /// Applies `damage` to the bytes of the crashed copy's segment (it is given where
    /// their records end) and writes them back.
    fn damage(&self, damage: impl FnOnce(&mut [u8], usize)) -> Damaged {
        let segment = self.segment();
        let mut bytes = fs::read(&segment).unwrap();
        let end = records_end(&bytes);
        damage(&mut bytes, end);
        fs::write(&segment, &bytes).unwrap();
        Damaged {
            segment,
            bytes,
            end,
        }
    }
}

/// A segment as [`Crashed::damage`] wrote it back.
struct Damaged {
    segment: PathBuf,
    bytes: Vec<u8>,
    /// Where its records end (before the damage).
    end: usize,
}

impl Damaged {
    /// What a reader must report: everything after the records is a torn tail.
    fn torn_tail(&self) -> Option<TornTail> {
        Some(TornTail {
            path: self.segment.clone(),
            offset: self.end as u64,
            bytes: (self.bytes.len() - self.end) as u64,
        })
    }
}

fn open_ro(dir: &Path) -> (Vec<u8>, Option<TornTail>) {
    let (store, report) = DurableStore::open_read_only(dir).expect("read-only open");
    (canonical(&store), report.torn_tail)
}

#[test]
fn a_live_segment_ends_in_zeros_that_reopen_as_its_clean_end() {
    let mut c = Crashed::new("prealloc-clean", 0xA110C, 30);
    let segment = c.segment();
    let bytes = fs::read(&segment).unwrap();
    let end = records_end(&bytes);
    assert_eq!(whole_records(&bytes).len(), c.accepted.len());
    assert!(bytes.len() > end, "preallocated past the records");
    assert_eq!(bytes.len() as u64 % PREALLOCATE, 0, "whole extents");
    assert!(
        bytes[end..].iter().all(|&b| b == 0),
        "zeros after the records"
    );

    let (state, torn) = open_ro(c.dir.path());
    assert_eq!(torn, None, "zeros are not a torn tail");
    assert!(state == replay_bytes(&c.accepted), "every record read");

    // Reopened for writing, the store appends over the zeros, right after the last
    // record, and keeps the file's length while the extent lasts.
    let (db, report) = DurableStore::open(c.dir.path(), fast()).expect("reopen");
    assert_eq!(report.torn_tail, None);
    let more = run_durable(&db, &mut c.writes, 5);
    let during = fs::read(&segment).unwrap();
    let records = whole_records(&during);
    assert_eq!(records.len(), c.accepted.len() + more.len());
    assert_eq!(records[c.accepted.len()].start, end, "no gap");
    assert_eq!(during.len(), bytes.len(), "written into the extent");
    drop(db);

    // Closed, the zeros stay for the next open to append over.
    let after = fs::read(&segment).unwrap();
    assert_eq!(after.len(), bytes.len());
    assert!(after[records_end(&after)..].iter().all(|&b| b == 0));
    let mut all = c.accepted.clone();
    all.extend(more);
    let (state, torn) = open_ro(c.dir.path());
    assert_eq!(torn, None);
    assert!(state == replay_bytes(&all));
}

#[test]
fn a_record_torn_before_the_zeros_is_a_torn_tail() {
    let c = Crashed::new("prealloc-torn", 0x70A2, 20);
    // A crash mid-append: the next record's header and half its payload reached the
    // disk, the rest of it is still zeros.
    let damaged = c.damage(|bytes, end| {
        let first = whole_records(bytes)[0].clone();
        let half = 8 + (first.len() - 8) / 2;
        bytes.copy_within(first.start..first.start + half, end);
    });
    let expected = damaged.torn_tail();
    let Damaged {
        segment,
        bytes,
        end,
    } = damaged;
    let (state, torn) = open_ro(c.dir.path());
    assert_eq!(torn, expected);
    assert!(state == replay_bytes(&c.accepted), "nothing before it lost");
    assert_eq!(
        fs::read(&segment).unwrap(),
        bytes,
        "read-only changes nothing"
    );

    let (db, report) = DurableStore::open(c.dir.path(), fast()).expect("reopen");
    assert_eq!(report.torn_tail, expected);
    assert!(canonical(db.store()) == replay_bytes(&c.accepted));
    drop(db);
    let after = fs::read(&segment).unwrap();
    assert_eq!(&after[..], &bytes[..end], "cut at the last whole record");
}

#[test]
fn an_append_whose_start_was_lost_is_a_torn_tail() {
    let c = Crashed::new("prealloc-lost-start", 0x1057, 20);
    // The disk kept a later page of an append and not its first: zeros where the
    // record starts, other bytes after them.
    let damaged = c.damage(|bytes, end| {
        let junk_at = end + 5000;
        bytes[junk_at..junk_at + 16].copy_from_slice(&[0xAB; 16]);
    });
    let (state, torn) = open_ro(c.dir.path());
    assert_eq!(torn, damaged.torn_tail());
    assert!(state == replay_bytes(&c.accepted));
}

#[test]
fn damage_before_a_valid_record_in_the_zeros_is_corruption() {
    let c = Crashed::new("prealloc-damage", 0xDA4A, 20);
    // A whole, valid record some way into the zeros: what precedes it cannot be a
    // torn tail, so it is refused rather than cut.
    let Damaged { segment, bytes, .. } = c.damage(|bytes, end| {
        let first = whole_records(bytes)[0].clone();
        bytes.copy_within(first, end + 4096);
    });
    let Err(err) = DurableStore::open_read_only(c.dir.path()) else {
        panic!("a damaged log opened");
    };
    assert!(
        err.to_string().contains(&segment.display().to_string()),
        "names the file: {err}"
    );
    assert!(DurableStore::open(c.dir.path(), fast()).is_err());
    assert_eq!(fs::read(&segment).unwrap(), bytes, "nothing cut");
}
