//! The durable store: a [`StateStore`] whose accepted writes survive a crash.
//!
//! A data directory holds at most one snapshot (`snapshot-<index>.snap`), the log
//! segments written since (`wal-<seq>.log`) and a `LOCK` file. Opening loads the
//! snapshot, replays the records after its index, truncates a torn tail, and takes an
//! exclusive lock so that a second process cannot write. Compaction cuts a consistent
//! point (the writer pauses only to take an O(1) snapshot and start a new segment),
//! then writes the snapshot and deletes what it covers in the background.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::state::writes::typed_writes;
use crate::state::{Command, Commit, StateReader, StateSnapshot, StateStore};

use super::batch::{Request, Slot, WriteQueue};
use super::error::{PersistError, Result};
use super::fs;
use super::lock::DirLock;
use super::recover::recover;
pub use super::recover::{OpenReport, TornTail};
use super::segment::{AppendError, SegmentWriter};
use super::wal::{self, EncodedCommand, SEGMENT_HEADER_LEN, create_segment};

mod compact;

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
    /// Writes waiting for a leader to apply them (`batch.rs`).
    queue: WriteQueue,
    /// Why the store refuses writes, once a failure left it unable to promise
    /// durability (see `ARCHITECTURE.md`, "When the disk fails").
    poisoned: Mutex<Option<String>>,
    _lock: DirLock,
}

/// Commits waiting for a shared fsync (group commit).
struct GroupSync {
    state: Mutex<GroupState>,
    done: Condvar,
}

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
        let permissions_fixed = fs::make_owner_only(&dir)?;
        for path in &permissions_fixed {
            tracing::warn!(path = %path.display(), "other users could read this; made it owner-only");
        }
        let lock = DirLock::acquire(&dir)?;

        // Nothing below destroys anything recovery needs: a failed step leaves the
        // directory as it found it, or halfway through a repair the next open redoes.
        let recovered = recover(&dir)?;
        for tmp in &recovered.listing.temporaries {
            fs::remove_file(tmp)?;
        }
        let last_applied = recovered.report.last_applied;
        let writer = match recovered.tail.clone() {
            Some((seq, path, len, last, torn_header, older)) => {
                if torn_header {
                    fs::remove_file(&path)?;
                    create_segment(&dir, seq, last_applied)?
                } else if older {
                    // A segment of an older format is read, never appended to: records
                    // of this build go to a new segment after it (a torn tail is cut
                    // first, so the older segment ends on a whole record).
                    if recovered.report.torn_tail.is_some() {
                        let file = fs::open_append(&path)?;
                        fs::set_len(&file, &path, len)?;
                        fs::sync_all(&file, &path)?;
                        tracing::warn!(path = %path.display(), offset = len, "truncated a torn log record");
                    }
                    create_segment(&dir, seq + 1, last)?
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
            None => create_segment(&dir, 1, last_applied)?,
        };
        let logged = writer.len().saturating_sub(SEGMENT_HEADER_LEN);
        // Everything found on open was made durable above.
        let group = GroupSync {
            state: Mutex::new(GroupState {
                synced: (writer.seq(), writer.len()),
                syncing: false,
            }),
            done: Condvar::new(),
        };
        let inner = Inner {
            dir,
            store: recovered.store,
            options,
            wal: Mutex::new(writer),
            logged: Mutex::new(logged),
            group,
            compacting: Arc::new(AtomicBool::new(false)),
            compactor: Mutex::new(None),
            queue: WriteQueue::default(),
            poisoned: Mutex::new(None),
            _lock: lock,
        };
        tracing::info!(
            dir = %inner.dir.display(),
            last_applied,
            replayed = recovered.report.replayed,
            "opened data directory"
        );
        let mut report = recovered.report;
        report.permissions_fixed = permissions_fixed;
        Ok((
            DurableStore {
                inner: Arc::new(inner),
            },
            report,
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
    /// log (the write is then abandoned: not applied, not logged), or
    /// [`PersistError::Poisoned`] after an earlier failure.
    pub fn apply(&self, index: u64, command: &Command) -> Result<Commit> {
        self.write(Some(index), command.clone())
    }

    /// Like [`apply`](Self::apply), taking the command by value: its nodes and
    /// allocations become the stored rows without a copy. The log record is encoded
    /// before the command is applied (applying consumes it) and written, as with
    /// `apply`, only if the state rules accept the command.
    ///
    /// # Errors
    /// As [`apply`](Self::apply).
    pub fn apply_owned(&self, index: u64, command: Command) -> Result<Commit> {
        self.write(Some(index), command)
    }

    /// Applies `command` at the next log index — one past the last accepted write,
    /// assigned under the writer lock — and logs it; [`Commit::index`] says which. For
    /// writers that share a store and let it number their writes: concurrent callers
    /// share fsyncs (group commit) under both [`SyncPolicy::EveryCommit`] and
    /// [`SyncPolicy::Group`].
    ///
    /// ```
    /// use schedstate::model::Node;
    /// use schedstate::{Command, DurableStore, Options};
    ///
    /// let dir = std::env::temp_dir().join(format!("schedstate-next-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let (db, _) = DurableStore::open(&dir, Options::default()).unwrap();
    /// let a = db.apply_next(Command::UpsertNode { node: Node::new("n1", "client-1") }).unwrap();
    /// let b = db.apply_next(Command::UpsertNode { node: Node::new("n2", "client-2") }).unwrap();
    /// assert_eq!((a.index(), b.index()), (1, 2));
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`apply`](Self::apply) (never a stale index).
    pub fn apply_next(&self, command: Command) -> Result<Commit> {
        self.write(None, command)
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

    /// One write, through the write queue (`batch.rs`): the leader of the moment
    /// applies and logs a batch of queued writes, each staged (committed, not yet
    /// visible), then makes the batch durable and publishes it in the order the sync
    /// policy says (see `ARCHITECTURE.md`, "Group commit").
    fn write(&self, index: Option<u64>, command: Command) -> Result<Commit> {
        self.refuse_if_poisoned()?;
        let encoded = EncodedCommand::new(&command)?;
        let request = Request {
            index,
            command,
            encoded,
        };
        self.inner.queue.submit(
            request,
            |batch| self.apply_batch(batch),
            |applied| self.finish_batch(applied),
        )
    }

    /// Applies and logs a batch of queued writes in turn (the leader's job, under the
    /// writer lock one at a time); a write the rules refuse is answered at once.
    fn apply_batch(&self, batch: Vec<Arc<Slot>>) -> AppliedBatch {
        let mut staged = Vec::with_capacity(batch.len());
        let (mut end, mut last_seq) = ((0, 0), None);
        for slot in batch {
            let Some(request) = slot.take() else {
                continue;
            };
            let mut logged_at = (0, 0);
            let applied = self.refuse_if_poisoned().and_then(|()| {
                self.inner
                    .store
                    .apply_staged(request.index, Cow::Owned(request.command), |index| {
                        self.log(&mut logged_at, |wal| {
                            wal::append(wal, index, &request.encoded)
                        })
                    })
            });
            match applied {
                Ok((commit, seq)) => {
                    end = end.max(logged_at);
                    last_seq = Some(seq);
                    staged.push((slot, commit));
                }
                Err(e) => slot.complete(Err(e)),
            }
        }
        AppliedBatch {
            staged,
            end,
            last_seq,
        }
    }

    /// Makes an applied batch durable and visible, and tells each writer its result.
    fn finish_batch(&self, applied: AppliedBatch) {
        let AppliedBatch {
            staged,
            end,
            last_seq,
        } = applied;
        let durable = match last_seq {
            None => Ok(()),
            Some(seq) => self.make_durable(end, seq),
        };
        if durable.is_ok()
            && let Err(e) = self.maybe_compact()
        {
            // The batch is durable and visible: its writers succeeded. A compaction
            // that could not start is retried by the next write (and if it poisoned
            // the store, the next write says so).
            tracing::error!(error = %e, "could not start a compaction");
        }
        let mut failure = durable.err();
        for (slot, commit) in staged {
            match failure.take() {
                // The first writer gets the error itself, the others what it did.
                Some(e) => {
                    let shared = echo(&e);
                    slot.complete(Err(e));
                    failure = Some(shared);
                }
                None => slot.complete(Ok(commit)),
            }
        }
    }

    /// Makes the log durable through `end` and the staged versions through `seq`
    /// visible, in the order the sync policy says.
    fn make_durable(&self, end: (u64, u64), seq: u64) -> Result<()> {
        let db = &self.inner.store;
        match self.inner.options.sync {
            SyncPolicy::EveryCommit => {
                self.sync_through(end)?;
                db.publish_through(seq);
            }
            SyncPolicy::Group => {
                db.publish_through(seq);
                self.sync_through(end)?;
            }
            SyncPolicy::Never => {
                db.publish_through(seq);
            }
        }
        Ok(())
    }

    /// The hook of a write, under the writer lock: appends its record, remembering
    /// where it ended. A failed append is cut back and the store carries on; an append
    /// that cannot be cut back poisons it.
    fn log(
        &self,
        logged_at: &mut (u64, u64),
        append: impl FnOnce(&mut SegmentWriter) -> std::result::Result<u64, AppendError>,
    ) -> Result<()> {
        let inner = &*self.inner;
        let mut wal = inner.wal.lock();
        // Checked again under the log's lock: a writer poisoned while this one applied
        // its command must not append after the damage.
        self.refuse_if_poisoned()?;
        let before = wal.len();
        let end = match append(&mut wal) {
            Ok(end) => end,
            Err(AppendError { error, poisoned }) => {
                if poisoned {
                    self.poison(&error);
                }
                return Err(error);
            }
        };
        *logged_at = (wal.seq(), end);
        *inner.logged.lock() += end - before;
        Ok(())
    }

    /// Starts a compaction when the log has grown enough.
    fn maybe_compact(&self) -> Result<()> {
        let inner = &*self.inner;
        let logged = *inner.logged.lock();
        if logged >= inner.options.compact_after_bytes
            && let Some(result) = self.start_compaction(true)
        {
            result?;
        }
        Ok(())
    }

    /// Waits until the log is durable through `at` (segment, offset), fsyncing for
    /// everyone waiting if nobody else is: the fsyncs of concurrent writers are shared.
    ///
    /// The fsyncing writer pauses writers just long enough to read how far the log
    /// goes and which staged version that is, consistently (every appended record is
    /// staged under the writer lock); after the fsync it publishes through that
    /// version (under `EveryCommit`, this is when those writes become visible). If the
    /// fsync fails, what the disk holds after the last good fsync is unknown: the log
    /// is cut back there, the staged versions are discarded (never published), and the
    /// store poisoned; every waiter gets the error.
    fn sync_through(&self, at: (u64, u64)) -> Result<()> {
        if self.inner.options.sync == SyncPolicy::Never {
            return Ok(());
        }
        let g = &self.inner.group;
        let mut state = g.state.lock();
        loop {
            if state.synced >= at {
                return Ok(());
            }
            self.refuse_if_poisoned()?;
            if !state.syncing {
                break;
            }
            g.done.wait(&mut state);
        }
        state.syncing = true;
        drop(state);
        let db = &self.inner.store;
        let (target, tip, handle) = {
            let _pause = db.pause_writes();
            let wal = self.inner.wal.lock();
            ((wal.seq(), wal.len()), db.staged_tip(), wal.sync_handle())
        };
        let synced = handle.and_then(|(f, path)| fs::sync_data(&f, &path));
        match &synced {
            Ok(()) => {
                if let Some(tip) = tip {
                    db.publish_through(tip);
                }
            }
            Err(e) => self.fail_sync(e),
        }
        let mut state = g.state.lock();
        state.syncing = false;
        if synced.is_ok() && target > state.synced {
            state.synced = target;
        }
        g.done.notify_all();
        drop(state);
        synced?;
        // The fsync covered some target; if it was not ours (an append came after it
        // read the log's end), sync again.
        self.sync_through(at)
    }

    /// After a failed fsync: cut the log back to what the last good fsync made durable
    /// (best effort), drop the staged versions, poison the store.
    fn fail_sync(&self, error: &PersistError) {
        self.poison(error);
        if self.inner.options.sync != SyncPolicy::EveryCommit {
            // Under `Group` the writes were published already: readers keep them, and
            // a reopen finds on disk whatever the kernel kept.
            return;
        }
        let db = &self.inner.store;
        {
            let _pause = db.pause_writes();
            let synced = self.inner.group.state.lock().synced;
            let mut wal = self.inner.wal.lock();
            if synced.0 == wal.seq() && synced.1 >= SEGMENT_HEADER_LEN {
                let last = wal.last_index();
                let _ = wal.cut_back(synced.1, last);
            }
        }
        // Takes the writer lock itself: a writer that appended before the poison
        // finishes staging first, and is discarded with the rest.
        db.discard_staged();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = self.compactor.get_mut().take() {
            let _ = h.join();
        }
    }
}

/// An error for the other writers of a batch whose sync failed: the same I/O error
/// (rebuilt: `io::Error` does not clone), or what poisoned the store.
fn echo(e: &PersistError) -> PersistError {
    match e {
        PersistError::Io { path, source } => PersistError::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        PersistError::NoSpace { path } => PersistError::NoSpace { path: path.clone() },
        other => PersistError::Poisoned {
            cause: other.to_string(),
        },
    }
}

/// A batch applied by its leader, waiting to be made durable.
struct AppliedBatch {
    staged: Vec<(Arc<Slot>, Commit)>,
    end: (u64, u64),
    last_seq: Option<u64>,
}
