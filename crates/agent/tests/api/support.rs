//! Agents in this process on OS-picked loopback ports, and requests to them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use schedstate::model::{Allocation, ClientStatus, CsiInfo, CsiNodeInfo, DesiredStatus, Id, Node};
use schedstate_agent::certs::{Ca, CertKind, write_pem_files};
use schedstate_agent::tls::{TlsFiles, TlsOptions};
use schedstate_agent::{Agent, AgentConfig, Client, ClientTls, ClusterKey, Peers};
use tempfile::TempDir;

/// Every wait in these tests: generous, for a loaded machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Free loopback ports (bound, then released for the agents to take).
pub fn free_ports(n: usize) -> Vec<u16> {
    schedstate_agent::free_loopback_ports(n).expect("free loopback ports")
}

/// A plain HTTP client for raw requests. reqwest is built here without a TLS provider
/// of its own (the agent hands it rustls configs); a client made without one needs the
/// process-wide provider, installed once.
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The key of every test cluster.
pub fn cluster_key() -> ClusterKey {
    ClusterKey::from_bytes(*b"the test clusters' shared key, 32+ bytes").expect("a key")
}

/// A cluster of agents in this process, each on its own directory.
pub struct Agents {
    pub dir: TempDir,
    pub agents: Vec<Option<Agent>>,
    pub ports: Vec<u16>,
    pub token: Option<String>,
    /// With TLS, what the clients trust and present.
    pub client_tls: Option<ClientTls>,
}

impl Agents {
    /// Every port's agent, ids 1…n (agents not started yet included).
    pub fn peers(&self) -> Peers {
        let list: Vec<String> = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1))
            .collect();
        list.join(",").parse().expect("peers")
    }

    pub fn config(&self, i: usize) -> AgentConfig {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.ports[i])
            .parse()
            .expect("addr");
        let mut c = AgentConfig::new(
            i as u64 + 1,
            addr,
            self.dir.path().join(format!("a{}", i + 1)),
            self.peers(),
        );
        // ACL off (loopback only) unless the cluster is made with a token, which is
        // then its bootstrap secret.
        c.acl = self.token.is_some();
        c.cluster_key = Some(cluster_key());
        c.event_heartbeat = Duration::from_millis(200);
        c.event_buffer = 64;
        c
    }

    /// Starts `n` agents and waits for a leader; with a `token`, bootstraps ACL with it
    /// as the management token's secret (16+ characters).
    pub async fn start(n: usize, token: Option<&str>) -> Agents {
        Agents::start_with(n, token, |_| {}).await
    }

    /// Starts `n` agents, each configuration changed by `adjust`, and waits for a
    /// leader.
    pub async fn start_with(
        n: usize,
        token: Option<&str>,
        adjust: impl Fn(&mut AgentConfig),
    ) -> Agents {
        let mut a = Agents {
            dir: tempfile::tempdir().expect("tempdir"),
            agents: Vec::new(),
            ports: free_ports(n),
            token: token.map(str::to_string),
            client_tls: None,
        };
        // The clients speak what the agents serve.
        let mut probe = a.config(0);
        adjust(&mut probe);
        if let Some(t) = &probe.tls {
            a.client_tls = Some(ClientTls {
                ca_cert: t.files.ca.clone(),
                client_cert: None,
            });
        }
        for i in 0..n {
            let mut config = a.config(i);
            adjust(&mut config);
            let agent = Agent::start(config).await.expect("agent starts");
            a.agents.push(Some(agent));
        }
        let leader = a.wait_leader().await;
        if let Some(secret) = &a.token {
            let root = a
                .client(leader)
                .acl_bootstrap(Some(secret))
                .await
                .expect("ACL bootstrap");
            assert_eq!(root.secret_id.as_deref(), Some(secret.as_str()));
            a.wait_applied_everywhere().await;
        }
        a
    }

    pub fn client(&self, i: usize) -> Client {
        Client::with_tls(
            &self.url(i, ""),
            self.token.clone(),
            self.client_tls.as_ref(),
        )
        .expect("client")
    }

    pub fn url(&self, i: usize, path: &str) -> String {
        let scheme = if self.client_tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}{path}", self.ports[i])
    }

    /// Waits until every running agent applied what the leader applied.
    pub async fn wait_applied_everywhere(&self) {
        let leader = self.wait_leader().await;
        let index = self.agents[leader]
            .as_ref()
            .expect("leader")
            .server()
            .last_applied();
        for a in self.agents.iter().flatten() {
            a.server()
                .wait_applied(index, DEADLINE)
                .await
                .expect("applied everywhere");
        }
    }

    /// Waits until every running agent knows the same leader; returns its position.
    pub async fn wait_leader(&self) -> usize {
        let start = Instant::now();
        loop {
            let leaders: Vec<Option<u64>> = self
                .agents
                .iter()
                .flatten()
                .map(|a| a.server().leader())
                .collect();
            if let Some(Some(l)) = leaders.first()
                && leaders.iter().all(|x| *x == Some(*l))
                && self.agents[*l as usize - 1].is_some()
            {
                return *l as usize - 1;
            }
            assert!(start.elapsed() < DEADLINE, "no leader: {leaders:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn shutdown(mut self) {
        for a in self.agents.iter_mut() {
            if let Some(a) = a.take() {
                a.shutdown().await;
            }
        }
    }
}

/// A node with a node instance of `plugin` (and its alloc id).
pub fn node(id: &str, plugin: &str) -> Node {
    let mut n = Node::new(id, format!("host-{id}"));
    n.add_csi_plugin(
        CsiInfo::node_instance(plugin, format!("alloc-{id}"), CsiNodeInfo::default())
            .with_provider("ebs.csi.aws.com", "1.25.0"),
    );
    n
}

/// A running allocation on `node_id`.
pub fn alloc(id: &str, node_id: &str) -> Allocation {
    Allocation {
        id: Id::from(id),
        namespace: Id::from("default"),
        job_id: Id::from("job"),
        task_group: "group".into(),
        node_id: Id::from(node_id),
        desired_status: DesiredStatus::Run,
        client_status: ClientStatus::Running,
        ..Default::default()
    }
}

/// A private CA and certificates made for one test: a server certificate per agent,
/// a CLI user's, and a server certificate of another CA.
pub struct Pki {
    /// Holds the files.
    pub _dir: TempDir,
    pub ca: PathBuf,
    pub servers: Vec<(PathBuf, PathBuf)>,
    pub cli: (PathBuf, PathBuf),
    pub foreign_ca: PathBuf,
    pub foreign_server: (PathBuf, PathBuf),
}

impl Pki {
    pub fn new(servers: usize) -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let ca = Ca::create("test CA", 2).expect("CA");
        let (ca_cert, _) = write_pem_files(d, "ca", &ca).expect("CA files");
        let server = CertKind::Server {
            region: "global".into(),
        };
        let servers = (0..servers)
            .map(|i| {
                let c = ca.issue(&server, &[], &[], 2).expect("server cert");
                write_pem_files(d, &format!("server-{i}"), &c).expect("files")
            })
            .collect();
        let cli = write_pem_files(d, "cli", &ca.issue(&CertKind::Cli, &[], &[], 2).unwrap())
            .expect("files");
        let other = Ca::create("another CA", 2).expect("CA");
        let (foreign_ca, _) = write_pem_files(d, "foreign-ca", &other).expect("files");
        let foreign_server = write_pem_files(
            d,
            "foreign-server",
            &other.issue(&server, &[], &[], 2).unwrap(),
        )
        .expect("files");
        Pki {
            _dir: dir,
            ca: ca_cert,
            servers,
            cli,
            foreign_ca,
            foreign_server,
        }
    }

    /// Agent `id`'s TLS options (ids from 1).
    pub fn options(&self, id: u64) -> TlsOptions {
        let (cert, key) = self.servers[id as usize - 1].clone();
        TlsOptions::new(TlsFiles {
            cert,
            key,
            ca: Some(self.ca.clone()),
        })
    }

    /// A raw HTTPS client trusting `ca` and presenting `cert`.
    pub fn http(&self, ca: &Path, cert: Option<&(PathBuf, PathBuf)>) -> reqwest::Client {
        let config = schedstate_agent::tls::client_config(
            Some(ca),
            cert.map(|(c, k)| (c.as_path(), k.as_path())),
        )
        .expect("client config");
        reqwest::Client::builder()
            .tls_backend_preconfigured((*config).clone())
            .build()
            .expect("client")
    }
}
