//! Salted token digests through the agent: a bootstrap salts the cluster, so the same
//! bootstrap secret has unrelated digests in two clusters and authenticates in each;
//! an agent opened on a server directory of the previous formats (unsalted SHA-256
//! digests, `crates/raft/tests/golden/v3`) salts it once it leads, and the same
//! secrets still authenticate.

use std::path::Path;
use std::time::{Duration, Instant};

use schedstate::model::{AclScope, unsalted_digest};
use schedstate_agent::api::AclTokenRequest;
use schedstate_agent::{Agent, Client};

use crate::support::{Agents, DEADLINE, cluster_key, free_ports};

const SHARED: &str = "one-bootstrap-secret-for-both";

fn root_digest(agents: &Agents) -> String {
    let agent = agents.agents[0].as_ref().unwrap();
    let snap = agent.server().read_stale();
    let v = snap.view();
    assert!(v.acl_salt().is_some(), "a bootstrap sets the salt");
    let root = v.acl_tokens().next().unwrap();
    assert_eq!(root.secret_hash, v.acl_digest_of(SHARED));
    root.secret_hash.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_secret_has_unrelated_digests_in_two_clusters() {
    let a = Agents::start(1, Some(SHARED)).await;
    let b = Agents::start(1, Some(SHARED)).await;
    let (da, db) = (root_digest(&a), root_digest(&b));
    assert_ne!(da, db);
    assert_ne!(da, unsalted_digest(SHARED));
    for agents in [&a, &b] {
        let c = agents.client(0);
        let root = agents.agents[0].as_ref().unwrap().server().read_stale();
        let root = root.view().acl_tokens().next().unwrap();
        assert_eq!(
            c.acl_token_self().await.unwrap().accessor_id,
            *root.accessor_id
        );
        // A token made later is keyed with the same salt, and works.
        let made = c
            .acl_create_token(&AclTokenRequest {
                name: "reader".into(),
                scopes: vec![AclScope::Read],
                ..AclTokenRequest::default()
            })
            .await
            .unwrap();
        let reader = Client::new(&agents.url(0, ""), made.secret_id.clone()).unwrap();
        assert_eq!(
            reader.acl_token_self().await.unwrap().accessor_id,
            made.accessor_id
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_servers_directory_is_salted_by_its_leader_and_its_secrets_still_work() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../raft/tests/golden/v3/data");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a1");
    copy_dir(&golden, &data);
    let port = free_ports(1)[0];
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let peers = format!("1=127.0.0.1:{port}").parse().unwrap();
    let mut config = schedstate_agent::AgentConfig::new(1, addr, data, peers);
    config.acl = true;
    config.cluster_key = Some(cluster_key());
    let agent = Agent::start(config).await.expect("agent starts");

    // Once it leads, it salts the state: the digests are no longer the bare SHA-256.
    let start = Instant::now();
    loop {
        let salted = agent.server().read_stale().view().acl_salt().is_some();
        if salted {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "never salted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!("http://127.0.0.1:{port}");
    for (secret, accessor) in [
        ("golden-bootstrap-secret", "acc-boot"),
        ("golden-read-secret", "acc-read"),
    ] {
        let snap = agent.server().read_stale();
        let v = snap.view();
        assert!(
            v.acl_token_by_secret_hash(&unsalted_digest(secret))
                .is_none()
        );
        let c = Client::new(&url, Some(secret.to_string())).unwrap();
        assert_eq!(c.acl_token_self().await.unwrap().accessor_id, accessor);
    }
    agent.shutdown().await;
}
