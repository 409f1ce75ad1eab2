//! A rolling upgrade through the agents: one of three limited to the previous
//! release's format (`max_format = 2`). ACL bootstraps and tokens work with unsalted
//! digests, as that release keeps them; a job registration (its definition needs
//! format 3) is 409 `FormatNotEnabled` through every agent, naming the server behind,
//! and changes nothing. Once that agent is restarted on this release, the cluster's
//! format reaches 3 on its own, the leader salts the digests, every secret still
//! authenticates, and the job is taken whole.

use std::time::{Duration, Instant};

use schedstate::model::{AclScope, unsalted_digest};
use schedstate_agent::api::AclTokenRequest;
use schedstate_agent::{Agent, Client};
use serde_json::{Value, json};

use crate::support::{Agents, DEADLINE};

const ROOT: &str = "root-secret-of-the-upgrade";

fn registration() -> Value {
    json!({"Job": {
        "ID": "web", "Name": "web", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "web", "Count": 1, "Tasks": [{
            "Name": "web", "Driver": "docker", "Config": {"image": "nginx:1.27"},
        }]}],
    }})
}

async fn register(agents: &Agents, i: usize) -> (u16, Value) {
    let resp = crate::support::http()
        .put(agents.url(i, "/v1/jobs"))
        .bearer_auth(ROOT)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&registration()).unwrap())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn formats(agents: &Agents, i: usize) -> (String, String) {
    let body = crate::support::http()
        .get(agents.url(i, "/v1/agent/self"))
        .bearer_auth(ROOT)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    let s = &v["stats"]["schedstate"];
    (
        s["store_format"].as_str().unwrap().to_string(),
        s["cluster_format"].as_str().unwrap().to_string(),
    )
}

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < DEADLINE, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_cluster_keeps_format_2_until_its_last_server_is_upgraded() {
    let mut agents = Agents::start_with(3, Some(ROOT), |c| {
        if c.id == 3 {
            c.server.max_format = 2;
        }
    })
    .await;
    let server = |agents: &Agents, i: usize| agents.agents[i].as_ref().unwrap().server().clone();
    // The bootstrap (by `start_with`) was kept unsalted, as format 2 keeps it.
    let snap = server(&agents, 0).read_stale();
    assert!(snap.view().acl_salt().is_none());
    assert_eq!(
        snap.view().acl_tokens().next().unwrap().secret_hash,
        unsalted_digest(ROOT)
    );
    let reader = agents
        .client(0)
        .acl_create_token(&AclTokenRequest {
            name: "reader".into(),
            scopes: vec![AclScope::Read],
            ..AclTokenRequest::default()
        })
        .await
        .unwrap();
    agents.wait_applied_everywhere().await;
    assert!(server(&agents, 1).read_stale().view().acl_salt().is_none());
    assert_eq!(formats(&agents, 2).await, ("2".into(), "2".into()));
    assert_eq!(formats(&agents, 0).await, ("3".into(), "2".into()));

    // A job's definition needs format 3: refused through every agent, nothing kept.
    let before = crate::state_bytes(&agents, 0).await;
    for i in 0..3 {
        let (status, body) = register(&agents, i).await;
        assert_eq!(status, 409, "through agent {}: {body}", i + 1);
        assert_eq!(body["kind"], "FormatNotEnabled", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("server 3") || message.contains("server, 3"),
            "{message}"
        );
    }
    agents.wait_applied_everywhere().await;
    assert_eq!(crate::state_bytes(&agents, 0).await, before);

    // Agent 3 is upgraded: restarted on its directory and port, this release's format.
    agents.agents[2].take().unwrap().shutdown().await;
    agents.agents[2] = Some(Agent::start(agents.config(2)).await.expect("agent 3 again"));
    until("cluster format 3 everywhere", async || {
        let mut all = true;
        for i in 0..3 {
            all &= formats(&agents, i).await == ("3".into(), "3".into());
        }
        all
    })
    .await;
    until("the digests salted", async || {
        server(&agents, 0).read_stale().view().acl_salt().is_some()
    })
    .await;
    agents.wait_applied_everywhere().await;
    // Every secret made before still authenticates, on every agent.
    for i in 0..3 {
        let root = agents.client(i).acl_token_self().await.unwrap();
        assert_eq!(root.name, "Bootstrap Token");
        let read = Client::new(&agents.url(i, ""), reader.secret_id.clone()).unwrap();
        assert_eq!(
            read.acl_token_self().await.unwrap().accessor_id,
            reader.accessor_id
        );
    }
    let (status, body) = register(&agents, 2).await;
    assert_eq!(status, 200, "{body}");
    agents.wait_applied_everywhere().await;
    for i in 0..3 {
        let job = server(&agents, i)
            .read_stale()
            .view()
            .job("default", "web")
            .unwrap();
        assert!(job.definition.is_some(), "agent {}", i + 1);
    }
    agents.shutdown().await;
}
