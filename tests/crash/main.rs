//! Crash test: a child process (this test binary, run again) applies generated
//! commands with an fsync per commit and prints each acknowledged index; the parent
//! kills it with SIGKILL at random moments — while it applies, while it compacts in the
//! background, while it recovers — sometimes also cuts unacknowledged bytes off the end
//! of the log (what a power cut could lose), reopens the directory and checks that every
//! acknowledged command is there and that the state is exactly a replay of the
//! command stream up to the recovered index.
//!
//! `SCHEDSTATE_CRASH_KILLS` sets the number of kill points (50 by default),
//! `SCHEDSTATE_CRASH_SEED` the seed. The long run:
//! `SCHEDSTATE_CRASH_KILLS=1000 cargo test --release --test crash -- --nocapture`.

#[allow(dead_code)]
#[path = "../store/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command as Process, Stdio};
use std::time::{Duration, Instant};

use schedstate::persist::{DurableStore, PersistError, SyncPolicy};
use schedstate::state::{Command, StateStore};
use support::persist::{Gen, apply_durable, apply_mem, fast, options};
use support::{TempDir, assert_invariants, canonical, last_applied};

/// Set in a child: the data directory to write to.
const CHILD_DIR: &str = "SCHEDSTATE_CRASH_CHILD";
/// Set in a child: the command stream's seed.
const CHILD_SEED: &str = "SCHEDSTATE_CRASH_CHILD_SEED";
/// Set in a child: `compact_after_bytes`.
const CHILD_COMPACT: &str = "SCHEDSTATE_CRASH_CHILD_COMPACT";
/// Set in a child: `every` or `group`.
const CHILD_SYNC: &str = "SCHEDSTATE_CRASH_CHILD_SYNC";
/// Set in a lock-holding child: the data directory to hold.
const LOCK_CHILD_DIR: &str = "SCHEDSTATE_LOCK_CHILD";

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

/// The writer run by the child process; returns at once in a normal test run.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let seed = env_u64(CHILD_SEED).expect("seed");
    let compact = env_u64(CHILD_COMPACT).expect("compaction threshold");
    let sync = match std::env::var(CHILD_SYNC).as_deref() {
        Ok("group") => SyncPolicy::Group,
        _ => SyncPolicy::EveryCommit,
    };
    let (db, report) = DurableStore::open(&dir, options(sync, compact))
        .unwrap_or_else(|e| panic!("child: open {dir}: {e}"));
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\nOPENED {}", report.last_applied).and_then(|()| out.flush());
    let mut g = Gen::new(seed);
    for _ in 0..10_000_000 {
        let (index, cmd) = g.next();
        if index <= report.last_applied {
            // Recovered already: skipped, as the parent's replay skips nothing.
            continue;
        }
        if apply_durable(&db, index, &cmd) {
            // Acknowledged: durable before this line is written.
            if writeln!(out, "\nACKED {index}")
                .and_then(|()| out.flush())
                .is_err()
            {
                return;
            }
        }
    }
}

/// Set in a concurrent child: the round, which makes its node ids unique.
const CHILD_ROUND: &str = "SCHEDSTATE_CRASH_ROUND";
/// Writer threads of a concurrent child.
const CHILD_WRITERS: usize = 8;

/// The concurrent writer run by the child process: writer threads share the store
/// through `apply_next` (group commit), each upserting new nodes and printing each
/// acknowledged node id; returns at once in a normal test run.
#[test]
fn concurrent_crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let round = env_u64(CHILD_ROUND).expect("round");
    let sync = match std::env::var(CHILD_SYNC).as_deref() {
        Ok("group") => SyncPolicy::Group,
        _ => SyncPolicy::EveryCommit,
    };
    let compact = env_u64(CHILD_COMPACT).expect("compaction threshold");
    let (db, _) = DurableStore::open(&dir, options(sync, compact))
        .unwrap_or_else(|e| panic!("child: open {dir}: {e}"));
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..CHILD_WRITERS)
        .map(|t| {
            let (db, out) = (db.clone(), std::sync::Arc::clone(&out));
            std::thread::spawn(move || {
                for i in 0..1_000_000 {
                    let id = format!("r{round}-t{t}-{i}");
                    let node = schedstate::model::Node::new(id.as_str(), "client");
                    let commit = db
                        .apply_next(Command::UpsertNode { node })
                        .expect("apply_next");
                    // Acknowledged: durable before this line is written.
                    let mut out = out
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if writeln!(out, "\nACKED {} {id}", commit.index())
                        .and_then(|()| out.flush())
                        .is_err()
                    {
                        return;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// Concurrent writers through group commit, killed with SIGKILL at random moments:
/// after each kill the directory opens, holds every acknowledged node, and its indexes
/// have no hole (each command upserts a new node, so the last applied index is the
/// number of nodes).
#[test]
fn concurrently_acknowledged_writes_survive_sigkill() {
    let kills = env_u64("SCHEDSTATE_CRASH_KILLS").unwrap_or(50) as usize / 2;
    let seed = env_u64("SCHEDSTATE_CRASH_SEED").unwrap_or(0x5EED_CAFE);
    let root = TempDir::new("crash-concurrent");
    let dir = root.join("data");
    let stderr = root.join("child.stderr");
    let mut rng = fastrand::Rng::with_seed(seed ^ 0xC0C0);
    let mut all_acked: Vec<String> = Vec::new();
    for round in 0..kills {
        let sync = if rng.bool() { "group" } else { "every" };
        let compact = if rng.bool() {
            rng.u64(2000..20_000)
        } else {
            1 << 20
        };
        let mut child = spawn_child(
            "concurrent_crash_child",
            &[
                (CHILD_DIR, dir.display().to_string()),
                (CHILD_ROUND, round.to_string()),
                (CHILD_COMPACT, compact.to_string()),
                (CHILD_SYNC, sync.to_string()),
            ],
            &stderr,
            Stdio::null(),
        );
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let want = rng.usize(1..=200);
        let mut acked = Vec::new();
        let mut line = String::new();
        let mut read = |out: &mut BufReader<ChildStdout>, acked: &mut Vec<String>, want: usize| {
            while acked.len() < want {
                line.clear();
                match out.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if let Some(rest) = line.trim().strip_prefix("ACKED ")
                    && let Some((_, id)) = rest.split_once(' ')
                {
                    acked.push(id.to_string());
                }
            }
        };
        read(&mut out, &mut acked, want);
        assert_eq!(
            acked.len(),
            want,
            "round {round}: the child stopped early:\n{}",
            child_stderr(&stderr)
        );
        std::thread::sleep(Duration::from_micros(rng.u64(0..3000)));
        child.kill().expect("kill");
        child.wait().expect("wait");
        read(&mut out, &mut acked, usize::MAX);
        all_acked.extend(acked);

        let (store, report) = DurableStore::open_read_only(&dir)
            .unwrap_or_else(|e| panic!("round {round}: the directory does not open: {e}"));
        let v = store.snapshot();
        for id in &all_acked {
            assert!(
                v.view().node(id).is_some(),
                "round {round}: acknowledged {id} lost"
            );
        }
        assert_eq!(
            report.last_applied,
            v.view().nodes().count() as u64,
            "round {round}: a hole in the indexes"
        );
        assert_invariants(&store);
    }
}

/// Holds a data directory open until stdin closes (for the cross-process lock test).
#[test]
fn lock_child() {
    let Ok(dir) = std::env::var(LOCK_CHILD_DIR) else {
        return;
    };
    let (_db, _) = DurableStore::open(&dir, fast()).expect("child: open");
    println!("\nHELD");
    std::io::stdout().flush().unwrap();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// Runs this test binary again as a child running only test `name`.
fn spawn_child(name: &str, envs: &[(&str, String)], stderr: &Path, stdin: Stdio) -> Child {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = Process::new(exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).expect("stderr file"));
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child")
}

/// The value after `tag ` on a line, if the line carries one.
fn tagged(line: &str, tag: &str) -> Option<u64> {
    let rest = line.trim().strip_prefix(tag)?;
    rest.trim().parse().ok()
}

/// Reads lines until `want` acknowledgements (or end of output); returns the acked
/// indexes and the index the child recovered to, if it said.
fn read_acks(
    out: &mut BufReader<ChildStdout>,
    want: usize,
    acked: &mut Vec<u64>,
    opened: &mut Option<u64>,
) {
    let mut line = String::new();
    while acked.len() < want {
        line.clear();
        match out.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(i) = tagged(&line, "ACKED") {
            acked.push(i);
        } else if let Some(i) = tagged(&line, "OPENED") {
            *opened = Some(i);
        }
    }
}

/// The file names in `dir` (empty if it does not exist).
fn layout(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn child_stderr(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// What the kill points hit, for the summary.
#[derive(Debug, Default)]
struct Tally {
    acks: usize,
    killed_before_first_ack: usize,
    torn_tails: usize,
    /// Kills that left a half-written snapshot (`.tmp`).
    killed_writing_snapshot: usize,
    /// Kills that left a compaction unfinished (a new segment or a new snapshot next
    /// to what it covers, or a `.tmp`), not there when the child started.
    killed_mid_compaction: usize,
    snapshots_loaded: usize,
    /// Rounds that also cut unacknowledged bytes off the log, and how many bytes.
    power_cuts: usize,
    bytes_cut: usize,
    compaction_rounds: usize,
    group_rounds: usize,
}

/// Truncates the last log segment at a random point after its records at or below
/// `floor`, as a power cut may lose unsynced writes; returns the bytes removed, if
/// any could be.
fn lose_unacknowledged_tail(dir: &Path, floor: u64, rng: &mut fastrand::Rng) -> Option<usize> {
    let last = crate::support::persist::segments(dir).pop()?;
    let bytes = std::fs::read(&last).unwrap();
    if bytes.len() < crate::support::persist::SEGMENT_HEADER_LEN {
        return None;
    }
    // Keep the header (created durable before any record) and every record up to the
    // floor.
    let keep = crate::support::persist::whole_records(&bytes)
        .iter()
        .filter(|r| record_index(&bytes, r) <= floor)
        .map(|r| r.end)
        .max()
        .unwrap_or(crate::support::persist::SEGMENT_HEADER_LEN);
    if keep >= bytes.len() {
        return None;
    }
    let cut = rng.usize(keep..bytes.len());
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    file.set_len(cut as u64).unwrap();
    Some(bytes.len() - cut)
}

/// Applies the reference stream up to `last` (inclusive) to `reference`.
fn advance(reference: &StateStore, g: &mut Gen, pending: &mut Option<(u64, Command)>, last: u64) {
    loop {
        let (index, cmd) = pending.take().unwrap_or_else(|| g.next());
        if index > last {
            *pending = Some((index, cmd));
            return;
        }
        apply_mem(reference, index, &cmd);
    }
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let kills = env_u64("SCHEDSTATE_CRASH_KILLS").unwrap_or(50) as usize;
    let seed = env_u64("SCHEDSTATE_CRASH_SEED").unwrap_or(0x5EED_CAFE);
    let root = TempDir::new("crash");
    let dir = root.join("data");
    let stderr = root.join("child.stderr");
    let mut rng = fastrand::Rng::with_seed(seed.rotate_left(17) ^ 0xA5A5);
    let reference = StateStore::new();
    let mut g = Gen::new(seed);
    let mut pending = None;
    let mut recovered = 0u64;
    let mut tally = Tally::default();
    let started = Instant::now();

    for round in 0..kills {
        let layout_at_spawn = layout(&dir);
        // Half the rounds compact every few commands, so that kills land in the
        // middle of compactions; a quarter share fsyncs through group commit.
        let compact = if rng.bool() {
            tally.compaction_rounds += 1;
            rng.u64(150..2000)
        } else {
            16 << 10
        };
        let sync = if rng.u32(..4) == 0 {
            tally.group_rounds += 1;
            "group"
        } else {
            "every"
        };
        // One round in ten kills before any acknowledgement: during recovery.
        let want = if rng.u32(..10) == 0 {
            0
        } else {
            rng.usize(1..=60)
        };
        let delay = Duration::from_micros(match rng.u32(..3) {
            0 => 0,
            1 => rng.u64(0..500),
            _ => rng.u64(0..4000),
        });

        let mut child = spawn_child(
            "crash_child",
            &[
                (CHILD_DIR, dir.display().to_string()),
                (CHILD_SEED, seed.to_string()),
                (CHILD_COMPACT, compact.to_string()),
                (CHILD_SYNC, sync.to_string()),
            ],
            &stderr,
            Stdio::null(),
        );
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut acked = Vec::new();
        let mut opened = None;
        read_acks(&mut out, want, &mut acked, &mut opened);
        if acked.len() < want {
            let status = child.wait().expect("wait");
            panic!(
                "round {round}: the child stopped after {} acks ({status}):\n{}",
                acked.len(),
                child_stderr(&stderr)
            );
        }
        std::thread::sleep(delay);
        child.kill().expect("kill");
        let status = child.wait().expect("wait");
        // Everything it printed before dying was acknowledged too.
        read_acks(&mut out, usize::MAX, &mut acked, &mut opened);
        {
            use std::os::unix::process::ExitStatusExt;
            assert!(
                status.signal() == Some(9) || status.success(),
                "round {round}: the child failed ({status}):\n{}",
                child_stderr(&stderr)
            );
        }
        if let Some(o) = opened {
            assert_eq!(o, recovered, "round {round}: the child recovered elsewhere");
        }
        tally.acks += acked.len();
        if acked.is_empty() {
            tally.killed_before_first_ack += 1;
        }
        assert!(
            acked.windows(2).all(|w| w[0] < w[1]),
            "round {round}: acks increase"
        );

        if !dir.is_dir() {
            // Killed before it even created the directory.
            assert!(acked.is_empty() && recovered == 0, "round {round}");
            continue;
        }
        // What the kill left behind.
        let at_kill = layout(&dir);
        let unfinished = at_kill.iter().any(|n| n.ends_with(".tmp"))
            || at_kill
                .iter()
                .filter(|n| n.starts_with("snapshot-"))
                .count()
                > 1
            || at_kill.iter().filter(|n| n.starts_with("wal-")).count() > 1;
        if at_kill.iter().any(|n| n.ends_with(".tmp")) {
            tally.killed_writing_snapshot += 1;
        }
        if unfinished && at_kill != layout_at_spawn {
            tally.killed_mid_compaction += 1;
        }

        // Half the rounds also lose what a power cut could: bytes of the last
        // segment after the last acknowledged record (written, never acknowledged) —
        // and after what the last recovery saw, so that the recovered index only grows.
        let floor = acked.last().copied().unwrap_or(0).max(recovered);
        if rng.bool()
            && let Some(cut) = lose_unacknowledged_tail(&dir, floor, &mut rng)
        {
            tally.power_cuts += 1;
            tally.bytes_cut += cut;
        }

        let (ro, ro_report) = DurableStore::open_read_only(&dir)
            .unwrap_or_else(|e| panic!("round {round}: read-only open: {e}"));
        let (db, report) = DurableStore::open(&dir, fast())
            .unwrap_or_else(|e| panic!("round {round}: reopen after the kill: {e}"));
        assert_eq!(
            ro_report, report,
            "round {round}: read-only and read-write agree"
        );
        assert!(canonical(&ro) == canonical(db.store()), "round {round}");
        let last = report.last_applied;
        if let Some(max) = acked.last() {
            assert!(
                *max <= last,
                "round {round}: index {max} was acknowledged but the store recovered to {last}"
            );
        }
        assert!(
            last >= recovered,
            "round {round}: went back from {recovered} to {last}"
        );
        advance(&reference, &mut g, &mut pending, last);
        assert_eq!(
            last_applied(&reference),
            last,
            "round {round}: the recovered index is that of an accepted command"
        );
        assert!(
            canonical(db.store()) == canonical(&reference),
            "round {round}: the state after recovery is not the replay of the stream up to {last}"
        );
        assert_invariants(db.store());
        tally.torn_tails += usize::from(report.torn_tail.is_some());
        tally.snapshots_loaded += usize::from(report.snapshot_index.is_some());
        recovered = last;
        drop(db);
    }
    eprintln!(
        "crash test: {kills} kills in {:.1?}, recovered to index {recovered}; {tally:?}",
        started.elapsed()
    );
    if kills >= 50 {
        assert!(tally.acks > kills, "{tally:?}");
        assert!(
            tally.compaction_rounds > 0 && tally.snapshots_loaded > 0,
            "{tally:?}"
        );
    }
}

#[test]
fn a_directory_held_by_another_process_is_locked() {
    let root = TempDir::new("lock-process");
    let dir: PathBuf = root.join("data");
    let stderr = root.join("child.stderr");
    let mut child = spawn_child(
        "lock_child",
        &[(LOCK_CHILD_DIR, dir.display().to_string())],
        &stderr,
        Stdio::piped(),
    );
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "the child did not open: {}", child_stderr(&stderr));
        if line.trim() == "HELD" {
            break;
        }
    }
    match DurableStore::open(&dir, fast()) {
        Err(PersistError::Locked { path }) => assert_eq!(path, dir.join("LOCK")),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a directory another process holds"),
    }
    DurableStore::open_read_only(&dir).expect("reading needs no lock");
    // The lock dies with its process, even killed.
    child.kill().unwrap();
    child.wait().unwrap();
    DurableStore::open(&dir, fast()).expect("open after the holder died");
}

/// The log index of a record of ours (a range from `whole_records`).
fn record_index(segment: &[u8], record: &std::ops::Range<usize>) -> u64 {
    let (index, _): (u64, Command) =
        postcard::from_bytes(&segment[record.start + 8..record.end]).expect("a record of ours");
    index
}
