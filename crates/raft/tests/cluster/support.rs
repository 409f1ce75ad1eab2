//! A cluster of in-process servers on a router, and clients that retry the way a
//! careful client must: after an error whose outcome is unknown, look before retrying.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use schedstate::model::{CsiInfo, CsiNodeInfo, Node};
use schedstate::state::Command;
use schedstate_raft::{NodeId, ProposeError, Router, Server, ServerOptions};

/// Generous: CI machines are small and shared. Timing is for liveness only.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct Cluster {
    pub router: Router,
    pub root: tempfile::TempDir,
    pub options: ServerOptions,
    pub servers: Mutex<BTreeMap<NodeId, Server>>,
}

impl Cluster {
    pub async fn start(n: u64, options: ServerOptions) -> Cluster {
        let cluster = Cluster {
            router: Router::new(),
            root: tempfile::tempdir().unwrap(),
            options,
            servers: Mutex::new(BTreeMap::new()),
        };
        for id in 1..=n {
            cluster.open(id).await;
        }
        let first = cluster.server(1);
        first
            .initialize((1..=n).map(|id| (id, format!("server-{id}"))))
            .await
            .unwrap();
        cluster.wait_leader(&[]).await;
        cluster
    }

    pub fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("s{id}"))
    }

    /// Opens server `id` on its directory and connects it.
    pub async fn open(&self, id: NodeId) -> Server {
        let server = Server::open(
            id,
            &self.dir(id),
            self.options.clone(),
            self.router.network(id),
        )
        .await
        .unwrap();
        self.router.add(server.clone());
        self.servers.lock().insert(id, server.clone());
        server
    }

    /// A follower of `leader`, and the ids of every other server (the leader's side
    /// of a partition that leaves the follower behind).
    pub fn a_follower_and_the_others(&self, leader: &Server) -> (Server, Vec<NodeId>) {
        let live = self.live();
        let follower = live
            .iter()
            .find(|s| s.id() != leader.id())
            .expect("a follower")
            .clone();
        let others = live
            .iter()
            .map(|s| s.id())
            .filter(|id| *id != follower.id())
            .collect();
        (follower, others)
    }

    pub fn server(&self, id: NodeId) -> Server {
        self.servers.lock()[&id].clone()
    }

    pub fn live(&self) -> Vec<Server> {
        self.servers.lock().values().cloned().collect()
    }

    /// Crashes server `id`: unreachable at once, Raft stopped, files left as they are
    /// (nothing is written at a stop; every acknowledged entry was fsynced already).
    pub async fn crash(&self, id: NodeId) {
        self.router.remove(id);
        let server = self.servers.lock().remove(&id);
        if let Some(s) = server {
            s.shutdown().await;
        }
    }

    /// Stops every live server.
    pub async fn shutdown(&self) {
        for s in self.live() {
            s.shutdown().await;
        }
    }

    /// Waits until a live server other than `not` is leader, as all live servers
    /// outside `not` agree; returns it.
    pub async fn wait_leader(&self, not: &[NodeId]) -> Server {
        let start = Instant::now();
        loop {
            let live = self.live();
            for s in &live {
                if !not.contains(&s.id()) && s.is_leader() && self.router.connected(s.id(), s.id())
                {
                    let votes = live
                        .iter()
                        .filter(|o| {
                            o.leader() == Some(s.id()) && self.router.connected(s.id(), o.id())
                        })
                        .count();
                    if votes * 2 > live.len().max(3) {
                        return s.clone();
                    }
                }
            }
            assert!(start.elapsed() < DEADLINE, "no leader within {DEADLINE:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until every live server applied `index`.
    pub async fn wait_all_applied(&self, index: u64) {
        for s in self.live() {
            s.wait_applied(index, DEADLINE).await.unwrap_or_else(|e| {
                panic!(
                    "server {} did not apply {index}: {e} (at {})",
                    s.id(),
                    s.last_applied()
                )
            });
        }
    }

    /// Waits until every live server applied the leader's last index and checks that
    /// their states are byte for byte the same and keep every invariant.
    pub async fn converge(&self) -> Vec<u8> {
        let leader = self.wait_leader(&[]).await;
        // A write through the leader commits everything before it in this term.
        let barrier = propose_until_known(self, &marker_node("barrier", fastrand::u64(..))).await;
        let index = barrier.max(leader.last_applied());
        self.wait_all_applied(index).await;
        let mut bytes: Option<(NodeId, Vec<u8>)> = None;
        for s in self.live() {
            let snap = s.read_stale();
            snap.view().check_invariants().unwrap();
            let b = snap.canonical_bytes().unwrap();
            match &bytes {
                None => bytes = Some((s.id(), b)),
                Some((id, first)) => assert!(
                    *first == b,
                    "server {} and server {id} differ after applying {index}",
                    s.id()
                ),
            }
        }
        bytes.unwrap().1
    }
}

/// A node whose id is the marker of one client command; it carries a CSI node
/// fingerprint so that every write also derives a plugin.
pub fn marker_node(client: &str, seq: u64) -> Node {
    let id = format!("{client}-{seq}");
    let mut node = Node::new(id.clone(), format!("host-{id}"));
    node.add_csi_plugin(CsiInfo::node_instance(
        format!("plugin-{}", seq % 4),
        format!("alloc-{id}"),
        CsiNodeInfo::default(),
    ));
    node
}

/// Writes `node` through whichever server answers, until it is known to be in the
/// state: retries after errors, looking first when the outcome is unknown. Returns
/// the index it committed at (or, if a lost answer hid it, the index it was found at).
pub async fn propose_until_known(cluster: &Cluster, node: &Node) -> u64 {
    let start = Instant::now();
    loop {
        if start.elapsed() > DEADLINE {
            for s in cluster.live() {
                eprintln!("server {}: {:?}", s.id(), s.raft().metrics().borrow());
            }
            panic!("write of {} did not commit", node.id);
        }
        // Mostly the leader a majority follows (as a client that remembers where its
        // last write went); sometimes any server, which forwards.
        let via = if fastrand::u8(0..4) == 0 {
            let live = cluster.live();
            let Some(any) = live.get(fastrand::usize(..live.len().max(1))).cloned() else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            any
        } else {
            cluster.wait_leader(&[]).await
        };
        let command = Command::UpsertNodes {
            nodes: vec![node.clone()],
        };
        let attempt =
            tokio::time::timeout(Duration::from_secs(1), via.propose_or_forward(command)).await;
        match attempt {
            Ok(Ok(committed)) => return committed.index,
            Ok(Err(e @ (ProposeError::Refused { .. } | ProposeError::RefusedRemotely { .. }))) => {
                panic!("a valid command was refused: {e}")
            }
            Ok(Err(_)) | Err(_) => {
                // Unknown outcome: look on the leader before writing again.
                tokio::time::sleep(Duration::from_millis(20)).await;
                if let Some(index) = find_committed(cluster, &node.id).await {
                    return index;
                }
            }
        }
    }
}

/// The modify index of node `id` on the leader, read linearizably, if it is there.
async fn find_committed(cluster: &Cluster, id: &str) -> Option<u64> {
    for _ in 0..50 {
        for s in cluster.live() {
            // A leader cut off from the others cannot confirm its leadership: bounded.
            let read = tokio::time::timeout(Duration::from_secs(1), s.read_consistent()).await;
            if let Ok(Ok(snap)) = read {
                return snap.view().node(id).map(|n| n.modify_index);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Acknowledged markers, shared by concurrent clients.
pub type Acked = Arc<Mutex<Vec<(String, u64)>>>;

/// Runs `clients` writers until `stop` says so (or each wrote `per_client`), recording
/// every acknowledged marker.
pub fn spawn_clients(
    cluster: &Arc<Cluster>,
    clients: usize,
    per_client: u64,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (Acked, Vec<tokio::task::JoinHandle<()>>) {
    let acked: Acked = Arc::default();
    let handles = (0..clients)
        .map(|c| {
            let cluster = cluster.clone();
            let acked = acked.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                for seq in 0..per_client {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let node = marker_node(&format!("c{c}"), seq);
                    let index = propose_until_known(&cluster, &node).await;
                    acked.lock().push((node.id.to_string(), index));
                }
            })
        })
        .collect();
    (acked, handles)
}

/// Checks that every acknowledged marker is in `server`'s state exactly once: present,
/// and written by one command only (created and last modified at the same index).
pub fn assert_applied_once(server: &Server, acked: &[(String, u64)]) {
    let snap = server.read_stale();
    let view = snap.view();
    for (id, _) in acked {
        let node = view
            .node(id)
            .unwrap_or_else(|| panic!("server {}: acknowledged {id} is missing", server.id()));
        assert_eq!(
            node.create_index,
            node.modify_index,
            "server {}: {id} was applied more than once",
            server.id()
        );
    }
}
