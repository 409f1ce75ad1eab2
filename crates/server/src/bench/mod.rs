//! `schedstate bench`: load tools that start an agent on loopback, drive it, and
//! report what it cost. Each stops by itself, bounded in count and time.
//!
//! | file | what |
//! |---|---|
//! | `clients.rs` | `bench clients`: N blocked clients, writes with and without them |
//! | `agent_process.rs` | the measured agent: a child process, its RSS, stopped on drop |
//! | `long_poll.rs` | one blocking query on its own connection from a chosen source address |
//! | `report.rs` | percentiles, medians of runs, text and JSON |

mod agent_process;
mod clients;
mod long_poll;
mod report;

use clap::Subcommand;
use schedstate_cli::output::{CliError, err};

use report::Report;

/// `bench` subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Start an agent on loopback, block N clients on it (one connection and one
    /// `GET /v1/node/{id}?index=…&wait=…` each), write to nodes they do not watch and
    /// to some they do, and report the agent's RSS per blocked client, commit latency
    /// with and without them, wake latency, and false wakes. Exits 1 if any client woke
    /// falsely or was not woken.
    Clients(clients::ClientsArgs),
}

/// `bench`.
pub fn run(cmd: BenchCmd) -> Result<(), CliError> {
    match cmd {
        BenchCmd::Clients(args) => run_clients(&args),
    }
}

fn run_clients(args: &clients::ClientsArgs) -> Result<(), CliError> {
    args.check()?;
    // One descriptor per client here (the agent raises its own limit).
    let limit = schedstate_agent::raise_open_file_limit()
        .map_err(|e| err(format!("the open-file limit: {e}")))?;
    if (limit.after as usize) < args.clients + 256 {
        return Err(err(format!(
            "the open-file limit is {} (hard limit included): too low for {} clients",
            limit.after, args.clients
        )));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| err(format!("starting the runtime: {e}")))?;
    let mut runs = Vec::with_capacity(args.runs);
    for i in 0..args.runs {
        let dir =
            std::env::temp_dir().join(format!("schedstate-bench-{}-{}", std::process::id(), i + 1));
        let run = runtime.block_on(async {
            tokio::time::timeout(args.timeout, clients::run_once(args, &dir)).await
        });
        let report = match run {
            Ok(r) => r?,
            Err(_) => {
                return Err(err(format!(
                    "run {} took longer than --timeout {}",
                    i + 1,
                    humantime::format_duration(args.timeout)
                )));
            }
        };
        if !args.json {
            eprintln!(
                "run {} of {} done in {:.1} s",
                i + 1,
                args.runs,
                report.seconds
            );
        }
        runs.push(report);
    }
    let command = std::iter::once("schedstate".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let report = Report::new(command, runs);
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| err(format!("encoding the report: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", report.text());
    }
    if report.clean() {
        Ok(())
    } else {
        Err(err("false or missed wakes (see the report)"))
    }
}
