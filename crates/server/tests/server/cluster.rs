//! Three `schedstate agent` processes on loopback: writes through any of them, the
//! leader killed with SIGKILL mid-stream, writes resuming on a new leader, every
//! acknowledged write readable on the survivors, and the killed agent, restarted on
//! its directory, catching up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use schedstate::model::Node;
use schedstate::state::Command;
use schedstate_agent::{Client, ReadOptions};

use crate::agent_procs::{DEADLINE, ProcCluster};

type Acked = Arc<Mutex<BTreeMap<String, u64>>>;

/// The management token's secret of the process clusters.
const ROOT: &str = "root-secret-of-the-process-clusters";

/// Writes `node` until it is known to be in the state: another server after a refused
/// connection; after an error with unknown outcome, a consistent read first.
async fn write_until_known(clients: &[Client], node: &Node, turn: &mut usize) -> u64 {
    let start = Instant::now();
    let command = Command::UpsertNode { node: node.clone() };
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "write of {} never committed",
            node.id
        );
        *turn += 1;
        let c = &clients[*turn % clients.len()];
        match c.apply(&command).await {
            Ok(index) => return index,
            Err(e) if e.changed_nothing() => {}
            Err(_) => {
                // Outcome unknown: look before writing again.
                if let Ok(found) = c.node(&node.id, ReadOptions::default()).await
                    && let Some(n) = found.value
                {
                    return n.modify_index;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn_writers(
    clients: Vec<Client>,
    acked: Acked,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|w| {
            let (clients, acked, stop) = (clients.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut turn = w;
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed) {
                    let node = Node::new(format!("w{w}-{seq}"), format!("host-{w}-{seq}"));
                    let index = write_until_known(&clients, &node, &mut turn).await;
                    acked.lock().insert(node.id.to_string(), index);
                    seq += 1;
                }
            })
        })
        .collect()
}

/// Stops the writers and waits for them; a writer that panicked fails the test.
async fn stop_writers(stop: &AtomicBool, writers: Vec<tokio::task::JoinHandle<()>>) {
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        tokio::time::timeout(DEADLINE, w)
            .await
            .expect("writers stop")
            .expect("writer ok");
    }
}

async fn wait_for(what: &str, cluster: &ProcCluster, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "{what}\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads agent `i`'s own state (`?stale`) until it reached `index`; returns its nodes.
async fn stale_nodes_at(cluster: &ProcCluster, i: usize, index: u64) -> BTreeMap<String, u64> {
    let c = cluster.client(i);
    let start = Instant::now();
    loop {
        if let Ok(r) = c.nodes(ReadOptions::stale()).await
            && r.index >= index
        {
            return r
                .value
                .iter()
                .map(|n| (n.id.to_string(), n.modify_index))
                .collect();
        }
        assert!(
            start.elapsed() < DEADLINE,
            "agent {} never reached index {index}\n{}",
            i + 1,
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_survive_a_sigkilled_leader_and_lose_nothing() {
    // The whole secure setup: TLS between everyone, the cluster key, ACL.
    let mut cluster = ProcCluster::start_tls(3, Some(ROOT)).await;
    let clients: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(clients, acked.clone(), stop.clone());

    wait_for("60 writes before the kill", &cluster, || {
        acked.lock().len() >= 60
    })
    .await;
    let leader = cluster.wait_leader().await;
    cluster.kill(leader);
    let at_kill = acked.lock().len();
    // Writes resume on a new leader.
    wait_for("60 writes after the kill", &cluster, || {
        acked.lock().len() >= at_kill + 60
    })
    .await;
    stop_writers(&stop, writers).await;
    let new_leader = cluster.wait_leader().await;
    assert_ne!(new_leader, leader);

    let acked = acked.lock().clone();
    let last = acked.values().copied().max().expect("writes");
    for i in cluster.running() {
        let nodes = stale_nodes_at(&cluster, i, last).await;
        for (id, index) in &acked {
            assert_eq!(
                nodes.get(id),
                Some(index),
                "agent {}: acknowledged write {id} at {index}",
                i + 1
            );
        }
    }
    // The killed agent comes back on its directory and catches up.
    let reference = stale_nodes_at(&cluster, new_leader, last).await;
    cluster.restart(leader);
    let caught_up = stale_nodes_at(&cluster, leader, last).await;
    assert_eq!(caught_up, reference, "the restarted agent differs");

    // SIGTERM is a clean stop: exit code 0, and a restart finds everything.
    for i in 0..3 {
        let status = cluster.terminate(i).expect("running");
        assert!(status.success(), "agent {} exited with {status}", i + 1);
    }
    // (A lone restarted server holds its log but applies it only once a quorum
    // tells it what is committed: restart them all.)
    for i in 0..3 {
        cluster.restart(i);
    }
    for i in 0..3 {
        let reopened = stale_nodes_at(&cluster, i, last).await;
        assert_eq!(
            reopened,
            reference,
            "agent {} after a clean stop and restart",
            i + 1
        );
    }
}

/// The certificate agent `i` serves in a new handshake (DER).
async fn served_certificate(cluster: &ProcCluster, i: usize) -> Vec<u8> {
    let config = schedstate_agent::tls::client_config(
        cluster.client_tls().and_then(|t| t.ca_cert).as_deref(),
        None,
    )
    .expect("client config");
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured((*config).clone())
        .tls_info(true)
        .build()
        .expect("client");
    let resp = http
        .get(format!("{}/v1/agent/health", cluster.address(i)))
        .send()
        .await
        .expect("an answer");
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|t| t.peer_certificate())
        .expect("the peer's certificate")
        .to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("a certificate")
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_on_sighup_under_write_load() {
    let cluster = ProcCluster::start_tls(3, Some(ROOT)).await;
    let clients: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(clients, acked.clone(), stop.clone());
    wait_for("40 writes before the rotation", &cluster, || {
        acked.lock().len() >= 40
    })
    .await;
    let ca = cluster.ca.as_ref().expect("TLS");
    let mut new = Vec::new();
    for i in 0..3 {
        let old = served_certificate(&cluster, i).await;
        let pem = cluster.issue_server_cert(ca, i);
        assert_ne!(der(&pem), old);
        new.push(der(&pem));
    }
    for i in 0..3 {
        cluster.hangup(i);
    }
    let at_rotation = acked.lock().len();
    for (i, want) in new.iter().enumerate() {
        let start = Instant::now();
        while served_certificate(&cluster, i).await != *want {
            assert!(
                start.elapsed() < DEADLINE,
                "agent {} still serves its old certificate\n{}",
                i + 1,
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Writes go on: between servers (new Raft connections use the new certificates)
    // and from clients.
    wait_for("40 writes after the rotation", &cluster, || {
        acked.lock().len() >= at_rotation + 40
    })
    .await;
    stop_writers(&stop, writers).await;
    let acked = acked.lock().clone();
    let last = acked.values().copied().max().expect("writes");
    for i in 0..3 {
        let nodes = stale_nodes_at(&cluster, i, last).await;
        for (id, index) in &acked {
            assert_eq!(nodes.get(id), Some(index), "agent {}: {id}", i + 1);
        }
    }
    let logs = cluster.logs();
    assert_eq!(
        logs.matches("TLS certificate, key and CA reloaded").count(),
        3,
        "{logs}"
    );
}
