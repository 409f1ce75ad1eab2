//! The load phases: `bulk_load_raw` (engine level, a scratch store), `bulk_load`
//! (commands, the store every later phase uses), `volumes_load`, and the memory figures
//! after the load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use schedstate::engine::Key;
use schedstate::model::{Allocation, CsiVolume, Node};
use schedstate::state::{Command, StateError, StateStore};

use crate::alloc_counter::{live_bytes, mib, rss_bytes, settled_live_bytes};
use crate::dataset::Dataset;
use crate::flags::Flags;
use crate::report::{Reporter, ns};
use crate::store::{Ctx, verify};

/// Runs the load phases in the peer's order and returns the loaded store. `objs` are
/// the dataset's row objects, built before any timing.
pub fn run(
    rep: &mut Reporter,
    f: &Flags,
    ds: &Arc<Dataset>,
    objs: (Vec<Arc<Node>>, Vec<Arc<Allocation>>),
) -> Ctx {
    // a0. bulk_load_raw
    println!(
        "# note bulk_load_raw: engine level (db().begin_write + insert into tables().allocs/nodes), \
{} nodes per txn as the peer; no commands, no plugin derivation",
        f.batch
    );
    let (el, _) = bulk_load_raw(f, ds, &objs);
    rep.emit(
        "bulk_load_raw",
        ns(el) / f.nodes as f64,
        f.nodes as u64,
        &[
            ("total_ms", (el.as_micros() as f64).round() / 1000.0),
            (
                "ns_per_object",
                (ns(el) / (f.nodes * (1 + f.allocs_per_node)) as f64).round(),
            ),
        ],
    );

    // The objects move into the commands (the scratch store is gone, so no copies).
    let (node_arcs, alloc_arcs) = objs;
    let nodes: Vec<Node> = node_arcs.into_iter().map(Arc::unwrap_or_clone).collect();
    let allocs: Vec<Allocation> = alloc_arcs.into_iter().map(Arc::unwrap_or_clone).collect();
    let store = StateStore::new();
    let mut ctx = Ctx {
        t: store.reader().tables(),
        store,
        ds: Arc::clone(ds),
        idx: 0,
    };
    let heap_empty = live_bytes();
    let rss_empty = rss_bytes();

    rep.mark();
    bulk_load(&mut ctx, rep, f, nodes, allocs);
    verify(&ctx, "after_bulk_load");
    let heap_load = settled_live_bytes(&ctx.store);
    let rss_load = rss_bytes();

    rep.mark();
    volumes_load(&mut ctx, rep, f, ds);
    rep.emit(
        "memory_after_load",
        0.0,
        0,
        &[
            ("heap_alloc_mib", mib(heap_load)),
            ("heap_alloc_empty_mib", mib(heap_empty)),
            ("rss_mib", mib(rss_load)),
            ("rss_empty_mib", mib(rss_empty)),
        ],
    );
    ctx
}

/// a0. `bulk_load_raw`, timed: engine transactions of `-batch` nodes and their allocs
/// into a scratch store. Returns the time and the number of transactions.
fn bulk_load_raw(
    f: &Flags,
    ds: &Dataset,
    objs: &(Vec<Arc<Node>>, Vec<Arc<Allocation>>),
) -> (Duration, usize) {
    let scratch = StateStore::new();
    let t = scratch.reader().tables();
    let (nodes, allocs) = objs;
    let mut index = 0;
    let t0 = Instant::now();
    let mut lo = 0;
    while lo < ds.nodes {
        let hi = (lo + f.batch).min(ds.nodes);
        index += 1;
        let mut txn = scratch
            .reader()
            .db()
            .begin_write(index)
            .expect("begin_write");
        for i in lo..hi {
            for j in 0..ds.allocs_per {
                txn.insert(t.allocs, Arc::clone(&allocs[i * ds.allocs_per + j]))
                    .expect("insert alloc");
            }
            let n = &nodes[i];
            assert!(
                txn.view().get(t.nodes, &Key::str(&n.id)).is_none(),
                "bulk_load_raw: duplicate node"
            );
            txn.insert(t.nodes, Arc::clone(n)).expect("insert node");
        }
        txn.commit().expect("commit");
        lo = hi;
    }
    let el = t0.elapsed();
    drop(scratch);
    (el, index as usize)
}

/// a. `bulk_load`: per batch, one `upsert_allocs` and one `upsert_nodes` command.
fn bulk_load(
    ctx: &mut Ctx,
    rep: &mut Reporter,
    f: &Flags,
    nodes: Vec<Node>,
    allocs: Vec<Allocation>,
) {
    println!(
        "# note bulk_load: per batch of {} nodes one upsert_allocs command ({} allocs) then one \
upsert_nodes command (plugin derivation per node, each plugin written once per batch): {} txns \
instead of the peer's {} (one txn per batch)",
        f.batch,
        f.batch * f.allocs_per_node,
        2 * f.nodes.div_ceil(f.batch.max(1)),
        f.nodes.div_ceil(f.batch.max(1)),
    );
    let mut commit_total = Duration::ZERO;
    let mut allocs_iter = allocs.into_iter();
    let mut nodes_iter = nodes.into_iter();
    let mut txns = 0u64;
    let t0 = Instant::now();
    loop {
        let batch: Vec<Node> = nodes_iter.by_ref().take(f.batch.max(1)).collect();
        if batch.is_empty() {
            break;
        }
        let batch_allocs: Vec<Allocation> = allocs_iter
            .by_ref()
            .take(batch.len() * f.allocs_per_node)
            .collect();
        let index = ctx.next_index();
        commit_total += apply_timed(
            &ctx.store,
            index,
            Command::UpsertAllocs {
                allocs: batch_allocs,
            },
        );
        let index = ctx.next_index();
        commit_total += apply_timed(&ctx.store, index, Command::UpsertNodes { nodes: batch });
        txns += 2;
    }
    let el = t0.elapsed();
    rep.emit(
        "bulk_load",
        ns(el) / f.nodes as f64,
        f.nodes as u64,
        &[
            ("total_ms", (el.as_micros() as f64).round() / 1000.0),
            ("allocs", (f.nodes * f.allocs_per_node) as f64),
            ("txns", txns as f64),
            (
                "ns_per_object",
                (ns(el) / (f.nodes * (1 + f.allocs_per_node)) as f64).round(),
            ),
            (
                "commit_ms_total",
                (commit_total.as_micros() as f64).round() / 1000.0,
            ),
        ],
    );
}

/// Applies `command` (moved into the store, as the peer stores its row objects by
/// pointer), returning the time from just before publishing to the return.
fn apply_timed(store: &StateStore, index: u64, command: Command) -> Duration {
    let mut before_publish = None;
    store
        .apply_owned_with_hook(index, command, || {
            before_publish = Some(Instant::now());
            Ok::<(), StateError>(())
        })
        .expect("apply");
    before_publish.map_or(Duration::ZERO, |t| t.elapsed())
}

/// `volumes_load`: one `register_csi_volumes` command of `-volumes` volumes.
fn volumes_load(ctx: &mut Ctx, rep: &mut Reporter, f: &Flags, ds: &Dataset) {
    let index = ctx.next_index();
    let t0 = Instant::now();
    let vols: Vec<CsiVolume> = (0..f.volumes)
        .map(|v| {
            let id = format!("vol-{v:05}");
            let mut vol =
                CsiVolume::new("default", id.as_str(), ds.plugin_ids[v % f.plugins].clone());
            vol.name = id;
            vol
        })
        .collect();
    ctx.store
        .register_csi_volumes(index, vols)
        .expect("csi_volume_register");
    let el = t0.elapsed();
    rep.emit(
        "volumes_load",
        ns(el) / f.volumes as f64,
        f.volumes as u64,
        &[],
    );
}
