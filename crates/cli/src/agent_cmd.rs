//! `schedstate agent`: one server of a replicated cluster, until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use schedstate_agent::{Agent, AgentConfig, Peers};

use crate::output::{CliError, err};

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
    /// Require `Authorization: Bearer <token>` on every request, Raft RPCs included
    /// (all servers of a cluster use the same token).
    #[arg(long, env = "SCHEDSTATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            // openraft logs every failed heartbeat to a down peer as an error; the
            // agent logs what matters (leader changes, snapshot installs, refusals).
            // RUST_LOG=openraft=warn brings it back.
            "warn,openraft=off,schedstate=info,schedstate_agent=info,schedstate_raft=info",
        )
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .compact()
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
    config.token = args.token.filter(|t| !t.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("agent")
        .build()
        .map_err(|e| err(format!("starting the runtime: {e}")))?;
    runtime.block_on(async move {
        let agent = Agent::start(config)
            .await
            .map_err(|e| err(format!("agent: {e}")))?;
        println!(
            "schedstate agent {} serving http://{}",
            args.id,
            agent.addr()
        );
        stop_signal().await;
        agent.shutdown().await;
        Ok(())
    })
}
