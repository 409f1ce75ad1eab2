//! A tour of the schedstate engine (crate `schedstate-engine`): tables and an index, write
//! transactions at log indexes, O(1) snapshots, scans, and a blocking wait on one key.
//!
//! Run it with `cargo run --release --example quickstart`.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use schedstate_engine::{Db, Key, KeyBuilder, Schema, Snapshot, WaitOutcome, WatchSet};

/// A client node of the cluster.
struct Node {
    id: String,
    status: &'static str,
}

/// An allocation: a task group placed on a node.
struct Alloc {
    id: String,
    node_id: String,
}

fn node(id: &str, status: &'static str) -> Arc<Node> {
    Arc::new(Node {
        id: id.into(),
        status,
    })
}

fn alloc(id: &str, node_id: &str) -> Arc<Alloc> {
    Arc::new(Alloc {
        id: id.into(),
        node_id: node_id.into(),
    })
}

/// The ids of the allocations an iterator yields (scans yield `Arc` rows in key order).
fn ids(rows: impl Iterator<Item = Arc<Alloc>>) -> Vec<String> {
    rows.map(|a| a.id.clone()).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. The schema: each table says how to compute a row's primary key; the non-unique
    //    `by_node` index is maintained by the engine in every transaction.
    let mut schema = Schema::new();
    let nodes = schema.table("nodes", |n: &Node| Key::str(&n.id))?;
    let allocs = schema.table("allocs", |a: &Alloc| Key::str(&a.id))?;
    let by_node = schema.index(allocs, "by_node", false, |a: &Alloc| {
        Some(Key::str(&a.node_id))
    })?;
    let db = Db::new(schema);

    // 2. A write transaction at log index 1. Nothing is visible until commit.
    let mut txn = db.begin_write(1)?;
    txn.insert(nodes, node("node-1", "ready"))?;
    txn.insert(nodes, node("node-2", "ready"))?;
    txn.insert(allocs, alloc("web-1", "node-1"))?;
    txn.insert(allocs, alloc("web-2", "node-2"))?;
    txn.insert(allocs, alloc("db-1", "node-1"))?;
    let changed = txn.commit()?.changes.len();
    println!("committed index 1: {changed} rows changed");

    // 3. A snapshot is one `Arc` clone: it keeps seeing index 1 whatever comes next.
    let old = db.snapshot();
    let mut txn = db.begin_write(2)?;
    txn.insert(nodes, node("node-1", "down"))?;
    txn.delete(allocs, &Key::str("db-1"))?;
    txn.commit()?;
    let now = db.snapshot();
    let status = |snap: &Snapshot| {
        snap.view()
            .get(nodes, &Key::str("node-1"))
            .map(|n| n.status)
    };
    println!("node-1 in the old snapshot: {:?}", status(&old));
    println!("node-1 now:                 {:?}", status(&now));
    println!(
        "allocs: {} rows then, {} now; table index of nodes {} -> {}",
        old.view().len(allocs),
        now.view().len(allocs),
        old.view().table_index(nodes),
        now.view().table_index(nodes),
    );
    // Log indexes only move forward: a stale one is a typed error.
    if let Err(e) = db.begin_write(2) {
        println!("begin_write(2) again: {e}");
    }

    // 4. Scans, in key order: a primary-key prefix, then the secondary index.
    let web = KeyBuilder::new().str_prefix("web-");
    println!(
        "allocs with prefix \"web-\": {:?}",
        ids(now.view().prefix(allocs, web.as_bytes()))
    );
    for n in ["node-1", "node-2"] {
        println!(
            "allocs on {n}: {:?}",
            ids(now.view().index_eq(by_node, &Key::str(n)))
        );
    }

    // 5. A blocking wait: read node-2 through a watched view, then sleep until exactly
    //    that key changes. A writer thread first commits an unrelated row (no wake-up),
    //    then changes node-2.
    let ws = WatchSet::new();
    let snap = db.snapshot();
    let watched = snap.watched(&ws).get(nodes, &Key::str("node-2"));
    println!("waiting on node-2 (status {:?})", watched.map(|n| n.status));
    let writer = {
        let db = db.clone();
        thread::spawn(move || -> Result<(), schedstate_engine::Error> {
            let mut txn = db.begin_write(3)?;
            txn.insert(allocs, alloc("web-3", "node-1"))?;
            txn.commit()?;
            println!("writer: committed index 3 (allocs only: the watch stays quiet)");
            thread::sleep(Duration::from_millis(50));
            let mut txn = db.begin_write(4)?;
            txn.insert(nodes, node("node-2", "draining"))?;
            println!("writer: committing index 4 (node-2)");
            txn.commit()?;
            Ok(())
        })
    };
    let outcome = ws.wait_timeout(Duration::from_secs(5));
    assert_eq!(outcome, WaitOutcome::Changed, "the watch should have fired");
    let fresh = db.snapshot();
    let node2 = fresh
        .view()
        .get(nodes, &Key::str("node-2"))
        .ok_or("node-2 vanished")?;
    println!(
        "woke up ({outcome:?}): node-2 is now {}, nodes table index {}",
        node2.status,
        fresh.view().table_index(nodes)
    );
    writer.join().expect("writer thread panicked")?;
    Ok(())
}
