//! The status commands against a real agent (`schedstate agent`, one process per test,
//! see [`crate::agent_procs`]): with `--address` or `SCHEDSTATE_ADDR` they print the
//! same tables, JSON and errors as from a data directory holding the same state (the
//! same commands, applied through the agent and replayed at the indexes it answered).
//! Also: the token (`--token-file`, `SCHEDSTATE_TOKEN`) against an agent that needs one,
//! `--address` with `--data`, `--data` over `SCHEDSTATE_ADDR`, a closed port, and an
//! empty agent.

use std::collections::BTreeMap;

use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiMountOptions, CsiNodeInfo,
    CsiPluginType, CsiVolume, CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeCapability,
    CsiVolumeClaim, CsiVolumeClaimMode, CsiVolumeClaimState, CsiVolumeRequest, DesiredStatus, Id,
    Job, JobType, Node, Task, TaskCsiPlugin, TaskGroup,
};
use schedstate::persist::{DurableStore, Options};
use schedstate::state::{Command, CsiVolumeClaimRequest};

use crate::agent_procs::{ProcCluster, free_ports};
use crate::support::{TempDir, schedstate};

// ---------------------------------------------------------------------------------
// The state: two nodes running two plugins (one instance unhealthy), three volumes
// in two namespaces (one with a secret), write, read and past claims.

fn alloc(id: &str, job: &str, group: &str, node: &str) -> Allocation {
    Allocation {
        id: Id::from(id),
        namespace: Id::from("default"),
        job_id: Id::from(job),
        task_group: Id::from(group),
        node_id: Id::from(node),
        desired_status: DesiredStatus::Run,
        client_status: ClientStatus::Running,
        ..Default::default()
    }
}

fn app(id: &str, namespace: &str, node: &str, volume: &str, read_only: bool) -> Allocation {
    Allocation {
        namespace: Id::from(namespace),
        csi_volume_requests: vec![CsiVolumeRequest {
            volume_id: Id::from(volume),
            read_only,
        }]
        .into(),
        ..alloc(id, volume, "app", node)
    }
}

fn node_fp(plugin: &str, alloc_id: &str, node: &str) -> CsiInfo {
    let (provider, controller) = match plugin {
        "ebs" => ("ebs.csi.aws.com", true),
        _ => ("nfs.csi.k8s.io", false),
    };
    CsiInfo::node_instance(
        plugin,
        alloc_id,
        CsiNodeInfo {
            id: format!("{plugin}-{node}").into(),
            max_volumes: 16,
            accessible_topology: None,
            requires_node_stage_volume: controller,
        },
    )
    .with_provider(provider, "1.2.3")
    .requiring_controller(controller)
    .with_health(true, "healthy")
}

/// The access mode of the volumes named `shared-…` (many writers) and of the others.
fn access_mode(volume: &str) -> CsiVolumeAccessMode {
    if volume.starts_with("shared") {
        CsiVolumeAccessMode::MultiNodeMultiWriter
    } else {
        CsiVolumeAccessMode::SingleNodeWriter
    }
}

fn volume(namespace: &str, id: &str, plugin: &str) -> CsiVolume {
    let mut v = CsiVolume::new(namespace, id, plugin);
    v.name = format!("{id}-data");
    v.external_id = format!("ext-{id}");
    v.requested_capabilities = vec![CsiVolumeCapability {
        access_mode: access_mode(id),
        attachment_mode: CsiVolumeAttachmentMode::FileSystem,
    }];
    v.mount_options = Some(CsiMountOptions {
        fs_type: "ext4".into(),
        mount_flags: vec!["noatime".into()],
    });
    v.parameters = BTreeMap::from([("type".to_string(), "gp3".to_string())]);
    v
}

fn claim(
    namespace: &str,
    volume: &str,
    alloc_id: &str,
    node: &str,
    mode: CsiVolumeClaimMode,
) -> CsiVolumeClaimRequest {
    CsiVolumeClaimRequest {
        namespace: Id::from(namespace),
        volume_id: Id::from(volume),
        claim: CsiVolumeClaim {
            alloc_id: Id::from(alloc_id),
            node_id: Id::from(node),
            external_node_id: String::new(),
            mode,
            access_mode: access_mode(volume),
            attachment_mode: CsiVolumeAttachmentMode::FileSystem,
            state: CsiVolumeClaimState::Taken,
        },
    }
}

/// A job of one group of `count` running `plugin` (as `kind`), if any.
fn job(
    ns: &str,
    id: &str,
    job_type: JobType,
    count: u32,
    plugin: Option<(&str, CsiPluginType)>,
) -> Job {
    let mut j = Job::new(ns, id);
    j.job_type = job_type;
    j.task_groups = vec![TaskGroup {
        name: match plugin {
            Some((_, CsiPluginType::Controller)) => "controller".into(),
            Some(_) => "nodes".into(),
            None => "app".into(),
        },
        count,
        tasks: vec![Task {
            name: "main".into(),
            csi_plugin: plugin.map(|(p, t)| TaskCsiPlugin {
                id: p.into(),
                plugin_type: t,
            }),
        }],
    }];
    j
}

/// The commands that build the state, in order.
pub(crate) fn commands() -> Vec<Command> {
    use CsiVolumeClaimMode::{Read, Write};
    let mut n1 = Node::new("node-1", "client-1");
    n1.add_csi_plugin(
        CsiInfo::controller_instance("ebs", "alloc-ebs-ctrl", CsiControllerInfo::default())
            .with_provider("ebs.csi.aws.com", "1.2.3")
            .requiring_controller(true)
            .with_health(true, "healthy"),
    );
    n1.add_csi_plugin(node_fp("ebs", "alloc-ebs-n1", "node-1"));
    n1.add_csi_plugin(node_fp("nfs", "alloc-nfs-n1", "node-1"));
    let mut n2 = Node::new("node-2", "client-2");
    n2.add_csi_plugin(node_fp("ebs", "alloc-ebs-n2", "node-2"));
    n2.add_csi_plugin(node_fp("nfs", "alloc-nfs-n2", "node-2"));
    // Later, node-2 drains and its ebs instance turns unhealthy.
    let mut n2_later = n2.clone();
    n2_later.drain = true;
    n2_later.add_csi_plugin(
        node_fp("ebs", "alloc-ebs-n2", "node-2")
            .with_health(false, "CSI plugin probe timed out after 5s"),
    );
    let mut secret = volume("default", "web-001", "ebs");
    secret.secrets.insert("password".into(), "s3cr3t".into());
    let gone = app("alloc-app-3", "batch", "node-2", "shared-002", true);
    use CsiPluginType::{Controller, Monolith, Node as NodeType};
    vec![
        // The plugins' jobs: ebs asks for 3 node instances where 2 run; nfs's is a
        // system job (one per eligible node); a stopped job and a batch job too.
        Command::UpsertJobs {
            jobs: vec![
                job(
                    "default",
                    "plugin-ebs-controller",
                    JobType::Service,
                    1,
                    Some(("ebs", Controller)),
                ),
                job(
                    "default",
                    "plugin-ebs-nodes",
                    JobType::Service,
                    3,
                    Some(("ebs", NodeType)),
                ),
                job(
                    "default",
                    "plugin-nfs-nodes",
                    JobType::System,
                    1,
                    Some(("nfs", NodeType)),
                ),
                job(
                    "default",
                    "old-plugin",
                    JobType::Service,
                    2,
                    Some(("hostpath", Monolith)),
                ),
                job("batch", "shared-002", JobType::Batch, 2, None),
            ],
        },
        Command::StopJobs {
            namespace: Id::from("default"),
            ids: vec![Id::from("old-plugin")],
        },
        Command::UpsertAllocs {
            allocs: vec![
                alloc(
                    "alloc-ebs-ctrl",
                    "plugin-ebs-controller",
                    "controller",
                    "node-1",
                ),
                alloc("alloc-ebs-n1", "plugin-ebs-nodes", "nodes", "node-1"),
                alloc("alloc-ebs-n2", "plugin-ebs-nodes", "nodes", "node-2"),
                alloc("alloc-nfs-n1", "plugin-nfs-nodes", "nodes", "node-1"),
                alloc("alloc-nfs-n2", "plugin-nfs-nodes", "nodes", "node-2"),
            ],
        },
        Command::UpsertNodes {
            nodes: vec![n1, n2],
        },
        Command::RegisterCsiVolumes {
            volumes: vec![
                secret,
                volume("batch", "shared-002", "nfs"),
                volume("default", "web-003", "ebs"),
            ],
        },
        Command::UpsertAllocs {
            allocs: vec![
                app("alloc-app-1", "default", "node-1", "web-001", false),
                app("alloc-app-2", "batch", "node-1", "shared-002", true),
                gone.clone(),
            ],
        },
        Command::ClaimCsiVolumes {
            claims: vec![
                claim("default", "web-001", "alloc-app-1", "node-1", Write),
                claim("batch", "shared-002", "alloc-app-2", "node-1", Read),
                claim("batch", "shared-002", "alloc-app-3", "node-2", Read),
            ],
        },
        // The third app stops: its claim shows as past (repaired on read).
        Command::UpsertAllocs {
            allocs: vec![Allocation {
                desired_status: DesiredStatus::Stop,
                client_status: ClientStatus::Complete,
                ..gone
            }],
        },
        Command::UpsertNode { node: n2_later },
        Command::UpdateNodeEligibility {
            id: Id::from("node-2"),
            eligible: false,
        },
    ]
}

/// A data directory holding `commands` applied at `indexes`.
fn local_dir(commands: &[Command], indexes: &[u64]) -> TempDir {
    let dir = TempDir::absent("local");
    let (db, _) = DurableStore::open(dir.path(), Options::default()).expect("open the store");
    for (command, &index) in commands.iter().zip(indexes) {
        db.apply(index, command)
            .unwrap_or_else(|e| panic!("{} at {index}: {e}", command.kind()));
    }
    drop(db);
    dir
}

/// A one-agent cluster (needing `token` when given) that applied `commands`, and a
/// data directory holding them at the indexes the agent answered.
fn agent_and_dir(token: Option<&str>, commands: &[Command]) -> (ProcCluster, TempDir) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (agent, indexes) = runtime.block_on(async {
        let agent = ProcCluster::start(1, token).await;
        let client = agent.client(0);
        let mut indexes = Vec::new();
        for c in commands {
            match client.apply(c).await {
                Ok(index) => indexes.push(index),
                Err(e) => panic!("{}: {e}\n{}", c.kind(), agent.logs()),
            }
        }
        (agent, indexes)
    });
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "{indexes:?}");
    (agent, local_dir(commands, &indexes))
}

/// An address nothing listens on.
fn closed_address() -> String {
    format!("http://127.0.0.1:{}", free_ports(1)[0])
}

// ---------------------------------------------------------------------------------
// Running the binary.

/// What one run printed.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts exit code 1, nothing on stdout and one `error: agent <address>: …`
    /// line on stderr; returns that line.
    fn agent_error(&self, address: &str) -> &str {
        assert_eq!(self.code, Some(1), "{self:?}");
        assert!(self.stdout.is_empty(), "{self:?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{self:?}");
        let prefix = format!("error: agent {address}: ");
        assert!(lines[0].starts_with(&prefix), "{self:?}");
        lines[0]
    }
}

/// Runs the binary with `args` and `env`, and nothing of the caller's
/// `SCHEDSTATE_ADDR`/`SCHEDSTATE_TOKEN`.
fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = schedstate();
    cmd.env_remove("SCHEDSTATE_ADDR")
        .env_remove("SCHEDSTATE_TOKEN")
        .env_remove("SCHEDSTATE_TOKEN_FILE")
        .env_remove("SCHEDSTATE_CACERT")
        .env_remove("SCHEDSTATE_CLIENT_CERT")
        .env_remove("SCHEDSTATE_CLIENT_KEY")
        .args(args)
        .envs(env.iter().copied());
    let out = cmd.output().expect("runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

/// `args` followed by `--data <dir>`.
fn local(args: &[&str], dir: &TempDir) -> Run {
    run(&[args, &["--data", dir.arg()]].concat(), &[])
}

/// `args` followed by `--address <address>`.
fn remote(args: &[&str], address: &str) -> Run {
    run(&[args, &["--address", address]].concat(), &[])
}

/// The status commands compared, each with `--data` and with `--address`; the last
/// three fail.
const COMPARED: &[&[&str]] = &[
    &["plugin", "status"],
    &["plugin", "status", "--json"],
    &["plugin", "status", "eb"],
    &["plugin", "status", "ebs", "--json"],
    &["plugin", "status", "nfs"],
    &["volume", "status"],
    &["volume", "status", "--json"],
    &["volume", "status", "--namespace", "batch"],
    &["volume", "status", "--namespace", "default", "--json"],
    &["volume", "status", "web-001"],
    &["volume", "status", "web-001", "--json"],
    &["volume", "status", "shared"],
    &["volume", "status", "web-003"],
    &["node", "status"],
    &["node", "status", "--json"],
    &["node", "status", "node-1"],
    &["node", "status", "node-2", "--json"],
    &["job", "status"],
    &["job", "status", "--json"],
    &["job", "status", "--namespace", "batch"],
    &["job", "status", "plugin-ebs-n"],
    &["job", "status", "plugin-ebs-nodes", "--json"],
    &["job", "status", "plugin-nfs-nodes"],
    &["job", "status", "old-plugin", "--json"],
    &["job", "status", "shared"],
    // The errors match too: no such plugin, an ambiguous prefix, three times.
    &["plugin", "status", "zzz"],
    &["volume", "status", "web"],
    &["node", "status", "node"],
    &["job", "status", "plugin"],
];

/// How many of [`COMPARED`], at its end, fail.
const FAILING: usize = 4;

// ---------------------------------------------------------------------------------
// The tests.

#[test]
fn status_commands_print_the_same_from_the_agent_as_from_a_directory() {
    let commands = commands();
    let (agent, dir) = agent_and_dir(None, &commands);
    let address = agent.address(0);
    for (i, args) in COMPARED.iter().enumerate() {
        let from_dir = local(args, &dir);
        let from_agent = remote(args, &address);
        let want = if i + FAILING >= COMPARED.len() { 1 } else { 0 };
        assert_eq!(from_dir.code, Some(want), "{args:?} --data: {from_dir:?}");
        assert_eq!(from_dir, from_agent, "{args:?}: --data, then --address");
    }
    // The state reaches every section: unhealthy instances, every kind of claim.
    let plugin = local(&["plugin", "status", "ebs"], &dir);
    assert!(plugin.stdout.contains("Unhealthy Instances"), "{plugin:?}");
    let shared = local(&["volume", "status", "shared"], &dir);
    assert!(shared.stdout.contains("past (read)"), "{shared:?}");
    // Expected counts from the jobs: ebs 1 controller and 3 nodes (2 run); nfs's
    // system job counts its running allocations on eligible nodes (node-2 is not).
    let plugins = local(&["plugin", "status"], &dir);
    assert!(
        plugins
            .stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["ebs", "ebs.csi.aws.com", "1/1", "1/3"]),
        "{plugins:?}"
    );
    assert!(
        plugins
            .stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["nfs", "nfs.csi.k8s.io", "0/0", "2/1"]),
        "{plugins:?}"
    );
    let jobs = local(&["job", "status"], &dir);
    assert!(
        jobs.stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "old-plugin",
                    "default",
                    "service",
                    "dead",
                    "0",
                    "hostpath:monolith"
                ]),
        "{jobs:?}"
    );
    let ebs = local(&["job", "status", "plugin-ebs-nodes"], &dir);
    assert!(ebs.stdout.contains("\nSummary\n"), "{ebs:?}");
    // The secret stays hidden: the agent answers no secrets (Nomad's `Secrets: null`).
    let json = remote(&["volume", "status", "web-001", "--json"], &address);
    assert!(json.stdout.contains("web-001"), "{}", json.stdout);
    assert!(!json.stdout.contains("s3cr3t"), "{}", json.stdout);
    // From the environment, the same; a bare host:port is an http address.
    let want = local(&["node", "status"], &dir);
    assert_eq!(
        run(&["node", "status"], &[("SCHEDSTATE_ADDR", &address)]),
        want
    );
    let bare = address.trim_start_matches("http://");
    assert_eq!(remote(&["node", "status"], bare), want);
}

#[test]
fn the_token_is_read_from_a_file_or_the_environment_never_the_command_line() {
    const SECRET: &str = "s3cret-1-of-the-remote-tests";
    let commands = commands();
    let (agent, dir) = agent_and_dir(Some(SECRET), &commands);
    let address = agent.address(0);
    let a = &address;
    let files = tempfile::tempdir().expect("temp dir");
    let token_file = files.path().join("token");
    std::fs::write(&token_file, format!("{SECRET}\n")).expect("token file");
    let token_arg = token_file.to_str().expect("utf-8 path");
    // The right token, from a file or from the environment.
    let file = run(
        &[
            "plugin",
            "status",
            "--address",
            a,
            "--token-file",
            token_arg,
        ],
        &[],
    );
    assert_eq!(file, local(&["plugin", "status"], &dir));
    let env = run(
        &["node", "status", "--address", a],
        &[("SCHEDSTATE_TOKEN", SECRET)],
    );
    assert_eq!(env, local(&["node", "status"], &dir));
    let both = run(
        &["volume", "status", "--json"],
        &[("SCHEDSTATE_ADDR", a), ("SCHEDSTATE_TOKEN_FILE", token_arg)],
    );
    assert_eq!(both, local(&["volume", "status", "--json"], &dir));
    // There is no --token flag: a secret on the command line shows in `ps`.
    let flag = run(
        &["plugin", "status", "--address", a, "--token", SECRET],
        &[],
    );
    assert_eq!(flag.code, Some(2), "{flag:?}");
    // No token: 401; another one (file or environment): 403 `UnknownToken` (Nomad's
    // status for a token not found), naming neither.
    let none = remote(&["node", "status"], a);
    let line = none.agent_error(a);
    assert!(
        line.contains("401") && line.contains("Unauthorized"),
        "{line}"
    );
    let wrong_file = files.path().join("wrong");
    std::fs::write(&wrong_file, "nope-nope-nope\n").expect("token file");
    let wrong_by_file = run(
        &[
            "plugin",
            "status",
            "--address",
            a,
            "--token-file",
            wrong_file.to_str().expect("utf-8 path"),
        ],
        &[],
    );
    let wrong_env = run(
        &["volume", "status", "--address", a],
        &[("SCHEDSTATE_TOKEN", "nope-nope-nope")],
    );
    for r in [wrong_by_file, wrong_env] {
        let line = r.agent_error(a);
        assert!(
            line.contains("403") && line.contains("UnknownToken"),
            "{line}"
        );
        assert!(!line.contains("nope") && !line.contains("s3cret"), "{line}");
    }
    // An empty variable is an error, not "no token".
    let empty = run(
        &["node", "status", "--address", a],
        &[("SCHEDSTATE_TOKEN", " ")],
    );
    assert_eq!(empty.code, Some(1), "{empty:?}");
    assert!(
        empty.stderr.contains("SCHEDSTATE_TOKEN is set but empty"),
        "{empty:?}"
    );
    // With --data the token (and an address from the environment) is ignored.
    let ignored = run(
        &["node", "status", "--data", dir.arg()],
        &[("SCHEDSTATE_TOKEN", "nope"), ("SCHEDSTATE_ADDR", a)],
    );
    assert_eq!(ignored, env);
    // The token never shows in the help.
    let help = run(
        &["plugin", "status", "--help"],
        &[("SCHEDSTATE_TOKEN", "s3cret-4")],
    );
    assert!(help.stdout.contains("SCHEDSTATE_TOKEN"), "{}", help.stdout);
    assert!(!help.stdout.contains("s3cret-4"), "{}", help.stdout);
}

#[test]
fn an_empty_agent_prints_what_an_empty_directory_prints() {
    let (agent, dir) = agent_and_dir(None, &[]);
    for args in [
        &["plugin", "status"][..],
        &["plugin", "status", "--json"],
        &["volume", "status"],
        &["volume", "status", "--json"],
        &["node", "status"],
        &["node", "status", "--json"],
        &["job", "status"],
        &["job", "status", "--json"],
    ] {
        let from_dir = local(args, &dir);
        assert_eq!(from_dir.code, Some(0), "{from_dir:?}");
        assert_eq!(from_dir, remote(args, &agent.address(0)), "{args:?}");
    }
}

#[test]
fn address_and_data_together_is_a_usage_error() {
    for cmd in [
        ["plugin", "status"],
        ["volume", "status"],
        ["node", "status"],
        ["job", "status"],
    ] {
        let args = [
            &cmd[..],
            &["--data", "d", "--address", "http://127.0.0.1:1"],
        ]
        .concat();
        let r = run(&args, &[]);
        assert_eq!(r.code, Some(2), "{cmd:?}: {r:?}");
        assert!(r.stderr.contains("cannot be used with"), "{r:?}");
    }
}

#[test]
fn data_on_the_command_line_wins_over_the_address_in_the_environment() {
    let commands = commands();
    let indexes: Vec<u64> = (1..=commands.len() as u64).collect();
    let dir = local_dir(&commands, &indexes);
    let closed = closed_address();
    for args in [
        &["plugin", "status"][..],
        &["volume", "status", "--json"],
        &["node", "status", "node-1"],
    ] {
        let args = [args, &["--data", dir.arg()]].concat();
        let plain = run(&args, &[]);
        assert_eq!(plain.code, Some(0), "{plain:?}");
        assert_eq!(
            plain,
            run(&args, &[("SCHEDSTATE_ADDR", &closed)]),
            "{args:?}"
        );
    }
}

#[test]
fn an_agent_that_does_not_answer_is_a_one_line_error_naming_it() {
    let address = closed_address();
    let from_flag = remote(&["plugin", "status"], &address);
    let from_env = run(&["volume", "status"], &[("SCHEDSTATE_ADDR", &address)]);
    for r in [from_flag, from_env] {
        let line = r.agent_error(&address);
        assert!(line.contains("no answer"), "{line}");
    }
    let bad = run(&["node", "status", "--address", "ftp://127.0.0.1:1"], &[]);
    bad.agent_error("ftp://127.0.0.1:1");
}

/// `operator raft`: the servers listed; a server that cannot be reached is not added
/// (one error line, exit 1, the list unchanged); `recover` on a uniform configuration
/// changes nothing.
#[test]
fn operator_raft_lists_refuses_an_unreachable_peer_and_recovers() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let cluster = runtime.block_on(ProcCluster::start(3, None));
    let a = cluster.address(0);
    let listed = remote(&["operator", "raft", "list-peers"], &a);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{listed:?}");
    assert_eq!(
        lines[1..].iter().filter(|l| l.contains(" true ")).count(),
        1,
        "one leader: {listed:?}"
    );
    let added = remote(
        &[
            "operator",
            "raft",
            "add-peer",
            "--id",
            "4",
            "--peer-address",
            "127.0.0.1:9",
            "--wait",
            "1s",
        ],
        &a,
    );
    let line = added.agent_error(&a);
    assert!(line.contains("did not catch up"), "{line}");
    assert_eq!(remote(&["operator", "raft", "list-peers"], &a), listed);
    let recovered = remote(&["operator", "raft", "recover"], &a);
    assert_eq!(recovered.code, Some(0), "{recovered:?}");
    assert!(
        recovered.stdout.contains("nothing to recover"),
        "{recovered:?}"
    );
    drop(cluster);
}

/// `operator snapshot save|restore`: the state of one cluster saved to a file and
/// restored into another (over TLS, with the CA and the token from the environment);
/// the second then shows the first's nodes. A damaged file is one error line, exit 1,
/// and changes nothing.
#[test]
fn operator_snapshot_save_and_restore_round_trip() {
    const SECRET: &str = "the-snapshot-round-trip-root-secret";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let from = runtime.block_on(ProcCluster::start(1, Some(SECRET)));
    let into = runtime.block_on(ProcCluster::start_tls(1, Some(SECRET)));
    runtime.block_on(async {
        for id in ["saved-1", "saved-2"] {
            let node = Node::new(id, format!("host-{id}"));
            from.client(0)
                .apply(&Command::UpsertNode { node })
                .await
                .expect("write");
        }
        let node = Node::new("replaced", "host-replaced");
        into.client(0)
            .apply(&Command::UpsertNode { node })
            .await
            .expect("write");
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("state.snap");
    let file_arg = file.to_str().expect("utf-8 path");
    let a = from.address(0);
    let saved = run(
        &["operator", "snapshot", "save", file_arg, "--address", &a],
        &[("SCHEDSTATE_TOKEN", SECRET)],
    );
    assert_eq!(saved.code, Some(0), "{saved:?}");
    assert!(
        saved.stdout.starts_with("saved the state at index"),
        "{saved:?}"
    );
    let bytes = std::fs::read(&file).expect("saved file");
    assert!(bytes.starts_with(b"SCHEDSNP"));

    let b = into.address(0);
    let ca = into.client_tls().and_then(|t| t.ca_cert).expect("a CA");
    let ca = ca.to_str().expect("utf-8 path");
    let env = [("SCHEDSTATE_TOKEN", SECRET), ("SCHEDSTATE_CACERT", ca)];
    let nodes = || run(&["node", "status", "--address", &b], &env);
    let before = nodes();
    assert_eq!(before.code, Some(0), "{before:?}");
    assert!(before.stdout.contains("replaced"), "{before:?}");

    // A damaged file: refused, nothing changed.
    let damaged = dir.path().join("damaged.snap");
    let mut bad = bytes.clone();
    let at = bad.len() - 8;
    bad[at] ^= 0x10;
    std::fs::write(&damaged, &bad).expect("written");
    let refused = run(
        &[
            "operator",
            "snapshot",
            "restore",
            damaged.to_str().expect("utf-8"),
            "--address",
            &b,
        ],
        &env,
    );
    let line = refused.agent_error(&b);
    assert!(
        line.contains("InvalidSnapshot") || line.contains("checks"),
        "{line}"
    );
    assert_eq!(nodes(), before);

    let restored = run(
        &["operator", "snapshot", "restore", file_arg, "--address", &b],
        &env,
    );
    assert_eq!(restored.code, Some(0), "{restored:?}");
    assert!(
        restored.stdout.contains("into the cluster at index"),
        "{restored:?}"
    );
    let after = nodes();
    assert_eq!(after.code, Some(0), "{after:?}");
    assert!(
        after.stdout.contains("saved-1") && after.stdout.contains("saved-2"),
        "{after:?}"
    );
    assert!(!after.stdout.contains("replaced"), "{after:?}");
    drop(from);
    drop(into);
}
