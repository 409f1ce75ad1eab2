//! `schedstate agent`: one server of a replicated cluster, until SIGINT or SIGTERM.
//!
//! Its settings come from the defaults, then the configuration files (`--config`,
//! `file.rs`; later files over earlier ones), then the flags (`settings.rs`).
//! `--validate` checks them and exits; otherwise the agent runs, and SIGHUP re-reads
//! the files and the TLS files (`reload.rs`).

mod file;
mod reload;
mod settings;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use schedstate_agent::{Agent, ClusterKey, Peers};
use schedstate_cli::output::{CliError, err};

use reload::{LogControl, Reloader};
use settings::{Layer, LogLevel, Settings};

/// Arguments of `agent`. Every setting is also a key of the configuration file
/// (`--config`); a flag given wins over the files, and the defaults shown apply when
/// neither sets it.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// A configuration file (TOML; the README's "Configuration file" section). May be
    /// given more than once: later files win over earlier ones, and flags over all of
    /// them. Relative paths in a file are taken from the file's directory.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Vec<PathBuf>,
    /// Check the settings (files and flags), the cluster key and TLS files and the
    /// data directory, print a summary and exit 0 — or the first problem and exit 1 —
    /// without starting the agent.
    #[arg(long)]
    pub validate: bool,
    /// This server's id (one of the ids in --peers) [default: 1].
    #[arg(long)]
    pub id: Option<u64>,
    /// Where to serve the HTTP API and the Raft RPCs (one port). Port 0 picks a free
    /// one (single-server clusters and tests) [default: 127.0.0.1:4646].
    #[arg(long)]
    pub bind: Option<SocketAddr>,
    /// The data directory (Raft log, snapshots, lock) [default: ./schedstate-agent].
    #[arg(long = "data", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Every server of the cluster, this one included:
    /// 1=127.0.0.1:4646,2=127.0.0.1:4647,3=127.0.0.1:4648. Without it, a cluster of
    /// this server alone.
    #[arg(long)]
    pub peers: Option<Peers>,
    /// The file holding the cluster key every server of the cluster is given (mode
    /// 0600; `schedstate keygen FILE` makes one). Raft RPCs without its MAC are
    /// refused. Required with more than one server, unless --dev or mutual TLS.
    #[arg(long, value_name = "FILE", env = "SCHEDSTATE_CLUSTER_KEY_FILE")]
    pub cluster_key_file: Option<PathBuf>,
    /// This server's TLS certificate (PEM). With --tls-key, the port speaks HTTPS only
    /// (API and Raft); reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) of the cluster: servers then verify each other's certificates
    /// (mutual TLS: a server certificate, server.<region>.schedstate, is needed to send
    /// Raft RPCs), and client certificates are verified when sent.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Require a client certificate of the CA on every API connection
    /// (--tls-verify-clients=false turns off what a file turned on).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub tls_verify_clients: Option<bool>,
    /// The region (the server role name in certificates is server.<region>.schedstate)
    /// [default: global].
    #[arg(long)]
    pub region: Option<String>,
    /// INSECURE development mode: ACL off (every API request served without a token)
    /// and several servers allowed without a cluster key, so anyone who can reach the
    /// port can read, write and send Raft RPCs. Refuses any non-loopback --bind.
    /// (--dev=false turns off what a file turned on.)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub dev: Option<bool>,
    /// How much the agent logs (RUST_LOG, when set, replaces it with its own
    /// directives) [default: info].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<LogLevel>,
    /// Open connections allowed from one IP address [default: 100].
    #[arg(long, value_name = "N")]
    pub max_conns_per_client: Option<usize>,
    /// Open connections allowed in all [default: 16384].
    #[arg(long, value_name = "N")]
    pub max_conns: Option<usize>,
    /// Blocking queries allowed to wait at once (more are answered 429)
    /// [default: 16384].
    #[arg(long, value_name = "N")]
    pub max_blocking_queries: Option<usize>,
    /// Event streams allowed open at once (more are answered 429) [default: 1024].
    #[arg(long, value_name = "N")]
    pub max_event_streams: Option<usize>,
    /// Blocking queries one client (an address, an IPv6 /64, a token) may have
    /// waiting [default: 4096].
    #[arg(long, value_name = "N")]
    pub max_blocking_queries_per_client: Option<usize>,
    /// Event streams one client (an address, an IPv6 /64, a token) may have open
    /// [default: 64].
    #[arg(long, value_name = "N")]
    pub max_event_streams_per_client: Option<usize>,
    /// The time one list or filtered read may take before it is answered 422
    /// BudgetExceeded (as 2s, 500ms) [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub scan_budget: Option<std::time::Duration>,
    /// The largest snapshot file a restore (`PUT /v1/operator/snapshot`) takes, in
    /// bytes (larger is answered 413; it also counts under the clients' body budgets)
    /// [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    pub max_snapshot_restore_bytes: Option<usize>,
    /// The newest store format this server reads: 3 (this release) or 2, to act as a
    /// server of the previous release in a rehearsal of a rolling upgrade — it refuses
    /// what that release cannot decode and holds the cluster's format at 2
    /// [default: 3].
    #[arg(long, value_name = "N")]
    pub max_format: Option<u32>,
}

impl AgentArgs {
    /// What the flags set.
    pub fn layer(&self) -> Layer {
        Layer {
            id: self.id,
            bind: self.bind,
            data: self.data.clone(),
            peers: self.peers.clone(),
            cluster_key_file: self.cluster_key_file.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_verify_clients: self.tls_verify_clients,
            region: self.region.clone(),
            dev: self.dev,
            log_level: self.log_level,
            max_conns_per_client: self.max_conns_per_client,
            max_conns: self.max_conns,
            max_blocking_queries: self.max_blocking_queries,
            max_blocking_queries_per_client: self.max_blocking_queries_per_client,
            max_event_streams: self.max_event_streams,
            max_event_streams_per_client: self.max_event_streams_per_client,
            scan_budget: self.scan_budget,
            max_snapshot_restore_bytes: self.max_snapshot_restore_bytes,
            max_format: self.max_format,
        }
    }

    /// The configuration files, absolute (so that SIGHUP reads the same files).
    fn config_files(&self) -> Result<Vec<PathBuf>, CliError> {
        self.config
            .iter()
            .map(|f| std::path::absolute(f).map_err(|e| err(format!("{}: {e}", f.display()))))
            .collect()
    }
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
    let files = args.config_files()?;
    let flags = args.layer();
    let settings = Settings::load(&files, &flags)?;
    if args.validate {
        settings.check()?;
        let sources = if files.is_empty() {
            "the flags".to_string()
        } else {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            names.join(", ")
        };
        println!(
            "configuration valid ({sources}): agent {} on {}, data {}, {} server(s), TLS {}, {}",
            settings.id,
            settings.bind,
            settings.data.display(),
            settings.peers.0.len(),
            if settings.tls.is_some() { "on" } else { "off" },
            if settings.dev {
                "DEV MODE (no ACL)"
            } else {
                "ACL on"
            },
        );
        return Ok(());
    }
    let log = LogControl::init(settings.log_level);
    let mut config = settings.agent_config()?;
    // SIGHUP is handled here: the files are re-read, then the TLS files.
    config.sighup_reloads_tls = false;
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
    let id = settings.id;
    let mut reloader = Reloader::new(files, flags, settings, log);
    runtime.block_on(async move {
        let hangups = reload::hangups();
        let agent = Agent::start(config)
            .await
            .map_err(|e| err(format!("agent: {e}")))?;
        println!("schedstate agent {id} serving {scheme}://{}", agent.addr());
        let failed = tokio::select! {
            () = stop_signal() => None,
            why = agent.failed() => Some(why),
            never = reloader.serve_hangups(hangups, &agent) => match never {},
        };
        if failed.is_none() {
            // A planned stop: the leadership goes to a caught-up voter first.
            agent.hand_over().await;
        }
        agent.shutdown().await;
        match failed {
            None => Ok(()),
            Some(why) => Err(err(format!("agent {id}: Raft stopped: {why}"))),
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
