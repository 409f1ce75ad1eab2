//! `fsync_floor`: what one durable append costs on the disk the servers' logs are on,
//! measured in the same run — the floor under a one-client commit.
//!
//! A replicated commit with one client waits for two fsyncs one after the other (the
//! leader's own append, then the followers' in parallel; openraft hands an entry to
//! replication after the leader's flush) plus the messages between them. The probe
//! writes as the log does: small records into space already filled with zeros
//! (`PREALLOCATE` in the segment framing), each followed by `fdatasync`.
//!
//! It measures both steps. `p50_us` is one append alone (the leader's). `pair_p50_us`
//! is two appends to two files started together, until both are durable: the two
//! followers, which here share the leader's one disk (in a real cluster each server
//! has its own, and the second step costs what the first does). So one client cannot
//! commit faster than one write per `p50_us + pair_p50_us` on this machine.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use crate::report::{Reporter, pct, signed_ns, us};

/// The probe's appends.
const APPENDS: usize = 400;
/// One append: about a one-command entry.
const RECORD: usize = 512;

/// A probe file of `APPENDS` records' worth of zeros, durable, and its path.
fn probe_file(path: PathBuf) -> (File, PathBuf) {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("fsync_floor: probe file");
    let zeros = vec![0u8; APPENDS * RECORD];
    file.write_all_at(&zeros, 0)
        .expect("fsync_floor: zero fill");
    file.sync_all().expect("fsync_floor: sync the fill");
    (file, path)
}

/// Append `i` of a probe: one record over the zeros, then `fdatasync`.
fn append(file: &File, i: usize) {
    let record = [0xA5u8; RECORD];
    file.write_all_at(&record, (i * RECORD) as u64)
        .expect("fsync_floor: append");
    file.sync_data().expect("fsync_floor: fdatasync");
}

/// One append at a time to one file: the time of each.
fn alone(dir: &Path) -> Vec<i64> {
    let (file, path) = probe_file(dir.join("fsync-floor.probe"));
    let mut took = Vec::with_capacity(APPENDS);
    for i in 0..APPENDS {
        let t0 = Instant::now();
        append(&file, i);
        took.push(signed_ns(Instant::now(), t0));
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    took
}

/// Appends to two files by two threads, each pair started together: the time from
/// the first start to the last end (the waits that line the pairs up not counted).
fn paired(dir: &Path) -> Vec<i64> {
    let files: Vec<(File, PathBuf)> = (0..2)
        .map(|k| probe_file(dir.join(format!("fsync-floor-{k}.probe"))))
        .collect();
    let start = Barrier::new(2);
    let spans: Vec<Vec<(Instant, Instant)>> = std::thread::scope(|s| {
        let threads: Vec<_> = files
            .iter()
            .map(|(file, _)| {
                let start = &start;
                s.spawn(move || {
                    (0..APPENDS)
                        .map(|i| {
                            start.wait();
                            let t0 = Instant::now();
                            append(file, i);
                            (t0, Instant::now())
                        })
                        .collect()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("fsync_floor: a probe thread panicked"))
            .collect()
    });
    let took = (0..APPENDS)
        .map(|i| {
            let first = spans.iter().map(|s| s[i].0).min().expect("two threads");
            let last = spans.iter().map(|s| s[i].1).max().expect("two threads");
            signed_ns(last, first)
        })
        .collect();
    for (file, path) in files {
        drop(file);
        let _ = std::fs::remove_file(&path);
    }
    took
}

/// Runs the probe in `dir` (the servers' data directory's disk) and reports it.
pub fn fsync_floor(dir: &Path, rep: &mut Reporter) {
    let alone = alone(dir);
    let paired = paired(dir);
    let (p50, pair_p50) = (pct(&alone, 0.5), pct(&paired, 0.5));
    // The leader's fsync, then the followers' together, nothing else counted.
    let floor_commits = if p50 + pair_p50 > 0 {
        1e9 / (p50 + pair_p50) as f64
    } else {
        0.0
    };
    rep.emit(
        "fsync_floor",
        p50 as f64,
        APPENDS as u64,
        &[
            ("p50_us", us(p50)),
            ("p99_us", us(pct(&alone, 0.99))),
            ("pair_p50_us", us(pair_p50)),
            ("pair_p99_us", us(pct(&paired, 0.99))),
            ("one_client_commits_per_s_at_most", floor_commits.round()),
        ],
    );
}
