//! [`AgentConfig`]: what one agent needs to know — its id, its address, its data
//! directory, every server of the cluster — and the `--peers` syntax.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use schedstate_raft::ServerOptions;

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
    /// When set, every request (API and Raft RPCs) must carry
    /// `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// The Raft and log options.
    pub server: ServerOptions,
    /// How many committed writes the event stream keeps for clients that reconnect.
    pub event_buffer: usize,
    /// How often an idle event stream sends a heartbeat line.
    pub event_heartbeat: Duration,
    /// The longest a blocking query waits (a longer `?wait=` is cut to it).
    pub max_wait: Duration,
}

impl AgentConfig {
    /// A configuration with the defaults: no token, 10,000 writes kept for the event
    /// stream, heartbeats every 10 s, blocking queries up to 5 minutes (Nomad's
    /// defaults for the last two).
    pub fn new(id: u64, bind: SocketAddr, data: PathBuf, peers: Peers) -> Self {
        AgentConfig {
            id,
            bind,
            data,
            peers,
            token: None,
            server: ServerOptions::default(),
            event_buffer: 10_000,
            event_heartbeat: Duration::from_secs(10),
            max_wait: Duration::from_secs(300),
        }
    }

    /// Checks the id against the peers.
    ///
    /// # Errors
    /// [`ConfigError::ZeroId`], [`ConfigError::NotAPeer`].
    pub fn validate(&self) -> Result<(), ConfigError> {
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
