//! Each write the way Nomad's Go `api` package sends it: `PUT`, no `Content-Type`,
//! `null` for every nil slice and map — and Nomad's answer back.

use schedstate::state::Command;
use serde_json::{Value, json};

use crate::support::{Agents, alloc};
use crate::upsert;

pub(crate) const TOKEN: &str = "go-client-management-secret";

/// Sends `body` as Go's client does: the method given, the token in `X-Nomad-Token`,
/// no `Content-Type` (reqwest sets none for a byte body).
pub(crate) async fn go(
    agents: &Agents,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = crate::support::http()
        .request(method.parse().unwrap(), agents.url(0, path))
        .header("X-Nomad-Token", TOKEN);
    if let Some(b) = body {
        req = req.body(serde_json::to_vec(b).unwrap());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        panic!(
            "{method} {path}: not JSON: {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, value)
}

/// A write's index answer: a positive `Index`, a number as Go's `uint64`.
fn index_of(v: &Value) -> u64 {
    v["Index"]
        .as_u64()
        .unwrap_or_else(|| panic!("no Index: {v}"))
}

/// A Go client's `CSIVolume` for a registration: every nil slice and map `null`.
fn go_volume(id: &str, plugin: &str) -> Value {
    json!({
        "ID": id, "Name": id, "Namespace": "", "ExternalID": format!("vol-{id}"),
        "PluginID": plugin, "Provider": "", "ProviderVersion": "",
        "Topologies": null, "AccessMode": "", "AttachmentMode": "",
        "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}],
        "MountOptions": null, "Secrets": null, "Parameters": null, "Context": null,
        "ReadAllocs": null, "WriteAllocs": null, "ReadClaims": null, "WriteClaims": null,
        "PastClaims": null, "Allocations": null, "Schedulable": false,
        "ControllerRequired": false, "ControllersHealthy": 0, "ControllersExpected": 0,
        "NodesHealthy": 0, "NodesExpected": 0, "ResourceExhausted": "0001-01-01T00:00:00Z",
        "CreateIndex": 0, "ModifyIndex": 0,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_as_the_go_client_sends_them() {
    let agents = Agents::start(1, Some(TOKEN)).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("a1", "n1")],
    })
    .await
    .unwrap();

    // Node eligibility: `NodeEligibilityUpdateResponse`.
    let (s, v) = go(
        &agents,
        "PUT",
        "/v1/node/n1/eligibility",
        Some(&json!({"NodeID": "n1", "Eligibility": "ineligible"})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["NodeModifyIndex"], v["Index"]);
    assert_eq!(v["EvalIDs"], json!([]));
    assert!(index_of(&v) > 0);
    let (_, node) = go(&agents, "GET", "/v1/node/n1", None).await;
    assert_eq!(node["SchedulingEligibility"], "ineligible");
    let (s, v) = go(
        &agents,
        "PUT",
        "/v1/node/n1/eligibility",
        Some(&json!({"NodeID": "n1", "Eligibility": "eligible"})),
    )
    .await;
    assert_eq!(s, 200, "{v}");

    // Allocation stop: Go sends no body at all.
    let (s, v) = go(&agents, "PUT", "/v1/allocation/a1/stop", None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["EvalID"], "");
    assert!(index_of(&v) > 0);
    let (_, a) = go(&agents, "GET", "/v1/allocation/a1", None).await;
    assert_eq!(a["DesiredStatus"], "stop");

    // A job: Go's `Jobs().Register` (PUT /v1/jobs), its nil slices and maps null.
    let job = json!({"Job": {
        "ID": "plugin-ebs", "Name": "plugin-ebs", "Namespace": null, "Type": "system",
        "Datacenters": null, "Meta": null, "Constraints": null,
        "TaskGroups": [{"Name": "nodes", "Count": null, "Tasks": [{
            "Name": "plugin", "Driver": "docker", "Config": null, "Env": null,
            "CSIPluginConfig": {"ID": "ebs", "Type": "node", "MountDir": "/csi"},
        }]}],
    }, "EnforceIndex": false, "JobModifyIndex": 0, "PolicyOverride": false});
    let (s, v) = go(&agents, "PUT", "/v1/jobs", Some(&job)).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["EvalID"], "");
    assert!(v["JobModifyIndex"].as_u64().unwrap() > 0);

    // A volume: `CSIVolumes().Register`, `Topologies`, `ReadAllocs`, … all null.
    let (s, v) = go(
        &agents,
        "PUT",
        "/v1/volume/csi/v1",
        Some(&json!({"Volumes": [go_volume("v1", "ebs")], "WriteRequest": null})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert!(index_of(&v) > 0);
    let (s, vol) = go(&agents, "GET", "/v1/volume/csi/v1", None).await;
    assert_eq!(s, 200, "{vol}");
    assert_eq!(vol["ID"], "v1");
    assert_eq!(vol["Namespace"], "default");
    assert_eq!(vol["ExternalID"], "vol-v1");
    assert_eq!(vol["Provider"], "ebs.csi.aws.com");
    assert_eq!(vol["Topologies"], json!([]));
    // POST on the same path is the same write (python-nomad).
    let (s, v) = go(
        &agents,
        "POST",
        "/v1/volume/csi/v1",
        Some(&json!({"Volumes": [go_volume("v1", "ebs")]})),
    )
    .await;
    assert_eq!(s, 200, "{v}");

    // An ACL token: `ACLTokens().Create` is a PUT.
    let (s, v) = go(
        &agents,
        "PUT",
        "/v1/acl/token",
        Some(&json!({"Name": "ci", "Type": "management", "Scopes": null})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["Name"], "ci");

    // A declared type that is not JSON is still refused, and changes nothing.
    let before = agents.agents[0]
        .as_ref()
        .unwrap()
        .server()
        .read_stale()
        .canonical_bytes()
        .unwrap();
    let resp = crate::support::http()
        .put(agents.url(0, "/v1/node/n1/eligibility"))
        .header("X-Nomad-Token", TOKEN)
        .header("content-type", "text/plain")
        .body(r#"{"Eligibility": "ineligible"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    let after = agents.agents[0]
        .as_ref()
        .unwrap()
        .server()
        .read_stale()
        .canonical_bytes()
        .unwrap();
    assert_eq!(before, after);
    agents.shutdown().await;
}

/// `Agent().Self()`: `stats` is Go's `map[string]map[string]string` — every value a
/// string — with Nomad's `nomad` section on the leader and on a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_self_stats_are_strings_with_nomads_section() {
    let agents = Agents::start(3, Some(TOKEN)).await;
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    let leader_addr = format!("127.0.0.1:{}", agents.ports[leader]);
    for (i, is_leader) in [(leader, true), (follower, false)] {
        let resp = crate::support::http()
            .get(agents.url(i, "/v1/agent/self"))
            .header("X-Nomad-Token", TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let v: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        let stats = v["stats"].as_object().unwrap();
        for (section, values) in stats {
            for (key, value) in values.as_object().unwrap() {
                assert!(value.is_string(), "stats.{section}.{key} = {value}");
            }
        }
        let nomad = &v["stats"]["nomad"];
        assert_eq!(nomad["server"], "true");
        assert_eq!(nomad["leader"], if is_leader { "true" } else { "false" });
        assert_eq!(nomad["leader_addr"], leader_addr.as_str());
        assert_eq!(nomad["bootstrap"], "false");
        assert_eq!(nomad["known_regions"], "1");
        let own = &v["stats"]["schedstate"];
        assert_eq!(own["id"], (i + 1).to_string().as_str());
        assert_eq!(own["leader"], (leader + 1).to_string().as_str());
        assert_eq!(own["fresh"], "false");
        assert!(own["term"].as_str().unwrap().parse::<u64>().unwrap() > 0);
        assert!(own["last_applied"].as_str().unwrap().parse::<u64>().is_ok());
        assert_eq!(
            v["stats"]["raft"]["state"],
            if is_leader { "Leader" } else { "Follower" }
        );
        // schedstate's own client reads its section back.
        let me = agents.client(i).agent_self().await.unwrap();
        assert_eq!((me.id, me.leader), (i as u64 + 1, Some(leader as u64 + 1)));
    }
    agents.shutdown().await;
}

/// A token no server knows is Nomad's 403 ("ACL token not found") on every route,
/// with schedstate's kind; `GET /v1/acl/token/self` with it is 404, for a token never
/// made and for one revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tokens_are_403_and_self_of_one_is_404() {
    let agents = Agents::start(1, Some(TOKEN)).await;
    let with = |secret: &str, method: &str, path: &str| {
        crate::support::http()
            .request(method.parse().unwrap(), agents.url(0, path))
            .header("X-Nomad-Token", secret)
            .send()
    };
    let (s, v) = go(
        &agents,
        "PUT",
        "/v1/acl/token",
        Some(&json!({"Name": "reader", "Scopes": ["read"]})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (accessor, secret) = (
        v["AccessorID"].as_str().unwrap().to_string(),
        v["SecretID"].as_str().unwrap().to_string(),
    );
    let resp = with(&secret, "GET", "/v1/acl/token/self").await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (s, _) = go(
        &agents,
        "DELETE",
        &format!("/v1/acl/token/{accessor}"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    for gone in ["never-made-token-0123456789", secret.as_str()] {
        for (method, path) in [
            ("GET", "/v1/nodes"),
            ("GET", "/v1/agent/self"),
            ("PUT", "/v1/node/n1/eligibility"),
            ("GET", "/v1/acl/tokens"),
        ] {
            let resp = with(gone, method, path).await.unwrap();
            let status = resp.status().as_u16();
            let e: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
            assert_eq!(
                (status, e["kind"].as_str()),
                (403, Some("UnknownToken")),
                "{method} {path}"
            );
            assert!(
                e["message"]
                    .as_str()
                    .unwrap()
                    .contains("ACL token not found"),
                "{e}"
            );
        }
        let resp = with(gone, "GET", "/v1/acl/token/self").await.unwrap();
        let status = resp.status().as_u16();
        let e: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!((status, e["kind"].as_str()), (404, Some("UnknownToken")));
    }
    // No token at all stays 401.
    let resp = crate::support::http()
        .get(agents.url(0, "/v1/acl/token/self"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    agents.shutdown().await;
}

/// `Nodes().UpdateDrain` as Go sends it: starting a drain marks the node ineligible
/// (a system job's expected count follows), the node carries a `DrainStrategy` while
/// it drains and cannot be made eligible; ending it leaves the node ineligible unless
/// `MarkEligible`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_on_nomads_path_sets_eligibility_and_a_strategy() {
    let agents = Agents::start(1, Some(TOKEN)).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    let job = json!({"Job": {
        "ID": "plugin-ebs", "Type": "system",
        "TaskGroups": [{"Name": "nodes", "Tasks": [{
            "Name": "plugin", "CSIPluginConfig": {"ID": "ebs", "Type": "node"},
        }]}],
    }});
    let (s, v) = go(&agents, "PUT", "/v1/jobs", Some(&job)).await;
    assert_eq!(s, 200, "{v}");
    let mut a = alloc("a1", "n1");
    a.job_id = "plugin-ebs".into();
    a.task_group = "nodes".into();
    c.apply(&Command::UpsertAllocs { allocs: vec![a] })
        .await
        .unwrap();
    let expected = || async {
        let (_, p) = go(&agents, "GET", "/v1/plugin/csi/ebs", None).await;
        p["NodesExpected"].as_u64().unwrap()
    };
    assert_eq!(expected().await, 1);

    let drain = |spec: Value, mark: bool| json!({"NodeID": "n1", "DrainSpec": spec, "MarkEligible": mark, "Meta": null});
    let spec = json!({"Deadline": 3_600_000_000_000_i64, "IgnoreSystemJobs": false});
    let (s, v) = go(
        &agents,
        "PUT",
        "/v1/node/n1/drain",
        Some(&drain(spec.clone(), false)),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["NodeModifyIndex"], v["Index"]);
    assert_eq!(v["EvalIDs"], json!([]));
    let (_, n) = go(&agents, "GET", "/v1/node/n1", None).await;
    assert_eq!(n["Drain"], true);
    assert_eq!(n["SchedulingEligibility"], "ineligible");
    let strategy = &n["DrainStrategy"];
    assert!(strategy["Deadline"].is_i64(), "{strategy}");
    assert_eq!(strategy["Deadline"], 0);
    assert_eq!(strategy["IgnoreSystemJobs"], false);
    assert_eq!(strategy["ForceDeadline"], "0001-01-01T00:00:00Z");
    assert_eq!(strategy["StartedAt"], "0001-01-01T00:00:00Z");
    assert_eq!(expected().await, 0);
    // Draining, it cannot be made eligible (Nomad's refusal); ineligible again is
    // no change.
    let elig = |e: &str| json!({"NodeID": "n1", "Eligibility": e});
    let (s, e) = go(
        &agents,
        "PUT",
        "/v1/node/n1/eligibility",
        Some(&elig("eligible")),
    )
    .await;
    assert_eq!((s, &e["kind"]), (400, &json!("NodeDraining")), "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("while it is draining")
    );
    let (s, _) = go(
        &agents,
        "PUT",
        "/v1/node/n1/eligibility",
        Some(&elig("ineligible")),
    )
    .await;
    assert_eq!(s, 200);
    let (_, n) = go(&agents, "GET", "/v1/node/n1", None).await;
    assert_eq!(
        (&n["Drain"], &n["SchedulingEligibility"]),
        (&json!(true), &json!("ineligible"))
    );

    // Ended without MarkEligible: not draining, still ineligible, no strategy.
    let (s, v) = go(
        &agents,
        "PUT",
        "/v1/node/n1/drain",
        Some(&drain(Value::Null, false)),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (_, n) = go(&agents, "GET", "/v1/node/n1", None).await;
    assert_eq!(
        (
            &n["Drain"],
            &n["SchedulingEligibility"],
            &n["DrainStrategy"]
        ),
        (&json!(false), &json!("ineligible"), &Value::Null)
    );
    assert_eq!(expected().await, 0);
    // Once the drain is over, eligibility is the node's own again.
    let (s, _) = go(
        &agents,
        "PUT",
        "/v1/node/n1/eligibility",
        Some(&elig("eligible")),
    )
    .await;
    assert_eq!(s, 200);
    let (_, n) = go(&agents, "GET", "/v1/node/n1", None).await;
    assert_eq!(n["SchedulingEligibility"], "eligible");

    // Again, ended with MarkEligible: eligible, counted again.
    let (s, _) = go(
        &agents,
        "POST",
        "/v1/node/n1/drain",
        Some(&drain(spec, false)),
    )
    .await;
    assert_eq!(s, 200);
    let (s, _) = go(
        &agents,
        "POST",
        "/v1/node/n1/drain",
        Some(&drain(Value::Null, true)),
    )
    .await;
    assert_eq!(s, 200);
    let (_, n) = go(&agents, "GET", "/v1/node/n1", None).await;
    assert_eq!(
        (
            &n["Drain"],
            &n["SchedulingEligibility"],
            &n["DrainStrategy"]
        ),
        (&json!(false), &json!("eligible"), &Value::Null)
    );
    assert_eq!(expected().await, 1);
    // The list stub has no strategy, as in Nomad.
    let (_, list) = go(&agents, "GET", "/v1/nodes", None).await;
    assert!(list[0].get("DrainStrategy").is_none(), "{list}");
    agents.shutdown().await;
}
