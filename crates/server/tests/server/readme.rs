//! The README's secure setup, run as written: the shell block after the
//! `secure-setup` marker, with the ports 4646-4648 replaced by free ones and
//! `schedstate` being this build's binary, which hands each of these commands to this
//! build's `schedstate-server` (both are built by `cargo test` at the workspace root). Afterwards the cluster it left running is
//! checked from outside — the dashboards token reads and may not write, the revoked
//! management token is refused, the rotated certificate is served — and every agent it
//! started is killed, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use schedstate::model::Node;
use schedstate_agent::{Client, ClientTls, ReadOptions};

use crate::agent_procs::free_ports;

/// The shell block that follows the marker in the README.
fn secure_setup_block() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let after = readme
        .split_once("<!-- secure-setup:")
        .expect("the README marks its secure setup")
        .1;
    let block = after
        .split_once("```sh\n")
        .expect("a sh block after the marker")
        .1;
    block
        .split_once("\n```")
        .expect("the block ends")
        .0
        .to_string()
}

/// Kills the agents whose pid files the script wrote, whatever happens.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for i in 1..=3 {
            if let Ok(pid) = std::fs::read_to_string(self.0.join(format!("agent-{i}.pid")))
                && let Ok(pid) = pid.trim().parse::<i32>()
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

fn secret(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .expect("token file")
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_secure_setup_runs_as_written() {
    let mut script = secure_setup_block();
    let ports = free_ports(3);
    for (from, to) in [4646, 4647, 4648].iter().zip(&ports) {
        script = script.replace(&from.to_string(), &to.to_string());
    }
    let dir = tempfile::Builder::new()
        .prefix("schedstate-readme-")
        .tempdir()
        .expect("temp dir");
    let _reaper = Reaper(dir.path().to_path_buf());
    let bin = PathBuf::from(crate::BIN).with_file_name("schedstate");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo test` at the workspace root, which builds both binaries",
        bin.display()
    );
    let path = format!(
        "{}:{}",
        bin.parent().expect("the binary's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", path);
    for var in [
        "SCHEDSTATE_ADDR",
        "SCHEDSTATE_TOKEN",
        "SCHEDSTATE_TOKEN_FILE",
        "SCHEDSTATE_CACERT",
        "SCHEDSTATE_CLIENT_CERT",
        "SCHEDSTATE_CLIENT_KEY",
        "SCHEDSTATE_CLUSTER_KEY_FILE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("SCHEDSTATE_SERVER_BIN", crate::BIN);
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .expect("the setup finishes within two minutes")
    .expect("joined")
    .expect("bash runs");
    let logs: String = (1..=3)
        .map(|i| {
            std::fs::read_to_string(dir.path().join(format!("agent-{i}.log"))).unwrap_or_default()
        })
        .collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README's setup failed ({}):\n{stdout}\n{stderr}\n--- agents ---\n{logs}",
        out.status
    );
    // No secret was printed: each went to its file.
    for file in ["management.token", "dashboards.token", "admin.token"] {
        assert!(
            !stdout.contains(&secret(dir.path(), file)),
            "{file} printed"
        );
    }
    assert!(stdout.contains("revoked"), "{stdout}");

    let tls = ClientTls {
        ca_cert: Some(dir.path().join("tls/schedstate-agent-ca.pem")),
        client_cert: None,
    };
    let client = |i: usize, file: &str| {
        Client::with_tls(
            &format!("https://127.0.0.1:{}", ports[i]),
            Some(secret(dir.path(), file)),
            Some(&tls),
        )
        .expect("client")
    };
    // The dashboards token reads everywhere and writes nowhere.
    for i in 0..3 {
        client(i, "dashboards.token")
            .nodes(ReadOptions::default())
            .await
            .expect("the dashboards token reads");
        let e = client(i, "dashboards.token")
            .apply(&schedstate::state::Command::UpsertNode {
                node: Node::new("n1", "host-1"),
            })
            .await
            .unwrap_err();
        assert_eq!(
            (e.status(), e.kind()),
            (Some(403), Some("PermissionDenied"))
        );
    }
    // The rotated management token: the old one is refused, the new one works.
    let e = client(1, "management.token")
        .nodes(ReadOptions::stale())
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.kind()),
        (Some(403), Some("UnknownToken")),
        "{e}"
    );
    let admin = client(2, "admin.token");
    admin
        .apply(&schedstate::state::Command::UpsertNode {
            node: Node::new("n1", "host-1"),
        })
        .await
        .expect("the new management token writes");
    assert_eq!(admin.acl_tokens().await.unwrap().len(), 2);
    // Agent 1 serves its rotated certificate (the one the script moved in place).
    assert!(
        logs.contains("TLS certificate, key and CA reloaded"),
        "{logs}"
    );
}
