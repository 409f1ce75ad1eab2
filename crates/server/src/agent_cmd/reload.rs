//! SIGHUP: the configuration files are read again and stacked under the same flags;
//! what can change in a running agent changes, what cannot is logged as needing a
//! restart (never silently kept); then the TLS files are read again, as before.
//!
//! Live: `log_level`, and the *contents* of the TLS certificate, key and CA files
//! (rotate a certificate by writing the new one over the old paths). Everything else
//! — addresses, ids, peers, the data directory, the cluster key file, the TLS file
//! paths, `dev`, region, limits — is fixed when the agent starts: a change is logged
//! with its old and new value, and the agent goes on with the old one. A file that no
//! longer parses changes nothing (its error is logged).

use std::convert::Infallible;
use std::path::PathBuf;

use schedstate_agent::Agent;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::{Registry, reload};

use super::settings::{Change, Layer, LogLevel, Settings};

/// The log filter, and whether the configuration sets it (`RUST_LOG` unset).
pub struct LogControl {
    handle: Option<reload::Handle<Targets, Registry>>,
    from_env: bool,
}

/// The filter for `level`: the agent's crates at that level, others at `warn`, and
/// openraft off (it logs every failed heartbeat to a down peer as an error; the agent
/// logs what matters — leader changes, snapshot installs, refusals). RUST_LOG
/// `openraft=warn` brings it back.
fn filter(level: LogLevel) -> Targets {
    let l = level.as_str();
    format!("warn,openraft=off,schedstate={l},schedstate_agent={l},schedstate_raft={l}")
        .parse()
        .expect("the log filter parses")
}

impl LogControl {
    /// Logging to stderr, filtered by `RUST_LOG` (`target=level` directives, as in
    /// `warn,schedstate_raft=debug`) when it is set, else by `level`.
    pub fn init(level: LogLevel) -> LogControl {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;

        let mut from_env = false;
        let targets = match std::env::var("RUST_LOG") {
            Ok(directives) if !directives.trim().is_empty() => {
                match directives.parse::<Targets>() {
                    Ok(filter) => {
                        from_env = true;
                        filter
                    }
                    Err(e) => {
                        eprintln!(
                            "warning: RUST_LOG={directives:?} ignored ({e}); logging at {}",
                            level.as_str()
                        );
                        filter(level)
                    }
                }
            }
            _ => filter(level),
        };
        let (targets, handle) = reload::Layer::new(targets);
        let format = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .compact();
        let installed = tracing_subscriber::registry()
            .with(targets)
            .with(format)
            .try_init()
            .is_ok();
        LogControl {
            handle: installed.then_some(handle),
            from_env,
        }
    }

    fn set(&self, level: LogLevel) -> Result<(), String> {
        if self.from_env {
            return Err("RUST_LOG is set and wins over log_level".into());
        }
        match &self.handle {
            Some(h) => h.reload(filter(level)).map_err(|e| e.to_string()),
            None => Err("logging is not this command's".into()),
        }
    }
}

/// The SIGHUPs the process receives (none where it cannot listen).
#[cfg(unix)]
pub type Hangups = Option<tokio::signal::unix::Signal>;
/// No SIGHUP off Unix.
#[cfg(not(unix))]
pub type Hangups = ();

/// Starts taking SIGHUP (within a runtime): from here on, a SIGHUP no longer ends the
/// process, and waits for [`Reloader::serve_hangups`].
pub fn hangups() -> Hangups {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot listen for SIGHUP: the configuration and TLS files are not reloaded"
                );
                None
            }
        }
    }
}

/// What SIGHUP found in the files.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reread {
    /// Changed settings the running agent cannot take: a restart applies them.
    pub restart_needed: Vec<Change>,
    /// The new log level, when it changed.
    pub log_level: Option<LogLevel>,
}

/// Re-reads the configuration on SIGHUP.
pub struct Reloader {
    files: Vec<PathBuf>,
    flags: Layer,
    running: Settings,
    log: LogControl,
}

impl Reloader {
    /// For an agent started with `running`, from `files` under `flags`.
    pub fn new(files: Vec<PathBuf>, flags: Layer, running: Settings, log: LogControl) -> Self {
        Reloader {
            files,
            flags,
            running,
            log,
        }
    }

    /// Reads the files again; compares with what runs.
    pub fn reread(&self) -> Result<Reread, String> {
        let new = Settings::load(&self.files, &self.flags).map_err(|e| e.0)?;
        Ok(compare(&self.running, &new))
    }

    /// Handles each SIGHUP until the process ends: the files, then the TLS files.
    /// `hangups` is made before the agent starts ([`hangups`]), so that a SIGHUP
    /// sent as soon as the agent serves is handled, not the end of the process.
    pub async fn serve_hangups(&mut self, hangups: Hangups, agent: &Agent) -> Infallible {
        #[cfg(unix)]
        if let Some(mut hup) = hangups {
            while hup.recv().await.is_some() {
                self.hangup(agent);
            }
        }
        #[cfg(not(unix))]
        let _ = (hangups, agent);
        std::future::pending().await
    }

    fn hangup(&mut self, agent: &Agent) {
        if !self.files.is_empty() {
            match self.reread() {
                Ok(found) => self.apply(found),
                Err(e) => tracing::error!(
                    "SIGHUP: {e}; nothing of the configuration files applied, the agent \
                     goes on as it was"
                ),
            }
        }
        if let Some(tls) = agent.tls() {
            match tls.reload() {
                Ok(()) => tracing::info!("SIGHUP: TLS certificate, key and CA reloaded"),
                Err(e) => tracing::error!(
                    error = %e,
                    "SIGHUP: TLS reload failed; still serving the previous certificate"
                ),
            }
        }
    }

    fn apply(&mut self, found: Reread) {
        for c in &found.restart_needed {
            tracing::warn!(
                "SIGHUP: {} changed from {} to {} in the configuration: it needs a restart; \
                 still running with {}",
                c.key,
                c.from,
                c.to,
                c.from
            );
        }
        if let Some(level) = found.log_level {
            match self.log.set(level) {
                Ok(()) => {
                    self.running.log_level = level;
                    tracing::warn!("SIGHUP: log_level is now {}", level.as_str());
                }
                Err(why) => {
                    tracing::warn!("SIGHUP: log_level {} not applied: {why}", level.as_str())
                }
            }
        }
        if found.restart_needed.is_empty() {
            tracing::info!("SIGHUP: configuration re-read; nothing needs a restart");
        }
    }
}

/// What differs between the running settings and new ones, sorted into what applies
/// live and what needs a restart.
pub fn compare(running: &Settings, new: &Settings) -> Reread {
    let mut out = Reread::default();
    for c in running.changes(new) {
        if c.key == "log_level" {
            out.log_level = Some(new.log_level);
        } else {
            out.restart_needed.push(c);
        }
    }
    out
}
