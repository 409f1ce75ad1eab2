//! Helpers of the volume, claim and blocking-query tests: shorthands for the
//! fingerprints and nodes of [`super`], volumes and claims, and `H`, a store that applies
//! commands at increasing log indexes. Use with `use crate::support::*; use crate::support::volumes::*;`.
//!
//! Plugins are only ever created the way production creates them: by upserting nodes
//! whose fingerprints name them.

use std::sync::Arc;

use schedstate::Commit;
use schedstate::Table;
use schedstate::model::{
    Allocation, CsiInfo, CsiVolume, CsiVolumeCapability, CsiVolumeClaim, CsiVolumeRequest, Id,
    Node, id,
};
use schedstate::state::{Command, CsiVolumeClaimRequest, StateError, StateStore};

use super::{Fp, assert_rejected, canonical, ids, node, running};

pub const NS: &str = "default";
pub const PLUGIN: &str = "ebs";

pub use schedstate::model::CsiVolumeAccessMode as Access;
pub use schedstate::model::CsiVolumeAttachmentMode as Attach;
pub use schedstate::model::CsiVolumeClaimMode as Mode;
pub use schedstate::model::CsiVolumeClaimState as State;

// ---------------------------------------------------------------------------------
// Fingerprints and nodes

/// A node-instance fingerprint of `plugin`, run by `alloc`.
pub fn node_fp(plugin: &str, alloc: &str, healthy: bool) -> Arc<CsiInfo> {
    Fp::node(plugin, alloc).healthy(healthy).info()
}

/// A controller-instance fingerprint of `plugin`, run by `alloc`.
pub fn ctrl_fp(
    plugin: &str,
    alloc: &str,
    healthy: bool,
    requires_controller: bool,
) -> Arc<CsiInfo> {
    Fp::controller(plugin, alloc)
        .healthy(healthy)
        .requires_controller(requires_controller)
        .info()
}

/// Same fingerprint with another provider / version.
pub fn with_provider(fp: &Arc<CsiInfo>, provider: &str, version: &str) -> Arc<CsiInfo> {
    Fp((**fp).clone()).provider(provider, version).info()
}

/// A client node reporting these node and controller fingerprints.
pub fn client(node_id: &str, nodes: &[Arc<CsiInfo>], controllers: &[Arc<CsiInfo>]) -> Node {
    let n = nodes
        .iter()
        .cloned()
        .fold(node(node_id), |n, fp| n.node(fp));
    controllers
        .iter()
        .cloned()
        .fold(n, |n, fp| n.ctrl(fp))
        .build()
}

// ---------------------------------------------------------------------------------
// Allocations

// The allocations are those of [`super`]: `running`, `stopped`, `alloc`.

/// `a` requesting the given volumes (relative to its namespace).
pub fn requesting(mut a: Allocation, volumes: &[&str]) -> Allocation {
    a.csi_volume_requests = volumes
        .iter()
        .map(|v| CsiVolumeRequest {
            volume_id: id(v),
            read_only: false,
        })
        .collect();
    a
}

// ---------------------------------------------------------------------------------
// Volumes and claims

pub fn cap(access: Access, attach: Attach) -> CsiVolumeCapability {
    CsiVolumeCapability {
        access_mode: access,
        attachment_mode: attach,
    }
}

/// A volume of [`PLUGIN`] in namespace `ns`, requesting multi-node-multi-writer
/// file-system use.
pub fn volume_in(ns: &str, vol_id: &str, plugin: &str) -> CsiVolume {
    let mut v = CsiVolume::new(ns, vol_id, plugin);
    v.external_id = format!("vol-0{vol_id}");
    v.name = format!("{vol_id} name");
    v.requested_capabilities = vec![cap(Access::MultiNodeMultiWriter, Attach::FileSystem)];
    v.parameters.insert("type".into(), "gp3".into());
    v
}

/// A volume of [`PLUGIN`] in [`NS`].
pub fn volume(vol_id: &str) -> CsiVolume {
    volume_in(NS, vol_id, PLUGIN)
}

/// A volume of [`PLUGIN`] in [`NS`] with exactly these requested capabilities.
pub fn volume_caps(vol_id: &str, caps: &[CsiVolumeCapability]) -> CsiVolume {
    let mut v = volume(vol_id);
    v.requested_capabilities = caps.to_vec();
    v
}

/// A taken claim of `alloc` (on node `n1`) with the given modes, file system.
pub fn claim(alloc_id: &str, mode: Mode, access: Access) -> CsiVolumeClaim {
    claim_full(alloc_id, mode, access, Attach::FileSystem, State::Taken)
}

/// A claim with every field chosen.
pub fn claim_full(
    alloc_id: &str,
    mode: Mode,
    access: Access,
    attach: Attach,
    state: State,
) -> CsiVolumeClaim {
    CsiVolumeClaim {
        alloc_id: id(alloc_id),
        node_id: id("n1"),
        external_node_id: format!("i-{alloc_id}"),
        mode,
        access_mode: access,
        attachment_mode: attach,
        state,
    }
}

/// A release step of `alloc`'s claim.
pub fn release(alloc_id: &str, mode: Mode, state: State) -> CsiVolumeClaim {
    claim_full(
        alloc_id,
        mode,
        Access::MultiNodeMultiWriter,
        Attach::FileSystem,
        state,
    )
}

/// A garbage-collection claim (empty alloc id).
pub fn gc_claim() -> CsiVolumeClaim {
    CsiVolumeClaim {
        mode: Mode::Gc,
        state: State::Taken,
        ..Default::default()
    }
}

pub fn claim_req(ns: &str, vol_id: &str, claim: CsiVolumeClaim) -> CsiVolumeClaimRequest {
    CsiVolumeClaimRequest {
        namespace: id(ns),
        volume_id: id(vol_id),
        claim,
    }
}

/// The ids of a list of volumes.
pub fn vol_ids<V: std::borrow::Borrow<CsiVolume>>(vols: &[V]) -> Vec<String> {
    vols.iter().map(|v| v.borrow().id.to_string()).collect()
}

/// The alloc ids of a set or map's keys.
pub fn keys<'a, I: IntoIterator<Item = &'a Id>>(it: I) -> Vec<String> {
    it.into_iter().map(|k| k.to_string()).collect()
}

// ---------------------------------------------------------------------------------
// The harness

/// A store and the next log index to write at (steps of 10, so tests can name the
/// index a write took).
pub struct H {
    pub store: StateStore,
    next: u64,
}

impl Default for H {
    fn default() -> Self {
        Self::new()
    }
}

impl H {
    pub fn new() -> H {
        H {
            store: StateStore::new(),
            next: 0,
        }
    }

    /// The index the next write will take.
    pub fn peek(&self) -> u64 {
        self.next + 10
    }

    /// Reserves the next index (for writes made outside the harness, e.g. from
    /// another thread).
    pub fn take(&mut self) -> u64 {
        self.next += 10;
        self.next
    }

    /// Applies `cmd` at the next index; the index on success.
    // `StateError` is the library's error type; its size is not this fixture's call.
    pub fn try_apply(&mut self, cmd: &Command) -> Result<u64, StateError> {
        let index = self.take();
        self.store.apply(index, cmd).map(|_: Commit| index)
    }

    /// Applies `cmd` at the next index, which must succeed; the index.
    #[track_caller]
    pub fn apply(&mut self, cmd: &Command) -> u64 {
        match self.try_apply(cmd) {
            Ok(i) => i,
            Err(e) => panic!("{} rejected: {e:?}", cmd.kind()),
        }
    }

    /// Applies `cmd` at the next index, which must fail without changing anything (see
    /// [`assert_rejected`]); the error.
    #[track_caller]
    pub fn reject(&mut self, cmd: &Command) -> StateError {
        let index = self.take();
        assert_rejected(&self.store, index, cmd)
    }

    #[track_caller]
    pub fn upsert_node(&mut self, node: Node) -> u64 {
        self.apply(&Command::UpsertNode { node })
    }

    #[track_caller]
    pub fn delete_nodes(&mut self, list: &[&str]) -> u64 {
        self.apply(&Command::DeleteNodes { ids: ids(list) })
    }

    #[track_caller]
    pub fn upsert_allocs(&mut self, allocs: Vec<Allocation>) -> u64 {
        self.apply(&Command::UpsertAllocs { allocs })
    }

    #[track_caller]
    pub fn delete_allocs(&mut self, list: &[&str]) -> u64 {
        self.apply(&Command::DeleteAllocs { ids: ids(list) })
    }

    #[track_caller]
    pub fn register(&mut self, volumes: Vec<CsiVolume>) -> u64 {
        self.apply(&Command::RegisterCsiVolumes { volumes })
    }

    pub fn register_cmd(volumes: Vec<CsiVolume>) -> Command {
        Command::RegisterCsiVolumes { volumes }
    }

    pub fn deregister_cmd(ns: &str, list: &[&str], force: bool) -> Command {
        Command::DeregisterCsiVolumes {
            namespace: id(ns),
            ids: ids(list),
            force,
        }
    }

    pub fn claim_cmd(ns: &str, vol_id: &str, c: CsiVolumeClaim) -> Command {
        Command::ClaimCsiVolumes {
            claims: vec![claim_req(ns, vol_id, c)],
        }
    }

    /// One claim on `(NS, vol_id)`, which must succeed.
    #[track_caller]
    pub fn claim(&mut self, vol_id: &str, c: CsiVolumeClaim) -> u64 {
        self.apply(&Self::claim_cmd(NS, vol_id, c))
    }

    /// One claim on `(NS, vol_id)`, which must fail and change nothing.
    #[track_caller]
    pub fn claim_rejected(&mut self, vol_id: &str, c: CsiVolumeClaim) -> StateError {
        self.reject(&Self::claim_cmd(NS, vol_id, c))
    }

    // Reads

    pub fn bytes(&self) -> Vec<u8> {
        canonical(&self.store)
    }

    /// The volume, denormalized.
    #[track_caller]
    pub fn vol(&self, vol_id: &str) -> CsiVolume {
        self.vol_in(NS, vol_id)
    }

    #[track_caller]
    pub fn vol_in(&self, ns: &str, vol_id: &str) -> CsiVolume {
        self.store
            .snapshot()
            .view()
            .csi_volume_denormalized(ns, vol_id)
            .unwrap_or_else(|| panic!("volume {ns}/{vol_id} missing"))
    }

    /// The volume as stored.
    #[track_caller]
    pub fn stored(&self, vol_id: &str) -> Arc<CsiVolume> {
        self.stored_in(NS, vol_id)
    }

    #[track_caller]
    pub fn stored_in(&self, ns: &str, vol_id: &str) -> Arc<CsiVolume> {
        self.store
            .snapshot()
            .view()
            .csi_volume(ns, vol_id)
            .unwrap_or_else(|| panic!("volume {ns}/{vol_id} not stored"))
    }

    pub fn has_vol(&self, ns: &str, vol_id: &str) -> bool {
        self.store
            .snapshot()
            .view()
            .csi_volume(ns, vol_id)
            .is_some()
    }

    pub fn table_index(&self, table: Table) -> u64 {
        self.store.snapshot().view().table_index(table)
    }

    pub fn last_applied(&self) -> u64 {
        super::last_applied(&self.store)
    }
}

/// The standard cluster:
/// - node `n1` runs a healthy node instance (alloc `plug-n1`) and a healthy controller
///   instance requiring a controller (alloc `plug-c1`) of [`PLUGIN`];
/// - node `n2` runs a healthy node instance (alloc `plug-n2`);
/// - running allocations `a1`..`a3` on `n1` and `a4`..`a6` on `n2`.
pub fn cluster() -> H {
    let mut h = H::new();
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "plug-n1", true)],
        &[ctrl_fp(PLUGIN, "plug-c1", true, true)],
    ));
    h.upsert_node(client("n2", &[node_fp(PLUGIN, "plug-n2", true)], &[]));
    h.upsert_allocs(
        ["a1", "a2", "a3"]
            .iter()
            .map(|a| running(a, "n1"))
            .chain(["a4", "a5", "a6"].iter().map(|a| running(a, "n2")))
            .collect(),
    );
    h
}

/// [`cluster`] with volume `vol` (multi-node-multi-writer, file system) registered.
pub fn cluster_with(vols: &[&str]) -> H {
    let mut h = cluster();
    h.register(vols.iter().map(|v| volume(v)).collect());
    h
}
