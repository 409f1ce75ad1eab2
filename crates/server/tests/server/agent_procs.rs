//! Agent processes on loopback for the cluster tests: `schedstate agent` spawned on
//! free ports, each with its own data directory and log file, killed (SIGKILL) when
//! dropped so a failing test never leaves one behind.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use schedstate_agent::certs::{Ca, CertKind, write_pem_files};
use schedstate_agent::{Client, ClientTls};

/// Every wait in the process tests: generous, for a loaded machine.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// Free loopback ports (bound, then released for the agents to take).
pub fn free_ports(n: usize) -> Vec<u16> {
    schedstate_agent::free_loopback_ports(n).expect("free loopback ports")
}

/// One agent process; SIGKILLed and reaped when dropped.
pub struct AgentProc(pub Child);

impl AgentProc {
    /// Kills it with SIGKILL (nothing is flushed or closed) and reaps it.
    pub fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl AgentProc {
    /// Sends SIGTERM and waits (up to [`DEADLINE`]) for the process to exit; returns
    /// its exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let pid = Pid::from_raw(i32::try_from(self.0.id()).expect("a pid fits i32"));
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                return status;
            }
            assert!(start.elapsed() < DEADLINE, "the agent ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cluster of agent processes.
pub struct ProcCluster {
    pub root: tempfile::TempDir,
    pub ports: Vec<u16>,
    pub procs: Vec<Option<AgentProc>>,
    pub token: Option<String>,
    /// With TLS: the CA that signed the agents' certificates.
    pub ca: Option<Ca>,
}

impl ProcCluster {
    /// Starts `n` agents (ids 1..=n) and waits until they agree on a leader.
    pub async fn start(n: usize, token: Option<&str>) -> ProcCluster {
        ProcCluster::start_with(n, token, false).await
    }

    /// Starts `n` agents with TLS (a CA and a server certificate each, mutual TLS
    /// between them) besides the cluster key.
    pub async fn start_tls(n: usize, token: Option<&str>) -> ProcCluster {
        ProcCluster::start_with(n, token, true).await
    }

    async fn start_with(n: usize, token: Option<&str>, tls: bool) -> ProcCluster {
        let mut c = ProcCluster::prepare(n, token, tls);
        for i in 0..n {
            c.restart(i);
        }
        let leader = c.wait_leader().await;
        if let Some(secret) = &c.token {
            c.client(leader)
                .acl_bootstrap(Some(secret))
                .await
                .unwrap_or_else(|e| panic!("ACL bootstrap: {e}\n{}", c.logs()));
        }
        c
    }

    /// Everything `n` agents need (ports, the cluster key, with TLS the CA and
    /// certificates), none of them started: [`restart`](Self::restart) starts agent
    /// `i`, on a data directory prepared meanwhile if wanted.
    pub fn prepare(n: usize, token: Option<&str>, tls: bool) -> ProcCluster {
        let mut c = ProcCluster {
            root: tempfile::Builder::new()
                .prefix("schedstate-agents-")
                .tempdir()
                .expect("temp dir"),
            ports: free_ports(n),
            procs: (0..n).map(|_| None).collect(),
            token: token.map(str::to_string),
            ca: None,
        };
        if tls {
            let ca = Ca::create("test CA", 2).expect("CA");
            write_pem_files(c.root.path(), "ca", &ca).expect("CA files");
            for i in 0..n {
                c.issue_server_cert(&ca, i);
            }
            c.ca = Some(ca);
        }
        schedstate_agent::ClusterKey::write_new(&c.key_file()).expect("cluster key");
        c
    }

    /// Agent `i`'s certificate and key files.
    pub fn cert_files(&self, i: usize) -> (PathBuf, PathBuf) {
        let d = self.root.path();
        (
            d.join(format!("server-{i}.pem")),
            d.join(format!("server-{i}-key.pem")),
        )
    }

    /// Writes a new server certificate for agent `i` in place of its files (each
    /// replaced by a rename, so a reader never sees half a file); returns its PEM.
    pub fn issue_server_cert(&self, ca: &Ca, i: usize) -> String {
        let kind = CertKind::Server {
            region: "global".into(),
        };
        let cert = ca.issue(&kind, &[], &[], 2).expect("server cert");
        let staging = self.root.path().join(format!("staging-{i}"));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir(&staging).expect("staging dir");
        let (c, k) = write_pem_files(&staging, "s", &cert).expect("files");
        let (cert_file, key_file) = self.cert_files(i);
        std::fs::rename(k, key_file).expect("key in place");
        std::fs::rename(c, cert_file).expect("cert in place");
        cert.cert_pem.clone()
    }

    /// Sends SIGHUP to agent `i` (reload its TLS files).
    pub fn hangup(&self, i: usize) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let p = self.procs[i].as_ref().expect("running");
        let pid = Pid::from_raw(i32::try_from(p.0.id()).expect("a pid fits i32"));
        kill(pid, Signal::SIGHUP).expect("SIGHUP");
    }

    /// What a client trusts: the cluster's CA.
    pub fn client_tls(&self) -> Option<ClientTls> {
        self.ca.as_ref().map(|_| ClientTls {
            ca_cert: Some(self.root.path().join("ca.pem")),
            client_cert: None,
        })
    }

    /// The cluster key file every agent is given.
    pub fn key_file(&self) -> PathBuf {
        self.root.path().join("cluster.key")
    }

    pub fn peers(&self) -> String {
        let list: Vec<String> = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1))
            .collect();
        list.join(",")
    }

    pub fn data(&self, i: usize) -> PathBuf {
        self.root.path().join(format!("agent-{}", i + 1))
    }

    fn log(&self, i: usize) -> PathBuf {
        self.root.path().join(format!("agent-{}.log", i + 1))
    }

    /// Spawns agent `i` (its id is `i + 1`), appending to its log file.
    pub fn spawn(&self, i: usize) -> AgentProc {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log(i))
            .expect("log file");
        let mut cmd = Command::new(crate::BIN);
        cmd.args(["agent", "--id", &(i + 1).to_string()])
            .args(["--bind", &format!("127.0.0.1:{}", self.ports[i])])
            .arg("--data")
            .arg(self.data(i))
            .args(["--peers", &self.peers()])
            .arg("--cluster-key-file")
            .arg(self.key_file())
            .env_remove("SCHEDSTATE_TOKEN")
            .env_remove("SCHEDSTATE_CLUSTER_KEY_FILE")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        // Without a token the cluster runs --dev (ACL off); with one, ACL is on and
        // the token is its bootstrap secret.
        if self.token.is_none() {
            cmd.arg("--dev");
        }
        if self.ca.is_some() {
            let (cert, key) = self.cert_files(i);
            cmd.arg("--tls-cert")
                .arg(cert)
                .arg("--tls-key")
                .arg(key)
                .arg("--tls-ca")
                .arg(self.root.path().join("ca.pem"));
        }
        AgentProc(cmd.spawn().expect("spawn schedstate agent"))
    }

    /// Restarts agent `i` on its data directory.
    pub fn restart(&mut self, i: usize) {
        let p = self.spawn(i);
        self.procs[i] = Some(p);
    }

    /// Stops agent `i` with SIGTERM; returns its exit status.
    pub fn terminate(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        self.procs[i].take().map(AgentProc::terminate)
    }

    /// SIGKILLs agent `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(p) = self.procs[i].take() {
            p.kill();
        }
    }

    pub fn address(&self, i: usize) -> String {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.ports[i])
    }

    pub fn client(&self, i: usize) -> Client {
        Client::with_tls(
            &self.address(i),
            self.token.clone(),
            self.client_tls().as_ref(),
        )
        .expect("client")
    }

    pub fn running(&self) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|i| self.procs[*i].is_some())
            .collect()
    }

    /// Every agent's log, for a failure message.
    pub fn logs(&self) -> String {
        (0..self.ports.len())
            .map(|i| {
                let text = std::fs::read_to_string(self.log(i)).unwrap_or_default();
                format!("--- agent {} ---\n{text}", i + 1)
            })
            .collect()
    }

    /// Waits until every running agent names the same leader, one of them; returns
    /// its position.
    pub async fn wait_leader(&self) -> usize {
        let start = Instant::now();
        loop {
            let mut seen = Vec::new();
            for i in self.running() {
                seen.push(self.client(i).leader().await.ok().flatten());
            }
            if let Some(Some(first)) = seen.first()
                && seen.iter().all(|s| s.as_ref() == Some(first))
                && let Some(i) = self
                    .ports
                    .iter()
                    .position(|p| first.ends_with(&format!(":{p}")))
                && self.procs[i].is_some()
            {
                return i;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no agreed leader ({seen:?})\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
