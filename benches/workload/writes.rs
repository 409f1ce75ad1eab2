//! The write phases: `upsert_node_txn` (a command with plugin derivation), then
//! `upsert_node_txn_raw` (an engine transaction) and `upsert_node_txn_raw_cmd` (a command
//! without derivation).

use std::sync::Arc;
use std::time::{Duration, Instant};

use schedstate::engine::Key;

use crate::flags::Flags;
use crate::report::{Reporter, ns, pct, signed_ns, us};
use crate::splitmix::SplitMix64;
use crate::store::{Ctx, upsert_toggle, verify};

/// Runs the write phases in the peer's order.
pub fn run(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    rep.mark();
    upsert_node_txn(ctx, rep, f);
    verify(ctx, "after_upsert_node_txn");
    rep.mark();
    upsert_node_txn_raw(ctx, rep, f);
}

/// b. `upsert_node_txn`: the peer's `upsertToggle` through `upsert_node`.
fn upsert_node_txn(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    let ds = Arc::clone(&ctx.ds);
    let mut r = SplitMix64(3001);
    let mut lat = Vec::with_capacity(f.txns);
    let t0 = Instant::now();
    for _ in 0..f.txns {
        let s = Instant::now();
        upsert_toggle(&ctx.store, &ds, &mut ctx.idx, &mut r);
        lat.push(signed_ns(Instant::now(), s));
    }
    let el = t0.elapsed();
    emit_txns(rep, "upsert_node_txn", el, f.txns, &lat);
}

/// b2. `upsert_node_txn_raw` (engine) and `upsert_node_txn_raw_cmd` (a command without
/// derivation).
fn upsert_node_txn_raw(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags) {
    let ds = Arc::clone(&ctx.ds);
    println!(
        "# note upsert_node_txn_raw: engine txn (read node, insert a copy with a new modify_index, commit); \
upsert_node_txn_raw_cmd: the same through a command without derivation (update_node_eligibility, flipped)"
    );
    let mut r = SplitMix64(3002);
    let mut lat = Vec::with_capacity(f.txns);
    let t0 = Instant::now();
    for _ in 0..f.txns {
        let s = Instant::now();
        let n = r.intn(f.nodes);
        let index = ctx.next_index();
        let mut txn = ctx
            .store
            .reader()
            .db()
            .begin_write(index)
            .expect("begin_write");
        let old = txn
            .view()
            .get(ctx.t.nodes, &Key::str(&ds.node_ids[n]))
            .expect("node");
        let mut cp = (*old).clone();
        cp.modify_index = index;
        txn.insert(ctx.t.nodes, Arc::new(cp)).expect("insert node");
        txn.commit().expect("commit");
        lat.push(signed_ns(Instant::now(), s));
    }
    let el = t0.elapsed();
    emit_txns(rep, "upsert_node_txn_raw", el, f.txns, &lat);

    let mut r = SplitMix64(3002);
    let mut lat = Vec::with_capacity(f.txns);
    let t0 = Instant::now();
    for _ in 0..f.txns {
        let s = Instant::now();
        let n = r.intn(f.nodes);
        let index = ctx.next_index();
        let eligible = ctx
            .store
            .snapshot()
            .view()
            .node(&ds.node_ids[n])
            .expect("node")
            .eligible;
        ctx.store
            .update_node_eligibility(index, &ds.node_ids[n], !eligible)
            .expect("update_node_eligibility");
        lat.push(signed_ns(Instant::now(), s));
    }
    let el = t0.elapsed();
    emit_txns(rep, "upsert_node_txn_raw_cmd", el, f.txns, &lat);
}

/// Emits a phase of `txns` transactions that took `el` in all, with the throughput and
/// the p50 and p99 of their latencies `lat` (ns).
fn emit_txns(rep: &mut Reporter, name: &str, el: Duration, txns: usize, lat: &[i64]) {
    let per = ns(el) / txns as f64;
    rep.emit(
        name,
        per,
        txns as u64,
        &[
            ("txns_per_s", (1e9 / per).round()),
            ("p50_us", us(pct(lat, 0.50))),
            ("p99_us", us(pct(lat, 0.99))),
        ],
    );
}
