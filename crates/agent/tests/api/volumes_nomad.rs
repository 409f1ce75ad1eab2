//! Volumes as Nomad answers them: `Allocations` (the claiming allocations' stubs),
//! `Secrets: null`, `MountFlags: ["[REDACTED]"]`; and a volume registered while its
//! plugin exists only through a job (provider not known yet) registered again once
//! the plugin is fingerprinted, not refused as a changed identity.

use schedstate::model::{
    CsiInfo, CsiNodeInfo, CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeClaim,
    CsiVolumeClaimMode, CsiVolumeClaimState, Node,
};
use schedstate::state::{Command, CsiVolumeClaimRequest};
use serde_json::{Value, json};

use crate::support::{Agents, alloc};
use crate::upsert;

async fn send(agents: &Agents, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut req = crate::support::http().request(method.parse().unwrap(), agents.url(0, path));
    if let Some(b) = body {
        req = req.body(serde_json::to_vec(b).unwrap());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let body = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

fn claim(alloc_id: &str, mode: CsiVolumeClaimMode) -> CsiVolumeClaimRequest {
    CsiVolumeClaimRequest {
        namespace: "default".into(),
        volume_id: "v1".into(),
        claim: CsiVolumeClaim {
            alloc_id: alloc_id.into(),
            node_id: "n1".into(),
            external_node_id: String::new(),
            mode,
            access_mode: CsiVolumeAccessMode::MultiNodeMultiWriter,
            attachment_mode: CsiVolumeAttachmentMode::FileSystem,
            state: CsiVolumeClaimState::Taken,
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_volume_reads_as_nomads_csi_volume() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("a1", "n1"), alloc("a2", "n1"), alloc("a3", "n1")],
    })
    .await
    .unwrap();
    let volume = json!({"Volumes": [{
        "ID": "v1", "PluginID": "ebs", "ExternalID": "vol-1",
        "RequestedCapabilities": [{"AccessMode": "multi-node-multi-writer", "AttachmentMode": "file-system"}],
        "MountOptions": {"FSType": "ext4", "MountFlags": ["ro", "password=hunter2"]},
        "Secrets": {"password": "s3cr3t"},
    }]});
    let (s, v) = send(&agents, "PUT", "/v1/volume/csi/v1", Some(&volume)).await;
    assert_eq!(s, 200, "{v}");
    c.apply(&Command::ClaimCsiVolumes {
        claims: vec![
            claim("a2", CsiVolumeClaimMode::Read),
            claim("a1", CsiVolumeClaimMode::Write),
        ],
    })
    .await
    .unwrap();

    let (s, one) = send(&agents, "GET", "/v1/volume/csi/v1", None).await;
    assert_eq!(s, 200, "{one}");
    let (_, full) = send(&agents, "GET", "/v1/volumes?full=true", None).await;
    for (what, vol) in [("one", &one), ("listed whole", &full[0])] {
        // `[]*AllocationListStub`: the readers, then the writers.
        let allocs = vol["Allocations"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: {vol}"));
        let ids: Vec<&str> = allocs.iter().map(|a| a["ID"].as_str().unwrap()).collect();
        assert_eq!(ids, ["a2", "a1"], "{what}");
        for a in allocs {
            assert_eq!(a["NodeID"], "n1");
            assert_eq!(a["Namespace"], "default");
            assert_eq!(a["JobID"], "job");
            assert_eq!(a["TaskGroup"], "group");
            assert_eq!(a["DesiredStatus"], "run");
            assert_eq!(a["ClientStatus"], "running");
            assert!(a["CreateIndex"].is_u64() && a["ModifyIndex"].is_u64());
        }
        assert_eq!(vol["ReadAllocs"], json!({"a2": null}), "{what}");
        assert_eq!(vol["WriteAllocs"], json!({"a1": null}), "{what}");
        assert_eq!(vol["Secrets"], Value::Null, "{what}");
        assert_eq!(
            vol["MountOptions"],
            json!({"FSType": "ext4", "MountFlags": ["[REDACTED]"]}),
            "{what}"
        );
    }
    // Nothing of the secret or the flags in any answer; the store keeps them.
    for answer in [&one, &full] {
        let text = answer.to_string();
        assert!(
            !text.contains("s3cr3t") && !text.contains("hunter2"),
            "{text}"
        );
    }
    let stored = agents.agents[0]
        .as_ref()
        .unwrap()
        .server()
        .read_stale()
        .view()
        .csi_volume("default", "v1")
        .unwrap();
    assert_eq!(stored.secrets["password"], "s3cr3t");
    assert_eq!(
        stored.mount_options.as_ref().unwrap().mount_flags,
        ["ro", "password=hunter2"]
    );
    agents.shutdown().await;
}

fn fingerprinted(provider: &str) -> Node {
    let mut n = Node::new("n-late", "host-late");
    n.add_csi_plugin(
        CsiInfo::node_instance("late", "alloc-late", CsiNodeInfo::default())
            .with_provider(provider, "1.0"),
    );
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_registered_before_its_plugin_starts_registers_again_once_it_does() {
    let agents = Agents::start(1, None).await;
    let job = json!({"Job": {
        "ID": "plugin-late", "Type": "service",
        "TaskGroups": [{"Name": "nodes", "Count": 1, "Tasks": [{
            "Name": "plugin", "CSIPluginConfig": {"ID": "late", "Type": "node"},
        }]}],
    }});
    let (s, v) = send(&agents, "PUT", "/v1/jobs", Some(&job)).await;
    assert_eq!(s, 200, "{v}");
    let volume = json!({"Volumes": [{"ID": "v1", "PluginID": "late", "ExternalID": "vol-1"}]});
    let (s, v) = send(&agents, "PUT", "/v1/volume/csi/v1", Some(&volume)).await;
    assert_eq!(s, 200, "{v}");
    let (_, read) = send(&agents, "GET", "/v1/volume/csi/v1", None).await;
    assert_eq!(read["Provider"], "");

    // The plugin starts; the same registration again is taken (it was 409
    // `VolumeIdentityChanged (provider "" -> "vendor")`).
    agents
        .client(0)
        .apply(&Command::UpsertNode {
            node: fingerprinted("vendor"),
        })
        .await
        .unwrap();
    let (_, read) = send(&agents, "GET", "/v1/volume/csi/v1", None).await;
    assert_eq!(read["Provider"], "vendor");
    let (s, v) = send(&agents, "PUT", "/v1/volume/csi/v1", Some(&volume)).await;
    assert_eq!(s, 200, "{v}");
    let stored = agents.agents[0]
        .as_ref()
        .unwrap()
        .server()
        .read_stale()
        .view()
        .csi_volume("default", "v1")
        .unwrap();
    assert_eq!(&*stored.provider, "vendor");

    // Another provider afterwards is still a changed identity.
    agents
        .client(0)
        .apply(&Command::UpsertNode {
            node: fingerprinted("other-vendor"),
        })
        .await
        .unwrap();
    let (s, e) = send(&agents, "PUT", "/v1/volume/csi/v1", Some(&volume)).await;
    assert_eq!(
        (s, e["kind"].as_str()),
        (409, Some("VolumeIdentityChanged")),
        "{e}"
    );
    agents.shutdown().await;
}
