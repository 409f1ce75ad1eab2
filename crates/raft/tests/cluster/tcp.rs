//! Three servers over TCP on loopback (ports the OS picks).

use std::time::Duration;

use schedstate::state::Command;
use schedstate_raft::{ProposeError, Server, ServerOptions, TcpEndpoint, TcpNetwork};
use tokio::net::TcpListener;

use crate::support::{DEADLINE, marker_node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_over_tcp_replicate_forward_and_survive_the_leader() {
    let root = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let mut servers = Vec::new();
    let mut endpoints = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let s = Server::open(
            id,
            &root.path().join(format!("s{id}")),
            ServerOptions::default(),
            TcpNetwork::new(),
        )
        .await
        .unwrap();
        endpoints.push(Some(TcpEndpoint::serve(listener, s.clone()).unwrap()));
        servers.push(s);
    }
    servers[0]
        .initialize(
            addrs
                .iter()
                .enumerate()
                .map(|(i, a)| (i as u64 + 1, a.clone())),
        )
        .await
        .unwrap();
    let leader = servers[0].wait_for_leader(DEADLINE).await.unwrap();
    for s in &servers {
        s.wait_for_leader(DEADLINE).await.unwrap();
    }

    // Writes through a follower are forwarded over TCP.
    let follower = servers.iter().find(|s| s.id() != leader).unwrap().clone();
    let mut last = 0;
    for seq in 0..200 {
        let c = follower
            .propose_or_forward(Command::UpsertNodes {
                nodes: vec![marker_node("tcp", seq)],
            })
            .await
            .unwrap();
        last = c.index;
    }
    // A refusal crosses the wire as kind and message.
    let refused = follower
        .propose_or_forward(Command::UpdateNodeStatus {
            id: "nowhere".into(),
            status: schedstate::model::NodeStatus::Down,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ProposeError::RefusedRemotely { kind, .. } if kind == "NodeNotFound"),
        "{refused:?}"
    );
    for s in &servers {
        s.wait_applied(last, DEADLINE).await.unwrap();
    }
    // A follower's read index, asked of the leader over TCP, covers every write.
    assert!(follower.read_index(DEADLINE).await.unwrap() >= last);

    // The leader stops: endpoint closed, Raft stopped.
    let li = (leader - 1) as usize;
    endpoints[li].take().unwrap().stop();
    servers[li].shutdown().await;
    let rest: Vec<Server> = servers
        .iter()
        .filter(|s| s.id() != leader)
        .cloned()
        .collect();
    let start = std::time::Instant::now();
    let new_leader = loop {
        if let Some(l) = rest[0].leader().filter(|l| *l != leader) {
            break l;
        }
        assert!(start.elapsed() < DEADLINE, "no new leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let new = rest.iter().find(|s| s.id() == new_leader).unwrap();
    let c = loop {
        match new
            .propose(Command::UpsertNodes {
                nodes: vec![marker_node("after", 0)],
            })
            .await
        {
            Ok(c) => break c,
            Err(e) => {
                assert!(start.elapsed() < DEADLINE, "no write after failover: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    for s in &rest {
        s.wait_applied(c.index, DEADLINE).await.unwrap();
        let snap = s.read_stale();
        for seq in 0..200 {
            assert!(snap.view().node(&format!("tcp-{seq}")).is_some());
        }
        assert_eq!(
            snap.canonical_bytes().unwrap(),
            rest[0].read_stale().canonical_bytes().unwrap()
        );
    }
    for s in &rest {
        s.shutdown().await;
    }
}
