//! [`Service`]: the one object every HTTP handler works through — the replicated
//! server, the event buffer, the metrics, who may call (token, cluster key) and how
//! much they may ask for ([`Gates`]). Handlers are thin adapters over it: they parse a
//! request, ask the service, and present the answer.

mod acl;
mod connections;
mod gates;
mod scans;
mod shares;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use schedstate_raft::Server;
use tokio::sync::watch;

pub(crate) use acl::{AuthError, Caller, new_salt, new_uuid, salt_if_unsalted, unix_now};
pub(crate) use connections::Admission;
pub(crate) use gates::{AnswerPermit, BodyPermit, CountPermit, Gates};
pub(crate) use scans::{Budget, ScanRefused};
pub(crate) use shares::ClientKeys;

use crate::api::AgentSelf;
use crate::cluster_key::ClusterKey;
use crate::config::Limits;
use crate::events::EventBuffer;
use crate::http::HandshakeFailures;
use crate::metrics::Metrics;
use crate::outbound::PeerDialer;
use crate::tls::Tls;

/// What the agent serves with.
pub(crate) struct Service {
    pub server: Server,
    pub events: Arc<EventBuffer>,
    pub metrics: Arc<Metrics>,
    /// Whether requests need an ACL token (off only in `--dev`).
    pub acl: bool,
    /// The region this cluster serves.
    pub region: String,
    /// The servers' key; `None` refuses every Raft RPC unless `dev`.
    pub cluster_key: Option<ClusterKey>,
    /// Raft RPCs accepted without a key (loopback only, by configuration).
    pub dev: bool,
    pub limits: Limits,
    pub gates: Gates,
    pub max_wait: Duration,
    pub heartbeat: Duration,
    /// For proxying requests to the leader (operator routes; reads when the leader
    /// is too old to answer ReadIndex).
    pub proxy: crate::outbound::HttpClient,
    /// The proxied requests in flight per leader, capped.
    pub proxy_slots: crate::http::ProxySlots,
    /// How the proxy dials the leader (scheme, TLS).
    pub dialer: PeerDialer,
    /// Turns `true` when the agent stops: blocking queries and streams end.
    pub stopping: watch::Receiver<bool>,
    /// Set once when Raft stopped for good: every request is then refused.
    pub fatal: OnceLock<String>,
    /// TLS on the port (and between servers), if configured.
    pub tls: Option<Tls>,
    /// TLS handshake failures, for rate-limited logging.
    pub handshake_failures: HandshakeFailures,
    /// When this server last answered a Raft RPC (from the leader, on a follower).
    pub last_contact: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl Service {
    /// Whether this server has never been part of a cluster: no membership, nothing
    /// logged, never voted.
    pub fn is_fresh(&self) -> bool {
        is_fresh(&self.server)
    }

    /// Milliseconds since this server last heard from the leader: 0 on the leader,
    /// as Nomad's `X-Nomad-LastContact` says it.
    pub fn last_contact_ms(&self) -> u64 {
        if self.server.is_leader() {
            return 0;
        }
        self.last_contact.lock().map_or(0, |t| {
            u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
        })
    }

    /// This agent's own status.
    pub fn agent_self(&self) -> AgentSelf {
        AgentSelf {
            id: self.server.id(),
            fresh: self.is_fresh(),
            leader: self.server.leader(),
            term: self.server.term(),
            last_applied: self.server.last_applied(),
        }
    }
}

/// Whether `server` has never been part of a cluster.
pub(crate) fn is_fresh(server: &Server) -> bool {
    let metrics = server.raft().metrics();
    let m = metrics.borrow();
    m.membership_config.membership().nodes().next().is_none()
        && m.last_log_index.is_none()
        && m.current_term == 0
}
