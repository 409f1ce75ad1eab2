//! The agent a load run measures: `schedstate agent --dev` started as a child process
//! on a loopback port the OS picks, in a directory of its own, so that its memory is
//! its own (read from `/proc/<pid>/status`) and not the load tool's. Dropping the
//! handle stops it — SIGTERM, SIGKILL if it has not exited within 10 s — and removes
//! its directory, on success or failure alike. Or one already running on loopback (to
//! run it under a profiler), which is left as it was found.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use schedstate_cli::output::{CliError, err};

use crate::agents::terminate;

/// How long an agent may take to print its address.
const START: Duration = Duration::from_secs(60);

/// The agent a run measures: started by the load tool, or one already running that
/// it attaches to (`--address`, `--agent-pid`), which it leaves running.
pub struct AgentProcess {
    child: Option<Child>,
    /// The directory made for a started agent, removed with it.
    dir: Option<PathBuf>,
    pid: u32,
    /// Where it serves (plain HTTP, ACL off: `--dev`, loopback only).
    pub addr: SocketAddr,
}

impl AgentProcess {
    /// Starts an agent in a new directory `dir` (which must not exist), allowing
    /// `conns` connections in all and `per_client` from one address, and `blocking`
    /// blocking queries (a run's waiters and some room), and waits until it prints the
    /// address it serves.
    pub fn start(
        dir: &Path,
        conns: usize,
        per_client: usize,
        blocking: usize,
    ) -> Result<AgentProcess, CliError> {
        std::fs::create_dir(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        let log_path = dir.join("agent.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| err(format!("{}: {e}", log_path.display())))?;
        let exe = std::env::current_exe().map_err(|e| err(format!("this program's path: {e}")))?;
        let child = Process::new(exe)
            .args(["agent", "--dev", "--bind", "127.0.0.1:0"])
            .arg("--data")
            .arg(dir.join("data"))
            .args(["--max-conns", &conns.to_string()])
            .args(["--max-conns-per-client", &per_client.to_string()])
            .args(["--max-blocking-queries", &blocking.to_string()])
            .env_remove("SCHEDSTATE_CLUSTER_KEY_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| err(format!("starting the agent: {e}")))?;
        let mut agent = AgentProcess {
            pid: child.id(),
            child: Some(child),
            dir: Some(dir.to_path_buf()),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        agent.addr = agent.read_address(&log_path)?;
        Ok(agent)
    }

    /// An agent already running at `addr` as process `pid` (its memory is read from
    /// `/proc/<pid>/status`); it is neither stopped nor removed.
    pub fn attach(addr: SocketAddr, pid: u32) -> Result<AgentProcess, CliError> {
        if !addr.ip().is_loopback() {
            return Err(err(format!(
                "--address {addr}: the load tool drives loopback agents only"
            )));
        }
        let agent = AgentProcess {
            child: None,
            dir: None,
            pid,
            addr,
        };
        agent.rss_kib()?;
        Ok(agent)
    }

    /// The address from the agent's first line, `schedstate agent 1 serving
    /// http://ADDR`; its log's end if it exits first.
    fn read_address(&mut self, log: &Path) -> Result<SocketAddr, CliError> {
        let stdout = self
            .child
            .as_mut()
            .and_then(|c| c.stdout.take())
            .ok_or_else(|| err("the agent has no stdout"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        // A thread, so that the wait has a deadline; it ends with the agent's stdout.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            for _ in lines {}
        });
        let failed = |why: String| {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect::<Vec<_>>();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            err(format!(
                "the agent did not start ({why}): {}",
                tail.join(" / ")
            ))
        };
        let line = match rx.recv_timeout(START) {
            Ok(Some(Ok(line))) => line,
            Ok(_) => return Err(failed("it exited".into())),
            Err(_) => return Err(failed(format!("no address within {START:?}"))),
        };
        line.rsplit("http://")
            .next()
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| failed(format!("unexpected first line {line:?}")))
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The agent's resident memory in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> Result<u64, CliError> {
        let path = format!("/proc/{}/status", self.pid());
        let text = std::fs::read_to_string(&path).map_err(|e| err(format!("{path}: {e}")))?;
        parse_rss_kib(&text).ok_or_else(|| err(format!("{path}: no VmRSS line")))
    }

    /// Stops the agent: SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        terminate(&child);
        let start = Instant::now();
        while matches!(child.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `VmRSS:    123456 kB` → 123456.
fn parse_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_resident_set_line() {
        let status = "Name:\tschedstate\nVmPeak:\t  999 kB\nVmRSS:\t   21804 kB\nThreads:\t4\n";
        assert_eq!(parse_rss_kib(status), Some(21_804));
        assert_eq!(parse_rss_kib("Name:\tx\n"), None);
    }
}
