//! Integration tests of the `schedstate` binary: a small demo, then every status
//! command checked against the store itself (opened read-only here), JSON output,
//! running the demo again, determinism per seed, snapshots, the error cases, and the
//! hand-off of server commands to `schedstate-server` (a stand-in here; the server's
//! own tests run the real one).

mod handoff;
mod support;

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_schedstate");
/// No server: a command handed off here fails, so none of these tests needs one
/// (the hand-off tests give their own).
const SERVER_BIN: &str = "/nonexistent/schedstate-server";

use std::collections::BTreeSet;
use std::sync::Arc;

use schedstate::model::{CsiPlugin, CsiVolume, Node};
use schedstate::persist::{DurableStore, Options, SyncPolicy};
use schedstate::state::StateStore;
use support::{
    TempDir, compact, demo, dir_canonical, fails, flip_byte, key_values, load, ok, plain, rows,
    section, thousands, value,
};

#[test]
fn help_lists_every_command() {
    let help = ok(&["--help"]);
    for cmd in [
        "demo", "plugin", "volume", "node", "job", "inspect", "repair", "snapshot",
    ] {
        assert!(help.contains(cmd), "{cmd} missing from:\n{help}");
    }
}

#[test]
fn demo_then_status_commands_match_the_store() {
    let dir = TempDir::absent("status");
    let out = demo(&dir, &["--sync", "never"]);
    assert!(out.contains("(new)"), "{out}");
    assert!(out.contains("  wake "), "no wake-up printed:\n{out}");
    assert!(out.contains("plugin ceph-rbd removed"), "{out}");
    assert!(out.contains("commits/s"), "{out}");
    let (store, last_applied) = load(&dir);
    let snap = store.snapshot();
    let v = snap.view();
    assert!(v.csi_plugin("ceph-rbd").is_none(), "stopped plugin gone");
    assert_eq!(v.nodes().count(), 12);

    // plugin status: the table, in the demo's summary too.
    let table = ok(&["plugin", "status", "--data", dir.arg()]);
    assert!(out.contains(&table), "summary shows the table:\n{out}");
    let r = rows(&table);
    assert_eq!(
        r[0].join(" "),
        "ID Provider Controllers Healthy/Expected Nodes Healthy/Expected"
    );
    let plugins: Vec<Arc<CsiPlugin>> = v.csi_plugins().collect();
    assert_eq!(r.len() - 1, plugins.len());
    for (row, p) in r[1..].iter().zip(&plugins) {
        let want = [
            p.id.to_string(),
            p.provider.to_string(),
            format!("{}/{}", p.controllers_healthy(), p.controllers_expected()),
            format!("{}/{}", p.nodes_healthy(), p.nodes_expected()),
        ];
        assert_eq!(row, &want);
    }
    // The demo shows healthy ≠ expected: aws-ebs0's node job asks for more than runs.
    let ebs = r.iter().find(|row| row[0] == "aws-ebs0").unwrap();
    let (healthy, expected) = ebs[3].split_once('/').unwrap();
    assert_eq!(expected, "8");
    assert!(healthy.parse::<u32>().unwrap() <= 6, "{ebs:?}");
    for row in &r[1..] {
        let plugin = v.csi_plugin(&row[0]).unwrap();
        let sum: u64 = plugin.jobs.iter().map(|j| j.expected.nodes).sum();
        assert_eq!(
            plugin.nodes_expected() as u64,
            sum,
            "expected = sum over jobs"
        );
    }
    let providers: BTreeSet<&str> = r[1..].iter().map(|row| row[1].as_str()).collect();
    assert_eq!(
        providers,
        BTreeSet::from(["ebs.csi.aws.com", "nfs.csi.k8s.io", "pd.csi.storage.gke.io"])
    );

    // plugin status ID: details and allocations from denormalization.
    let p = v.denormalize_csi_plugin(&v.csi_plugin("aws-ebs0").unwrap());
    let details = ok(&["plugin", "status", "aws-ebs0", "--data", dir.arg()]);
    assert_eq!(value(&details, "Provider"), "ebs.csi.aws.com");
    assert_eq!(value(&details, "Version"), "1.25.0");
    assert_eq!(value(&details, "Controller Required"), "true");
    assert_eq!(
        value(&details, "Nodes Healthy"),
        p.nodes_healthy().to_string()
    );
    // Expected: what the plugin's jobs ask for — 2 controllers, and a node instance
    // on each of the 6 AWS nodes plus 2 allocations that stay pending — not what runs.
    assert_eq!(value(&details, "Nodes Expected"), "8");
    assert_eq!(value(&details, "Controllers Expected"), "2");
    assert!(p.nodes_healthy() <= 6, "{details}");
    let jobs = rows(&section(&details, "Jobs").join("\n"));
    assert_eq!(
        jobs[1..],
        [
            ["csi-aws-ebs-controller", "default", "2", "0"],
            ["csi-aws-ebs-nodes", "default", "0", "8"],
        ]
    );
    let allocs: Vec<String> = section(&details, "Allocations")[1..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let want: Vec<String> = p.allocations.iter().map(|a| a.id.to_string()).collect();
    assert_eq!(allocs, want);
    assert_eq!(allocs.len(), 8, "6 node and 2 controller allocations");
    let by_prefix = ok(&["plugin", "status", "gcp", "--data", dir.arg()]);
    assert_eq!(value(&by_prefix, "ID"), "gcp-pd");

    // plugin status --json
    let list: serde_json::Value =
        serde_json::from_str(&ok(&["plugin", "status", "--json", "--data", dir.arg()])).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), plugins.len());
    for (j, p) in list.iter().zip(&plugins) {
        assert_eq!(j["id"], *p.id);
        assert_eq!(j["provider"], p.provider.as_str());
        assert_eq!(j["nodes_healthy"], p.nodes_healthy());
        assert_eq!(j["controllers_expected"], p.controllers_expected());
    }
    let one = ok(&[
        "plugin",
        "status",
        "aws-ebs0",
        "--json",
        "--data",
        dir.arg(),
    ]);
    let parsed: CsiPlugin = serde_json::from_str(&one).unwrap();
    assert_eq!(parsed, p);

    // volume status
    let vols: Vec<CsiVolume> = v
        .csi_volumes()
        .map(|vol| v.denormalize_csi_volume(&vol))
        .collect();
    assert!(!vols.is_empty());
    let r = rows(&ok(&["volume", "status", "--data", dir.arg()]));
    assert_eq!(r[0][..4], ["ID", "Name", "Namespace", "Plugin"]);
    assert_eq!(r.len() - 1, vols.len());
    for (row, vol) in r[1..].iter().zip(&vols) {
        assert_eq!(row[0], *vol.id);
        assert_eq!(row[3], *vol.plugin_id);
        assert_eq!(row[4], vol.provider);
        assert_eq!(row[5], vol.schedulable.to_string());
        assert_eq!(row[7], vol.read_allocs.len().to_string());
        assert_eq!(row[8], vol.write_allocs.len().to_string());
    }
    let json = ok(&["volume", "status", "--json", "--data", dir.arg()]);
    // The JSON shows volumes as the API does: secrets dropped, mount flags hidden.
    let shown: Vec<CsiVolume> = vols
        .iter()
        .cloned()
        .map(|mut vol| {
            vol.redact();
            vol
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Vec<CsiVolume>>(&json).unwrap(),
        shown
    );
    let default_ns = rows(&ok(&[
        "volume",
        "status",
        "--namespace",
        "default",
        "--data",
        dir.arg(),
    ]));
    let in_default = vols.iter().filter(|v| &*v.namespace == "default").count();
    assert_eq!(default_ns.len() - 1, in_default);
    assert!(default_ns[1..].iter().all(|row| row[2] == "default"));
    let busiest = vols
        .iter()
        .max_by_key(|v| v.read_claims.len() + v.write_claims.len() + v.past_claims.len())
        .unwrap();
    let details = ok(&[
        "volume",
        "status",
        &busiest.id,
        "--namespace",
        &busiest.namespace,
        "--data",
        dir.arg(),
    ]);
    assert_eq!(value(&details, "Provider"), busiest.provider);
    assert_eq!(
        value(&details, "Schedulable"),
        busiest.schedulable.to_string()
    );
    let claims = section(&details, "Claims");
    let count = busiest.read_claims.len() + busiest.write_claims.len() + busiest.past_claims.len();
    assert_eq!(
        claims.len(),
        if count == 0 { 1 } else { count + 1 },
        "{details}"
    );

    // node status
    let nodes: Vec<Arc<Node>> = v.nodes().collect();
    let r = rows(&ok(&["node", "status", "--data", dir.arg()]));
    assert_eq!(r.len() - 1, nodes.len());
    for (row, n) in r[1..].iter().zip(&nodes) {
        assert_eq!(row[0], *n.id);
        assert_eq!(row[3], n.drain.to_string());
        // "-" for a node that runs no node plugin (a drained one, say).
        let listed = if row[6] == "-" {
            0
        } else {
            row[6].split(',').count()
        };
        assert_eq!(listed, n.csi_node_plugins.len(), "{row:?}");
    }
    let json = ok(&["node", "status", "--json", "--data", dir.arg()]);
    let parsed: Vec<Node> = serde_json::from_str(&json).unwrap();
    assert_eq!(
        parsed,
        nodes.iter().map(|n| (**n).clone()).collect::<Vec<_>>()
    );
    let details = ok(&["node", "status", "node-0000", "--data", dir.arg()]);
    let fps = section(&details, "CSI Plugins");
    let n0 = v.node("node-0000").unwrap();
    assert_eq!(
        fps.len() - 1,
        n0.csi_controller_plugins.len() + n0.csi_node_plugins.len()
    );
    assert!(
        fps.iter()
            .any(|l| l.contains("ebs.csi.aws.com") && l.contains("1.25.0"))
    );

    // job status: every job with its plugins, from the store.
    let jobs: Vec<Arc<schedstate::model::Job>> = v.jobs().collect();
    assert_eq!(
        jobs.len(),
        7,
        "two jobs per plugin, one for nfs (no controller)"
    );
    let table = ok(&["job", "status", "--data", dir.arg()]);
    let r = rows(&table);
    assert_eq!(
        r[0].join(" "),
        "ID Namespace Type Status Version CSI Plugins"
    );
    assert_eq!(r.len() - 1, jobs.len());
    for (row, j) in r[1..].iter().zip(&jobs) {
        assert_eq!(
            row[..5],
            [
                j.id.to_string(),
                j.namespace.to_string(),
                j.job_type.as_str().to_string(),
                j.status.as_str().to_string(),
                j.version.to_string(),
            ]
        );
    }
    let ceph = r.iter().find(|row| row[0] == "csi-ceph-rbd-nodes").unwrap();
    assert_eq!(
        (ceph[2].as_str(), ceph[3].as_str(), ceph[5].as_str()),
        ("system", "dead", "ceph-rbd:node")
    );
    let ebs = r.iter().find(|row| row[0] == "csi-aws-ebs-nodes").unwrap();
    assert_eq!(
        (ebs[2].as_str(), ebs[3].as_str(), ebs[5].as_str()),
        ("service", "running", "aws-ebs0:node")
    );
    let json = ok(&["job", "status", "--json", "--data", dir.arg()]);
    let parsed: Vec<schedstate::model::Job> = serde_json::from_str(&json).unwrap();
    assert_eq!(
        parsed,
        jobs.iter().map(|j| (**j).clone()).collect::<Vec<_>>()
    );
    // One job: its group, what it expects of its plugin, its allocations' statuses.
    let details = ok(&["job", "status", "csi-aws-ebs-n", "--data", dir.arg()]);
    assert_eq!(value(&details, "ID"), "csi-aws-ebs-nodes");
    assert_eq!(value(&details, "Type"), "service");
    let groups = rows(&section(&details, "Task Groups").join("\n"));
    assert_eq!(groups[1], ["nodes", "8", "plugin", "aws-ebs0:node"]);
    let stanza = rows(&section(&details, "CSI Plugins").join("\n"));
    assert_eq!(
        stanza[1],
        [
            "aws-ebs0".to_string(),
            "node".into(),
            "0".into(),
            "8".into(),
            format!("{}/2", p.controllers_healthy()),
            format!("{}/8", p.nodes_healthy()),
        ]
    );
    let allocs: Vec<Arc<schedstate::model::Allocation>> =
        v.allocs_by_job("default", "csi-aws-ebs-nodes").collect();
    let pending = allocs
        .iter()
        .filter(|a| a.client_status == schedstate::model::ClientStatus::Pending)
        .count();
    assert_eq!(pending, 2, "two allocations stay pending");
    let summary = rows(&section(&details, "Summary").join("\n"));
    assert_eq!(summary[0][..3], ["Task", "Group", "Pending"]);
    assert_eq!(summary[1][..2], ["nodes", "2"]);
    let listed = section(&details, "Allocations");
    assert_eq!(listed.len() - 1, allocs.len());
    assert!(listed.iter().filter(|l| l.contains(" pending ")).count() == 2);
    let one: serde_json::Value = serde_json::from_str(&ok(&[
        "job",
        "status",
        "csi-gcp-pd-nodes",
        "--json",
        "--data",
        dir.arg(),
    ]))
    .unwrap();
    assert_eq!(one["type"], "system");
    let gcp = v.csi_plugin("gcp-pd").unwrap();
    assert_eq!(
        one["plugins"][0]["expected"]["nodes"].as_u64(),
        Some(gcp.job_expectation("default", "csi-gcp-pd-nodes").nodes)
    );
    assert_eq!(
        one["allocations"].as_array().unwrap().len(),
        v.allocs_by_job("default", "csi-gcp-pd-nodes").count()
    );

    // inspect
    let inspect = ok(&["inspect", "--verify", "--data", dir.arg()]);
    assert_eq!(plain(&value(&inspect, "Last Applied")), last_applied);
    let tables = rows(&section(&inspect, "Tables").join("\n"));
    let count = |name: &str| {
        let row = tables.iter().find(|r| r[0] == name).unwrap();
        plain(row.last().unwrap())
    };
    assert_eq!(count("nodes"), 12);
    assert_eq!(count("csi_plugins"), plugins.len() as u64);
    assert_eq!(count("csi_volumes"), vols.len() as u64);
    assert_eq!(count("jobs"), jobs.len() as u64);
    assert!(inspect.contains("Verify: ok"), "{inspect}");
    assert!(key_values(&inspect).iter().any(|(k, _)| k == "Torn Tail"));
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", "--verify", "--data", dir.arg()])).unwrap();
    assert_eq!(json["kind"], "store");
    assert_eq!(json["last_applied"], last_applied);
    assert_eq!(json["tables"][0]["name"], "nodes");
    assert_eq!(json["tables"][0]["rows"], 12);
    assert_eq!(json["verify"]["ok"], true);
    // The log's size is its records', not its files' (the live segment holds zeros
    // preallocated after them).
    let (mut records, mut files) = (0, 0);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            let bytes = std::fs::read(&path).unwrap();
            records += schedstate_test_support::segment::records_end(&bytes) as u64;
            files += bytes.len() as u64;
        }
    }
    assert!(records > 0 && records < files, "{records} of {files}");
    assert_eq!(json["log_bytes"], records);
}

#[test]
fn demo_twice_continues_and_fresh_starts_over() {
    let dir = TempDir::absent("twice");
    let first = demo(&dir, &["--seconds", "1"]);
    assert!(first.contains("(new)"), "{first}");
    let (store, a) = load(&dir);
    let alloc_before = store
        .snapshot()
        .view()
        .allocs_by_job("default", "csi-aws-ebs-controller")
        .count();
    assert!(alloc_before > 0);
    let second = demo(&dir, &["--seconds", "1"]);
    let resumed = format!("resuming after index {}", thousands(a));
    assert!(second.contains(&resumed), "{second}");
    let (store, b) = load(&dir);
    assert!(b > a, "{b} > {a}");
    assert_eq!(store.snapshot().view().nodes().count(), 12, "same node ids");
    assert!(
        second.contains(&format!("(index {} →", thousands(a + 1))),
        "{second}"
    );

    let third = demo(&dir, &["--seconds", "1", "--fresh"]);
    assert!(third.contains("(new)"), "{third}");
    assert!(third.contains("(index 1 →"), "{third}");
    let (store, c) = load(&dir);
    let snap = store.snapshot();
    assert!(snap.view().nodes().all(|n| n.create_index <= c));
    assert!(!third.contains("resuming"));
}

#[test]
fn the_same_seed_gives_the_same_state() {
    let run = |seed: &str| {
        let dir = TempDir::absent("seed");
        demo(&dir, &["--steps", "150", "--sync", "never", "--seed", seed]);
        dir_canonical(&dir)
    };
    let (a, b, c) = (run("7"), run("7"), run("8"));
    assert_eq!(a, b, "same seed, same state");
    assert_ne!(a, c, "another seed, another state");
}

#[test]
fn read_commands_work_while_a_writer_holds_the_lock() {
    let dir = TempDir::absent("locked");
    demo(&dir, &["--steps", "60", "--sync", "never"]);
    let options = Options {
        sync: SyncPolicy::Never,
        ..Options::default()
    };
    let (db, _) = DurableStore::open(dir.path(), options).unwrap();
    let table = ok(&["plugin", "status", "--data", dir.arg()]);
    assert!(table.contains("ebs.csi.aws.com"));
    ok(&["inspect", "--data", dir.arg()]);
    ok(&["node", "status", "--data", dir.arg()]);
    let e = fails(&[
        "demo",
        "--data",
        dir.arg(),
        "--nodes",
        "12",
        "--seconds",
        "1",
    ]);
    assert!(
        e.contains("LOCK: the data directory is locked by another process"),
        "{e}"
    );
    let e = fails(&["demo", "--fresh", "--data", dir.arg(), "--nodes", "12"]);
    assert!(e.contains("locked by another process"), "{e}");
    assert!(
        db.store().snapshot().view().nodes().count() == 12,
        "nothing deleted"
    );
    drop(db);
    assert_eq!(load(&dir).0.snapshot().view().nodes().count(), 12);
}

/// The commands that read a data directory (`--data` is appended).
const READ_COMMANDS: [&[&str]; 6] = [
    &["plugin", "status"],
    &["volume", "status"],
    &["node", "status"],
    &["job", "status"],
    &["inspect"],
    &["snapshot", "save", "/dev/null/x"],
];

/// Runs `cmd --data DIR`, which must fail; its arguments and error line.
fn fails_on<'a>(cmd: &[&'a str], dir: &'a TempDir) -> (Vec<&'a str>, String) {
    let mut args = cmd.to_vec();
    args.extend(["--data", dir.arg()]);
    let e = fails(&args);
    (args, e)
}

fn file_names(dir: &std::path::Path) -> BTreeSet<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect()
}

#[test]
fn a_missing_directory_is_one_clear_error() {
    let dir = TempDir::absent("missing");
    for cmd in READ_COMMANDS {
        let (args, e) = fails_on(cmd, &dir);
        assert_eq!(
            e,
            format!("error: {}: not a data directory", dir.arg()),
            "{args:?}"
        );
    }
}

#[test]
fn a_replicated_servers_directory_is_refused_and_left_alone() {
    let dir = TempDir::absent("server");
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::write(dir.path().join("raft-00000000000000000001.log"), b"").unwrap();
    let before = file_names(dir.path());
    let writes: [&[&str]; 4] = [
        &["demo", "--steps", "5"],
        &["demo", "--fresh", "--steps", "5"],
        &["repair"],
        &["snapshot", "restore", "/dev/null/x"],
    ];
    let refused = READ_COMMANDS.iter().filter(|c| c[0] != "inspect");
    for cmd in refused.chain(&writes) {
        let (args, e) = fails_on(cmd, &dir);
        assert!(
            e.contains("is a replicated server's directory")
                && e.contains("--address")
                && e.contains("schedstate inspect"),
            "{args:?}: {e}"
        );
    }
    // inspect hands it to the server (whose tests read it: `inspect_server.rs`).
    let (_, e) = fails_on(&["inspect"], &dir);
    assert!(e.contains("/nonexistent/schedstate-server"), "{e}");
    let after = file_names(dir.path());
    assert_eq!(before, after, "a command wrote into the directory");
}

#[test]
fn unknown_ids_are_errors() {
    let dir = TempDir::absent("unknown");
    demo(&dir, &["--steps", "40", "--sync", "never"]);
    let e = fails(&["plugin", "status", "nope", "--data", dir.arg()]);
    assert_eq!(e, "error: plugin \"nope\" not found");
    let e = fails(&["volume", "status", "nope", "--data", dir.arg()]);
    assert_eq!(e, "error: volume \"nope\" not found");
    let e = fails(&["node", "status", "nope", "--data", dir.arg()]);
    assert_eq!(e, "error: node \"nope\" not found");
    let e = fails(&["node", "status", "node-", "--data", dir.arg()]);
    assert!(e.contains("matches 12 nodes"), "{e}");
    let e = fails(&["job", "status", "nope", "--data", dir.arg()]);
    assert_eq!(e, "error: job \"nope\" not found");
    let e = fails(&["job", "status", "csi-aws", "--data", dir.arg()]);
    assert!(
        e.contains("matches 2 jobs") && e.contains("--namespace"),
        "{e}"
    );
    let e = fails(&["plugin", "status", "ceph-rbd", "--data", dir.arg()]);
    assert_eq!(
        e, "error: plugin \"ceph-rbd\" not found",
        "stopped plugin is gone"
    );
}

#[test]
fn a_corrupt_snapshot_is_named_with_its_offset() {
    let dir = TempDir::absent("corrupt");
    demo(&dir, &["--steps", "40", "--sync", "never"]);
    let snap = compact(&dir);
    flip_byte(&snap, 10);
    for cmd in [&["inspect"][..], &["plugin", "status"]] {
        let mut args = cmd.to_vec();
        args.extend(["--data", dir.arg()]);
        let e = fails(&args);
        assert!(e.contains(&snap.display().to_string()), "{e}");
        // A flipped bit is caught by the body checksum, or earlier if the row it
        // lands in no longer decodes; either way the offset is named.
        assert!(
            e.contains("checksum mismatch in body at offset") || e.contains("corrupt at offset"),
            "{e}"
        );
    }
}

#[test]
fn snapshot_save_and_restore_round_trip() {
    let dir = TempDir::absent("saved");
    demo(&dir, &["--steps", "60", "--sync", "never"]);
    let file = TempDir::absent("state.snap");
    let out = ok(&["snapshot", "save", file.arg(), "--data", dir.arg()]);
    assert!(out.starts_with("Saved the state at index"), "{out}");
    assert!(file.path().is_file());
    assert!(!std::path::Path::new(&format!("{}.tmp", file.arg())).exists());

    let restored = TempDir::absent("restored");
    let out = ok(&["snapshot", "restore", file.arg(), "--data", restored.arg()]);
    assert!(out.starts_with("Restored the state at index"), "{out}");
    assert_eq!(dir_canonical(&restored), dir_canonical(&dir));
    ok(&["inspect", "--verify", "--data", restored.arg()]);

    // The restored directory is a working store: the demo continues on it.
    let (_, before) = load(&restored);
    demo(&restored, &["--steps", "20", "--sync", "never"]);
    assert!(load(&restored).1 > before);

    // Restoring over a store with newer state replaces it, keeping the old files.
    let out = ok(&["snapshot", "restore", file.arg(), "--data", restored.arg()]);
    assert!(out.contains("replaced files are kept in"), "{out}");
    assert_eq!(dir_canonical(&restored), dir_canonical(&dir));
    assert!(restored.path().join("replaced-1").is_dir());
    ok(&["inspect", "--verify", "--data", restored.arg()]);

    // Not while a writer holds the directory.
    let (_held, _) = schedstate::persist::DurableStore::open(
        restored.path(),
        schedstate::persist::Options::default(),
    )
    .expect("open");
    let e = fails(&["snapshot", "restore", file.arg(), "--data", restored.arg()]);
    assert!(e.contains("locked"), "{e}");

    flip_byte(file.path(), 10);
    let fresh = TempDir::absent("never");
    let e = fails(&["snapshot", "restore", file.arg(), "--data", fresh.arg()]);
    assert!(e.contains(file.arg()) && e.contains(" at offset "), "{e}");
    assert!(!fresh.path().exists(), "nothing created for a bad file");
}

#[test]
fn inspect_refuses_a_snapshot_that_breaks_an_invariant() {
    let dir = TempDir::new("broken");
    // A state no command can build (a volume storing a denormalized field), written
    // through the engine under the rules, then as a snapshot file.
    let store = StateStore::new();
    let mut txn = store.reader().db().begin_write(5).unwrap();
    let mut vol = CsiVolume::new("default", "vol-1", "aws-ebs0");
    vol.schedulable = true;
    vol.create_index = 5;
    vol.modify_index = 5;
    txn.insert(store.reader().tables().volumes, Arc::new(vol))
        .unwrap();
    txn.commit().unwrap();
    let mut file = std::fs::File::create(dir.join("snapshot-00000000000000000005.snap")).unwrap();
    store.snapshot_to(&mut file).unwrap();
    drop(file);

    // Loading checks the invariants (checksums only say the bytes are as written):
    // both inspect and inspect --verify refuse the directory and name the file and the
    // invariant.
    for args in [&["inspect"][..], &["inspect", "--verify"]] {
        let mut args = args.to_vec();
        args.extend(["--data", dir.arg()]);
        let e = fails(&args);
        assert!(
            e.contains("snapshot-00000000000000000005.snap")
                && e.contains("invariant denormalized-fields-not-stored broken"),
            "{e}"
        );
    }
}

#[test]
fn repair_cuts_a_damaged_log_back_and_says_what_was_lost() {
    let dir = TempDir::absent("repair");
    demo(&dir, &["--sync", "never", "--steps", "300"]);
    ok(&["repair", "--data", dir.arg()]);
    let (_, last_applied) = load(&dir);
    // Damage a byte in the middle of the last log segment.
    let segment = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max()
        .expect("a log segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = schedstate_test_support::segment::records_end(&bytes) / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let e = fails(&["inspect", "--data", dir.arg()]);
    assert!(e.contains(" at offset "), "{e}");

    let out = ok(&["repair", "--data", dir.arg()]);
    assert!(
        out.contains("repaired; it now opens at last applied index"),
        "{out}"
    );
    assert!(out.contains("cut back to"), "{out}");
    assert!(out.contains("whole log record(s) lost, indexes"), "{out}");
    assert!(out.contains("damaged-1"), "{out}");
    let (_, repaired) = load(&dir);
    assert!(repaired < last_applied, "{repaired} < {last_applied}");
    ok(&["inspect", "--verify", "--data", dir.arg()]);
    let again = ok(&["repair", "--data", dir.arg()]);
    assert!(again.contains("nothing to repair"), "{again}");
}
