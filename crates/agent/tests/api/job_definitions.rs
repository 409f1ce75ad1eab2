//! A job's whole definition over HTTP: registered as Nomad's clients send it (drivers,
//! configs, a plugin's `MountDir`, anything), read back whole with the store's own
//! fields laid over it; registering what was read back is no new version; a
//! definition over 1 MiB is 413 `JobDefinitionTooLarge` and changes nothing.

use serde_json::{Value, json};

use crate::state_bytes;
use crate::support::Agents;

async fn call(agents: &Agents, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let http = crate::support::http();
    let url = agents.url(0, path);
    let req = match method {
        "GET" => http.get(url),
        "PUT" => http.put(url),
        _ => http.post(url),
    };
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(serde_json::to_vec(b).unwrap()),
        None => req,
    };
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let body = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

fn registration(image: &str) -> Value {
    json!({"Job": {
        "ID": "ebs-nodes", "Name": "EBS nodes", "Type": "system", "Priority": 70,
        "Datacenters": ["dc1", "dc2"], "Meta": {"team": "storage"},
        // What a client sends back after a read: ignored, the store sets these.
        "Version": 41, "Status": "dead", "ModifyIndex": 7, "CreateIndex": 7,
        "TaskGroups": [{
            "Name": "nodes", "Count": null,
            "RestartPolicy": {"Attempts": 3, "Mode": "delay"},
            "Tasks": [{
                "Name": "plugin", "Driver": "docker",
                "Config": {"image": image, "args": ["node", "--endpoint=unix://csi/csi.sock"]},
                "Resources": {"CPU": 100, "MemoryMB": 128},
                "CSIPluginConfig": {"ID": "ebs", "Type": "node", "MountDir": "/csi"},
            }],
        }],
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_job_reads_back_whole() {
    let agents = Agents::start(1, None).await;
    let (s, v) = call(&agents, "PUT", "/v1/jobs", Some(&registration("ebs:1.25"))).await;
    assert_eq!(s, 200, "{v}");
    let registered = v["JobModifyIndex"].as_u64().unwrap();

    let (s, job) = call(&agents, "GET", "/v1/job/ebs-nodes", None).await;
    assert_eq!(s, 200, "{job}");
    // Everything the user sent…
    assert_eq!(job["Name"], "EBS nodes");
    assert_eq!(job["Priority"], 70);
    assert_eq!(job["Datacenters"], json!(["dc1", "dc2"]));
    assert_eq!(job["Meta"], json!({"team": "storage"}));
    let group = &job["TaskGroups"][0];
    assert_eq!(group["RestartPolicy"]["Attempts"], 3);
    let task = &group["Tasks"][0];
    assert_eq!(task["Driver"], "docker");
    assert_eq!(task["Config"]["image"], "ebs:1.25");
    assert_eq!(task["Resources"]["MemoryMB"], 128);
    assert_eq!(
        task["CSIPluginConfig"],
        json!({"ID": "ebs", "Type": "node", "MountDir": "/csi"})
    );
    // …with what the store decides laid over it, never what the body said.
    assert_eq!(job["ID"], "ebs-nodes");
    assert_eq!(job["Namespace"], "default");
    assert_eq!(job["Type"], "system");
    assert_eq!(job["Version"], 0);
    assert_eq!(job["Status"], "pending");
    assert_eq!(job["Stop"], false);
    assert_eq!(group["Count"], 1, "Nomad's default for a null count");
    assert_eq!(job["CreateIndex"].as_u64(), Some(registered));
    assert_eq!(job["ModifyIndex"].as_u64(), Some(registered));
    assert_eq!(job["JobModifyIndex"].as_u64(), Some(registered));
    // A list with `full` answers the same.
    let (_, full) = call(&agents, "GET", "/v1/jobs?full=true", None).await;
    assert_eq!(full[0], job);

    // What a client read, registered again as it is: the same job, no new version.
    let (s, v) = call(
        &agents,
        "POST",
        "/v1/job/ebs-nodes",
        Some(&json!({"Job": job})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["JobModifyIndex"].as_u64(), Some(registered));
    // A new image (nothing the store parses): a new version, answered back.
    let (s, v) = call(&agents, "POST", "/v1/jobs", Some(&registration("ebs:1.26"))).await;
    assert_eq!(s, 200, "{v}");
    let (_, job) = call(&agents, "GET", "/v1/job/ebs-nodes", None).await;
    assert_eq!(job["Version"], 1);
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["Config"]["image"],
        "ebs:1.26"
    );
    assert_eq!(job["JobModifyIndex"], v["JobModifyIndex"]);

    // The event stream's Job events carry the same whole job.
    let mut resp = crate::support::http()
        .get(agents.url(0, "/v1/event/stream?index=0&topic=Job"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut text = String::new();
    let deadline = std::time::Instant::now() + crate::support::DEADLINE;
    let payload = 'read: loop {
        assert!(std::time::Instant::now() < deadline, "no Job event");
        let chunk = resp.chunk().await.unwrap().expect("stream open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(nl) = text.find('\n') {
            let line: String = text.drain(..=nl).collect();
            let batch: Value = serde_json::from_str(&line).unwrap();
            if let Some(e) = batch["Events"].as_array().and_then(|e| e.first()) {
                break 'read e["Payload"]["Job"].clone();
            }
        }
    };
    assert_eq!(payload["TaskGroups"][0]["Tasks"][0]["Driver"], "docker");
    assert_eq!(payload["Version"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_over_the_limit_is_413_and_changes_nothing() {
    let agents = Agents::start(1, None).await;
    let (s, _) = call(&agents, "PUT", "/v1/jobs", Some(&registration("ebs:1.25"))).await;
    assert_eq!(s, 200);
    let before = state_bytes(&agents, 0).await;
    let mut big = registration("ebs:1.26");
    big["Job"]["Meta"]["blob"] = json!("x".repeat(1 << 20));
    let (s, e) = call(&agents, "PUT", "/v1/jobs", Some(&big)).await;
    assert_eq!(s, 413, "{e}");
    assert_eq!(e["kind"], "JobDefinitionTooLarge");
    assert!(e["message"].as_str().unwrap().contains("1048576"), "{e}");
    assert!(state_bytes(&agents, 0).await == before);
    // Nor through the commands route: the store's input rule.
    let mut job = schedstate::model::Job::new("default", "big");
    job.definition = Some(schedstate::model::JobDefinition::new(
        "x".repeat((1 << 20) + 1),
    ));
    let c = agents.client(0);
    let err = c
        .apply(&schedstate::state::Command::UpsertJobs { jobs: vec![job] })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("job definition"), "{err}");
    assert!(state_bytes(&agents, 0).await == before);
}
