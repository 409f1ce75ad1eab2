//! Zero false wakes over HTTP (docs/rules.md §5, "The index of an answer"): a read
//! answers with the index of what it read — a row's modify index, a missing row's
//! table's delete index, a plugin's largest index over the rows it was built from —
//! so a client blocking with that index returns when what it read changed, and not
//! on writes to anything else.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use schedstate::model::{Id, Node, NodeStatus};
use schedstate::state::Command;
use schedstate_agent::api::NOMAD_INDEX_HEADER;
use tokio::sync::mpsc;

use crate::support::{Agents, DEADLINE, alloc, node};

/// Waiters in the many-waiters test: thousands on a machine that allows the open
/// files (two per waiter here: the test holds both ends), fewer where it does not.
const WAITERS: usize = 2_000;
/// Rows looked up that do not exist, each with a waiter of its own.
const MISSING: usize = 100;

/// The `X-Nomad-Index` of an answer.
fn index_of(resp: &reqwest::Response) -> u64 {
    resp.headers()
        .get(NOMAD_INDEX_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "an X-Nomad-Index header in a {} answer ({:?})",
                resp.status(),
                resp.headers()
            )
        })
}

/// `GET path` on agent 0: the status and the index.
async fn get(agents: &Agents, http: &reqwest::Client, path: &str) -> (u16, u64) {
    let resp = http.get(agents.url(0, path)).send().await.expect("answer");
    (resp.status().as_u16(), index_of(&resp))
}

/// The agent's count of waiting blocking queries.
async fn waiting(agents: &Agents) -> u64 {
    let text = agents.client(0).metrics().await.expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("schedstate_blocking_queries_waiting "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the waiting gauge")
}

/// Waits until `n` blocking queries wait on the agent.
async fn until_waiting(agents: &Agents, n: u64) {
    let start = Instant::now();
    while waiting(agents).await < n {
        assert!(start.elapsed() < DEADLINE, "{n} queries never all waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn nodes(prefix: &str, n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node::new(format!("{prefix}{i:05}"), format!("host-{prefix}{i}")))
        .collect()
}

fn status(id: &str, s: NodeStatus) -> Command {
    Command::UpdateNodeStatus {
        id: Id::from(id),
        status: s,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_blocked_row_reads_wake_only_for_their_row() {
    let limit = schedstate_agent::raise_open_file_limit().expect("open-file limit");
    // Two descriptors per waiter, and room for everything else.
    let waiters = WAITERS.min((limit.after.saturating_sub(512) / 2) as usize);
    assert!(waiters >= 100, "open-file limit {} too low", limit.after);
    let agents = Agents::start_with(1, None, |c| {
        c.limits.conns_per_client = waiters + MISSING + 64;
        c.limits.conns = waiters + MISSING + 64;
    })
    .await;
    let c = agents.client(0);
    let http = crate::support::http();

    // Watched and unwatched nodes; a node deleted, so the delete index is not 0.
    let mut modified: BTreeMap<String, u64> = BTreeMap::new();
    for (prefix, n) in [("w", waiters), ("u", 500)] {
        for chunk in nodes(prefix, n).chunks(500) {
            let index = c
                .apply(&Command::UpsertNodes {
                    nodes: chunk.to_vec(),
                })
                .await
                .expect("upsert");
            modified.extend(chunk.iter().map(|n| (n.id.to_string(), index)));
        }
    }
    c.apply(&Command::UpsertNode {
        node: Node::new("gone", "host-gone"),
    })
    .await
    .unwrap();
    let deleted = c
        .apply(&Command::DeleteNodes {
            ids: vec![Id::from("gone")],
        })
        .await
        .unwrap();
    // A missing row answers with its table's last delete, whatever was written since.
    c.apply(&status("u00000", NodeStatus::Down)).await.unwrap();
    assert_eq!(
        get(&agents, &http, "/v1/node/absent-0").await,
        (404, deleted)
    );

    // Every watched row and every missing one blocked with the index it was given.
    let (tx, mut returned) = mpsc::unbounded_channel::<(String, u16, u64)>();
    let mut tasks = Vec::new();
    let blocked: Vec<(String, u64)> = (0..waiters)
        .map(|i| format!("w{i:05}"))
        .map(|id| {
            let index = modified[&id];
            (id, index)
        })
        .chain((0..MISSING).map(|i| (format!("absent-{i}"), deleted)))
        .collect();
    for (id, index) in blocked.clone() {
        let (http, tx) = (http.clone(), tx.clone());
        let url = agents.url(0, &format!("/v1/node/{id}?index={index}&wait=120s"));
        tasks.push(tokio::spawn(async move {
            let resp = http.get(url).send().await.expect("answer");
            let got = (resp.status().as_u16(), index_of(&resp));
            let _ = tx.send((id, got.0, got.1));
        }));
    }
    until_waiting(&agents, blocked.len() as u64).await;

    // Writes to other rows: updates, new rows, deletes, allocations.
    for i in 0..100 {
        let id = format!("u{:05}", i % 500);
        let s = if i % 2 == 0 {
            NodeStatus::Down
        } else {
            NodeStatus::Ready
        };
        c.apply(&status(&id, s)).await.unwrap();
    }
    c.apply(&Command::UpsertNodes {
        nodes: nodes("new", 50),
    })
    .await
    .unwrap();
    c.apply(&Command::DeleteNodes {
        ids: (400..450).map(|i| Id::from(format!("u{i:05}"))).collect(),
    })
    .await
    .unwrap();
    c.apply(&Command::UpsertAllocs {
        allocs: (0..50).map(|i| alloc(&format!("a{i}"), "u00001")).collect(),
    })
    .await
    .unwrap();
    // A wake would run its query at once; give the runtime time to show one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut early = Vec::new();
    while let Ok(r) = returned.try_recv() {
        early.push(r);
    }
    assert_eq!(
        early,
        Vec::new(),
        "false wakes: returned on writes to other rows"
    );

    // Writes to ten watched rows and the creation of five missing ones wake exactly
    // those, each with the index of its write.
    let mut expected = BTreeMap::new();
    for i in (0..waiters).step_by(waiters / 10).take(10) {
        let id = format!("w{i:05}");
        let index = c.apply(&status(&id, NodeStatus::Down)).await.unwrap();
        expected.insert(id, (200, index));
    }
    for i in 0..5 {
        let id = format!("absent-{i}");
        let index = c
            .apply(&Command::UpsertNode {
                node: node(&id, "ebs"),
            })
            .await
            .unwrap();
        expected.insert(id, (200, index));
    }
    let mut woken = BTreeMap::new();
    while woken.len() < expected.len() {
        let (id, status, index) = tokio::time::timeout(DEADLINE, returned.recv())
            .await
            .expect("woken in time")
            .expect("a waiter");
        woken.insert(id, (status, index));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok((id, status, index)) = returned.try_recv() {
        woken.insert(id, (status, index));
    }
    assert_eq!(woken, expected, "exactly the written rows woke");
    let still = waiting(&agents).await;
    assert_eq!(still, (blocked.len() - expected.len()) as u64);
    for t in &tasks {
        t.abort();
    }
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_row_answers_its_tables_last_delete_and_wakes_when_created() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    let http = crate::support::http();
    c.apply(&Command::UpsertNode {
        node: node("n1", "ebs"),
    })
    .await
    .unwrap();
    // Nothing deleted yet: 1 rather than 0, so that a client blocking with it waits.
    assert_eq!(get(&agents, &http, "/v1/node/ghost").await, (404, 1));
    assert_eq!(get(&agents, &http, "/v1/job/ghost").await, (404, 1));
    // A wait that runs out answers what is there then: still missing, same index.
    let start = Instant::now();
    let timed_out = get(&agents, &http, "/v1/node/ghost?index=1&wait=300ms").await;
    assert_eq!(timed_out, (404, 1));
    assert!(start.elapsed() >= Duration::from_millis(300));
    c.apply(&Command::UpsertNode {
        node: node("n2", "ebs"),
    })
    .await
    .unwrap();
    let deleted = c
        .apply(&Command::DeleteNodes {
            ids: vec![Id::from("n2")],
        })
        .await
        .unwrap();
    c.apply(&status("n1", NodeStatus::Down)).await.unwrap();
    assert_eq!(get(&agents, &http, "/v1/node/ghost").await, (404, deleted));
    assert_eq!(get(&agents, &http, "/v1/node/n2").await, (404, deleted));
    // Other tables' deletes are theirs: no allocation was ever deleted.
    assert_eq!(get(&agents, &http, "/v1/allocation/ghost").await, (404, 1));

    let waiter = {
        let (http, url) = (
            http.clone(),
            agents.url(0, &format!("/v1/node/ghost?index={deleted}&wait=60s")),
        );
        tokio::spawn(async move {
            let resp = http.get(url).send().await.expect("answer");
            (resp.status().as_u16(), index_of(&resp))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Another node's update, creation and deletion: none wakes it.
    c.apply(&status("n1", NodeStatus::Ready)).await.unwrap();
    c.apply(&Command::UpsertNode {
        node: node("n3", "ebs"),
    })
    .await
    .unwrap();
    c.apply(&Command::DeleteNodes {
        ids: vec![Id::from("n3")],
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiter.is_finished(), "woken by writes to other nodes");
    let created = c
        .apply(&Command::UpsertNode {
            node: node("ghost", "ebs"),
        })
        .await
        .unwrap();
    let answer = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(answer, (200, created));
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_answers_with_the_rows_it_was_built_from() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    let http = crate::support::http();
    // n1 runs a node instance of ebs, whose allocation (alloc-n1) is not stored yet.
    let fingerprinted = c
        .apply(&Command::UpsertNode {
            node: node("n1", "ebs"),
        })
        .await
        .unwrap();
    assert_eq!(
        get(&agents, &http, "/v1/plugin/csi/ebs").await,
        (200, fingerprinted)
    );
    // An allocation the plugin does not list moves the allocs table, not the plugin.
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("other", "n1")],
    })
    .await
    .unwrap();
    assert_eq!(
        get(&agents, &http, "/v1/plugin/csi/ebs").await,
        (200, fingerprinted)
    );

    let block = |index: u64| {
        let (http, url) = (
            http.clone(),
            agents.url(0, &format!("/v1/plugin/csi/ebs?index={index}&wait=60s")),
        );
        tokio::spawn(async move {
            let resp = http.get(url).send().await.expect("answer");
            (resp.status().as_u16(), index_of(&resp))
        })
    };
    let waiter = block(fingerprinted);
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("another", "n1")],
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !waiter.is_finished(),
        "woken by an allocation it does not list"
    );
    // Its own allocation appears: the answer changed, and its index with it.
    let listed = c
        .apply(&Command::UpsertAllocs {
            allocs: vec![alloc("alloc-n1", "n1")],
        })
        .await
        .unwrap();
    let answer = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(answer, (200, listed));

    // Its allocation goes away: the plugin row is unchanged, the answer is not, so
    // the index is the allocs table's delete.
    let waiter = block(listed);
    let gone = c
        .apply(&Command::DeleteAllocs {
            ids: vec![Id::from("alloc-n1")],
        })
        .await
        .unwrap();
    let answer = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(answer, (200, gone));
    assert_eq!(get(&agents, &http, "/v1/plugin/csi/ebs").await, (200, gone));
    agents.shutdown().await;
}
