//! Golden files of on-disk format version 2 holding ACL tokens and jobs
//! (`tests/golden/v2-acl/`), written once by a version-2 build: token digests are the
//! unsalted SHA-256 of their secrets, and jobs carry no registered definition. Every
//! later build must open them with identical content. See the README there.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::persist::{copy_dir, fast, replay, snapshot_bytes, write_golden_files};
use crate::support::{TempDir, assert_invariants, canonical};
use schedstate::model::{
    AclScope, AclToken, CsiPluginType, Job, JobType, Task, TaskCsiPlugin, TaskGroup, id,
};
use schedstate::persist::{DurableStore, SNAPSHOT_VERSION, WAL_VERSION};
use schedstate::state::{Command, StateStore};

pub(crate) fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v2-acl")
}

/// The commands in the snapshot of the golden directory.
const IN_SNAPSHOT: usize = 3;
/// The last applied index of the golden state.
pub(crate) const LAST_INDEX: u64 = 50;

/// The golden tokens' secrets and the SHA-256 (hex) version 2 stored for each, by
/// accessor id.
pub(crate) const SECRETS: [(&str, &str, &str); 3] = [
    (
        "acc-boot",
        "golden-bootstrap-secret",
        "a2d5747a5bbbc608f462f2297307398290a4fd5e039de4c4c15a5dd358e6a93f",
    ),
    (
        "acc-read",
        "golden-read-secret",
        "284e69e31c1ded12ce66fa6cc17c12feab97cb2af06e793a102f58037767b1b9",
    ),
    (
        "acc-write",
        "golden-write-secret",
        "3a75f8952fecc345a3b435dad0c147dd5567cf808dcbde4468112d40be9be3f9",
    ),
];

fn token(i: usize, name: &str, scopes: Vec<AclScope>) -> AclToken {
    let (accessor, _, digest) = SECRETS[i];
    AclToken {
        create_time: 1_700_000_000 + i as u64,
        ..AclToken::new(accessor, name, scopes, digest)
    }
}

fn web(count: u32) -> Job {
    Job {
        job_type: JobType::Service,
        task_groups: vec![TaskGroup {
            name: id("web"),
            count,
            tasks: vec![Task {
                name: id("server"),
                csi_plugin: None,
            }],
        }],
        ..Job::new("default", "web")
    }
}

fn plugin_job() -> Job {
    Job {
        job_type: JobType::System,
        task_groups: vec![TaskGroup {
            name: id("nodes"),
            count: 1,
            tasks: vec![Task {
                name: id("plugin"),
                csi_plugin: Some(TaskCsiPlugin {
                    id: id("ebs"),
                    plugin_type: CsiPluginType::Node,
                }),
            }],
        }],
        ..Job::new("infra", "ebs-nodes")
    }
}

/// Jobs and tokens at 10 … 50; the first three in the snapshot.
pub(crate) fn golden_v2_acl_commands() -> Vec<(u64, Command)> {
    let mut writer = token(2, "writer", vec![AclScope::Write]);
    writer.expiration_time = Some(4_000_000_000);
    let cmds = vec![
        Command::UpsertJobs {
            jobs: vec![web(2), plugin_job()],
        },
        Command::AclBootstrap {
            token: token(0, "bootstrap", vec![AclScope::Management]),
            salt: None,
        },
        Command::CreateAclTokens {
            tokens: vec![token(1, "reader", vec![AclScope::Read])],
            salt: None,
        },
        // In the log after the snapshot:
        Command::CreateAclTokens {
            tokens: vec![writer],
            salt: None,
        },
        Command::UpsertJobs { jobs: vec![web(3)] },
    ];
    cmds.into_iter()
        .enumerate()
        .map(|(i, c)| (10 * (i as u64 + 1), c))
        .collect()
}

/// Checks a state against the golden content: bytes, then the facts spelled out.
#[track_caller]
pub(crate) fn check_golden_state(store: &StateStore) {
    let expected = fs::read(golden().join("expected.canonical")).expect("expected.canonical");
    assert!(
        canonical(store) == expected,
        "state differs from tests/golden/v2-acl"
    );
    assert!(canonical(store) == canonical(&replay(&golden_v2_acl_commands())));
    assert_invariants(store);
    let snap = store.snapshot();
    let v = snap.view();
    assert_eq!(v.last_applied(), LAST_INDEX);
    for (accessor, _, digest) in SECRETS {
        let t = v.acl_token_by_secret_hash(digest).expect(accessor);
        assert_eq!(&*t.accessor_id, accessor);
    }
    let web = v.job("default", "web").unwrap();
    assert_eq!((web.version, web.task_groups[0].count), (1, 3));
    assert!(v.job("infra", "ebs-nodes").is_some());
}

#[test]
fn the_golden_v2_acl_directory_opens_with_identical_content() {
    let work = TempDir::new("golden-v2-acl-open");
    copy_dir(&golden().join("data"), work.path());
    let (db, report) = DurableStore::open(work.path(), fast()).expect("golden v2-acl directory");
    assert_eq!(report.last_applied, LAST_INDEX);
    assert_eq!(report.replayed, 2);
    check_golden_state(db.store());
}

#[test]
fn the_golden_v2_acl_snapshot_restores_with_identical_content() {
    let bytes = fs::read(golden().join("state.snap")).expect("tests/golden/v2-acl/state.snap");
    assert_eq!(&bytes[8..12], &2u32.to_le_bytes());
    let store = StateStore::new();
    store
        .restore_from(&mut bytes.as_slice())
        .expect("golden v2-acl snapshot");
    check_golden_state(&store);
    if SNAPSHOT_VERSION == 2 {
        assert!(snapshot_bytes(&store) == bytes);
    }
}

/// Writes the golden files if they are missing (a version-2 build only); never
/// overwrites them.
#[test]
#[ignore = "writes tests/golden/v2-acl; run once with --ignored"]
fn regenerate_golden_v2_acl_files() {
    if SNAPSHOT_VERSION != 2 || WAL_VERSION != 2 {
        eprintln!("this build writes version {SNAPSHOT_VERSION}: tests/golden/v2-acl is kept");
        return;
    }
    write_golden_files(&golden(), &golden_v2_acl_commands(), IN_SNAPSHOT);
}

/// A state of format 2 written "as format 2" (what a replicated cluster at format 2
/// sends a server of the previous release) is, byte for byte, the snapshot the version-2
/// build wrote of it: golden data in, the same bytes out.
#[test]
fn a_format_2_state_is_written_back_in_the_version_2_builds_bytes() {
    for file in [
        golden().join("state.snap"),
        golden().join("data/snapshot-00000000000000000030.snap"),
    ] {
        let old = fs::read(&file).unwrap();
        let store = StateStore::new();
        store.restore_from(&mut old.as_slice()).unwrap();
        let mut again = Vec::new();
        store.snapshot().write_as(&mut again, 2).unwrap();
        assert_eq!(again, old, "{}", file.display());
        // Asked for this build's version, it writes that one.
        let mut current = Vec::new();
        store
            .snapshot()
            .write_as(&mut current, SNAPSHOT_VERSION)
            .unwrap();
        assert_eq!(&current[8..12], &SNAPSHOT_VERSION.to_le_bytes());
    }
}
