//! The store under test and its write paths, shared by the phases: the context (`Ctx`),
//! the peer's write helpers, and the plugin/invariant check run between phases.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use schedstate::engine::{Key, WaitOutcome, WatchSet, WriteTxn};
use schedstate::model::{Allocation, Id};
use schedstate::state::{StateStore, StateView, Tables};

use crate::dataset::Dataset;
use crate::splitmix::SplitMix64;

pub struct Ctx {
    pub store: StateStore,
    pub t: Tables,
    pub ds: Arc<Dataset>,
    /// Last log index used; one per write transaction (command or engine txn).
    pub idx: u64,
}

impl Ctx {
    pub fn next_index(&mut self) -> u64 {
        self.idx += 1;
        self.idx
    }

    /// Engine transaction that stores a copy of plugin `pid` with a new modify index
    /// (the peer's `touchPluginTxn`; no command writes a plugin alone). Not committed.
    pub fn touch_plugin_txn(&mut self, pid: &str) -> WriteTxn {
        let index = self.next_index();
        let mut txn = self
            .store
            .reader()
            .db()
            .begin_write(index)
            .expect("begin_write");
        let p = txn
            .view()
            .get(self.t.plugins, &Key::str(pid))
            .expect("plugin to touch");
        let mut cp = (*p).clone();
        cp.modify_index = index;
        txn.insert(self.t.plugins, Arc::new(cp))
            .expect("insert plugin");
        txn
    }

    pub fn touch_plugin(&mut self, pid: &str) {
        self.touch_plugin_txn(pid).commit().expect("commit");
    }

    /// `upsert_allocs` of a copy of alloc `aid` (the peer's `touchAllocTxn`).
    pub fn touch_alloc(&mut self, aid: &str) {
        let a = self.alloc_copy(aid);
        let index = self.next_index();
        self.store
            .upsert_allocs(index, vec![a])
            .expect("upsert_allocs");
    }

    pub fn alloc_copy(&self, aid: &str) -> Allocation {
        let snap = self.store.snapshot();
        let a = snap.view().alloc(aid).expect("alloc to touch");
        (*a).clone()
    }

    /// Reads through a watched view, registers the watch set, runs `write`, and says
    /// whether the set fired.
    pub fn fired_after(
        &mut self,
        read: impl FnOnce(StateView<'_>),
        write: impl FnOnce(&mut Self),
    ) -> bool {
        let snap = self.store.snapshot();
        let ws = WatchSet::new();
        read(snap.watched(&ws));
        let early = register(&ws);
        write(self);
        early || ws.is_fired()
    }
}

/// Registers a watch set now (a zero-length wait). True if it had already fired.
pub fn register(ws: &WatchSet) -> bool {
    ws.wait_timeout(Duration::ZERO) == WaitOutcome::Changed
}

/// One single-node write flipping the health of one of the node's two node-plugin
/// fingerprints, with plugin derivation (the peer's `upsertToggle`), via `upsert_node`.
pub fn upsert_toggle(store: &StateStore, ds: &Dataset, idx: &mut u64, r: &mut SplitMix64) {
    let i = r.intn(ds.nodes);
    let k = r.intn(2);
    *idx += 1;
    let index = *idx;
    let snap = store.snapshot();
    let old = snap.view().node(&ds.node_ids[i]).expect("node");
    let mut n = (*old).clone();
    let pid = &ds.plugin_ids[ds.node_plugins[i][k]];
    let mut info = (*old.csi_node_plugins[pid]).clone();
    info.healthy = !info.healthy;
    info.health_description = if info.healthy { "healthy" } else { "unhealthy" }.into();
    info.update_time = index;
    n.csi_node_plugins.insert(pid.clone(), Arc::new(info));
    drop(snap);
    store.upsert_node(index, n).expect("upsert_node");
}

/// Recomputes every plugin from the nodes table and compares (as the peer), then runs
/// the store's own invariant checker. Panics on a mismatch.
pub fn verify(ctx: &Ctx, stage: &str) {
    #[derive(Default, Debug, PartialEq)]
    struct Agg {
        nodes: usize,
        nodes_h: usize,
        ctrls: usize,
        ctrls_h: usize,
    }
    let snap = ctx.store.snapshot();
    let v = snap.view();
    let mut want: BTreeMap<Id, Agg> = BTreeMap::new();
    let mut nn = 0;
    for n in v.nodes() {
        nn += 1;
        for (pid, info) in &n.csi_node_plugins {
            let a = want.entry(pid.clone()).or_default();
            a.nodes += 1;
            a.nodes_h += usize::from(info.healthy);
        }
        for (pid, info) in &n.csi_controller_plugins {
            let a = want.entry(pid.clone()).or_default();
            a.ctrls += 1;
            a.ctrls_h += usize::from(info.healthy);
        }
    }
    let mut np = 0;
    for p in v.csi_plugins() {
        np += 1;
        let got = Agg {
            nodes: p.nodes.len(),
            nodes_h: p.nodes_healthy(),
            ctrls: p.controllers.len(),
            ctrls_h: p.controllers_healthy(),
        };
        let w = want.get(&p.id);
        assert_eq!(w, Some(&got), "verify {stage}: plugin {} mismatch", p.id);
        for (nid, info) in p.nodes.iter() {
            let node = v.node(nid).expect("node of a plugin entry");
            assert_eq!(
                node.csi_node_plugins.get(&p.id).map(|f| &**f),
                Some(&**info),
                "verify {stage}: stale node fingerprint in plugin {}",
                p.id
            );
        }
    }
    assert_eq!(np, want.len(), "verify {stage}: plugin count");
    let allocs = v.raw().len(ctx.t.allocs);
    if let Err(e) = v.check_invariants() {
        panic!("verify {stage}: check_invariants: {e}");
    }
    println!("# verify {stage} ok nodes={nn} allocs={allocs} plugins={np}");
}
