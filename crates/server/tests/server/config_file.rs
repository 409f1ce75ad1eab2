//! `schedstate agent --config FILE`: `--validate` on good and bad files, and an agent
//! process started from a file (TLS, cluster key, paths relative to the file), a flag
//! over the file, the file edited and re-read on SIGHUP, stopped with SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use schedstate_agent::certs::{Ca, CertKind, write_pem_files};
use schedstate_agent::{Client, ClientTls, ClusterKey};

use crate::agent_procs::{AgentProc, DEADLINE, free_ports};

/// A directory with a cluster key and TLS files (`tls/`), and a configuration file
/// naming them by relative paths.
struct Setup {
    dir: tempfile::TempDir,
    port: u16,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::Builder::new()
            .prefix("schedstate-config-")
            .tempdir()
            .expect("temp dir");
        let tls = dir.path().join("tls");
        std::fs::create_dir(&tls).unwrap();
        let ca = Ca::create("config test CA", 2).expect("CA");
        write_pem_files(&tls, "ca", &ca).expect("CA files");
        let kind = CertKind::Server {
            region: "global".into(),
        };
        let cert = ca.issue(&kind, &[], &[], 2).expect("server cert");
        write_pem_files(&tls, "server", &cert).expect("server files");
        ClusterKey::write_new(&dir.path().join("cluster.key")).expect("cluster key");
        let port = free_ports(1)[0];
        let setup = Setup { dir, port };
        setup.write_config(100, "info");
        setup
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self) -> PathBuf {
        self.path("agent.toml")
    }

    fn write_config(&self, max_conns: usize, log_level: &str) {
        let text = format!(
            "id = 1\nbind = \"127.0.0.1:{port}\"\ndata_dir = \"data-from-file\"\n\
             cluster_key_file = \"cluster.key\"\nlog_level = \"{log_level}\"\n\n\
             [peers]\n1 = \"127.0.0.1:{port}\"\n\n\
             [tls]\ncert = \"tls/server.pem\"\nkey = \"tls/server-key.pem\"\nca = \"tls/ca.pem\"\n\n\
             [limits]\nmax_conns = {max_conns}\nscan_budget = \"3s\"\n",
            port = self.port
        );
        write_atomically(&self.config(), &text);
    }

    /// `schedstate agent --config agent.toml --validate` and `extra`, run from `/` (the
    /// file's relative paths are its directory's, not the working directory's).
    fn validate(&self, config: &Path, extra: &[&str]) -> Output {
        Command::new(crate::BIN)
            .current_dir("/")
            .arg("agent")
            .arg("--config")
            .arg(config)
            .arg("--validate")
            .args(extra)
            .env_remove("SCHEDSTATE_CLUSTER_KEY_FILE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("run schedstate agent --validate")
    }
}

fn write_atomically(path: &Path, text: &str) {
    let staging = path.with_extension("staging");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(staging, path).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Asserts `out` failed with `wanted` in its stderr.
fn refused(out: &Output, wanted: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "validated: {stderr}");
    assert!(stderr.contains(wanted), "{wanted:?} not in {stderr:?}");
}

#[test]
fn validate_accepts_a_good_file_and_refuses_bad_ones_with_their_reason() {
    let s = Setup::new();
    let out = s.validate(&s.config(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("configuration valid"), "{stdout}");
    assert!(stdout.contains("TLS on"), "{stdout}");
    // Nothing started: no data directory made.
    assert!(!s.path("data-from-file").exists());

    // The existing key checks: a cluster key or TLS key others may read.
    chmod(&s.path("cluster.key"), 0o644);
    refused(&s.validate(&s.config(), &[]), "cluster.key");
    chmod(&s.path("cluster.key"), 0o600);
    chmod(&s.path("tls/server-key.pem"), 0o644);
    refused(&s.validate(&s.config(), &[]), "server-key.pem");
    chmod(&s.path("tls/server-key.pem"), 0o600);
    // A TLS file that is not there; a data directory that is a file.
    refused(
        &s.validate(&s.config(), &["--tls-ca", "/nonexistent/ca.pem"]),
        "/nonexistent/ca.pem",
    );
    std::fs::write(s.path("data-from-file"), "").unwrap();
    refused(&s.validate(&s.config(), &[]), "is not a directory");
    std::fs::remove_file(s.path("data-from-file")).unwrap();
    // A file that is not there; an unknown key, with its file and line.
    refused(&s.validate(&s.path("missing.toml"), &[]), "missing.toml");
    let bad = s.path("bad.toml");
    std::fs::write(&bad, "id = 1\n[limits]\nmax_conections = 5\n").unwrap();
    refused(
        &s.validate(&bad, &[]),
        "bad.toml line 3, column 1: limits.max_conections: unknown field",
    );
    // What the agent itself refuses: several servers and neither key nor CA.
    std::fs::write(&bad, "[peers]\n1 = \"127.0.0.1:1\"\n2 = \"127.0.0.1:2\"\n").unwrap();
    refused(&s.validate(&bad, &[]), "needs a cluster key");
    // ... unless a flag gives the key.
    let out = s.validate(
        &bad,
        &[
            "--cluster-key-file",
            &s.path("cluster.key").display().to_string(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.validate(&s.config(), &[]).status.success());
}

/// Waits until `log` holds `wanted`.
async fn wait_log(log: &Path, wanted: &str) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(wanted) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{wanted:?} never logged:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn hangup(agent: &AgentProc) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(i32::try_from(agent.0.id()).expect("a pid fits i32"));
    kill(pid, Signal::SIGHUP).expect("SIGHUP");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_runs_from_a_config_file_and_rereads_it_on_sighup() {
    let s = Setup::new();
    let log = s.path("agent.log");
    let log_file = std::fs::File::create(&log).unwrap();
    // A flag over the file: the data directory.
    let agent = AgentProc(
        Command::new(crate::BIN)
            .current_dir("/")
            .arg("agent")
            .arg("--config")
            .arg(s.config())
            .arg("--data")
            .arg(s.path("data-from-flag"))
            .env_remove("SCHEDSTATE_CLUSTER_KEY_FILE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("spawn schedstate agent"),
    );
    let client = Client::with_tls(
        &format!("https://127.0.0.1:{}", s.port),
        None,
        Some(&ClientTls {
            ca_cert: Some(s.path("tls/ca.pem")),
            client_cert: None,
        }),
    )
    .expect("client");
    let start = Instant::now();
    while client.leader().await.ok().flatten().is_none() {
        assert!(
            start.elapsed() < DEADLINE,
            "no leader:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        s.path("data-from-flag").is_dir(),
        "the flag's data directory"
    );
    assert!(
        !s.path("data-from-file").exists(),
        "the file's is overridden"
    );

    // A limit and the log level changed: the level applies, the limit is reported.
    s.write_config(50, "debug");
    hangup(&agent);
    wait_log(&log, "limits.max_conns changed from 100 to 50").await;
    wait_log(&log, "needs a restart; still running with 100").await;
    wait_log(&log, "log_level is now debug").await;
    wait_log(&log, "TLS certificate, key and CA reloaded").await;
    // A file that no longer parses changes nothing; the agent goes on.
    write_atomically(&s.config(), "id = 1\nbogus = true\n");
    hangup(&agent);
    wait_log(&log, "nothing of the configuration files applied").await;
    wait_log(&log, "bogus: unknown field").await;
    assert!(client.leader().await.expect("leader").is_some());

    let status = agent.terminate();
    assert!(
        status.success(),
        "{status}:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// The value of `key=` in the unit file (its one line).
fn unit_line<'a>(unit: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    let mut lines = unit.lines().filter_map(|l| l.strip_prefix(prefix.as_str()));
    let value = lines.next().unwrap_or_else(|| panic!("no {key}= line"));
    assert!(lines.next().is_none(), "two {key}= lines");
    value
}

/// `examples/schedstate-agent.service` as systemd would run it: ExecStartPre (the
/// validation), ExecStart, ExecReload's signal, the stop signal — each command line
/// as written, with this test's binary and configuration file in place of
/// `/usr/local/bin/schedstate` and `/etc/schedstate/agent.toml`. And `systemd-analyze
/// verify` on it where systemd is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_systemd_unit_validates_starts_reloads_and_stops_the_agent() {
    let unit_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/schedstate-agent.service");
    let unit = std::fs::read_to_string(&unit_path).expect("the unit file");
    let s = Setup::new();
    let run = |line: &str| -> Command {
        let line = line.replace(
            "/etc/schedstate/agent.toml",
            &s.config().display().to_string(),
        );
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("/usr/local/bin/schedstate"), "{line}");
        let mut cmd = Command::new(crate::BIN);
        cmd.args(words)
            .current_dir("/")
            .env_remove("SCHEDSTATE_CLUSTER_KEY_FILE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        cmd
    };
    assert_eq!(unit_line(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(unit_line(&unit, "KillSignal"), "SIGTERM");

    let out = run(unit_line(&unit, "ExecStartPre"))
        .output()
        .expect("ExecStartPre");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = s.path("unit.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let agent = AgentProc(
        run(unit_line(&unit, "ExecStart"))
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("ExecStart"),
    );
    wait_log(&log, "schedstate agent 1 serving https://").await;
    hangup(&agent);
    wait_log(
        &log,
        "SIGHUP: configuration re-read; nothing needs a restart",
    )
    .await;
    let status = agent.terminate();
    assert!(status.success(), "{status}");

    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        let copy = s.path("schedstate-agent.service");
        std::fs::write(&copy, unit.replace("/usr/local/bin/schedstate", crate::BIN)).unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&copy)
            .output()
            .expect("systemd-analyze");
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "systemd-analyze verify: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
