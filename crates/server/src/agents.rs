//! The cluster demo's agents and its way of writing to them: `schedstate agent`
//! processes on loopback (their ports remembered in the data directory, since the
//! Raft membership holds the addresses), and [`Remote`], the simulation's backend over
//! HTTP with a copy of every acknowledged write.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use schedstate::state::{Command, StateSnapshot, StateStore};
use schedstate_agent::certs::{Ca, CertKind, write_pem_files};
use schedstate_agent::{Client, ClientTls};
use schedstate_cli::output::{CliError, err};
use schedstate_cli::sim::Backend;
use tokio::runtime::Runtime;

use crate::tls_cmd::CA_STEM;

/// Every wait on the cluster (a leader, a restart): generous for a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The ports tried first: Nomad's, so the README's curl lines work.
const PREFERRED: [u16; 3] = [4646, 4647, 4648];

/// `n` agents' ports: remembered from an earlier run in `dir`, else 4646… if free,
/// else free ones the OS picks.
pub fn ports(dir: &Path, n: usize) -> Result<Vec<u16>, CliError> {
    let file = dir.join("ports");
    if let Ok(text) = std::fs::read_to_string(&file) {
        let ports: Vec<u16> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| err(format!("{}: not a list of ports", file.display())))?;
        if ports.len() != n {
            return Err(err(format!(
                "{} was a cluster of {} agents; use --fresh to start one of {n}",
                dir.display(),
                ports.len()
            )));
        }
        return Ok(ports);
    }
    let preferred: Vec<u16> = (0..n).map(|i| 4646 + i as u16).collect();
    let free = |p: &u16| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok();
    let ports = if n <= PREFERRED.len() + 4 && preferred.iter().all(free) {
        preferred
    } else {
        schedstate_agent::free_loopback_ports(n).map_err(|e| err(format!("no free port: {e}")))?
    };
    // The cluster's directory holds its key and the agents' logs: owner only.
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let text: Vec<String> = ports.iter().map(u16::to_string).collect();
    std::fs::write(&file, text.join(" ") + "\n")
        .map_err(|e| err(format!("{}: {e}", file.display())))?;
    Ok(ports)
}

/// A throwaway CA and one server certificate per agent in `dir`, unless made already.
fn make_certificates(dir: &Path, agents: usize) -> Result<(), CliError> {
    if dir.join(format!("{CA_STEM}.pem")).exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let ca = Ca::create("schedstate demo CA", 30).map_err(|e| err(e.to_string()))?;
    let server = CertKind::Server {
        region: schedstate_agent::tls::DEFAULT_REGION.into(),
    };
    for i in 0..agents {
        let cert = ca
            .issue(&server, &[], &[], 30)
            .map_err(|e| err(e.to_string()))?;
        write_pem_files(dir, &format!("agent-{}", i + 1), &cert).map_err(|e| err(e.to_string()))?;
    }
    // The CA last: its presence says the set is complete.
    write_pem_files(dir, CA_STEM, &ca).map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// The agent processes of the demo. Dropping it kills the ones still running.
pub struct Agents {
    pub dir: PathBuf,
    pub ports: Vec<u16>,
    procs: Vec<Option<Child>>,
}

impl Agents {
    /// Starts one agent per port, logging to `dir/agent-N.log`, all with the cluster
    /// key in `dir/cluster.key` and TLS — a throwaway CA and a server certificate per
    /// agent in `dir/tls/` — made on the first run.
    pub fn start(dir: &Path, ports: Vec<u16>) -> Result<Agents, CliError> {
        let key = dir.join("cluster.key");
        if !key.exists() {
            schedstate_agent::ClusterKey::write_new(&key).map_err(|e| err(e.to_string()))?;
        }
        make_certificates(&dir.join("tls"), ports.len())?;
        let mut a = Agents {
            dir: dir.to_path_buf(),
            procs: ports.iter().map(|_| None).collect(),
            ports,
        };
        for i in 0..a.ports.len() {
            a.spawn(i)?;
        }
        Ok(a)
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
        self.dir.join(format!("agent-{}", i + 1))
    }

    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("agent-{}.log", i + 1))
    }

    pub fn address(&self, i: usize) -> String {
        format!("https://127.0.0.1:{}", self.ports[i])
    }

    /// The CA certificate clients trust.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("tls").join(format!("{CA_STEM}.pem"))
    }

    /// Agent `i`'s certificate and key.
    fn cert_files(&self, i: usize) -> (PathBuf, PathBuf) {
        let tls = self.dir.join("tls");
        (
            tls.join(format!("agent-{}.pem", i + 1)),
            tls.join(format!("agent-{}-key.pem", i + 1)),
        )
    }

    /// The cluster key file every agent is given.
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("cluster.key")
    }

    /// The command line that starts agent `i`.
    pub fn command_line(&self, program: &str, i: usize) -> String {
        let (cert, key) = self.cert_files(i);
        format!(
            "{program} agent --id {} --bind 127.0.0.1:{} --data {} --peers {} --cluster-key-file {} \\\n      --tls-cert {} --tls-key {} --tls-ca {}",
            i + 1,
            self.ports[i],
            self.data(i).display(),
            self.peers(),
            self.key_file().display(),
            cert.display(),
            key.display(),
            self.ca_cert().display()
        )
    }

    /// Starts agent `i` (again).
    pub fn spawn(&mut self, i: usize) -> Result<u32, CliError> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log(i))
            .map_err(|e| err(format!("{}: {e}", self.log(i).display())))?;
        let exe = std::env::current_exe().map_err(|e| err(format!("this program's path: {e}")))?;
        let child = Process::new(exe)
            .args(["agent", "--id", &(i + 1).to_string()])
            .args(["--bind", &format!("127.0.0.1:{}", self.ports[i])])
            .arg("--data")
            .arg(self.data(i))
            .args(["--peers", &self.peers()])
            .arg("--cluster-key-file")
            .arg(self.key_file())
            .arg("--tls-cert")
            .arg(self.cert_files(i).0)
            .arg("--tls-key")
            .arg(self.cert_files(i).1)
            .arg("--tls-ca")
            .arg(self.ca_cert())
            .env_remove("SCHEDSTATE_TOKEN")
            .env_remove("SCHEDSTATE_CLUSTER_KEY_FILE")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| err(format!("log file: {e}")))?)
            .stderr(log)
            .spawn()
            .map_err(|e| err(format!("starting agent {}: {e}", i + 1)))?;
        let pid = child.id();
        self.procs[i] = Some(child);
        Ok(pid)
    }

    /// SIGKILLs agent `i`: no shutdown, nothing flushed.
    pub fn kill(&mut self, i: usize) -> Option<u32> {
        let mut child = self.procs[i].take()?;
        let pid = child.id();
        let _ = child.kill();
        let _ = child.wait();
        Some(pid)
    }

    /// Stops every agent with SIGTERM (a clean shutdown), SIGKILL after 10 s.
    pub fn stop(&mut self) {
        for child in self.procs.iter().flatten() {
            terminate(child);
        }
        let start = Instant::now();
        for slot in &mut self.procs {
            if let Some(mut child) = slot.take() {
                while matches!(child.try_wait(), Ok(None))
                    && start.elapsed() < Duration::from_secs(10)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Asks `child` to stop (SIGTERM), without waiting for it.
#[cfg(unix)]
pub(crate) fn terminate(child: &Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
}

#[cfg(not(unix))]
pub(crate) fn terminate(_child: &Child) {}

impl Drop for Agents {
    fn drop(&mut self) {
        for child in self.procs.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The simulation's backend over HTTP: writes go to the leader (found again when it
/// stops answering); reads come from `mirror`, a store holding every acknowledged
/// write at the index the cluster gave it — the client's own record, which the demo
/// compares with the cluster after the leader is killed.
pub struct Remote {
    pub rt: Runtime,
    pub clients: Vec<Client>,
    pub leader: usize,
    pub mirror: StateStore,
    /// Writes acknowledged.
    pub acked: u64,
    /// When the leader stopped answering, until a write is acknowledged again.
    pub outage: Option<Instant>,
    /// How long the last outage lasted.
    pub last_outage: Option<Duration>,
    /// Writes answered from their `Idempotency-Key`: sent again after an unknown
    /// outcome, found applied, not applied twice.
    pub replayed: u64,
}

impl Remote {
    /// Connects to the agents at `addresses`, waits for a leader, and copies its state.
    /// The management token is read from `token_file`; on a new cluster the ACL is
    /// bootstrapped first and the token written there (mode 0600).
    pub fn connect(
        addresses: &[String],
        ca_cert: &Path,
        token_file: &Path,
    ) -> Result<Remote, CliError> {
        let tls = ClientTls {
            ca_cert: Some(ca_cert.to_path_buf()),
            client_cert: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(format!("runtime: {e}")))?;
        let clients = |token: Option<String>| {
            addresses
                .iter()
                .map(|a| Client::with_tls(a, token.clone(), Some(&tls)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(e.to_string()))
        };
        let mut r = Remote {
            rt,
            clients: clients(None)?,
            leader: 0,
            mirror: StateStore::new(),
            acked: 0,
            outage: None,
            last_outage: None,
            replayed: 0,
        };
        r.find_leader()?;
        let token = if token_file.exists() {
            schedstate_cli::connect::read_token_file(token_file)?
        } else {
            let start = Instant::now();
            let root = loop {
                match r.rt.block_on(r.clients[r.leader].acl_bootstrap(None)) {
                    Ok(root) => break root,
                    // An election under way: find the leader again.
                    Err(e) if e.status().is_none_or(|s| s >= 500) && start.elapsed() < PATIENCE => {
                        std::thread::sleep(Duration::from_millis(100));
                        r.find_leader()?;
                    }
                    Err(e) => {
                        return Err(err(format!(
                            "bootstrapping the ACL: {e} (the token file {} is missing; --fresh starts over)",
                            token_file.display()
                        )));
                    }
                }
            };
            let secret = root
                .secret_id
                .ok_or_else(|| err("the bootstrap answer carried no secret"))?;
            crate::acl_cmd::write_secret(token_file, &secret)?;
            secret
        };
        r.clients = clients(Some(token))?;
        r.resync()?;
        Ok(r)
    }

    /// Waits until an agent names a leader that answers; remembers it.
    pub fn find_leader(&mut self) -> Result<usize, CliError> {
        let start = Instant::now();
        loop {
            for c in &self.clients {
                let Ok(Some(addr)) = self.rt.block_on(c.leader()) else {
                    continue;
                };
                if let Some(i) = self
                    .clients
                    .iter()
                    .position(|c| c.address().ends_with(&addr))
                    && self.rt.block_on(self.clients[i].health()).is_ok()
                {
                    self.leader = i;
                    return Ok(i);
                }
            }
            if start.elapsed() > PATIENCE {
                return Err(err("no leader among the agents (see their logs)"));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Replaces the mirror by the leader's state (consistent read).
    pub fn resync(&mut self) -> Result<(), CliError> {
        let snap = self.leader_state()?;
        let mut bytes = Vec::new();
        snap.write_to(&mut bytes).map_err(|e| err(e.to_string()))?;
        self.mirror
            .restore_from(&mut bytes.as_slice())
            .map_err(|e| err(e.to_string()))?;
        Ok(())
    }

    /// The leader's whole state, read consistently.
    pub fn leader_state(&self) -> Result<StateSnapshot, CliError> {
        let c = &self.clients[self.leader];
        let snap = self
            .rt
            .block_on(c.snapshot(false))
            .map_err(|e| err(format!("snapshot from {}: {e}", c.address())))?;
        let store = StateStore::new();
        store
            .restore_from(&mut snap.value.as_slice())
            .map_err(|e| err(format!("snapshot from {}: {e}", c.address())))?;
        Ok(store.snapshot())
    }
}

impl Backend for Remote {
    fn snapshot(&self) -> StateSnapshot {
        self.mirror.snapshot()
    }

    fn apply(&mut self, _next: u64, command: Command) -> Result<u64, CliError> {
        let start = Instant::now();
        // One key for this write, whichever agent it goes to and however often: a
        // write whose answer was lost with a dead leader is answered, not applied
        // again, when it is sent once more.
        let key = schedstate_agent::new_write_key();
        loop {
            let c = &self.clients[self.leader];
            match self.rt.block_on(c.apply_keyed(&command, &key)) {
                Ok(written) => {
                    let (index, kind) = (written.index, command.kind());
                    self.mirror.apply_owned(index, command).map_err(|e| {
                        err(format!(
                            "the cluster applied {kind} at {index}, which the client's copy refuses: {e}"
                        ))
                    })?;
                    self.acked += 1;
                    if written.replayed {
                        self.replayed += 1;
                    }
                    if let Some(t) = self.outage.take() {
                        self.last_outage = Some(t.elapsed());
                    }
                    return Ok(index);
                }
                Err(e) if e.status() == Some(409) => {
                    return Err(err(format!(
                        "demo: {} refused by the cluster: {e}",
                        command.kind()
                    )));
                }
                Err(e) => {
                    if start.elapsed() > PATIENCE {
                        return Err(err(format!(
                            "demo: no write accepted for {PATIENCE:?}: {e}"
                        )));
                    }
                    self.outage.get_or_insert_with(Instant::now);
                    self.find_leader()?;
                }
            }
        }
    }
}
