//! Nomad's own clients against a schedstate cluster: python-nomad (Nomad's Python
//! client) reads nodes, allocations, CSI plugins and volumes, leader, peers, regions
//! and the agent, pages, registers, reads, stops and purges jobs (the plugin's expected
//! counts following them), runs a blocking query and drains a node, through
//! `scripts/nomad-compat/python_nomad_check.py`, and every value must equal what this
//! test wrote. Three agents as deployed (TLS, cluster key, ACL).
//!
//! It needs a Python with python-nomad: `SCHEDSTATE_PYTHON=/path/to/python`, or a
//! `python3` that imports `nomad`; `scripts/nomad-compat/run.sh` makes a throwaway
//! virtualenv and runs it. Without one the test says so and passes without checking
//! (the shapes themselves are checked in `api::nomad`'s unit tests).

use std::path::Path;
use std::process::Command as Process;

use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiVolume,
    CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeCapability, CsiVolumeClaim,
    CsiVolumeClaimMode, CsiVolumeClaimState, DesiredStatus, Node, NodeStatus,
};
use schedstate::state::{Command, CsiVolumeClaimRequest};
use schedstate_agent::ReadOptions;
use serde_json::json;

use crate::agent_procs::ProcCluster;

const ROOT: &str = "root-secret-of-the-nomad-compat-test";

/// A Python that imports `nomad`, if there is one.
fn python() -> Option<String> {
    let candidates = std::env::var("SCHEDSTATE_PYTHON")
        .ok()
        .into_iter()
        .chain(["python3".to_string()]);
    for py in candidates {
        let ok = Process::new(&py)
            .args(["-c", "import nomad"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(py);
        }
    }
    None
}

fn node(id: &str, status: NodeStatus, provider: (&str, &str)) -> Node {
    let mut n = Node::new(id, format!("host-{id}"));
    n.status = status;
    n.add_csi_plugin(
        CsiInfo::node_instance(
            "ebs",
            format!("plugin-{id}"),
            CsiNodeInfo {
                id: format!("i-{id}").into(),
                max_volumes: 16,
                ..CsiNodeInfo::default()
            },
        )
        .with_provider(provider.0, provider.1),
    );
    n
}

fn alloc(id: &str, ns: &str, node: &str, status: ClientStatus) -> Allocation {
    Allocation {
        id: id.into(),
        namespace: ns.into(),
        job_id: format!("job-{id}").as_str().into(),
        task_group: "group".into(),
        node_id: node.into(),
        desired_status: DesiredStatus::Run,
        client_status: status,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_nomad_reads_what_was_written() {
    let Some(python) = python() else {
        eprintln!(
            "SKIPPED: no Python with python-nomad (set SCHEDSTATE_PYTHON, or run scripts/nomad-compat/run.sh)"
        );
        return;
    };
    let cluster = ProcCluster::start_tls(3, Some(ROOT)).await;
    let c = cluster.client(0);
    let provider = ("ebs.csi.aws.com", "1.25.0");
    let mut controller = node("n3", NodeStatus::Ready, provider);
    controller.add_csi_plugin(
        CsiInfo::controller_instance("ebs", "plugin-ctrl", CsiControllerInfo::default())
            .with_provider(provider.0, provider.1),
    );
    let mut nodes = vec![
        node("n1", NodeStatus::Ready, provider),
        node("n2", NodeStatus::Down, provider),
        controller,
    ];
    nodes[1].drain = true;
    nodes[1].eligible = false;
    for n in &nodes {
        c.apply(&Command::UpsertNode { node: n.clone() })
            .await
            .unwrap();
    }
    let allocs = vec![
        alloc("plugin-n1", "default", "n1", ClientStatus::Running),
        alloc("plugin-ctrl", "default", "n3", ClientStatus::Running),
        alloc("web-1", "default", "n1", ClientStatus::Running),
        alloc("batch-1", "batch", "n2", ClientStatus::Complete),
    ];
    c.apply(&Command::UpsertAllocs {
        allocs: allocs.clone(),
    })
    .await
    .unwrap();
    let mut volume = CsiVolume::new("default", "vol-1", "ebs");
    volume.requested_capabilities = vec![CsiVolumeCapability {
        access_mode: CsiVolumeAccessMode::MultiNodeMultiWriter,
        attachment_mode: CsiVolumeAttachmentMode::FileSystem,
    }];
    c.apply(&Command::RegisterCsiVolumes {
        volumes: vec![volume],
    })
    .await
    .unwrap();
    c.apply(&Command::ClaimCsiVolumes {
        claims: vec![CsiVolumeClaimRequest {
            namespace: "default".into(),
            volume_id: "vol-1".into(),
            claim: CsiVolumeClaim {
                alloc_id: "web-1".into(),
                node_id: "n1".into(),
                external_node_id: "i-n1".into(),
                mode: CsiVolumeClaimMode::Read,
                access_mode: CsiVolumeAccessMode::MultiNodeMultiWriter,
                attachment_mode: CsiVolumeAttachmentMode::FileSystem,
                state: CsiVolumeClaimState::Taken,
            },
        }],
    })
    .await
    .unwrap();

    // What python-nomad must read: the identity fields as written; the derived
    // counts as the rules derive them (checked here against the model first).
    let plugin = c
        .plugin("ebs", ReadOptions::default())
        .await
        .unwrap()
        .value
        .expect("the plugin");
    // No job runs the plugin yet: nothing is expected, whatever is fingerprinted
    // (the script registers jobs and checks the counts follow them).
    assert_eq!(
        (plugin.controllers_expected(), plugin.nodes_expected()),
        (0, 0)
    );
    let leader = cluster.wait_leader().await;
    let expected = json!({
        "leader": format!("127.0.0.1:{}", cluster.ports[leader]),
        "peers": cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>(),
        "nodes": nodes.iter().map(|n| json!({
            "ID": n.id, "Name": n.name, "Status": n.status, "Drain": n.drain,
            "SchedulingEligibility": if n.eligible { "eligible" } else { "ineligible" },
            "CSINodePlugins": n.csi_node_plugins.iter().map(|(k, f)| (k.to_string(), json!({
                "PluginID": f.plugin_id, "AllocID": f.alloc_id, "Healthy": f.healthy,
                "Provider": f.provider, "ProviderVersion": f.provider_version,
            }))).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
        "allocations": allocs.iter().map(|a| json!({
            "ID": a.id, "Namespace": a.namespace, "JobID": a.job_id, "TaskGroup": a.task_group,
            "NodeID": a.node_id, "DesiredStatus": a.desired_status, "ClientStatus": a.client_status,
        })).collect::<Vec<_>>(),
        "plugins": [{
            "ID": "ebs", "Provider": provider.0,
            "ControllersHealthy": 1, "ControllersExpected": 0, "NodesHealthy": 3, "NodesExpected": 0,
            "Nodes": ["n1", "n2", "n3"],
            "Allocations": ["plugin-ctrl", "plugin-n1"],
        }],
        "volumes": [{
            "ID": "vol-1", "Namespace": "default", "PluginID": "ebs", "Provider": provider.0,
            "AccessMode": "multi-node-multi-writer", "AttachmentMode": "file-system",
            "Schedulable": true, "ReadAllocs": ["web-1"],
        }],
    });
    let dir = cluster.root.path();
    let expected_file = dir.join("expected.json");
    std::fs::write(
        &expected_file,
        serde_json::to_vec_pretty(&expected).unwrap(),
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/nomad-compat/python_nomad_check.py");
    let address = cluster.address((leader + 1) % 3);
    let out = tokio::task::spawn_blocking(move || {
        Process::new(&python)
            .arg(&script)
            .env("AGENT", address)
            .env("CACERT", dir_ca(&expected_file))
            .env("TOKEN", ROOT)
            .env("EXPECTED", &expected_file)
            .output()
    })
    .await
    .unwrap()
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "python-nomad read something else:\n{stdout}\n{stderr}\n{}",
        cluster.logs()
    );
}

/// The CA file next to the expected values (the cluster's root directory).
fn dir_ca(expected: &Path) -> std::path::PathBuf {
    expected.with_file_name("ca.pem")
}
