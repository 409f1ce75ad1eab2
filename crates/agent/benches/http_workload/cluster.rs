//! The cluster: the `schedstate-server` binary, three agent processes on free loopback
//! ports, and what the phases ask of them (leader, memory, waiting queries).

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime};

use schedstate_agent::certs::{Ca, CertKind, write_pem_files};
use schedstate_agent::{Client, ClientTls};

use crate::report::Out;
use crate::system::proc_memory_kb;

/// The gauge of blocking queries waiting on an agent.
pub const WAITING: &str = "schedstate_blocking_queries_waiting";

/// The `schedstate-server` binary (the whole command line): `-bin`, `SCHEDSTATE_BIN`, or beside this benchmark's
/// directory (`target/release/deps/../schedstate-server`).
pub fn locate_binary(flag: Option<&Path>) -> PathBuf {
    let (path, from) = if let Some(p) = flag {
        (p.to_path_buf(), "-bin")
    } else if let Some(p) = std::env::var_os("SCHEDSTATE_BIN") {
        (PathBuf::from(p), "SCHEDSTATE_BIN")
    } else {
        let exe = std::env::current_exe().expect("the benchmark's own path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the benchmark runs from target/<profile>/deps");
        (dir.join("schedstate-server"), "beside the benchmark")
    };
    if !path.is_file() {
        eprintln!(
            "error: no schedstate-server binary at {} ({from}).\n\
             Build it first:  cargo build --release -p schedstate-server\n\
             or point to one:  -bin PATH  or  SCHEDSTATE_BIN=PATH",
            path.display()
        );
        std::process::exit(2);
    }
    path
}

/// The newest modification time of a file under `dir`.
fn newest_under(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(m) = e.metadata() else { continue };
        let t = if m.is_dir() {
            newest_under(&e.path())
        } else {
            m.modified().ok()
        };
        newest = newest.max(t);
    }
    newest
}

/// Warns when a source of the binary is newer than it (a stale build measures old
/// code).
pub fn warn_if_stale(bin: &Path, out: &Out) {
    let Ok(built) = bin.metadata().and_then(|m| m.modified()) else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let sources = [
        "src",
        "crates/engine/src",
        "crates/raft/src",
        "crates/agent/src",
        "crates/cli/src",
        "crates/server/src",
    ];
    let newer: Vec<&str> = sources
        .iter()
        .copied()
        .filter(|s| newest_under(&root.join(s)).is_some_and(|t| t > built))
        .collect();
    if !newer.is_empty() {
        out.line(format!(
            "# warning: {} is older than sources in {}: rebuild with `cargo build --release -p schedstate-server`",
            bin.display(),
            newer.join(", ")
        ));
    }
}

/// `n` ports free on loopback now (released again for the agents to bind).
fn free_ports(n: usize) -> Vec<u16> {
    schedstate_agent::free_loopback_ports(n).expect("free loopback ports")
}

/// The agents; every process is killed (SIGKILL) and reaped when this is dropped,
/// panics included. Each also gets SIGKILL if this process dies first.
/// How the agents are secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// What a deployment runs: TLS (mutual between servers), the cluster key, ACL.
    Tls,
    /// The cluster key and ACL, plain HTTP.
    Acl,
    /// `--dev`: the cluster key only; no ACL, plain HTTP.
    Dev,
}

impl Security {
    pub fn name(self) -> &'static str {
        match self {
            Security::Tls => "tls",
            Security::Acl => "acl",
            Security::Dev => "dev",
        }
    }
}

/// The management token's secret of the bench clusters.
const ROOT: &str = "root-secret-of-the-http-bench";

pub struct Cluster {
    pub root: tempfile::TempDir,
    security: Security,
    bin: PathBuf,
    peers: String,
    procs: Vec<Child>,
    pub addrs: Vec<String>,
    logs: Vec<PathBuf>,
    pub clients: Vec<Client>,
    /// The token the clients send (the management token once ACL is bootstrapped).
    token: Option<String>,
}

impl Cluster {
    /// Starts the three agents of `bin`, each with its own data directory and log.
    pub fn spawn(bin: &Path, security: Security) -> Cluster {
        let root = tempfile::Builder::new()
            .prefix("schedstate-httpbench-")
            .tempdir()
            .expect("a temp dir");
        let ports = free_ports(3);
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let peers: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect();
        let mut c = Cluster {
            root,
            security,
            bin: bin.to_path_buf(),
            peers: peers.join(","),
            procs: Vec::new(),
            addrs: addrs.clone(),
            logs: Vec::new(),
            clients: Vec::new(),
            token: None,
        };
        if security == Security::Tls {
            let ca = Ca::create("bench CA", 2).expect("CA");
            write_pem_files(c.root.path(), "ca", &ca).expect("CA files");
            let server = CertKind::Server {
                region: "global".into(),
            };
            for i in 0..3 {
                let cert = ca.issue(&server, &[], &[], 2).expect("certificate");
                write_pem_files(c.root.path(), &format!("server-{i}"), &cert).expect("files");
            }
        }
        c.clients = c.make_clients();
        schedstate_agent::ClusterKey::write_new(&c.root.path().join("cluster.key"))
            .expect("cluster key");
        for i in 0..addrs.len() {
            let log = c.root.path().join(format!("agent{}.log", i + 1));
            let child = c.spawn_agent(i, &log);
            c.procs.push(child);
            c.logs.push(log);
        }
        c
    }

    /// Agent `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.root.path().join(format!("agent{}", i + 1))
    }

    /// Starts agent `i` on its directory, appending to its log.
    fn spawn_agent(&self, i: usize, log: &Path) -> Child {
        let file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut cmd = std::process::Command::new(&self.bin);
        cmd.arg("agent")
            .args(["--id", &(i + 1).to_string()])
            .args(["--bind", &self.addrs[i]])
            .arg("--data")
            .arg(self.data_dir(i))
            .args(["--peers", &self.peers])
            .arg("--cluster-key-file")
            .arg(self.root.path().join("cluster.key"))
            // The waiters stand for client nodes, one token here for all of them
            // (each its own in Nomad): the per-client share is the whole limit.
            .args(["--max-blocking-queries-per-client", "16384"])
            .env_remove("SCHEDSTATE_TOKEN")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file);
        match self.security {
            Security::Dev => {
                cmd.arg("--dev");
            }
            Security::Acl => {}
            Security::Tls => {
                let d = self.root.path();
                cmd.arg("--tls-cert")
                    .arg(d.join(format!("server-{i}.pem")))
                    .arg("--tls-key")
                    .arg(d.join(format!("server-{i}-key.pem")))
                    .arg("--tls-ca")
                    .arg(d.join("ca.pem"));
            }
        }
        // SAFETY: the closure runs in the child between fork and exec and calls
        // only prctl, which is async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                // The agent dies with this process, even on SIGKILL of this one.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        cmd.spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()))
    }

    /// Stops agent `i`: SIGTERM and a wait for it to exit (`kill`: SIGKILL, as a
    /// crash).
    pub fn stop(&mut self, i: usize, kill: bool) {
        let p = &mut self.procs[i];
        if kill {
            let _ = p.kill();
        } else {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(p.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let _ = p.wait();
    }

    /// Starts agent `i` again (after [`stop`](Self::stop)), on the same directory.
    pub fn restart(&mut self, i: usize) {
        let child = self.spawn_agent(i, &self.logs[i].clone());
        self.procs[i] = child;
    }

    /// Clients of the three agents, with the cluster's token.
    fn make_clients(&self) -> Vec<Client> {
        self.addrs.iter().map(|a| self.client_at(a)).collect()
    }

    /// Whether the agents serve TLS.
    pub fn tls(&self) -> bool {
        self.security == Security::Tls
    }

    /// A client of `addr` (`host:port`) as the agents' clients are made: HTTPS
    /// checked against the cluster's CA when the agents serve TLS, the token the
    /// cluster's clients send.
    pub fn client_at(&self, addr: &str) -> Client {
        let tls = self.tls().then(|| ClientTls {
            ca_cert: Some(self.root.path().join("ca.pem")),
            client_cert: None,
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        Client::with_tls(
            &format!("{scheme}://{addr}"),
            self.token.clone(),
            tls.as_ref(),
        )
        .expect("client")
    }

    /// With ACL, bootstraps it through the leader and gives every client the
    /// management token.
    pub async fn bootstrap_acl(&mut self, leader: usize) {
        if self.security == Security::Dev {
            return;
        }
        self.clients[leader]
            .acl_bootstrap(Some(ROOT))
            .await
            .expect("ACL bootstrap");
        self.token = Some(ROOT.to_string());
        self.clients = self.make_clients();
    }

    /// The agents' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(Child::id).collect()
    }

    /// Panics when an agent has exited.
    pub fn check_alive(&mut self) {
        for (i, p) in self.procs.iter_mut().enumerate() {
            if let Ok(Some(status)) = p.try_wait() {
                panic!("agent {} exited: {status}", i + 1);
            }
        }
    }

    /// Waits until all three agents name the same leader; its position.
    pub async fn wait_leader(&mut self, deadline: Duration) -> usize {
        let start = Instant::now();
        loop {
            self.check_alive();
            let mut named = Vec::new();
            for c in &self.clients {
                named.push(c.leader().await.ok().flatten());
            }
            if let Some(Some(l)) = named.first()
                && named.iter().all(|n| n.as_deref() == Some(l.as_str()))
                && let Some(i) = self.addrs.iter().position(|a| a == l)
            {
                return i;
            }
            assert!(
                start.elapsed() < deadline,
                "no leader after {deadline:?}: the agents named {named:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// (VmRSS, VmHWM) in kB of each agent.
    pub fn memory(&self) -> Vec<(u64, u64)> {
        self.pids().into_iter().map(proc_memory_kb).collect()
    }

    /// `schedstate_blocking_queries_waiting` of each agent.
    pub async fn waiting(&self) -> Vec<Option<f64>> {
        let mut out = Vec::new();
        for c in &self.clients {
            let text = c.metrics().await.ok();
            out.push(text.and_then(|t| gauge(&t, WAITING)));
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
        if std::thread::panicking() {
            for (i, log) in self.logs.iter().enumerate() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("--- agent {} log, last lines ({}):", i + 1, log.display());
                for l in &lines[lines.len().saturating_sub(20)..] {
                    eprintln!("{l}");
                }
            }
        }
    }
}

/// A sample `name value` of Prometheus text.
pub fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok())?
    })
}
