//! Criterion benchmarks of the state layer: node upserts with plugin derivation at
//! several cluster sizes, a batch of them applied as one replicated log entry is,
//! plugin denormalization, and the cost of jobs (a job registration, and an
//! allocation write, with 1,000 jobs and 10k allocations).
//!
//! The cluster follows the shape of the peer workload (see
//! `../shared/peers/go-memdb/RESULTS.md` §4): every node runs node instances of two of
//! ten plugins, every tenth node also a controller, ten allocations per node.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiPluginType, Id, Job,
    JobType, Node, Task, TaskCsiPlugin, TaskGroup,
};
use schedstate::state::{Command, StateStore};

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix64;

const PLUGINS: usize = 10;

fn fingerprint(plugin: usize, alloc: &Id, controller: bool, healthy: bool) -> Arc<CsiInfo> {
    Arc::new(CsiInfo {
        plugin_id: format!("plugin-{plugin:02}").into(),
        alloc_id: alloc.clone(),
        healthy,
        provider: format!("org.example.csi.driver-{plugin:02}").into(),
        provider_version: "1.2.3".into(),
        requires_controller_plugin: true,
        controller_info: controller.then(CsiControllerInfo::default),
        node_info: (!controller).then(CsiNodeInfo::default),
        ..Default::default()
    })
}

/// Loads `n` nodes (with their allocs) in batches; returns the store, the nodes and
/// the next free index.
fn cluster(n: usize) -> (StateStore, Vec<Node>, u64) {
    let store = StateStore::new();
    let mut g = SplitMix64(42);
    let mut nodes = Vec::with_capacity(n);
    let mut index = 1;
    for i in 0..n {
        let id: Id = g.uuid().into();
        let p1 = g.intn(PLUGINS);
        let p2 = (p1 + 1 + g.intn(PLUGINS - 1)) % PLUGINS;
        let allocs: Vec<Allocation> = (0..10)
            .map(|j| Allocation {
                id: g.uuid().into(),
                namespace: "default".into(),
                job_id: format!("job-{:03}", (i * 10 + j) % 500).into(),
                task_group: "tg".into(),
                node_id: id.clone(),
                client_status: ClientStatus::Running,
                ..Default::default()
            })
            .collect();
        let mut node = Node::new(id, format!("node-{i:05}"));
        let f1 = fingerprint(p1, &allocs[0].id, false, true);
        let f2 = fingerprint(p2, &allocs[1].id, false, true);
        node.csi_node_plugins.insert(f1.plugin_id.clone(), f1);
        node.csi_node_plugins.insert(f2.plugin_id.clone(), f2);
        if i % 10 == 0 {
            let c = fingerprint(p1, &allocs[2].id, true, true);
            node.csi_controller_plugins.insert(c.plugin_id.clone(), c);
        }
        store.upsert_allocs(index, allocs).expect("allocs");
        store.upsert_node(index + 1, node.clone()).expect("node");
        index += 2;
        nodes.push(node);
    }
    (store, nodes, index)
}

fn upsert_node_txn(c: &mut Criterion) {
    let mut group = c.benchmark_group("upsert_node_txn");
    for n in [1_000usize, 10_000, 50_000] {
        let (store, nodes, mut index) = cluster(n);
        let mut g = SplitMix64(3001);
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| {
                let i = g.intn(n);
                let mut node = nodes[i].clone();
                flip_first_fingerprint(&mut node);
                store.upsert_node(index, node).expect("upsert");
                index += 1;
            });
        });
    }
    group.finish();
}

/// Flips the health of the first node fingerprint of `node`.
fn flip_first_fingerprint(node: &mut Node) {
    let key = node
        .csi_node_plugins
        .keys()
        .next()
        .cloned()
        .expect("fingerprint");
    let mut f = (*node.csi_node_plugins[&key]).clone();
    f.healthy = !f.healthy;
    node.csi_node_plugins.insert(key, Arc::new(f));
}

/// 32 node upserts (each flipping a fingerprint's health) in one `apply_batch`, as a
/// replicated server applies one log entry under 64 writers (~32 commands per entry):
/// one transaction, a savepoint per command.
fn apply_batch(c: &mut Criterion) {
    let (store, mut nodes, mut index) = cluster(1_000);
    let mut g = SplitMix64(3002);
    c.bench_function("apply_batch/32_node_upserts_of_1000", |b| {
        b.iter_batched(
            || {
                (0..32)
                    .map(|_| {
                        let node = &mut nodes[g.intn(1_000)];
                        flip_first_fingerprint(node);
                        Command::UpsertNode { node: node.clone() }
                    })
                    .collect::<Vec<_>>()
            },
            |commands| {
                let outcome = store.apply_batch(index, &commands).expect("batch");
                index += 1;
                outcome
            },
            BatchSize::SmallInput,
        );
    });
}

fn plugin_denormalize(c: &mut Criterion) {
    let (store, _, _) = cluster(10_000);
    let snap = store.snapshot();
    let plugin = snap.view().csi_plugin("plugin-03").expect("plugin");
    c.bench_function("plugin_denormalize_2k_allocs", |b| {
        b.iter(|| black_box(snap.view().denormalize_csi_plugin(&plugin)));
    });
}

/// Job `i` of the job benches: every tenth a system job running node instances of
/// its plugin on every node; the others service jobs with a controller group (count 2)
/// and a node group (count `nodes`).
fn job(i: usize, nodes: u32) -> Job {
    let plugin: Id = format!("plugin-{:02}", i % PLUGINS).into();
    let task = |kind| Task {
        name: "plugin".into(),
        csi_plugin: Some(TaskCsiPlugin {
            id: plugin.clone(),
            plugin_type: kind,
        }),
    };
    let system = i.is_multiple_of(10);
    let mut groups = vec![TaskGroup {
        name: "tg".into(),
        count: nodes,
        tasks: vec![task(CsiPluginType::Node)],
    }];
    if !system {
        groups.push(TaskGroup {
            name: "controller".into(),
            count: 2,
            tasks: vec![task(CsiPluginType::Controller)],
        });
    }
    Job {
        job_type: if system {
            JobType::System
        } else {
            JobType::Service
        },
        task_groups: groups,
        ..Job::new("default", format!("job-{i:03}"))
    }
}

/// The 1,000-node cluster (10k allocations of 1,000 jobs, 10 each) with its jobs.
fn cluster_with_jobs() -> (StateStore, u64) {
    let (store, _, mut index) = cluster(1_000);
    let jobs: Vec<Job> = (0..1_000).map(|i| job(i, 3)).collect();
    store.upsert_jobs(index, jobs).expect("jobs");
    index += 1;
    (store, index)
}

fn job_writes(c: &mut Criterion) {
    let mut group = c.benchmark_group("jobs_1k_jobs_10k_allocs");
    let (store, mut index) = cluster_with_jobs();
    let mut g = SplitMix64(77);
    // A service job scaled (its count alternates, so every registration changes it).
    group.bench_function("register_service_job", |b| {
        b.iter(|| {
            let i = 1 + 10 * g.intn(99) + g.intn(9);
            store
                .upsert_jobs(index, vec![job(i, 3 + (index % 2) as u32)])
                .expect("register");
            index += 1;
        });
    });
    // A system job updated: its expectation is recounted from its allocations.
    group.bench_function("register_system_job", |b| {
        b.iter(|| {
            let i = 10 * g.intn(100);
            store
                .upsert_jobs(index, vec![job(i, 1 + (index % 2) as u32)])
                .expect("register");
            index += 1;
        });
    });
    // An allocation of a system job flipping between running and pending: the job
    // lookup, the version check, and no plugin write (it counts either way).
    let alloc = first_alloc_of_job_000(&store);
    group.bench_function("alloc_write_of_a_system_job", |b| {
        b.iter(|| flip_alloc(&store, &alloc, &mut index, ClientStatus::Pending));
    });
    // Flipping between running and failed: the system job's expectation of its plugin
    // moves by one each time (a plugin write).
    group.bench_function("alloc_write_moving_a_system_jobs_count", |b| {
        b.iter(|| flip_alloc(&store, &alloc, &mut index, ClientStatus::Failed));
    });
    group.finish();
    // The same allocation write in the same cluster without jobs, for the ratio.
    let (bare, _, mut index) = cluster(1_000);
    let alloc = first_alloc_of_job_000(&bare);
    c.bench_function("jobs_1k_jobs_10k_allocs/alloc_write_without_jobs", |b| {
        b.iter(|| flip_alloc(&bare, &alloc, &mut index, ClientStatus::Pending));
    });
}

fn first_alloc_of_job_000(store: &StateStore) -> Arc<Allocation> {
    store
        .snapshot()
        .view()
        .allocs_by_job("default", "job-000")
        .next()
        .expect("an alloc of job-000")
}

/// Writes `alloc` at `index` (then moves it on), running at even indexes and `other`
/// at odd ones.
fn flip_alloc(store: &StateStore, alloc: &Allocation, index: &mut u64, other: ClientStatus) {
    let mut a = alloc.clone();
    a.client_status = if index.is_multiple_of(2) {
        ClientStatus::Running
    } else {
        other
    };
    store.upsert_allocs(*index, vec![a]).expect("alloc");
    *index += 1;
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = upsert_node_txn, apply_batch, plugin_denormalize, job_writes
}
criterion_main!(benches);
