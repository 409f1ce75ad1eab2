//! The read phases: snapshots and read transactions, point reads, the index scan, and
//! plugin denormalization (plain and through a watched view).

use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::Instant;

use schedstate::engine::WatchSet;
use schedstate::model::Id;

use crate::dataset::Dataset;
use crate::flags::Flags;
use crate::report::{Reporter, ns};
use crate::splitmix::SplitMix64;
use crate::store::Ctx;

/// Runs the read phases in the peer's order.
pub fn run(ctx: &Ctx, rep: &mut Reporter, f: &Flags) {
    rep.mark();
    snapshot(ctx, rep, f);
    rep.mark();
    point_reads(ctx, rep, f);
    rep.mark();
    index_scan(ctx, rep, f);
    rep.mark();
    plugin_denormalize(ctx, rep, f);
}

/// c. `snapshot` and `read_txn_open`.
fn snapshot(ctx: &Ctx, rep: &mut Reporter, f: &Flags) {
    let t0 = Instant::now();
    for _ in 0..f.snapshot_ops {
        black_box(ctx.store.snapshot());
    }
    let el = t0.elapsed();
    rep.emit(
        "snapshot",
        ns(el) / f.snapshot_ops as f64,
        f.snapshot_ops as u64,
        &[],
    );
    let t0 = Instant::now();
    for _ in 0..f.snapshot_ops {
        let s = ctx.store.snapshot();
        black_box(s.view());
    }
    let el = t0.elapsed();
    rep.emit(
        "read_txn_open",
        ns(el) / f.snapshot_ops as f64,
        f.snapshot_ops as u64,
        &[],
    );
}

/// d. Point reads: allocs (in one snapshot, and a snapshot each), plugins, volumes.
fn point_reads(ctx: &Ctx, rep: &mut Reporter, f: &Flags) {
    let ds: &Dataset = &ctx.ds;
    let snap = ctx.store.snapshot();
    let v = snap.view();
    let n_allocs = ds.alloc_ids.len();
    let mut r = SplitMix64(1001);
    let mut found = 0usize;
    let t0 = Instant::now();
    for _ in 0..f.reads {
        // Borrowed, as the peer's `First` hands out a pointer: the row is not touched.
        if black_box(v.alloc_ref(&ds.alloc_ids[r.intn(n_allocs)])).is_some() {
            found += 1;
        }
    }
    let el = t0.elapsed();
    assert_eq!(found, f.reads, "point_read: missing alloc");
    rep.emit(
        "point_read_alloc",
        ns(el) / f.reads as f64,
        f.reads as u64,
        &[],
    );

    // The same reads as shared rows (`Arc`): the reference count is on the row's
    // first cache line, so each read also loads the row (schedstate only).
    let mut r = SplitMix64(1001);
    let mut found = 0usize;
    let t0 = Instant::now();
    for _ in 0..f.reads {
        if black_box(v.alloc(&ds.alloc_ids[r.intn(n_allocs)])).is_some() {
            found += 1;
        }
    }
    let el = t0.elapsed();
    assert_eq!(found, f.reads, "point_read: missing alloc");
    rep.emit(
        "point_read_alloc_shared",
        ns(el) / f.reads as f64,
        f.reads as u64,
        &[],
    );

    let mut r = SplitMix64(1002);
    let t0 = Instant::now();
    for _ in 0..f.reads {
        let s = ctx.store.snapshot();
        black_box(s.view().alloc(&ds.alloc_ids[r.intn(n_allocs)]));
    }
    let el = t0.elapsed();
    rep.emit(
        "point_read_alloc_txn_each",
        ns(el) / f.reads as f64,
        f.reads as u64,
        &[],
    );

    let mut r = SplitMix64(1003);
    let t0 = Instant::now();
    for _ in 0..f.reads {
        black_box(v.csi_plugin(&ds.plugin_ids[r.intn(f.plugins)]));
    }
    let el = t0.elapsed();
    rep.emit(
        "point_read_plugin",
        ns(el) / f.reads as f64,
        f.reads as u64,
        &[],
    );

    let vol_ids: Vec<String> = (0..f.volumes).map(|i| format!("vol-{i:05}")).collect();
    let mut r = SplitMix64(1004);
    let t0 = Instant::now();
    for _ in 0..f.reads {
        let vol = v.csi_volume("default", &vol_ids[r.intn(f.volumes)]);
        assert!(vol.is_some(), "point_read_volume: missing volume");
        black_box(vol);
    }
    let el = t0.elapsed();
    rep.emit(
        "point_read_volume",
        ns(el) / f.reads as f64,
        f.reads as u64,
        &[],
    );
}

/// e. `index_scan`: the allocs of a random node.
fn index_scan(ctx: &Ctx, rep: &mut Reporter, f: &Flags) {
    let ds: &Dataset = &ctx.ds;
    let snap = ctx.store.snapshot();
    let v = snap.view();
    let mut r = SplitMix64(2001);
    let mut total = 0usize;
    let t0 = Instant::now();
    for _ in 0..f.scans {
        // Borrowed, as the peer's iterator hands out pointers: the rows themselves
        // are not touched.
        for a in v.allocs_by_node(&ds.node_ids[r.intn(f.nodes)]).borrowed() {
            black_box(a);
            total += 1;
        }
    }
    let el = t0.elapsed();
    rep.emit(
        "index_scan",
        ns(el) / f.scans as f64,
        f.scans as u64,
        &[
            ("allocs_per_node", total as f64 / f.scans as f64),
            (
                "ns_per_alloc",
                (ns(el) / total.max(1) as f64 * 10.0).round() / 10.0,
            ),
        ],
    );
}

/// f. `plugin_denormalize` and `plugin_denormalize_ws`.
fn plugin_denormalize(ctx: &Ctx, rep: &mut Reporter, f: &Flags) {
    let ds: &Dataset = &ctx.ds;
    // Lookups and misses per plugin (not timed; the state does not change here).
    let (mut lookups, mut missing) = (0usize, 0usize);
    {
        let snap = ctx.store.snapshot();
        let v = snap.view();
        for pid in &ds.plugin_ids {
            let Some(p) = v.csi_plugin(pid) else {
                continue;
            };
            let ids: BTreeSet<&Id> = p
                .controllers
                .iter()
                .chain(p.nodes.iter())
                .map(|(_, i)| &i.alloc_id)
                .collect();
            let found = ids.iter().filter(|id| v.alloc(id).is_some()).count();
            lookups += ids.len();
            missing += ids.len() - found;
        }
    }
    let mut ops = 0usize;
    let mut stubs = 0usize;
    let t0 = Instant::now();
    for _ in 0..f.denorm_reps {
        let snap = ctx.store.snapshot();
        let v = snap.view();
        for pid in &ds.plugin_ids {
            if let Some(p) = v.csi_plugin(pid) {
                let d = v.denormalize_csi_plugin(&p);
                stubs += d.allocations.len();
                black_box(d);
            }
            ops += 1;
        }
    }
    let el = t0.elapsed();
    let per = f.plugins as f64;
    assert_eq!(
        stubs,
        (lookups - missing) * f.denorm_reps,
        "plugin_denormalize: stub count"
    );
    rep.emit(
        "plugin_denormalize",
        ns(el) / ops as f64,
        ops as u64,
        &[
            ("allocs_per_plugin", lookups as f64 / per),
            ("missing_per_plugin", missing as f64 / per),
            (
                "ns_per_alloc",
                (ns(el) / (lookups * f.denorm_reps).max(1) as f64 * 10.0).round() / 10.0,
            ),
        ],
    );

    let mut items = 0usize;
    let mut ops = 0usize;
    let t0 = Instant::now();
    for _ in 0..f.denorm_reps {
        let snap = ctx.store.snapshot();
        for pid in &ds.plugin_ids {
            let ws = WatchSet::new();
            let v = snap.watched(&ws);
            if let Some(p) = v.csi_plugin(pid) {
                black_box(v.denormalize_csi_plugin(&p));
            }
            items += ws.len();
            ops += 1;
        }
    }
    let el = t0.elapsed();
    rep.emit(
        "plugin_denormalize_ws",
        ns(el) / ops as f64,
        ops as u64,
        &[("watch_chans_per_plugin", items as f64 / ops as f64)],
    );
}
