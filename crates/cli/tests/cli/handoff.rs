//! `schedstate` hands server command lines to `schedstate-server`: here to a stand-in
//! script that prints the arguments it got and exits with 3, so what is handed over,
//! and what is not, is visible exactly.

use std::os::unix::fs::PermissionsExt;
use std::process::Output;

use crate::support::{TempDir, demo, fails, schedstate};

/// A stand-in server in `dir`: prints `server: [arg] [arg] …` and `addr=…` (the
/// `SCHEDSTATE_ADDR` it was given), exits with 3.
fn stand_in(dir: &TempDir) -> String {
    let path = dir.join("schedstate-server");
    std::fs::write(
        &path,
        "#!/bin/sh\nprintf 'server:'\nfor a in \"$@\"; do printf ' [%s]' \"$a\"; done\nprintf '\\naddr=%s\\n' \"${SCHEDSTATE_ADDR-}\"\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

fn run(server: &str, args: &[&str], addr: Option<&str>) -> Output {
    let mut cmd = schedstate();
    cmd.env("SCHEDSTATE_SERVER_BIN", server).args(args);
    match addr {
        Some(a) => cmd.env("SCHEDSTATE_ADDR", a),
        None => cmd.env_remove("SCHEDSTATE_ADDR"),
    };
    cmd.output().expect("runs")
}

/// The stand-in's first line for `args`.
fn handed(args: &[&str]) -> String {
    let mut line = "server:".to_string();
    for a in args {
        line.push_str(&format!(" [{a}]"));
    }
    line
}

#[test]
fn server_commands_reach_the_server_exactly_as_given() {
    let dir = TempDir::new("handoff");
    let server = stand_in(&dir);
    let cases: [&[&str]; 9] = [
        &["agent", "--help"],
        &[
            "agent",
            "--id",
            "2",
            "--peers",
            "1=127.0.0.1:1,2=127.0.0.1:2",
            "--dev",
        ],
        &[
            "operator",
            "raft",
            "list-peers",
            "--address",
            "http://127.0.0.1:1",
        ],
        &["acl", "bootstrap", "--token-file", "a b"],
        &["tls", "ca", "create", "-h"],
        &["keygen", "key"],
        &["bench", "clients", "--"],
        &["demo", "--cluster", "3", "--seconds", "1"],
        &["plugin", "status", "--address", "http://127.0.0.1:1", "x"],
    ];
    for args in cases {
        let out = run(&server, args, None);
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stdout}");
        assert_eq!(stdout.lines().next(), Some(&*handed(args)), "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {:?}", out.stderr);
    }
}

#[test]
fn an_address_from_the_environment_goes_to_the_server_and_data_stays_here() {
    let dir = TempDir::new("handoff-env");
    let server = stand_in(&dir);
    let out = run(&server, &["node", "status"], Some("http://127.0.0.1:9"));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert_eq!(
        stdout,
        format!("{}\naddr=http://127.0.0.1:9\n", handed(&["node", "status"]))
    );
    // An explicit --data wins over the environment's address: read here.
    let store = TempDir::absent("store");
    demo(&store, &["--steps", "20", "--sync", "never"]);
    let out = run(
        &server,
        &["node", "status", "--data", store.arg()],
        Some("http://127.0.0.1:9"),
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains("server:"), "{stdout}");
    assert!(stdout.contains("ID"), "{stdout}");
}

#[test]
fn inspect_hands_over_a_servers_directory_and_reads_a_stores_itself() {
    let dir = TempDir::new("handoff-inspect");
    let server = stand_in(&dir);
    let raft = TempDir::new("raft");
    std::fs::write(raft.join("raft-meta"), b"").unwrap();
    let args = ["inspect", "--data", raft.arg()];
    let out = run(&server, &args, None);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().lines().next(),
        Some(&*handed(&args))
    );
    let store = TempDir::absent("store");
    demo(&store, &["--steps", "20", "--sync", "never"]);
    let out = run(&server, &["inspect", "--data", store.arg()], None);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("Last Applied"), "{stdout}");
}

#[test]
fn a_server_that_cannot_run_is_one_clear_error() {
    let e = fails(&["keygen", "k"]);
    assert!(
        e.starts_with("error: cannot run /nonexistent/schedstate-server: "),
        "{e}"
    );
}

#[test]
fn help_lists_the_server_commands_too() {
    let out = run("/nonexistent", &["--help"], None);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    for cmd in ["agent", "operator", "acl", "tls", "keygen", "bench"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(cmd)),
            "{cmd} missing from:\n{help}"
        );
    }
}
