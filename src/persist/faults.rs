//! Fault injection for the persistence layer's file operations (feature
//! `fault-injection`; without it none of this is compiled and every check is an
//! inlined `Ok(())`).
//!
//! Every operation `persist` performs that can change what is on disk goes through
//! the seam in `fs.rs`, which asks `check` first. A test scopes a `Faults` handle
//! to one data directory — tests running in parallel in one process each get their
//! own — and either counts the operations a workload performs there or makes the
//! `n`-th one of a kind fail (once, or from then on, as a full disk does).
//!
//! ```
//! # #[cfg(feature = "fault-injection")] {
//! use schedstate::persist::faults::{Faults, FaultKind, Op};
//! let dir = std::env::temp_dir().join("schedstate-faults-doc");
//! let faults = Faults::scope(&dir);
//! faults.fail(Op::Sync, 1, FaultKind::Io); // the first fsync under `dir` fails
//! # }
//! ```

#[cfg(feature = "fault-injection")]
pub use enabled::*;

/// A file operation the persistence layer performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Creating (or truncating) a file for writing; opening one to append or to cut.
    Create,
    /// Writing bytes (a log record, a segment header, a snapshot chunk).
    Write,
    /// Flushing a file to disk (`fsync`/`fdatasync`).
    Sync,
    /// Flushing a directory, so that names created, renamed or removed in it last.
    SyncDir,
    /// Renaming a file into place.
    Rename,
    /// Removing a file.
    Remove,
    /// Cutting a file to a length.
    SetLen,
    /// Creating a directory.
    CreateDir,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 8] = [
        Op::Create,
        Op::Write,
        Op::Sync,
        Op::SyncDir,
        Op::Rename,
        Op::Remove,
        Op::SetLen,
        Op::CreateDir,
    ];
}

/// How an injected fault fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// An I/O error (`EIO`).
    Io,
    /// The disk is full (`ENOSPC`).
    NoSpace,
    /// For [`Op::Write`]: half of the bytes are written, then `EIO` (a short write).
    /// Other operations fail as [`Io`](FaultKind::Io).
    Short,
}

/// What the seam does with one operation.
#[derive(Debug)]
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub(crate) enum Verdict {
    /// Go ahead.
    Proceed,
    /// Fail with this error without doing anything.
    Fail(std::io::Error),
    /// Write only this many bytes, then fail with this error.
    Short(usize, std::io::Error),
}

/// Asks whether `op` on `path` (writing `len` bytes, for a write) may go ahead.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn check(_op: Op, _path: &std::path::Path, _len: usize) -> Verdict {
    Verdict::Proceed
}

#[cfg(feature = "fault-injection")]
mod enabled {
    use std::collections::BTreeMap;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

    use super::{FaultKind, Op, Verdict};

    /// What one scope has seen and what it will do.
    #[derive(Default)]
    struct State {
        counts: BTreeMap<Op, u64>,
        armed: Option<Armed>,
        injected: u64,
    }

    struct Armed {
        op: Op,
        /// Fails the operation with this count (1-based, counted from arming).
        nth: u64,
        seen: u64,
        kind: FaultKind,
        /// Keeps failing from the `nth` on (a full disk), instead of once.
        sticky: bool,
    }

    struct Scope {
        dir: PathBuf,
        state: Mutex<State>,
    }

    static SCOPES: Mutex<Vec<Arc<Scope>>> = Mutex::new(Vec::new());

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        // A test that panicked while holding the lock leaves plain data behind.
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fault injection for the files under one directory, until dropped.
    pub struct Faults {
        scope: Arc<Scope>,
    }

    impl Faults {
        /// Watches every operation on a path under `dir` (compared as given: use the
        /// same spelling of the path as the store). Nothing fails until armed.
        pub fn scope(dir: &Path) -> Faults {
            let scope = Arc::new(Scope {
                dir: dir.to_path_buf(),
                state: Mutex::new(State::default()),
            });
            lock(&SCOPES).push(Arc::clone(&scope));
            Faults { scope }
        }

        /// Makes the `nth` operation `op` from now (1-based) fail, once.
        pub fn fail(&self, op: Op, nth: u64, kind: FaultKind) {
            self.arm(op, nth, kind, false);
        }

        /// Makes every operation `op` fail from the `nth` one on (a full disk), until
        /// [`clear`](Self::clear).
        pub fn fail_from(&self, op: Op, nth: u64, kind: FaultKind) {
            self.arm(op, nth, kind, true);
        }

        fn arm(&self, op: Op, nth: u64, kind: FaultKind, sticky: bool) {
            lock(&self.scope.state).armed = Some(Armed {
                op,
                nth,
                seen: 0,
                kind,
                sticky,
            });
        }

        /// Stops failing (the disk has space again).
        pub fn clear(&self) {
            lock(&self.scope.state).armed = None;
        }

        /// How many operations of each kind ran (or were refused) under the directory.
        pub fn counts(&self) -> BTreeMap<Op, u64> {
            lock(&self.scope.state).counts.clone()
        }

        /// How many faults were injected.
        pub fn injected(&self) -> u64 {
            lock(&self.scope.state).injected
        }
    }

    impl Drop for Faults {
        fn drop(&mut self) {
            lock(&SCOPES).retain(|s| !Arc::ptr_eq(s, &self.scope));
        }
    }

    fn error(kind: FaultKind) -> io::Error {
        match kind {
            FaultKind::NoSpace => io::Error::new(
                io::ErrorKind::StorageFull,
                "injected: no space left on device",
            ),
            FaultKind::Io | FaultKind::Short => io::Error::other("injected: I/O error"),
        }
    }

    pub(crate) fn check(op: Op, path: &Path, len: usize) -> Verdict {
        let scope = {
            let scopes = lock(&SCOPES);
            match scopes.iter().find(|s| path.starts_with(&s.dir)) {
                Some(s) => Arc::clone(s),
                None => return Verdict::Proceed,
            }
        };
        let mut state = lock(&scope.state);
        *state.counts.entry(op).or_default() += 1;
        let Some(armed) = state.armed.as_mut().filter(|a| a.op == op) else {
            return Verdict::Proceed;
        };
        armed.seen += 1;
        let fires = if armed.sticky {
            armed.seen >= armed.nth
        } else {
            armed.seen == armed.nth
        };
        if !fires {
            return Verdict::Proceed;
        }
        let kind = armed.kind;
        state.injected += 1;
        match kind {
            FaultKind::Short if op == Op::Write && len > 1 => Verdict::Short(len / 2, error(kind)),
            _ => Verdict::Fail(error(kind)),
        }
    }
}
