//! Durability under I/O faults: every file operation the persistence layer performs
//! (create, write, short write, fsync, directory fsync, rename, remove, set_len,
//! create dir) fails in turn at every point of a scripted workload — log appends,
//! segment rolls, snapshot writes, compactions, reopens, restores — and then:
//!
//! - the directory opens (without faults), always;
//! - it holds every acknowledged write and nothing else: the state equals a replay of
//!   exactly the commands whose `apply` returned `Ok`;
//! - the store that saw the fault either carried on (a failed append is cut back, a
//!   failed compaction leaves the log as it was) or refused every later write with
//!   `Poisoned` (after a failed fsync, or a log it could not cut back) while its reads
//!   went on;
//! - a full disk (`ENOSPC`) is a clear `NoSpace` error that frees nothing the store
//!   needs, and writes work again once there is space.
//!
//! The matrix visits every point of each operation of one scripted workload, under
//! both sync policies that fsync; a proptest mixes random command streams, compaction
//! rhythms and faults. Larger runs: `SCHEDSTATE_FAULT_SEEDS=20` runs the matrix over
//! that many command streams, `PROPTEST_CASES=500` the proptest.

use std::collections::BTreeMap;

use schedstate::persist::faults::{FaultKind, Faults, Op};
use schedstate::persist::{DurableStore, PersistError, SyncPolicy, restore_data_dir};
use schedstate::state::Command;

use crate::support::persist::{Gen, options, replay_bytes, snapshot_bytes};
use crate::support::{TempDir, assert_invariants, canonical};

/// Commands in the scripted workload.
const COMMANDS: usize = 40;
/// A compaction after every this many commands (explicit, so the order of operations
/// is the same in every run).
const COMPACT_EVERY: usize = 12;
/// The store is closed and reopened after this many commands.
const REOPEN_AT: usize = 20;

fn seeds() -> u64 {
    std::env::var("SCHEDSTATE_FAULT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// The shape of one workload run.
#[derive(Debug, Clone, Copy)]
struct Script {
    seed: u64,
    sync: SyncPolicy,
    commands: usize,
    compact_every: usize,
    reopen_at: usize,
}

impl Script {
    fn new(seed: u64, sync: SyncPolicy) -> Script {
        Script {
            seed,
            sync,
            commands: COMMANDS,
            compact_every: COMPACT_EVERY,
            reopen_at: REOPEN_AT,
        }
    }
}

/// What a run of the workload did.
#[derive(Default)]
struct Run {
    /// The commands whose apply returned `Ok`, at their indexes.
    acknowledged: Vec<(u64, Command)>,
    /// Every I/O-side error returned (rule refusals are not counted).
    errors: Vec<PersistError>,
    /// A write whose caller got an I/O error after readers could see it (a failed
    /// group fsync): it may or may not be on disk.
    uncertain: Option<(u64, Command)>,
    /// The store poisoned itself.
    poisoned: bool,
}

/// Opens `dir`, applies the scripted workload (retrying a write that failed once, at
/// the same index, as a caller would), compacts now and then, closes and reopens
/// halfway. Stops early if the store poisons itself or cannot be (re)opened.
fn workload(dir: &std::path::Path, script: Script) -> Run {
    let mut run = Run::default();
    let opts = options(script.sync, u64::MAX);
    let mut g = Gen::new(script.seed);
    let mut db = match DurableStore::open(dir, opts.clone()) {
        Ok((db, _)) => db,
        Err(e) => {
            run.errors.push(e);
            return run;
        }
    };
    for step in 1..=script.commands {
        let (index, cmd) = g.next();
        for attempt in 0..2 {
            match db.apply(index, &cmd) {
                Ok(_) => {
                    run.acknowledged.push((index, cmd.clone()));
                    break;
                }
                Err(PersistError::State(_)) => break,
                Err(e) => {
                    let poisoned = matches!(e, PersistError::Poisoned { .. });
                    run.errors.push(e);
                    if poisoned || db.poisoned().is_some() {
                        run.poisoned = true;
                        // Reads of the published state go on. Under `EveryCommit` the
                        // failed write was never published; under `Group` it was (its
                        // fsync failed after), and may or may not be on disk.
                        let seen = db.snapshot().view().last_applied();
                        match script.sync {
                            SyncPolicy::Group if seen == index => {
                                run.uncertain = Some((index, cmd.clone()));
                            }
                            _ => assert!(seen < index, "a failed write was published"),
                        }
                        return run;
                    }
                    assert_eq!(attempt, 0, "a retry after a cut-back append failed again");
                }
            }
        }
        if step % script.compact_every == 0
            && let Err(e) = db.compact()
        {
            run.errors.push(e);
            if db.poisoned().is_some() {
                run.poisoned = true;
                return run;
            }
        }
        if step == script.reopen_at {
            drop(db);
            db = match DurableStore::open(dir, opts.clone()) {
                Ok((db, _)) => db,
                Err(e) => {
                    run.errors.push(e);
                    return run;
                }
            };
        }
    }
    if let Err(e) = db.wait_for_compaction() {
        run.errors.push(e);
    }
    run
}

/// Reopens `dir` without faults and checks it holds exactly what `run` acknowledged,
/// then that it takes writes again.
fn check_reopens(dir: &std::path::Path, run: &Run, what: &str) {
    let (db, report) = DurableStore::open(dir, options(SyncPolicy::EveryCommit, u64::MAX))
        .unwrap_or_else(|e| panic!("{what}: the directory does not open after the fault: {e}"));
    let got = db
        .snapshot()
        .canonical_bytes()
        .expect("canonical bytes encode");
    let mut expected = replay_bytes(&run.acknowledged);
    if got != expected
        && let Some(uncertain) = &run.uncertain
    {
        // Published, then its fsync failed: on disk or not, both are right.
        let mut with = run.acknowledged.clone();
        with.push(uncertain.clone());
        expected = replay_bytes(&with);
    }
    assert!(
        got == expected,
        "{what}: the reopened state is not exactly the acknowledged writes \
         ({} acknowledged, last applied {}, errors {:?})",
        run.acknowledged.len(),
        report.last_applied,
        run.errors
    );
    let next = report.last_applied + 1;
    db.upsert_node(next, schedstate::model::Node::new("after-fault", "client"))
        .unwrap_or_else(|e| panic!("{what}: a write after reopening failed: {e}"));
}

/// How many operations of each kind the workload performs, without faults.
fn census(script: Script) -> BTreeMap<Op, u64> {
    let dir = TempDir::absent("faults-census");
    let faults = Faults::scope(dir.path());
    let run = workload(dir.path(), script);
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    let counts = faults.counts();
    drop(faults);
    check_reopens(dir.path(), &run, "census");
    counts
}

/// Runs `script` with one fault, then checks the directory; returns whether the store
/// poisoned itself.
fn one_fault(script: Script, op: Op, nth: u64, kind: FaultKind) -> bool {
    let what = format!("{script:?}: {op:?} #{nth} ({kind:?})");
    let dir = TempDir::absent("faults");
    let faults = Faults::scope(dir.path());
    faults.fail(op, nth, kind);
    let run = workload(dir.path(), script);
    if faults.injected() == 1 {
        assert!(!run.errors.is_empty(), "{what}: the fault went unreported");
    }
    drop(faults);
    check_reopens(dir.path(), &run, &what);
    run.poisoned
}

#[test]
fn every_fault_at_every_point_leaves_a_directory_that_opens_with_every_acknowledged_write() {
    for seed in 0..seeds() {
        for sync in [SyncPolicy::EveryCommit, SyncPolicy::Group] {
            let script = Script::new(7 + seed, sync);
            let counts = census(script);
            for op in [
                Op::Create,
                Op::Write,
                Op::Sync,
                Op::SyncDir,
                Op::Rename,
                Op::Remove,
            ] {
                let n = counts.get(&op).copied().unwrap_or(0);
                assert!(n > 0, "the workload never does {op:?}: {counts:?}");
            }
            let (mut cases, mut poisoned) = (0, 0);
            for (&op, &count) in &counts {
                let kinds: &[FaultKind] = if op == Op::Write {
                    &[FaultKind::Io, FaultKind::Short]
                } else {
                    &[FaultKind::Io]
                };
                for &kind in kinds {
                    for nth in 1..=count {
                        poisoned += usize::from(one_fault(script, op, nth, kind));
                        cases += 1;
                    }
                }
            }
            assert!(cases > 100, "only {cases} cases");
            // Failed fsyncs poison; failed appends and compactions do not: both rules
            // ran.
            assert!(
                poisoned > 0 && poisoned < cases,
                "{poisoned} of {cases} poisoned"
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    /// Random command streams, compaction and reopen rhythms, and one fault of any
    /// kind at any point: the directory always opens with exactly the acknowledged
    /// writes.
    #[test]
    fn random_streams_with_a_fault_anywhere_keep_every_acknowledged_write(
        seed in 0u64..1_000,
        commands in 5usize..40,
        compact_every in 2usize..15,
        reopen_at in 1usize..40,
        group in proptest::bool::ANY,
        op in proptest::sample::select(Op::ALL.to_vec()),
        nth in 1u64..60,
        kind in proptest::sample::select(vec![FaultKind::Io, FaultKind::Short, FaultKind::NoSpace]),
    ) {
        let sync = if group { SyncPolicy::Group } else { SyncPolicy::EveryCommit };
        let script = Script { seed, sync, commands, compact_every, reopen_at };
        one_fault(script, op, nth, kind);
    }
}

#[test]
fn a_failed_fsync_poisons_the_store_and_reads_go_on() {
    let dir = TempDir::absent("faults-fsync");
    let faults = Faults::scope(dir.path());
    let (db, _) =
        DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX)).expect("open");
    let mut g = Gen::new(3);
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 5 {
        let (index, cmd) = g.next();
        if db.apply(index, &cmd).is_ok() {
            acknowledged.push((index, cmd));
        }
    }
    let before = canonical_of(&db);
    faults.fail(Op::Sync, 1, FaultKind::Io);
    let (index, cmd) = loop {
        let (index, cmd) = g.next();
        if schedstate::StateStore::new().apply(index, &cmd).is_ok()
            || matches!(cmd, Command::UpsertNode { .. })
        {
            break (index, cmd);
        }
    };
    let cmd = match cmd {
        Command::UpsertNode { .. } => cmd,
        _ => Command::UpsertNode {
            node: schedstate::model::Node::new("n-fsync", "client"),
        },
    };
    let err = db.apply(index, &cmd).expect_err("the fsync fails");
    assert!(matches!(err, PersistError::Io { .. }), "{err}");
    assert_eq!(canonical_of(&db), before, "the failed write was published");
    assert!(db.poisoned().is_some());
    // Every later write is refused, with the cause; reads go on.
    let err = db
        .upsert_node(index + 1, schedstate::model::Node::new("later", "client"))
        .expect_err("poisoned");
    assert!(matches!(err, PersistError::Poisoned { .. }), "{err}");
    assert!(err.to_string().contains("injected"), "{err}");
    assert_eq!(
        db.snapshot().view().last_applied(),
        acknowledged.last().expect("some").0
    );
    drop(db);
    drop(faults);
    let run = Run {
        acknowledged,
        ..Run::default()
    };
    check_reopens(dir.path(), &run, "after a failed fsync");
}

fn canonical_of(db: &DurableStore) -> Vec<u8> {
    db.snapshot()
        .canonical_bytes()
        .expect("canonical bytes encode")
}

#[test]
fn a_full_disk_is_a_clear_error_and_writes_resume_when_space_returns() {
    let dir = TempDir::absent("faults-enospc");
    let faults = Faults::scope(dir.path());
    let (db, _) =
        DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX)).expect("open");
    let node = |name: &str| schedstate::model::Node::new(name, "client");
    db.upsert_node(1, node("n1")).expect("write");
    let size_before = dir_size(dir.path());

    // The disk fills up: every write fails from now on.
    faults.fail_from(Op::Write, 1, FaultKind::NoSpace);
    for index in 2..5 {
        let err = db.upsert_node(index, node("n2")).expect_err("disk full");
        assert!(matches!(err, PersistError::NoSpace { .. }), "{err}");
        assert!(err.to_string().contains("no space left on device"), "{err}");
        assert!(db.poisoned().is_none(), "a full disk does not poison");
    }
    // A compaction needs space too: it fails cleanly and removes nothing.
    assert!(db.compact().is_err());
    assert!(db.poisoned().is_none());
    assert!(
        dir_size(dir.path()) <= size_before,
        "a failed write left bytes behind"
    );
    assert_eq!(db.snapshot().view().last_applied(), 1);

    // Space returns: the same write at the same index now succeeds, and so does
    // compaction.
    faults.clear();
    db.upsert_node(2, node("n2"))
        .expect("write after space returned");
    db.compact().expect("compaction after space returned");
    drop(db);
    drop(faults);
    let (db, report) =
        DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX)).expect("reopen");
    assert_eq!(report.last_applied, 2);
    assert!(db.snapshot().view().node("n2").is_some());
}

fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

#[test]
fn a_retried_append_after_a_short_write_leaves_one_record() {
    // A short write leaves half a record; the store cuts it back, and a caller
    // retrying at the same index writes exactly one record (recovery refuses two).
    for (op, kind) in [(Op::Write, FaultKind::Short), (Op::Write, FaultKind::Io)] {
        let dir = TempDir::absent("faults-short");
        let faults = Faults::scope(dir.path());
        let (db, _) = DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX))
            .expect("open");
        db.upsert_node(1, schedstate::model::Node::new("n1", "client"))
            .expect("write");
        faults.fail(op, 1, kind);
        let n2 = || schedstate::model::Node::new("n2", "client");
        db.upsert_node(2, n2()).expect_err("the write fails");
        assert!(db.poisoned().is_none(), "a cut-back append does not poison");
        db.upsert_node(2, n2())
            .expect("the retry at the same index");
        db.upsert_node(3, schedstate::model::Node::new("n3", "client"))
            .expect("the next write");
        drop(db);
        drop(faults);
        let (db, report) =
            DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX))
                .expect("reopen");
        assert_eq!(report.last_applied, 3);
        assert_eq!(
            report.torn_tail, None,
            "{kind:?}: no partial record left behind"
        );
        assert_invariants_durable(&db);
    }
}

fn assert_invariants_durable(db: &DurableStore) {
    if let Err(e) = db.snapshot().view().check_invariants() {
        panic!("{e}");
    }
}

#[test]
fn a_restore_that_fails_leaves_the_old_state_or_the_new_one() {
    // A directory with some state, and a snapshot file of another state.
    let mut g = Gen::new(11);
    let other = schedstate::StateStore::new();
    let mut n = 0;
    while n < 10 {
        let (index, cmd) = g.next();
        n += usize::from(other.apply(index, &cmd).is_ok());
    }
    let file_dir = TempDir::new("faults-restore-file");
    let file = file_dir.join("other.snap");
    std::fs::write(&file, snapshot_bytes(&other)).expect("write snapshot file");

    let census_dir = TempDir::absent("faults-restore-census");
    let old = seeded_dir(census_dir.path());
    let counts = {
        let faults = Faults::scope(census_dir.path());
        restore_data_dir(census_dir.path(), &file).expect("restore");
        faults.counts()
    };
    for (&op, &count) in &counts {
        for nth in 1..=count {
            let what = format!("restore: {op:?} #{nth} of {count}");
            let dir = TempDir::absent("faults-restore");
            let old_bytes = {
                let old_state = seeded_dir(dir.path());
                assert_eq!(old_state, old);
                old_state
            };
            let faults = Faults::scope(dir.path());
            faults.fail(op, nth, FaultKind::Io);
            let result = restore_data_dir(dir.path(), &file);
            drop(faults);
            let (db, _) =
                DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX))
                    .unwrap_or_else(|e| {
                        panic!("{what}: the directory does not open: {e} (restore: {result:?})")
                    });
            let now = canonical_of(&db);
            match result {
                Ok(_) => assert_eq!(now, canonical(&other), "{what}: restored"),
                Err(_) => assert!(
                    now == old_bytes || now == canonical(&other),
                    "{what}: neither the old state nor the new one"
                ),
            }
        }
    }
}

/// Fills `dir` with a small durable state; returns its canonical bytes.
fn seeded_dir(dir: &std::path::Path) -> Vec<u8> {
    let (db, _) =
        DurableStore::open(dir, options(SyncPolicy::EveryCommit, u64::MAX)).expect("open");
    let mut g = Gen::new(5);
    let mut n = 0;
    while n < 8 {
        let (index, cmd) = g.next();
        n += usize::from(db.apply(index, &cmd).is_ok());
    }
    db.compact().expect("compact");
    db.upsert_node(1000, schedstate::model::Node::new("tail", "client"))
        .expect("tail write");
    let bytes = canonical_of(&db);
    assert_invariants(&schedstate::StateStore::new());
    bytes
}

#[test]
fn a_command_too_large_for_a_log_record_is_refused_cleanly() {
    let dir = TempDir::absent("faults-too-large");
    let (db, _) =
        DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX)).expect("open");
    db.upsert_node(1, schedstate::model::Node::new("n1", "client"))
        .expect("write");
    // Within the input rules (names up to 4 KiB, up to 100,000 nodes in one command),
    // over a log record's 64 MiB all together.
    let name = "x".repeat(schedstate::state::MAX_TEXT_BYTES);
    let huge: Vec<_> = (0..17_000)
        .map(|i| schedstate::model::Node::new(format!("big-{i}"), name.as_str()))
        .collect();
    let err = db.upsert_nodes(2, huge).expect_err("too large");
    assert!(
        matches!(
            err,
            PersistError::TooLarge {
                what: "a log record",
                ..
            }
        ),
        "{err}"
    );
    assert!(db.poisoned().is_none());
    assert_eq!(db.snapshot().view().last_applied(), 1, "not applied");
    db.upsert_node(2, schedstate::model::Node::new("n2", "client"))
        .expect("the next write");
    drop(db);
    let (_, report) =
        DurableStore::open(dir.path(), options(SyncPolicy::EveryCommit, u64::MAX)).expect("reopen");
    assert_eq!(report.last_applied, 2);
}
