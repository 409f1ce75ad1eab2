//! `fsync_floor`: what one durable append costs on the disk the servers' logs are on,
//! measured in the same run — the floor under a one-client commit.
//!
//! A replicated commit with one client waits for two fsyncs one after the other (the
//! leader's own append, then the followers' in parallel; openraft hands an entry to
//! replication after the leader's flush) plus the messages between them, so one
//! client cannot commit faster than one write per two fsyncs. The probe writes as the
//! log does: small records into space already filled with zeros (`PREALLOCATE` in the
//! segment framing), each followed by `fdatasync`.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use crate::report::{Reporter, pct, signed_ns, us};

/// The probe's appends.
const APPENDS: usize = 400;
/// One append: about a one-command entry.
const RECORD: usize = 512;

/// Runs the probe in `dir` (the servers' data directory's disk) and reports it.
pub fn fsync_floor(dir: &Path, rep: &mut Reporter) {
    let path = dir.join("fsync-floor.probe");
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
    let record = vec![0xA5u8; RECORD];
    let mut took = Vec::with_capacity(APPENDS);
    for i in 0..APPENDS {
        let t0 = Instant::now();
        file.write_all_at(&record, (i * RECORD) as u64)
            .expect("fsync_floor: append");
        file.sync_data().expect("fsync_floor: fdatasync");
        took.push(signed_ns(Instant::now(), t0));
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    let p50 = pct(&took, 0.5);
    // Two fsyncs in a row per one-client commit, nothing else counted.
    let floor_commits = if p50 > 0 {
        1e9 / (2.0 * p50 as f64)
    } else {
        0.0
    };
    rep.emit(
        "fsync_floor",
        p50 as f64,
        APPENDS as u64,
        &[
            ("p50_us", us(p50)),
            ("p99_us", us(pct(&took, 0.99))),
            ("one_client_commits_per_s_at_most", floor_commits.round()),
        ],
    );
}
