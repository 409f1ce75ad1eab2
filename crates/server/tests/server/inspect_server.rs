//! `inspect` on a replicated server's data directory while its agent process runs: the
//! snapshot, the log, the vote, the committed index and the tables, read without the
//! agent noticing — no file changed, writes going on — and, the agent stopped, every
//! file byte for byte as it was.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use schedstate::model::Node;
use schedstate::state::Command;
use schedstate_raft::{Router, Server, ServerOptions};

use crate::agent_procs::{DEADLINE, ProcCluster};
use crate::support::{key_values, ok, plain, rows, section, value};

/// Every file of `dir`: its bytes and modification time.
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let modified = e.metadata().unwrap().modified().unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, (std::fs::read(e.path()).unwrap(), modified))
        })
        .collect()
}

/// Writes a server's directory in-process: `seeded` nodes, a snapshot after the first
/// `snapshot_after`, small segments. Returns the snapshot's index and the last index.
async fn seed(dir: &Path, address: &str, seeded: u64, snapshot_after: u64) -> (u64, u64) {
    let mut options = ServerOptions::default();
    options.log.segment_bytes = 512;
    let router = Router::new();
    let server = Server::open(1, dir, options, router.network(1))
        .await
        .expect("server opens");
    router.add(server.clone());
    server
        .initialize([(1, address.to_string())])
        .await
        .expect("initialize");
    server.wait_for_leader(DEADLINE).await.expect("leader");
    let mut snapshot = 0;
    let mut last = 0;
    for i in 0..seeded {
        let node = Node::new(format!("seed-{i}"), "dc1");
        last = server
            .propose(Command::UpsertNodes { nodes: vec![node] })
            .await
            .expect("committed")
            .index;
        if i + 1 == snapshot_after {
            server.raft().trigger().snapshot().await.expect("snapshot");
            let start = Instant::now();
            while server.raft().metrics().borrow().snapshot.is_none() {
                assert!(start.elapsed() < DEADLINE, "no snapshot");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            snapshot = last;
        }
    }
    server.shutdown().await;
    (snapshot, last)
}

/// The number of rows of `name` in the section `title`.
fn table_rows(out: &str, title: &str, name: &str) -> u64 {
    let t = rows(&section(out, title).join("\n"));
    let row = t
        .iter()
        .find(|r| r[0] == name)
        .unwrap_or_else(|| panic!("no {name} in {title}:\n{out}"));
    plain(row.last().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_a_running_agents_directory_and_changes_nothing() {
    let mut cluster = ProcCluster::prepare(1, None, false);
    let data = cluster.data(0);
    let address = format!("127.0.0.1:{}", cluster.ports[0]);
    let (snapshot, seeded_last) = seed(&data, &address, 20, 12).await;
    assert!(snapshot > 0 && seeded_last > snapshot);

    cluster.restart(0);
    cluster.wait_leader().await;
    let client = cluster.client(0);
    let mut last = 0;
    for i in 0..10 {
        let node = Node::new(format!("live-{i}"), "dc1");
        last = client
            .apply(&Command::UpsertNode { node })
            .await
            .unwrap_or_else(|e| panic!("write: {e}\n{}", cluster.logs()));
    }
    assert!(last > seeded_last);

    // While the agent runs. The committed pointer follows the commit closely (the
    // log's flusher writes it); read until it shows the last write.
    let before = files(&data);
    let dir = data.to_str().unwrap();
    let start = Instant::now();
    let out = loop {
        let out = ok(&["inspect", "--data", dir]);
        if plain(&value(&out, "Last Applied")) >= last {
            break out;
        }
        assert!(start.elapsed() < DEADLINE, "never reached {last}:\n{out}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let after = files(&data);
    for (name, (bytes, modified)) in &before {
        let (b, m) = after.get(name).unwrap_or_else(|| panic!("{name} is gone"));
        if m == modified {
            assert!(b == bytes, "{name} changed");
        }
    }
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "files came or went"
    );

    let kv: BTreeMap<String, String> = key_values(&out).into_iter().collect();
    assert_eq!(kv["Data Directory"], dir);
    assert!(kv["Kind"].starts_with("replicated server"), "{out}");
    assert!(
        kv["Snapshot"].starts_with(&format!("index {snapshot} (term 1), snap-")),
        "{out}"
    );
    assert!(
        kv["Committed"].starts_with(&format!("index {last} (term ")),
        "{out}"
    );
    assert!(kv["Vote"].contains("for server 1"), "{out}");
    assert!(kv["Log"].starts_with("index 0 to "), "{out}");
    assert!(
        kv["Format"].starts_with("log v4, metadata v1, snapshot v2"),
        "{out}"
    );
    assert_eq!(kv["Purged"], "none", "{out}");
    assert!(
        kv["Membership"].contains(&format!("1 at {address}")),
        "{out}"
    );
    assert!(kv.contains_key("Torn Tail"));
    // Twelve seeded nodes in the snapshot; all thirty once the committed entries are
    // replayed.
    assert_eq!(table_rows(&out, "Snapshot Tables", "nodes"), 12);
    assert_eq!(table_rows(&out, "Tables", "nodes"), 30);
    let segments = section(&out, "Log Segments");
    assert!(segments.len() > 2, "several segments:\n{out}");

    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", "--data", dir])).unwrap();
    assert_eq!(json["kind"], "server");
    assert!(json["last_applied"].as_u64().unwrap() >= last);
    assert_eq!(json["snapshot"]["last_log_id"]["index"], snapshot);
    assert_eq!(json["tables"][0]["name"], "nodes");
    assert_eq!(json["tables"][0]["rows"], 30);
    assert_eq!(json["verify"], serde_json::Value::Null);

    // The agent never noticed: it takes a write after the reads.
    let node = Node::new("after-inspect", "dc1");
    let after_index = client
        .apply(&Command::UpsertNode { node })
        .await
        .expect("a write after inspect");
    assert!(after_index > last);
    let start = Instant::now();
    while plain(&value(&ok(&["inspect", "--data", dir]), "Last Applied")) < after_index {
        assert!(start.elapsed() < DEADLINE, "never reached {after_index}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Stopped: every file byte for byte as it was, and --verify passes.
    assert!(cluster.terminate(0).expect("running").success());
    let before = files(&data);
    let verified = ok(&["inspect", "--verify", "--data", dir]);
    assert!(verified.contains("\nVerify: ok"), "{verified}");
    assert_eq!(table_rows(&verified, "Tables", "nodes"), 31);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", "--verify", "--data", dir])).unwrap();
    assert_eq!(json["verify"]["ok"], true);
    assert_eq!(files(&data), before, "inspect changed a file");
}

#[test]
fn damage_in_a_servers_directory_is_named_with_file_and_offset() {
    let dir = crate::support::TempDir::new("golden");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../raft/tests/golden/v1/data");
    for e in std::fs::read_dir(golden).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(&e.file_name().to_string_lossy())).unwrap();
    }
    let out = ok(&["inspect", "--data", dir.arg()]);
    assert_eq!(value(&out, "Last Applied"), "9", "{out}");
    assert!(
        value(&out, "Log").starts_with("index 0 to 15 (terms 0 to 1), 16 entries in 2 segments")
    );

    let segment = dir.join("raft-00000000000000000001.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[40] ^= 0x40;
    std::fs::write(&segment, bytes).unwrap();
    let e = crate::support::fails(&["inspect", "--data", dir.arg()]);
    assert_eq!(
        e,
        format!(
            "error: {}: checksum mismatch in log record at offset 32",
            segment.display()
        )
    );
}

/// The store's commands refuse a server's directory (`schedstate`'s tests); `inspect`
/// reads it as the server's it is, and writes nothing: an empty segment is one being
/// created.
#[test]
fn inspect_reads_a_fresh_servers_directory_and_leaves_it_alone() {
    let dir = crate::support::TempDir::new("server");
    std::fs::write(dir.join("raft-00000000000000000001.log"), b"").unwrap();
    let before = files(dir.path());
    let out = ok(&["inspect", "--data", dir.arg()]);
    assert!(
        value(&out, "Kind").starts_with("replicated server"),
        "{out}"
    );
    assert!(
        value(&out, "Torn Tail").contains("a segment being created"),
        "{out}"
    );
    assert_eq!(
        files(dir.path()),
        before,
        "inspect wrote into the directory"
    );
}
