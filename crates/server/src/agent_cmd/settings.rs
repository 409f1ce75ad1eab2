//! The agent's settings from their three sources, lowest first: the defaults, the
//! configuration files (`--config`, later ones over earlier ones), the flags (and
//! the environment variables that stand for flags). A [`Layer`] is what one source
//! sets; [`Settings`] is what the agent runs with once they are stacked.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schedstate_agent::tls::{TlsFiles, TlsOptions};
use schedstate_agent::{AgentConfig, ClusterKey, Limits, Peers, Tls};
use schedstate_cli::output::{CliError, err};
use serde::Deserialize;

/// How much the agent logs (of its own crates; `RUST_LOG` overrides it whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Each request's and RPC's details.
    Debug,
    /// One line per event that matters (the default).
    Info,
    /// Only what may need an operator.
    Warn,
    /// Only failures.
    Error,
}

impl LogLevel {
    /// Its name in `RUST_LOG` directives.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// What one source sets: a configuration file or the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layer {
    pub id: Option<u64>,
    pub bind: Option<SocketAddr>,
    pub data: Option<PathBuf>,
    pub peers: Option<Peers>,
    pub cluster_key_file: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub tls_verify_clients: Option<bool>,
    pub region: Option<String>,
    pub dev: Option<bool>,
    pub log_level: Option<LogLevel>,
    pub max_conns_per_client: Option<usize>,
    pub max_conns: Option<usize>,
    pub max_blocking_queries: Option<usize>,
    pub max_blocking_queries_per_client: Option<usize>,
    pub max_event_streams: Option<usize>,
    pub max_event_streams_per_client: Option<usize>,
    pub scan_budget: Option<Duration>,
    pub max_snapshot_restore_bytes: Option<usize>,
    pub max_format: Option<u32>,
}

impl Layer {
    /// `self` where it sets a value, `below` where it does not.
    pub fn over(self, below: Layer) -> Layer {
        Layer {
            id: self.id.or(below.id),
            bind: self.bind.or(below.bind),
            data: self.data.or(below.data),
            peers: self.peers.or(below.peers),
            cluster_key_file: self.cluster_key_file.or(below.cluster_key_file),
            tls_cert: self.tls_cert.or(below.tls_cert),
            tls_key: self.tls_key.or(below.tls_key),
            tls_ca: self.tls_ca.or(below.tls_ca),
            tls_verify_clients: self.tls_verify_clients.or(below.tls_verify_clients),
            region: self.region.or(below.region),
            dev: self.dev.or(below.dev),
            log_level: self.log_level.or(below.log_level),
            max_conns_per_client: self.max_conns_per_client.or(below.max_conns_per_client),
            max_conns: self.max_conns.or(below.max_conns),
            max_blocking_queries: self.max_blocking_queries.or(below.max_blocking_queries),
            max_blocking_queries_per_client: self
                .max_blocking_queries_per_client
                .or(below.max_blocking_queries_per_client),
            max_event_streams: self.max_event_streams.or(below.max_event_streams),
            max_event_streams_per_client: self
                .max_event_streams_per_client
                .or(below.max_event_streams_per_client),
            scan_budget: self.scan_budget.or(below.scan_budget),
            max_snapshot_restore_bytes: self
                .max_snapshot_restore_bytes
                .or(below.max_snapshot_restore_bytes),
            max_format: self.max_format.or(below.max_format),
        }
    }
}

/// Everything `schedstate agent` runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub id: u64,
    pub bind: SocketAddr,
    pub data: PathBuf,
    /// Every server; without peers in any source, this server alone at `bind`.
    pub peers: Peers,
    pub cluster_key_file: Option<PathBuf>,
    /// Certificate and key (both or neither).
    pub tls: Option<(PathBuf, PathBuf)>,
    pub tls_ca: Option<PathBuf>,
    pub tls_verify_clients: bool,
    pub region: String,
    pub dev: bool,
    pub log_level: LogLevel,
    pub max_conns_per_client: usize,
    pub max_conns: usize,
    pub max_blocking_queries: usize,
    pub max_blocking_queries_per_client: usize,
    pub max_event_streams: usize,
    pub max_event_streams_per_client: usize,
    pub scan_budget: Duration,
    pub max_snapshot_restore_bytes: usize,
    /// The newest store format this server reads (rolling upgrades).
    pub max_format: u32,
}

/// A setting that differs between two [`Settings`]: its key in the file, the running
/// value and the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: &'static str,
    pub from: String,
    pub to: String,
}

impl Settings {
    /// The settings `files` (in order, later over earlier) and then `flags` give,
    /// over the defaults.
    pub fn load(files: &[PathBuf], flags: &Layer) -> Result<Settings, CliError> {
        let mut stacked = Layer::default();
        for file in files {
            let layer = super::file::read(file).map_err(|e| err(e.to_string()))?;
            stacked = layer.over(stacked);
        }
        Settings::resolve(flags.clone().over(stacked))
    }

    /// Fills what `layer` leaves unset with the defaults, and checks what goes
    /// together: a TLS certificate needs its key, a CA or client verification needs
    /// the certificate, client verification the CA.
    pub fn resolve(layer: Layer) -> Result<Settings, CliError> {
        let limits = Limits::default();
        let id = layer.id.unwrap_or(1);
        let bind = layer
            .bind
            .unwrap_or_else(|| "127.0.0.1:4646".parse().expect("the default address"));
        let peers = match layer.peers {
            Some(p) => p,
            None => format!("{id}={bind}")
                .parse()
                .map_err(|e| err(format!("{e}")))?,
        };
        let tls = match (layer.tls_cert, layer.tls_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(err(
                    "a TLS certificate (--tls-cert, tls.cert) needs its key (--tls-key, tls.key)",
                ));
            }
            (None, Some(_)) => {
                return Err(err(
                    "a TLS key (--tls-key, tls.key) needs its certificate (--tls-cert, tls.cert)",
                ));
            }
        };
        if layer.tls_ca.is_some() && tls.is_none() {
            return Err(err(
                "a TLS CA (--tls-ca, tls.ca) needs the server's certificate and key \
                 (--tls-cert and --tls-key, tls.cert and tls.key)",
            ));
        }
        let tls_verify_clients = layer.tls_verify_clients.unwrap_or(false);
        if tls_verify_clients && layer.tls_ca.is_none() {
            return Err(err(
                "verifying clients (--tls-verify-clients, tls.verify_clients) needs a CA \
                 (--tls-ca, tls.ca)",
            ));
        }
        let newest = schedstate_raft::NEWEST_FORMAT;
        let max_format = layer.max_format.unwrap_or(newest);
        if !(schedstate_raft::OLDEST_CLUSTER_FORMAT..=newest).contains(&max_format) {
            return Err(err(format!(
                "max_format {max_format} (--max-format, max_format): this release reads store \
                 formats {} to {newest}",
                schedstate_raft::OLDEST_CLUSTER_FORMAT
            )));
        }
        Ok(Settings {
            id,
            bind,
            data: layer
                .data
                .unwrap_or_else(|| PathBuf::from("./schedstate-agent")),
            peers,
            cluster_key_file: layer.cluster_key_file,
            tls,
            tls_ca: layer.tls_ca,
            tls_verify_clients,
            region: layer
                .region
                .unwrap_or_else(|| schedstate_agent::tls::DEFAULT_REGION.to_string()),
            dev: layer.dev.unwrap_or(false),
            log_level: layer.log_level.unwrap_or(LogLevel::Info),
            max_conns_per_client: layer
                .max_conns_per_client
                .unwrap_or(limits.conns_per_client),
            max_conns: layer.max_conns.unwrap_or(limits.conns),
            max_blocking_queries: layer
                .max_blocking_queries
                .unwrap_or(limits.blocking_queries),
            max_blocking_queries_per_client: layer
                .max_blocking_queries_per_client
                .unwrap_or(limits.blocking_queries_per_client),
            max_event_streams: layer.max_event_streams.unwrap_or(limits.event_streams),
            max_event_streams_per_client: layer
                .max_event_streams_per_client
                .unwrap_or(limits.event_streams_per_client),
            scan_budget: layer.scan_budget.unwrap_or(limits.scan_budget),
            max_snapshot_restore_bytes: layer
                .max_snapshot_restore_bytes
                .unwrap_or(limits.snapshot_restore_bytes),
            max_format,
        })
    }

    /// The TLS options, if TLS is on.
    pub fn tls_options(&self) -> Option<TlsOptions> {
        self.tls.as_ref().map(|(cert, key)| {
            let mut tls = TlsOptions::new(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: self.tls_ca.clone(),
            });
            tls.verify_clients = self.tls_verify_clients;
            tls.region = self.region.clone();
            tls
        })
    }

    /// The agent's configuration: reads the cluster key file (refused if others may
    /// read it). The TLS files are read when the agent starts.
    pub fn agent_config(&self) -> Result<AgentConfig, CliError> {
        let mut config =
            AgentConfig::new(self.id, self.bind, self.data.clone(), self.peers.clone());
        config.dev = self.dev;
        config.acl = !self.dev;
        config.region = self.region.clone();
        config.tls = self.tls_options();
        if let Some(file) = &self.cluster_key_file {
            config.cluster_key = Some(ClusterKey::from_file(file).map_err(|e| err(e.to_string()))?);
        }
        config.limits = Limits {
            conns_per_client: self.max_conns_per_client,
            conns: self.max_conns,
            blocking_queries: self.max_blocking_queries,
            event_streams: self.max_event_streams,
            blocking_queries_per_client: self.max_blocking_queries_per_client,
            event_streams_per_client: self.max_event_streams_per_client,
            scan_budget: self.scan_budget,
            snapshot_restore_bytes: self.max_snapshot_restore_bytes,
            ..Limits::default()
        };
        config.server.max_format = self.max_format;
        Ok(config)
    }

    /// Everything the agent checks before it binds, without starting it: the
    /// configuration (ids, peers, a cluster key or mutual TLS, `dev` on loopback,
    /// limits), the cluster key file, the TLS files (readable, the key private to its
    /// owner and matching the certificate, the certificate valid now and from the
    /// CA), and the data directory (a directory if it exists). Not whether the
    /// address is free: the running agent holds it while a new configuration is
    /// validated for its restart.
    pub fn check(&self) -> Result<(), CliError> {
        let config = self.agent_config()?;
        config.validate().map_err(|e| err(e.to_string()))?;
        if let Some(opts) = config.tls.clone() {
            Tls::load(opts).map_err(|e| err(format!("TLS: {e}")))?;
        }
        check_data_dir(&self.data)
    }

    /// The settings that differ from `new`, by their key in the file.
    pub fn changes(&self, new: &Settings) -> Vec<Change> {
        let mut out = Vec::new();
        let mut diff = |key: &'static str, from: String, to: String| {
            if from != to {
                out.push(Change { key, from, to });
            }
        };
        let path = |p: &Option<PathBuf>| p.as_deref().map_or("(none)".into(), show);
        let (a, b) = (self, new);
        diff("id", a.id.to_string(), b.id.to_string());
        diff("bind", a.bind.to_string(), b.bind.to_string());
        diff("data_dir", show(&a.data), show(&b.data));
        diff("peers", peers(&a.peers), peers(&b.peers));
        diff(
            "cluster_key_file",
            path(&a.cluster_key_file),
            path(&b.cluster_key_file),
        );
        let cert = |s: &Settings| path(&s.tls.as_ref().map(|t| t.0.clone()));
        let key = |s: &Settings| path(&s.tls.as_ref().map(|t| t.1.clone()));
        diff("tls.cert", cert(a), cert(b));
        diff("tls.key", key(a), key(b));
        diff("tls.ca", path(&a.tls_ca), path(&b.tls_ca));
        let flag = |v: bool| v.to_string();
        diff(
            "tls.verify_clients",
            flag(a.tls_verify_clients),
            flag(b.tls_verify_clients),
        );
        diff("region", a.region.clone(), b.region.clone());
        diff(
            "max_format",
            a.max_format.to_string(),
            b.max_format.to_string(),
        );
        diff("dev", flag(a.dev), flag(b.dev));
        diff(
            "log_level",
            a.log_level.as_str().into(),
            b.log_level.as_str().into(),
        );
        let n = |v: usize| v.to_string();
        for (key, from, to) in [
            (
                "limits.max_conns_per_client",
                a.max_conns_per_client,
                b.max_conns_per_client,
            ),
            ("limits.max_conns", a.max_conns, b.max_conns),
            (
                "limits.max_blocking_queries",
                a.max_blocking_queries,
                b.max_blocking_queries,
            ),
            (
                "limits.max_blocking_queries_per_client",
                a.max_blocking_queries_per_client,
                b.max_blocking_queries_per_client,
            ),
            (
                "limits.max_event_streams",
                a.max_event_streams,
                b.max_event_streams,
            ),
            (
                "limits.max_event_streams_per_client",
                a.max_event_streams_per_client,
                b.max_event_streams_per_client,
            ),
            (
                "limits.max_snapshot_restore_bytes",
                a.max_snapshot_restore_bytes,
                b.max_snapshot_restore_bytes,
            ),
        ] {
            diff(key, n(from), n(to));
        }
        diff(
            "limits.scan_budget",
            humantime::format_duration(a.scan_budget).to_string(),
            humantime::format_duration(b.scan_budget).to_string(),
        );
        out
    }
}

fn show(p: &Path) -> String {
    p.display().to_string()
}

fn peers(p: &Peers) -> String {
    let items: Vec<String> = p.0.iter().map(|(id, a)| format!("{id}={a}")).collect();
    items.join(",")
}

/// The data directory is a directory if it exists (the agent makes it otherwise).
fn check_data_dir(dir: &Path) -> Result<(), CliError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(err(format!(
            "the data directory {} is not a directory",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(format!("the data directory {}: {e}", dir.display()))),
    }
}
