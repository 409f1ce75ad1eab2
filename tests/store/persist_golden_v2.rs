//! Golden files of on-disk format version 2 (`tests/golden/v2/`: jobs): a data
//! directory (a snapshot and a log segment after it) and a standalone snapshot,
//! committed once by the build that introduced version 2. Every later version must
//! open them with identical content. See `tests/golden/v2/README.md`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::persist_golden::{alloc, golden_commands, node};
use crate::support::persist::{copy_dir, fast, replay, snapshot_bytes, write_golden_files};
use crate::support::{TempDir, assert_invariants, canonical};
use schedstate::model::{
    Allocation, ClientStatus, CsiPluginType, Job, JobStatus, JobType, Task, TaskCsiPlugin,
    TaskGroup, id,
};
use schedstate::persist::{DurableStore, SNAPSHOT_VERSION, WAL_VERSION};
use schedstate::state::{Command, StateStore};

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v2")
}

/// The commands in the snapshot of the golden directory (the version-1 stream and
/// the first job commands).
const IN_SNAPSHOT: usize = 22;
/// The last applied index of the golden state.
const LAST_INDEX: u64 = 260;

fn plugin_task(plugin: &str, kind: CsiPluginType) -> Task {
    Task {
        name: id("plugin"),
        csi_plugin: Some(TaskCsiPlugin {
            id: id(plugin),
            plugin_type: kind,
        }),
    }
}

fn ebs_job(nodes: u32) -> Job {
    Job {
        job_type: JobType::Service,
        task_groups: vec![
            TaskGroup {
                name: id("controller"),
                count: 2,
                tasks: vec![plugin_task("ebs", CsiPluginType::Controller)],
            },
            TaskGroup {
                name: id("nodes"),
                count: nodes,
                tasks: vec![plugin_task("ebs", CsiPluginType::Node)],
            },
        ],
        ..Job::new("default", "ebs-plugin")
    }
}

fn efs_job() -> Job {
    Job {
        job_type: JobType::System,
        task_groups: vec![TaskGroup {
            name: id("nodes"),
            count: 1,
            tasks: vec![plugin_task("efs", CsiPluginType::Monolith)],
        }],
        ..Job::new("default", "efs-plugin")
    }
}

fn job_alloc(alloc_id: &str, job: &str, group: &str, node_id: &str, version: u64) -> Allocation {
    Allocation {
        job_id: id(job),
        job_version: version,
        task_group: id(group),
        ..alloc(alloc_id, node_id, &[])
    }
}

/// The version-1 stream (indexes 10 … 190), then jobs at 200 … 260.
fn golden_v2_commands() -> Vec<(u64, Command)> {
    let mut cmds = golden_commands();
    let jobs = vec![
        Command::UpsertJobs {
            jobs: vec![ebs_job(3), efs_job()],
        },
        Command::UpsertAllocs {
            allocs: vec![
                job_alloc("e1", "efs-plugin", "nodes", "n1", 0),
                job_alloc("e2", "efs-plugin", "nodes", "n2", 0),
                Allocation {
                    client_status: ClientStatus::Pending,
                    ..job_alloc("c1", "ebs-plugin", "controller", "n1", 0)
                },
            ],
        },
        Command::UpdateNodeEligibility {
            id: id("n2"),
            eligible: true,
        },
        // In the log after the snapshot:
        Command::UpsertJobs {
            jobs: vec![ebs_job(4)],
        },
        Command::UpsertAllocs {
            allocs: vec![job_alloc("c2", "ebs-plugin", "controller", "n4", 1)],
        },
        Command::StopJobs {
            namespace: id("default"),
            ids: vec![id("efs-plugin")],
        },
        Command::UpsertNode {
            node: node("n5", &[("ebs", false, true)]),
        },
    ];
    let next = cmds.len() as u64;
    cmds.extend(
        jobs.into_iter()
            .enumerate()
            .map(|(i, c)| (10 * (next + i as u64 + 1), c)),
    );
    cmds
}

/// Checks a state against the golden content, bytes and the job facts spelled out.
#[track_caller]
fn check_golden_state(store: &StateStore) {
    let expected = fs::read(golden().join("expected.canonical")).expect("expected.canonical");
    assert!(
        canonical(store) == expected,
        "state differs from tests/golden/v2"
    );
    assert!(canonical(store) == canonical(&replay(&golden_v2_commands())));
    assert_invariants(store);
    let snap = store.snapshot();
    let v = snap.view();
    assert_eq!(v.last_applied(), LAST_INDEX);
    let ebs = v.job("default", "ebs-plugin").unwrap();
    assert_eq!((ebs.version, ebs.status), (1, JobStatus::Running));
    assert_eq!(
        v.job("default", "efs-plugin").unwrap().status,
        JobStatus::Dead
    );
    let p = v.csi_plugin("ebs").unwrap();
    assert_eq!((p.controllers_expected(), p.nodes_expected()), (2, 4));
    assert_eq!(p.nodes.len(), 4);
    assert_eq!(v.alloc("c2").unwrap().job_version, 1);
    let efs = v.csi_plugin("efs").unwrap();
    assert_eq!((efs.controllers_expected(), efs.nodes_expected()), (0, 0));
}

#[test]
fn the_golden_v2_directory_opens_with_identical_content() {
    let work = TempDir::new("golden-v2-open");
    copy_dir(&golden().join("data"), work.path());
    let (db, report) = DurableStore::open(work.path(), fast()).expect("golden v2 directory");
    assert_eq!(report.last_applied, LAST_INDEX);
    assert_eq!(
        report.replayed,
        (golden_v2_commands().len() - IN_SNAPSHOT) as u64
    );
    check_golden_state(db.store());
    drop(db);
    let (store, _) = DurableStore::open_read_only(golden().join("data")).unwrap();
    check_golden_state(&store);
}

#[test]
fn the_golden_v2_snapshot_restores_with_identical_content() {
    let bytes = fs::read(golden().join("state.snap")).expect("tests/golden/v2/state.snap");
    let store = StateStore::new();
    store
        .restore_from(&mut bytes.as_slice())
        .expect("golden v2 snapshot");
    check_golden_state(&store);
    if SNAPSHOT_VERSION == 2 {
        assert!(
            snapshot_bytes(&store) == bytes,
            "version 2 is written differently"
        );
    }
}

/// Writes the golden files if they are missing; once they exist, only checks that a
/// version-2 build writes the same bytes. Never overwrites them.
#[test]
#[ignore = "writes tests/golden/v2; run once with --ignored"]
fn regenerate_golden_v2_files() {
    if SNAPSHOT_VERSION != 2 || WAL_VERSION != 2 {
        eprintln!("this build writes version {SNAPSHOT_VERSION}: tests/golden/v2 is kept as is");
        return;
    }
    write_golden_files(&golden(), &golden_v2_commands(), IN_SNAPSHOT);
}
