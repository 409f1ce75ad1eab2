//! Integration tests of `schedstate-server`, the command line with its server half:
//! agents as processes (`agent_procs.rs`), an agent from a configuration file, the cluster demo, status commands over
//! HTTP and TLS, `inspect` of a server's directory, the load tools, Nomad's own
//! clients against an agent, the web UI in a real browser (`ui.rs`), and the README's secure setup run as written through
//! `schedstate`, which hands each of its commands here.

mod agent_procs;
mod bench;
mod cluster;
mod config_file;
mod inspect_server;
mod nomad_compat;
mod readme;
mod remote;
mod ui;
// Shared with `schedstate`'s tests, whose helpers for store directories are not all
// needed here.
#[allow(dead_code)]
#[path = "../../../cli/tests/cli/support.rs"]
mod support;

/// The binary under test: the whole command line.
const BIN: &str = env!("CARGO_BIN_EXE_schedstate-server");
/// The binary it hands server commands to: itself (it hands nothing).
const SERVER_BIN: &str = BIN;
