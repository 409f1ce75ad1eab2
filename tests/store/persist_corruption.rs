//! Damaged and foreign input: every flipped byte of a snapshot or a log segment is
//! detected (a typed error, or — only inside the last record of the last segment — a
//! reported torn tail that loses exactly that record), never a panic or a wrong state;
//! truncations of the log; files that are not ours, empty, missing or locked
//! directories, unknown versions, missing segments.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::support::persist::{
    Gen, SEGMENT_HEADER_LEN, assert_same_files, craft_segment, error_path, fast, file_name, files,
    kind, only_records, record_spans, replay_bytes, reset_dir, run_durable, seg_name, segments,
    snapshots, trim_zero_tails,
};
use crate::support::{TempDir, assert_invariants, canonical};
use schedstate::persist::{
    DurableStore, OpenReport, PersistError, SNAPSHOT_VERSION, TornTail, WAL_VERSION,
};
use schedstate::state::{Command, StateStore};

type Records = Vec<(u64, Command)>;

/// A data directory written by the store: a snapshot (after `before` commands) and one
/// log segment holding the records accepted after it.
struct Fixture {
    dir: TempDir,
    /// Every accepted command, in order.
    accepted: Records,
    /// How many of them the snapshot holds.
    in_snapshot: usize,
}

impl Fixture {
    fn new(tag: &str, seed: u64, before: usize, after: usize) -> Fixture {
        let dir = TempDir::new(tag);
        let mut g = Gen::new(seed);
        let (db, _) = DurableStore::open(dir.path(), fast()).expect("open");
        let mut accepted = run_durable(&db, &mut g, before);
        let in_snapshot = accepted.len();
        db.compact().expect("compact");
        accepted.extend(run_durable(&db, &mut g, after));
        drop(db);
        trim_zero_tails(dir.path());
        assert_eq!(snapshots(dir.path()).len(), 1);
        assert_eq!(segments(dir.path()).len(), 1);
        Fixture {
            dir,
            accepted,
            in_snapshot,
        }
    }

    fn files(&self) -> BTreeMap<String, Vec<u8>> {
        files(self.dir.path())
    }

    fn snapshot_name(&self) -> String {
        file_name(&snapshots(self.dir.path())[0])
    }

    fn segment_name(&self) -> String {
        file_name(&segments(self.dir.path())[0])
    }
}

/// What opening a directory gave: the state's canonical bytes and the report.
type Outcome = Result<(Vec<u8>, OpenReport), PersistError>;

fn open_ro(dir: &Path) -> Outcome {
    DurableStore::open_read_only(dir).map(|(store, report)| {
        assert_invariants(&store);
        (canonical(&store), report)
    })
}

fn open_rw(dir: &Path) -> Outcome {
    DurableStore::open(dir, fast()).map(|(db, report)| {
        assert_invariants(db.store());
        (canonical(db.store()), report)
    })
}

/// Checks an outcome of a damaged directory: a typed error naming `file` (when it
/// names a file at all), or, if `torn_ok` holds the offset of the last record, an open
/// that reports a torn tail there with the state `prefix`.
#[track_caller]
fn check_damaged(
    what: &str,
    outcome: &Outcome,
    file: &str,
    torn_ok: Option<(u64, &[u8])>,
    tally: &mut BTreeMap<&'static str, usize>,
) {
    match outcome {
        Err(e) => {
            assert!(
                !matches!(e, PersistError::Io { .. }),
                "{what}: an I/O error is not a detection: {e}"
            );
            if let Some(path) = error_path(e) {
                assert_eq!(
                    file_name(path),
                    file,
                    "{what}: the error names the file: {e}"
                );
            }
            *tally.entry(kind(e)).or_default() += 1;
        }
        Ok((state, report)) => {
            let Some((offset, prefix)) = torn_ok else {
                panic!("{what}: opened without an error ({report:?})");
            };
            let torn = report
                .torn_tail
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: opened without reporting a torn tail"));
            assert_eq!(file_name(&torn.path), file, "{what}");
            assert_eq!(torn.offset, offset, "{what}: torn at the last record");
            assert!(
                state.as_slice() == prefix,
                "{what}: wrong state after a torn tail"
            );
            *tally.entry("torn tail").or_default() += 1;
        }
    }
}

/// The positions to flip in a file of `len` bytes: all of them under 4 KiB, otherwise
/// every `step`-th one plus the first and last 64.
fn positions(len: usize, step: usize) -> Vec<usize> {
    if len <= 4096 {
        return (0..len).collect();
    }
    let mut p: Vec<usize> = (0..64).chain((64..len - 64).step_by(step)).collect();
    p.extend(len - 64..len);
    p
}

/// Flips every sampled byte of the snapshot and of the segment of `fx`, one at a time,
/// in a copy of its directory, and opens it read-only and (for every `rw_every`-th
/// position, and every position of the last record) read-write.
fn flip_everything(fx: &Fixture, step: usize, rw_every: usize) -> BTreeMap<&'static str, usize> {
    let original = fx.files();
    let work = TempDir::new("flip-work");
    let all = replay_bytes(&fx.accepted);
    let n = fx.accepted.len();
    let minus_last = replay_bytes(&fx.accepted[..n - 1]);
    let snapshot = fx.snapshot_name();
    let segment = fx.segment_name();
    let spans = record_spans(&original[&segment]);
    assert_eq!(
        spans.len(),
        n - fx.in_snapshot,
        "one record per accepted command"
    );
    let last = spans.last().expect("records after the snapshot").clone();

    // The undamaged copy opens cleanly with everything.
    reset_dir(work.path(), &original);
    let (state, report) = open_ro(work.path()).expect("undamaged");
    assert_eq!(state, all);
    assert_eq!(report.torn_tail, None);

    let mut tally = BTreeMap::new();
    for file in [&snapshot, &segment] {
        let bytes = &original[file];
        for (nth, pos) in positions(bytes.len(), step).into_iter().enumerate() {
            let mut damaged = original.clone();
            damaged.get_mut(file).unwrap()[pos] ^= 0xFF;
            // The other files are as in the original (a failed open changes nothing
            // but the LOCK file; a successful one is followed by a full reset).
            fs::write(work.join(file), &damaged[file]).unwrap();
            let torn_ok = (file == &segment && last.contains(&pos))
                .then_some((last.start as u64, minus_last.as_slice()));
            let what = format!("{file} byte {pos} flipped");
            let ro = open_ro(work.path());
            check_damaged(
                &format!("{what} (read-only)"),
                &ro,
                file,
                torn_ok,
                &mut tally,
            );
            assert_same_files(&files(work.path()), &damaged, &format!("{what}: read-only"));
            if !nth.is_multiple_of(rw_every) && torn_ok.is_none() {
                continue;
            }
            let rw = open_rw(work.path());
            check_damaged(
                &format!("{what} (read-write)"),
                &rw,
                file,
                torn_ok,
                &mut tally,
            );
            assert_eq!(
                ro.as_ref().map(|(s, r)| (s, &r.torn_tail)).ok(),
                rw.as_ref().map(|(s, r)| (s, &r.torn_tail)).ok(),
                "{what}: read-only and read-write opens agree"
            );
            if let Err(e) = &rw {
                assert_eq!(ro.as_ref().map_err(kind).err(), Some(kind(e)), "{what}");
            }
            if rw.is_ok() {
                // The torn record was cut off: the file now ends before it and a
                // second open is clean.
                let cut = fs::read(work.join(file)).unwrap();
                assert_eq!(
                    cut.len(),
                    last.start,
                    "{what}: truncated at the torn record"
                );
                let (state, report) = open_rw(work.path()).expect("reopen after repair");
                assert_eq!(report.torn_tail, None, "{what}: repaired");
                assert!(state == minus_last, "{what}: state after repair");
                reset_dir(work.path(), &original);
            }
        }
        fs::write(work.join(file), bytes).unwrap();
    }
    assert!(tally.contains_key("torn tail"), "{tally:?}");
    assert!(tally.contains_key("Checksum"), "{tally:?}");
    tally
}

#[test]
fn every_flipped_byte_of_a_small_directory_is_detected() {
    let fx = Fixture::new("flip-small", 100, 20, 20);
    let original = fx.files();
    assert!(original[&fx.snapshot_name()].len() <= 4096);
    assert!(original[&fx.segment_name()].len() <= 4096);
    let tally = flip_everything(&fx, 1, 1);
    eprintln!("small directory: {tally:?}");
}

#[test]
fn sampled_flipped_bytes_of_a_larger_directory_are_detected() {
    let fx = Fixture::new("flip-large", 101, 250, 60);
    let original = fx.files();
    assert!(original[&fx.snapshot_name()].len() > 4096);
    assert!(original[&fx.segment_name()].len() > 4096);
    let tally = flip_everything(&fx, 13, 4);
    eprintln!("larger directory: {tally:?}");
}

/// Three segments and no snapshot (as left by compactions that stopped before they
/// wrote their snapshot), plus the snapshots taken along the way.
struct Chain {
    accepted: Records,
    /// Accepted commands per segment.
    per_segment: Vec<usize>,
    /// name → bytes of the three segments and of the snapshots after segments 1 and 2.
    parts: BTreeMap<String, Vec<u8>>,
}

impl Chain {
    fn new(tag: &str, seed: u64, per_round: usize) -> Chain {
        let dir = TempDir::new(tag);
        let mut g = Gen::new(seed);
        let (db, _) = DurableStore::open(dir.path(), fast()).expect("open");
        let mut parts = BTreeMap::new();
        let mut accepted = Vec::new();
        let mut per_segment = Vec::new();
        for round in 0..3 {
            let now = run_durable(&db, &mut g, per_round);
            per_segment.push(now.len());
            accepted.extend(now);
            // The segment as it is when the next compaction rotates it: compaction
            // appends nothing to it and cuts the zeros preallocated after its records.
            let seg = segments(dir.path()).pop().unwrap();
            parts.insert(file_name(&seg), only_records(fs::read(&seg).unwrap()));
            if round < 2 {
                db.compact().unwrap();
                let snap = snapshots(dir.path()).pop().unwrap();
                parts.insert(file_name(&snap), fs::read(&snap).unwrap());
            }
        }
        drop(db);
        Chain {
            accepted,
            per_segment,
            parts,
        }
    }

    /// Exactly the named parts (`wal-1`, `snap-1`, … as short names).
    fn only(&self, short: &[&str]) -> BTreeMap<String, Vec<u8>> {
        let segs: Vec<&String> = self
            .parts
            .keys()
            .filter(|k| k.starts_with("wal-"))
            .collect();
        let snaps: Vec<&String> = self
            .parts
            .keys()
            .filter(|k| k.starts_with("snapshot-"))
            .collect();
        short
            .iter()
            .map(|s| {
                let name = match *s {
                    "wal-1" => segs[0],
                    "wal-2" => segs[1],
                    "wal-3" => segs[2],
                    "snap-1" => snaps[0],
                    "snap-2" => snaps[1],
                    other => panic!("unknown part {other}"),
                };
                (name.clone(), self.parts[name].clone())
            })
            .collect()
    }

    fn seg(&self, n: usize) -> String {
        self.parts
            .keys()
            .filter(|k| k.starts_with("wal-"))
            .nth(n - 1)
            .unwrap()
            .clone()
    }
}

#[test]
fn flips_in_a_segment_that_is_not_the_last_are_errors() {
    let chain = Chain::new("flip-chain", 102, 12);
    let work = TempDir::new("flip-chain-work");
    let layout = chain.only(&["wal-1", "wal-2", "wal-3"]);
    reset_dir(work.path(), &layout);
    let (state, report) = open_ro(work.path()).expect("three segments open");
    assert_eq!(state, replay_bytes(&chain.accepted));
    assert_eq!(report.segments.len(), 3);
    let mut tally = BTreeMap::new();
    for file in [chain.seg(1), chain.seg(2)] {
        let len = layout[&file].len();
        for pos in positions(len, 3) {
            let mut damaged = layout.clone();
            damaged.get_mut(&file).unwrap()[pos] ^= 0xFF;
            reset_dir(work.path(), &damaged);
            let what = format!("{file} byte {pos} flipped");
            check_damaged(&what, &open_ro(work.path()), &file, None, &mut tally);
            if pos.is_multiple_of(4) {
                check_damaged(&what, &open_rw(work.path()), &file, None, &mut tally);
            }
        }
    }
    eprintln!("segments before the last: {tally:?}");
}

#[test]
fn truncating_the_last_segment_loses_only_the_cut_record() {
    let fx = Fixture::new("truncate", 103, 20, 20);
    let original = fx.files();
    let segment = fx.segment_name();
    let bytes = &original[&segment];
    let spans = record_spans(bytes);
    let n = fx.accepted.len();
    let k = spans.len();
    let work = TempDir::new("truncate-work");
    let prefixes: Vec<Vec<u8>> = (0..=2)
        .map(|lost| replay_bytes(&fx.accepted[..n - lost]))
        .collect();
    let from = spans[k - 2].start;
    for cut in from..=bytes.len() {
        let mut damaged = original.clone();
        damaged.get_mut(&segment).unwrap().truncate(cut);
        reset_dir(work.path(), &damaged);
        // Records wholly before the cut survive.
        let whole = spans.iter().filter(|s| s.end <= cut).count();
        let lost = k - whole;
        let boundary = cut == bytes.len() || spans.iter().any(|s| s.start == cut);
        let ro = open_ro(work.path()).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_same_files(&files(work.path()), &damaged, &format!("cut at {cut}"));
        let rw = open_rw(work.path()).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        for (mode, (state, report)) in [("read-only", &ro), ("read-write", &rw)] {
            assert!(state == &prefixes[lost], "cut at {cut} ({mode}): state");
            let expected_torn = (!boundary).then(|| TornTail {
                path: work.join(&segment),
                offset: spans[whole].start as u64,
                bytes: (cut - spans[whole].start) as u64,
            });
            assert_eq!(report.torn_tail, expected_torn, "cut at {cut} ({mode})");
            assert_eq!(
                report.last_applied,
                fx.accepted[n - lost - 1].0,
                "cut at {cut} ({mode})"
            );
        }
        // After the read-write open the file ends at the last whole record, and the
        // store appends after it.
        let after = fs::read(work.join(&segment)).unwrap();
        let expected_len = if boundary { cut } else { spans[whole].start };
        assert_eq!(after.len(), expected_len, "cut at {cut}: repaired length");
        let (db, report) = DurableStore::open(work.path(), fast()).unwrap();
        assert_eq!(report.torn_tail, None, "cut at {cut}: repaired");
        let next = report.last_applied + 1;
        assert!(crate::support::persist::apply_durable(
            &db,
            next,
            &Command::DeleteAllocs { ids: vec![] }
        ));
        drop(db);
        let (state, report) = open_ro(work.path()).unwrap();
        assert_eq!(report.last_applied, next);
        assert_eq!(report.torn_tail, None);
        let mut expected = fx.accepted[..n - lost].to_vec();
        expected.push((next, Command::DeleteAllocs { ids: vec![] }));
        assert!(
            state == replay_bytes(&expected),
            "cut at {cut}: appended after"
        );
    }
}

#[test]
fn truncating_inside_the_segment_header_is_a_torn_header() {
    let fx = Fixture::new("truncate-header", 104, 20, 5);
    let original = fx.files();
    let segment = fx.segment_name();
    let snapshot_state = replay_bytes(&fx.accepted[..fx.in_snapshot]);
    let work = TempDir::new("truncate-header-work");
    for cut in 0..SEGMENT_HEADER_LEN {
        let mut damaged = original.clone();
        damaged.get_mut(&segment).unwrap().truncate(cut);
        reset_dir(work.path(), &damaged);
        let (state, report) = open_ro(work.path()).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_same_files(&files(work.path()), &damaged, &format!("cut {cut}"));
        assert!(state == snapshot_state, "cut {cut}");
        assert_eq!(report.torn_tail.is_some(), cut > 0, "cut {cut}: {report:?}");
        let (db, _) = DurableStore::open(work.path(), fast()).unwrap();
        assert!(canonical(db.store()) == snapshot_state);
        drop(db);
        // The segment was made again, whole.
        assert!(fs::read(work.join(&segment)).unwrap().len() >= SEGMENT_HEADER_LEN);
        let (state, report) = open_ro(work.path()).unwrap();
        assert!(state == snapshot_state);
        assert_eq!(report.torn_tail, None);
    }
}

#[test]
fn a_read_only_open_reports_a_torn_tail_and_changes_nothing() {
    let fx = Fixture::new("ro-torn", 105, 10, 10);
    let segment = fx.segment_name();
    let path = fx.dir.join(&segment);
    let mut bytes = fs::read(&path).unwrap();
    let spans = record_spans(&bytes);
    let last = spans.last().unwrap().clone();
    bytes.truncate(last.end - 3);
    fs::write(&path, &bytes).unwrap();
    let before = files(fx.dir.path());
    let (store, report) = DurableStore::open_read_only(fx.dir.path()).expect("read-only open");
    assert_eq!(
        report.torn_tail,
        Some(TornTail {
            path: path.clone(),
            offset: last.start as u64,
            bytes: (last.len() - 3) as u64,
        })
    );
    let n = fx.accepted.len();
    assert_eq!(canonical(&store), replay_bytes(&fx.accepted[..n - 1]));
    assert_same_files(&files(fx.dir.path()), &before, "read-only open");
    assert_eq!(files(fx.dir.path()).len(), before.len(), "nothing created");
    // A second read-only open sees the same.
    let (_, again) = DurableStore::open_read_only(fx.dir.path()).unwrap();
    assert_eq!(again.torn_tail, report.torn_tail);
    // A read-write open repairs it.
    let (_db, rw) = DurableStore::open(fx.dir.path(), fast()).unwrap();
    assert_eq!(rw.torn_tail, report.torn_tail);
    assert_eq!(fs::read(&path).unwrap().len(), last.start);
}

// ---------------------------------------------------------------------------------
// Bad input

fn expect_err(outcome: Result<impl std::fmt::Debug, PersistError>, what: &str) -> PersistError {
    match outcome {
        Ok(v) => panic!("{what}: opened: {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_foreign_snapshot_file_is_bad_magic() {
    let dir = TempDir::new("foreign-snap");
    let name = "snapshot-00000000000000000005.snap";
    fs::write(
        dir.join(name),
        b"these are my holiday photos, not a snapshot\n",
    )
    .unwrap();
    for (mode, outcome) in [
        (
            "read-write",
            DurableStore::open(dir.path(), fast()).map(|_| ()),
        ),
        (
            "read-only",
            DurableStore::open_read_only(dir.path()).map(|_| ()),
        ),
    ] {
        match expect_err(outcome, mode) {
            PersistError::BadMagic { path, kind } => {
                assert_eq!(path, dir.join(name), "{mode}");
                assert_eq!(kind, "snapshot");
            }
            e => panic!("{mode}: {e}"),
        }
    }
    // Shorter than the magic bytes, or empty: still not ours.
    for content in [&b"SCHED"[..], &b""[..]] {
        fs::write(dir.join(name), content).unwrap();
        let e = expect_err(
            DurableStore::open_read_only(dir.path()).map(|_| ()),
            "short",
        );
        assert!(matches!(e, PersistError::BadMagic { .. }), "{e}");
    }
    // The file is left alone.
    assert_eq!(fs::read(dir.join(name)).unwrap(), b"");
}

#[test]
fn a_foreign_segment_file_is_bad_magic() {
    let dir = TempDir::new("foreign-wal");
    let name = "wal-00000000000000000001.log";
    let content = b"2024-01-01T00:00:00Z INFO server started on port 4646\n".repeat(3);
    fs::write(dir.join(name), &content).unwrap();
    for (mode, outcome) in [
        (
            "read-write",
            DurableStore::open(dir.path(), fast()).map(|_| ()),
        ),
        (
            "read-only",
            DurableStore::open_read_only(dir.path()).map(|_| ()),
        ),
    ] {
        match expect_err(outcome, mode) {
            PersistError::BadMagic { path, kind } => {
                assert_eq!(path, dir.join(name), "{mode}");
                assert_eq!(kind, "log segment");
            }
            e => panic!("{mode}: {e}"),
        }
    }
    assert_eq!(fs::read(dir.join(name)).unwrap(), content, "left alone");

    // Shorter than a segment header: not taken for a header torn by a crash (which
    // a read-write open would remove).
    for short in [&b"hello"[..], b"#!/bin/sh\nexit 0\n", b"SCHEDWAL\x09\0\0\0"] {
        fs::write(dir.join(name), short).unwrap();
        let e = expect_err(DurableStore::open(dir.path(), fast()).map(|_| ()), "short");
        assert!(
            matches!(
                e,
                PersistError::BadMagic { .. } | PersistError::UnsupportedVersion { .. }
            ),
            "{short:?}: {e}"
        );
        assert_eq!(fs::read(dir.join(name)).unwrap(), short, "left alone");
    }
}

#[test]
fn an_empty_directory_opens_as_an_empty_store() {
    let dir = TempDir::new("empty");
    let (store, report) = DurableStore::open_read_only(dir.path()).expect("read-only");
    assert_eq!(report, OpenReport::default());
    assert_eq!(canonical(&store), canonical(&StateStore::new()));
    assert!(files(dir.path()).is_empty(), "read-only creates nothing");

    let (db, report) = DurableStore::open(dir.path(), fast()).expect("open");
    assert_eq!(report.last_applied, 0);
    assert_eq!(report.snapshot_index, None);
    assert_eq!(report.replayed, 0);
    assert_eq!(report.torn_tail, None);
    assert_eq!(canonical(db.store()), canonical(&StateStore::new()));
    drop(db);
    // Files other than ours are ignored.
    fs::write(dir.join("README.txt"), b"notes").unwrap();
    fs::create_dir(dir.join("backups")).unwrap();
    let (db, _) = DurableStore::open(dir.path(), fast()).expect("reopen");
    assert_eq!(canonical(db.store()), canonical(&StateStore::new()));
    assert_eq!(segments(dir.path()).len(), 1);
}

#[test]
fn a_missing_directory_is_created_by_open_only() {
    let root = TempDir::new("missing");
    let dir = root.join("a/b/data");
    let e = expect_err(DurableStore::open_read_only(&dir).map(|_| ()), "read-only");
    match e {
        PersistError::NotADirectory { path } => assert_eq!(path, dir),
        e => panic!("{e}"),
    }
    assert!(!dir.exists(), "read-only creates nothing");
    let (db, report) = DurableStore::open(&dir, fast()).expect("open creates it");
    assert_eq!(report.last_applied, 0);
    assert!(dir.is_dir());
    assert!(crate::support::persist::apply_durable(
        &db,
        1,
        &Command::UpsertNode {
            node: schedstate::model::Node::new("n1", "one")
        }
    ));
    drop(db);
    let (store, report) = DurableStore::open_read_only(&dir).unwrap();
    assert_eq!(report.last_applied, 1);
    assert!(store.snapshot().view().node("n1").is_some());
}

#[test]
fn a_regular_file_is_not_a_directory() {
    let root = TempDir::new("file");
    let path = root.join("data");
    fs::write(&path, b"x").unwrap();
    for (mode, outcome) in [
        ("read-write", DurableStore::open(&path, fast()).map(|_| ())),
        ("read-only", DurableStore::open_read_only(&path).map(|_| ())),
    ] {
        match expect_err(outcome, mode) {
            PersistError::NotADirectory { path: p } => assert_eq!(p, path, "{mode}"),
            e => panic!("{mode}: {e}"),
        }
    }
    assert_eq!(fs::read(&path).unwrap(), b"x");
}

#[test]
fn a_directory_open_for_writing_is_locked() {
    let dir = TempDir::new("locked");
    let (db, _) = DurableStore::open(dir.path(), fast()).unwrap();
    assert!(crate::support::persist::apply_durable(
        &db,
        1,
        &Command::UpsertNode {
            node: schedstate::model::Node::new("n1", "one")
        }
    ));
    let clone = db.clone();
    drop(db);
    match expect_err(DurableStore::open(dir.path(), fast()).map(|_| ()), "second") {
        PersistError::Locked { path } => assert_eq!(path, dir.join("LOCK")),
        e => panic!("{e}"),
    }
    // Reading does not need the lock.
    let (store, _) = DurableStore::open_read_only(dir.path()).expect("read-only");
    assert_eq!(canonical(&store), canonical(clone.store()));
    drop(clone);
    let (db, report) = DurableStore::open(dir.path(), fast()).expect("unlocked once dropped");
    assert_eq!(report.last_applied, 1);
    drop(db);
    // A stale LOCK file left by a crashed process does not lock anything.
    assert!(dir.join("LOCK").exists());
    DurableStore::open(dir.path(), fast()).expect("stale lock file");
}

/// Rewrites the u32 at `at` in `bytes`.
fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn an_unknown_format_version_is_unsupported() {
    let fx = Fixture::new("version", 106, 15, 5);
    let original = fx.files();
    let work = TempDir::new("version-work");
    let snapshot = fx.snapshot_name();
    let segment = fx.segment_name();
    assert_eq!(&original[&snapshot][0..8], b"SCHEDSNP");
    assert_eq!(&original[&segment][0..8], b"SCHEDWAL");

    for (file, current) in [(&snapshot, SNAPSHOT_VERSION), (&segment, WAL_VERSION)] {
        for version in [0, current + 1, 0xFFFF_FFFF] {
            let mut damaged = original.clone();
            put_u32(damaged.get_mut(file).unwrap(), 8, version);
            reset_dir(work.path(), &damaged);
            for (mode, outcome) in [
                ("read-only", open_ro(work.path())),
                ("read-write", open_rw(work.path())),
            ] {
                match expect_err(outcome, mode) {
                    PersistError::UnsupportedVersion {
                        path,
                        version: v,
                        supported,
                    } => {
                        assert_eq!(file_name(&path), *file, "{mode}");
                        assert_eq!((v, supported), (version, current), "{mode}");
                    }
                    e => panic!("{file} version {version} ({mode}): {e}"),
                }
            }
        }
    }
    // Through restore_from too.
    let mut snap = original[&snapshot].clone();
    put_u32(&mut snap, 8, SNAPSHOT_VERSION + 1);
    assert!(matches!(
        StateStore::new().restore_from(&mut snap.as_slice()),
        Err(PersistError::UnsupportedVersion { version, .. }) if version == SNAPSHOT_VERSION + 1
    ));
}

#[test]
fn a_missing_segment_is_detected() {
    let chain = Chain::new("missing-seg", 107, 15);
    let work = TempDir::new("missing-seg-work");
    let all = replay_bytes(&chain.accepted);
    let first_two = chain.per_segment[0] + chain.per_segment[1];
    let after_two = replay_bytes(&chain.accepted[..first_two]);

    // Complete layouts open with every record: three segments and no snapshot; a
    // compaction that stopped before deleting (snapshots and covered segments both
    // still there); the layout compaction leaves.
    for layout in [
        &["wal-1", "wal-2", "wal-3"][..],
        &["snap-1", "wal-1", "wal-2", "wal-3"],
        &["snap-1", "snap-2", "wal-1", "wal-2", "wal-3"],
        &["snap-1", "wal-2", "wal-3"],
        &["snap-2", "wal-2", "wal-3"],
        &["snap-2", "wal-3"],
        &["snap-1", "snap-2", "wal-3"],
    ] {
        reset_dir(work.path(), &chain.only(layout));
        let (state, report) = open_ro(work.path()).unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        assert!(state == all, "{layout:?}");
        assert_eq!(report.torn_tail, None);
        let (state, _) = open_rw(work.path()).unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        assert!(state == all, "{layout:?}");
    }
    // The last segment alone cannot be told missing: the state is that of the
    // segments before it (nothing acknowledged after it can exist without it).
    reset_dir(work.path(), &chain.only(&["wal-1", "wal-2"]));
    assert!(open_ro(work.path()).unwrap().0 == after_two);

    // Gaps.
    for (layout, named) in [
        (&["wal-1", "wal-3"][..], 3),
        (&["wal-2", "wal-3"], 2),
        (&["wal-3"], 3),
        (&["snap-1", "wal-3"], 3),
        (&["snap-1", "wal-1", "wal-3"], 3),
    ] {
        reset_dir(work.path(), &chain.only(layout));
        for (mode, outcome) in [
            ("read-only", open_ro(work.path())),
            ("read-write", open_rw(work.path())),
        ] {
            match expect_err(outcome, mode) {
                PersistError::MissingSegment { path, reason } => {
                    assert_eq!(file_name(&path), chain.seg(named), "{layout:?}: {reason}")
                }
                e => panic!("{layout:?} ({mode}): {e}"),
            }
        }
        assert_same_files(
            &files(work.path()),
            &chain.only(layout),
            &format!("{layout:?}: left alone"),
        );
    }
}

#[test]
fn leftovers_of_an_interrupted_compaction_are_cleaned_up() {
    let fx = Fixture::new("leftovers", 108, 20, 10);
    let all = replay_bytes(&fx.accepted);
    let snapshot = fx.snapshot_name();
    let segment = fx.segment_name();
    let seq: u64 = segment["wal-".len()..segment.len() - ".log".len()]
        .parse()
        .unwrap();
    // A half-written snapshot and the first bytes of the next segment's header.
    let tmp = snapshot.replace(".snap", ".tmp");
    fs::write(fx.dir.join(&tmp), b"SCHEDSNP\x01\x00").unwrap();
    let next = format!("wal-{:020}.log", seq + 1);
    let header = fs::read(fx.dir.join(&segment)).unwrap()[..12].to_vec();
    fs::write(fx.dir.join(&next), &header).unwrap();

    let before = files(fx.dir.path());
    let (store, report) = DurableStore::open_read_only(fx.dir.path()).expect("read-only");
    assert!(canonical(&store) == all);
    assert_eq!(
        report.torn_tail,
        Some(TornTail {
            path: fx.dir.join(&next),
            offset: 0,
            bytes: 12
        })
    );
    assert_same_files(&files(fx.dir.path()), &before, "read-only open");

    let (db, report) = DurableStore::open(fx.dir.path(), fast()).expect("open");
    assert!(canonical(db.store()) == all);
    assert!(report.torn_tail.is_some());
    assert!(!fx.dir.join(&tmp).exists(), "temporary removed");
    let n = fx.accepted.last().unwrap().0 + 1;
    let cmd = Command::DeleteAllocs { ids: vec![] };
    assert!(crate::support::persist::apply_durable(&db, n, &cmd));
    drop(db);
    let (store, report) = DurableStore::open_read_only(fx.dir.path()).unwrap();
    assert_eq!(report.torn_tail, None);
    assert_eq!(report.last_applied, n);
    assert_eq!(segments(fx.dir.path()).len(), 2);
    let mut expected = fx.accepted.clone();
    expected.push((n, cmd));
    assert!(canonical(&store) == replay_bytes(&expected));
}

#[test]
fn a_snapshot_whose_name_and_header_disagree_is_corrupt() {
    let fx = Fixture::new("renamed", 109, 10, 0);
    let snapshot = fx.snapshot_name();
    fs::rename(
        fx.dir.join(&snapshot),
        fx.dir.join("snapshot-00000000000000099999.snap"),
    )
    .unwrap();
    let e = expect_err(
        DurableStore::open_read_only(fx.dir.path()).map(|_| ()),
        "renamed",
    );
    assert!(matches!(e, PersistError::Corrupt { .. }), "{e}");
}

#[test]
fn garbage_appended_to_a_snapshot_is_corrupt() {
    let fx = Fixture::new("snap-garbage", 110, 10, 0);
    let path = fx.dir.join(&fx.snapshot_name());
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"\0");
    fs::write(&path, &bytes).unwrap();
    let e = expect_err(
        DurableStore::open_read_only(fx.dir.path()).map(|_| ()),
        "garbage",
    );
    assert!(matches!(e, PersistError::Corrupt { .. }), "{e}");
    assert_eq!(error_path(&e), Some(path.as_path()));
}

#[test]
fn the_log_is_written_as_documented() {
    let fx = Fixture::new("format", 111, 10, 12);
    let segment = fx.segment_name();
    let seq: u64 = segment["wal-".len()..segment.len() - ".log".len()]
        .parse()
        .unwrap();
    let prev = fx.accepted[fx.in_snapshot - 1].0;
    let crafted = craft_segment(seq, prev, &fx.accepted[fx.in_snapshot..]);
    assert!(fs::read(fx.dir.join(&segment)).unwrap() == crafted);
}

#[test]
fn records_out_of_order_are_corrupt() {
    let node = |n: &str| Command::UpsertNode {
        node: schedstate::model::Node::new(n, n),
    };
    let work = TempDir::new("order");
    let good = craft_segment(1, 0, &[(5, node("x")), (7, node("y"))]);
    reset_dir(work.path(), &BTreeMap::from([(seg_name(1), good.clone())]));
    let (_, report) = open_ro(work.path()).expect("well formed");
    assert_eq!(report.last_applied, 7);

    // Within a segment: the second record's offset is named.
    let second = record_spans(&good)[1].start as u64;
    for bad in [
        vec![(5, node("x")), (5, node("y"))],
        vec![(5, node("x")), (3, node("y"))],
    ] {
        let seg = craft_segment(1, 0, &bad);
        reset_dir(work.path(), &BTreeMap::from([(seg_name(1), seg)]));
        match expect_err(open_ro(work.path()), "out of order") {
            PersistError::Corrupt { path, offset, .. } => {
                assert_eq!(file_name(&path), seg_name(1));
                assert_eq!(offset, second);
            }
            e => panic!("{e}"),
        }
    }
    // Across segments: segment 2 says it follows index 7 but holds index 6.
    let layout = BTreeMap::from([
        (seg_name(1), good.clone()),
        (seg_name(2), craft_segment(2, 7, &[(6, node("z"))])),
    ]);
    reset_dir(work.path(), &layout);
    let e = expect_err(open_ro(work.path()), "across segments");
    assert!(matches!(e, PersistError::Corrupt { .. }), "{e}");
    assert_eq!(file_name(error_path(&e).unwrap()), seg_name(2));
    // Segment 2 says it follows index 6, but segment 1 ends at 7.
    let layout = BTreeMap::from([
        (seg_name(1), good.clone()),
        (seg_name(2), craft_segment(2, 6, &[(9, node("z"))])),
    ]);
    reset_dir(work.path(), &layout);
    let e = expect_err(open_ro(work.path()), "overlap");
    assert!(matches!(e, PersistError::MissingSegment { .. }), "{e}");
    // A header naming another sequence number than the file name.
    let layout = BTreeMap::from([
        (seg_name(1), good),
        (seg_name(2), craft_segment(3, 7, &[(9, node("z"))])),
    ]);
    reset_dir(work.path(), &layout);
    let e = expect_err(open_ro(work.path()), "renamed segment");
    assert!(matches!(e, PersistError::Corrupt { offset: 12, .. }), "{e}");
}

#[test]
fn a_record_at_index_0_is_corrupt() {
    // Log indexes start at 1: no store writes a record at index 0, so one is forged or
    // damaged, never "already in the snapshot" — with or without a snapshot.
    let node = |n: &str| Command::UpsertNode {
        node: schedstate::model::Node::new(n, n),
    };
    let work = TempDir::new("index-0");
    for records in [
        vec![(0, node("forged"))],
        vec![(0, node("forged")), (1, node("n1"))],
    ] {
        let seg = craft_segment(1, 0, &records);
        let layout = BTreeMap::from([(seg_name(1), seg)]);
        reset_dir(work.path(), &layout);
        match expect_err(open_ro(work.path()), "index 0, no snapshot") {
            PersistError::Corrupt { path, offset, .. } => {
                assert_eq!(file_name(&path), seg_name(1));
                assert_eq!(offset, SEGMENT_HEADER_LEN as u64);
            }
            e => panic!("{e}"),
        }
        assert_same_files(&files(work.path()), &layout, "read-only open");
        let e = expect_err(open_rw(work.path()), "index 0, read-write");
        assert!(matches!(e, PersistError::Corrupt { .. }), "{e}");
        assert_same_files(&files(work.path()), &layout, "refused read-write open");
    }

    // Beside a snapshot: a first segment starting at index 0 that still holds the
    // records of the snapshot (a compaction stopped before deleting it), forged to
    // begin with a record at index 0.
    let fx = Fixture::new("index-0-snap", 112, 20, 0);
    let snap_index = fx.accepted[fx.in_snapshot - 1].0;
    let mut records = vec![(0, node("forged"))];
    records.extend(fx.accepted[..fx.in_snapshot].iter().cloned());
    let mut layout = fx.files();
    layout.retain(|name, _| !name.starts_with("wal-"));
    layout.insert(seg_name(1), craft_segment(1, 0, &records));
    reset_dir(fx.dir.path(), &layout);
    let e = expect_err(open_ro(fx.dir.path()), "index 0, with a snapshot");
    assert!(
        matches!(&e, PersistError::Corrupt { offset, .. } if *offset == SEGMENT_HEADER_LEN as u64),
        "{e}"
    );
    assert_same_files(&files(fx.dir.path()), &layout, "read-only open");
    // The same segment without the forged record opens (the snapshot's records are
    // skipped), so it is the index 0 that is refused.
    layout.insert(
        seg_name(1),
        craft_segment(1, 0, &fx.accepted[..fx.in_snapshot]),
    );
    reset_dir(fx.dir.path(), &layout);
    let (_, report) = open_ro(fx.dir.path()).expect("a leftover segment opens");
    assert_eq!(
        (report.snapshot_index, report.last_applied, report.replayed),
        (Some(snap_index), snap_index, 0)
    );
}

#[test]
fn a_record_that_does_not_replay_is_a_replay_error() {
    // Well formed, but the rules refuse it (deleting a node that does not exist).
    let work = TempDir::new("replay");
    let cmd = Command::DeleteNodes {
        ids: vec![schedstate::model::id("ghost")],
    };
    let seg = craft_segment(1, 0, &[(4, cmd)]);
    reset_dir(work.path(), &BTreeMap::from([(seg_name(1), seg)]));
    match expect_err(open_ro(work.path()), "replay") {
        PersistError::Replay {
            path,
            offset,
            index,
            ..
        } => {
            assert_eq!(file_name(&path), seg_name(1));
            assert_eq!((offset, index), (SEGMENT_HEADER_LEN as u64, 4));
        }
        e => panic!("{e}"),
    }
}

#[test]
fn a_forged_tail_cannot_make_recovery_search_forever() {
    // A last record whose length points past the end, followed by bytes in which
    // every fourth offset reads as a 1 MiB record: telling a torn tail from damage
    // must not checksum them all.
    let work = TempDir::new("forged-tail");
    let mut seg = craft_segment(1, 0, &[]);
    seg.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    seg.extend_from_slice(&[0; 4]);
    for _ in 0..(3 << 20) / 4 {
        seg.extend_from_slice(&[0x00, 0x00, 0x10, 0x00]);
    }
    reset_dir(work.path(), &BTreeMap::from([(seg_name(1), seg.clone())]));
    let started = std::time::Instant::now();
    let outcome = open_ro(work.path());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    match outcome {
        Err(PersistError::Corrupt { offset, .. }) => assert_eq!(offset, SEGMENT_HEADER_LEN as u64),
        Err(e) => panic!("{e}"),
        Ok((_, report)) => panic!("opened: {report:?}"),
    }
    assert!(fs::read(work.join(&seg_name(1))).unwrap() == seg);
}

#[test]
fn a_record_at_or_below_its_segments_start_index_is_corrupt() {
    // A first segment's header says it starts after index 5: a record at 5 (or below)
    // cannot have been written into it. Before, such a record passed for "already in
    // the snapshot" and was skipped in silence.
    let node = |n: &str| Command::UpsertNode {
        node: schedstate::model::Node::new(n, n),
    };
    let work = TempDir::new("below-start");
    for forged in [5, 3] {
        let seg = craft_segment(1, 5, &[(forged, node("forged")), (6, node("n6"))]);
        let layout = BTreeMap::from([(seg_name(1), seg)]);
        reset_dir(work.path(), &layout);
        // With no snapshot the header's start index 5 is itself a gap; add one at 5.
        let e = expect_err(open_ro(work.path()), "record below the segment start");
        assert!(
            matches!(
                &e,
                PersistError::Corrupt { .. } | PersistError::MissingSegment { .. }
            ),
            "{e}"
        );
        assert_same_files(&files(work.path()), &layout, "read-only open");
    }

    // Beside a snapshot at the segment's start index, so only the record is wrong.
    let fx = Fixture::new("below-start-snap", 112, 20, 0);
    let snap_index = fx.accepted[fx.in_snapshot - 1].0;
    let mut layout = fx.files();
    layout.retain(|name, _| !name.starts_with("wal-"));
    let mut records = vec![(snap_index, node("forged"))];
    records.extend(fx.accepted[fx.in_snapshot..].iter().cloned());
    layout.insert(seg_name(1), craft_segment(1, snap_index, &records));
    reset_dir(fx.dir.path(), &layout);
    let e = expect_err(open_ro(fx.dir.path()), "record at the segment start");
    match &e {
        PersistError::Corrupt { offset, reason, .. } => {
            assert_eq!(*offset, SEGMENT_HEADER_LEN as u64);
            assert!(reason.contains("segment's header"), "{reason}");
        }
        e => panic!("{e}"),
    }
    assert_same_files(&files(fx.dir.path()), &layout, "read-only open");
    let e = expect_err(open_rw(fx.dir.path()), "read-write");
    assert!(matches!(e, PersistError::Corrupt { .. }), "{e}");
    assert_same_files(&files(fx.dir.path()), &layout, "refused read-write open");

    // Without the forged record the same directory opens with everything.
    let mut layout = fx.files();
    layout.retain(|name, _| !name.starts_with("wal-"));
    layout.insert(
        seg_name(1),
        craft_segment(1, snap_index, &fx.accepted[fx.in_snapshot..]),
    );
    reset_dir(fx.dir.path(), &layout);
    let (_, report) = open_ro(fx.dir.path()).expect("opens");
    assert_eq!(report.last_applied, fx.accepted.last().expect("records").0);
}
