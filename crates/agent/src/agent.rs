//! [`Agent`]: one server process's life — bind, open the replicated store, serve HTTP,
//! form or rejoin the cluster, log leader changes, stop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use hyper::Method;
use schedstate_raft::{ApplyEvent, ApplyObserver, BoxFuture, OpenError, Server};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{AgentConfig, ConfigError};
use crate::events::EventBuffer;
use crate::http;
use crate::metrics::Metrics;
use crate::outbound::PeerDialer;
use crate::service::{Gates, Service, is_fresh};
use crate::tls::{Tls, TlsError};
use crate::transport::HttpTransport;

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is inconsistent.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The data directory could not be opened (damage, a lock held by another agent).
    #[error("data directory: {0}")]
    Open(#[from] OpenError),
    /// The TLS files could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The transport between servers could not be made.
    #[error(transparent)]
    Transport(#[from] crate::transport::TransportError),
}

/// A running agent.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use schedstate_agent::{Agent, AgentConfig};
///
/// let config = AgentConfig::new(
///     1,
///     "127.0.0.1:4646".parse()?,
///     "./d1".into(),
///     "1=127.0.0.1:4646,2=127.0.0.1:4647,3=127.0.0.1:4648".parse()?,
/// );
/// let agent = Agent::start(config).await?;
/// tokio::signal::ctrl_c().await?;
/// agent.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Agent {
    addr: SocketAddr,
    server: Server,
    stop: watch::Sender<bool>,
    http: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    fatal: watch::Receiver<Option<String>>,
    tls: Option<Tls>,
}

impl Agent {
    /// Binds `config.bind`, opens (or resumes) the data directory, serves the API and
    /// the Raft RPCs, and — when no server of the cluster has any state — has the
    /// lowest id initialize the cluster with every peer as a voter. A restarted agent
    /// resumes from its directory and rejoins.
    ///
    /// # Errors
    /// [`AgentError`]: a bad configuration, the address in use, a damaged or locked
    /// data directory.
    //
    // Boxed here, not an `async fn`: an async body is compiled in the crate that polls
    // it, so `Agent::start(..).await` in the CLI and in each test binary compiled the
    // whole HTTP server and Raft stack there again. Behind the box it is compiled once.
    pub fn start(config: AgentConfig) -> BoxFuture<'static, Result<Agent, AgentError>> {
        Box::pin(Self::start_boxed(config))
    }

    async fn start_boxed(mut config: AgentConfig) -> Result<Agent, AgentError> {
        config.validate()?;
        let listener = TcpListener::bind(config.bind)
            .await
            .map_err(|source| AgentError::Bind {
                addr: config.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| AgentError::Bind {
            addr: config.bind,
            source,
        })?;
        if config.bind.port() == 0 {
            config.peers.0.insert(config.id, addr.to_string());
        }

        let events = EventBuffer::new(config.event_buffer);
        let metrics = Arc::new(Metrics::new());
        let mut options = config.server.clone();
        options.on_apply = Some(observer(events.clone(), metrics.clone()));
        if config.dev {
            tracing::warn!(
                "DEV MODE: INSECURE — Raft RPCs are taken from anyone who can reach {addr} \
                 (no cluster key); serving loopback only. Never run --dev on a network."
            );
        }
        if !config.acl {
            tracing::warn!(
                "ACL OFF: INSECURE — every API request on {addr} is served without a token \
                 (loopback only). Never run without ACL on a network."
            );
        }
        let tls = config.tls.clone().map(Tls::load).transpose()?;
        if config.acl && tls.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(
                "ACL ON WITHOUT TLS: tokens and CSI volume secrets cross the network in clear                  text on {addr}; anyone on the path can read and reuse them. Serve TLS                  (--tls-cert, --tls-key, --tls-ca)."
            );
        }
        if let Some(t) = &tls {
            tracing::info!(
                ca = t.has_ca(),
                verify_clients = t.options().verify_clients,
                "TLS on: https only on {addr}"
            );
        }
        // Peers are dialed from the address this agent serves on (see `outbound`).
        let source = Some(addr.ip());
        let transport =
            HttpTransport::with_source(config.cluster_key.clone(), tls.as_ref(), source)?;
        let dialer = PeerDialer::new(tls.as_ref(), source)?;
        let server = Server::open(config.id, &config.data, options, transport).await?;
        tracing::info!(
            id = config.id,
            %addr,
            data = %config.data.display(),
            applied = server.last_applied(),
            "agent started"
        );

        let (stop, stopping) = watch::channel(false);
        let service = Arc::new(Service {
            server: server.clone(),
            events,
            metrics: metrics.clone(),
            acl: config.acl,
            region: config.region.clone(),
            cluster_key: config.cluster_key.clone(),
            dev: config.dev,
            gates: Gates::new(&config.limits),
            limits: config.limits.clone(),
            max_wait: config.max_wait,
            heartbeat: config.event_heartbeat,
            proxy: dialer.client(Duration::from_secs(2)),
            proxy_slots: crate::http::ProxySlots::default(),
            dialer: dialer.clone(),
            tls: tls.clone(),
            handshake_failures: Default::default(),
            last_contact: Default::default(),
            stopping: stopping.clone(),
            fatal: std::sync::OnceLock::new(),
        });
        let app = http::router(service.clone());
        let http = tokio::spawn(http::serve(
            listener,
            app,
            service.clone(),
            stopping.clone(),
        ));
        let (fatal_tx, fatal) = watch::channel(None);
        #[cfg(unix)]
        let sighup_reloads_tls = config.sighup_reloads_tls;
        #[allow(unused_mut)]
        let mut tasks = vec![
            tokio::spawn(watch_leader(server.clone(), metrics, stopping.clone())),
            tokio::spawn(watch_health(service, fatal_tx, stopping.clone())),
            tokio::spawn(bootstrap(server.clone(), config, dialer, stopping.clone())),
        ];
        #[cfg(unix)]
        if let Some(tls) = tls.clone()
            && sighup_reloads_tls
        {
            tasks.push(tokio::spawn(reload_on_sighup(tls, stopping)));
        }
        Ok(Agent {
            addr,
            server,
            stop,
            http,
            tasks,
            fatal,
            tls,
        })
    }

    /// The address the agent listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The TLS material served, if TLS is on: [`Tls::reload`] reads its files again
    /// (what SIGHUP does unless [`AgentConfig::sighup_reloads_tls`] is off).
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// The replicated server underneath.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Resolves when Raft stopped for good under this agent (a storage error, a bug):
    /// the agent then refuses every request with 503 `Stopped`, and its process should
    /// exit non-zero (`schedstate agent` does) so that a supervisor restarts it. Never
    /// resolves while the agent is healthy or after a normal [`shutdown`](Self::shutdown).
    pub async fn failed(&self) -> String {
        let mut fatal = self.fatal.clone();
        match fatal.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Before a planned stop (SIGTERM, SIGINT): if this server leads, hands the
    /// leadership to the most caught-up voter, so writes pause for a round trip
    /// instead of an election timeout. Bounded by
    /// [`TRANSFER_DEADLINE`](schedstate_raft::TRANSFER_DEADLINE); a failure is logged
    /// and the stop goes on (the others then elect as after a crash).
    pub async fn hand_over(&self) {
        if !self.server.is_leader() || self.server.members().1.len() < 2 {
            return;
        }
        match self.server.transfer_leadership(None).await {
            Ok(to) => tracing::info!(id = self.server.id(), to, "handed the leadership over"),
            Err(e) => tracing::warn!(
                id = self.server.id(),
                error = %e,
                "could not hand the leadership over; stopping anyway"
            ),
        }
    }

    /// Stops: no new requests, open blocking queries and streams answered or ended,
    /// Raft stopped, the data directory's lock released. Nothing acknowledged is
    /// lost whether an agent stops this way or is killed.
    pub async fn shutdown(self) {
        tracing::info!(id = self.server.id(), "agent stopping");
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
        let mut http = self.http;
        if tokio::time::timeout(Duration::from_secs(3), &mut http)
            .await
            .is_err()
        {
            http.abort();
        }
        self.server.shutdown().await;
        tracing::info!(id = self.server.id(), "agent stopped");
    }
}

/// Feeds the event buffer and the metrics from the apply path.
fn observer(events: Arc<EventBuffer>, metrics: Arc<Metrics>) -> ApplyObserver {
    ApplyObserver::new(move |event| match event {
        ApplyEvent::Opened { index } => events.reset(*index),
        ApplyEvent::SnapshotInstalled { index } => {
            events.reset(*index);
            metrics.snapshots_installed.inc();
        }
        ApplyEvent::Applied {
            commit,
            refused,
            took,
            ..
        } => {
            if let Some(c) = commit {
                events.push((*c).clone());
            }
            metrics.entries_applied.inc();
            let n_refused = refused.iter().filter(|r| r.is_some()).count() as u64;
            metrics.commands_refused.inc_by(n_refused);
            metrics
                .commands_accepted
                .inc_by(refused.len() as u64 - n_refused);
            metrics.apply_seconds.observe(took.as_secs_f64());
        }
        // ApplyEvent may grow; a new kind is not counted until it is taught here.
        #[allow(unreachable_patterns)]
        _ => {}
    })
}

/// Watches Raft's core: if it stops with a fatal error while the agent runs, logs it
/// at error level, makes every request answer 503 `Stopped` and tells
/// [`Agent::failed`]. A zombie that answers status but can never write is worse than
/// a dead server: a supervisor restarts a dead one.
async fn watch_health(
    service: Arc<Service>,
    fatal: watch::Sender<Option<String>>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut rx = service.server.raft().metrics();
    loop {
        let failed = match &rx.borrow_and_update().running_state {
            Ok(()) => None,
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = failed {
            if *stopping.borrow() {
                return; // a normal shutdown
            }
            tracing::error!(id = service.server.id(), error = %why, "Raft stopped: this server refuses every request and must be restarted");
            let _ = service.fatal.set(why.clone());
            let _ = fatal.send(Some(why));
            return;
        }
        let ended = tokio::select! {
            changed = rx.changed() => changed.is_err(),
            _ = stopping.wait_for(|s| *s) => return,
        };
        if ended {
            if !*stopping.borrow() {
                let why = "Raft's core ended".to_string();
                tracing::error!(
                    id = service.server.id(),
                    "Raft's core ended: this server refuses every request and must be restarted"
                );
                let _ = service.fatal.set(why.clone());
                let _ = fatal.send(Some(why));
            }
            return;
        }
    }
}

fn leader_is_me(server: &Server) -> bool {
    server.leader() == Some(server.id())
}

/// Logs each leader change (one line) and counts it.
async fn watch_leader(server: Server, metrics: Arc<Metrics>, mut stopping: watch::Receiver<bool>) {
    let mut rx = server.raft().metrics();
    let mut last: Option<u64> = None;
    let mut format = server.cluster_format();
    loop {
        let term = rx.borrow_and_update().current_term;
        // The cluster's format raised (a rolling upgrade done): the leader salts
        // digests made unsalted meanwhile.
        let now_format = server.cluster_format();
        if now_format > format && leader_is_me(&server) {
            tokio::spawn(crate::service::salt_if_unsalted(server.clone()));
        }
        format = now_format;
        // Not openraft's leader as it is: a follower whose election timer ran out
        // without word from its leader has none, even when it may not stand (PreVote).
        let leader = server.leader();
        if leader != last {
            match leader {
                Some(l) if l == server.id() => {
                    tracing::info!(leader = l, term, "this server is the leader");
                    // A state from before salted digests gets its salt from a leader.
                    tokio::spawn(crate::service::salt_if_unsalted(server.clone()));
                }
                Some(l) => tracing::info!(leader = l, term, "leader changed"),
                None => tracing::info!(term, "no leader"),
            }
            if leader.is_some() {
                metrics.leader_changes.inc();
            }
            last = leader;
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// Forms the cluster on a first start: once every peer answers and none has state,
/// the lowest id initializes it with every peer a voter. A server with state (a
/// restart), or one whose peers have state (a replacement), waits to be contacted.
async fn bootstrap(
    server: Server,
    config: AgentConfig,
    dialer: PeerDialer,
    mut stopping: watch::Receiver<bool>,
) {
    let lowest = config.peers.0.keys().next().copied();
    if lowest != Some(config.id) {
        return;
    }
    let http = dialer.client(Duration::from_secs(1));
    let mut waiting_logged = false;
    loop {
        if !is_fresh(&server) {
            return;
        }
        let mut all_fresh = true;
        let mut missing = Vec::new();
        for (id, addr) in &config.peers.0 {
            if *id == config.id {
                continue;
            }
            let url = format!("{}://{addr}/v1/agent/health", dialer.scheme());
            let answer = match http
                .call(
                    Method::GET,
                    &url,
                    &[],
                    Bytes::new(),
                    64 << 10,
                    Duration::from_secs(2),
                )
                .await
            {
                Ok(a) if a.status.is_success() => Some(a.body),
                _ => None,
            };
            match answer.and_then(|b| serde_json::from_slice::<crate::api::AgentHealth>(&b).ok()) {
                Some(peer) if !peer.server.fresh => {
                    tracing::info!(peer = id, "a peer has state: waiting to be contacted");
                    return;
                }
                Some(_) => {}
                None => {
                    all_fresh = false;
                    missing.push(*id);
                }
            }
        }
        if all_fresh {
            let members: Vec<(u64, String)> = config
                .peers
                .0
                .iter()
                .map(|(id, a)| (*id, a.clone()))
                .collect();
            match server.initialize(members).await {
                Ok(()) => tracing::info!(
                    servers = config.peers.0.len(),
                    "initialized the cluster (no server had state)"
                ),
                Err(e) => tracing::error!(error = %e, "initializing the cluster failed"),
            }
            return;
        }
        if !waiting_logged {
            tracing::info!(
                ?missing,
                "waiting for every peer to answer before forming the cluster"
            );
            waiting_logged = true;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// Reloads the TLS files on each SIGHUP: new handshakes use the new certificate and CA
/// at once; connections already open keep what they negotiated. A failed reload (a
/// half-written file, a key that does not match) keeps the old material and says why.
#[cfg(unix)]
async fn reload_on_sighup(tls: Tls, mut stopping: watch::Receiver<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: TLS files are not reloaded");
            return;
        }
    };
    loop {
        tokio::select! {
            got = hup.recv() => if got.is_none() { return },
            _ = stopping.wait_for(|s| *s) => return,
        }
        match tls.reload() {
            Ok(()) => tracing::info!("SIGHUP: TLS certificate, key and CA reloaded"),
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: TLS reload failed; still serving the previous certificate")
            }
        }
    }
}
