//! `schedstate acl`: bootstrap a cluster's ACL once, and create, list, show and revoke
//! its tokens, through any agent.
//!
//! A new secret is printed once, or with `--output FILE` written to a file only its
//! owner can read (and not printed), which is what scripts should use.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use schedstate::model::AclScope;
use schedstate_agent::api::{AclTokenRequest, AclTokenView};
use schedstate_cli::connect::read_token_file;
use schedstate_cli::output::{CliError, err};

use crate::operator_cmd::AgentArgs;
use crate::remote::agent_error;
use crate::remote::command_runtime;

/// `acl`.
#[derive(Debug, Subcommand)]
pub enum AclCmd {
    /// Make the cluster's first management token (once per cluster).
    Bootstrap {
        /// Use the secret in this file instead of a random one (16-128 printable
        /// characters), for automation that must know it in advance.
        #[arg(long, value_name = "FILE")]
        secret_file: Option<PathBuf>,
        /// Write the new secret to this file (mode 0600, never overwriting) instead
        /// of printing it.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// How long to wait for the agent to listen and the cluster to have a leader
        /// (servers just started).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        wait: std::time::Duration,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Tokens: create, list, show, revoke (management scope).
    Token {
        #[command(subcommand)]
        command: TokenCmd,
    },
}

/// `acl token`.
#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Make a token.
    Create(CreateArgs),
    /// Every token (no secrets).
    List(AgentArgs),
    /// One token by accessor id, or `self` for the token you send.
    Info {
        /// The accessor id, or `self`.
        accessor: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Revoke a token by accessor id.
    Delete {
        /// The accessor id.
        accessor: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
}

/// `acl token create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A label for the token.
    #[arg(long, default_value = "")]
    pub name: String,
    /// What it may do, comma separated: read, write, operator, management.
    #[arg(long, value_delimiter = ',', required = true, value_parser = parse_scope)]
    pub scope: Vec<AclScope>,
    /// How long it is accepted (like 24h or 30d); forever without.
    #[arg(long)]
    pub ttl: Option<String>,
    /// Write the new secret to this file (mode 0600, never overwriting) instead of
    /// printing it.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

fn parse_scope(s: &str) -> Result<AclScope, String> {
    AclScope::from_name(s)
        .ok_or_else(|| format!("no scope {s:?}: read, write, operator or management"))
}

/// Writes `secret` to a new file only its owner can read.
pub fn write_secret(file: &Path, secret: &str) -> Result<(), CliError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options
        .open(file)
        .map_err(|e| err(format!("{}: {e}", file.display())))?;
    writeln!(f, "{secret}")
        .and_then(|()| f.sync_all())
        .map_err(|e| err(format!("{}: {e}", file.display())))
}

fn show(t: &AclTokenView, output: Option<&Path>) -> Result<(), CliError> {
    let scopes: Vec<&str> = t.scopes.iter().map(|s| s.name()).collect();
    println!("Accessor ID  = {}", t.accessor_id);
    match (&t.secret_id, output) {
        (Some(secret), Some(file)) => {
            write_secret(file, secret)?;
            println!("Secret ID    = (written to {})", file.display());
        }
        (Some(secret), None) => println!("Secret ID    = {secret}"),
        (None, _) => {}
    }
    println!("Name         = {}", t.name);
    println!("Type         = {}", t.token_type);
    println!("Scopes       = {}", scopes.join(","));
    println!("Create Time  = {}", t.create_time);
    println!(
        "Expiry Time  = {}",
        t.expiration_time.as_deref().unwrap_or("never")
    );
    println!("Create Index = {}", t.create_index);
    Ok(())
}

/// `acl`.
pub fn run(command: AclCmd) -> Result<(), CliError> {
    let runtime = command_runtime()?;
    runtime.block_on(async move {
        match command {
            AclCmd::Bootstrap {
                secret_file,
                output,
                wait,
                agent,
            } => {
                if let Some(file) = &output
                    && file.exists()
                {
                    return Err(err(format!(
                        "{} exists: not overwriting it",
                        file.display()
                    )));
                }
                let secret = secret_file.as_deref().map(read_token_file).transpose()?;
                let c = crate::connect::client(&agent.creds, &agent.address)?;
                // Right after the servers start (a script, a provisioning tool), they
                // may not listen or have a leader yet: wait for them, as long as the
                // answer says nothing was done.
                let start = std::time::Instant::now();
                let token = loop {
                    match c.acl_bootstrap(secret.as_deref()).await {
                        Ok(t) => break t,
                        Err(e)
                            if (e.changed_nothing() && e.status().is_none()
                                || e.kind() == Some("NoLeader"))
                                && start.elapsed() < wait =>
                        {
                            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                        }
                        Err(e) => return Err(agent_error(&agent.address, &e)),
                    }
                };
                show(&token, output.as_deref())
            }
            AclCmd::Token {
                command: TokenCmd::Create(a),
            } => {
                if let Some(file) = &a.output
                    && file.exists()
                {
                    return Err(err(format!(
                        "{} exists: not overwriting it",
                        file.display()
                    )));
                }
                let c = crate::connect::client(&a.agent.creds, &a.agent.address)?;
                let request = AclTokenRequest {
                    name: a.name,
                    scopes: a.scope,
                    expiration_ttl: a.ttl.map(serde_json::Value::String),
                    ..AclTokenRequest::default()
                };
                let token = c
                    .acl_create_token(&request)
                    .await
                    .map_err(|e| agent_error(&a.agent.address, &e))?;
                show(&token, a.output.as_deref())
            }
            AclCmd::Token {
                command: TokenCmd::List(agent),
            } => {
                let c = crate::connect::client(&agent.creds, &agent.address)?;
                let tokens = c
                    .acl_tokens()
                    .await
                    .map_err(|e| agent_error(&agent.address, &e))?;
                println!(
                    "{:<36}  {:<24}  {:<26}  Expires",
                    "Accessor ID", "Name", "Scopes"
                );
                for t in tokens {
                    let scopes: Vec<&str> = t.scopes.iter().map(|s| s.name()).collect();
                    println!(
                        "{:<36}  {:<24}  {:<26}  {}",
                        t.accessor_id,
                        t.name,
                        scopes.join(","),
                        t.expiration_time.as_deref().unwrap_or("never")
                    );
                }
                Ok(())
            }
            AclCmd::Token {
                command: TokenCmd::Info { accessor, agent },
            } => {
                let c = crate::connect::client(&agent.creds, &agent.address)?;
                let mut token = if accessor == "self" {
                    c.acl_token_self().await
                } else {
                    c.acl_token(&accessor).await
                }
                .map_err(|e| agent_error(&agent.address, &e))?;
                // `self` answers back the secret sent; not printed again.
                token.secret_id = None;
                show(&token, None)
            }
            AclCmd::Token {
                command: TokenCmd::Delete { accessor, agent },
            } => {
                let c = crate::connect::client(&agent.creds, &agent.address)?;
                c.acl_revoke(&accessor)
                    .await
                    .map_err(|e| agent_error(&agent.address, &e))?;
                println!("token {accessor} revoked");
                Ok(())
            }
        }
    })
}
