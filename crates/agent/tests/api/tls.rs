//! TLS on the agents' port: servers prove themselves to each other by certificate
//! (mutual TLS, here without a cluster key), so a connection without a server
//! certificate of the cluster's CA sends no Raft RPC; clients verify the agents; a
//! plain-HTTP or foreign-CA peer gets no answer at all; certificates reload.

use std::sync::Arc;

use schedstate_agent::ReadOptions;
use schedstate_agent::api::ErrorBody;

use crate::support::{Agents, Pki};
use crate::{state_bytes, upsert};

const ROOT: &str = "root-secret-for-the-tls-tests";

/// `n` agents with TLS; ACL on (bootstrapped with [`ROOT`]) unless `verify_clients`
/// (the test clients present no certificate, so they could not bootstrap).
async fn tls_cluster(pki: &Arc<Pki>, n: usize, verify_clients: bool) -> Agents {
    let p = pki.clone();
    let token = (!verify_clients).then_some(ROOT);
    Agents::start_with(n, token, move |c| {
        let mut tls = p.options(c.id);
        tls.verify_clients = verify_clients;
        c.tls = Some(tls);
        // Mutual TLS alone authenticates the servers.
        c.cluster_key = None;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_prove_themselves_by_certificate_and_nothing_else_sends_raft_rpcs() {
    let pki = Arc::new(Pki::new(3));
    let agents = tls_cluster(&pki, 3, false).await;
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    // A write through a follower (forwarded over mutual TLS) and a consistent read
    // through another (proxied to the leader over mutual TLS).
    let f = agents.client(follower);
    let index = f.apply(&upsert("n1", "ebs")).await.unwrap();
    let read = agents
        .client((leader + 2) % 3)
        .node("n1", ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(read.index, index);
    let before = state_bytes(&agents, follower).await;

    let rpc_url = agents.url(follower, "/v1/raft/rpc");
    let post = |http: reqwest::Client| {
        http.post(rpc_url.clone())
            .header("content-type", "application/x-schedstate-raft")
            .body(vec![0u8; 16])
            .send()
    };
    for (who, http) in [
        ("no certificate", pki.http(&pki.ca, None)),
        (
            "a CLI user's certificate",
            pki.http(&pki.ca, Some(&pki.cli)),
        ),
    ] {
        let resp = post(http).await.expect("an answer");
        let status = resp.status().as_u16();
        let body: ErrorBody = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!((status, body.kind.as_str()), (403, "NotAServer"), "{who}");
    }
    // A server certificate of another CA: the handshake itself fails.
    let foreign = pki.http(&pki.ca, Some(&pki.foreign_server));
    assert!(
        post(foreign).await.is_err(),
        "a foreign CA's certificate is refused"
    );
    // A client that does not trust the cluster's CA refuses the agent.
    let wrong_trust = schedstate_agent::Client::with_tls(
        &agents.url(follower, ""),
        Some(ROOT.into()),
        Some(&schedstate_agent::ClientTls {
            ca_cert: Some(pki.foreign_ca.clone()),
            client_cert: None,
        }),
    )
    .unwrap();
    let e = wrong_trust.nodes(ReadOptions::stale()).await.unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    // Plain HTTP on the TLS port gets no answer, and is counted.
    let plain = crate::support::http()
        .get(
            agents
                .url(follower, "/v1/agent/health")
                .replace("https", "http"),
        )
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
    let metrics = agents.client(follower).metrics().await.unwrap();
    let failed = metrics
        .lines()
        .find(|l| l.starts_with("schedstate_tls_handshakes_failed_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .expect("the metric");
    assert!(failed >= 2.0, "{failed}");
    assert_eq!(
        state_bytes(&agents, follower).await,
        before,
        "nothing refused wrote"
    );
    // The cluster writes on.
    f.apply(&upsert("n2", "ebs")).await.unwrap();
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_verify_clients_an_api_client_needs_a_certificate() {
    let pki = Arc::new(Pki::new(1));
    let agents = tls_cluster(&pki, 1, true).await;
    let url = agents.url(0, "/v1/agent/health");
    assert!(pki.http(&pki.ca, None).get(&url).send().await.is_err());
    let with_cert = pki
        .http(&pki.ca, Some(&pki.cli))
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cert.status(), 200);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_shut_down_loses_nothing_over_tls() {
    let pki = Arc::new(Pki::new(3));
    let mut agents = tls_cluster(&pki, 3, false).await;
    let leader = agents.wait_leader().await;
    let mut acked = Vec::new();
    for i in 0..20 {
        let id = format!("n{i}");
        agents
            .client((leader + 1) % 3)
            .apply(&upsert(&id, "ebs"))
            .await
            .unwrap();
        acked.push(id);
    }
    agents.agents[leader]
        .take()
        .expect("running")
        .shutdown()
        .await;
    let next = agents.wait_leader().await;
    assert_ne!(next, leader);
    for i in 20..30 {
        let id = format!("n{i}");
        agents
            .client(next)
            .apply(&upsert(&id, "ebs"))
            .await
            .unwrap();
        acked.push(id);
    }
    let nodes = agents
        .client(next)
        .nodes(ReadOptions::default())
        .await
        .unwrap()
        .value;
    let ids: Vec<String> = nodes.iter().map(|n| n.id.to_string()).collect();
    for id in &acked {
        assert!(ids.contains(id), "{id} lost");
    }
    agents.shutdown().await;
}
