//! `schedstate agent`: one server of a replicated cluster, until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use schedstate_agent::tls::{TlsFiles, TlsOptions};
use schedstate_agent::{Agent, AgentConfig, ClusterKey, Limits, Peers};
use schedstate_cli::output::{CliError, err};

/// Arguments of `agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// This server's id (one of the ids in --peers).
    #[arg(long, default_value_t = 1)]
    pub id: u64,
    /// Where to serve the HTTP API and the Raft RPCs (one port). Loopback by default;
    /// port 0 picks a free one (single-server clusters and tests).
    #[arg(long, default_value = "127.0.0.1:4646")]
    pub bind: SocketAddr,
    /// The data directory (Raft log, snapshots, lock).
    #[arg(
        long = "data",
        value_name = "DIR",
        default_value = "./schedstate-agent"
    )]
    pub data: PathBuf,
    /// Every server of the cluster, this one included:
    /// 1=127.0.0.1:4646,2=127.0.0.1:4647,3=127.0.0.1:4648. Without it, a cluster of
    /// this server alone.
    #[arg(long)]
    pub peers: Option<Peers>,
    /// The file holding the cluster key every server of the cluster is given (mode
    /// 0600; `schedstate keygen FILE` makes one). Raft RPCs without its MAC are
    /// refused. Required with more than one server, unless --dev.
    #[arg(long, value_name = "FILE", env = "SCHEDSTATE_CLUSTER_KEY_FILE")]
    pub cluster_key_file: Option<PathBuf>,
    /// This server's TLS certificate (PEM). With --tls-key, the port speaks HTTPS only
    /// (API and Raft); reloaded on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) of the cluster: servers then verify each other's certificates
    /// (mutual TLS: a server certificate, server.<region>.schedstate, is needed to send
    /// Raft RPCs), and client certificates are verified when sent.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
    /// Require a client certificate of the CA on every API connection.
    #[arg(long, requires = "tls_ca")]
    pub tls_verify_clients: bool,
    /// The region (the server role name in certificates is server.<region>.schedstate).
    #[arg(long, default_value = schedstate_agent::tls::DEFAULT_REGION)]
    pub region: String,
    /// INSECURE development mode: ACL off (every API request served without a token)
    /// and several servers allowed without a cluster key, so anyone who can reach the
    /// port can read, write and send Raft RPCs. Refuses any non-loopback --bind.
    #[arg(long)]
    pub dev: bool,
    /// Open connections allowed from one IP address.
    #[arg(long, value_name = "N", default_value_t = Limits::default().conns_per_client)]
    pub max_conns_per_client: usize,
    /// Open connections allowed in all.
    #[arg(long, value_name = "N", default_value_t = Limits::default().conns)]
    pub max_conns: usize,
    /// Blocking queries allowed to wait at once (more are answered 429).
    #[arg(long, value_name = "N", default_value_t = Limits::default().blocking_queries)]
    pub max_blocking_queries: usize,
    /// Event streams allowed open at once (more are answered 429).
    #[arg(long, value_name = "N", default_value_t = Limits::default().event_streams)]
    pub max_event_streams: usize,
    /// Blocking queries one client (an address, an IPv6 /64, a token) may have waiting.
    #[arg(long, value_name = "N", default_value_t = Limits::default().blocking_queries_per_client)]
    pub max_blocking_queries_per_client: usize,
    /// Event streams one client (an address, an IPv6 /64, a token) may have open.
    #[arg(long, value_name = "N", default_value_t = Limits::default().event_streams_per_client)]
    pub max_event_streams_per_client: usize,
    /// The time one list or filtered read may take before it is answered 422
    /// BudgetExceeded (as 2s, 500ms).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration,
          default_value = "2s")]
    pub scan_budget: std::time::Duration,
}

/// Logging to stderr, filtered by `RUST_LOG` (`target=level` directives, as in
/// `warn,schedstate_raft=debug`) or by the default below.
fn init_logging() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    // openraft logs every failed heartbeat to a down peer as an error; the agent logs
    // what matters (leader changes, snapshot installs, refusals). RUST_LOG=openraft=warn
    // brings it back.
    const DEFAULT: &str =
        "warn,openraft=off,schedstate=info,schedstate_agent=info,schedstate_raft=info";
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => match directives.parse::<Targets>() {
            Ok(filter) => filter,
            Err(e) => {
                eprintln!(
                    "warning: RUST_LOG={directives:?} ignored ({e}); logging with {DEFAULT:?}"
                );
                DEFAULT.parse().expect("the default log filter parses")
            }
        },
        _ => DEFAULT.parse().expect("the default log filter parses"),
    };
    let format = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .compact();
    let _ = tracing_subscriber::registry()
        .with(format)
        .with(filter)
        .try_init();
}

async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `agent`.
pub fn run(args: AgentArgs) -> Result<(), CliError> {
    init_logging();
    let peers = match args.peers {
        Some(p) => p,
        None => format!("{}={}", args.id, args.bind)
            .parse()
            .map_err(|e| err(format!("{e}")))?,
    };
    let mut config = AgentConfig::new(args.id, args.bind, args.data, peers);
    config.dev = args.dev;
    config.acl = !args.dev;
    config.region = args.region.clone();
    if let (Some(cert), Some(key)) = (args.tls_cert, args.tls_key) {
        let mut tls = TlsOptions::new(TlsFiles {
            cert,
            key,
            ca: args.tls_ca,
        });
        tls.verify_clients = args.tls_verify_clients;
        tls.region = args.region;
        config.tls = Some(tls);
    }
    if let Some(file) = &args.cluster_key_file {
        config.cluster_key = Some(ClusterKey::from_file(file).map_err(|e| err(e.to_string()))?);
    }
    config.limits = Limits {
        conns_per_client: args.max_conns_per_client,
        conns: args.max_conns,
        blocking_queries: args.max_blocking_queries,
        event_streams: args.max_event_streams,
        blocking_queries_per_client: args.max_blocking_queries_per_client,
        event_streams_per_client: args.max_event_streams_per_client,
        scan_budget: args.scan_budget,
        ..Limits::default()
    };
    match schedstate_agent::raise_open_file_limit() {
        Ok(l) if l.before != l.after => {
            tracing::info!(
                before = l.before,
                after = l.after,
                "raised the open-file limit"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("agent")
        .build()
        .map_err(|e| err(format!("starting the runtime: {e}")))?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    runtime.block_on(async move {
        let agent = Agent::start(config)
            .await
            .map_err(|e| err(format!("agent: {e}")))?;
        println!(
            "schedstate agent {} serving {scheme}://{}",
            args.id,
            agent.addr()
        );
        let failed = tokio::select! {
            () = stop_signal() => None,
            why = agent.failed() => Some(why),
        };
        if failed.is_none() {
            // A planned stop: the leadership goes to a caught-up voter first.
            agent.hand_over().await;
        }
        agent.shutdown().await;
        match failed {
            None => Ok(()),
            Some(why) => Err(err(format!("agent {}: Raft stopped: {why}", args.id))),
        }
    })
}

/// Arguments of `keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The file to create.
    pub file: PathBuf,
}

/// `keygen`.
pub fn keygen(args: &KeygenArgs) -> Result<(), CliError> {
    ClusterKey::write_new(&args.file).map_err(|e| err(e.to_string()))?;
    println!(
        "wrote a new cluster key to {} (mode 0600): give it to every server with --cluster-key-file",
        args.file.display()
    );
    Ok(())
}
