//! Counting global allocator: bytes currently allocated, in per-thread-slot shards so
//! that two busy threads (the concurrent phase) do not bounce one cache line. Also the
//! other memory figures: live bytes after reclaiming, the resident set, MiB.
//!
//! It counts on top of the allocator the including binary names as `crate::UNDERLYING`:
//! the store's workloads use the system allocator (a library cannot choose its users'
//! allocator), the replicated server's the one the `schedstate` binary runs on.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use schedstate::state::StateStore;

const SHARDS: usize = 16;

#[repr(align(64))]
struct Shard(AtomicIsize);

static LIVE: [Shard; SHARDS] = [const { Shard(AtomicIsize::new(0)) }; SHARDS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised, no destructor: safe to touch from inside the allocator.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> &'static AtomicIsize {
    let slot = SLOT
        .try_with(|s| {
            let mut v = s.get();
            if v == usize::MAX {
                v = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SHARDS;
                s.set(v);
            }
            v
        })
        .unwrap_or(0);
    &LIVE[slot].0
}

fn isize_of(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the underlying allocator; the counters are
// only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { crate::UNDERLYING.alloc(layout) };
        if !p.is_null() {
            shard().fetch_add(isize_of(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { crate::UNDERLYING.alloc_zeroed(layout) };
        if !p.is_null() {
            shard().fetch_add(isize_of(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { crate::UNDERLYING.dealloc(ptr, layout) };
        shard().fetch_sub(isize_of(layout.size()), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { crate::UNDERLYING.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shard().fetch_add(
                isize_of(new_size) - isize_of(layout.size()),
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live bytes once superseded versions that readers let go of have been freed: the
/// counterpart of the peer's `runtime.GC()` before it reads the heap (schedstate frees
/// such versions on the next write, or at once with `Db::reclaim`).
pub fn settled_live_bytes(store: &StateStore) -> u64 {
    store.reader().db().reclaim();
    live_bytes()
}

/// Bytes currently allocated by this process through the global allocator.
pub fn live_bytes() -> u64 {
    let sum: isize = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    u64::try_from(sum).unwrap_or(0)
}

/// Resident set size in bytes (from /proc/self/status), 0 if unavailable.
pub fn rss_bytes() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

pub fn mib(b: u64) -> f64 {
    (b as f64 / 1_048_576.0 * 100.0).round() / 100.0
}
