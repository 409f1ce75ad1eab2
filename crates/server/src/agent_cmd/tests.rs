//! The configuration file: every key against its flag, errors with file, line and
//! key, precedence, relative paths, what SIGHUP applies.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};

use super::AgentArgs;
use super::file::{self, FileError, Position};
use super::reload::compare;
use super::settings::{Layer, LogLevel, Settings};

#[derive(Debug, Parser)]
struct Cmd {
    #[command(flatten)]
    args: AgentArgs,
}

fn flags(line: &[&str]) -> AgentArgs {
    let mut argv = vec!["agent"];
    argv.extend_from_slice(line);
    Cmd::try_parse_from(argv).expect("flags parse").args
}

/// A file setting every key to something other than its default.
const EVERY_KEY: &str = r#"
id = 2
bind = "127.0.0.2:5000"
data_dir = "data"
region = "eu"
cluster_key_file = "cluster.key"
dev = true
log_level = "debug"
max_format = 2

[peers]
1 = "127.0.0.1:5000"
2 = "127.0.0.2:5000"

[tls]
cert = "tls/cert.pem"
key = "tls/key.pem"
ca = "/etc/ca.pem"
verify_clients = true

[limits]
max_conns_per_client = 7
max_conns = 70
max_blocking_queries = 700
max_blocking_queries_per_client = 77
max_event_streams = 7000
max_event_streams_per_client = 777
scan_budget = "1m30s"
max_snapshot_restore_bytes = 7777777
"#;

/// The same settings as flags, run from `/etc/schedstate` (relative paths are the
/// cwd's for flags, the file's directory's in a file).
const EVERY_FLAG: &[&str] = &[
    "--id=2",
    "--bind=127.0.0.2:5000",
    "--data=/etc/schedstate/data",
    "--region=eu",
    "--cluster-key-file=/etc/schedstate/cluster.key",
    "--dev",
    "--log-level=debug",
    "--max-format=2",
    "--peers=1=127.0.0.1:5000,2=127.0.0.2:5000",
    "--tls-cert=/etc/schedstate/tls/cert.pem",
    "--tls-key=/etc/schedstate/tls/key.pem",
    "--tls-ca=/etc/ca.pem",
    "--tls-verify-clients",
    "--max-conns-per-client=7",
    "--max-conns=70",
    "--max-blocking-queries=700",
    "--max-blocking-queries-per-client=77",
    "--max-event-streams=7000",
    "--max-event-streams-per-client=777",
    "--scan-budget=90s",
    "--max-snapshot-restore-bytes=7777777",
];

fn parse(text: &str) -> Layer {
    file::parse(text, Path::new("/etc/schedstate")).unwrap_or_else(|e| panic!("{e:?}"))
}

/// Every key of `layer` is set. Lists every field with no `..`: a new setting does
/// not compile here until it is added to the file, the example and this test.
fn assert_every_key_set(layer: &Layer) {
    let Layer {
        id: Some(_),
        bind: Some(_),
        data: Some(_),
        peers: Some(_),
        cluster_key_file: Some(_),
        tls_cert: Some(_),
        tls_key: Some(_),
        tls_ca: Some(_),
        tls_verify_clients: Some(_),
        region: Some(_),
        dev: Some(_),
        log_level: Some(_),
        max_conns_per_client: Some(_),
        max_conns: Some(_),
        max_blocking_queries: Some(_),
        max_blocking_queries_per_client: Some(_),
        max_event_streams: Some(_),
        max_event_streams_per_client: Some(_),
        scan_budget: Some(_),
        max_snapshot_restore_bytes: Some(_),
        max_format: Some(_),
    } = layer
    else {
        panic!("a key is missing: {layer:#?}");
    };
}

#[test]
fn a_file_with_every_key_gives_the_settings_of_the_same_flags() {
    let from_file = parse(EVERY_KEY);
    assert_every_key_set(&from_file);
    let from_flags = flags(EVERY_FLAG).layer();
    assert_every_key_set(&from_flags);
    assert_eq!(from_file, from_flags);
    let settings = Settings::resolve(from_file).expect("resolves");
    assert_eq!(settings, Settings::resolve(from_flags).unwrap());
    assert_eq!(settings.scan_budget, Duration::from_secs(90));
    assert_eq!(settings.peers.0[&2], "127.0.0.2:5000");
    assert_eq!(
        settings.tls,
        Some((
            PathBuf::from("/etc/schedstate/tls/cert.pem"),
            PathBuf::from("/etc/schedstate/tls/key.pem")
        ))
    );
    // And the flags above are every flag the agent has (but --config, --validate).
    let given: Vec<&str> = EVERY_FLAG
        .iter()
        .map(|f| f.trim_start_matches("--").split('=').next().unwrap())
        .collect();
    for arg in Cmd::command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if !["config", "validate", "help"].contains(&long) {
            assert!(
                given.contains(&long),
                "--{long} has no key in the test file"
            );
        }
    }
}

#[test]
fn the_example_file_is_valid_and_sets_every_key() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/agent.toml");
    let layer = file::read(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_every_key_set(&layer);
    let settings = Settings::resolve(layer).expect("resolves");
    assert_eq!(settings.peers.0.len(), 3);
    assert_eq!(settings.data, PathBuf::from("/var/lib/schedstate"));
    // Its relative paths are next to it.
    let dir = path.parent().unwrap();
    assert_eq!(settings.cluster_key_file, Some(dir.join("cluster.key")));
    // The README shows it whole.
    let readme = std::fs::read_to_string(dir.join("../README.md")).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        readme.contains(&format!("```toml\n{text}```\n")),
        "README.md's example differs from examples/agent.toml"
    );
}

/// The error of `text`: (line, key, message).
fn error(text: &str) -> (usize, Option<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, text).unwrap();
    match file::read(&path) {
        Err(e @ FileError::Invalid { .. }) => {
            let shown = e.to_string();
            assert!(shown.starts_with(&path.display().to_string()), "{shown}");
            let FileError::Invalid {
                at: Position { line, .. },
                key,
                message,
                ..
            } = e
            else {
                unreachable!()
            };
            (line, key, message)
        }
        other => panic!("{text:?}: {other:?}"),
    }
}

#[test]
fn an_unknown_key_is_an_error_naming_it_and_its_line() {
    let (line, key, message) = error("id = 1\nbinds = \"127.0.0.1:1\"\n");
    assert_eq!((line, key.as_deref()), (2, Some("binds")));
    assert!(message.contains("unknown field `binds`"), "{message}");
    let (line, key, message) = error("id = 1\n\n[limits]\nmax_conns = 5\nmax_conn = 5\n");
    assert_eq!((line, key.as_deref()), (5, Some("limits.max_conn")));
    assert!(message.contains("unknown field `max_conn`"), "{message}");
    let (line, key, _) = error("[tls]\ncert = \"c\"\nkey = \"k\"\ncaa = \"x\"\n");
    assert_eq!((line, key.as_deref()), (4, Some("tls.caa")));
    let (line, key, _) = error("[acl]\nenabled = true\n");
    assert_eq!((line, key.as_deref()), (1, Some("acl")));
}

#[test]
fn a_bad_type_or_value_is_an_error_naming_its_key() {
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[limits]\nmax_conns = \"many\"\n",
            2,
            "limits.max_conns",
            "invalid type",
        ),
        (
            "[limits]\n\nmax_conns = 0\n",
            3,
            "limits.max_conns",
            "nonzero",
        ),
        (
            "[limits]\nscan_budget = \"2x\"\n",
            2,
            "limits.scan_budget",
            "not a duration",
        ),
        (
            "[limits]\nscan_budget = \"0s\"\n",
            2,
            "limits.scan_budget",
            "above zero",
        ),
        (
            "[limits]\nscan_budget = 2\n",
            2,
            "limits.scan_budget",
            "invalid type",
        ),
        ("id = 0\n", 1, "id", "nonzero"),
        ("id = -3\n", 1, "id", "invalid value"),
        ("bind = \"nowhere\"\n", 1, "bind", "socket address"),
        ("dev = \"yes\"\n", 1, "dev", "invalid type"),
        ("log_level = \"loud\"\n", 1, "log_level", "unknown variant"),
        ("data_dir = \"\"\n", 1, "data_dir", "empty path"),
        ("region = \"\"\n", 1, "region", "empty region"),
        (
            "[peers]\n1 = \"a:1\"\n2 = \"host\"\n",
            3,
            "peers.2",
            "no port",
        ),
        (
            "[peers]\n1 = \"a:1\"\nx = \"b:1\"\n",
            3,
            "peers.x",
            "not a number",
        ),
        ("[peers]\n0 = \"a:1\"\n", 2, "peers.0", "start at 1"),
        (
            "[tls]\nverify_clients = 1\n",
            2,
            "tls.verify_clients",
            "invalid type",
        ),
    ];
    for (text, want_line, want_key, want_message) in cases {
        let (line, key, message) = error(text);
        assert_eq!(
            (line, key.as_deref()),
            (*want_line, Some(*want_key)),
            "{text:?}: {message}"
        );
        assert!(message.contains(want_message), "{text:?}: {message}");
    }
    // Not TOML at all: the line, no key.
    let (line, _, _) = error("id = 1\nbind = \n");
    assert_eq!(line, 2);
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let e = file::read(Path::new("/nonexistent/agent.toml")).unwrap_err();
    assert!(matches!(e, FileError::Read { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("configuration file /nonexistent/agent.toml: "),
        "{e}"
    );
    let e = Settings::load(
        &[PathBuf::from("/nonexistent/agent.toml")],
        &Layer::default(),
    )
    .unwrap_err();
    assert!(e.0.contains("/nonexistent/agent.toml"), "{e}");
}

#[test]
fn flags_win_over_files_and_later_files_over_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("base.toml");
    let second = dir.path().join("override.toml");
    std::fs::write(
        &first,
        "id = 3\nbind = \"127.0.0.1:7000\"\ndev = true\n[limits]\nmax_conns = 10\nmax_event_streams = 20\n",
    )
    .unwrap();
    std::fs::write(&second, "[limits]\nmax_event_streams = 30\n").unwrap();
    let files = [first, second];

    let none = flags(&[]).layer();
    let s = Settings::load(&files, &none).unwrap();
    assert_eq!((s.id, s.max_conns, s.max_event_streams), (3, 10, 30));
    assert!(s.dev);
    // Unset everywhere: the defaults.
    assert_eq!(s.max_blocking_queries, 16_384);
    assert_eq!(s.log_level, LogLevel::Info);
    assert_eq!(s.peers.0[&3], "127.0.0.1:7000");

    let over = flags(&["--max-conns=99", "--dev=false", "--bind=127.0.0.1:7001"]).layer();
    let s = Settings::load(&files, &over).unwrap();
    assert_eq!((s.id, s.max_conns, s.max_event_streams), (3, 99, 30));
    assert!(!s.dev);
    assert_eq!(s.bind.port(), 7001);
    // Without peers anywhere, this server alone at the address it binds.
    assert_eq!(s.peers.0[&3], "127.0.0.1:7001");
}

#[test]
fn tls_settings_that_go_together_are_checked_across_sources() {
    let dir = Path::new("/etc/schedstate");
    let file = file::parse("[tls]\ncert = \"c.pem\"\n", dir).unwrap();
    let e = Settings::resolve(file.clone()).unwrap_err();
    assert!(e.0.contains("needs its key"), "{e}");
    // The key from a flag completes the file's certificate.
    let s = Settings::resolve(flags(&["--tls-key=/k.pem"]).layer().over(file)).unwrap();
    assert_eq!(
        s.tls,
        Some((
            PathBuf::from("/etc/schedstate/c.pem"),
            PathBuf::from("/k.pem")
        ))
    );
    let e = Settings::resolve(flags(&["--tls-ca=/ca.pem"]).layer()).unwrap_err();
    assert!(e.0.contains("needs the server's certificate"), "{e}");
    let e = Settings::resolve(
        flags(&["--tls-cert=/c", "--tls-key=/k", "--tls-verify-clients"]).layer(),
    )
    .unwrap_err();
    assert!(e.0.contains("needs a CA"), "{e}");
}

#[test]
fn sighup_applies_the_log_level_and_reports_the_rest_as_needing_a_restart() {
    let running = Settings::resolve(parse(EVERY_KEY)).unwrap();
    assert_eq!(compare(&running, &running), Default::default());

    let edited = EVERY_KEY
        .replace("log_level = \"debug\"", "log_level = \"warn\"")
        .replace("max_conns = 70", "max_conns = 71")
        .replace("ca = \"/etc/ca.pem\"", "ca = \"/etc/ca2.pem\"");
    let found = compare(&running, &Settings::resolve(parse(&edited)).unwrap());
    assert_eq!(found.log_level, Some(LogLevel::Warn));
    let keys: Vec<(&str, &str, &str)> = found
        .restart_needed
        .iter()
        .map(|c| (c.key, c.from.as_str(), c.to.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("tls.ca", "/etc/ca.pem", "/etc/ca2.pem"),
            ("limits.max_conns", "70", "71"),
        ]
    );
}
