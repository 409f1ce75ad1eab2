//! Golden files of the Raft log format 3 (`tests/golden/v3/`): a one-server cluster's
//! directory whose entries carry jobs and ACL tokens in the shapes of store format 2
//! (no registered job definitions, unsalted token digests), plain and keyed, with a
//! snapshot (`SCHEDRSN` 2 around `SCHEDSNP` 2) — written once. Every later build must
//! open it to the same state. See the README there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schedstate::model::{AclScope, AclToken, Job, JobType, Task, TaskGroup};
use schedstate::state::Command;
use schedstate_raft::{LogOptions, Router, Server, ServerOptions, WriteKey};

use crate::support::DEADLINE;

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v3")
}

fn options() -> ServerOptions {
    ServerOptions {
        log: LogOptions {
            segment_bytes: 1024,
            ..LogOptions::default()
        },
        ..ServerOptions::default()
    }
}

/// The golden tokens: accessor id, secret, the unsalted SHA-256 (hex) stored for it.
pub(crate) const SECRETS: [(&str, &str, &str); 2] = [
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
];

fn web(count: u32) -> Job {
    Job {
        job_type: JobType::Service,
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count,
            tasks: vec![Task {
                name: "server".into(),
                csi_plugin: None,
            }],
        }],
        ..Job::new("default", "web")
    }
}

/// The golden commands, each with whether it is proposed with a write key.
fn golden_commands() -> Vec<(Command, bool)> {
    let token = |i: usize, name: &str, scope| {
        let (accessor, _, digest) = SECRETS[i];
        AclToken::new(accessor, name, vec![scope], digest)
    };
    vec![
        (Command::UpsertJobs { jobs: vec![web(1)] }, false),
        (
            Command::AclBootstrap {
                token: token(0, "bootstrap", AclScope::Management),
                salt: None,
            },
            false,
        ),
        (Command::UpsertJobs { jobs: vec![web(2)] }, true),
        // The snapshot is taken here.
        (
            Command::CreateAclTokens {
                tokens: vec![token(1, "reader", AclScope::Read)],
                salt: None,
            },
            true,
        ),
        (Command::UpsertJobs { jobs: vec![web(3)] }, false),
    ]
}

fn key(i: usize) -> WriteKey {
    WriteKey {
        id: [i as u8 + 1; 32],
        fingerprint: [0xab; 32],
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Writes the golden directory if it is missing (run once, with `--ignored`, by a build
/// writing Raft log format 3); never overwrites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the golden files; run once when a format version is introduced"]
async fn regenerate_golden_v3_files() {
    let out = golden().join("data");
    if out.exists() || schedstate_raft::RAFT_LOG_VERSION != 3 {
        eprintln!("{} exists or this build does not write it", out.display());
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let router = Router::new();
    let server = Server::open(1, work.path(), options(), router.network(1))
        .await
        .unwrap();
    router.add(server.clone());
    server
        .initialize([(1, "golden-1".to_string())])
        .await
        .unwrap();
    server.wait_for_leader(DEADLINE).await.unwrap();
    for (i, (c, keyed)) in golden_commands().into_iter().enumerate() {
        server
            .propose_keyed(c, keyed.then(|| key(i)))
            .await
            .unwrap();
        if i == 2 {
            server.raft().trigger().snapshot().await.unwrap();
            while server.raft().metrics().borrow().snapshot.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    server.shutdown().await;
    copy_dir(work.path(), &out);
    std::fs::write(
        golden().join("expected.canonical"),
        server.read_stale().canonical_bytes().unwrap(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_v3_directory_opens_to_the_same_state() {
    let expected = std::fs::read(golden().join("expected.canonical")).unwrap();
    let work = tempfile::tempdir().unwrap();
    copy_dir(&golden().join("data"), work.path());
    let router = Router::new();
    let server = Server::open(1, work.path(), options(), router.network(1))
        .await
        .unwrap();
    router.add(server.clone());
    server.wait_for_leader(DEADLINE).await.unwrap();
    let last = 2 + golden_commands().len() as u64 - 1;
    server
        .wait_applied(last, Duration::from_secs(60))
        .await
        .unwrap();
    let snap = server.read_stale();
    snap.view().check_invariants().unwrap();
    assert_eq!(snap.canonical_bytes().unwrap(), expected);
    let v = snap.view();
    for (accessor, _, digest) in SECRETS {
        assert_eq!(
            &*v.acl_token_by_secret_hash(digest).unwrap().accessor_id,
            accessor
        );
    }
    assert_eq!(v.job("default", "web").unwrap().task_groups[0].count, 3);
    // A retry under a kept key is answered from the table the snapshot and log held.
    let again = server
        .propose_keyed(golden_commands().remove(3).0, Some(key(3)))
        .await
        .unwrap();
    assert!(again.replayed);

    // Salted (what an upgraded leader does): the same secrets still find their tokens.
    let salt = schedstate::model::AclSalt([9; 32]);
    server.propose(Command::SetAclSalt { salt }).await.unwrap();
    let snap = server.read_stale();
    let v = snap.view();
    assert_eq!(v.acl_salt(), Some(salt));
    for (accessor, secret, unsalted) in SECRETS {
        let t = v
            .acl_token_by_secret_hash(&v.acl_digest_of(secret))
            .unwrap();
        assert_eq!(&*t.accessor_id, accessor);
        assert_eq!(t.secret_hash, salt.digest(secret));
        assert!(v.acl_token_by_secret_hash(unsalted).is_none());
    }
    server.shutdown().await;
}
