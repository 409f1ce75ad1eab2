//! Model-based test of the CSI rules (docs/rules.md §4, §5), with proptest-state-machine.
//!
//! The reference model is the rules written out as plainly as possible on plain maps:
//! - plugins: its own plugin maps, updated by straightforward code per command (the
//!   fingerprints of a node applied one after the other, then the removal sweep; stopped
//!   allocations removing exactly their instances). The store's result depends on the
//!   order of writes (the last controller fingerprint sets `controller_required`, a
//!   stopped alloc removes instances only at that moment), so the model follows the same
//!   order rather than recomputing everything;
//! - a from-scratch cross-check of the model's plugin table against the nodes it holds,
//!   for what does not depend on that order (every entry is the node's last report of
//!   that kind; a healthy report has its entry unless its alloc was stopped; no empty
//!   plugin; counts from the maps);
//! - volumes and claims: the register / deregister / claim rules as plain data (the table
//!   of free claims per access mode, the order of the claim checks);
//! - jobs (`state_model_jobs.rs`): job writes on a map, and every plugin's job
//!   expectations recomputed from scratch after each command, where the store keeps
//!   them incrementally.
//!
//! Random command sequences (small id pools, so that they collide; indexes mostly
//! increasing, sometimes stale) are applied to the model and to a [`StateStore`]; after
//! every step the store's nodes, allocs, plugins (provider, version, controller
//! requirement, both instance maps with their update times, counts, indexes) and
//! volumes (every stored field: claims, modes, indexes) must equal the model's, the
//! table indexes and last applied index too, errors must agree in kind, and the store's
//! own invariant checker must pass.
//!
//! 32 cases of up to 60 commands by default; `PROPTEST_CASES=2000 cargo test --release
//! --test state_model` runs more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::state_answer_index::Answers;
use crate::support::names;
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiVolume,
    CsiVolumeAccessMode as Access, CsiVolumeAttachmentMode as Attach, CsiVolumeCapability,
    CsiVolumeClaim, CsiVolumeClaimMode as Mode, CsiVolumeClaimState as ClaimState,
    CsiVolumeRequest, DesiredStatus, Id, Node, NodeStatus, id,
};
use schedstate::state::{Command, CsiVolumeClaimRequest, StateError, StateStore};

#[path = "state_model_jobs.rs"]
mod jobs;
use jobs::JobKey;

// Small pools, so that commands collide. "n1" prefixes "n10", "ebs" prefixes "ebs2".
const NODES: [&str; 4] = ["n1", "n10", "n2", "n3"];
const PLUGINS: [&str; 3] = ["ebs", "ebs2", "nfs"];
const ALLOCS: [&str; 6] = ["a1", "a10", "a2", "a3", "a4", "a5"];
const VOLUMES: [&str; 3] = ["v1", "v10", "v2"];
const NAMESPACES: [&str; 2] = ["default", "prod"];

const ACCESS: [Access; 6] = [
    Access::Unknown,
    Access::SingleNodeReaderOnly,
    Access::SingleNodeWriter,
    Access::MultiNodeReaderOnly,
    Access::MultiNodeSingleWriter,
    Access::MultiNodeMultiWriter,
];
const ATTACH: [Attach; 3] = [Attach::Unknown, Attach::BlockDevice, Attach::FileSystem];

// ---------------------------------------------------------------------------------
// The rules as plain data.
// ---------------------------------------------------------------------------------

/// docs/rules.md §4.8 "Free claims", given the volume's current readers and
/// writers: (a read claim is free, a write claim is free).
fn free_claims(mode: Access, readers: usize, writers: usize) -> (bool, bool) {
    let none = readers == 0 && writers == 0;
    match mode {
        Access::SingleNodeReaderOnly => (none, false),
        Access::SingleNodeWriter => (none, writers == 0),
        Access::MultiNodeReaderOnly => (true, false),
        Access::MultiNodeSingleWriter => (true, writers == 0),
        Access::MultiNodeMultiWriter | Access::Unknown => (true, true),
    }
}

/// The most readers and writers a volume in `mode` can hold (`usize::MAX`: any).
fn claim_limits(mode: Access) -> (usize, usize) {
    match mode {
        Access::SingleNodeReaderOnly => (1, 0),
        Access::SingleNodeWriter => (1, 1),
        Access::MultiNodeReaderOnly => (usize::MAX, 0),
        Access::MultiNodeSingleWriter => (usize::MAX, 1),
        Access::MultiNodeMultiWriter | Access::Unknown => (usize::MAX, usize::MAX),
    }
}

/// Access modes that allow writing.
const WRITABLE: [Access; 3] = [
    Access::SingleNodeWriter,
    Access::MultiNodeSingleWriter,
    Access::MultiNodeMultiWriter,
];

/// An error, by kind (and the id it names, where it names one).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refused {
    Stale,
    Empty,
    MissingField,
    Mismatch,
    Halves,
    NodeNotFound(Id),
    AllocNotFound(Id),
    PluginNotFound(Id),
    VolumeNotFound(Id, Id),
    IdentityChanged(&'static str),
    InUse(Id),
    AttachmentConflict,
    ReadOnlyAccessMode,
    Unschedulable,
    MaxClaims,
    Invalid,
    JobNotFound(Id),
    JobVersion,
}

fn refused(e: &StateError) -> Refused {
    match e {
        StateError::StaleIndex { .. } => Refused::Stale,
        StateError::EmptyRequest { .. } => Refused::Empty,
        StateError::MissingField { .. } => Refused::MissingField,
        StateError::FingerprintMismatch { .. } => Refused::Mismatch,
        StateError::FingerprintHalves { .. } => Refused::Halves,
        StateError::NodeNotFound(n) => Refused::NodeNotFound(n.clone()),
        StateError::AllocNotFound(a) => Refused::AllocNotFound(a.clone()),
        StateError::PluginNotFound(p) => Refused::PluginNotFound(p.clone()),
        StateError::VolumeNotFound { namespace, id } => {
            Refused::VolumeNotFound(namespace.clone(), id.clone())
        }
        StateError::VolumeIdentityChanged { field, .. } => Refused::IdentityChanged(field),
        StateError::VolumeInUse { alloc_id, .. } => Refused::InUse(alloc_id.clone()),
        StateError::AttachmentModeConflict { .. } => Refused::AttachmentConflict,
        StateError::ReadOnlyAccessMode { .. } => Refused::ReadOnlyAccessMode,
        StateError::Unschedulable { .. } => Refused::Unschedulable,
        StateError::MaxClaimsReached { .. } => Refused::MaxClaims,
        StateError::InvalidInput { .. } => Refused::Invalid,
        StateError::JobNotFound { id, .. } => Refused::JobNotFound(id.clone()),
        StateError::JobVersionNotFound { .. } => Refused::JobVersion,
        other => panic!("an error the model does not know: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------

/// A plugin: plain maps of fingerprints.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MPlugin {
    provider: Id,
    version: Id,
    controller_required: bool,
    controllers: BTreeMap<Id, Arc<CsiInfo>>,
    nodes: BTreeMap<Id, Arc<CsiInfo>>,
    /// What each live job expects (non-zero only).
    jobs: BTreeMap<JobKey, schedstate::model::Expected>,
    create_index: u64,
    modify_index: u64,
}

impl MPlugin {
    fn new(index: u64) -> MPlugin {
        MPlugin {
            provider: Id::new(),
            version: Id::new(),
            controller_required: false,
            controllers: BTreeMap::new(),
            nodes: BTreeMap::new(),
            jobs: BTreeMap::new(),
            create_index: index,
            modify_index: index,
        }
    }

    /// Same content, fingerprints compared as the store compares them (report time
    /// aside).
    fn same_content(&self, other: &MPlugin) -> bool {
        self.provider == other.provider
            && self.version == other.version
            && self.controller_required == other.controller_required
            && self.controllers == other.controllers
            && self.nodes == other.nodes
            && self.jobs == other.jobs
    }

    fn is_empty(&self) -> bool {
        self.controllers.is_empty() && self.nodes.is_empty() && self.jobs.is_empty()
    }

    fn schedulable(&self) -> bool {
        let healthy = |m: &BTreeMap<Id, Arc<CsiInfo>>| m.values().filter(|i| i.healthy).count();
        healthy(&self.nodes) > 0 && (!self.controller_required || healthy(&self.controllers) > 0)
    }
}

/// Records `info` unless an equal report (report time aside) is already there.
fn record(map: &mut BTreeMap<Id, Arc<CsiInfo>>, node: &Id, info: &Arc<CsiInfo>) {
    if map.get(node).is_some_and(|old| **old == **info) {
        return;
    }
    map.insert(node.clone(), Arc::clone(info));
}

const TABLES: [&str; 5] = [
    names::NODES,
    names::ALLOCS,
    names::CSI_PLUGINS,
    names::CSI_VOLUMES,
    names::JOBS,
];

#[derive(Debug, Clone)]
struct Model {
    last_applied: u64,
    table_index: [u64; 5],
    /// Stored rows, indexes included.
    nodes: BTreeMap<Id, Node>,
    allocs: BTreeMap<Id, Allocation>,
    plugins: BTreeMap<Id, MPlugin>,
    volumes: BTreeMap<(Id, Id), CsiVolume>,
    jobs: BTreeMap<JobKey, schedstate::model::Job>,
    /// Every (alloc, node) an accepted write ever stopped (for the cross-check).
    stopped: BTreeSet<(Id, Id)>,
    /// What the last command returned.
    outcome: Result<(), Refused>,
}

/// One step: a command at `last_applied + offset` (stale when `offset <= 0`).
#[derive(Debug, Clone)]
struct Step {
    offset: i8,
    cmd: Command,
}

fn step_index(last_applied: u64, offset: i8) -> u64 {
    last_applied.saturating_add_signed(i64::from(offset))
}

impl Model {
    /// Applies `cmd` at `index` to this (working) copy; `Err` means it must be refused.
    fn exec(&mut self, index: u64, cmd: &Command) -> Result<(), Refused> {
        if index <= self.last_applied {
            return Err(Refused::Stale);
        }
        let before = self.clone();
        match cmd {
            Command::UpsertNode { node } => self.upsert_node(index, node)?,
            Command::UpsertNodes { nodes } => {
                if nodes.is_empty() {
                    return Err(Refused::Empty);
                }
                for node in nodes {
                    Self::node_shape(node)?;
                }
                for node in nodes {
                    self.upsert_node(index, node)?;
                }
            }
            Command::DeleteNodes { ids } => {
                if ids.is_empty() {
                    return Err(Refused::Empty);
                }
                if let Some(missing) = ids.iter().find(|n| !self.nodes.contains_key(*n)) {
                    return Err(Refused::NodeNotFound(missing.clone()));
                }
                for n in ids {
                    self.nodes.remove(n);
                    for p in self.plugins.values_mut() {
                        p.controllers.remove(n);
                        p.nodes.remove(n);
                    }
                }
            }
            Command::UpdateNodeStatus { id, status } => {
                self.update_node(index, id, |n| n.status = *status)?;
            }
            Command::UpdateNodeDrain { id, drain } => {
                self.update_node(index, id, |n| n.drain = *drain)?;
            }
            Command::UpdateNodeEligibility { id, eligible } => {
                self.update_node(index, id, |n| n.eligible = *eligible)?;
            }
            Command::UpsertAllocs { allocs } => {
                if allocs.iter().any(|a| a.id.is_empty()) {
                    return Err(Refused::MissingField);
                }
                self.check_alloc_versions(allocs)?;
                for a in allocs {
                    self.alloc_started(index, a);
                    let mut row = a.clone();
                    row.create_index = self.allocs.get(&a.id).map_or(index, |o| o.create_index);
                    row.modify_index = index;
                    self.allocs.insert(a.id.clone(), row);
                    let server_terminal =
                        matches!(a.desired_status, DesiredStatus::Stop | DesiredStatus::Evict);
                    if !server_terminal {
                        continue;
                    }
                    self.stopped.insert((a.id.clone(), a.node_id.clone()));
                    for p in self.plugins.values_mut() {
                        for map in [&mut p.controllers, &mut p.nodes] {
                            if map.get(&a.node_id).is_some_and(|i| i.alloc_id == a.id) {
                                map.remove(&a.node_id);
                            }
                        }
                    }
                }
            }
            Command::DeleteAllocs { ids } => {
                for a in ids {
                    self.allocs.remove(a);
                }
            }
            Command::RegisterCsiVolumes { volumes } => {
                if volumes.is_empty() {
                    return Err(Refused::Empty);
                }
                // Required fields are input rules: every volume's, before any is written.
                if volumes
                    .iter()
                    .any(|v| v.id.is_empty() || v.namespace.is_empty() || v.plugin_id.is_empty())
                {
                    return Err(Refused::MissingField);
                }
                for v in volumes {
                    self.register(index, v)?;
                }
            }
            Command::DeregisterCsiVolumes {
                namespace,
                ids,
                force,
            } => {
                if ids.is_empty() {
                    return Err(Refused::Empty);
                }
                for v in ids {
                    self.deregister(namespace, v, *force)?;
                }
            }
            Command::ClaimCsiVolumes { claims } => {
                if claims.is_empty() {
                    return Err(Refused::Empty);
                }
                for c in claims {
                    self.claim(index, c)?;
                }
            }
            Command::UpsertJobs { jobs } => self.upsert_jobs(index, jobs)?,
            Command::StopJobs { namespace, ids } => self.end_jobs(index, namespace, ids, false)?,
            Command::PurgeJobs { namespace, ids } => self.end_jobs(index, namespace, ids, true)?,
            other => panic!("the model does not know {}", other.kind()),
        }
        self.recompute_expectations(index);
        self.finish_plugins(&before.plugins, index);
        // A table whose rows changed takes this index; the others keep theirs.
        let changed = [
            self.nodes != before.nodes,
            self.allocs != before.allocs,
            self.plugins != before.plugins,
            self.volumes != before.volumes,
            self.jobs != before.jobs,
        ];
        for (t, changed) in changed.into_iter().enumerate() {
            if changed {
                self.table_index[t] = index;
            }
        }
        self.last_applied = index;
        Ok(())
    }

    /// The node rules that need no state (input rules: checked for every node of a
    /// command before any of them is written).
    fn node_shape(node: &Node) -> Result<(), Refused> {
        if node.id.is_empty() {
            return Err(Refused::MissingField);
        }
        let maps = [&node.csi_controller_plugins, &node.csi_node_plugins];
        for (key, info) in maps.iter().flat_map(|m| m.iter()) {
            if key.is_empty() || *key != info.plugin_id {
                return Err(Refused::Mismatch);
            }
        }
        // Halves match maps: an entry has its map's half; a half it carries has an
        // entry in the map of that kind.
        let (ctrl, nodes) = (&node.csi_controller_plugins, &node.csi_node_plugins);
        for (key, info) in ctrl.iter() {
            if !info.is_controller() || (info.is_node() && !nodes.contains_key(key)) {
                return Err(Refused::Halves);
            }
        }
        for (key, info) in nodes.iter() {
            if !info.is_node() || (info.is_controller() && !ctrl.contains_key(key)) {
                return Err(Refused::Halves);
            }
        }
        Ok(())
    }

    fn upsert_node(&mut self, index: u64, node: &Node) -> Result<(), Refused> {
        Self::node_shape(node)?;
        let maps = [&node.csi_controller_plugins, &node.csi_node_plugins];
        let n = node.id.clone();
        let mut row = node.clone();
        row.create_index = self.nodes.get(&n).map_or(index, |o| o.create_index);
        row.modify_index = index;
        self.nodes.insert(n.clone(), row);
        // Every fingerprint in turn, as the instance of its map's kind: the controller
        // map, then the node map.
        let filed = maps
            .iter()
            .zip([true, false])
            .flat_map(|(m, is_ctrl)| m.values().map(move |i| (is_ctrl, i)));
        for (is_ctrl, info) in filed {
            let p = match self.plugins.get_mut(&info.plugin_id) {
                Some(p) => p,
                None if info.healthy => self
                    .plugins
                    .entry(info.plugin_id.clone())
                    .or_insert_with(|| MPlugin::new(index)),
                None => continue,
            };
            p.provider.clone_from(&info.provider);
            p.version.clone_from(&info.provider_version);
            if is_ctrl {
                p.controller_required = info.requires_controller_plugin;
                if p.controllers.contains_key(&n) || info.healthy {
                    record(&mut p.controllers, &n, info);
                }
            } else if p.nodes.contains_key(&n) || info.healthy {
                record(&mut p.nodes, &n, info);
            }
        }
        // The removal sweep, per kind.
        for (pid, p) in self.plugins.iter_mut() {
            if !node.csi_controller_plugins.contains_key(pid) {
                p.controllers.remove(&n);
            }
            if !node.csi_node_plugins.contains_key(pid) {
                p.nodes.remove(&n);
            }
        }
        Ok(())
    }

    fn update_node(
        &mut self,
        index: u64,
        node_id: &Id,
        change: impl FnOnce(&mut Node),
    ) -> Result<(), Refused> {
        let row = self
            .nodes
            .get_mut(node_id)
            .ok_or_else(|| Refused::NodeNotFound(node_id.clone()))?;
        let old = row.clone();
        change(row);
        if *row != old {
            row.modify_index = index;
        }
        Ok(())
    }

    /// Empty plugins go; a plugin whose content did not change is kept exactly as it
    /// was; a changed one takes this index.
    fn finish_plugins(&mut self, before: &BTreeMap<Id, MPlugin>, index: u64) {
        self.plugins.retain(|_, p| !p.is_empty());
        for (pid, p) in self.plugins.iter_mut() {
            match before.get(pid) {
                Some(old) if old.same_content(p) => *p = old.clone(),
                Some(old) => {
                    p.create_index = old.create_index;
                    p.modify_index = index;
                }
                None => {
                    p.create_index = index;
                    p.modify_index = index;
                }
            }
        }
    }

    fn register(&mut self, index: u64, req: &CsiVolume) -> Result<(), Refused> {
        if req.id.is_empty() || req.namespace.is_empty() || req.plugin_id.is_empty() {
            return Err(Refused::MissingField);
        }
        let plugin = self
            .plugins
            .get(&req.plugin_id)
            .ok_or_else(|| Refused::PluginNotFound(req.plugin_id.clone()))?;
        let key = (req.namespace.clone(), req.id.clone());
        let mut v = match self.volumes.get(&key) {
            Some(old) => {
                if old.external_id != req.external_id {
                    return Err(Refused::IdentityChanged("external id"));
                }
                if old.plugin_id != req.plugin_id {
                    return Err(Refused::IdentityChanged("plugin id"));
                }
                // An empty provider on either side is "not known yet" (§4.6).
                let unknown = old.provider.is_empty() || plugin.provider.is_empty();
                if !unknown && old.provider != plugin.provider {
                    return Err(Refused::IdentityChanged("provider"));
                }
                let mut v = old.clone();
                if !plugin.provider.is_empty() {
                    v.provider.clone_from(&plugin.provider);
                }
                v
            }
            None => CsiVolume {
                namespace: req.namespace.clone(),
                id: req.id.clone(),
                external_id: req.external_id.clone(),
                plugin_id: req.plugin_id.clone(),
                provider: plugin.provider.clone(),
                create_index: index,
                ..Default::default()
            },
        };
        v.name.clone_from(&req.name);
        v.topologies.clone_from(&req.topologies);
        v.requested_capabilities
            .clone_from(&req.requested_capabilities);
        v.mount_options.clone_from(&req.mount_options);
        v.secrets.clone_from(&req.secrets);
        v.parameters.clone_from(&req.parameters);
        v.context.clone_from(&req.context);
        v.controller_required = plugin.controller_required;
        if self.volumes.get(&key) != Some(&v) {
            v.modify_index = index;
            self.volumes.insert(key, v);
        }
        Ok(())
    }

    fn deregister(&mut self, namespace: &Id, vol: &Id, force: bool) -> Result<(), Refused> {
        let key = (namespace.clone(), vol.clone());
        let v = self
            .volumes
            .get(&key)
            .ok_or_else(|| Refused::VolumeNotFound(namespace.clone(), vol.clone()))?;
        for a in v.read_allocs.iter().chain(&v.write_allocs) {
            let safe = force
                && self.allocs.get(a).is_none_or(|x| {
                    x.desired_status != DesiredStatus::Run
                        || matches!(
                            x.client_status,
                            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
                        )
                });
            if !safe {
                return Err(Refused::InUse(a.clone()));
            }
        }
        self.volumes.remove(&key);
        Ok(())
    }

    fn client_terminal(&self, alloc: &Id) -> Option<bool> {
        self.allocs.get(alloc).map(|a| {
            matches!(
                a.client_status,
                ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
            )
        })
    }

    fn claim(&mut self, index: u64, req: &CsiVolumeClaimRequest) -> Result<(), Refused> {
        let key = (req.namespace.clone(), req.volume_id.clone());
        let stored = self
            .volumes
            .get(&key)
            .cloned()
            .ok_or_else(|| Refused::VolumeNotFound(key.0.clone(), key.1.clone()))?;
        let c = &req.claim;
        let a = &c.alloc_id;
        // The volume as the decision sees it: plugin health, and the past claims of
        // allocs gone or client-terminal repaired.
        let plugin = self.plugins.get(&stored.plugin_id);
        let schedulable = plugin.is_some_and(MPlugin::schedulable);
        let mut v = stored.clone();
        if let Some(p) = plugin {
            v.controller_required = p.controller_required;
        }
        let mut repaired = Vec::new();
        for (mode, allocs, claims) in [
            (Mode::Read, &v.read_allocs, &v.read_claims),
            (Mode::Write, &v.write_allocs, &v.write_claims),
        ] {
            for holder in allocs {
                if v.past_claims.contains_key(holder) || self.client_terminal(holder) == Some(false)
                {
                    continue;
                }
                let past = match (claims.get(holder), self.allocs.get(holder)) {
                    (Some(current), _) => CsiVolumeClaim {
                        alloc_id: holder.clone(),
                        state: ClaimState::Unpublishing,
                        ..current.clone()
                    },
                    (None, alloc) => CsiVolumeClaim {
                        alloc_id: holder.clone(),
                        node_id: alloc.map(|x| x.node_id.clone()).unwrap_or_else(|| id("")),
                        mode,
                        state: ClaimState::Unpublishing,
                        ..Default::default()
                    },
                };
                repaired.push(past);
            }
        }
        for past in repaired {
            v.past_claims.insert(past.alloc_id.clone(), past);
        }
        let mut write_back = |v: CsiVolume, always: bool| {
            if always || v != stored {
                let mut v = v;
                v.modify_index = index;
                self.volumes.insert(key.clone(), v);
            }
        };
        if a.is_empty() {
            // A gc claim: persists the repair, and always moves the modify index.
            write_back(v, true);
            return Ok(());
        }
        let taking = c.state == ClaimState::Taken && c.mode != Mode::Gc;
        if !taking {
            if c.state == ClaimState::ReadyToFree {
                v.read_allocs.remove(a);
                v.write_allocs.remove(a);
                v.read_claims.remove(a);
                v.write_claims.remove(a);
                v.past_claims.remove(a);
                if v.read_allocs.is_empty() && v.write_allocs.is_empty() {
                    v.access_mode = Access::Unknown;
                    v.attachment_mode = Attach::Unknown;
                }
            } else {
                v.past_claims.insert(a.clone(), c.clone());
            }
            write_back(v, false);
            return Ok(());
        }
        let write = c.mode == Mode::Write;
        let holding = if write {
            v.write_allocs.contains(a)
        } else {
            v.read_allocs.contains(a)
        };
        if holding {
            return Ok(());
        }
        if !self.allocs.contains_key(a) {
            return Err(Refused::AllocNotFound(a.clone()));
        }
        if v.attachment_mode != Attach::Unknown
            && c.attachment_mode != Attach::Unknown
            && v.attachment_mode != c.attachment_mode
        {
            return Err(Refused::AttachmentConflict);
        }
        let can_write = match v.access_mode {
            Access::Unknown => v
                .requested_capabilities
                .iter()
                .any(|cap| WRITABLE.contains(&cap.access_mode)),
            mode => WRITABLE.contains(&mode),
        };
        if !schedulable || (write && !can_write) {
            return Err(Refused::Unschedulable);
        }
        if write
            && v.access_mode == Access::Unknown
            && c.access_mode != Access::Unknown
            && !WRITABLE.contains(&c.access_mode)
        {
            return Err(Refused::ReadOnlyAccessMode);
        }
        // The mode the volume will be in: the claim's, while the volume's is unknown;
        // the claims already held must fit it too.
        let mode = match v.access_mode {
            Access::Unknown => c.access_mode,
            known => known,
        };
        let (readers, writers) = (v.read_allocs.len(), v.write_allocs.len());
        let (read_free, write_free) = free_claims(mode, readers, writers);
        let (max_readers, max_writers) = claim_limits(mode);
        let fits = readers <= max_readers && writers <= max_writers;
        if !(if write { write_free } else { read_free }) || !fits {
            return Err(Refused::MaxClaims);
        }
        if write {
            v.read_allocs.remove(a);
            v.read_claims.remove(a);
            v.write_allocs.insert(a.clone());
            v.write_claims.insert(a.clone(), c.clone());
        } else {
            v.write_allocs.remove(a);
            v.write_claims.remove(a);
            v.read_allocs.insert(a.clone());
            v.read_claims.insert(a.clone(), c.clone());
        }
        v.past_claims.remove(a);
        if v.access_mode == Access::Unknown {
            v.access_mode = c.access_mode;
        }
        if v.attachment_mode == Attach::Unknown {
            v.attachment_mode = c.attachment_mode;
        }
        write_back(v, false);
        Ok(())
    }

    /// The from-scratch cross-check: what the plugin table must be, given the nodes
    /// alone, wherever that does not depend on the order of writes.
    fn cross_check(&self) {
        for (pid, p) in &self.plugins {
            assert!(!p.is_empty(), "model: plugin {pid} is empty");
            for (kind, map) in [("controller", &p.controllers), ("node", &p.nodes)] {
                for (n, info) in map {
                    let node = self
                        .nodes
                        .get(n)
                        .unwrap_or_else(|| panic!("model: {pid} {kind} entry on missing {n}"));
                    let listed = if kind == "controller" {
                        &node.csi_controller_plugins
                    } else {
                        &node.csi_node_plugins
                    };
                    assert!(listed.contains_key(pid), "model: {pid} {kind} on {n}");
                    assert_eq!(&info.plugin_id, pid);
                }
            }
        }
        for (n, node) in &self.nodes {
            let kinds = [
                ("controller", &node.csi_controller_plugins),
                ("node", &node.csi_node_plugins),
            ];
            for (kind, listed) in kinds {
                for (pid, report) in listed.iter() {
                    let entry = self.plugins.get(pid).and_then(|p| {
                        if kind == "controller" {
                            p.controllers.get(n)
                        } else {
                            p.nodes.get(n)
                        }
                    });
                    match entry {
                        Some(e) => assert_eq!(**e, **report, "model: {pid} {kind} on {n}"),
                        None => assert!(
                            !report.healthy
                                || self.stopped.contains(&(report.alloc_id.clone(), n.clone())),
                            "model: {n} reports {pid} healthy, no {kind} entry"
                        ),
                    }
                }
            }
        }
        for v in self.volumes.values() {
            let (r, w) = (v.read_allocs.len(), v.write_allocs.len());
            let (max_r, max_w) = claim_limits(v.access_mode);
            assert!(r <= max_r && w <= max_w, "model: {v:?}");
            assert!(v.read_allocs.is_disjoint(&v.write_allocs));
            if r + w == 0 {
                assert_eq!(
                    (v.access_mode, v.attachment_mode),
                    (Access::Unknown, Attach::Unknown)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Generation.
// ---------------------------------------------------------------------------------

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = Id> + Clone {
    prop::sample::select(pool).prop_map(id)
}

/// A fingerprint; `halves`: bit 1 controller, bit 2 node.
fn fingerprint(plugin: Id, halves: u8) -> impl Strategy<Value = Arc<CsiInfo>> {
    (
        prop::bool::weighted(0.75),
        prop::option::weighted(0.85, pick(&ALLOCS)),
        prop::sample::select(&["ebs.csi.aws.com", "nfs.csi.k8s.io"][..]),
        prop::sample::select(&["1.0", "2.0"][..]),
        any::<bool>(),
        0..3u64,
    )
        .prop_map(move |(healthy, alloc, provider, version, requires, time)| {
            Arc::new(CsiInfo {
                plugin_id: plugin.clone(),
                alloc_id: alloc.unwrap_or_else(|| id("")),
                healthy,
                health_description: if healthy { "ok" } else { "failing" }.into(),
                update_time: time,
                provider: provider.into(),
                provider_version: version.into(),
                requires_controller_plugin: requires,
                requires_topologies: false,
                controller_info: (halves & 1 != 0).then(CsiControllerInfo::default),
                node_info: (halves & 2 != 0).then(|| CsiNodeInfo {
                    id: "i-1".into(),
                    max_volumes: 4,
                    accessible_topology: None,
                    requires_node_stage_volume: true,
                }),
            })
        })
}

/// Where the fingerprints of one plugin go in a node report.
fn placement() -> impl Strategy<Value = (Option<Arc<CsiInfo>>, Option<Arc<CsiInfo>>)> {
    pick(&PLUGINS).prop_flat_map(|p| {
        prop_oneof![
            4 => fingerprint(p.clone(), 1).prop_map(|c| (Some(c), None)),
            5 => fingerprint(p.clone(), 2).prop_map(|n| (None, Some(n))),
            2 => (fingerprint(p.clone(), 1), fingerprint(p.clone(), 2))
                .prop_map(|(c, n)| (Some(c), Some(n))),
            2 => fingerprint(p.clone(), 3).prop_map(|m| (Some(m.clone()), Some(m))),
            // Two fingerprints of one plugin that each carry a controller half.
            1 => (fingerprint(p.clone(), 1), fingerprint(p.clone(), 3))
                .prop_map(|(c, m)| (Some(c), Some(m))),
            // A monolith, or a report of the other kind, filed in one map only; a
            // report with neither half.
            1 => fingerprint(p.clone(), 3).prop_map(|m| (Some(m), None)),
            1 => fingerprint(p.clone(), 3).prop_map(|m| (None, Some(m))),
            1 => fingerprint(p.clone(), 2).prop_map(|n| (Some(n), None)),
            1 => fingerprint(p, 0).prop_map(|x| (None, Some(x))),
        ]
    })
}

fn node_strategy() -> impl Strategy<Value = Node> {
    (
        prop_oneof![30 => pick(&NODES), 1 => Just(id(""))],
        prop::collection::vec(placement(), 0..4),
        prop::sample::select(&[NodeStatus::Ready, NodeStatus::Down][..]),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(node_id, placements, status, drain, mismatch, ineligible)| {
                let mut n = Node::new(node_id, "client");
                n.status = status;
                n.drain = drain;
                n.eligible = !ineligible;
                for (c, d) in placements {
                    if let Some(c) = c {
                        n.csi_controller_plugins.insert(c.plugin_id.clone(), c);
                    }
                    if let Some(d) = d {
                        n.csi_node_plugins.insert(d.plugin_id.clone(), d);
                    }
                }
                if mismatch && let Some((_, info)) = n.csi_node_plugins.pop_first() {
                    n.csi_node_plugins.insert(id("wrong"), info);
                }
                n
            },
        )
}

/// A node stored in the model, reported again: later, or with health flipped.
fn heartbeat(nodes: Vec<Node>) -> impl Strategy<Value = Node> {
    (prop::sample::select(nodes), 3..10u64, any::<bool>()).prop_map(|(mut n, time, flip)| {
        for info in n
            .csi_controller_plugins
            .values_mut()
            .chain(n.csi_node_plugins.values_mut())
        {
            let info = Arc::make_mut(info);
            info.update_time = time;
            if flip {
                info.healthy = !info.healthy;
            }
        }
        n
    })
}

fn alloc_strategy() -> impl Strategy<Value = Allocation> {
    (
        prop_oneof![40 => pick(&ALLOCS), 1 => Just(id(""))],
        pick(&NAMESPACES),
        pick(&NODES),
        prop::sample::select(
            &[
                DesiredStatus::Run,
                DesiredStatus::Run,
                DesiredStatus::Stop,
                DesiredStatus::Evict,
            ][..],
        ),
        prop::sample::select(
            &[
                ClientStatus::Pending,
                ClientStatus::Running,
                ClientStatus::Running,
                ClientStatus::Complete,
                ClientStatus::Failed,
                ClientStatus::Lost,
            ][..],
        ),
        prop::collection::vec((pick(&VOLUMES), any::<bool>()), 0..2),
        (
            pick(&jobs::JOBS),
            pick(&jobs::GROUPS),
            prop_oneof![6 => Just(0u64), 1 => 1..3u64],
        ),
    )
        .prop_map(
            |(alloc_id, ns, node, desired, client, vols, (job_id, group, version))| Allocation {
                id: alloc_id,
                namespace: ns,
                job_id,
                job_version: version,
                task_group: group,
                node_id: node,
                desired_status: desired,
                client_status: client,
                csi_volume_requests: vols
                    .into_iter()
                    .map(|(volume_id, read_only)| CsiVolumeRequest {
                        volume_id,
                        read_only,
                    })
                    .collect(),
                create_index: 0,
                modify_index: 0,
            },
        )
}

fn volume_strategy(plugins: Vec<Id>) -> impl Strategy<Value = CsiVolume> {
    let plugin = if plugins.is_empty() {
        pick(&PLUGINS).boxed()
    } else {
        prop_oneof![4 => prop::sample::select(plugins), 1 => pick(&PLUGINS)].boxed()
    };
    (
        prop_oneof![30 => pick(&NAMESPACES), 1 => Just(id(""))],
        pick(&VOLUMES),
        plugin,
        prop::bool::weighted(0.05),
        prop::sample::select(&["", "data"][..]),
        prop::collection::vec(
            (
                prop::sample::select(&ACCESS[..]),
                prop::sample::select(&ATTACH[..]),
            ),
            0..3,
        ),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(ns, vol, plugin, other_ext, name, caps, params)| {
            let mut v = CsiVolume::new(ns, vol.clone(), plugin);
            v.external_id = if other_ext {
                "ext-other".into()
            } else {
                format!("ext-{vol}")
            };
            v.name = name.into();
            v.requested_capabilities = caps
                .into_iter()
                .map(|(access_mode, attachment_mode)| CsiVolumeCapability {
                    access_mode,
                    attachment_mode,
                })
                .collect();
            if params {
                v.parameters.insert("type".into(), "gp3".into());
            }
            v
        })
}

fn claim_strategy(
    volumes: Vec<(Id, Id)>,
    allocs: Vec<Id>,
) -> impl Strategy<Value = CsiVolumeClaimRequest> {
    let target = if volumes.is_empty() {
        (pick(&NAMESPACES), pick(&VOLUMES)).boxed()
    } else {
        prop_oneof![
            5 => prop::sample::select(volumes),
            1 => (pick(&NAMESPACES), pick(&VOLUMES)),
        ]
        .boxed()
    };
    let alloc = if allocs.is_empty() {
        pick(&ALLOCS).boxed()
    } else {
        prop_oneof![5 => prop::sample::select(allocs), 1 => pick(&ALLOCS)].boxed()
    };
    (
        target,
        prop_oneof![12 => alloc, 1 => Just(id(""))],
        pick(&NODES),
        prop_oneof![9 => Just(Mode::Read), 9 => Just(Mode::Write), 1 => Just(Mode::Gc)],
        prop::sample::select(&ACCESS[..]),
        prop::sample::select(&ATTACH[..]),
        prop_oneof![
            6 => Just(ClaimState::Taken),
            1 => Just(ClaimState::NodeDetached),
            1 => Just(ClaimState::ControllerDetached),
            2 => Just(ClaimState::ReadyToFree),
            1 => Just(ClaimState::Unpublishing),
        ],
    )
        .prop_map(|((ns, vol), alloc_id, node, mode, access, attach, state)| {
            CsiVolumeClaimRequest {
                namespace: ns,
                volume_id: vol,
                claim: CsiVolumeClaim {
                    alloc_id,
                    node_id: node,
                    external_node_id: "i-1".into(),
                    mode,
                    access_mode: access,
                    attachment_mode: attach,
                    state,
                },
            }
        })
}

/// A list of one to `max - 1` elements, rarely an empty one.
fn list<T: std::fmt::Debug + Clone + 'static>(
    element: impl Strategy<Value = T> + 'static,
    max: usize,
) -> impl Strategy<Value = Vec<T>> {
    prop_oneof![
        1 => Just(Vec::new()),
        12 => prop::collection::vec(element, 1..max),
    ]
}

fn command_strategy(m: &Model) -> BoxedStrategy<Command> {
    let nodes: Vec<Node> = m.nodes.values().cloned().collect();
    let plugins: Vec<Id> = m.plugins.keys().cloned().collect();
    let volumes: Vec<(Id, Id)> = m.volumes.keys().cloned().collect();
    let allocs: Vec<Id> = m.allocs.keys().cloned().collect();
    let mut arms: Vec<(u32, BoxedStrategy<Command>)> = vec![
        (
            20,
            node_strategy()
                .prop_map(|node| Command::UpsertNode { node })
                .boxed(),
        ),
        (
            5,
            list(node_strategy(), 4)
                .prop_map(|nodes| Command::UpsertNodes { nodes })
                .boxed(),
        ),
        // Eight nodes and more: a batch of node rows, most of them repeated, and of
        // plugin-instance rows.
        (
            2,
            prop::collection::vec(node_strategy(), 8..12)
                .prop_map(|nodes| Command::UpsertNodes { nodes })
                .boxed(),
        ),
        (
            3,
            list(pick(&NODES), 3)
                .prop_map(|ids| Command::DeleteNodes { ids })
                .boxed(),
        ),
        (
            3,
            (pick(&NODES), 0..4usize)
                .prop_map(|(node, which)| match which {
                    0 => Command::UpdateNodeStatus {
                        id: node,
                        status: NodeStatus::Down,
                    },
                    1 => Command::UpdateNodeDrain {
                        id: node,
                        drain: true,
                    },
                    2 => Command::UpdateNodeEligibility {
                        id: node,
                        eligible: false,
                    },
                    _ => Command::UpdateNodeEligibility {
                        id: node,
                        eligible: true,
                    },
                })
                .boxed(),
        ),
        (
            14,
            list(alloc_strategy(), 4)
                .prop_map(|allocs| Command::UpsertAllocs { allocs })
                .boxed(),
        ),
        // Long enough for the engine's batch insert (`WriteTxn::insert_many` batches
        // from eight rows), with every id repeated.
        (
            2,
            prop::collection::vec(alloc_strategy(), 8..16)
                .prop_map(|allocs| Command::UpsertAllocs { allocs })
                .boxed(),
        ),
        (
            3,
            prop::collection::vec(pick(&ALLOCS), 0..3)
                .prop_map(|ids| Command::DeleteAllocs { ids })
                .boxed(),
        ),
        (
            match (plugins.is_empty(), volumes.len()) {
                (true, _) => 2,
                (false, 0..=2) => 16,
                _ => 8,
            },
            list(volume_strategy(plugins), 3)
                .prop_map(|volumes| Command::RegisterCsiVolumes { volumes })
                .boxed(),
        ),
        (
            4,
            (pick(&NAMESPACES), list(pick(&VOLUMES), 3), any::<bool>())
                .prop_map(|(namespace, ids, force)| Command::DeregisterCsiVolumes {
                    namespace,
                    ids,
                    force,
                })
                .boxed(),
        ),
        (
            6,
            list(jobs::job_strategy(), 3)
                .prop_map(|jobs| Command::UpsertJobs { jobs })
                .boxed(),
        ),
        (
            3,
            (pick(&NAMESPACES), list(pick(&jobs::JOBS), 3), any::<bool>())
                .prop_map(|(namespace, ids, purge)| {
                    if purge {
                        Command::PurgeJobs { namespace, ids }
                    } else {
                        Command::StopJobs { namespace, ids }
                    }
                })
                .boxed(),
        ),
        (
            if volumes.is_empty() { 2 } else { 30 },
            list(claim_strategy(volumes, allocs), 4)
                .prop_map(|claims| Command::ClaimCsiVolumes { claims })
                .boxed(),
        ),
    ];
    if !nodes.is_empty() {
        arms.push((
            6,
            heartbeat(nodes)
                .prop_map(|node| Command::UpsertNode { node })
                .boxed(),
        ));
    }
    Union::new_weighted(arms).boxed()
}

struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model {
            last_applied: 0,
            table_index: [0; 5],
            nodes: BTreeMap::new(),
            allocs: BTreeMap::new(),
            plugins: BTreeMap::new(),
            volumes: BTreeMap::new(),
            jobs: BTreeMap::new(),
            stopped: BTreeSet::new(),
            outcome: Ok(()),
        })
        .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        (
            prop_oneof![1 => -1i8..=0, 12 => Just(1i8), 1 => 2i8..=4],
            command_strategy(state),
        )
            .prop_map(|(offset, cmd)| Step { offset, cmd })
            .boxed()
    }

    fn apply(state: Model, step: &Step) -> Model {
        let index = step_index(state.last_applied, step.offset);
        let mut next = state.clone();
        match next.exec(index, &step.cmd) {
            Ok(()) => {
                next.outcome = Ok(());
                next.cross_check();
                next
            }
            Err(e) => Model {
                outcome: Err(e),
                ..state
            },
        }
    }
}

// ---------------------------------------------------------------------------------
// The system under test, compared with the model.
// ---------------------------------------------------------------------------------

struct StoreTest;

/// A fingerprint with its report time (which `==` ignores, and the store keeps).
fn timed(map: impl Iterator<Item = (Id, Arc<CsiInfo>)>) -> Vec<(Id, CsiInfo, u64)> {
    map.map(|(n, i)| (n, (*i).clone(), i.update_time)).collect()
}

fn compare(store: &StateStore, m: &Model) {
    let snap = store.snapshot();
    let v = snap.view();
    if let Err(e) = v.check_invariants() {
        panic!("store: {e}");
    }
    assert_eq!(v.last_applied(), m.last_applied, "last applied");
    for (t, name) in TABLES.iter().enumerate() {
        assert_eq!(
            v.raw().table_index_by_name(name).unwrap_or(0),
            m.table_index[t],
            "table index of {name}"
        );
    }

    let nodes: Vec<Node> = v.nodes().map(|n| (*n).clone()).collect();
    assert_eq!(
        nodes,
        m.nodes.values().cloned().collect::<Vec<_>>(),
        "nodes"
    );
    // Report times too: the store keeps the report it stored when an equal one comes.
    for (node, model) in nodes.iter().zip(m.nodes.values()) {
        let times = |n: &Node| {
            timed(
                n.csi_controller_plugins
                    .iter()
                    .chain(&n.csi_node_plugins)
                    .map(|(k, i)| (k.clone(), Arc::clone(i))),
            )
        };
        assert_eq!(times(node), times(model));
    }
    let allocs: Vec<Allocation> = v.allocs().map(|a| (*a).clone()).collect();
    assert_eq!(
        allocs,
        m.allocs.values().cloned().collect::<Vec<_>>(),
        "allocs"
    );

    let plugins: Vec<_> = v.csi_plugins().collect();
    let ids: Vec<&Id> = plugins.iter().map(|p| &p.id).collect();
    assert_eq!(ids, m.plugins.keys().collect::<Vec<_>>(), "plugin ids");
    for (p, (pid, mp)) in plugins.iter().zip(&m.plugins) {
        assert_eq!(
            (&p.provider, &p.version, p.controller_required),
            (&mp.provider, &mp.version, mp.controller_required),
            "plugin {pid}"
        );
        let entries = |map: &schedstate::model::PluginInstances| {
            timed(map.iter().map(|(k, i)| (k.clone(), Arc::clone(i))))
        };
        let model_entries = |map: &BTreeMap<Id, Arc<CsiInfo>>| {
            timed(map.iter().map(|(k, i)| (k.clone(), Arc::clone(i))))
        };
        assert_eq!(
            entries(&p.controllers),
            model_entries(&mp.controllers),
            "plugin {pid} controllers"
        );
        assert_eq!(
            entries(&p.nodes),
            model_entries(&mp.nodes),
            "plugin {pid} nodes"
        );
        let healthy = |m: &BTreeMap<Id, Arc<CsiInfo>>| m.values().filter(|i| i.healthy).count();
        assert_eq!(
            (
                p.controllers_healthy(),
                p.controllers.len(),
                p.nodes_healthy(),
                p.nodes.len()
            ),
            (
                healthy(&mp.controllers),
                mp.controllers.len(),
                healthy(&mp.nodes),
                mp.nodes.len()
            ),
            "plugin {pid} counts"
        );
        assert_eq!(
            (p.create_index, p.modify_index),
            (mp.create_index, mp.modify_index),
            "plugin {pid} indexes"
        );
        let jobs: Vec<(JobKey, schedstate::model::Expected)> = p
            .jobs
            .iter()
            .map(|j| ((j.namespace.clone(), j.job_id.clone()), j.expected))
            .collect();
        assert_eq!(
            jobs,
            mp.jobs.clone().into_iter().collect::<Vec<_>>(),
            "plugin {pid} job expectations"
        );
        let sum = |f: fn(&schedstate::model::Expected) -> u64| {
            mp.jobs.values().map(f).sum::<u64>() as usize
        };
        assert_eq!(
            (p.controllers_expected(), p.nodes_expected()),
            (sum(|e| e.controllers), sum(|e| e.nodes)),
            "plugin {pid} expected"
        );
    }
    let jobs: Vec<schedstate::model::Job> = v.jobs().map(|j| (*j).clone()).collect();
    assert_eq!(jobs, m.jobs.values().cloned().collect::<Vec<_>>(), "jobs");

    let volumes: Vec<CsiVolume> = v.csi_volumes().map(|x| (*x).clone()).collect();
    let expected: Vec<&CsiVolume> = m.volumes.values().collect();
    assert_eq!(volumes.len(), expected.len(), "volume count");
    for (got, want) in volumes.iter().zip(expected) {
        assert_eq!(got, want, "volume {}/{}", want.namespace, want.id);
    }
}

impl StateMachineTest for StoreTest {
    type SystemUnderTest = StateStore;
    type Reference = Reference;

    fn init_test(_: &Model) -> StateStore {
        StateStore::new()
    }

    fn apply(store: StateStore, state: &Model, step: Step) -> StateStore {
        let index = step_index(store.snapshot().view().last_applied(), step.offset);
        let before = store.snapshot().canonical_bytes().expect("encode");
        let answers = |store: &StateStore| {
            let volumes: Vec<(&str, &str)> = NAMESPACES
                .iter()
                .flat_map(|ns| VOLUMES.iter().map(move |v| (*ns, *v)))
                .collect();
            Answers::of(store, &NODES, &ALLOCS, &PLUGINS, &volumes)
        };
        let answered = answers(&store);
        let got = store
            .apply(index, &step.cmd)
            .map(|_| ())
            .map_err(|e| refused(&e));
        assert_eq!(
            got,
            state.outcome,
            "{} at {index}: {:?}",
            step.cmd.kind(),
            step.cmd
        );
        if got.is_err() {
            let after = store.snapshot().canonical_bytes().expect("encode");
            assert_eq!(
                before,
                after,
                "a refused {} changed the store",
                step.cmd.kind()
            );
        }
        // Every answer that changed moved its index (docs/rules.md §5).
        answers(&store).moved_from(&answered, step.cmd.kind());
        store
    }

    fn check_invariants(store: &StateStore, state: &Model) {
        compare(store, state);
    }
}

prop_state_machine! {
    #![proptest_config(Config {
        // `PROPTEST_CASES` raises it (an explicit count would ignore the variable).
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        max_shrink_iters: 4096,
        failure_persistence: None,
        .. Config::default()
    })]

    /// Random command sequences: the store equals the reference model after every step.
    #[test]
    fn csi_rules_match_the_reference_model(sequential 1..80 => StoreTest);
}
