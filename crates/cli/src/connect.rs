//! The credentials the command line presents to an agent: the ACL token (from a file
//! or `SCHEDSTATE_TOKEN`, never from the command line, where `ps` shows it to every
//! user of the machine) and, for `https://` addresses, the CA and client certificate.
//! Parsed here for every command that talks to an agent; `schedstate-server` turns
//! them into a client.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::output::{CliError, err};

/// The environment variable holding a token's secret (the `--token-file` alternative).
pub const TOKEN_ENV: &str = "SCHEDSTATE_TOKEN";

/// Credentials for an agent's API.
#[derive(Debug, Clone, Default, Args)]
pub struct Credentials {
    /// A file holding the ACL token's secret to send (else SCHEDSTATE_TOKEN from the
    /// environment). Never given on the command line, where other users see it.
    #[arg(long, value_name = "FILE", env = "SCHEDSTATE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA certificate (PEM) that signed the agents' certificates, for https://.
    #[arg(long, value_name = "FILE", env = "SCHEDSTATE_CACERT")]
    pub ca_cert: Option<PathBuf>,
    /// A client certificate (PEM) to present, for agents that require one.
    #[arg(long, value_name = "FILE", env = "SCHEDSTATE_CLIENT_CERT")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", env = "SCHEDSTATE_CLIENT_KEY")]
    pub client_key: Option<PathBuf>,
}

/// Reads a token's secret from `file`: its first line, trimmed; an empty one refused.
pub fn read_token_file(file: &Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| err(format!("token file {}: {e}", file.display())))?;
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    if secret.is_empty() {
        return Err(err(format!("token file {} is empty", file.display())));
    }
    Ok(secret)
}

impl Credentials {
    /// The token to send: `--token-file`, else `SCHEDSTATE_TOKEN`, else none. An
    /// empty variable is refused rather than taken as "no token".
    pub fn token(&self) -> Result<Option<String>, CliError> {
        if let Some(file) = &self.token_file {
            return read_token_file(file).map(Some);
        }
        match std::env::var(TOKEN_ENV) {
            Ok(t) if t.trim().is_empty() => Err(err(format!(
                "{TOKEN_ENV} is set but empty: unset it or give a token"
            ))),
            Ok(t) => Ok(Some(t.trim().to_string())),
            Err(_) => Ok(None),
        }
    }

    /// The client certificate and key, if given (both or neither).
    pub fn client_cert(&self) -> Result<Option<(PathBuf, PathBuf)>, CliError> {
        match (&self.client_cert, &self.client_key) {
            (Some(c), Some(k)) => Ok(Some((c.clone(), k.clone()))),
            (None, None) => Ok(None),
            _ => Err(err(
                "--client-cert and --client-key go together (SCHEDSTATE_CLIENT_CERT, SCHEDSTATE_CLIENT_KEY)",
            )),
        }
    }
}
