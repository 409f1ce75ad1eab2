//! `schedstate`: a simulated cluster on a durable store (`demo`), and tools to look
//! inside a data directory (`plugin status`, `volume status`, `node status`,
//! `job status`, `inspect`, `snapshot save` / `snapshot restore`), and `repair` for one that no
//! longer opens.
//!
//! Read commands load the directory with `DurableStore::open_read_only` (`inspect` an
//! agent's with `schedstate_raft::inspect_dir`): they take no lock and change no file,
//! so they work while a demo or an agent is writing. The status commands
//! also read from a running agent instead (`--address URL` or `SCHEDSTATE_ADDR`, with
//! `--token-file` or `SCHEDSTATE_TOKEN`; `--ca-cert` for https), with the same output (`source.rs`). Errors are
//! one line on stderr (`error: …`) and exit code 1; usage errors are clap's (exit
//! code 2).

mod acl_cmd;
mod agent_cmd;
mod agents;
mod bench;
mod catalog;
mod cluster_demo;
mod connect;
mod demo;
mod inspect;
mod inspect_server;
mod job_status;
mod operator_cmd;
mod output;
mod repair_cmd;
mod sim;
mod snapshot_cmd;
mod source;
mod status;
mod tls_cmd;
mod volume_status;

use std::path::PathBuf;
use std::process::ExitCode;

/// The binary's allocator. A replicated server's writes copy and free paths of
/// kilobyte tree nodes from several threads at once; mimalloc's per-thread free lists
/// take 18–30 % off the CPU per commit of the glibc allocator in `raft_workload`
/// (BENCHMARKS.md, "mimalloc in the binary"). Built without its transparent-huge-page
/// advice (`no_thp`), which doubled a small server's resident set. The libraries leave
/// the choice to the application that links them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use output::CliError;

/// An embedded MVCC state store for cluster schedulers: a demo, and tools to look
/// inside a data directory.
#[derive(Debug, Parser)]
#[command(name = "schedstate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

/// The data directory argument shared by every command.
#[derive(Debug, Clone, Args)]
pub struct DataDir {
    /// The data directory (snapshot, log segments, lock file).
    #[arg(long = "data", value_name = "DIR", default_value = "./schedstate-data")]
    pub dir: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Top {
    /// Run a simulated cluster against a durable store in DIR, with a blocking query
    /// watching one plugin; running it again continues from the stored state.
    Demo(demo::DemoArgs),
    /// CSI plugins: a table of all, or one plugin's details.
    Plugin {
        #[command(subcommand)]
        command: PluginCmd,
    },
    /// CSI volumes: a table of all, or one volume's details with its claims.
    Volume {
        #[command(subcommand)]
        command: VolumeCmd,
    },
    /// Client nodes with their CSI fingerprints.
    Node {
        #[command(subcommand)]
        command: NodeCmd,
    },
    /// Jobs and the CSI plugins they run: a table of all, or one job's groups, what it
    /// expects of each plugin, and its allocations.
    Job {
        #[command(subcommand)]
        command: JobCmd,
    },
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
    /// Formats, indexes, row counts and files of a data directory: an embedded store's,
    /// or a replicated server's (its Raft log and snapshots; read-only, also while the
    /// agent runs).
    Inspect(inspect::InspectArgs),
    /// Cut a data directory that no longer opens (damage in its log or snapshot) back
    /// to its last provable state; the damaged files move to DIR/damaged-N.
    Repair(repair_cmd::RepairArgs),
    /// Save the state of a data directory to a snapshot file, or start a data
    /// directory from one.
    Snapshot {
        #[command(subcommand)]
        command: snapshot_cmd::SnapshotCmd,
    },
    /// Load tools: start an agent on loopback, drive it, report what it cost.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCmd,
    },
}

#[derive(Debug, Subcommand)]
enum PluginCmd {
    /// Without ID, every plugin; with ID (or a unique prefix), its details.
    Status(status::PluginArgs),
}

#[derive(Debug, Subcommand)]
enum VolumeCmd {
    /// Without ID, every volume; with ID (or a unique prefix), its details and claims.
    Status(volume_status::VolumeArgs),
}

#[derive(Debug, Subcommand)]
enum NodeCmd {
    /// Without ID, every node; with ID (or a unique prefix), its details and fingerprints.
    Status(status::NodeArgs),
}

#[derive(Debug, Subcommand)]
enum JobCmd {
    /// Without ID, every job; with ID (or a unique prefix), its groups, plugins and
    /// allocations.
    Status(job_status::JobArgs),
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Top::Demo(args) => demo::run(&args),
        Top::Plugin {
            command: PluginCmd::Status(args),
        } => status::plugin(&args),
        Top::Volume {
            command: VolumeCmd::Status(args),
        } => volume_status::volume(&args),
        Top::Node {
            command: NodeCmd::Status(args),
        } => status::node(&args),
        Top::Job {
            command: JobCmd::Status(args),
        } => job_status::job(&args),
        Top::Agent(args) => agent_cmd::run(args),
        Top::Keygen(args) => agent_cmd::keygen(&args),
        Top::Operator { command } => operator_cmd::run(command),
        Top::Acl { command } => acl_cmd::run(command),
        Top::Tls { command } => tls_cmd::run(command),
        Top::Inspect(args) => inspect::run(&args),
        Top::Repair(args) => repair_cmd::run(&args),
        Top::Snapshot { command } => snapshot_cmd::run(&command),
        Top::Bench { command } => bench::run(command),
    }
}

fn main() -> ExitCode {
    let mut command = Cli::command();
    let matches = command.get_matches_mut();
    source::reject_two_sources(&mut command, &matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
