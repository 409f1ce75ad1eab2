//! [`AgentConfig`]: what one agent needs to know — its id, its address, its data
//! directory, every server of the cluster — and the `--peers` syntax.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use schedstate_raft::ServerOptions;

use crate::cluster_key::ClusterKey;
use crate::tls::TlsOptions;

/// A bad `--peers` list or configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A `--peers` item is not `ID=HOST:PORT`.
    #[error("peer {item:?} is not ID=HOST:PORT: {reason}")]
    BadPeer {
        /// The item.
        item: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The same id twice.
    #[error("server id {0} is listed twice in the peers")]
    DuplicateId(u64),
    /// The agent's own id is not among the peers.
    #[error("server id {id} is not in the peers ({known})")]
    NotAPeer {
        /// The agent's id.
        id: u64,
        /// The ids listed.
        known: String,
    },
    /// Id 0 is not a server id.
    #[error("server ids start at 1")]
    ZeroId,
    /// Several servers and no way for them to know each other.
    #[error(
        "a cluster of {servers} servers needs a cluster key (--cluster-key-file; schedstate keygen \
         makes one) or TLS with a CA (--tls-ca: servers prove themselves by certificate) so that \
         only its servers can send Raft RPCs; --dev runs without either on loopback"
    )]
    NoClusterKey {
        /// How many servers the peers list.
        servers: usize,
    },
    /// `--dev` on an address other machines can reach.
    #[error("--dev is insecure and serves loopback only; {0} is not a loopback address")]
    DevNotLoopback(SocketAddr),
    /// ACL off on an address other machines can reach.
    #[error("ACL is off only on loopback (--dev); {0} is not a loopback address")]
    AclOffNotLoopback(SocketAddr),
    /// A limit of zero would refuse everything.
    #[error("the limit {0} must be above zero")]
    ZeroLimit(&'static str),
}

/// The servers of a cluster: id → address (`host:port`, API and Raft on one port).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Peers(pub BTreeMap<u64, String>);

impl FromStr for Peers {
    type Err = ConfigError;

    /// `1=127.0.0.1:4646,2=127.0.0.1:4647,3=127.0.0.1:4648`.
    ///
    /// ```
    /// use schedstate_agent::Peers;
    /// let peers: Peers = "1=127.0.0.1:4646,2=127.0.0.1:4647".parse().unwrap();
    /// assert_eq!(peers.0[&2], "127.0.0.1:4647");
    /// assert!("1=127.0.0.1:4646,1=127.0.0.1:4647".parse::<Peers>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut peers = BTreeMap::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = |reason: &str| ConfigError::BadPeer {
                item: item.to_string(),
                reason: reason.to_string(),
            };
            let (id, addr) = item.split_once('=').ok_or_else(|| bad("no '='"))?;
            let id: u64 = id
                .trim()
                .parse()
                .map_err(|_| bad("the id is not a number"))?;
            if id == 0 {
                return Err(ConfigError::ZeroId);
            }
            let addr = addr.trim();
            let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("no port"))?;
            if host.is_empty() {
                return Err(bad("no host"));
            }
            port.parse::<u16>()
                .map_err(|_| bad("the port is not a number"))?;
            if peers.insert(id, addr.to_string()).is_some() {
                return Err(ConfigError::DuplicateId(id));
            }
        }
        Ok(Peers(peers))
    }
}

/// How one agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// This server's id (one of the peers).
    pub id: u64,
    /// Where to listen (API and Raft). Port 0 picks a free port; the address the agent
    /// got is [`Agent::addr`](crate::Agent::addr).
    pub bind: SocketAddr,
    /// The data directory (Raft log, snapshots, lock).
    pub data: PathBuf,
    /// Every server of the cluster, this one included. The address listed for this
    /// server is what the others dial; with `bind` on port 0 it is replaced by the
    /// bound address.
    pub peers: Peers,
    /// Whether API requests need an ACL token (on by default; off only on loopback,
    /// as `--dev` does). Client credentials only: servers authenticate each other with
    /// the cluster key.
    pub acl: bool,
    /// The key every server of the cluster holds; Raft RPCs without its MAC are
    /// refused. Required when the peers list more than this server, unless `dev`.
    pub cluster_key: Option<ClusterKey>,
    /// TLS on the port (API and Raft): certificate, key, CA. With a CA, servers
    /// verify each other's certificates (mutual TLS, the server role name), which
    /// authenticates them as the cluster key does — either may be used, or both.
    pub tls: Option<TlsOptions>,
    /// The region this cluster serves (Nomad's `region`; `global` by default): a
    /// request naming another is refused, as Nomad refuses a region it has no path to.
    pub region: String,
    /// Development mode: several servers without a cluster key (Raft RPCs accepted
    /// from anyone who can reach the port). Loopback addresses only; logged loudly.
    pub dev: bool,
    /// Connections, sizes, timeouts and concurrent work the agent accepts.
    pub limits: Limits,
    /// The Raft and log options.
    pub server: ServerOptions,
    /// How many committed writes the event stream keeps for clients that reconnect.
    pub event_buffer: usize,
    /// How often an idle event stream sends a heartbeat line.
    pub event_heartbeat: Duration,
    /// The longest a blocking query waits (a longer `?wait=` is cut to it).
    pub max_wait: Duration,
    /// Whether the agent reloads its TLS files itself on SIGHUP (on by default). A
    /// program that handles SIGHUP itself — `schedstate agent`, which re-reads its
    /// configuration file then — turns it off and calls [`Tls::reload`](crate::Tls::reload)
    /// on [`Agent::tls`](crate::Agent::tls).
    pub sighup_reloads_tls: bool,
}

impl AgentConfig {
    /// A configuration with the defaults: ACL on, 10,000 writes kept for the event
    /// stream, heartbeats every 10 s, blocking queries up to 5 minutes (Nomad's
    /// defaults for the last two).
    pub fn new(id: u64, bind: SocketAddr, data: PathBuf, peers: Peers) -> Self {
        AgentConfig {
            id,
            bind,
            data,
            peers,
            acl: true,
            cluster_key: None,
            tls: None,
            region: crate::tls::DEFAULT_REGION.to_string(),
            dev: false,
            limits: Limits::default(),
            server: ServerOptions::default(),
            event_buffer: 10_000,
            event_heartbeat: Duration::from_secs(10),
            max_wait: Duration::from_secs(300),
            sighup_reloads_tls: true,
        }
    }

    /// Checks the id against the peers, the cluster key against the number of
    /// servers, `dev` against the address, and the limits.
    ///
    /// # Errors
    /// [`ConfigError`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.acl && !self.bind.ip().is_loopback() {
            return Err(ConfigError::AclOffNotLoopback(self.bind));
        }
        if self.dev && !self.bind.ip().is_loopback() {
            return Err(ConfigError::DevNotLoopback(self.bind));
        }
        let mutual_tls = self.tls.as_ref().is_some_and(|t| t.files.ca.is_some());
        if self.peers.0.len() > 1 && self.cluster_key.is_none() && !mutual_tls && !self.dev {
            return Err(ConfigError::NoClusterKey {
                servers: self.peers.0.len(),
            });
        }
        self.limits.validate()?;
        if self.id == 0 {
            return Err(ConfigError::ZeroId);
        }
        if !self.peers.0.contains_key(&self.id) {
            let known: Vec<String> = self.peers.0.keys().map(u64::to_string).collect();
            return Err(ConfigError::NotAPeer {
                id: self.id,
                known: known.join(", "),
            });
        }
        Ok(())
    }
}

/// What one agent accepts before it answers `429 Too Many Requests` (work) or closes a
/// connection (connections, timeouts). The defaults are in the README's configuration
/// table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections from one IP address (Nomad's default: 100). More are closed
    /// as soon as they are accepted.
    pub conns_per_client: usize,
    /// Open connections in all. Above it, new ones are closed at once.
    pub conns: usize,
    /// Open connections of the cluster's servers (proven by a server certificate,
    /// with mutual TLS): counted apart, never under the clients' caps.
    pub server_conns: usize,
    /// A request's head must arrive within this; an idle keep-alive connection is
    /// closed after it too (a slowloris client is cut off).
    pub header_read_timeout: Duration,
    /// A request's body must arrive within this.
    pub body_timeout: Duration,
    /// The kernel's send buffer for each accepted connection (`SO_SNDBUF`; Linux
    /// doubles it): what a client that reads nothing makes the kernel hold, and how
    /// far ahead of it an answer or a stream is made. Left to the kernel it grows to
    /// 4 MiB per connection.
    pub send_buffer_bytes: usize,
    /// A connection whose writes make no progress this long (the client reads
    /// nothing of its answer or stream) is ended, and what it held freed.
    pub write_timeout: Duration,
    /// The largest write (`POST /v1/commands`) body.
    pub write_body_bytes: usize,
    /// Bytes of clients' request bodies held at once, over all requests (writes,
    /// operator calls), counted as they arrive: a client that claims a large body
    /// and sends it slowly holds only what it sent.
    pub body_bytes_in_flight: usize,
    /// Of those, what one client (an address, an IPv6 /64, a token) may hold.
    pub body_bytes_per_client: usize,
    /// Bytes of Raft RPC bodies held at once: the servers' own budget, taken only
    /// once a request proved it comes from a server, never counted under the
    /// clients' budget.
    pub raft_body_bytes: usize,
    /// Bytes of large answers (64 KiB and more) not yet handed to their connections:
    /// what slow readers hold. Over it, 429.
    pub answer_bytes_in_flight: usize,
    /// Of those, what one client (an address, an IPv6 /64) may hold.
    pub answer_bytes_per_client: usize,
    /// Blocking queries waiting at once.
    pub blocking_queries: usize,
    /// Of those, what one client (an address, an IPv6 /64, a token) may have waiting.
    pub blocking_queries_per_client: usize,
    /// Event streams open at once.
    pub event_streams: usize,
    /// Of those, what one client (an address, an IPv6 /64, a token) may have open.
    pub event_streams_per_client: usize,
    /// Snapshot downloads (`GET /v1/operator/snapshot`) at once.
    pub snapshot_downloads: usize,
    /// The largest snapshot file a restore (`PUT /v1/operator/snapshot`) takes: a
    /// larger claimed length is 413 before a byte is read, a longer body 413 as soon
    /// as it passes the limit. Its bytes count against the clients' body budgets
    /// (`body_bytes_in_flight`, `body_bytes_per_client`) as every body's do, so
    /// raising it past `body_bytes_per_client` needs that raised too; never above
    /// the cluster's own cap, [`MAX_RESTORE_BYTES`](schedstate_raft::MAX_RESTORE_BYTES).
    pub snapshot_restore_bytes: usize,
    /// Scans (lists, filters: reads whose work grows with a table) running at once,
    /// each on a thread of its own off the async workers.
    pub scan_threads: usize,
    /// Scans of one client (address or token) in the scan threads' queue at once;
    /// its others wait behind them, in its own lane.
    pub scans_per_client: usize,
    /// Scans one client (address or token) may have waiting or running in all.
    pub scans_waiting_per_client: usize,
    /// How long a scan waits for a thread before it is answered 503 `Busy`.
    pub scan_queue_wait: Duration,
    /// The time one scan may take; past it, 422 `BudgetExceeded`.
    pub scan_budget: Duration,
}

impl Default for Limits {
    /// 100 connections per client, 16,384 in all, 1,024 more for servers; 10 s for a
    /// request head (and to idle), 30 s for a body, 20 s for a blocked write, a 256 KiB
    /// send buffer per connection; 16 MiB per write, 512 MiB of clients' bodies in
    /// flight of which 64 MiB per client, 256 MiB of Raft RPC bodies; 64 MiB of unsent
    /// large answers of which 16 MiB per client; 16,384 blocking queries (4,096 per
    /// client), 1,024 event streams (64 per client), 2 snapshot downloads, 64 MiB
    /// per snapshot restore; scans on
    /// half the cores (at least one), 2 per client in their queue (1,024 waiting),
    /// waiting at most 5 s for a thread, 2 s each.
    fn default() -> Self {
        Limits {
            conns_per_client: 100,
            conns: 16_384,
            server_conns: 1_024,
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(20),
            send_buffer_bytes: 256 << 10,
            write_body_bytes: 16 << 20,
            body_bytes_in_flight: 512 << 20,
            body_bytes_per_client: 64 << 20,
            raft_body_bytes: 256 << 20,
            answer_bytes_in_flight: 64 << 20,
            answer_bytes_per_client: 16 << 20,
            blocking_queries: 16_384,
            blocking_queries_per_client: 4_096,
            event_streams: 1_024,
            event_streams_per_client: 64,
            snapshot_downloads: 2,
            snapshot_restore_bytes: 64 << 20,
            scan_threads: std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
            scans_per_client: 2,
            scans_waiting_per_client: 1_024,
            scan_queue_wait: Duration::from_secs(5),
            scan_budget: Duration::from_secs(2),
        }
    }
}

impl Limits {
    fn validate(&self) -> Result<(), ConfigError> {
        let counts = [
            ("conns_per_client", self.conns_per_client),
            ("conns", self.conns),
            ("server_conns", self.server_conns),
            ("write_body_bytes", self.write_body_bytes),
            ("body_bytes_in_flight", self.body_bytes_in_flight),
            ("body_bytes_per_client", self.body_bytes_per_client),
            ("raft_body_bytes", self.raft_body_bytes),
            ("send_buffer_bytes", self.send_buffer_bytes),
            ("answer_bytes_in_flight", self.answer_bytes_in_flight),
            ("answer_bytes_per_client", self.answer_bytes_per_client),
            ("scan_threads", self.scan_threads),
            ("scans_per_client", self.scans_per_client),
            ("scans_waiting_per_client", self.scans_waiting_per_client),
            ("blocking_queries", self.blocking_queries),
            (
                "blocking_queries_per_client",
                self.blocking_queries_per_client,
            ),
            ("event_streams", self.event_streams),
            ("event_streams_per_client", self.event_streams_per_client),
            ("snapshot_downloads", self.snapshot_downloads),
            ("snapshot_restore_bytes", self.snapshot_restore_bytes),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(ConfigError::ZeroLimit(name));
            }
        }
        for (name, value) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_timeout", self.body_timeout),
            ("write_timeout", self.write_timeout),
            ("scan_queue_wait", self.scan_queue_wait),
            ("scan_budget", self.scan_budget),
        ] {
            if value.is_zero() {
                return Err(ConfigError::ZeroLimit(name));
            }
        }
        Ok(())
    }
}
