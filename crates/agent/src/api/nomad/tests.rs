//! The Nomad shapes: every field of every model row survives model → JSON → model,
//! and the JSON carries Nomad's names and spellings (a golden document per shape,
//! written from Nomad's API documentation).

use std::collections::BTreeMap;
use std::sync::Arc;

use schedstate::model::{
    AllocListStub, Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiMountOptions,
    CsiNodeInfo, CsiPlugin, CsiTopology, CsiVolume, CsiVolumeAccessMode, CsiVolumeAttachmentMode,
    CsiVolumeCapability, CsiVolumeClaim, CsiVolumeClaimMode, CsiVolumeClaimState, CsiVolumeRequest,
    DesiredStatus, Expected, Node, NodeStatus, PluginJob,
};
use serde_json::json;

use super::*;

fn node_info() -> CsiInfo {
    let mut i = CsiInfo::node_instance(
        "ebs",
        "alloc-1",
        CsiNodeInfo {
            id: "i-0abc".into(),
            max_volumes: 25,
            accessible_topology: Some(CsiTopology {
                segments: BTreeMap::from([("zone".into(), "eu-west-1a".into())]),
            }),
            requires_node_stage_volume: true,
        },
    )
    .with_provider("ebs.csi.aws.com", "1.25.0");
    i.healthy = false;
    i.health_description = "probe failed".into();
    i.update_time = 1_764_800_000_123_456_789;
    i.requires_topologies = true;
    i
}

fn controller_info() -> CsiInfo {
    let mut i = CsiInfo::controller_instance(
        "ebs",
        "alloc-2",
        CsiControllerInfo {
            supports_read_only_attach: true,
            supports_attach_detach: true,
            supports_list_volumes: false,
            supports_list_volumes_attached_nodes: true,
        },
    )
    .with_provider("ebs.csi.aws.com", "1.25.0");
    i.requires_controller_plugin = true;
    i
}

fn node() -> Node {
    let mut n = Node::new("n1", "host-1");
    n.status = NodeStatus::Down;
    n.drain = true;
    n.eligible = false;
    n.add_csi_plugin(node_info());
    n.add_csi_plugin(controller_info());
    n.create_index = 3;
    n.modify_index = 9;
    n
}

fn alloc() -> Allocation {
    Allocation {
        id: "a1".into(),
        namespace: "batch".into(),
        job_id: "job-1".into(),
        job_version: 2,
        task_group: "group".into(),
        node_id: "n1".into(),
        desired_status: DesiredStatus::Stop,
        client_status: ClientStatus::Failed,
        csi_volume_requests: vec![CsiVolumeRequest {
            volume_id: "vol-1".into(),
            read_only: true,
        }]
        .into(),
        create_index: 4,
        modify_index: 7,
    }
}

fn claim(alloc: &str, mode: CsiVolumeClaimMode, state: CsiVolumeClaimState) -> CsiVolumeClaim {
    CsiVolumeClaim {
        alloc_id: alloc.into(),
        node_id: "n1".into(),
        external_node_id: "i-0abc".into(),
        mode,
        access_mode: CsiVolumeAccessMode::MultiNodeMultiWriter,
        attachment_mode: CsiVolumeAttachmentMode::FileSystem,
        state,
    }
}

fn volume() -> CsiVolume {
    let mut v = CsiVolume::new("batch", "vol-1", "ebs");
    v.name = "data".into();
    v.external_id = "vol-0123".into();
    v.provider = "ebs.csi.aws.com".into();
    v.provider_version = "1.25.0".into();
    v.topologies = vec![CsiTopology {
        segments: BTreeMap::from([("zone".into(), "eu-west-1a".into())]),
    }];
    v.requested_capabilities = vec![CsiVolumeCapability {
        access_mode: CsiVolumeAccessMode::SingleNodeWriter,
        attachment_mode: CsiVolumeAttachmentMode::BlockDevice,
    }];
    v.mount_options = Some(CsiMountOptions {
        fs_type: "ext4".into(),
        mount_flags: vec!["noatime".into()],
    });
    v.secrets = BTreeMap::from([("key".into(), "s".into())]);
    v.parameters = BTreeMap::from([("type".into(), "gp3".into())]);
    v.context = BTreeMap::from([("c".into(), "d".into())]);
    v.access_mode = CsiVolumeAccessMode::MultiNodeMultiWriter;
    v.attachment_mode = CsiVolumeAttachmentMode::FileSystem;
    v.read_allocs.insert("a1".into());
    v.write_allocs.insert("a2".into());
    v.read_claims.insert(
        "a1".into(),
        claim("a1", CsiVolumeClaimMode::Read, CsiVolumeClaimState::Taken),
    );
    v.write_claims.insert(
        "a2".into(),
        claim("a2", CsiVolumeClaimMode::Write, CsiVolumeClaimState::Taken),
    );
    v.past_claims.insert(
        "a0".into(),
        claim(
            "a0",
            CsiVolumeClaimMode::Gc,
            CsiVolumeClaimState::Unpublishing,
        ),
    );
    v.controller_required = true;
    v.controllers_healthy = 1;
    v.controllers_expected = 2;
    v.nodes_healthy = 3;
    v.nodes_expected = 4;
    v.schedulable = true;
    v.create_index = 5;
    v.modify_index = 6;
    v
}

fn plugin() -> CsiPlugin {
    let mut p = CsiPlugin::new("ebs", 2);
    p.provider = "ebs.csi.aws.com".into();
    p.version = "1.25.0".into();
    p.controller_required = true;
    p.controllers
        .insert("n2".into(), Arc::new(controller_info()));
    p.nodes.insert("n1".into(), Arc::new(node_info()));
    let mut stub = alloc();
    stub.csi_volume_requests.clear();
    p.allocations = vec![AllocListStub::new(Arc::new(stub))];
    let job = |ns: &str, id: &str, controllers, nodes| PluginJob {
        namespace: ns.into(),
        job_id: id.into(),
        expected: Expected { controllers, nodes },
    };
    // In (namespace, id) order: a monolith job, a controller job, a node job.
    p.jobs = vec![
        job("batch", "mono", 1, 1),
        job("default", "ebs-controller", 2, 0),
        job("default", "ebs-nodes", 0, 5),
    ];
    p.modify_index = 8;
    p
}

/// model → Nomad shape → JSON → Nomad shape → model.
fn round_trip<M, W>(m: &M) -> (M, serde_json::Value)
where
    for<'a> W: From<&'a M> + serde::Serialize + serde::de::DeserializeOwned,
    M: TryFrom<W, Error = ShapeError>,
{
    let json = serde_json::to_value(W::from(m)).unwrap();
    let back: W = serde_json::from_value(json.clone()).unwrap();
    (M::try_from(back).unwrap(), json)
}

#[test]
fn every_field_survives_the_nomad_shapes() {
    let (n, _) = round_trip::<Node, NomadNode>(&node());
    assert_eq!(n, node());
    let (a, _) = round_trip::<Allocation, NomadAllocation>(&alloc());
    assert_eq!(a, alloc());
    let (v, _) = round_trip::<CsiVolume, NomadCsiVolume>(&volume());
    assert_eq!(v, volume());
    let (p, _) = round_trip::<CsiPlugin, NomadCsiPlugin>(&plugin());
    assert_eq!(p, plugin());
    let (i, _) = round_trip::<CsiInfo, NomadCsiInfo>(&node_info());
    assert_eq!(i, node_info());
}

#[test]
fn a_node_reads_as_nomad_writes_it() {
    let json = serde_json::to_value(NomadNode::from(&node())).unwrap();
    let fp = &json["CSINodePlugins"]["ebs"];
    assert_eq!(json["ID"], "n1");
    assert_eq!(json["Status"], "down");
    assert_eq!(json["Drain"], true);
    assert_eq!(json["SchedulingEligibility"], "ineligible");
    assert_eq!(
        (json["CreateIndex"].clone(), json["ModifyIndex"].clone()),
        (json!(3), json!(9))
    );
    assert_eq!(fp["PluginID"], "ebs");
    assert_eq!(fp["AllocID"], "alloc-1");
    assert_eq!(fp["Healthy"], false);
    assert_eq!(fp["Provider"], "ebs.csi.aws.com");
    assert_eq!(fp["ProviderVersion"], "1.25.0");
    assert_eq!(fp["UpdateTime"], "2025-12-03T22:13:20.123456789Z");
    assert_eq!(fp["NodeInfo"]["MaxVolumes"], 25);
    assert_eq!(
        fp["NodeInfo"]["AccessibleTopology"]["Segments"]["zone"],
        "eu-west-1a"
    );
    assert_eq!(
        json["CSIControllerPlugins"]["ebs"]["ControllerInfo"]["SupportsAttachDetach"],
        true
    );
    let stub = serde_json::to_value(NomadNodeListStub::from(&node())).unwrap();
    assert_eq!(stub["SchedulingEligibility"], "ineligible");
    assert!(stub.get("CSINodePlugins").is_none());
}

#[test]
fn volumes_claims_and_modes_read_as_nomad_spells_them() {
    let json = serde_json::to_value(NomadCsiVolume::from(&volume())).unwrap();
    assert_eq!(json["AccessMode"], "multi-node-multi-writer");
    assert_eq!(
        json["RequestedCapabilities"][0]["AttachmentMode"],
        "block-device"
    );
    assert_eq!(json["ReadAllocs"], json!({"a1": null}));
    assert_eq!(json["WriteClaims"]["a2"]["Mode"], 1);
    assert_eq!(json["PastClaims"]["a0"]["State"], 4);
    assert_eq!(json["PastClaims"]["a0"]["AllocationID"], "a0");
    assert_eq!(json["MountOptions"]["FSType"], "ext4");
    let mut unknown = CsiVolume::new("default", "v", "p");
    unknown.access_mode = CsiVolumeAccessMode::Unknown;
    let json = serde_json::to_value(NomadCsiVolume::from(&unknown)).unwrap();
    assert_eq!(json["AccessMode"], "");
    assert_eq!(json["AttachmentMode"], "");
    let stub = serde_json::to_value(NomadCsiVolumeListStub::from(&volume())).unwrap();
    assert_eq!(
        (
            stub["CurrentReaders"].clone(),
            stub["CurrentWriters"].clone()
        ),
        (json!(1), json!(1))
    );
    let p = serde_json::to_value(NomadCsiPluginListStub::from(&plugin())).unwrap();
    assert_eq!(p["ControllersHealthy"], 1);
    // Expected: sums over the live jobs (1 + 2 controllers, 1 + 5 nodes), not the
    // instances fingerprinted.
    assert_eq!(p["ControllersExpected"], 3);
    assert_eq!(p["NodesExpected"], 6);
}

#[test]
fn a_plugins_jobs_read_as_nomads_job_descriptions() {
    let json = serde_json::to_value(NomadCsiPlugin::from(&plugin())).unwrap();
    assert_eq!(
        json["ControllerJobs"],
        json!({
            "batch": {"mono": {"Namespace": "batch", "ID": "mono", "Expected": 1}},
            "default": {"ebs-controller": {"Namespace": "default", "ID": "ebs-controller", "Expected": 2}},
        })
    );
    assert_eq!(
        json["NodeJobs"]["default"]["ebs-nodes"]["Expected"],
        json!(5)
    );
    assert!(json["NodeJobs"]["default"].get("ebs-controller").is_none());
    assert_eq!(
        (
            json["ControllersExpected"].clone(),
            json["NodesExpected"].clone()
        ),
        (json!(3), json!(6))
    );
    // Go's nil maps read as none; a job listed with nothing expected is left out.
    let mut shape = NomadCsiPlugin::from(&plugin());
    shape.controller_jobs.clear();
    let mut json = serde_json::to_value(&shape).unwrap();
    json["ControllerJobs"] = serde_json::Value::Null;
    json["NodeJobs"]["default"]["idle"] =
        json!({"Namespace": "default", "ID": "idle", "Expected": 0});
    let back =
        CsiPlugin::try_from(serde_json::from_value::<NomadCsiPlugin>(json).unwrap()).unwrap();
    let ids: Vec<&str> = back.jobs.iter().map(|j| &*j.job_id).collect();
    assert_eq!(ids, ["mono", "ebs-nodes"]);
    assert_eq!((back.controllers_expected(), back.nodes_expected()), (0, 6));
}

#[test]
fn input_needs_no_indexes_and_bad_spellings_are_named() {
    let n: NomadNode = serde_json::from_value(json!({"ID": "n1", "Status": "ready"})).unwrap();
    let n = Node::try_from(n).unwrap();
    assert!(n.eligible && n.create_index == 0);
    let bad: NomadNode = serde_json::from_value(
        json!({"ID": "n1", "Status": "ready", "SchedulingEligibility": "maybe"}),
    )
    .unwrap();
    assert_eq!(
        Node::try_from(bad).unwrap_err().field,
        "SchedulingEligibility"
    );
    let zero: NomadCsiInfo =
        serde_json::from_value(json!({"PluginID": "p", "UpdateTime": "0001-01-01T00:00:00Z"}))
            .unwrap();
    assert_eq!(CsiInfo::try_from(zero).unwrap().update_time, 0);
    let bad_time: NomadCsiInfo =
        serde_json::from_value(json!({"PluginID": "p", "UpdateTime": "yesterday"})).unwrap();
    assert_eq!(CsiInfo::try_from(bad_time).unwrap_err().field, "UpdateTime");
}
