//! Golden files of on-disk format version 3 (`tests/golden/v3/`: registered job
//! definitions, the ACL salt and salted digests): a data directory (a snapshot and a
//! log segment after it) and a standalone snapshot, committed once by the build that
//! introduced version 3. Every later version must open them with identical content.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::persist::{copy_dir, fast, replay, snapshot_bytes, write_golden_files};
use crate::support::{TempDir, assert_invariants, canonical};
use schedstate::model::{AclSalt, AclScope, AclToken, Job, JobDefinition, JobType, TaskGroup, id};
use schedstate::persist::{DurableStore, SNAPSHOT_VERSION, WAL_VERSION};
use schedstate::state::{Command, StateStore};

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v3")
}

const IN_SNAPSHOT: usize = 2;
const LAST_INDEX: u64 = 40;
const SALT: AclSalt = AclSalt(*b"the golden v3 cluster's ACL salt");
const SECRETS: [(&str, &str); 2] = [
    ("acc-root", "golden-v3-root"),
    ("acc-read", "golden-v3-read"),
];

fn web(image: &str) -> Job {
    Job {
        job_type: JobType::Service,
        task_groups: vec![TaskGroup {
            name: id("web"),
            count: 2,
            tasks: vec![],
        }],
        definition: Some(JobDefinition::new(format!(
            r#"{{"Datacenters":["dc1"],"Name":"web","TaskGroups":[{{"Count":2,"Name":"web","Tasks":[{{"Config":{{"image":"{image}"}},"Driver":"docker","Name":"server"}}]}}],"Type":"service"}}"#
        ))),
        ..Job::new("default", "web")
    }
}

fn token(i: usize, scope: AclScope) -> AclToken {
    let (accessor, secret) = SECRETS[i];
    AclToken {
        create_time: 1_800_000_000,
        ..AclToken::new(accessor, accessor, vec![scope], SALT.digest(secret))
    }
}

fn golden_v3_commands() -> Vec<(u64, Command)> {
    vec![
        (
            10,
            Command::UpsertJobs {
                jobs: vec![web("nginx:1.27")],
            },
        ),
        (
            20,
            Command::AclBootstrap {
                token: token(0, AclScope::Management),
                salt: Some(SALT),
            },
        ),
        // In the log after the snapshot:
        (
            30,
            Command::CreateAclTokens {
                tokens: vec![token(1, AclScope::Read)],
                salt: Some(SALT),
            },
        ),
        (
            40,
            Command::UpsertJobs {
                jobs: vec![web("nginx:1.28")],
            },
        ),
    ]
}

#[track_caller]
fn check_golden_state(store: &StateStore) {
    let expected = fs::read(golden().join("expected.canonical")).expect("expected.canonical");
    assert!(
        canonical(store) == expected,
        "state differs from tests/golden/v3"
    );
    assert!(canonical(store) == canonical(&replay(&golden_v3_commands())));
    assert_invariants(store);
    let snap = store.snapshot();
    let v = snap.view();
    assert_eq!(v.last_applied(), LAST_INDEX);
    assert_eq!((v.acl_salt(), v.acl_salt_index()), (Some(SALT), Some(20)));
    for (accessor, secret) in SECRETS {
        let t = v
            .acl_token_by_secret_hash(&v.acl_digest_of(secret))
            .unwrap();
        assert_eq!(&*t.accessor_id, accessor);
    }
    let job = v.job("default", "web").unwrap();
    assert_eq!(job.version, 1);
    assert!(
        job.definition
            .as_ref()
            .unwrap()
            .as_str()
            .contains("nginx:1.28")
    );
}

#[test]
fn the_golden_v3_directory_opens_with_identical_content() {
    let work = TempDir::new("golden-v3-open");
    copy_dir(&golden().join("data"), work.path());
    let (db, report) = DurableStore::open(work.path(), fast()).expect("golden v3 directory");
    assert_eq!(report.last_applied, LAST_INDEX);
    assert_eq!(report.replayed, 2);
    check_golden_state(db.store());
}

#[test]
fn the_golden_v3_snapshot_restores_with_identical_content() {
    let bytes = fs::read(golden().join("state.snap")).expect("tests/golden/v3/state.snap");
    assert_eq!(&bytes[8..12], &3u32.to_le_bytes());
    let store = StateStore::new();
    store
        .restore_from(&mut bytes.as_slice())
        .expect("golden v3 snapshot");
    check_golden_state(&store);
    if SNAPSHOT_VERSION == 3 {
        assert!(
            snapshot_bytes(&store) == bytes,
            "version 3 is written differently"
        );
    }
}

/// Writes the golden files if they are missing (a version-3 build only); never
/// overwrites them.
#[test]
#[ignore = "writes tests/golden/v3; run once with --ignored"]
fn regenerate_golden_v3_files() {
    if SNAPSHOT_VERSION != 3 || WAL_VERSION != 3 {
        eprintln!("this build writes version {SNAPSHOT_VERSION}: tests/golden/v3 is kept");
        return;
    }
    write_golden_files(&golden(), &golden_v3_commands(), IN_SNAPSHOT);
}
