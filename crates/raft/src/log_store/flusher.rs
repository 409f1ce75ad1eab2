//! The flusher thread: one fsync for every append that arrived while the previous one
//! ran, then openraft told which entries are durable; and the committed pointer, kept
//! no further than what is durable.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use openraft::LogId;
use openraft::storage::LogFlushed;
use schedstate::persist::segment;

use super::Shared;
use crate::{NodeId, TypeConfig};

/// A request to the flusher: fsync what has been appended, then tell openraft.
pub(super) type FlushRequest = LogFlushed<TypeConfig>;

/// How long the flusher waits after an fsync for the next request before it writes
/// the committed pointer on its own. Under load the next fsync writes it (openraft
/// reports an entry committed after its fsync, before the next one ends); this is
/// for the log going quiet. `save_committed` does not wake the thread: that was one
/// thread wake-up per commit on every server, a tenth of a one-client commit's CPU.
const POINTER_WHEN_IDLE: Duration = Duration::from_millis(20);

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
/// After each fsync, and once the log has been quiet for [`POINTER_WHEN_IDLE`] after
/// one, it also updates the committed pointer (no fsync of its own; see
/// `committed.rs`).
pub(super) fn flush_loop(shared: &std::sync::Weak<Shared>, rx: &mpsc::Receiver<FlushRequest>) {
    let mut pointer_behind = false;
    loop {
        let first = if pointer_behind {
            match rx.recv_timeout(POINTER_WHEN_IDLE) {
                Ok(first) => first,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    pointer_behind = false;
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    shared.record_committed();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match rx.recv() {
                Ok(first) => first,
                Err(mpsc::RecvError) => return,
            }
        };
        let batch: Vec<FlushRequest> = std::iter::once(first)
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
            .collect();
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let result = shared.sync_appended();
        if result.is_ok() {
            pointer_behind = true;
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
    /// Fsyncs what the log has written, then records it durable and writes the
    /// committed pointer; a failure poisons the log.
    pub(super) fn sync_appended(&self) -> std::io::Result<()> {
        let (handle, last) = {
            let log = self.log.lock();
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
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        match &result {
            Err(e) => self.log.lock().poisoned = Some(e.to_string()),
            Ok(()) => {
                // Everything written before the fsync began is durable now.
                self.committed.lock().durable = last;
                self.record_committed();
            }
        }
        result
    }

    /// Writes the committed pointer if it moved. Called from the flusher thread, and
    /// from `close` or the last handle's drop: `committed` stays locked through the
    /// write, so a pointer computed earlier is never written over a newer one.
    pub(super) fn record_committed(&self) {
        let committed = self.committed.lock();
        if let Some(id) = committed.durable_committed() {
            self.committed_file.lock().write(id);
        }
    }
}
