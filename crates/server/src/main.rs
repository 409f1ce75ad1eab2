//! `schedstate-server`: the whole `schedstate` command line, the server's commands
//! included — `agent`, `operator`, `acl`, `tls`, `keygen`, `bench`, `demo --cluster
//! N`, the status commands over `--address`, `inspect` of a server's directory.
//! `schedstate` hands those command lines here by `exec`; the store's commands run
//! here too, through `schedstate_cli::run` (see that crate for the split and why).
//!
//! The server commands reach an agent over its HTTP API (`--address URL` or
//! `SCHEDSTATE_ADDR`, with `--token-file` or `SCHEDSTATE_TOKEN`; `--ca-cert` for
//! https), or start agents (`agent`, `demo --cluster`, `bench`).

mod acl_cmd;
mod agent_cmd;
mod agents;
mod bench;
mod cluster_demo;
mod connect;
mod inspect_server;
mod operator_cmd;
mod remote;
mod tls_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use schedstate_cli::connect::Credentials;
use schedstate_cli::demo::DemoArgs;
use schedstate_cli::inspect::InspectArgs;
use schedstate_cli::output::CliError;
use schedstate_cli::{RemoteReads, ServerHalf, StoreCommand};

/// The binary's allocator. A replicated server's writes copy and free paths of
/// kilobyte tree nodes from several threads at once; mimalloc's per-thread free lists
/// take 18–30 % off the CPU per commit of the glibc allocator in `raft_workload`
/// (docs/benchmarks-journal.md, "mimalloc in the binary"). Built without its transparent-huge-page
/// advice (`no_thp`), which doubled a small server's resident set. The libraries leave
/// the choice to the application that links them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An embedded MVCC state store for cluster schedulers: a demo, tools to look inside a
/// data directory, and a replicated server.
#[derive(Debug, Parser)]
#[command(name = "schedstate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

/// The store's commands (`schedstate_cli`) and the server's (here). Each server
/// command's summary is the one `schedstate_cli::ServerCommand` shows (tested).
#[derive(Debug, Subcommand)]
enum Top {
    #[command(flatten)]
    Store(StoreCommand),
    /// Run one server of a replicated cluster: the HTTP API (blocking queries, event
    /// stream) and Raft on one port, until SIGINT or SIGTERM.
    Agent(agent_cmd::AgentArgs),
    /// Operate a running cluster: its Raft servers (list, add, remove, recover a joint
    /// configuration), through any agent's API.
    Operator {
        #[command(subcommand)]
        command: operator_cmd::OperatorCmd,
    },
    /// ACL tokens: bootstrap a cluster once, then create, list, show and revoke
    /// tokens, through any agent.
    Acl {
        #[command(subcommand)]
        command: acl_cmd::AclCmd,
    },
    /// A private CA and certificates for servers, client agents and CLI users
    /// (mutual TLS between servers, HTTPS for clients).
    Tls {
        #[command(subcommand)]
        command: tls_cmd::TlsCmd,
    },
    /// Write a new random cluster key to FILE (mode 0600, never overwriting), to give
    /// every server of a cluster with --cluster-key-file.
    Keygen(agent_cmd::KeygenArgs),
    /// Load tools: start an agent on loopback, drive it, report what it cost.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCmd,
    },
}

/// The server cases of the store's commands, run in this process.
struct Linked;

impl ServerHalf for Linked {
    fn cluster_demo(&self, args: &DemoArgs, servers: usize) -> Result<(), CliError> {
        cluster_demo::run(args, servers)
    }

    fn inspect_server(&self, args: &InspectArgs) -> Result<(), CliError> {
        inspect_server::run(args)
    }

    fn remote(&self, address: &str, creds: &Credentials) -> Result<Box<dyn RemoteReads>, CliError> {
        let client = connect::client(creds, address)?;
        Ok(Box::new(remote::AgentReads::new(client)?))
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Top::Store(command) => schedstate_cli::run(command, &Linked),
        Top::Agent(args) => agent_cmd::run(args),
        Top::Keygen(args) => agent_cmd::keygen(&args),
        Top::Operator { command } => operator_cmd::run(command),
        Top::Acl { command } => acl_cmd::run(command),
        Top::Tls { command } => tls_cmd::run(command),
        Top::Bench { command } => bench::run(command),
    }
}

fn main() -> ExitCode {
    schedstate_cli::exit_code(run(schedstate_cli::parse_args()))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `schedstate --help` shows the server commands with the summaries they have
    /// here, and both binaries know the same commands.
    #[test]
    fn both_binaries_list_the_same_commands_with_the_same_summaries() {
        let summaries = |c: clap::Command| -> Vec<(String, String)> {
            c.get_subcommands()
                .map(|s| {
                    let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
                    (s.get_name().to_string(), about)
                })
                .collect()
        };
        let mut light = summaries(schedstate_cli::Cli::command());
        let mut full = summaries(Cli::command());
        light.sort();
        full.sort();
        assert_eq!(light, full);
        assert_eq!(full.len(), 14);
    }
}
