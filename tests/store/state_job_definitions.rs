//! A job's registered definition (format 3): kept beside the parsed parts, part of what
//! makes a new version, bounded, carried through the log and snapshots; and the
//! namespace `*`, in which no job or volume is stored (docs/rules.md §4.0, §4.10).

use schedstate::model::{Job, JobDefinition, JobType, MAX_DEFINITION_BYTES, TaskGroup, id};
use schedstate::persist::DurableStore;
use schedstate::state::{Command, StateStore};

use crate::support::persist::{fast, snapshot_bytes};
use crate::support::volumes::volume_in;
use crate::support::{TempDir, assert_invariants, assert_rejected, canonical, ok};

fn job(definition: Option<&str>) -> Job {
    Job {
        job_type: JobType::Batch,
        task_groups: vec![TaskGroup {
            name: id("g"),
            count: 2,
            tasks: vec![],
        }],
        definition: definition.map(JobDefinition::new),
        ..Job::new("default", "web")
    }
}

fn upsert(j: Job) -> Command {
    Command::UpsertJobs { jobs: vec![j] }
}

const DEF_A: &str = r#"{"Datacenters":["dc1"],"TaskGroups":[{"Tasks":[{"Config":{"image":"a"},"Driver":"docker"}]}]}"#;
const DEF_B: &str = r#"{"Datacenters":["dc1"],"TaskGroups":[{"Tasks":[{"Config":{"image":"b"},"Driver":"docker"}]}]}"#;

#[test]
fn the_definition_is_stored_and_a_new_one_is_a_new_version() {
    let store = StateStore::new();
    ok(&store, 1, upsert(job(Some(DEF_A))));
    let v1 = store.snapshot().view().job("default", "web").unwrap();
    assert_eq!(v1.definition.as_ref().unwrap().as_str(), DEF_A);
    assert_eq!(v1.version, 0);
    // The same registration again: nothing changes.
    let commit = store.apply(2, &upsert(job(Some(DEF_A)))).unwrap();
    assert!(commit.is_empty());
    // The same parsed parts with another definition (a new image): a new version.
    ok(&store, 3, upsert(job(Some(DEF_B))));
    let v2 = store.snapshot().view().job("default", "web").unwrap();
    assert_eq!((v2.version, v2.job_modify_index), (1, 3));
    assert_eq!(v2.definition.as_ref().unwrap().as_str(), DEF_B);
    // A registration without one replaces it with none.
    ok(&store, 4, upsert(job(None)));
    let v3 = store.snapshot().view().job("default", "web").unwrap();
    assert_eq!((v3.version, v3.definition.is_none()), (2, true));
    // A stop keeps the definition of the row it stops.
    ok(&store, 5, upsert(job(Some(DEF_A))));
    ok(
        &store,
        6,
        Command::StopJobs {
            namespace: id("default"),
            ids: vec![id("web")],
        },
    );
    let dead = store.snapshot().view().job("default", "web").unwrap();
    assert!(dead.is_dead());
    assert_eq!(dead.definition.as_ref().unwrap().as_str(), DEF_A);
    assert_invariants(&store);
}

#[test]
fn a_definition_over_the_limit_is_refused_by_the_input_rules() {
    let store = StateStore::new();
    let at_limit = format!("\"{}\"", "x".repeat(MAX_DEFINITION_BYTES - 2));
    assert_eq!(at_limit.len(), MAX_DEFINITION_BYTES);
    let mut big = job(None);
    big.definition = Some(JobDefinition::new(format!("{at_limit} ")));
    let cmd = upsert(big);
    assert_eq!(cmd.check_input().unwrap_err().kind(), "InvalidInput");
    let err = assert_rejected(&store, 1, &cmd);
    assert!(err.to_string().contains("job definition"), "{err}");
    let mut fits = job(None);
    fits.definition = Some(JobDefinition::new(at_limit));
    ok(&store, 1, upsert(fits));
}

#[test]
fn no_job_or_volume_is_registered_in_the_wildcard_namespace() {
    let store = StateStore::new();
    let mut j = job(None);
    j.namespace = id("*");
    let cmd = upsert(j);
    assert_eq!(cmd.check_input().unwrap_err().kind(), "WildcardNamespace");
    assert_eq!(assert_rejected(&store, 1, &cmd).kind(), "WildcardNamespace");
    let vol = Command::RegisterCsiVolumes {
        volumes: vec![volume_in("*", "vol-1", "ebs")],
    };
    assert_eq!(vol.check_input().unwrap_err().kind(), "WildcardNamespace");
    assert_eq!(assert_rejected(&store, 1, &vol).kind(), "WildcardNamespace");
    // A namespace that merely holds a star is an ordinary one.
    let mut ok_job = job(None);
    ok_job.namespace = id("team-*");
    assert!(upsert(ok_job).check_input().is_ok());
}

#[test]
fn definitions_survive_the_log_and_snapshots() {
    let dir = TempDir::new("job-definitions");
    let (db, _) = DurableStore::open(dir.path(), fast()).unwrap();
    db.apply(1, &upsert(job(Some(DEF_A)))).unwrap();
    db.compact().unwrap();
    db.apply(2, &upsert(job(Some(DEF_B)))).unwrap();
    let want = canonical(db.store());
    drop(db);
    let (db, report) = DurableStore::open(dir.path(), fast()).unwrap();
    assert_eq!(report.replayed, 1);
    assert!(canonical(db.store()) == want);
    let j = db.store().snapshot().view().job("default", "web").unwrap();
    assert_eq!(j.definition.as_ref().unwrap().as_str(), DEF_B);
    // A standalone snapshot too.
    let bytes = snapshot_bytes(db.store());
    assert_eq!(&bytes[8..12], &3u32.to_le_bytes());
    let copy = StateStore::new();
    copy.restore_from(&mut bytes.as_slice()).unwrap();
    assert!(canonical(&copy) == want);
}

#[test]
fn a_state_with_definitions_encodes_them_apart() {
    // Canonical bytes of a state without definitions are version 2's; a definition
    // adds to them.
    let plain = StateStore::new();
    ok(&plain, 1, upsert(job(None)));
    let with = StateStore::new();
    ok(&with, 1, upsert(job(Some(DEF_A))));
    let (p, w) = (canonical(&plain), canonical(&with));
    assert!(w.len() > p.len() && w[..p.len()] == p[..]);
}
