//! A rolling upgrade over TCP: a server limited to the previous release's format (2)
//! keeps up with newer servers, leading or following, by entries and by snapshot;
//! format-3 commands stay refused, nothing changing, until it is upgraded; then the
//! cluster's format is raised on its own and they are taken.

use std::time::{Duration, Instant};

use openraft::SnapshotPolicy;
use schedstate::model::{AclScope, AclToken, Job, JobDefinition};
use schedstate::state::Command;
use schedstate_raft::{
    FORMAT_NOT_ENABLED, ProposeError, Server, ServerOptions, TcpEndpoint, TcpNetwork,
};
use tokio::net::TcpListener;

use crate::support::{DEADLINE, marker_node};

struct TcpCluster {
    root: tempfile::TempDir,
    addrs: Vec<String>,
    servers: Vec<Option<(Server, TcpEndpoint)>>,
}

fn options(max_format: u32) -> ServerOptions {
    let mut o = ServerOptions {
        max_format,
        ..ServerOptions::default()
    };
    // Snapshots often and few entries kept, so a restarted server catches up by one.
    o.raft.snapshot_policy = SnapshotPolicy::LogsSinceLast(40);
    o.raft.max_in_snapshot_log_to_keep = 0;
    o
}

impl TcpCluster {
    async fn start(formats: [u32; 3]) -> TcpCluster {
        let mut listeners = Vec::new();
        for _ in 0..3 {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addrs = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        let mut cluster = TcpCluster {
            root: tempfile::tempdir().unwrap(),
            addrs,
            servers: vec![None, None, None],
        };
        for (i, listener) in listeners.into_iter().enumerate() {
            cluster.open_on(i as u64 + 1, listener, formats[i]).await;
        }
        let members: Vec<(u64, String)> = cluster
            .addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (i as u64 + 1, a.clone()))
            .collect();
        cluster.server(1).initialize(members).await.unwrap();
        for s in cluster.live() {
            s.wait_for_leader(DEADLINE).await.unwrap();
        }
        cluster
    }

    async fn open_on(&mut self, id: u64, listener: TcpListener, max_format: u32) {
        let dir = self.root.path().join(format!("s{id}"));
        let server = Server::open(id, &dir, options(max_format), TcpNetwork::new())
            .await
            .unwrap();
        let endpoint = TcpEndpoint::serve(listener, server.clone()).unwrap();
        self.servers[id as usize - 1] = Some((server, endpoint));
    }

    /// Starts server `id` again on its directory and address, reading formats up
    /// to `max_format` (an upgrade when it grows).
    async fn reopen(&mut self, id: u64, max_format: u32) {
        let addr = self.addrs[id as usize - 1].clone();
        let start = Instant::now();
        let listener = loop {
            match TcpListener::bind(&addr).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(start.elapsed() < DEADLINE, "cannot bind {addr} again: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        self.open_on(id, listener, max_format).await;
    }

    async fn stop(&mut self, id: u64) {
        let (server, endpoint) = self.servers[id as usize - 1].take().unwrap();
        endpoint.stop();
        server.shutdown().await;
    }

    /// The cluster's format `inspect_dir` reads in server `id`'s directory.
    fn inspected_format(&self, id: u64) -> u32 {
        let dir = self.root.path().join(format!("s{id}"));
        schedstate_raft::inspect_dir(&dir)
            .unwrap()
            .state
            .cluster_format
    }

    fn server(&self, id: u64) -> Server {
        self.servers[id as usize - 1].as_ref().unwrap().0.clone()
    }

    fn live(&self) -> Vec<Server> {
        self.servers
            .iter()
            .flatten()
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// A write through any live server, asked again while the cluster elects.
    async fn write(&self, command: Command) -> Result<u64, ProposeError> {
        let start = Instant::now();
        loop {
            match self.live()[0].propose_or_forward(command.clone()).await {
                Ok(c) => return Ok(c.index),
                Err(ProposeError::NotLeader { .. } | ProposeError::Unavailable(_))
                    if start.elapsed() < DEADLINE =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every live server applied `index` and holds the same state; returns it.
    async fn converged(&self, index: u64) -> Vec<u8> {
        let live = self.live();
        for s in &live {
            s.wait_applied(index, DEADLINE).await.unwrap();
        }
        let first = live[0].read_stale().canonical_bytes().unwrap();
        for s in &live[1..] {
            assert_eq!(
                s.read_stale().canonical_bytes().unwrap(),
                first,
                "server {} differs",
                s.id()
            );
        }
        first
    }

    async fn shutdown(mut self) {
        for id in 1..=3 {
            if self.servers[id as usize - 1].is_some() {
                self.stop(id).await;
            }
        }
    }
}

fn job_with_definition(name: &str) -> Command {
    Command::UpsertJobs {
        jobs: vec![Job {
            definition: Some(JobDefinition::new(r#"{"Driver":"docker"}"#)),
            ..Job::new("default", name)
        }],
    }
}

fn nodes(from: u64, n: u64) -> Command {
    Command::UpsertNodes {
        nodes: (from..from + n).map(|i| marker_node("up", i)).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_the_previous_format_keeps_up_and_holds_format_3_back_until_upgraded() {
    // Server 3 acts as the previous release: it reads format 2 only.
    let mut cluster = TcpCluster::start([3, 3, 2]).await;
    let mut last = 0;
    for round in 0..20 {
        last = cluster.write(nodes(round * 5, 5)).await.unwrap();
    }
    // A job without a definition and an unsalted bootstrap fit format 2.
    cluster
        .write(Command::UpsertJobs {
            jobs: vec![Job::new("default", "plain")],
        })
        .await
        .unwrap();
    let token = AclToken::new(
        "accessor-1",
        "boot",
        vec![AclScope::Management],
        schedstate::model::unsalted_digest("secret-1"),
    );
    last = last.max(
        cluster
            .write(Command::AclBootstrap {
                token: token.clone(),
                salt: None,
            })
            .await
            .unwrap(),
    );
    let before = cluster.converged(last).await;

    // Format-3 commands are refused before they are proposed, naming server 3.
    let salted = Command::SetAclSalt {
        salt: schedstate::model::AclSalt([9; 32]),
    };
    for command in [job_with_definition("web"), salted.clone()] {
        let refused = cluster.write(command).await.unwrap_err();
        match &refused {
            ProposeError::Invalid { kind, message } => {
                assert_eq!(kind, FORMAT_NOT_ENABLED);
                assert!(message.contains("server 3"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        cluster.converged(last).await,
        before,
        "a refusal changed nothing"
    );
    for s in cluster.live() {
        assert_eq!(s.cluster_format(), 2, "server {}", s.id());
        assert_eq!(cluster.inspected_format(s.id()), 2);
    }

    // Server 3 leads: its entries reach the newer servers.
    let start = Instant::now();
    loop {
        let leader = cluster.live()[0].wait_for_leader(DEADLINE).await.unwrap();
        if leader == 3 {
            break;
        }
        // A transfer asked right after an election may be refused: ask again.
        if let Err(e) = cluster.server(leader).transfer_leadership(Some(3)).await {
            assert!(start.elapsed() < DEADLINE, "no transfer to server 3: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for round in 20..30 {
        last = cluster.write(nodes(round * 5, 5)).await.unwrap();
    }
    cluster.converged(last).await;
    // A newer server stays down while the log moves on: it catches up by a snapshot
    // the old-format leader built; then server 3 stays down while a newer server
    // leads, and comes back by a snapshot in format 2.
    cluster.stop(1).await;
    for round in 30..130 {
        cluster.write(nodes(round, 1)).await.unwrap();
    }
    cluster.reopen(1, 3).await;
    last = cluster.write(nodes(1_000, 1)).await.unwrap();
    cluster.converged(last).await;
    assert!(
        cluster.server(1).snapshots_installed() >= 1,
        "server 1 caught up by snapshot"
    );
    // Server 3 stays down while a newer server leads, and catches up by a snapshot
    // that server built in format 2.
    cluster.stop(3).await;
    for round in 130..230 {
        cluster.write(nodes(round, 1)).await.unwrap();
    }
    cluster.reopen(3, 2).await;
    last = cluster.write(nodes(1_001, 1)).await.unwrap();
    cluster.converged(last).await;
    assert!(
        cluster.server(3).snapshots_installed() >= 1,
        "server 3 caught up by snapshot"
    );

    // The upgrade: server 3 restarts reading format 3. The leader raises the
    // cluster's format on its own, and format-3 commands are taken.
    cluster.stop(3).await;
    cluster.reopen(3, 3).await;
    let start = Instant::now();
    while cluster.live().iter().any(|s| s.cluster_format() < 3) {
        assert!(
            start.elapsed() < DEADLINE,
            "the cluster's format was not raised"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.write(job_with_definition("web")).await.unwrap();
    last = cluster.write(salted).await.unwrap();
    cluster.converged(last).await;
    let snap = cluster.live()[0].read_stale();
    assert!(snap.view().acl_salt().is_some());
    assert!(
        snap.view()
            .job("default", "web")
            .unwrap()
            .definition
            .is_some()
    );

    // The leader stops: the others elect, keep format 3 and every write.
    let leader = cluster.live()[0].wait_for_leader(DEADLINE).await.unwrap();
    cluster.stop(leader).await;
    last = cluster.write(nodes(2_000, 1)).await.unwrap();
    cluster.converged(last).await;
    for s in cluster.live() {
        assert_eq!(s.cluster_format(), 3);
        // What `schedstate inspect` says of its directory, read while it runs.
        assert_eq!(cluster.inspected_format(s.id()), 3);
        let snap = s.read_stale();
        for i in 0..230 {
            assert!(snap.view().node(&format!("up-{i}")).is_some(), "up-{i}");
        }
    }
    cluster.shutdown().await;
}
