//! The flusher thread: one fsync for every append that arrived while the previous one
//! ran, then openraft told which entries are durable; and the committed pointer, kept
//! no further than what is durable.

use std::sync::atomic::Ordering;
use std::sync::mpsc;

use openraft::LogId;
use openraft::storage::LogFlushed;
use schedstate::persist::segment;

use super::Shared;
use crate::{NodeId, TypeConfig};

/// What the flusher thread is asked to do.
pub(super) enum FlushMsg {
    /// Fsync what has been appended, then tell openraft.
    Flush(LogFlushed<TypeConfig>),
    /// openraft reported a new committed log id: record it (no fsync).
    Committed,
}

pub(super) struct Committed {
    /// The last committed log id openraft reported.
    pub(super) reported: Option<LogId<NodeId>>,
    /// The last entry the log had written when its latest fsync began (durable since).
    pub(super) durable: Option<LogId<NodeId>>,
}

impl Committed {
    /// The newest entry that is both committed and durable here: the reported
    /// committed id if the log has made it durable, else the last durable entry if
    /// that lies before it (entries up to a committed index are committed too, and
    /// are never truncated).
    fn durable_committed(&self) -> Option<LogId<NodeId>> {
        match (self.reported, self.durable) {
            (Some(c), Some(d)) if c.index <= d.index => Some(c),
            (Some(_), Some(d)) => Some(d),
            _ => None,
        }
    }
}

/// The flusher: one fsync for every append that arrived while the previous one ran.
///
/// After each fsync, and when openraft reports a new committed log id, it also
/// updates the committed pointer (no fsync of its own; see `committed.rs`).
pub(super) fn flush_loop(shared: &std::sync::Weak<Shared>, rx: &mpsc::Receiver<FlushMsg>) {
    while let Ok(first) = rx.recv() {
        let mut batch = Vec::new();
        for msg in std::iter::once(first).chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            if let FlushMsg::Flush(cb) = msg {
                batch.push(cb);
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if batch.is_empty() {
            shared.record_committed();
            continue;
        }
        let (handle, last) = {
            let log = shared.log.lock();
            let last = log.entries.back().map(|e| e.log_id);
            let handle = match &log.poisoned {
                Some(why) => Err(std::io::Error::other(format!(
                    "the raft log is poisoned: {why}"
                ))),
                None => log.writer.sync_handle().map_err(std::io::Error::other),
            };
            (handle, last)
        };
        let result = handle.and_then(|(file, path)| {
            segment::sync_file(&file, &path).map_err(std::io::Error::other)
        });
        shared.fsyncs.fetch_add(1, Ordering::Relaxed);
        match &result {
            Err(e) => shared.log.lock().poisoned = Some(e.to_string()),
            Ok(()) => {
                // Everything written before the fsync began is durable now.
                shared.committed.lock().durable = last;
                shared.record_committed();
            }
        }
        let n = batch.len() as u64;
        for cb in batch {
            let r = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            };
            cb.log_io_completed(r);
        }
        shared.flushes.lock().1 += n;
        shared.flushed.notify_all();
    }
}

impl Shared {
    /// Writes the committed pointer if it moved (flusher thread only).
    pub(super) fn record_committed(&self) {
        let id = self.committed.lock().durable_committed();
        if let Some(id) = id {
            self.committed_file.lock().write(id);
        }
    }
}
