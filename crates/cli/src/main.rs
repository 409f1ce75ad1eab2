//! `schedstate`: the store's commands, run here, and the server's, handed to
//! `schedstate-server` (see the library's documentation).

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use schedstate_cli::{Handoff, ServerCommand, StoreCommand};

/// The binary's allocator: the demo's writes copy and free paths of kilobyte tree
/// nodes; mimalloc's per-thread free lists are cheaper there than glibc's
/// (BENCHMARKS.md, "mimalloc in the binary"). Built without its transparent-huge-page
/// advice (`no_thp`), which doubled a small process's resident set. The libraries
/// leave the choice to the application that links them.
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

#[derive(Debug, Subcommand)]
enum Top {
    #[command(flatten)]
    Store(StoreCommand),
    #[command(flatten)]
    Server(ServerCommand),
}

fn main() -> ExitCode {
    let mut command = Cli::command();
    let matches = command.get_matches_mut();
    schedstate_cli::source::reject_two_sources(&mut command, &matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    schedstate_cli::exit_code(match cli.command {
        Top::Store(command) => schedstate_cli::run(command, &Handoff),
        Top::Server(_) => Err(Handoff.exec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
