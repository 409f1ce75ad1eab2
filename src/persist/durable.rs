//! The durable store: a [`StateStore`] whose accepted writes survive a crash.
//!
//! A data directory holds at most one snapshot (`snapshot-<index>.snap`), the log
//! segments written since (`wal-<seq>.log`) and a `LOCK` file. Opening loads the
//! snapshot, replays the records after its index, truncates a torn tail, and takes an
//! exclusive lock so that a second process cannot write. Compaction cuts a consistent
//! point (the writer pauses only to take an O(1) snapshot and start a new segment),
//! then writes the snapshot and deletes what it covers in the background.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::state::writes::typed_writes;
use crate::state::{Command, Commit, StateReader, StateSnapshot, StateStore};

use super::data_dir::snapshot_name;
use super::error::{PersistError, Result};
use super::fs;
use super::lock::DirLock;
pub use super::recover::{OpenReport, TornTail};
use super::recover::{list, recover};
use super::snapshot::write_snapshot;
use super::wal::{AppendError, EncodedRecord, SEGMENT_HEADER_LEN, SegmentWriter, segment_path};

/// When a commit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every write is fsynced before `apply` returns (and before it is visible).
    #[default]
    EveryCommit,
    /// Writes are fsynced before `apply` returns, but concurrent writers share one
    /// fsync. A write becomes visible to readers a moment before it is durable.
    Group,
    /// Never fsync (tests, or state that is replicated anyway). A crash may lose the
    /// writes the operating system had not yet flushed.
    Never,
}

/// How to open a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// When commits are made durable.
    pub sync: SyncPolicy,
    /// Compact once the log written since the last snapshot passes this many bytes.
    pub compact_after_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync: SyncPolicy::EveryCommit,
            compact_after_bytes: 64 << 20,
        }
    }
}

/// Shared state of a durable store.
struct Inner {
    dir: PathBuf,
    store: StateStore,
    options: Options,
    wal: Mutex<SegmentWriter>,
    /// Bytes logged since the last snapshot.
    logged: Mutex<u64>,
    group: GroupSync,
    compacting: Arc<AtomicBool>,
    compactor: Mutex<Option<JoinHandle<Result<()>>>>,
    /// Why the store refuses writes, once a failure left it unable to promise
    /// durability (see `ARCHITECTURE.md`, "When the disk fails").
    poisoned: Mutex<Option<String>>,
    _lock: DirLock,
}

/// Commits waiting for a shared fsync (group commit).
#[derive(Default)]
struct GroupSync {
    state: Mutex<GroupState>,
    done: Condvar,
}

#[derive(Default)]
struct GroupState {
    /// (segment, offset) known durable.
    synced: (u64, u64),
    syncing: bool,
}

/// A store whose accepted writes survive a crash. It has the same door as
/// [`StateStore`]: [`apply`](Self::apply), [`apply_owned`](Self::apply_owned) and the
/// typed write methods, each of which logs the command before anyone can see it;
/// reads go through [`snapshot`](Self::snapshot) and [`reader`](Self::reader). Its
/// state changes in no other way.
///
/// ```
/// use schedstate::model::Node;
/// use schedstate::{DurableStore, Options};
///
/// let dir = std::env::temp_dir().join(format!("schedstate-doc-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// {
///     let (db, _report) = DurableStore::open(&dir, Options::default()).unwrap();
///     db.upsert_node(1, Node::new("n1", "client-1")).unwrap();
/// }
/// let (db, report) = DurableStore::open(&dir, Options::default()).unwrap();
/// assert_eq!(report.last_applied, 1);
/// assert!(db.snapshot().view().node("n1").is_some());
/// # drop(db);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Clone)]
pub struct DurableStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DurableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableStore")
            .field("dir", &self.inner.dir)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl DurableStore {
    /// Opens (creating if needed) the data directory `dir` for reading and writing.
    ///
    /// # Errors
    /// [`PersistError::Locked`] if another process has it open, and any corruption
    /// found, named with its file and offset.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<(DurableStore, OpenReport)> {
        let dir = dir.as_ref().to_path_buf();
        if dir.exists() && !dir.is_dir() {
            return Err(PersistError::NotADirectory { path: dir });
        }
        fs::create_dir_all(&dir)?;
        let lock = DirLock::acquire(&dir)?;

        // Nothing below destroys anything recovery needs: a failed step leaves the
        // directory as it found it, or halfway through a repair the next open redoes.
        let recovered = recover(&dir)?;
        for tmp in &recovered.listing.temporaries {
            fs::remove_file(tmp)?;
        }
        let last_applied = recovered.report.last_applied;
        let writer = match recovered.tail.clone() {
            Some((seq, path, len, last, torn_header)) => {
                if torn_header {
                    fs::remove_file(&path)?;
                    SegmentWriter::create(&dir, seq, last_applied)?
                } else {
                    if recovered.report.torn_tail.is_some() {
                        let file = fs::open_append(&path)?;
                        fs::set_len(&file, &path, len)?;
                        fs::sync_all(&file, &path)?;
                        tracing::warn!(path = %path.display(), offset = len, "truncated a torn log record");
                    }
                    let writer = SegmentWriter::reopen(path, seq, len, last)?;
                    // Records replayed from the page cache may not be on disk yet
                    // (written, not synced, before a crash): make them durable before
                    // anything new depends on them.
                    writer.sync()?;
                    writer
                }
            }
            None => SegmentWriter::create(&dir, 1, last_applied)?,
        };
        let logged = writer.len.saturating_sub(SEGMENT_HEADER_LEN);
        let inner = Inner {
            dir,
            store: recovered.store,
            options,
            wal: Mutex::new(writer),
            logged: Mutex::new(logged),
            group: GroupSync::default(),
            compacting: Arc::new(AtomicBool::new(false)),
            compactor: Mutex::new(None),
            poisoned: Mutex::new(None),
            _lock: lock,
        };
        tracing::info!(
            dir = %inner.dir.display(),
            last_applied,
            replayed = recovered.report.replayed,
            "opened data directory"
        );
        Ok((
            DurableStore {
                inner: Arc::new(inner),
            },
            recovered.report,
        ))
    }

    /// Loads the state of `dir` without taking the lock or changing any file (a torn
    /// tail is reported, not truncated). For inspection tools: the result is a plain
    /// in-memory store.
    ///
    /// # Errors
    /// [`PersistError::NotADirectory`] if `dir` is missing, and any corruption found.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<(StateStore, OpenReport)> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(PersistError::NotADirectory {
                path: dir.to_path_buf(),
            });
        }
        let recovered = recover(dir)?;
        Ok((recovered.store, recovered.report))
    }

    /// The read side: snapshots and blocking queries, to hand to code that must not
    /// write.
    pub fn reader(&self) -> &StateReader {
        self.inner.store.reader()
    }

    /// The current version, O(1).
    pub fn snapshot(&self) -> StateSnapshot {
        self.inner.store.snapshot()
    }

    /// The in-memory store underneath (feature `unstable-internals`): writes through
    /// it skip the log.
    #[cfg(feature = "unstable-internals")]
    pub fn store(&self) -> &StateStore {
        &self.inner.store
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Applies `command` at `index` and logs it; returns once it is durable under the
    /// sync policy. A command the state rules refuse is not logged.
    ///
    /// # Errors
    /// The command's [`StateError`](crate::state::StateError), or an I/O error of the
    /// log (the write is then abandoned: not applied, not logged).
    pub fn apply(&self, index: u64, command: &Command) -> Result<Commit> {
        self.refuse_if_poisoned()?;
        let mut logged_at = (0, 0);
        let info = self.inner.store.apply_with(index, command, || {
            self.log(&mut logged_at, |wal| wal.append(index, command))
        })?;
        self.settle(logged_at)?;
        Ok(info)
    }

    /// Like [`apply`](Self::apply), taking the command by value: its nodes and
    /// allocations become the stored rows without a copy. The log record is encoded
    /// before the command is applied (applying consumes it) and written, as with
    /// `apply`, only if the state rules accept the command.
    ///
    /// # Errors
    /// As [`apply`](Self::apply).
    pub fn apply_owned(&self, index: u64, command: Command) -> Result<Commit> {
        self.refuse_if_poisoned()?;
        let record = EncodedRecord::new(index, &command)?;
        let mut logged_at = (0, 0);
        let info = self.inner.store.apply_owned_with(index, command, || {
            self.log(&mut logged_at, |wal| wal.append_encoded(index, &record))
        })?;
        self.settle(logged_at)?;
        Ok(info)
    }

    typed_writes!(PersistError);

    /// Why the store refuses writes, if an earlier failure poisoned it.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.poisoned.lock().clone()
    }

    fn refuse_if_poisoned(&self) -> Result<()> {
        match &*self.inner.poisoned.lock() {
            Some(cause) => Err(PersistError::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Makes the store refuse every later write (the first cause is kept).
    fn poison(&self, cause: &PersistError) {
        let mut poisoned = self.inner.poisoned.lock();
        if poisoned.is_none() {
            tracing::error!(error = %cause, "the store refuses writes until it is reopened");
            *poisoned = Some(cause.to_string());
        }
    }

    /// The `before_publish` hook of a write: appends its record (and fsyncs under
    /// `EveryCommit`), remembering where it ended for the group sync.
    ///
    /// A failed write is cut back and the store carries on; a failed fsync poisons it
    /// (after one, what the kernel will write back is unknown), after cutting the
    /// record off so that a reopen does not find a write its caller saw fail.
    fn log(
        &self,
        logged_at: &mut (u64, u64),
        append: impl FnOnce(&mut SegmentWriter) -> std::result::Result<u64, AppendError>,
    ) -> Result<()> {
        let inner = &*self.inner;
        let mut wal = inner.wal.lock();
        // Checked again under the log's lock: a writer that was poisoned while this one
        // applied its command must not append after the damage.
        self.refuse_if_poisoned()?;
        let (before, before_index) = (wal.len, wal.last_index);
        let end = match append(&mut wal) {
            Ok(end) => end,
            Err(AppendError { error, poisoned }) => {
                if poisoned {
                    self.poison(&error);
                }
                return Err(error);
            }
        };
        if inner.options.sync == SyncPolicy::EveryCommit
            && let Err(error) = wal.sync()
        {
            let _ = wal.cut_back(before);
            wal.last_index = before_index;
            self.poison(&error);
            return Err(error);
        }
        *logged_at = (wal.seq, end);
        *inner.logged.lock() += end - before;
        Ok(())
    }

    /// After a write is published: waits for its group sync, starts a compaction when
    /// the log has grown enough.
    fn settle(&self, logged_at: (u64, u64)) -> Result<()> {
        let inner = &*self.inner;
        if inner.options.sync == SyncPolicy::Group {
            self.group_sync(logged_at)?;
        }
        let logged = *inner.logged.lock();
        if logged >= inner.options.compact_after_bytes
            && let Some(result) = self.start_compaction(true)
        {
            result?;
        }
        Ok(())
    }

    /// Waits until the log is durable up to `at`, fsyncing for everyone waiting if
    /// nobody else is.
    fn group_sync(&self, at: (u64, u64)) -> Result<()> {
        let g = &self.inner.group;
        let mut state = g.state.lock();
        loop {
            if state.synced >= at {
                return Ok(());
            }
            if !state.syncing {
                break;
            }
            g.done.wait(&mut state);
        }
        if let Some(cause) = self.inner.poisoned.lock().clone() {
            return Err(PersistError::Poisoned { cause });
        }
        state.syncing = true;
        drop(state);
        let (target, handle) = {
            let wal = self.inner.wal.lock();
            ((wal.seq, wal.len), wal.sync_handle())
        };
        let synced = handle.and_then(|(f, path)| fs::sync_data(&f, &path));
        if let Err(e) = &synced {
            // Writes readers have seen may not be on disk: no later write may build
            // on them. Their callers get this error (never an acknowledgement).
            self.poison(e);
        }
        let mut state = g.state.lock();
        state.syncing = false;
        if synced.is_ok() && target > state.synced {
            state.synced = target;
        }
        g.done.notify_all();
        drop(state);
        // A waiter woken by a failed sync finds its target not reached and the store
        // poisoned.
        synced
    }

    /// Writes a snapshot now and deletes the log it covers; waits for it.
    ///
    /// # Errors
    /// I/O errors writing the snapshot or removing old files.
    pub fn compact(&self) -> Result<()> {
        loop {
            // A background compaction may start between the wait and ours: then wait
            // for it too, and try again.
            self.wait_for_compaction()?;
            if let Some(result) = self.start_compaction(false) {
                return result;
            }
            std::thread::yield_now();
        }
    }

    /// Waits for a background compaction, if one is running, and returns its result.
    ///
    /// # Errors
    /// The compaction's error.
    pub fn wait_for_compaction(&self) -> Result<()> {
        let handle = self.inner.compactor.lock().take();
        match handle {
            Some(h) => h.join().unwrap_or(Err(PersistError::CompactionPanicked)),
            None => Ok(()),
        }
    }

    /// Cuts a consistent point — writers pause while the O(1) snapshot is taken and a
    /// new segment started — then writes the snapshot and removes what it covers,
    /// on a thread if `background`.
    /// Returns `None` if a compaction was already running (nothing started).
    fn start_compaction(&self, background: bool) -> Option<Result<()>> {
        let inner = &self.inner;
        if inner.compacting.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(self.compact_now(background))
    }

    fn compact_now(&self, background: bool) -> Result<()> {
        let inner = &self.inner;
        let cut = (|| -> Result<(StateSnapshot, u64)> {
            let (pause, snap) = inner.store.pause_writes();
            let mut wal = inner.wal.lock();
            self.refuse_if_poisoned()?;
            if let Err(e) = wal.sync() {
                self.poison(&e);
                return Err(e);
            }
            let seq = wal.seq + 1;
            let next = match SegmentWriter::create(&inner.dir, seq, snap.view().last_applied()) {
                Ok(next) => next,
                Err(e) => {
                    // The log goes on in the current segment, unless the new one could
                    // not be removed: records after it in the old one would be out of
                    // order for recovery.
                    if segment_path(&inner.dir, seq).exists() {
                        self.poison(&e);
                    }
                    return Err(e);
                }
            };
            *wal = next;
            *inner.logged.lock() = 0;
            drop(wal);
            drop(pause);
            Ok((snap, seq))
        })();
        let (snap, first_kept) = match cut {
            Ok(cut) => cut,
            Err(e) => {
                inner.compacting.store(false, Ordering::Release);
                return Err(e);
            }
        };
        let dir = inner.dir.clone();
        let flag = Arc::clone(&inner.compacting);
        let job = move || {
            let result = write_and_prune(&dir, &snap, first_kept);
            flag.store(false, Ordering::Release);
            if let Err(e) = &result {
                tracing::error!(error = %e, "compaction failed");
            }
            result
        };
        if background {
            // The slot stays locked from the join to the store of the new handle, so a
            // handle is never overwritten and `wait_for_compaction` and `Drop` always
            // see the running compaction.
            let mut slot = inner.compactor.lock();
            if let Some(h) = slot.take() {
                let _ = h.join();
            }
            match std::thread::Builder::new()
                .name("schedstate-compact".into())
                .spawn(job)
            {
                Ok(handle) => {
                    *slot = Some(handle);
                    Ok(())
                }
                Err(source) => {
                    inner.compacting.store(false, Ordering::Release);
                    Err(PersistError::Io {
                        path: inner.dir.clone(),
                        source,
                    })
                }
            }
        } else {
            job()
        }
    }
}

/// Writes the snapshot of `snap`, then removes older snapshots and the segments before
/// `first_kept`.
///
/// Any failure leaves the directory openable: until the new snapshot is in place (and
/// its directory fsynced) nothing is removed, and afterwards every file left over is
/// one recovery skips (an older snapshot, a segment the snapshot covers).
fn write_and_prune(dir: &Path, snap: &StateSnapshot, first_kept: u64) -> Result<()> {
    let index = snap.view().last_applied();
    let path = dir.join(snapshot_name(index));
    fs::write_atomically(&path, |out| write_snapshot(snap, out, &path).map(|_| ()))?;
    let listing = list(dir)?;
    for (i, old) in &listing.snapshots {
        if *i < index {
            fs::remove_file(old)?;
        }
    }
    for (seq, old) in &listing.segments {
        if *seq < first_kept {
            fs::remove_file(old)?;
        }
    }
    fs::sync_dir(dir)?;
    tracing::info!(index, "compacted");
    Ok(())
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = self.compactor.get_mut().take() {
            let _ = h.join();
        }
    }
}
