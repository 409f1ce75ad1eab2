//! `schedstate operator raft …`: the servers of a running cluster, as Nomad's
//! `operator raft` names them — list them, add one (it must catch up before it votes,
//! or it is taken out again), remove one, leave a joint configuration a lost leader
//! left behind (`recover`), or hand the leadership over (`transfer-leader`). Each is one call to an agent's API; the agent sends
//! changes to the leader.
//!
//! `schedstate operator snapshot save|restore FILE`: the cluster's state saved to a
//! snapshot file (`GET /v1/operator/snapshot`), or a saved file restored into every
//! server of a running cluster (`PUT /v1/operator/snapshot`); both need a management
//! token.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use schedstate_agent::Client;

use schedstate_agent::api::{PeerChange, PeerChangeDone};
use schedstate_cli::connect::Credentials;
use schedstate_cli::output::{CliError, err};

use crate::remote::{agent_error, command_runtime};

/// `operator`.
#[derive(Debug, Subcommand)]
pub enum OperatorCmd {
    /// The cluster's Raft servers.
    Raft {
        #[command(subcommand)]
        command: RaftCmd,
    },
    /// Save the cluster's state to a snapshot file, or restore one into the cluster.
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCmd,
    },
}

/// `operator snapshot`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Save the cluster's state (consistent: everything committed before the call) to
    /// FILE, a snapshot file in the store's format.
    Save {
        /// Where to write it (replaced whole, never left half written).
        file: PathBuf,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Restore FILE (as `save` wrote it) into every server of the cluster: checked
    /// entirely first (a bad file changes nothing), then replicated through the Raft
    /// log. Every index of the restored state is the restore's own index.
    Restore {
        /// The snapshot file.
        file: PathBuf,
        #[command(flatten)]
        agent: AgentArgs,
    },
}

/// `operator raft`.
#[derive(Debug, Subcommand)]
pub enum RaftCmd {
    /// Every server: id, address, whether it leads, whether it votes.
    ListPeers(AgentArgs),
    /// Add a server: a learner first, a voter once it caught up; taken out again if it
    /// does not within --wait.
    AddPeer {
        /// The new server's id.
        #[arg(long)]
        id: u64,
        /// The new server's address (host:port), as the others will dial it.
        #[arg(long, value_name = "HOST:PORT")]
        peer_address: String,
        /// How long it may take to catch up.
        #[arg(long, default_value = "30s")]
        wait: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Remove a server (never the last voter).
    RemovePeer {
        /// The server's id.
        #[arg(long)]
        id: u64,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Leave a joint configuration a lost leader left behind (nothing to do otherwise).
    Recover(AgentArgs),
    /// Hand the leadership to another voter (--to), or to the most caught-up one:
    /// writes pause for a round trip or two instead of an election.
    TransferLeader {
        /// The voter to hand over to.
        #[arg(long)]
        to: Option<u64>,
        #[command(flatten)]
        agent: AgentArgs,
    },
}

/// Which agent to ask.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Any agent of the cluster (http://host:port).
    #[arg(
        long,
        value_name = "URL",
        env = "SCHEDSTATE_ADDR",
        default_value = "http://127.0.0.1:4646"
    )]
    pub address: String,
    /// The token (operator scope) and TLS files.
    #[command(flatten)]
    pub creds: Credentials,
}

fn client(a: &AgentArgs) -> Result<Client, CliError> {
    crate::connect::client(&a.creds, &a.address)
}

/// `operator`.
pub fn run(command: OperatorCmd) -> Result<(), CliError> {
    let command = match command {
        OperatorCmd::Raft { command } => command,
        OperatorCmd::Snapshot { command } => return snapshot(command),
    };
    let runtime = command_runtime()?;
    runtime.block_on(async move {
        match command {
            RaftCmd::ListPeers(a) => {
                let c = client(&a)?;
                let config = c
                    .raft_configuration()
                    .await
                    .map_err(|e| agent_error(&a.address, &e))?;
                println!("{:<6} {:<28} {:<7} Voter", "ID", "Address", "Leader");
                for s in config.servers {
                    println!("{:<6} {:<28} {:<7} {}", s.id, s.address, s.leader, s.voter);
                }
                Ok(())
            }
            RaftCmd::AddPeer {
                id,
                peer_address,
                wait,
                agent,
            } => {
                change(
                    &agent,
                    PeerChange::Add {
                        id,
                        address: peer_address.clone(),
                        wait: Some(wait),
                    },
                )
                .await?;
                println!("server {id} at {peer_address} added: it caught up and votes");
                Ok(())
            }
            RaftCmd::RemovePeer { id, agent } => {
                change(&agent, PeerChange::Remove { id }).await?;
                println!("server {id} removed");
                Ok(())
            }
            RaftCmd::TransferLeader { to, agent } => {
                let done = client(&agent)?
                    .transfer_leader(to)
                    .await
                    .map_err(|e| agent_error(&agent.address, &e))?;
                println!("server {} leads now", done.leader);
                Ok(())
            }
            RaftCmd::Recover(agent) => {
                let done = change(&agent, PeerChange::Recover).await?;
                if done.left_joint == Some(true) {
                    println!("the joint configuration was left for its newer half");
                } else {
                    println!("the configuration was not joint: nothing to recover");
                }
                Ok(())
            }
        }
    })
}

async fn change(a: &AgentArgs, change: PeerChange) -> Result<PeerChangeDone, CliError> {
    client(a)?
        .change_peer(&change)
        .await
        .map_err(|e| agent_error(&a.address, &e))
}

/// `operator snapshot save|restore`.
fn snapshot(command: SnapshotCmd) -> Result<(), CliError> {
    let runtime = command_runtime()?;
    runtime.block_on(async move {
        match command {
            SnapshotCmd::Save { file, agent } => {
                let saved = client(&agent)?
                    .snapshot(false)
                    .await
                    .map_err(|e| agent_error(&agent.address, &e))?;
                schedstate::persist::segment::write_file_atomically(&file, &saved.value)
                    .map_err(|e| err(format!("{}: {e}", file.display())))?;
                println!(
                    "saved the state at index {} ({} bytes) to {}",
                    saved.index,
                    saved.value.len(),
                    file.display()
                );
                Ok(())
            }
            SnapshotCmd::Restore { file, agent } => {
                let bytes =
                    std::fs::read(&file).map_err(|e| err(format!("{}: {e}", file.display())))?;
                let done = client(&agent)?
                    .snapshot_restore(bytes)
                    .await
                    .map_err(|e| agent_error(&agent.address, &e))?;
                println!(
                    "restored {} ({} bytes) into the cluster at index {}",
                    file.display(),
                    done.bytes,
                    done.index
                );
                Ok(())
            }
        }
    })
}
