//! The agent's HTTP API in this process: reads, writes, blocking queries, bad input,
//! tokens, the event stream, and three agents forwarding and reading on followers.

mod acl;
mod acl_nomad;
mod acl_salt;
mod false_wakes;
mod follower_reads;
mod go_client;
mod health;
mod hostile;
mod idempotency;
mod job_definitions;
mod jobs;
mod namespaces;
mod nomad;
mod parked;
mod peers;
mod restore;
mod rolling_upgrade;
mod support;
mod tls;
mod ui;
mod volumes_nomad;

use std::time::{Duration, Instant};

use schedstate::model::NodeStatus;
use schedstate::state::Command;
use schedstate_agent::ReadOptions;
use schedstate_agent::api::{ErrorBody, INDEX_HEADER, NOMAD_INDEX_HEADER};
use support::{Agents, DEADLINE, alloc, node};

fn upsert(id: &str, plugin: &str) -> Command {
    Command::UpsertNode {
        node: node(id, plugin),
    }
}

async fn state_bytes(agents: &Agents, i: usize) -> Vec<u8> {
    let agent = agents.agents[i].as_ref().expect("running");
    agent
        .server()
        .read_stale()
        .canonical_bytes()
        .expect("canonical bytes")
}

async fn error_of(resp: reqwest::Response) -> (u16, ErrorBody) {
    let status = resp.status().as_u16();
    let body = resp.bytes().await.expect("body");
    let e: ErrorBody = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "not an error body ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, e)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_writes_and_not_found() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    let i1 = c.apply(&upsert("n1", "ebs")).await.expect("write");
    let i2 = c
        .apply(&Command::UpsertAllocs {
            allocs: vec![alloc("a1", "n1")],
        })
        .await
        .expect("write");
    assert!(i2 > i1);

    let n = c.node("n1", ReadOptions::default()).await.expect("read");
    assert_eq!(n.value.expect("found").modify_index, i1);
    assert_eq!(
        n.index, i1,
        "a node read answers with the nodes table index"
    );
    assert_eq!(
        c.nodes(ReadOptions::default()).await.unwrap().value.len(),
        1
    );
    let allocs = c
        .node_allocations("n1", ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(allocs.value.expect("known node").len(), 1);
    assert!(
        c.allocation("a1", ReadOptions::default())
            .await
            .unwrap()
            .value
            .is_some()
    );

    let plugins = c.plugins(ReadOptions::default()).await.unwrap().value;
    assert_eq!(plugins.len(), 1);
    assert_eq!(plugins[0].id, "ebs");
    assert_eq!(plugins[0].provider, "ebs.csi.aws.com");
    // Expected counts come from the jobs that run the plugin, and none does here:
    // one healthy instance, none expected.
    assert_eq!(
        (plugins[0].nodes_healthy, plugins[0].nodes_expected),
        (1, 0)
    );
    let p = c.plugin("ebs", ReadOptions::default()).await.unwrap();
    assert_eq!(p.value.expect("found").version, "1.25.0");
    assert!(
        c.volumes(None, None, ReadOptions::default())
            .await
            .unwrap()
            .value
            .is_empty()
    );

    // Unknown rows: 404 with a kind (the client reads them as None), with the index.
    assert!(
        c.node("ghost", ReadOptions::stale())
            .await
            .unwrap()
            .value
            .is_none()
    );
    let http = crate::support::http();
    for (path, kind) in [
        ("/v1/node/ghost", "NodeNotFound"),
        ("/v1/node/ghost/allocations", "NodeNotFound"),
        ("/v1/allocation/ghost", "AllocationNotFound"),
        ("/v1/plugin/csi/ghost", "PluginNotFound"),
        ("/v1/volume/csi/ghost", "VolumeNotFound"),
        ("/v1/job/ghost", "JobNotFound"),
        ("/v1/job/ghost/allocations", "JobNotFound"),
        ("/v1/no/such/thing", "NoSuchPath"),
    ] {
        let resp = http.get(agents.url(0, path)).send().await.unwrap();
        if kind != "NoSuchPath" {
            assert!(resp.headers().contains_key(INDEX_HEADER), "{path}");
            assert!(resp.headers().contains_key(NOMAD_INDEX_HEADER), "{path}");
        }
        let (status, e) = error_of(resp).await;
        assert_eq!((status, e.kind.as_str()), (404, kind), "{path}");
    }
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_query_wakes_on_a_relevant_write_only() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    c.apply(&upsert("n2", "ebs")).await.unwrap();
    let first = c
        .node_allocations("n1", ReadOptions::default())
        .await
        .unwrap();
    let index = first.index;

    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            c.node_allocations("n1", ReadOptions::blocking(index, Duration::from_secs(30)))
                .await
        })
    };
    // A write to another node's allocations does not wake it …
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("other", "n2")],
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "woken by a write to another node");
    // … one to its own does, with the new index.
    let wrote = c
        .apply(&Command::UpsertAllocs {
            allocs: vec![alloc("mine", "n1")],
        })
        .await
        .unwrap();
    let answer = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    assert_eq!(answer.index, wrote);
    let ids: Vec<String> = answer
        .value
        .unwrap()
        .iter()
        .map(|a| a.id.to_string())
        .collect();
    assert_eq!(ids, ["mine"]);

    // Nothing changes: the wait ends at its deadline with the same index.
    let start = Instant::now();
    let idle = c
        .node_allocations(
            "n1",
            ReadOptions::blocking(wrote, Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(idle.index, wrote);
    assert!(start.elapsed() >= Duration::from_millis(300));
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    let before = state_bytes(&agents, 0).await;
    let http = crate::support::http();
    let post = |body: Vec<u8>| {
        http.post(agents.url(0, "/v1/commands"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let cases: Vec<(Vec<u8>, u16, &str, &str)> = vec![
        (b"{not json".to_vec(), 400, "BadRequest", "not a command"),
        (b"".to_vec(), 400, "BadRequest", "empty"),
        (
            br#"{"UpsertNode":{"node":{"id":"x","name":"y","colour":"red"}}}"#.to_vec(),
            400,
            "BadRequest",
            "colour",
        ),
        (
            br#"{"LaunchRockets":{}}"#.to_vec(),
            400,
            "BadRequest",
            "LaunchRockets",
        ),
        (
            serde_json::to_vec(&Command::UpdateNodeStatus {
                id: "ghost".into(),
                status: NodeStatus::Down,
            })
            .unwrap(),
            409,
            "NodeNotFound",
            "ghost",
        ),
        (vec![b' '; (16 << 20) + 1], 413, "TooLarge", "limit"),
        // An input rule (no state needed): refused before it is proposed.
        (
            serde_json::to_vec(&Command::UpdateNodeStatus {
                id: "ghost\u{7}".into(),
                status: NodeStatus::Down,
            })
            .unwrap(),
            400,
            "InvalidInput",
            "node id",
        ),
    ];
    for (body, status, kind, names) in cases {
        let (got, e) = error_of(post(body).await.unwrap()).await;
        assert_eq!((got, e.kind.as_str()), (status, kind), "{}", e.message);
        assert!(
            e.message.contains(names),
            "{:?} does not name {names:?}",
            e.message
        );
        if status == 409 {
            assert!(e.index.is_some(), "a refusal names its no-op entry");
        }
    }
    for (path, names) in [
        ("/v1/nodes?index=minus", "index="),
        ("/v1/nodes?index=3&wait=30", "wait="),
        ("/v1/nodes?per_page=lots", "per_page="),
        ("/v1/volumes?stale=maybe", "stale="),
        ("/v1/event/stream?topic=Jobs", "Jobs"),
    ] {
        let req = http.get(agents.url(0, path));
        let (status, e) = error_of(req.send().await.unwrap()).await;
        assert_eq!((status, e.kind.as_str()), (400, "BadRequest"), "{path}");
        assert!(e.message.contains(names), "{path}: {:?}", e.message);
    }
    // Parameters the agent has no use for are ignored, as Nomad ignores them
    // (Nomad's clients send `type=csi`, a `region`, …); another region is refused.
    for path in [
        "/v1/nodes?idx=3",
        "/v1/volumes?type=csi&colour=red",
        "/v1/plugins?type=csi&region=global",
    ] {
        let resp = http.get(agents.url(0, path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    let (status, e) = error_of(
        http.get(agents.url(0, "/v1/nodes?region=mars"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, e.kind.as_str()), (400, "NoPathToRegion"));
    assert_eq!(
        state_bytes(&agents, 0).await,
        before,
        "bad input changed the state"
    );
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_from_an_index_with_topics_and_heartbeats() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    let start = c.apply(&upsert("n1", "ebs")).await.unwrap();
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("a1", "n1")],
    })
    .await
    .unwrap();
    let last = c.apply(&upsert("n2", "ebs")).await.unwrap();

    let http = crate::support::http();
    let mut resp = http
        .get(agents.url(
            0,
            &format!("/v1/event/stream?index={}&topic=Node", start - 1),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut text = String::new();
    let mut batches = Vec::new();
    let mut heartbeats = 0;
    let deadline = Instant::now() + DEADLINE;
    while (batches.len() < 2 || heartbeats == 0) && Instant::now() < deadline {
        let chunk = tokio::time::timeout(DEADLINE, resp.chunk())
            .await
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk.expect("stream open")));
        while let Some(nl) = text.find('\n') {
            let line: String = text.drain(..=nl).collect();
            if line.trim() == "{}" {
                heartbeats += 1;
                continue;
            }
            let b: schedstate_agent::api::EventBatch = serde_json::from_str(&line).unwrap();
            batches.push(b);
        }
    }
    // Only Node events: the alloc write is filtered out (its plugin change too).
    let keys: Vec<(u64, String, String)> = batches
        .iter()
        .flat_map(|b| {
            b.events
                .iter()
                .map(|e| (e.index, e.topic.clone(), e.key.clone()))
        })
        .collect();
    assert_eq!(
        keys,
        [
            (start, "Node".into(), "n1".into()),
            (last, "Node".into(), "n2".into())
        ]
    );
    assert!(heartbeats > 0, "an idle stream sends heartbeats");
    drop(resp);

    // Nomad's envelope and payload: the node under "Node", in Nomad's shape, and the
    // event type as Nomad names it.
    let first = &batches[0].events[0];
    assert_eq!(first.kind, "NodeRegistration");
    assert_eq!(first.payload["Node"]["ID"], "n1");
    assert_eq!(first.payload["Node"]["SchedulingEligibility"], "eligible");

    // The buffer holds 64 writes here: after 70 more, index 0 is compacted, and a
    // stream from it starts at the oldest write held, as Nomad's does.
    for i in 0..70 {
        c.apply(&upsert(&format!("m{i}"), "ebs")).await.unwrap();
    }
    let mut resp = http
        .get(agents.url(0, "/v1/event/stream?index=0&topic=Node"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut text = String::new();
    while !text.contains('\n') {
        let chunk = tokio::time::timeout(DEADLINE, resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .expect("stream open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let line = text.lines().next().unwrap();
    let oldest: schedstate_agent::api::EventBatch = serde_json::from_str(line).unwrap();
    assert!(oldest.index > last, "{line}");
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_forward_writes_and_read_consistently_on_a_follower() {
    let agents = Agents::start(3, None).await;
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    let f = agents.client(follower);
    let index = f.apply(&upsert("n1", "ebs")).await.unwrap();
    // Applied on the follower before it answered: a stale read there sees it.
    let stale = f.node("n1", ReadOptions::stale()).await.unwrap();
    assert!(stale.value.is_some());
    // A consistent read on the follower (after a read index from the leader).
    let consistent = f.node("n1", ReadOptions::default()).await.unwrap();
    assert_eq!(consistent.index, index);

    let leader_addr = format!("127.0.0.1:{}", agents.ports[leader]);
    assert_eq!(
        f.leader().await.unwrap().as_deref(),
        Some(leader_addr.as_str())
    );
    assert_eq!(f.peers().await.unwrap().len(), 3);
    let config = f.raft_configuration().await.unwrap();
    assert_eq!(config.servers.len(), 3);
    assert_eq!(config.servers.iter().filter(|s| s.leader).count(), 1);
    assert!(config.servers.iter().all(|s| s.voter));

    let metrics = agents.client(leader).metrics().await.unwrap();
    for name in [
        "schedstate_entries_applied_total",
        "schedstate_apply_seconds_bucket",
        "schedstate_commit_seconds_bucket",
        "schedstate_raft_log_fsyncs_total",
        "schedstate_raft_log_bytes",
        "schedstate_blocking_queries_waiting",
        "schedstate_leader_changes_total",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    // The snapshot endpoint gives the whole state, which restores elsewhere.
    let snap = f.snapshot(false).await.unwrap();
    let copy = schedstate::StateStore::new();
    copy.restore_from(&mut snap.value.as_slice()).unwrap();
    assert!(copy.snapshot().view().node("n1").is_some());
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_leader_writes_and_consistent_reads_are_503_and_change_nothing() {
    // Agent 1 of three whose peers never start: it never forms a cluster.
    let mut agents = Agents {
        dir: tempfile::tempdir().unwrap(),
        agents: Vec::new(),
        ports: support::free_ports(3),
        token: None,
        client_tls: None,
    };
    agents.agents.push(Some(
        schedstate_agent::Agent::start(agents.config(0))
            .await
            .unwrap(),
    ));
    let c = agents.client(0);
    let e = c.apply(&upsert("n1", "ebs")).await.unwrap_err();
    assert_eq!((e.status(), e.kind()), (Some(503), Some("NoLeader")), "{e}");
    let e = c.nodes(ReadOptions::default()).await.unwrap_err();
    assert_eq!((e.status(), e.kind()), (Some(503), Some("NoLeader")), "{e}");
    // A stale read answers from what the agent has: nothing.
    let stale = c.nodes(ReadOptions::stale()).await.unwrap();
    assert!(stale.value.is_empty());
    assert_eq!(stale.index, 0);
    agents.shutdown().await;
}
