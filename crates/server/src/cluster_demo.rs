//! `demo --cluster N`: the simulated cluster driven through the HTTP API of N agent
//! processes, a blocking query over HTTP printing its wakes, the leader killed with
//! SIGKILL mid-run, the new leader checked against every acknowledged write, and the
//! killed agent restarted and caught up.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use schedstate_agent::{Client, ReadOptions};
use schedstate_cli::catalog::{PLUGINS, WATCHED_PLUGIN};
use schedstate_cli::demo::{DemoArgs, invocation, wake_line};
use schedstate_cli::output::{CliError, emit, err, thousands};
use schedstate_cli::sim::Cluster;
use schedstate_cli::source::plugin_stubs;
use schedstate_cli::status::plugin_table;

use crate::agents::{Agents, PATIENCE, Remote, ports};

/// Where the agents' directories go: beside the single-store demo's, never in it.
fn cluster_dir(args: &DemoArgs) -> PathBuf {
    let dir = &args.data.dir;
    let name = dir.file_name().map_or_else(
        || "schedstate-data".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    dir.with_file_name(format!("{name}-cluster"))
}

fn say(line: &str) {
    println!("{line}");
}

/// The blocking query on the watched plugin over HTTP, asking the agents in turn
/// (from `first`) when one stops answering. Returns (wakes, last index).
fn watch(clients: Vec<Client>, first: usize, stop: Arc<AtomicBool>) -> (u64, u64) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return (0, 0);
    };
    let id = PLUGINS[WATCHED_PLUGIN].id;
    let (mut at, mut min, mut wakes, mut printed) = (first, 0u64, 0u64, 0u64);
    let mut failing_since: Option<Instant> = None;
    let mut last_print = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let c = &clients[at % clients.len()];
        let opts = ReadOptions::blocking(min, Duration::from_millis(500));
        match rt.block_on(c.plugin(id, opts)) {
            Ok(r) if r.index > min => {
                if let Some(since) = failing_since.take() {
                    say(&format!(
                        "  watch: answered again by {} after {} ms",
                        c.address(),
                        since.elapsed().as_millis()
                    ));
                }
                let first_answer = min == 0;
                min = r.index;
                if first_answer {
                    continue;
                }
                wakes += 1;
                let due = wakes <= 5 || last_print.elapsed() >= Duration::from_secs(1);
                if due && printed < 30 {
                    printed += 1;
                    last_print = Instant::now();
                    say(&wake_line(wakes, r.index, id, r.value.as_ref()));
                }
            }
            Ok(_) => {}
            Err(e) => {
                if failing_since.is_none() {
                    failing_since = Some(Instant::now());
                    let why = e.kind().map_or_else(|| e.to_string(), str::to_string);
                    say(&format!(
                        "  watch: {} did not answer ({why}); asking the others",
                        c.address()
                    ));
                }
                at += 1;
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
    (wakes, min)
}

/// `demo --cluster N`.
pub fn run(args: &DemoArgs, n: usize) -> Result<(), CliError> {
    let dir = cluster_dir(args);
    if args.fresh && dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    }
    let ports = ports(&dir, n)?;
    let mut agents = Agents::start(&dir, ports)?;
    let addresses: Vec<String> = (0..n).map(|i| agents.address(i)).collect();
    say(&format!(
        "schedstate cluster demo: {n} agents in {} ({}), {} nodes, {} s, seed {}",
        dir.display(),
        addresses.join(" "),
        args.nodes,
        args.seconds,
        args.seed
    ));
    let remote = Remote::connect(&addresses, &agents.ca_cert(), &dir.join("management.token"))?;
    let leader = remote.leader;
    say(&format!(
        "  leader: agent {} at {}; resuming after index {}",
        leader + 1,
        addresses[leader],
        thousands(remote.mirror.snapshot().view().last_applied())
    ));
    say(&format!(
        "Watching plugin {} with a blocking query over HTTP (GET /v1/plugin/csi/{}?index=…):",
        PLUGINS[WATCHED_PLUGIN].id, PLUGINS[WATCHED_PLUGIN].id
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let clients = remote.clients.clone();
        let stop = stop.clone();
        // Through a follower: a consistent read there waits for a read index from the
        // leader, then blocks on the follower itself.
        let first = (leader + 1) % n;
        thread::spawn(move || watch(clients, first, stop))
    };

    let start = Instant::now();
    let total = Duration::from_secs(args.seconds);
    let started_at = remote.mirror.snapshot().view().last_applied();
    let mut cluster = Cluster::new(remote, args.nodes as usize, args.seed);
    let mut killed: Option<(usize, Instant, u64)> = None;
    let mut restarted: Option<(usize, Instant, u64)> = None;
    let mut failover: Option<Duration> = None;
    let mut caught_up: Option<Duration> = None;
    let result = (|| -> Result<(), CliError> {
        cluster.boot()?;
        for e in cluster.events.drain(..) {
            say(&format!("  {e}"));
        }
        let v = cluster.db.mirror.snapshot();
        say(&format!(
            "  index {}: cluster up: {} nodes, {} plugins, {} volumes",
            thousands(cluster.next - 1),
            v.view().nodes().count(),
            v.view().csi_plugins().count(),
            v.view().csi_volumes().count()
        ));
        let mut steps = 0u64;
        loop {
            let progress = match args.steps {
                Some(s) => steps * 1000 / s.max(1),
                None => (start.elapsed().as_millis() * 1000 / total.as_millis().max(1)) as u64,
            };
            // The run ends on time, but not before the kill, the failover and the
            // restart have all happened (on a slow machine they take longer).
            let scripted = n < 3 || restarted.is_some();
            if progress >= 1000 && scripted {
                break;
            }
            if !cluster.stopped && progress >= 400 {
                cluster.stop_plugin_job()?;
            }
            if n >= 3 && killed.is_none() && progress >= 500 {
                let l = cluster.db.leader;
                let pid = agents.kill(l).unwrap_or(0);
                let index = cluster.next - 1;
                say(&format!(
                    "  index {}: killed the leader, agent {} (pid {pid}), with SIGKILL",
                    thousands(index),
                    l + 1
                ));
                killed = Some((l, Instant::now(), cluster.db.acked));
            }
            if let Some((k, _, acked_at_kill)) = killed
                && failover.is_none()
                && cluster.db.acked > acked_at_kill
            {
                failover = cluster.db.last_outage;
                let new = cluster.db.leader;
                say(&format!(
                    "  index {}: agent {} leads; writes resumed {} ms after the kill",
                    thousands(cluster.next - 1),
                    new + 1,
                    failover.map_or(0, |d| d.as_millis())
                ));
                // Every acknowledged write is on the new leader: its state is the
                // client's record of them, byte for byte.
                let theirs = cluster.db.leader_state()?;
                let ours = cluster.db.mirror.snapshot();
                let same = theirs.canonical_bytes().ok() == ours.canonical_bytes().ok();
                if !same {
                    return Err(err(format!(
                        "the new leader's state differs from the {} acknowledged writes",
                        cluster.db.acked
                    )));
                }
                say(&format!(
                    "  nothing lost: the new leader holds all {} acknowledged writes (state identical up to index {})",
                    thousands(cluster.db.acked),
                    thousands(ours.view().last_applied())
                ));
                if cluster.db.replayed > 0 {
                    say(&format!(
                        "  applied once: {} write(s) sent again after the kill were found applied (Idempotency-Key) and not applied twice",
                        cluster.db.replayed
                    ));
                }
                let _ = k;
            }
            if let Some((k, _, _)) = killed
                && failover.is_some()
                && restarted.is_none()
                && progress >= 750
            {
                agents.spawn(k)?;
                say(&format!(
                    "  index {}: restarted agent {} on its data directory",
                    thousands(cluster.next - 1),
                    k + 1
                ));
                restarted = Some((k, Instant::now(), cluster.next - 1));
            }
            if let Some((k, when, target)) = restarted
                && caught_up.is_none()
                && steps.is_multiple_of(16)
            {
                let c = &cluster.db.clients[k];
                if let Ok(me) = cluster.db.rt.block_on(c.agent_self())
                    && me.last_applied >= target
                {
                    caught_up = Some(when.elapsed());
                    say(&format!(
                        "  agent {} caught up to index {} in {} ms",
                        k + 1,
                        thousands(target),
                        when.elapsed().as_millis()
                    ));
                }
            }
            for e in cluster.events.drain(..) {
                say(&format!("  {e}"));
            }
            cluster.step()?;
            steps += 1;
        }
        if !cluster.stopped {
            cluster.stop_plugin_job()?;
        }
        for e in cluster.events.drain(..) {
            say(&format!("  {e}"));
        }
        Ok(())
    })();
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Release);
    let (wakes, last_wake) = watcher.join().unwrap_or((0, 0));
    result?;
    if let Some((k, when, target)) = restarted
        && caught_up.is_none()
    {
        let c = cluster.db.clients[k].clone();
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(me) = cluster.db.rt.block_on(c.agent_self())
                && me.last_applied >= target
            {
                say(&format!(
                    "  agent {} caught up to index {} in {} ms",
                    k + 1,
                    thousands(target),
                    when.elapsed().as_millis()
                ));
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    let s = &cluster.stats;
    let last = cluster.next - 1;
    let mut text = format!(
        "\nApplied {} commands over HTTP (index {} → {}) in {:.1} s: {} commits/s, each acknowledged by a quorum of {n} agents\n",
        thousands(s.commands),
        thousands(started_at + 1),
        thousands(last),
        elapsed.as_secs_f64(),
        thousands((s.commands as f64 / elapsed.as_secs_f64().max(1e-3)).round() as u64),
    );
    if let Some(d) = failover {
        text.push_str(&format!(
            "  failover: the leader was SIGKILLed; writes resumed after {} ms, no acknowledged write lost\n",
            d.as_millis()
        ));
    }
    text.push_str(&format!(
        "  volumes: {} registered, {} claims taken, {} released; {} plugin instances went unhealthy\n",
        thousands(s.registered),
        thousands(s.claims),
        thousands(s.releases),
        thousands(s.unhealthy)
    ));
    text.push_str(&format!(
        "Blocking query on plugin {} over HTTP woke {} times (last at index {})\n\n",
        PLUGINS[WATCHED_PLUGIN].id,
        thousands(wakes),
        thousands(last_wake)
    ));
    let v = cluster.db.mirror.snapshot();
    text.push_str(&plugin_table(&plugin_stubs(&v.view())));
    agents.stop();
    let run = invocation();
    text.push_str(&format!(
        "\nThe agents are stopped (logs in {}/agent-N.log). Start them again and look:\n",
        dir.display()
    ));
    for i in 0..n {
        text.push_str(&format!("  {} &\n", agents.command_line(&run, i)));
    }
    let token = dir.join("management.token");
    let ca = agents.ca_cert();
    text.push_str(&format!(
        "  {run} plugin status --address {} --ca-cert {} --token-file {}\n  {run} job status --address {} --ca-cert {} --token-file {}\n  curl --cacert {} -H \"X-Nomad-Token: $(cat {})\" '{}/v1/plugins?pretty'\n",
        addresses[0],
        ca.display(),
        token.display(),
        addresses[0],
        ca.display(),
        token.display(),
        ca.display(),
        token.display(),
        addresses[0]
    ));
    emit(&text)
}
