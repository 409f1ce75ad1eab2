//! The last phases: one writer and one reader at once (`concurrent_writer`,
//! `concurrent_reader`), then memory while a snapshot is held (`memory_snapshot_held`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::alloc_counter::{mib, rss_bytes, settled_live_bytes};
use crate::flags::Flags;
use crate::report::{Reporter, ns};
use crate::splitmix::SplitMix64;
use crate::store::{Ctx, upsert_toggle, verify};

/// Runs the last phases in the peer's order.
pub fn run(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    rep.mark();
    concurrent(ctx, rep, f);
    verify(ctx, "after_concurrent");
    rep.mark();
    memory_snapshot_held(ctx, rep, f);
    verify(ctx, "final");
}

/// h. `concurrent_writer` and `concurrent_reader`: `upsert_toggle` and point reads on
/// two threads for `-concurrent-secs`.
fn concurrent(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    let ds = Arc::clone(&ctx.ds);
    let stop = AtomicBool::new(false);
    let secs = Duration::from_secs_f64(f.concurrent_secs.max(0.0));
    let (w, rd) = thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut r = SplitMix64(6001);
            let mut idx = ctx.idx;
            let t0 = Instant::now();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                upsert_toggle(&ctx.store, &ds, &mut idx, &mut r);
                n += 1;
            }
            (n, t0.elapsed(), idx)
        });
        let reader = s.spawn(|| {
            let mut r = SplitMix64(6002);
            let n_allocs = ds.alloc_ids.len();
            let t0 = Instant::now();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let snap = ctx.store.snapshot();
                // Borrowed, as the peer's `First` hands out a pointer.
                let a = snap.view().alloc_ref(&ds.alloc_ids[r.intn(n_allocs)]);
                assert!(a.is_some(), "concurrent: missing alloc");
                n += 1;
            }
            (n, t0.elapsed())
        });
        thread::sleep(secs);
        stop.store(true, Ordering::Relaxed);
        (
            writer.join().expect("writer thread"),
            reader.join().expect("reader thread"),
        )
    });
    let (w_ops, w_el, idx) = w;
    ctx.idx = idx;
    let (r_ops, r_el) = rd;
    rep.emit(
        "concurrent_writer",
        ns(w_el) / w_ops.max(1) as f64,
        w_ops,
        &[("txns_per_s", (w_ops as f64 / w_el.as_secs_f64()).round())],
    );
    rep.emit(
        "concurrent_reader",
        ns(r_el) / r_ops.max(1) as f64,
        r_ops,
        &[("reads_per_s", (r_ops as f64 / r_el.as_secs_f64()).round())],
    );
}

/// i. `memory_snapshot_held`: live bytes before, during and after `-mem-txns` writes
/// under a held snapshot.
fn memory_snapshot_held(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    let ds = Arc::clone(&ctx.ds);
    let before = settled_live_bytes(&ctx.store);
    let rss_before = rss_bytes();
    let snap = ctx.store.snapshot();
    let held_index = snap.view().last_applied();
    let mut r = SplitMix64(7001);
    for _ in 0..f.mem_txns {
        upsert_toggle(&ctx.store, &ds, &mut ctx.idx, &mut r);
    }
    let held = settled_live_bytes(&ctx.store);
    let rss_held = rss_bytes();
    // The snapshot still sees the world before those writes.
    assert_eq!(snap.view().last_applied(), held_index, "snapshot moved");
    assert!(snap.view().node(&ds.node_ids[0]).is_some(), "snapshot lost");
    drop(snap);
    let released = settled_live_bytes(&ctx.store);
    let rss_released = rss_bytes();
    rep.emit(
        "memory_snapshot_held",
        0.0,
        f.mem_txns as u64,
        &[
            ("heap_alloc_before_mib", mib(before)),
            ("heap_alloc_with_snapshot_mib", mib(held)),
            ("heap_alloc_after_release_mib", mib(released)),
            (
                "snapshot_retained_alloc_mib",
                ((mib(held) - mib(released)) * 100.0).round() / 100.0,
            ),
            ("rss_before_mib", mib(rss_before)),
            ("rss_with_snapshot_mib", mib(rss_held)),
            ("rss_after_release_mib", mib(rss_released)),
        ],
    );
}
