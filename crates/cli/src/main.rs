//! `schedstate`: the store's commands, run here, and the server's, handed to
//! `schedstate-server` (see the library's documentation).

use std::process::ExitCode;

use schedstate_cli::{Cli, Handoff, Top};

/// The binary's allocator: the demo's writes copy and free paths of kilobyte tree
/// nodes; mimalloc's per-thread free lists are cheaper there than glibc's
/// (docs/benchmarks-journal.md, "mimalloc in the binary"). Built without its transparent-huge-page
/// advice (`no_thp`), which doubled a small process's resident set. The libraries
/// leave the choice to the application that links them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli: Cli = schedstate_cli::parse_args();
    schedstate_cli::exit_code(match cli.command {
        Top::Store(command) => schedstate_cli::run(command, &Handoff),
        Top::Server(_) => Err(Handoff.exec()),
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
