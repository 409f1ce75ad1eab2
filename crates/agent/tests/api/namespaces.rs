//! `*` names every namespace in a list, and nothing else: a registration whose body
//! says `"Namespace": "*"` and a read of one job or volume with `?namespace=*` are a
//! clear 400 that changes nothing — not a job stored in a namespace named `*`, nor a
//! silent read of `default`.

use serde_json::{Value, json};

use crate::support::Agents;
use crate::{state_bytes, upsert};

async fn send(agents: &Agents, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut req = crate::support::http().request(method.parse().unwrap(), agents.url(0, path));
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(serde_json::to_vec(b).unwrap());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let body = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

fn job(namespace: &str) -> Value {
    json!({"Job": {
        "ID": "web", "Namespace": namespace, "Type": "service",
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t"}]}],
    }})
}

fn volume(namespace: &str) -> Value {
    json!({"Volumes": [{"ID": "v1", "Namespace": namespace, "PluginID": "ebs", "ExternalID": "vol-1"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn star_names_every_namespace_only_in_lists() {
    let agents = Agents::start(1, None).await;
    agents.client(0).apply(&upsert("n1", "ebs")).await.unwrap();
    let (s, v) = send(&agents, "PUT", "/v1/jobs", Some(&job("default"))).await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = send(&agents, "PUT", "/v1/volume/csi/v1", Some(&volume(""))).await;
    assert_eq!(s, 200, "{v}");
    let before = state_bytes(&agents, 0).await;

    let refused = [
        ("PUT", "/v1/jobs", Some(job("*")), "\"Namespace\": \"*\""),
        (
            "POST",
            "/v1/job/web",
            Some(job("*")),
            "\"Namespace\": \"*\"",
        ),
        ("PUT", "/v1/jobs?namespace=*", Some(job("")), "?namespace=*"),
        ("GET", "/v1/job/web?namespace=*", None, "a read of one job"),
        (
            "GET",
            "/v1/job/web/allocations?namespace=*",
            None,
            "a read of one job's allocations",
        ),
        ("DELETE", "/v1/job/web?namespace=*", None, "a job write"),
        (
            "PUT",
            "/v1/volume/csi/v1",
            Some(volume("*")),
            "\"Namespace\": \"*\"",
        ),
        (
            "PUT",
            "/v1/volume/csi/v1?namespace=*",
            Some(volume("")),
            "a volume registration",
        ),
        (
            "GET",
            "/v1/volume/csi/v1?namespace=*",
            None,
            "a read of one volume",
        ),
        (
            "DELETE",
            "/v1/volume/csi/v1?namespace=*",
            None,
            "a volume deregistration",
        ),
    ];
    for (method, path, body, says) in refused {
        let (s, e) = send(&agents, method, path, body.as_ref()).await;
        assert_eq!(
            (s, e["kind"].as_str()),
            (400, Some("BadRequest")),
            "{method} {path}: {e}"
        );
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains(says) && message.contains("names every namespace"),
            "{method} {path}: {message}"
        );
    }
    assert_eq!(state_bytes(&agents, 0).await, before);

    // Lists still take `*`, and the job and volume read back in `default`.
    let (s, jobs) = send(&agents, "GET", "/v1/jobs?namespace=*", None).await;
    assert_eq!(s, 200);
    assert_eq!(jobs[0]["ID"], "web");
    assert_eq!(jobs[0]["Namespace"], "default");
    let (s, vols) = send(&agents, "GET", "/v1/volumes?namespace=*", None).await;
    assert_eq!((s, vols[0]["Namespace"].as_str()), (200, Some("default")));
    let (s, j) = send(&agents, "GET", "/v1/job/web", None).await;
    assert_eq!((s, j["Namespace"].as_str()), (200, Some("default")));
    agents.shutdown().await;
}
