//! `POST /v1/operator/raft/peer`: a server added (a voter only once it caught up) and
//! removed, the leader removing itself, a server that cannot be reached not added
//! within its wait, malformed and conflicting changes refused with the configuration
//! unchanged, and recover.

use std::time::{Duration, Instant};

use schedstate_agent::ReadOptions;
use schedstate_agent::api::{PeerChange, RaftConfiguration};

use super::{error_of, upsert};
use crate::support::{self, Agents, DEADLINE};

/// A configuration as (id, address, voter), to compare before and after.
fn servers(c: &RaftConfiguration) -> Vec<(u64, String, bool)> {
    c.servers
        .iter()
        .map(|s| (s.id, s.address.clone(), s.voter))
        .collect()
}

/// Posts `body` as a peer change to agent `i`.
async fn post_change(agents: &Agents, i: usize, body: &serde_json::Value) -> reqwest::Response {
    crate::support::http()
        .post(agents.url(i, "/v1/operator/raft/peer"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("an answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_added_and_removed_through_the_api() {
    let mut agents = Agents::start(3, None).await;
    agents.client(0).apply(&upsert("n1", "ebs")).await.unwrap();
    let follower = (agents.wait_leader().await + 1) % 3;
    // A fourth agent that knows the cluster: fresh, it waits to be added.
    agents.ports.push(support::free_ports(1)[0]);
    let fourth = schedstate_agent::Agent::start(agents.config(3))
        .await
        .unwrap();
    agents.agents.push(Some(fourth));
    let address = format!("127.0.0.1:{}", agents.ports[3]);
    // Through a follower: the change goes to the leader.
    let c = agents.client(follower);
    let add = PeerChange::Add {
        id: 4,
        address,
        wait: None,
    };
    let done = c.change_peer(&add).await.unwrap();
    assert_eq!((done.done, done.left_joint), (add.clone(), None));
    let config = c.raft_configuration().await.unwrap();
    assert_eq!(config.servers.len(), 4);
    assert!(config.servers.iter().all(|s| s.voter));
    // Added again at the same address: nothing to do.
    c.change_peer(&add).await.unwrap();
    assert_eq!(c.raft_configuration().await.unwrap().servers.len(), 4);
    // The new server has the state.
    let start = Instant::now();
    while agents
        .client(3)
        .node("n1", ReadOptions::stale())
        .await
        .unwrap()
        .value
        .is_none()
    {
        assert!(
            start.elapsed() < DEADLINE,
            "the added server never caught up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.change_peer(&PeerChange::Remove { id: 4 }).await.unwrap();
    // The follower answers from its own copy of the membership: it sees the change
    // once it applied it (a heartbeat later).
    let start = Instant::now();
    loop {
        let config = c.raft_configuration().await.unwrap();
        if config.servers.len() == 3 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "{config:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An unknown op is 400 and changes nothing.
    let (status, e) = error_of(
        post_change(
            &agents,
            follower,
            &serde_json::json!({"op": "promote", "id": 4}),
        )
        .await,
    )
    .await;
    assert_eq!((status, e.kind.as_str()), (400, "BadRequest"));
    assert_eq!(c.raft_configuration().await.unwrap().servers.len(), 3);
    agents
        .client(follower)
        .apply(&upsert("n2", "ebs"))
        .await
        .unwrap();
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_cannot_be_reached_is_not_added_and_the_cluster_stays_writable() {
    let agents = Agents::start(3, None).await;
    let leader = agents.wait_leader().await;
    let c = agents.client(leader);
    let before = c.raft_configuration().await.unwrap();
    // Nothing listens on port 9: refused within the wait, the membership as it was.
    let start = Instant::now();
    let resp = post_change(
        &agents,
        leader,
        &serde_json::json!({"op": "add", "id": 4, "address": "127.0.0.1:9", "wait": "1s"}),
    )
    .await;
    let (status, e) = error_of(resp).await;
    assert_eq!(
        (status, e.kind.as_str()),
        (504, "NotCaughtUp"),
        "{}",
        e.message
    );
    assert!(e.message.contains("not added"), "{}", e.message);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let after = c.raft_configuration().await.unwrap();
    assert_eq!(servers(&after), servers(&before));
    agents
        .client(leader)
        .apply(&upsert("after", "ebs"))
        .await
        .unwrap();
    // Through the client, whose wait covers the agent's: the same answer.
    let e = c
        .change_peer(&PeerChange::Add {
            id: 4,
            address: "127.0.0.1:9".into(),
            wait: Some("500ms".into()),
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("NotCaughtUp"), "{e}");
    assert_eq!(
        servers(&c.raft_configuration().await.unwrap()),
        servers(&before)
    );
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_conflicting_peer_changes_are_refused_and_change_nothing() {
    let agents = Agents::start(3, None).await;
    let leader = agents.wait_leader().await;
    let c = agents.client(leader);
    let before = c.raft_configuration().await.unwrap();
    let add =
        |id: u64, address: &str| serde_json::json!({"op": "add", "id": id, "address": address});
    let long_host = format!("{}:4646", "h".repeat(260));
    let mut cases = vec![
        (add(0, "127.0.0.1:4700"), 400, "BadRequest"),
        (add(4, &long_host), 400, "BadRequest"),
        (
            serde_json::json!({"op": "add", "id": 4, "address": "127.0.0.1:4700", "wait": "soon"}),
            400,
            "BadRequest",
        ),
        (
            serde_json::json!({"op": "add", "id": -1, "address": "127.0.0.1:4700"}),
            400,
            "BadRequest",
        ),
        (
            serde_json::json!({"op": "add", "id": 4, "address": "127.0.0.1:4700", "extra": 1}),
            400,
            "BadRequest",
        ),
        (add(1, "10.9.9.9:4646"), 409, "PeerConflict"),
        (
            serde_json::json!({"op": "remove", "id": 42}),
            404,
            "PeerNotFound",
        ),
    ];
    for address in [
        "",
        "no-port",
        "host:",
        ":4646",
        "host:0",
        "host:65536",
        "host:+80",
        "host: 80",
        "::1:4646",
        "[]:4646",
        "a b:4646",
        "host\n:4646",
        "hôst:4646",
    ] {
        cases.push((add(4, address), 400, "BadRequest"));
    }
    for (body, status, kind) in cases {
        let (got, e) = error_of(post_change(&agents, leader, &body).await).await;
        assert_eq!(
            (got, e.kind.as_str()),
            (status, kind),
            "{body}: {}",
            e.message
        );
    }
    assert_eq!(
        servers(&c.raft_configuration().await.unwrap()),
        servers(&before)
    );
    // Nothing to recover in a uniform configuration.
    let done = c.change_peer(&PeerChange::Recover).await.unwrap();
    assert_eq!(done.left_joint, Some(false));
    assert_eq!(
        servers(&c.raft_configuration().await.unwrap()),
        servers(&before)
    );
    agents
        .client(leader)
        .apply(&upsert("after", "ebs"))
        .await
        .unwrap();
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_removes_itself_and_the_others_go_on() {
    let mut agents = Agents::start(3, None).await;
    let leader = agents.wait_leader().await;
    let leader_id = leader as u64 + 1;
    agents
        .client(leader)
        .change_peer(&PeerChange::Remove { id: leader_id })
        .await
        .unwrap();
    // The removed agent is no member; the other two elect a leader and take writes.
    let removed = agents.agents[leader].take().expect("running");
    removed.shutdown().await;
    let new = agents.wait_leader().await;
    assert_ne!(new, leader);
    let config = agents.client(new).raft_configuration().await.unwrap();
    assert_eq!(config.servers.len(), 2, "{config:?}");
    assert!(config.servers.iter().all(|s| s.id != leader_id));
    let other = (0..3).find(|i| *i != leader && *i != new).unwrap();
    agents
        .client(other)
        .apply(&upsert("after", "ebs"))
        .await
        .unwrap();
    agents.shutdown().await;
}
