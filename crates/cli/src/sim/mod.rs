//! The demo's simulated cluster: it reads the current state, decides what a scheduler
//! and its clients would do next, and applies that as commands at the next log indexes.
//! Everything it needs is derived from the stored state, so a second run continues
//! where the first stopped.
//!
//! Each plugin runs as jobs (`catalog::plugin_job`), registered at boot: the plugins'
//! expected counts come from them, so instances that are unhealthy, allocations that
//! stay pending and drained nodes show as healthy < expected.

mod nodes;
mod volumes;

use std::collections::{BTreeMap, BTreeSet};

use schedstate::model::{Allocation, ClientStatus, DesiredStatus, Id, Job, Node, NodeStatus};
use schedstate::persist::DurableStore;
use schedstate::state::{Command, StateSnapshot};

use crate::catalog::{
    FAILURES, Kind, NAMESPACE, PENDING_NODE_ALLOCS, PENDING_PLUGIN, PLUGINS, Rng, STOPPED_PLUGIN,
    fingerprint, job_id, node_id, node_index, node_name, pending_hosts, plugin_job, runs,
};
use crate::output::{CliError, err};

/// An instance of a plugin on a node: (plugin, kind, node).
type Slot = (usize, Kind, usize);

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub commands: u64,
    pub unhealthy: u64,
    pub recovered: u64,
    pub restarts: u64,
    pub claims: u64,
    pub releases: u64,
    pub registered: u64,
    pub deregistered: u64,
    pub gc_allocs: u64,
    pub node_changes: u64,
}

/// Where the simulation reads the state and sends its writes: a durable store in this
/// process (`demo`), or a cluster of agents over HTTP (`demo --cluster`).
pub trait Backend {
    /// The current state.
    fn snapshot(&self) -> StateSnapshot;

    /// Applies `command`, proposed at index `next` (a local store takes it there; a
    /// cluster picks its own), and returns the index it was applied at.
    fn apply(&mut self, next: u64, command: Command) -> Result<u64, CliError>;
}

impl Backend for &DurableStore {
    fn snapshot(&self) -> StateSnapshot {
        DurableStore::snapshot(self)
    }

    fn apply(&mut self, next: u64, command: Command) -> Result<u64, CliError> {
        let kind = command.kind();
        self.apply_owned(next, command)
            .map_err(|e| err(format!("demo: {kind} at index {next} was refused: {e}")))?;
        Ok(next)
    }
}

/// The simulated cluster over a [`Backend`].
pub struct Cluster<B: Backend> {
    /// Where the state is.
    pub db: B,
    rng: Rng,
    nodes: usize,
    /// The next log index.
    pub next: u64,
    /// The alloc running each plugin instance.
    allocs: BTreeMap<Slot, Id>,
    /// Instances reporting unhealthy, with why.
    unhealthy: BTreeMap<Slot, &'static str>,
    /// Whether the stopped plugin's job is stopped (this run).
    pub stopped: bool,
    target_volumes: usize,
    pub stats: Stats,
    /// Lines worth showing (events), taken by the caller.
    pub events: Vec<String>,
}

fn alloc(id: &Id, ns: &str, job: &str, group: &str, node: &str) -> Allocation {
    Allocation {
        id: id.clone(),
        namespace: Id::from(ns),
        job_id: Id::from(job),
        task_group: group.into(),
        node_id: Id::from(node),
        desired_status: DesiredStatus::Run,
        client_status: ClientStatus::Running,
        ..Default::default()
    }
}

fn stopped(a: &Allocation) -> Allocation {
    Allocation {
        desired_status: DesiredStatus::Stop,
        client_status: ClientStatus::Complete,
        ..a.clone()
    }
}

impl<B: Backend> Cluster<B> {
    /// A cluster of `nodes` nodes continuing after the store's last applied index.
    pub fn new(db: B, nodes: usize, seed: u64) -> Self {
        let next = db.snapshot().view().last_applied() + 1;
        Cluster {
            db,
            // Each run draws different ids, the same ones for the same seed and state.
            rng: Rng::new(seed ^ next.wrapping_mul(0x2545_f491_4f6c_dd1d)),
            nodes,
            next,
            allocs: BTreeMap::new(),
            unhealthy: BTreeMap::new(),
            stopped: false,
            target_volumes: (nodes / 5).clamp(6, 60),
            stats: Stats::default(),
            events: Vec::new(),
        }
    }

    fn apply(&mut self, command: Command) -> Result<(), CliError> {
        let index = self.db.apply(self.next, command)?;
        self.next = index + 1;
        self.stats.commands += 1;
        Ok(())
    }

    /// Simulated time of the next write, in unix nanoseconds (from the index).
    fn now(&self) -> u64 {
        1_760_000_000_000_000_000 + self.next * 1_000_000
    }

    /// The version plugin job `job` is at now (0 when not registered): what a new
    /// allocation of it runs.
    pub(super) fn job_version(&self, job: &str) -> u64 {
        self.db
            .snapshot()
            .view()
            .job(NAMESPACE, job)
            .map_or(0, |j| j.version)
    }

    /// Every plugin job of a cluster of this size.
    fn plugin_jobs(&self) -> Vec<Job> {
        (0..PLUGINS.len())
            .flat_map(|p| [Kind::Controller, Kind::Node].map(|k| plugin_job(p, k, self.nodes)))
            .flatten()
            .collect()
    }

    fn plugin_running(&self, p: usize) -> bool {
        !(p == STOPPED_PLUGIN && self.stopped)
    }

    /// The node row as node `i` reports it now: stored status and flags, fingerprints
    /// of the instances it runs.
    fn node_row(&self, i: usize) -> Node {
        let id = node_id(i);
        let mut node = match self.db.snapshot().view().node(&id) {
            Some(n) => (*n).clone(),
            None => Node::new(id.as_str(), node_name(i)),
        };
        node.csi_controller_plugins.clear();
        node.csi_node_plugins.clear();
        let time = self.now();
        for (&(p, kind, n), alloc_id) in &self.allocs {
            if n != i || !self.plugin_running(p) {
                continue;
            }
            let why = self.unhealthy.get(&(p, kind, n)).copied();
            let fp = fingerprint(p, kind, i, alloc_id, why, time);
            let map = match kind {
                Kind::Controller => &mut node.csi_controller_plugins,
                Kind::Node => &mut node.csi_node_plugins,
            };
            map.insert(Id::from(PLUGINS[p].id), fp);
        }
        node
    }

    /// Brings the cluster up: garbage-collects finished allocations, removes nodes
    /// beyond `--nodes`, registers every plugin job (a stopped one runs again) and
    /// (re)starts its allocations (reusing running ones; the pending plugin's extra
    /// allocations stay pending), has every node report its fingerprints, and
    /// registers the first volumes.
    pub fn boot(&mut self) -> Result<(), CliError> {
        let snap = self.db.snapshot();
        let v = snap.view();
        let mut claimed: BTreeSet<Id> = BTreeSet::new();
        for vol in v.csi_volumes() {
            claimed.extend(vol.read_allocs.iter().cloned());
            claimed.extend(vol.write_allocs.iter().cloned());
            claimed.extend(vol.past_claims.keys().cloned());
        }
        let gc: Vec<Id> = v
            .allocs()
            .filter(|a| a.terminal() && !claimed.contains(&a.id))
            .map(|a| a.id.clone())
            .collect();
        let extra: Vec<Id> = v
            .nodes()
            .filter(|n| node_index(&n.id).is_some_and(|i| i >= self.nodes))
            .map(|n| n.id.clone())
            .collect();
        // Running plugin allocations, by (job, node), to keep.
        let mut running: BTreeMap<(String, String), Id> = BTreeMap::new();
        for a in v.allocs().filter(|a| !a.terminal()) {
            running.insert((a.job_id.to_string(), a.node_id.to_string()), a.id.clone());
        }
        let existing: BTreeSet<Id> = v.nodes().map(|n| n.id.clone()).collect();
        let jobs = self.plugin_jobs();
        let job_count = jobs.len();
        self.apply(Command::UpsertJobs { jobs })?;
        let jobs_at = self.next - 1;
        let versions: BTreeMap<String, u64> = self
            .db
            .snapshot()
            .view()
            .jobs_in_namespace(NAMESPACE)
            .map(|j| (j.id.to_string(), j.version))
            .collect();
        let version = |job: &str| versions.get(job).copied().unwrap_or(0);
        if !gc.is_empty() {
            self.stats.gc_allocs += gc.len() as u64;
            self.apply(Command::DeleteAllocs { ids: gc })?;
        }
        if !extra.is_empty() {
            self.events
                .push(format!("removed {} nodes beyond --nodes", extra.len()));
            self.apply(Command::DeleteNodes { ids: extra })?;
        }
        for i in 0..self.nodes {
            let nid = node_id(i);
            if !existing.contains(nid.as_str()) {
                // A new client registers before it runs anything.
                let mut node = Node::new(nid.as_str(), node_name(i));
                node.status = NodeStatus::Initializing;
                self.apply(Command::UpsertNode { node })?;
            }
            let mut new = Vec::new();
            for p in 0..PLUGINS.len() {
                for kind in [Kind::Controller, Kind::Node] {
                    if !runs(p, kind, i) {
                        continue;
                    }
                    let job = job_id(p, kind);
                    let id = match running.get(&(job.clone(), nid.clone())) {
                        Some(id) => id.clone(),
                        None => {
                            let id = Id::from(self.rng.uuid());
                            let mut a = alloc(&id, NAMESPACE, &job, kind.group(), &nid);
                            a.job_version = version(&job);
                            new.push(a);
                            id
                        }
                    };
                    self.allocs.insert((p, kind, i), id);
                }
            }
            if !new.is_empty() {
                self.apply(Command::UpsertAllocs { allocs: new })?;
            }
            let mut node = self.node_row(i);
            node.status = NodeStatus::Ready;
            node.drain = false;
            node.eligible = true;
            self.apply(Command::UpsertNode { node })?;
        }
        // The pending plugin's node job asks for more than run: its extra allocations
        // are placed but never start.
        let job = job_id(PENDING_PLUGIN, Kind::Node);
        let pending: Vec<Allocation> = pending_hosts(self.nodes)
            .into_iter()
            .map(node_id)
            .filter(|nid| !running.contains_key(&(job.clone(), nid.clone())))
            .map(|nid| {
                let id = Id::from(self.rng.uuid());
                let mut a = alloc(&id, NAMESPACE, &job, Kind::Node.group(), &nid);
                a.job_version = version(&job);
                a.client_status = ClientStatus::Pending;
                a
            })
            .collect();
        if !pending.is_empty() {
            self.apply(Command::UpsertAllocs { allocs: pending })?;
        }
        let expected = plugin_job(PENDING_PLUGIN, Kind::Node, self.nodes)
            .map_or(0, |j| j.task_groups[0].count);
        self.events.push(format!(
            "index {}: {job_count} plugin jobs registered; {job} expects {expected} node instances of {}, {PENDING_NODE_ALLOCS} of its allocations stay pending (image pull)",
            crate::output::thousands(jobs_at),
            PLUGINS[PENDING_PLUGIN].id
        ));
        let have = self.db.snapshot().view().csi_volumes().count();
        for _ in have..self.target_volumes / 2 {
            self.register()?;
        }
        Ok(())
    }

    /// One step of the running cluster: a health flap, a claim or release, a plugin
    /// restart, a node status or drain change, a volume registered or deregistered, or
    /// garbage collection.
    pub fn step(&mut self) -> Result<(), CliError> {
        let roll = self.rng.below(100);
        match roll {
            0..40 => self.flap(),
            40..55 => self.claim(),
            55..72 => self.release_one(),
            72..78 => self.restart_plugin_alloc(),
            78..84 => self.register_or_deregister(),
            84..88 => self.node_status(),
            88..95 => self.drain(),
            _ => self.gc(),
        }
    }

    fn slots(&self) -> Vec<Slot> {
        self.allocs
            .keys()
            .copied()
            .filter(|s| self.plugin_running(s.0))
            .collect()
    }

    /// An instance goes unhealthy, or an unhealthy one recovers; its node reports it.
    fn flap(&mut self) -> Result<(), CliError> {
        let slots = self.slots();
        let recover = !self.unhealthy.is_empty()
            && (self.rng.chance(50) || self.unhealthy.len() * 10 > slots.len());
        let slot = if recover {
            let list: Vec<Slot> = self.unhealthy.keys().copied().collect();
            let s = *self.rng.pick(&list);
            self.unhealthy.remove(&s);
            self.stats.recovered += 1;
            s
        } else {
            let s = *self.rng.pick(&slots);
            if self.unhealthy.contains_key(&s) {
                return Ok(());
            }
            let why = *self.rng.pick(&FAILURES);
            self.unhealthy.insert(s, why);
            self.stats.unhealthy += 1;
            s
        };
        let node = self.node_row(slot.2);
        self.apply(Command::UpsertNode { node })
    }

    /// A plugin allocation is replaced: the new one starts, the node reports it, the
    /// old one stops (removing only its own instance).
    fn restart_plugin_alloc(&mut self) -> Result<(), CliError> {
        let slots = self.slots();
        let slot = *self.rng.pick(&slots);
        let (p, kind, i) = slot;
        let Some(old) = self.db.snapshot().view().alloc(&self.allocs[&slot]) else {
            return Ok(());
        };
        let id = Id::from(self.rng.uuid());
        let job = job_id(p, kind);
        let mut new = alloc(&id, NAMESPACE, &job, kind.group(), &node_id(i));
        new.job_version = self.job_version(&job);
        self.apply(Command::UpsertAllocs { allocs: vec![new] })?;
        self.allocs.insert(slot, id);
        self.unhealthy.remove(&slot);
        let node = self.node_row(i);
        self.apply(Command::UpsertNode { node })?;
        self.stats.restarts += 1;
        self.apply(Command::UpsertAllocs {
            allocs: vec![stopped(&old)],
        })
    }

    /// Deletes finished allocations no claim refers to.
    fn gc(&mut self) -> Result<(), CliError> {
        let snap = self.db.snapshot();
        let v = snap.view();
        let mut claimed: BTreeSet<Id> = BTreeSet::new();
        for vol in v.csi_volumes() {
            claimed.extend(vol.read_claims.keys().cloned());
            claimed.extend(vol.write_claims.keys().cloned());
            claimed.extend(vol.past_claims.keys().cloned());
        }
        let ids: Vec<Id> = v
            .allocs()
            .filter(|a| a.terminal() && !claimed.contains(&a.id))
            .map(|a| a.id.clone())
            .collect();
        if ids.is_empty() {
            return self.flap();
        }
        self.stats.gc_allocs += ids.len() as u64;
        self.apply(Command::DeleteAllocs { ids })
    }

    /// Stops the plugin jobs of [`STOPPED_PLUGIN`]: claims on its volumes are
    /// released, the jobs are stopped (dead: they expect nothing), their allocations
    /// become server-terminal (removing every instance, so the plugin, expected by no
    /// job and running nowhere, is deleted), and its nodes stop reporting it.
    pub fn stop_plugin_job(&mut self) -> Result<(), CliError> {
        let p = STOPPED_PLUGIN;
        let spec = &PLUGINS[p];
        let snap = self.db.snapshot();
        let vols: Vec<_> = snap
            .view()
            .csi_volumes()
            .filter(|v| &*v.plugin_id == spec.id)
            .collect();
        for vol in vols {
            for c in vol.read_claims.values().chain(vol.write_claims.values()) {
                self.release(&vol.namespace, &vol.id, c)?;
            }
        }
        let ids: Vec<Id> = [Kind::Controller, Kind::Node]
            .iter()
            .filter_map(|&k| plugin_job(p, k, self.nodes))
            .map(|j| j.id)
            .collect();
        self.apply(Command::StopJobs {
            namespace: Id::from(NAMESPACE),
            ids,
        })?;
        let snap = self.db.snapshot();
        let allocs: Vec<Allocation> = [Kind::Controller, Kind::Node]
            .iter()
            .flat_map(|&k| {
                snap.view()
                    .allocs_by_job(NAMESPACE, &job_id(p, k))
                    .collect::<Vec<_>>()
            })
            .filter(|a| !a.terminal())
            .map(|a| stopped(&a))
            .collect();
        let count = allocs.len();
        if count > 0 {
            self.apply(Command::UpsertAllocs { allocs })?;
        }
        let index = self.next - 1;
        self.stopped = true;
        let gone = self.db.snapshot().view().csi_plugin(spec.id).is_none();
        self.events.push(format!(
            "index {}: stopped jobs {}-* (dead, expecting nothing): {count} allocations server-terminal; plugin {} {}",
            crate::output::thousands(index),
            spec.job,
            spec.id,
            if gone {
                "removed (no instances left, no live job expects any)"
            } else {
                "still present"
            }
        ));
        let hosts: Vec<usize> = (0..self.nodes)
            .filter(|&i| runs(p, Kind::Node, i))
            .collect();
        for i in hosts {
            self.unhealthy.retain(|s, _| s.0 != p);
            let node = self.node_row(i);
            self.apply(Command::UpsertNode { node })?;
        }
        Ok(())
    }

    /// The number of instances reporting unhealthy right now.
    pub fn unhealthy_now(&self) -> usize {
        self.unhealthy.len()
    }
}
