//! The `schedstate` command line's store half: a simulated cluster on a durable store
//! (`demo`), and tools to look inside a data directory (`plugin status`, `volume
//! status`, `node status`, `job status`, `inspect`, `snapshot save` / `snapshot
//! restore`), and `repair` for one that no longer opens.
//!
//! The command line comes as two binaries, so that the first build of the README's
//! first command (`cargo run --release -- demo`) compiles the store and not the server
//! stack (openraft, axum, rustls, the agent):
//!
//! - `schedstate` (this package) runs the commands of this crate itself and hands
//!   every other command line — `agent`, `operator`, `acl`, `tls`, `keygen`, `bench`,
//!   `demo --cluster N`, a status command with `--address`, `inspect` of a replicated
//!   server's directory — to `schedstate-server` by `exec` ([`handoff`]);
//! - `schedstate-server` (`crates/server`) parses the same command line, runs the
//!   commands of this crate through [`run`] and the server commands itself, reaching
//!   them from here through [`ServerHalf`].
//!
//! Read commands load the directory with `DurableStore::open_read_only`: they take no
//! lock and change no file, so they work while a demo or an agent is writing. Errors
//! are one line on stderr (`error: …`) and exit code 1; usage errors are clap's (exit
//! code 2).
//!
//! This library is the binaries' shared code, not an API: it follows their needs.

pub mod catalog;
pub mod connect;
pub mod demo;
pub mod handoff;
pub mod inspect;
pub mod job_status;
pub mod output;
pub mod repair_cmd;
pub mod server_half;
pub mod sim;
pub mod snapshot_cmd;
pub mod source;
pub mod status;
pub mod volume_status;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

pub use handoff::Handoff;
use output::CliError;
pub use server_half::{RemoteReads, ServerHalf};

/// The data directory argument shared by every command.
#[derive(Debug, Clone, Args)]
pub struct DataDir {
    /// The data directory (snapshot, log segments, lock file).
    #[arg(long = "data", value_name = "DIR", default_value = "./schedstate-data")]
    pub dir: PathBuf,
}

/// `schedstate`'s command line: the store's commands, and the server's passed
/// through to `schedstate-server` (whose tests check that both binaries list the
/// same commands with the same summaries).
#[derive(Debug, Parser)]
#[command(name = "schedstate", version, about, long_about = None)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Top,
}

/// `schedstate`'s commands.
#[derive(Debug, Subcommand)]
pub enum Top {
    /// Run here.
    #[command(flatten)]
    Store(StoreCommand),
    /// Handed to `schedstate-server`.
    #[command(flatten)]
    Server(ServerCommand),
}

/// The process's command line parsed as `C`, or clap's usage error (exit code 2),
/// also for `--data` and `--address` given together (see
/// [`source::reject_two_sources`]).
pub fn parse_args<C: CommandFactory + FromArgMatches>() -> C {
    let mut command = C::command();
    let matches = command.get_matches_mut();
    source::reject_two_sources(&mut command, &matches);
    C::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The commands this crate runs (some hand their server cases to [`ServerHalf`]).
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
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
}

/// `plugin …`.
#[derive(Debug, Subcommand)]
pub enum PluginCmd {
    /// Without ID, every plugin; with ID (or a unique prefix), its details.
    Status(status::PluginArgs),
}

/// `volume …`.
#[derive(Debug, Subcommand)]
pub enum VolumeCmd {
    /// Without ID, every volume; with ID (or a unique prefix), its details and claims.
    Status(volume_status::VolumeArgs),
}

/// `node …`.
#[derive(Debug, Subcommand)]
pub enum NodeCmd {
    /// Without ID, every node; with ID (or a unique prefix), its details and fingerprints.
    Status(status::NodeArgs),
}

/// `job …`.
#[derive(Debug, Subcommand)]
pub enum JobCmd {
    /// Without ID, every job; with ID (or a unique prefix), its groups, plugins and
    /// allocations.
    Status(job_status::JobArgs),
}

/// The commands `schedstate-server` runs, as `schedstate` parses them: their names and
/// summaries for `--help`, and everything after the name left as it was given, for
/// the server binary to parse (`schedstate agent --help` prints the server's help).
/// `schedstate-server`'s tests check that each summary is the server command's.
#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// Run one server of a replicated cluster: the HTTP API (blocking queries, event
    /// stream) and Raft on one port, until SIGINT or SIGTERM.
    #[command(disable_help_flag = true)]
    Agent(Passthrough),
    /// Operate a running cluster: its Raft servers (list, add, remove, recover a joint
    /// configuration), through any agent's API.
    #[command(disable_help_flag = true)]
    Operator(Passthrough),
    /// ACL tokens: bootstrap a cluster once, then create, list, show and revoke
    /// tokens, through any agent.
    #[command(disable_help_flag = true)]
    Acl(Passthrough),
    /// A private CA and certificates for servers, client agents and CLI users
    /// (mutual TLS between servers, HTTPS for clients).
    #[command(disable_help_flag = true)]
    Tls(Passthrough),
    /// Write a new random cluster key to FILE (mode 0600, never overwriting), to give
    /// every server of a cluster with --cluster-key-file.
    #[command(disable_help_flag = true)]
    Keygen(Passthrough),
    /// Load tools: start an agent on loopback, drive it, report what it cost.
    #[command(disable_help_flag = true)]
    Bench(Passthrough),
}

/// A server command's arguments, unparsed.
#[derive(Debug, Args)]
pub struct Passthrough {
    /// The arguments, parsed by `schedstate-server`.
    #[arg(num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// Runs one of this crate's commands; `server` runs their server cases.
pub fn run(command: StoreCommand, server: &dyn ServerHalf) -> Result<(), CliError> {
    match command {
        StoreCommand::Demo(args) => demo::run(&args, server),
        StoreCommand::Plugin {
            command: PluginCmd::Status(args),
        } => status::plugin(&args, server),
        StoreCommand::Volume {
            command: VolumeCmd::Status(args),
        } => volume_status::volume(&args, server),
        StoreCommand::Node {
            command: NodeCmd::Status(args),
        } => status::node(&args, server),
        StoreCommand::Job {
            command: JobCmd::Status(args),
        } => job_status::job(&args, server),
        StoreCommand::Inspect(args) => inspect::run(&args, server),
        StoreCommand::Repair(args) => repair_cmd::run(&args),
        StoreCommand::Snapshot { command } => snapshot_cmd::run(&command),
    }
}

/// The process's exit code for a command's result, with the error on stderr as one
/// line.
pub fn exit_code(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
