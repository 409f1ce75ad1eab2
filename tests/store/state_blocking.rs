//! Blocking plugin and volume queries (docs/rules.md §6): min index 0 answers at once;
//! a query wakes on a write to what it read and answers with the queried table's
//! index; a write to something else does not wake it (it answers on timeout with what
//! it saw, `timed_out` set).
//!
//! Timing is checked loosely: "did not answer early" means "took at least most of the
//! max wait", never an upper bound tighter than seconds. The negative tests check that
//! their write landed while the query waited ([`quiet_through`]): they cannot pass
//! because a slow write came too late.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::volumes::*;
use crate::support::*;
use schedstate::Table;
use schedstate::model::{CsiVolume, Node};
use schedstate::state::StateStore;
use schedstate::{QueryOptions, QueryResult, StateView};

/// The wait of queries that must not answer before it passes (generous, so that the
/// unrelated write, made as soon as the query has read, lands inside it even on a
/// loaded machine; see [`quiet_through`]).
const SHORT: Duration = Duration::from_millis(400);
/// At least this much of [`SHORT`] must pass before such a query answers.
const MOSTLY_SHORT: Duration = Duration::from_millis(350);
/// The wait of queries that must be woken (they answer long before it).
const LONG: Duration = Duration::from_secs(5);
/// How long writer threads sleep before writing.
const DELAY: Duration = Duration::from_millis(40);

/// Runs `write` on another thread after [`DELAY`].
fn later(
    store: &StateStore,
    write: impl FnOnce(&StateStore) + Send + 'static,
) -> thread::JoinHandle<()> {
    let store = store.clone();
    thread::spawn(move || {
        thread::sleep(DELAY);
        write(&store);
    })
}

/// Runs `read` as a blocking query past `min` (waiting [`SHORT`]) while, on another
/// thread, `write` commits as soon as the query has read. Returns the answer after
/// checking what makes a negative test prove something: the write committed while the
/// query was still waiting (a write slow enough to land after the wait fails the test
/// instead of letting it pass), the query ran exactly once (a wake would have run it
/// again at once), and it answered at its deadline with the index it had seen.
fn quiet_through<T>(
    store: &StateStore,
    min: u64,
    write: impl FnOnce(&StateStore) + Send + 'static,
    mut read: impl FnMut(StateView<'_>) -> (u64, T),
) -> QueryResult<T> {
    let (read_tx, read_rx) = mpsc::channel();
    let writer = {
        let store = store.clone();
        thread::spawn(move || {
            read_rx.recv().expect("the query read");
            write(&store);
            Instant::now()
        })
    };
    let mut runs = 0;
    let mut read_tx = Some(read_tx);
    let start = Instant::now();
    let res = store
        .reader()
        .blocking_query(QueryOptions::new(min, SHORT), |v| {
            runs += 1;
            let answer = read(v);
            if let Some(tx) = read_tx.take() {
                tx.send(()).expect("writer waiting");
            }
            answer
        });
    let answered = Instant::now();
    let committed = writer.join().expect("writer");
    assert!(
        committed < answered,
        "the unrelated write committed after the query answered: the test proved nothing"
    );
    assert_eq!(runs, 1, "the query ran again: an unrelated write woke it");
    assert!(res.timed_out, "answered before its deadline");
    assert!(
        answered - start >= MOSTLY_SHORT,
        "answered early after {:?}",
        answered - start
    );
    assert_eq!(res.index, min, "answered with the index it last saw");
    res
}

/// What `blocking_csi_plugin_denormalized(opts, PLUGIN)` runs.
fn plugin_query(v: StateView<'_>) -> (u64, Option<schedstate::model::CsiPlugin>) {
    (
        v.table_index(Table::CsiPlugins),
        v.csi_plugin_denormalized(PLUGIN),
    )
}

/// [`cluster`] plus a second plugin `nfs` on node `n3`, and volumes `vol-1`, `vol-2`.
fn two_plugins() -> H {
    let mut h = cluster_with(&["vol-1", "vol-2"]);
    h.upsert_node(client("n3", &[node_fp("nfs", "plug-nfs", true)], &[]));
    h
}

/// Node `n4` running a healthy node instance of `plugin`.
fn n4_with(plugin: &str) -> Node {
    client("n4", &[node_fp(plugin, "plug-n4", true)], &[])
}

#[test]
fn blocking_min_index_zero_answers_at_once() {
    let h = two_plugins();
    let opts = QueryOptions::new(0, LONG);
    let start = Instant::now();

    let p = h
        .store
        .reader()
        .blocking_csi_plugin_denormalized(opts, PLUGIN);
    assert_eq!(p.index, h.table_index(Table::CsiPlugins));
    let p = p.value.expect("plugin");
    assert_eq!(p.nodes.len(), 2);

    let missing = h
        .store
        .reader()
        .blocking_csi_plugin_denormalized(opts, "nope");
    assert_eq!(missing.index, h.table_index(Table::CsiPlugins));
    assert!(missing.value.is_none());

    let v = h
        .store
        .reader()
        .blocking_csi_volume_denormalized(opts, NS, "vol-1");
    assert_eq!(v.index, h.table_index(Table::CsiVolumes));
    assert!(v.value.expect("volume").schedulable);

    let all = volumes_denormalized(&h.store, opts, NS);
    assert_eq!(all.index, h.table_index(Table::CsiVolumes));
    assert_eq!(vol_ids(&all.value), ["vol-1", "vol-2"]);

    let q = h
        .store
        .reader()
        .blocking_query(opts, |v| (v.table_index(Table::Nodes), v.nodes().count()));
    assert_eq!((q.index, q.value), (h.table_index(Table::Nodes), 3));

    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn blocking_query_with_min_index_below_the_table_index_answers_at_once() {
    let h = two_plugins();
    let start = Instant::now();
    let res =
        h.store
            .reader()
            .blocking_csi_volume_denormalized(QueryOptions::new(1, LONG), NS, "vol-1");
    assert_eq!(res.index, h.table_index(Table::CsiVolumes));
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn blocking_plugin_query_wakes_on_a_write_to_that_plugin() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiPlugins);
    let i = h.take();
    let writer = later(&h.store, move |s| {
        s.upsert_node(i, n4_with(PLUGIN)).expect("upsert");
    });
    let start = Instant::now();
    let res = h
        .store
        .reader()
        .blocking_csi_plugin_denormalized(QueryOptions::new(min, LONG), PLUGIN);
    let took = start.elapsed();
    writer.join().expect("writer");
    assert!(took < Duration::from_secs(3), "woke late: {took:?}");
    assert_eq!(res.index, i);
    assert_eq!(res.index, h.table_index(Table::CsiPlugins));
    let p = res.value.expect("plugin");
    assert_eq!((p.nodes_healthy(), p.nodes.len()), (3, 3));
}

#[test]
fn blocking_plugin_query_wakes_when_the_plugin_is_deleted() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiPlugins);
    let i = h.take();
    let writer = later(&h.store, move |s| {
        s.delete_nodes(i, &ids(&["n1", "n2"])).expect("delete");
    });
    let res = h
        .store
        .reader()
        .blocking_csi_plugin_denormalized(QueryOptions::new(min, LONG), PLUGIN);
    writer.join().expect("writer");
    assert_eq!(res.index, i);
    assert!(res.value.is_none());
}

#[test]
fn blocking_plugin_query_does_not_answer_on_a_write_to_another_plugin() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiPlugins);
    let i = h.take();
    let res = quiet_through(
        &h.store,
        min,
        // Changes plugin nfs only.
        move |s| _ = s.upsert_node(i, n4_with("nfs")).expect("upsert"),
        plugin_query,
    );
    assert_eq!(
        h.table_index(Table::CsiPlugins),
        i,
        "the unrelated write did move the table"
    );
    assert_eq!(res.value.expect("plugin").nodes.len(), 2);
}

#[test]
fn blocking_plugin_query_does_not_answer_on_creation_of_another_plugin() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiPlugins);
    let i = h.take();
    quiet_through(
        &h.store,
        min,
        move |s| _ = s.upsert_node(i, n4_with("zfs")).expect("upsert"),
        plugin_query,
    );
    assert_eq!(h.table_index(Table::CsiPlugins), i);
}

#[test]
fn blocking_volume_query_wakes_on_a_claim_of_that_volume() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiVolumes);
    let i = h.take();
    let writer = later(&h.store, move |s| {
        s.claim_csi_volume(
            i,
            NS,
            "vol-1",
            claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
        )
        .expect("claim");
    });
    let start = Instant::now();
    let res = h.store.reader().blocking_csi_volume_denormalized(
        QueryOptions::new(min, LONG),
        NS,
        "vol-1",
    );
    let took = start.elapsed();
    writer.join().expect("writer");
    assert!(took < Duration::from_secs(3), "woke late: {took:?}");
    assert_eq!(res.index, i);
    assert_eq!(res.index, h.table_index(Table::CsiVolumes));
    let v = res.value.expect("volume");
    assert_eq!(keys(&v.read_allocs), ["a1"]);
    assert!(v.schedulable, "the answer is denormalized");
}

#[test]
fn blocking_volume_query_does_not_answer_on_another_volumes_claim() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiVolumes);
    let i = h.take();
    let res = quiet_through(
        &h.store,
        min,
        move |s| {
            s.claim_csi_volume(
                i,
                NS,
                "vol-2",
                claim("a1", Mode::Write, Access::MultiNodeMultiWriter),
            )
            .expect("claim");
        },
        |v| {
            (
                v.table_index(Table::CsiVolumes),
                v.csi_volume_denormalized(NS, "vol-1"),
            )
        },
    );
    assert_eq!(h.table_index(Table::CsiVolumes), i);
    assert!(!res.value.expect("volume").in_use());
}

#[test]
fn blocking_volume_query_reruns_when_its_plugin_changes() {
    // The denormalized answer depends on the plugin, so the query watches it. The
    // volumes table index does not move, so the query keeps waiting until its wait
    // runs out — but it answers with what it saw on the re-run after the wake, which
    // proves it woke.
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiVolumes);
    let i = h.take();
    let writer = later(&h.store, move |s| {
        s.upsert_node(i, n4_with(PLUGIN)).expect("upsert");
    });
    let res = h.store.reader().blocking_csi_volume_denormalized(
        QueryOptions::new(min, Duration::from_millis(200)),
        NS,
        "vol-1",
    );
    writer.join().expect("writer");
    assert_eq!(res.index, min);
    let v = res.value.expect("volume");
    assert_eq!(v.nodes_healthy, 3);
}

#[test]
fn blocking_volumes_query_wakes_on_its_namespace_only() {
    let mut h = two_plugins();
    // A registration in another namespace: no answer before the wait.
    let min = h.table_index(Table::CsiVolumes);
    let i = h.take();
    let res = quiet_through(
        &h.store,
        min,
        move |s| {
            s.register_csi_volumes(i, vec![volume_in("prod", "vol-9", PLUGIN)])
                .expect("register");
        },
        |v| list_denormalized(v, NS),
    );
    assert_eq!(vol_ids(&res.value), ["vol-1", "vol-2"]);

    // A registration in the namespace wakes it.
    let min = h.table_index(Table::CsiVolumes);
    let j = h.take();
    let writer = later(&h.store, move |s| {
        s.register_csi_volumes(j, vec![volume("vol-3")])
            .expect("register");
    });
    let res = h
        .store
        .reader()
        .blocking_query(QueryOptions::new(min, LONG), |v| list_denormalized(v, NS));
    writer.join().expect("writer");
    assert_eq!(res.index, j);
    assert_eq!(vol_ids(&res.value), ["vol-1", "vol-2", "vol-3"]);
}

#[test]
fn blocking_query_generic_wakes_on_what_it_read() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiVolumes);
    let i = h.take();
    let writer = later(&h.store, move |s| {
        s.register_csi_volumes(i, vec![volume_in(NS, "nfs-1", "nfs")])
            .expect("register");
    });
    let res = h
        .store
        .reader()
        .blocking_query(QueryOptions::new(min, LONG), |v| {
            (
                v.table_index(Table::CsiVolumes),
                vol_ids(&v.csi_volumes_by_plugin(NS, "nfs").collect::<Vec<_>>()),
            )
        });
    writer.join().expect("writer");
    assert_eq!(res.index, i);
    assert_eq!(res.value, ["nfs-1"]);
}

#[tokio::test]
async fn blocking_query_async_wakes_on_a_claim_of_that_volume() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiVolumes);
    let i = h.take();
    let writer = later(&h.store, move |s| {
        s.claim_csi_volume(
            i,
            NS,
            "vol-1",
            claim("a2", Mode::Write, Access::MultiNodeMultiWriter),
        )
        .expect("claim");
    });
    let start = Instant::now();
    let res = h
        .store
        .reader()
        .blocking_query_async(QueryOptions::new(min, LONG), tokio::time::sleep, |v| {
            (
                v.table_index(Table::CsiVolumes),
                v.csi_volume_denormalized(NS, "vol-1"),
            )
        })
        .await;
    let took = start.elapsed();
    writer.join().expect("writer");
    assert!(took < Duration::from_secs(3), "woke late: {took:?}");
    assert_eq!(res.index, i);
    assert_eq!(keys(&res.value.expect("volume").write_allocs), ["a2"]);
}

#[tokio::test]
async fn blocking_query_async_does_not_answer_on_another_volumes_claim() {
    let mut h = two_plugins();
    let min = h.table_index(Table::CsiVolumes);
    let i = h.take();
    let (read_tx, read_rx) = mpsc::channel();
    let writer = {
        let store = h.store.clone();
        thread::spawn(move || {
            read_rx.recv().expect("the query read");
            store
                .claim_csi_volume(
                    i,
                    NS,
                    "vol-2",
                    claim("a2", Mode::Write, Access::MultiNodeMultiWriter),
                )
                .expect("claim");
            Instant::now()
        })
    };
    let mut runs = 0;
    let mut read_tx = Some(read_tx);
    let start = Instant::now();
    let res = h
        .store
        .reader()
        .blocking_query_async(QueryOptions::new(min, SHORT), tokio::time::sleep, |v| {
            runs += 1;
            if let Some(tx) = read_tx.take() {
                tx.send(()).expect("writer waiting");
            }
            (
                v.table_index(Table::CsiVolumes),
                v.csi_volume_denormalized(NS, "vol-1"),
            )
        })
        .await;
    let answered = Instant::now();
    let committed = writer.join().expect("writer");
    assert!(
        committed < answered,
        "the unrelated write committed after the query answered: the test proved nothing"
    );
    assert_eq!(runs, 1, "the query ran again: an unrelated write woke it");
    assert!(res.timed_out);
    assert!(answered - start >= MOSTLY_SHORT, "answered early");
    assert_eq!(res.index, min);
    assert!(!res.value.expect("volume").in_use());
    assert_eq!(h.table_index(Table::CsiVolumes), i);
}

#[tokio::test]
async fn blocking_query_async_min_index_zero_answers_at_once() {
    let h = two_plugins();
    let start = Instant::now();
    let res = h
        .store
        .reader()
        .blocking_query_async(QueryOptions::new(0, LONG), tokio::time::sleep, |v| {
            (v.table_index(Table::CsiPlugins), v.csi_plugins().count())
        })
        .await;
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(
        (res.index, res.value),
        (h.table_index(Table::CsiPlugins), 2)
    );
}

/// The volumes of a namespace, denormalized (as Nomad's volume list answers), with
/// the volumes table index.
fn list_denormalized(v: schedstate::StateView<'_>, ns: &str) -> (u64, Vec<CsiVolume>) {
    let vols = v
        .csi_volumes_by_prefix(ns, "")
        .map(|vol| v.denormalize_csi_volume(&vol))
        .collect();
    (v.table_index(Table::CsiVolumes), vols)
}

/// [`list_denormalized`] as a blocking query.
fn volumes_denormalized(
    store: &StateStore,
    opts: QueryOptions,
    ns: &str,
) -> schedstate::QueryResult<Vec<CsiVolume>> {
    store
        .reader()
        .blocking_query(opts, |v| list_denormalized(v, ns))
}
