//! A cluster of in-process agents whose Raft traffic goes through the fault proxy.
//!
//! Server `i` (position from 0, id `i + 1`) gets loopback address `127.B.C.(i+1)`,
//! with `B.C` unique to the cluster, so that clusters of concurrent tests never share
//! an address. The agent listens there on a private port (what the test's clients
//! dial: client traffic is never faulted) and dials its peers from there; the
//! membership names the proxy's port for it on the same address.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use schedstate_agent::{Agent, AgentConfig, AgentError, ClusterKey, Peers};
use tempfile::TempDir;

use crate::proxy::Proxy;

/// How long setup and convergence waits may take on a loaded machine.
pub const SETTLE: Duration = Duration::from_secs(60);

/// A cluster under a nemesis.
pub struct Cluster {
    pub dir: TempDir,
    pub proxy: Proxy,
    /// Running agents by position (`None`: stopped or not started).
    pub agents: Vec<Option<Agent>>,
    /// Where each agent listens (clients dial this).
    pub private: Vec<SocketAddr>,
    /// Where its peers dial it (the proxy).
    pub public: Vec<SocketAddr>,
}

/// A `127.B.C` prefix no other cluster of this process uses (and, through the pid,
/// probably none of another test process).
fn new_prefix() -> (u8, u8) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let b = 20 + (std::process::id() % 200) as u8;
    (b, (n % 250) as u8 + 1)
}

/// A port free on `ip` now (bound, then released for the agent to take).
fn free_port(ip: IpAddr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Cluster {
    /// Prepares `capacity` servers (addresses, proxy ports) and starts the first
    /// `voters`, which form the cluster; waits for a leader.
    pub async fn start(capacity: usize, voters: usize) -> Cluster {
        let prefix = new_prefix();
        let mut proxy = Proxy::new();
        let mut private = Vec::new();
        let mut public = Vec::new();
        for i in 0..capacity {
            let ip: IpAddr = format!("127.{}.{}.{}", prefix.0, prefix.1, i + 1)
                .parse()
                .expect("ip");
            let addr = SocketAddr::new(ip, free_port(ip));
            public.push(proxy.add_server(i, ip, addr).await);
            private.push(addr);
        }
        let mut c = Cluster {
            dir: tempfile::tempdir().expect("tempdir"),
            proxy,
            agents: (0..capacity).map(|_| None).collect(),
            private,
            public,
        };
        for i in 0..voters {
            c.start_agent(i, voters).await;
        }
        c.wait_leader(&(0..voters).collect::<Vec<_>>()).await;
        c
    }

    /// The peers list of the first `n` servers (their proxy addresses).
    fn peers(&self, n: usize) -> Peers {
        let list: Vec<String> = (0..n)
            .map(|i| format!("{}={}", i + 1, self.public[i]))
            .collect();
        list.join(",").parse().expect("peers")
    }

    /// Starts agent `i` knowing the first `known` servers (itself among them). A
    /// fresh agent whose id is not the lowest waits to be added.
    pub async fn start_agent(&mut self, i: usize, known: usize) {
        let peers = self.peers(known.max(i + 1));
        let mut config = AgentConfig::new(
            i as u64 + 1,
            self.private[i],
            self.dir.path().join(format!("a{}", i + 1)),
            peers,
        );
        config.acl = false;
        config.cluster_key =
            Some(ClusterKey::from_bytes(*b"the nemesis clusters' shared key!!").expect("key"));
        config.event_buffer = 64;
        // The private port was free when picked; if something took it since, the
        // agent moves to another (its peers dial the proxy, which follows).
        for _ in 0..5 {
            match Agent::start(config.clone()).await {
                Ok(agent) => {
                    self.agents[i] = Some(agent);
                    return;
                }
                Err(AgentError::Bind { addr, source }) if source.kind() == ErrorKind::AddrInUse => {
                    eprintln!("nemesis: {addr} was taken; agent {} moves", i + 1);
                    let ip = self.private[i].ip();
                    self.private[i] = SocketAddr::new(ip, free_port(ip));
                    self.proxy.move_server(i, self.private[i]);
                    config.bind = self.private[i];
                }
                Err(e) => panic!("agent {} does not start: {e}", i + 1),
            }
        }
        panic!("agent {} found no free port", i + 1);
    }

    /// Stops agent `i` (its directory stays).
    pub async fn stop_agent(&mut self, i: usize) {
        if let Some(a) = self.agents[i].take() {
            a.shutdown().await;
        }
    }

    /// The base URL of agent `i` for clients.
    pub fn url(&self, i: usize) -> String {
        format!("http://{}", self.private[i])
    }

    /// Waits until the running agents among `among` agree on one leader among them;
    /// returns its position.
    pub async fn wait_leader(&self, among: &[usize]) -> usize {
        let start = Instant::now();
        loop {
            let leaders: Vec<Option<u64>> = among
                .iter()
                .filter_map(|&i| self.agents[i].as_ref())
                .map(|a| a.server().leader())
                .collect();
            if let Some(Some(l)) = leaders.first()
                && leaders.iter().all(|x| *x == Some(*l))
                && among.contains(&(*l as usize - 1))
            {
                return *l as usize - 1;
            }
            assert!(
                start.elapsed() < SETTLE,
                "no leader among {among:?}: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the agents of `among` agree on one running leader other than
    /// `old` (possibly a server outside `among`, such as one just added); returns
    /// its position.
    pub async fn wait_leader_other_than(&self, among: &[usize], old: usize) -> usize {
        let start = Instant::now();
        loop {
            let seen: Vec<Option<usize>> = among.iter().map(|&i| self.leader_seen_by(i)).collect();
            if let Some(Some(l)) = seen.first()
                && seen.iter().all(|x| *x == Some(*l))
                && *l != old
                && self.agents[*l].is_some()
            {
                return *l;
            }
            assert!(
                start.elapsed() < SETTLE,
                "no new leader among {among:?}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The Raft term server `i` is in (`None` if it is not running).
    pub fn term_seen_by(&self, i: usize) -> Option<u64> {
        Some(self.agents[i].as_ref()?.server().term())
    }

    /// The leader as server `i` sees it.
    pub fn leader_seen_by(&self, i: usize) -> Option<usize> {
        self.agents[i]
            .as_ref()?
            .server()
            .leader()
            .map(|l| l as usize - 1)
    }

    /// Waits until every agent of `members` applied what the leader applied.
    pub async fn wait_converged(&self, members: &[usize]) {
        let leader = self.wait_leader(members).await;
        let index = self.agents[leader]
            .as_ref()
            .expect("leader")
            .server()
            .last_applied();
        for &i in members {
            let a = self.agents[i].as_ref().expect("a running member");
            a.server()
                .wait_applied(index, SETTLE)
                .await
                .unwrap_or_else(|e| panic!("server {} never applied {index}: {e}", i + 1));
        }
    }

    /// Stops every agent and the proxy.
    pub async fn shutdown(mut self) {
        self.proxy.heal();
        for i in 0..self.agents.len() {
            self.stop_agent(i).await;
        }
    }
}
