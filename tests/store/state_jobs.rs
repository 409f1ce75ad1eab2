//! Jobs and the expected counts they give plugins (docs/rules.md §4.10): the
//! scenarios of Nomad's bugs made impossible — a drain keeps expectations, a changed
//! plugin id moves them, a dead job's plugin goes once its instances go, purges after
//! renames and after the plugin was deleted succeed, system jobs follow their
//! eligible running allocations.

use schedstate::model::{
    Allocation, ClientStatus, CsiPluginType, DesiredStatus, Expected, Job, JobStatus, JobType,
    Task, TaskCsiPlugin, TaskGroup, id,
};
use schedstate::state::{Command, StateError, StateStore};
use schedstate::{ChangeKind, Table};

use crate::support::{
    Fp, assert_invariants, assert_rejected, must_plugin, node, ok, plugin, plugin_changes, up,
    up_allocs,
};

const NS: &str = "default";

fn task(name: &str, plugin: Option<(&str, CsiPluginType)>) -> Task {
    Task {
        name: id(name),
        csi_plugin: plugin.map(|(p, t)| TaskCsiPlugin {
            id: id(p),
            plugin_type: t,
        }),
    }
}

fn group(name: &str, count: u32, tasks: Vec<Task>) -> TaskGroup {
    TaskGroup {
        name: id(name),
        count,
        tasks,
    }
}

/// The usual CSI plugin job: `controllers` controller allocations and `nodes` node
/// allocations of plugin `plugin_id`.
fn plugin_job(job_id: &str, plugin_id: &str, controllers: u32, nodes: u32) -> Job {
    Job {
        task_groups: vec![
            group(
                "controller",
                controllers,
                vec![task("plugin", Some((plugin_id, CsiPluginType::Controller)))],
            ),
            group(
                "nodes",
                nodes,
                vec![task("plugin", Some((plugin_id, CsiPluginType::Node)))],
            ),
        ],
        ..Job::new(NS, job_id)
    }
}

fn system_job(job_id: &str, plugin_id: &str) -> Job {
    Job {
        job_type: JobType::System,
        task_groups: vec![group(
            "nodes",
            1,
            vec![task("plugin", Some((plugin_id, CsiPluginType::Node)))],
        )],
        ..Job::new(NS, job_id)
    }
}

fn expected(store: &StateStore, plugin_id: &str) -> (usize, usize) {
    plugin(store, plugin_id).map_or((0, 0), |p| (p.controllers_expected(), p.nodes_expected()))
}

fn job(store: &StateStore, job_id: &str) -> Option<std::sync::Arc<Job>> {
    store.snapshot().view().job(NS, job_id)
}

fn alloc_of(
    alloc_id: &str,
    job_id: &str,
    group: &str,
    node_id: &str,
    desired: DesiredStatus,
    client: ClientStatus,
) -> Allocation {
    Allocation {
        id: id(alloc_id),
        namespace: id(NS),
        job_id: id(job_id),
        task_group: id(group),
        node_id: id(node_id),
        desired_status: desired,
        client_status: client,
        ..Default::default()
    }
}

fn upsert_jobs(store: &StateStore, index: u64, jobs: Vec<Job>) {
    ok(store, index, Command::UpsertJobs { jobs });
}

/// Job `csi` (one `ebs` controller, one node) at 10; node `n1` reporting its node
/// instance (alloc `a1`) at 20; `a1` written running at 30.
fn one_running_instance(store: &StateStore) {
    upsert_jobs(store, 10, vec![plugin_job("csi", "ebs", 1, 1)]);
    up(store, 20, node("n1").node(Fp::node("ebs", "a1")));
    let a1 = alloc_of(
        "a1",
        "csi",
        "nodes",
        "n1",
        DesiredStatus::Run,
        ClientStatus::Running,
    );
    up_allocs(store, 30, vec![a1]);
}

#[test]
fn registering_a_job_creates_its_plugins_and_sets_expected_apart_from_healthy() {
    let store = StateStore::new();
    upsert_jobs(&store, 10, vec![plugin_job("ebs-plugin", "ebs", 2, 5)]);
    let p = must_plugin(&store, "ebs");
    assert_eq!((p.controllers_expected(), p.nodes_expected()), (2, 5));
    assert_eq!((p.controllers_healthy(), p.nodes_healthy()), (0, 0));
    assert!(
        p.provider.is_empty(),
        "no provider before an instance reports"
    );
    assert_eq!(
        p.job_expectation(NS, "ebs-plugin"),
        Expected {
            controllers: 2,
            nodes: 5
        }
    );
    let j = job(&store, "ebs-plugin").unwrap();
    assert_eq!(
        (j.status, j.version, j.create_index),
        (JobStatus::Pending, 0, 10)
    );

    // Two node instances report: 0/2 controllers, 2/5 nodes healthy.
    up(&store, 20, node("n1").node(Fp::node("ebs", "a-n1")));
    up(&store, 30, node("n2").node(Fp::node("ebs", "a-n2")));
    let p = must_plugin(&store, "ebs");
    assert_eq!((p.nodes_healthy(), p.nodes_expected()), (2, 5));
    assert_eq!(p.provider, crate::support::PROVIDER);
    // A volume view follows the plugin's counts.
    ok(
        &store,
        40,
        Command::RegisterCsiVolumes {
            volumes: vec![schedstate::model::CsiVolume::new(NS, "vol", "ebs")],
        },
    );
    let v = store
        .snapshot()
        .view()
        .csi_volume_denormalized(NS, "vol")
        .unwrap();
    assert_eq!(
        (v.nodes_healthy, v.nodes_expected, v.controllers_expected),
        (2, 5, 2)
    );
    assert_invariants(&store);
}

#[test]
fn a_drain_and_stopped_allocations_never_change_a_jobs_expectation() {
    // Nomad #9810 / #10073: draining wiped the expected counts ("4/0").
    let store = StateStore::new();
    upsert_jobs(&store, 10, vec![plugin_job("ebs-plugin", "ebs", 1, 2)]);
    up(
        &store,
        20,
        node("n1")
            .ctrl(Fp::controller("ebs", "c1"))
            .node(Fp::node("ebs", "a1")),
    );
    up(&store, 30, node("n2").node(Fp::node("ebs", "a2")));
    up_allocs(
        &store,
        40,
        vec![
            alloc_of(
                "c1",
                "ebs-plugin",
                "controller",
                "n1",
                DesiredStatus::Run,
                ClientStatus::Running,
            ),
            alloc_of(
                "a1",
                "ebs-plugin",
                "nodes",
                "n1",
                DesiredStatus::Run,
                ClientStatus::Running,
            ),
            alloc_of(
                "a2",
                "ebs-plugin",
                "nodes",
                "n2",
                DesiredStatus::Run,
                ClientStatus::Running,
            ),
        ],
    );
    assert_eq!(
        job(&store, "ebs-plugin").unwrap().status,
        JobStatus::Running
    );
    ok(
        &store,
        50,
        Command::UpdateNodeDrain {
            id: id("n1"),
            drain: true,
        },
    );
    ok(
        &store,
        60,
        Command::UpdateNodeEligibility {
            id: id("n1"),
            eligible: false,
        },
    );
    // The drain stops n1's allocations: their instances go, the expectation stays.
    ok(
        &store,
        70,
        Command::StopAllocs {
            ids: vec![id("c1"), id("a1")],
        },
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!((p.controllers_healthy(), p.controllers_expected()), (0, 1));
    assert_eq!((p.nodes_healthy(), p.nodes_expected()), (1, 2));
    // The node goes down, its allocations are lost and collected, the node deleted.
    ok(
        &store,
        80,
        Command::DeleteAllocs {
            ids: vec![id("c1"), id("a1")],
        },
    );
    ok(
        &store,
        90,
        Command::DeleteNodes {
            ids: vec![id("n1")],
        },
    );
    assert_eq!(expected(&store, "ebs"), (1, 2));
    assert_invariants(&store);
}

#[test]
fn a_changed_plugin_id_moves_the_expectation_at_once() {
    // Nomad #11114 / #20225: the old plugin lingered with "0/0 controllers, 0/1 nodes".
    let store = StateStore::new();
    upsert_jobs(&store, 10, vec![plugin_job("csi", "old-plugin", 1, 3)]);
    assert_eq!(expected(&store, "old-plugin"), (1, 3));
    let info = store
        .apply(
            20,
            &Command::UpsertJobs {
                jobs: vec![plugin_job("csi", "new-plugin", 1, 3)],
            },
        )
        .unwrap();
    assert!(
        plugin(&store, "old-plugin").is_none(),
        "the old plugin is gone in the same write"
    );
    assert_eq!(expected(&store, "new-plugin"), (1, 3));
    assert_eq!(
        plugin_changes(&info),
        [
            ("new-plugin".to_string(), ChangeKind::Insert),
            ("old-plugin".to_string(), ChangeKind::Delete)
        ]
    );
    let j = job(&store, "csi").unwrap();
    assert_eq!((j.version, j.create_index, j.job_modify_index), (1, 10, 20));

    // An old plugin that still has instances keeps them, and loses only the job.
    up(&store, 30, node("n1").node(Fp::node("new-plugin", "a1")));
    upsert_jobs(&store, 40, vec![plugin_job("csi", "third", 0, 1)]);
    let p = must_plugin(&store, "new-plugin");
    assert_eq!((p.nodes_healthy(), p.nodes_expected()), (1, 0));
    assert!(p.jobs.is_empty());
    assert_invariants(&store);
}

#[test]
fn a_dead_jobs_plugin_disappears_once_its_instances_go() {
    // Nomad #20555 / #25432: plugins of stopped jobs listed forever.
    let store = StateStore::new();
    one_running_instance(&store);
    ok(
        &store,
        40,
        Command::StopJobs {
            namespace: id(NS),
            ids: vec![id("csi")],
        },
    );
    let j = job(&store, "csi").unwrap();
    assert_eq!((j.status, j.modify_index), (JobStatus::Dead, 40));
    let p = must_plugin(&store, "ebs");
    assert_eq!(
        (p.nodes_healthy(), p.nodes_expected()),
        (1, 0),
        "kept by its instance only"
    );
    // Stopping again changes nothing and moves no table.
    let before = store.snapshot().view().table_index(Table::Jobs);
    ok(
        &store,
        50,
        Command::StopJobs {
            namespace: id(NS),
            ids: vec![id("csi")],
        },
    );
    assert_eq!(store.snapshot().view().table_index(Table::Jobs), before);
    // The allocation stops: its instance goes, and with it the plugin.
    ok(
        &store,
        60,
        Command::StopAllocs {
            ids: vec![id("a1")],
        },
    );
    assert!(plugin(&store, "ebs").is_none());
    assert_invariants(&store);

    // A job with no instance at all: stopping it deletes the plugin at once.
    upsert_jobs(&store, 70, vec![plugin_job("other", "efs", 0, 2)]);
    assert_eq!(expected(&store, "efs"), (0, 2));
    ok(
        &store,
        80,
        Command::StopJobs {
            namespace: id(NS),
            ids: vec![id("other")],
        },
    );
    assert!(plugin(&store, "efs").is_none());
    // Registered again: pending, a new version, expecting again.
    upsert_jobs(&store, 90, vec![plugin_job("other", "efs", 0, 2)]);
    let j = job(&store, "other").unwrap();
    assert_eq!((j.status, j.version), (JobStatus::Pending, 1));
    assert_eq!(expected(&store, "efs"), (0, 2));
    assert_invariants(&store);
}

#[test]
fn purging_after_a_rename_or_after_the_plugin_is_gone_succeeds() {
    // Nomad #7743 / #12114 / #7758.
    let store = StateStore::new();
    one_running_instance(&store);
    // The groups are renamed; the old allocation names a group the job no longer has.
    let mut renamed = plugin_job("csi", "ebs", 1, 1);
    renamed.task_groups[1].name = id("node-plugins");
    upsert_jobs(&store, 40, vec![renamed]);
    ok(
        &store,
        50,
        Command::PurgeJobs {
            namespace: id(NS),
            ids: vec![id("csi")],
        },
    );
    assert!(job(&store, "csi").is_none());
    assert!(
        store.snapshot().view().alloc("a1").is_some(),
        "allocations stay"
    );
    let p = must_plugin(&store, "ebs");
    assert_eq!((p.nodes_healthy(), p.nodes_expected()), (1, 0));
    assert_invariants(&store);

    // A job whose plugin was deleted (stopped, its instances gone) purges fine.
    upsert_jobs(&store, 60, vec![plugin_job("gone", "nfs", 0, 1)]);
    ok(
        &store,
        70,
        Command::StopJobs {
            namespace: id(NS),
            ids: vec![id("gone")],
        },
    );
    assert!(plugin(&store, "nfs").is_none());
    ok(
        &store,
        80,
        Command::PurgeJobs {
            namespace: id(NS),
            ids: vec![id("gone")],
        },
    );
    // An allocation of a purged job is still written (no job to check against).
    up_allocs(
        &store,
        90,
        vec![Allocation {
            job_version: 7,
            ..alloc_of(
                "a9",
                "gone",
                "g",
                "n1",
                DesiredStatus::Stop,
                ClientStatus::Complete,
            )
        }],
    );
    assert_invariants(&store);
}

#[test]
fn system_job_expectations_follow_eligible_running_allocations() {
    // Nomad #10297 / #12771: wrong counts for system jobs.
    let store = StateStore::new();
    for (i, n) in ["n1", "n2", "n3"].into_iter().enumerate() {
        up(&store, 10 + i as u64, node(n));
    }
    upsert_jobs(&store, 20, vec![system_job("ebs-nodes", "ebs")]);
    assert!(
        plugin(&store, "ebs").is_none(),
        "a system job with no allocation expects nothing"
    );
    let a = |alloc_id: &str, node_id: &str, client| {
        alloc_of(
            alloc_id,
            "ebs-nodes",
            "nodes",
            node_id,
            DesiredStatus::Run,
            client,
        )
    };
    up_allocs(
        &store,
        30,
        vec![
            a("s1", "n1", ClientStatus::Pending),
            a("s2", "n2", ClientStatus::Running),
            a("s3", "n3", ClientStatus::Failed),
        ],
    );
    assert_eq!(
        expected(&store, "ebs"),
        (0, 2),
        "pending and running count, failed does not"
    );
    // The failed one is replaced and starts.
    up_allocs(&store, 40, vec![a("s3b", "n3", ClientStatus::Running)]);
    assert_eq!(expected(&store, "ebs"), (0, 3));
    // An ineligible node stops counting; eligible again, it counts again.
    ok(
        &store,
        50,
        Command::UpdateNodeEligibility {
            id: id("n2"),
            eligible: false,
        },
    );
    assert_eq!(expected(&store, "ebs"), (0, 2));
    ok(
        &store,
        60,
        Command::UpdateNodeEligibility {
            id: id("n2"),
            eligible: true,
        },
    );
    assert_eq!(expected(&store, "ebs"), (0, 3));
    // A node upsert that turns the flag off counts too; a deleted node's allocations stop.
    up(&store, 70, {
        let mut b = node("n1");
        b.0.eligible = false;
        b
    });
    assert_eq!(expected(&store, "ebs"), (0, 2));
    ok(
        &store,
        80,
        Command::DeleteNodes {
            ids: vec![id("n3")],
        },
    );
    assert_eq!(expected(&store, "ebs"), (0, 1));
    // Server-terminal and deleted allocations stop counting.
    ok(
        &store,
        90,
        Command::StopAllocs {
            ids: vec![id("s2")],
        },
    );
    assert!(
        plugin(&store, "ebs").is_none(),
        "nothing expected and no instance: gone"
    );
    up_allocs(&store, 100, vec![a("s4", "n2", ClientStatus::Running)]);
    assert_eq!(expected(&store, "ebs"), (0, 1));
    ok(
        &store,
        110,
        Command::DeleteAllocs {
            ids: vec![id("s4")],
        },
    );
    assert!(plugin(&store, "ebs").is_none());
    assert_invariants(&store);
}

#[test]
fn a_monolith_counts_as_controller_and_node_and_updates_replace_expectations() {
    let store = StateStore::new();
    let mono = Job {
        task_groups: vec![group(
            "mono",
            3,
            vec![task("p", Some(("nfs", CsiPluginType::Monolith)))],
        )],
        ..Job::new(NS, "nfs")
    };
    upsert_jobs(
        &store,
        10,
        vec![mono.clone(), plugin_job("other", "nfs", 1, 1)],
    );
    assert_eq!(expected(&store, "nfs"), (4, 4));
    // The same registration again is a no-op: no new version, no plugin write.
    let plugins_before = store.snapshot().view().table_index(Table::CsiPlugins);
    upsert_jobs(&store, 20, vec![mono.clone()]);
    assert_eq!(job(&store, "nfs").unwrap().version, 0);
    assert_eq!(
        store.snapshot().view().table_index(Table::CsiPlugins),
        plugins_before
    );
    // Scaled to 5: the job's own expectation is replaced, the other job's kept.
    let mut scaled = mono;
    scaled.task_groups[0].count = 5;
    upsert_jobs(&store, 30, vec![scaled]);
    assert_eq!(expected(&store, "nfs"), (6, 6));
    assert_eq!(store.snapshot().view().table_index(Table::CsiPlugins), 30);
    assert_invariants(&store);
}

#[test]
fn bad_jobs_and_bad_job_versions_are_refused_and_change_nothing() {
    let store = StateStore::new();
    upsert_jobs(&store, 10, vec![plugin_job("csi", "ebs", 1, 1)]);

    let mut dup = plugin_job("dup", "ebs", 1, 1);
    dup.task_groups[1].name = id("controller");
    let e = assert_rejected(
        &store,
        20,
        &Command::UpsertJobs {
            jobs: vec![plugin_job("ok", "x", 1, 1), dup],
        },
    );
    assert!(
        matches!(&e, StateError::InvalidInput { reason, .. } if reason.contains("appears twice")),
        "{e}"
    );

    let mut empty_plugin = plugin_job("p", "ebs", 1, 1);
    empty_plugin.task_groups[0].tasks[0]
        .csi_plugin
        .as_mut()
        .unwrap()
        .id = id("");
    let e = assert_rejected(
        &store,
        20,
        &Command::UpsertJobs {
            jobs: vec![empty_plugin],
        },
    );
    assert!(
        matches!(
            e,
            StateError::MissingField {
                what: "csi_plugin stanza",
                field: "id"
            }
        ),
        "{e}"
    );

    let e = assert_rejected(
        &store,
        20,
        &Command::UpsertJobs {
            jobs: vec![Job::new(NS, "")],
        },
    );
    assert!(
        matches!(e, StateError::MissingField { what: "job", .. }),
        "{e}"
    );
    let e = assert_rejected(&store, 20, &Command::UpsertJobs { jobs: vec![] });
    assert_eq!(e.kind(), "EmptyRequest");

    // An allocation naming a version the job never had; the batch fails whole.
    let good = alloc_of(
        "a1",
        "csi",
        "nodes",
        "n1",
        DesiredStatus::Run,
        ClientStatus::Running,
    );
    let bad = Allocation {
        job_version: 1,
        ..alloc_of(
            "a2",
            "csi",
            "nodes",
            "n1",
            DesiredStatus::Run,
            ClientStatus::Running,
        )
    };
    let e = assert_rejected(
        &store,
        20,
        &Command::UpsertAllocs {
            allocs: vec![good, bad],
        },
    );
    assert!(
        matches!(
            &e,
            StateError::JobVersionNotFound {
                version: 1,
                current: 0,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.kind(), "JobVersionNotFound");

    // Stop and purge of unknown jobs fail whole.
    for cmd in [
        Command::StopJobs {
            namespace: id(NS),
            ids: vec![id("csi"), id("nope")],
        },
        Command::PurgeJobs {
            namespace: id(NS),
            ids: vec![id("csi"), id("nope")],
        },
    ] {
        let e = assert_rejected(&store, 20, &cmd);
        assert!(
            matches!(&e, StateError::JobNotFound { id, .. } if &**id == "nope"),
            "{e}"
        );
    }
    assert_eq!(job(&store, "csi").unwrap().status, JobStatus::Pending);
    assert_invariants(&store);
}

#[test]
fn jobs_survive_a_snapshot_and_restore() {
    let store = StateStore::new();
    up(&store, 5, node("n1"));
    upsert_jobs(
        &store,
        10,
        vec![plugin_job("csi", "ebs", 2, 3), system_job("sys", "efs")],
    );
    up_allocs(
        &store,
        20,
        vec![Allocation {
            job_version: 0,
            ..alloc_of(
                "s1",
                "sys",
                "nodes",
                "n1",
                DesiredStatus::Run,
                ClientStatus::Running,
            )
        }],
    );
    let mut bytes = Vec::new();
    store.snapshot_to(&mut bytes).unwrap();
    let restored = StateStore::new();
    restored.restore_from(&mut bytes.as_slice()).unwrap();
    assert_eq!(
        restored.snapshot().canonical_bytes().unwrap(),
        store.snapshot().canonical_bytes().unwrap()
    );
    assert_eq!(expected(&restored, "ebs"), (2, 3));
    assert_eq!(expected(&restored, "efs"), (0, 1));
    assert_eq!(
        restored.snapshot().view().job(NS, "sys").unwrap().status,
        JobStatus::Running
    );
    assert_invariants(&restored);
}

#[test]
fn allocations_of_a_job_purged_and_registered_again_can_still_be_stopped() {
    // Versions start over with the new registration; an allocation keeps the version
    // it was written with, which is checked only when named anew.
    let store = StateStore::new();
    upsert_jobs(&store, 10, vec![plugin_job("csi", "ebs", 1, 1)]);
    upsert_jobs(&store, 20, vec![plugin_job("csi", "ebs", 1, 2)]);
    up_allocs(
        &store,
        30,
        vec![Allocation {
            job_version: 1,
            ..alloc_of(
                "a1",
                "csi",
                "nodes",
                "n1",
                DesiredStatus::Run,
                ClientStatus::Running,
            )
        }],
    );
    ok(
        &store,
        40,
        Command::PurgeJobs {
            namespace: id(NS),
            ids: vec![id("csi")],
        },
    );
    upsert_jobs(&store, 50, vec![plugin_job("csi", "ebs", 1, 1)]);
    assert_eq!(job(&store, "csi").unwrap().version, 0);
    ok(
        &store,
        60,
        Command::StopAllocs {
            ids: vec![id("a1")],
        },
    );
    assert_eq!(store.snapshot().view().alloc("a1").unwrap().job_version, 1);
    // Naming version 1 anew (another allocation) is refused: the job has only 0.
    let e = assert_rejected(
        &store,
        70,
        &Command::UpsertAllocs {
            allocs: vec![Allocation {
                job_version: 1,
                ..alloc_of(
                    "a2",
                    "csi",
                    "nodes",
                    "n1",
                    DesiredStatus::Run,
                    ClientStatus::Pending,
                )
            }],
        },
    );
    assert_eq!(e.kind(), "JobVersionNotFound");
    assert_invariants(&store);
}
