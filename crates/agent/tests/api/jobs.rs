//! Jobs over HTTP in Nomad's shapes: registered as Nomad's clients send them, read
//! back as Nomad's `Job` and `JobListStub`, driving the plugins' expected counts
//! (`/v1/plugin/csi/{id}`: `ControllersExpected`, `NodesExpected`, `ControllerJobs`,
//! `NodeJobs`); stopped and purged with `DELETE`; bad bodies refused with a 400 that
//! names the problem; a blocking read of one job woken by that job's writes only.

use std::time::Duration;

use reqwest::header::HeaderMap;
use schedstate::model::{
    Allocation, ClientStatus, CsiPluginType, Job, JobStatus, JobType, Task, TaskCsiPlugin,
    TaskGroup,
};
use schedstate::state::Command;
use schedstate_agent::ReadOptions;
use serde_json::{Value, json};

use crate::support::{Agents, DEADLINE, alloc};
use crate::{error_of, state_bytes, upsert};

async fn get(agents: &Agents, path: &str) -> (u16, HeaderMap, Value) {
    let resp = crate::support::http()
        .get(agents.url(0, path))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, headers, body)
}

/// `method path` with a JSON body; the status and the answer.
async fn send(agents: &Agents, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = crate::support::http();
    let url = agents.url(0, path);
    let req = match method {
        "PUT" => http.put(url),
        "DELETE" => http.delete(url),
        _ => http.post(url),
    };
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&b).unwrap()),
        None => req,
    };
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let body = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

fn index_header(h: &HeaderMap) -> u64 {
    h["X-Nomad-Index"].to_str().unwrap().parse().unwrap()
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i["ID"].as_str().unwrap().to_string())
        .collect()
}

/// A job as a Nomad client sends it: the parts the store keeps and some it ignores
/// (datacenters, drivers, a plugin's mount directory).
fn nomad_job(id: &str, count: i64, plugin: &str, kind: &str) -> Value {
    json!({
        "ID": id,
        "Name": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "plugin",
            "Count": count,
            "Tasks": [{
                "Name": "plugin",
                "Driver": "docker",
                "Config": {"image": "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.25.0"},
                "CSIPluginConfig": {"ID": plugin, "Type": kind, "MountDir": "/csi"},
            }, {
                "Name": "log-shipper",
                "Driver": "docker",
            }],
        }],
    })
}

/// A model job of one group running `plugin` as `kind`.
fn model_job(ns: &str, id: &str, job_type: JobType, count: u32, plugin: &str) -> Job {
    let mut job = Job::new(ns, id);
    job.job_type = job_type;
    job.task_groups = vec![TaskGroup {
        name: "plugin".into(),
        count,
        tasks: vec![Task {
            name: "plugin".into(),
            csi_plugin: Some(TaskCsiPlugin {
                id: plugin.into(),
                plugin_type: CsiPluginType::Node,
            }),
        }],
    }];
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_in_nomads_shapes_set_the_plugins_expected_counts() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    c.apply(&upsert("n2", "ebs")).await.unwrap();
    // Two node instances and no job: nothing is expected (not the instance count).
    let (_, _, plugin) = get(&agents, "/v1/plugin/csi/ebs").await;
    assert_eq!(
        (
            plugin["NodesHealthy"].clone(),
            plugin["NodesExpected"].clone()
        ),
        (json!(2), json!(0))
    );

    // Registered the three ways Nomad's clients do.
    let (s, nodes) = send(
        &agents,
        "POST",
        "/v1/jobs",
        Some(json!({"Job": nomad_job("ebs-nodes", 5, "ebs", "node")})),
    )
    .await;
    assert_eq!(s, 200, "{nodes}");
    assert_eq!(nodes["EvalID"], "");
    let registered = nodes["Index"].as_u64().unwrap();
    assert_eq!(nodes["JobModifyIndex"].as_u64(), Some(registered));
    let (s, ctrl) = send(
        &agents,
        "POST",
        "/v1/job/ebs-controller",
        Some(json!({"Job": nomad_job("ebs-controller", 2, "ebs", "controller")})),
    )
    .await;
    assert_eq!(s, 200, "{ctrl}");
    let mut mono = nomad_job("hostpath", 1, "hostpath", "monolith");
    mono["Namespace"] = json!("batch");
    let (s, _) = send(&agents, "PUT", "/v1/jobs", Some(json!({"Job": mono}))).await;
    assert_eq!(s, 200);

    // Listed as Nomad's stubs: the default namespace unless named, * for all.
    let (s, h, list) = get(&agents, "/v1/jobs").await;
    assert_eq!(s, 200);
    assert_eq!(ids(&list), ["ebs-controller", "ebs-nodes"]);
    assert_eq!(
        index_header(&h),
        agents.agents[0]
            .as_ref()
            .unwrap()
            .server()
            .read_stale()
            .view()
            .table_index(schedstate::state::Table::Jobs)
    );
    let stub = &list[1];
    assert_eq!(
        (
            stub["Type"].as_str(),
            stub["Status"].as_str(),
            stub["Stop"].as_bool(),
            stub["Version"].as_u64()
        ),
        (Some("service"), Some("pending"), Some(false), Some(0))
    );
    assert!(stub.get("TaskGroups").is_none(), "a stub: {stub}");
    let (_, _, all) = get(&agents, "/v1/jobs?namespace=*").await;
    assert_eq!(ids(&all), ["hostpath", "ebs-controller", "ebs-nodes"]);
    let (_, _, batch) = get(&agents, "/v1/jobs?namespace=batch&full=true").await;
    assert_eq!(
        batch[0]["TaskGroups"][0]["Tasks"][0]["CSIPluginConfig"],
        json!({"ID": "hostpath", "Type": "monolith", "MountDir": "/csi"})
    );
    let (_, h, page) = get(&agents, "/v1/jobs?per_page=1").await;
    assert_eq!(ids(&page), ["ebs-controller"]);
    assert_eq!(h["X-Nomad-NextToken"], "default/ebs-nodes");
    let (_, _, page) = get(&agents, "/v1/jobs?per_page=1&next_token=default/ebs-nodes").await;
    assert_eq!(ids(&page), ["ebs-nodes"]);
    let (_, _, by_prefix) = get(&agents, "/v1/jobs?prefix=ebs-n").await;
    assert_eq!(ids(&by_prefix), ["ebs-nodes"]);
    let (_, _, filtered) = get(
        &agents,
        "/v1/jobs?filter=ID%20matches%20%22ctrl%7Ccontroller%22",
    )
    .await;
    assert_eq!(ids(&filtered), ["ebs-controller"]);

    // One job, with its own modify index.
    let (s, h, job) = get(&agents, "/v1/job/ebs-nodes").await;
    assert_eq!(s, 200);
    assert_eq!(job["TaskGroups"][0]["Count"], 5);
    assert_eq!(job["TaskGroups"][0]["Tasks"].as_array().unwrap().len(), 2);
    assert_eq!(job["ModifyIndex"].as_u64(), Some(index_header(&h)));
    assert_eq!(job["ModifyIndex"].as_u64(), Some(registered));

    // The plugin: expected = the sums over the jobs, and which jobs, as Nomad lists them.
    let (_, _, plugin) = get(&agents, "/v1/plugin/csi/ebs").await;
    assert_eq!(
        (
            plugin["ControllersExpected"].clone(),
            plugin["NodesHealthy"].clone(),
            plugin["NodesExpected"].clone()
        ),
        (json!(2), json!(2), json!(5))
    );
    assert_eq!(
        plugin["NodeJobs"],
        json!({"default": {"ebs-nodes": {"Namespace": "default", "ID": "ebs-nodes", "Expected": 5}}})
    );
    assert_eq!(
        plugin["ControllerJobs"]["default"]["ebs-controller"]["Expected"],
        2
    );
    let (_, _, plugins) = get(&agents, "/v1/plugins").await;
    let ebs = plugins
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ID"] == "ebs")
        .unwrap();
    assert_eq!(
        (
            ebs["ControllersExpected"].clone(),
            ebs["NodesExpected"].clone()
        ),
        (json!(2), json!(5))
    );
    // A plugin only a job names exists, with nothing running; a monolith counts twice.
    let (s, _, hostpath) = get(&agents, "/v1/plugin/csi/hostpath").await;
    assert_eq!(s, 200);
    assert_eq!(
        (
            hostpath["ControllersExpected"].clone(),
            hostpath["NodesExpected"].clone(),
            hostpath["NodesHealthy"].clone()
        ),
        (json!(1), json!(1), json!(0))
    );
    // The client's model plugin is the stored one: its jobs survive the shapes.
    let stored = agents.agents[0]
        .as_ref()
        .unwrap()
        .server()
        .read_stale()
        .view()
        .csi_plugin("ebs")
        .unwrap();
    let read = c
        .plugin("ebs", ReadOptions::default())
        .await
        .unwrap()
        .value
        .unwrap();
    assert_eq!(read.jobs, stored.jobs);
    assert_eq!((read.controllers_expected(), read.nodes_expected()), (2, 5));
    let rows = c.plugins(ReadOptions::default()).await.unwrap().value;
    let row = rows.iter().find(|p| p.id == "ebs").unwrap();
    assert_eq!((row.controllers_expected, row.nodes_expected), (2, 5));

    // An update: a new version; the same definition again changes nothing.
    let (_, changed) = send(
        &agents,
        "POST",
        "/v1/job/ebs-nodes",
        Some(json!({"Job": nomad_job("ebs-nodes", 3, "ebs", "node")})),
    )
    .await;
    let (_, same) = send(
        &agents,
        "POST",
        "/v1/job/ebs-nodes",
        Some(json!({"Job": nomad_job("ebs-nodes", 3, "ebs", "node")})),
    )
    .await;
    assert_eq!(same["JobModifyIndex"], changed["JobModifyIndex"]);
    let (_, _, job) = get(&agents, "/v1/job/ebs-nodes").await;
    assert_eq!(
        (
            job["Version"].as_u64(),
            job["TaskGroups"][0]["Count"].as_u64()
        ),
        (Some(1), Some(3))
    );
    let (_, _, plugin) = get(&agents, "/v1/plugin/csi/ebs").await;
    assert_eq!(plugin["NodesExpected"], 3);

    // Its allocations: a running one moves the job to running.
    let mut a = alloc("ebs-n1", "n1");
    a.job_id = "ebs-nodes".into();
    a.job_version = 1;
    let mut b = Allocation {
        id: "ebs-n2".into(),
        client_status: ClientStatus::Pending,
        ..a.clone()
    };
    b.node_id = "n2".into();
    c.apply(&Command::UpsertAllocs { allocs: vec![a, b] })
        .await
        .unwrap();
    let (s, _, allocs) = get(&agents, "/v1/job/ebs-nodes/allocations").await;
    assert_eq!(s, 200);
    assert_eq!(ids(&allocs), ["ebs-n1", "ebs-n2"]);
    assert_eq!(allocs[1]["ClientStatus"], "pending");
    assert_eq!(allocs[0]["JobVersion"], 1);
    let job = c
        .job("default", "ebs-nodes", ReadOptions::default())
        .await
        .unwrap()
        .value
        .unwrap();
    assert_eq!(job.status, JobStatus::Running);
    let stubs = c
        .job_allocations("default", "ebs-nodes", ReadOptions::default())
        .await
        .unwrap()
        .value
        .unwrap();
    assert_eq!(stubs.len(), 2);

    // Stopped: dead, listed still, expecting nothing.
    let (s, stopped) = send(&agents, "DELETE", "/v1/job/ebs-nodes", None).await;
    assert_eq!(s, 200, "{stopped}");
    assert_eq!(stopped["EvalID"], "");
    let (s, _, job) = get(&agents, "/v1/job/ebs-nodes").await;
    assert_eq!(s, 200);
    assert_eq!(
        (job["Status"].as_str(), job["Stop"].as_bool()),
        (Some("dead"), Some(true))
    );
    let (_, _, plugin) = get(&agents, "/v1/plugin/csi/ebs").await;
    assert_eq!(
        (
            plugin["ControllersExpected"].clone(),
            plugin["NodesExpected"].clone()
        ),
        (json!(2), json!(0))
    );
    assert_eq!(plugin["NodeJobs"], json!({}));
    // Purged: gone; the allocations of a purged job still list.
    let (s, _) = send(&agents, "DELETE", "/v1/job/ebs-nodes?purge=true", None).await;
    assert_eq!(s, 200);
    let (s, _, e) = get(&agents, "/v1/job/ebs-nodes").await;
    assert_eq!((s, e["kind"].as_str()), (404, Some("JobNotFound")));
    let (s, _, allocs) = get(&agents, "/v1/job/ebs-nodes/allocations").await;
    assert_eq!((s, ids(&allocs).len()), (200, 2));
    let (s, _) = send(&agents, "DELETE", "/v1/job/ebs-controller?purge=true", None).await;
    assert_eq!(s, 200);
    let (s, _, e) = get(&agents, "/v1/job/ebs-controller/allocations").await;
    assert_eq!((s, e["kind"].as_str()), (404, Some("JobNotFound")));
    // A plugin kept alive only by a job's expectation goes with the job.
    let (s, _) = send(
        &agents,
        "DELETE",
        "/v1/job/hostpath?namespace=batch&purge=true",
        None,
    )
    .await;
    assert_eq!(s, 200);
    let (s, _, _) = get(&agents, "/v1/plugin/csi/hostpath").await;
    assert_eq!(s, 404);
    let (_, _, plugin) = get(&agents, "/v1/plugin/csi/ebs").await;
    assert_eq!(
        (
            plugin["ControllersExpected"].clone(),
            plugin["NodesHealthy"].clone()
        ),
        (json!(0), json!(2))
    );
    // An unknown job: 404, with the index of the refused write.
    let resp = crate::support::http()
        .delete(agents.url(0, "/v1/job/ghost"))
        .send()
        .await
        .unwrap();
    let (s, e) = error_of(resp).await;
    assert_eq!((s, e.kind.as_str()), (404, "JobNotFound"), "{}", e.message);
    assert!(e.index.is_some() && e.message.contains("ghost"));

    // The same through the Rust client, with model types.
    let sys = model_job("infra", "nfs-nodes", JobType::System, 1, "nfs");
    let w = c.register_job(&sys).await.unwrap();
    assert!(w.index > 0 && w.job_modify_index == w.index);
    let listed = c.jobs(Some("infra"), ReadOptions::default()).await.unwrap();
    assert_eq!(listed.value.len(), 1);
    assert_eq!(listed.value[0].job_type, JobType::System);
    assert_eq!(listed.value[0].task_groups, sys.task_groups);
    assert_eq!(
        c.jobs(None, ReadOptions::default())
            .await
            .unwrap()
            .value
            .len(),
        1
    );
    let stopped = c.stop_job("infra", "nfs-nodes").await.unwrap();
    let job = c
        .job("infra", "nfs-nodes", ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(job.index, stopped.index);
    assert!(job.value.unwrap().is_dead());
    c.purge_job("infra", "nfs-nodes").await.unwrap();
    assert!(
        c.job("infra", "nfs-nodes", ReadOptions::default())
            .await
            .unwrap()
            .value
            .is_none()
    );
    let e = c.purge_job("infra", "nfs-nodes").await.unwrap_err();
    assert_eq!((e.status(), e.kind()), (Some(404), Some("JobNotFound")));
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_job_bodies_are_400_naming_the_problem_and_change_nothing() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    let (s, _) = send(
        &agents,
        "POST",
        "/v1/jobs",
        Some(json!({"Job": nomad_job("kept", 1, "ebs", "node")})),
    )
    .await;
    assert_eq!(s, 200);
    let before = state_bytes(&agents, 0).await;

    let unknown_type = nomad_job("j", 1, "ebs", "sidecar");
    let mut twice = nomad_job("j", 1, "ebs", "node");
    let group = twice["TaskGroups"][0].clone();
    twice["TaskGroups"].as_array_mut().unwrap().push(group);
    let no_plugin_id = nomad_job("j", 1, "", "node");
    let mut stopped = nomad_job("kept", 1, "ebs", "node");
    stopped["Stop"] = json!(true);
    let cases: Vec<(&str, &str, Value, u16, &str, &str)> = vec![
        (
            "POST",
            "/v1/jobs",
            json!({"Job": nomad_job("j", -1, "ebs", "node")}),
            400,
            "BadRequest",
            "count is 0 or more",
        ),
        (
            "POST",
            "/v1/jobs",
            json!({"Job": unknown_type}),
            400,
            "BadRequest",
            "unknown variant `sidecar`",
        ),
        (
            "PUT",
            "/v1/jobs",
            json!({"Job": twice}),
            400,
            "InvalidInput",
            "task group \"plugin\" appears twice",
        ),
        (
            "POST",
            "/v1/jobs",
            json!({"Job": no_plugin_id}),
            400,
            "MissingField",
            "id is required",
        ),
        (
            "POST",
            "/v1/jobs",
            json!({"Job": {"TaskGroups": []}}),
            400,
            "BadRequest",
            "missing field `ID`",
        ),
        (
            "POST",
            "/v1/jobs",
            json!({"job": {}}),
            400,
            "BadRequest",
            "no job",
        ),
        (
            "POST",
            "/v1/job/other",
            json!({"Job": nomad_job("j", 1, "ebs", "node")}),
            400,
            "BadRequest",
            "the path names",
        ),
        (
            "POST",
            "/v1/job/kept",
            json!({"Job": stopped}),
            400,
            "BadRequest",
            "DELETE",
        ),
        (
            "POST",
            "/v1/jobs",
            json!({"Job": nomad_job("kept", 7, "ebs", "node"), "EnforceIndex": true, "JobModifyIndex": 1}),
            400,
            "BadRequest",
            "EnforceIndex",
        ),
        (
            "POST",
            "/v1/jobs?namespace=*",
            json!({"Job": nomad_job("j", 1, "ebs", "node")}),
            400,
            "BadRequest",
            "every namespace",
        ),
    ];
    for (method, path, body, status, kind, names) in cases {
        let (got, e) = send(&agents, method, path, Some(body)).await;
        let message = e["message"].as_str().unwrap_or_default();
        assert_eq!(
            (got, e["kind"].as_str().unwrap_or_default()),
            (status, kind),
            "{method} {path}: {e}"
        );
        assert!(
            message.contains(names),
            "{path}: {message:?} does not name {names:?}"
        );
    }
    let http = crate::support::http();
    for (body, ctype, status) in [
        (&b"{not json"[..], "application/json", 400),
        (b"", "application/json", 400),
        (br#"{"Job":{"ID":"j"}}"#, "text/plain", 415),
    ] {
        let resp = http
            .post(agents.url(0, "/v1/jobs"))
            .header("content-type", ctype)
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), status, "{ctype}");
    }
    let (s, e) = send(&agents, "DELETE", "/v1/job/kept?namespace=*", None).await;
    assert_eq!((s, e["kind"].as_str()), (400, Some("BadRequest")));
    let (s, e) = send(&agents, "DELETE", "/v1/job/kept?purge=maybe", None).await;
    assert_eq!((s, e["kind"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        state_bytes(&agents, 0).await,
        before,
        "a refused job changed the state"
    );
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_job_read_wakes_on_that_jobs_writes_only() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.unwrap();
    for id in ["mine", "other"] {
        c.register_job(&model_job("default", id, JobType::Service, 1, "ebs"))
            .await
            .unwrap();
    }
    let first = c
        .job("default", "mine", ReadOptions::default())
        .await
        .unwrap();
    let index = first.index;
    assert_eq!(index, first.value.unwrap().modify_index);
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            c.job(
                "default",
                "mine",
                ReadOptions::blocking(index, Duration::from_secs(30)),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Another job changing, its plugin's expectation too, and an allocation of
    // another job: none of it wakes the read …
    c.register_job(&model_job("default", "other", JobType::Service, 4, "ebs"))
        .await
        .unwrap();
    c.stop_job("default", "other").await.unwrap();
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("a1", "n1")],
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "woken by a write to another job");
    // … a write of this job does, with its index.
    let wrote = c
        .register_job(&model_job("default", "mine", JobType::Batch, 2, "ebs"))
        .await
        .unwrap();
    let answer = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    assert_eq!(answer.index, wrote.index);
    let job = answer.value.unwrap();
    assert_eq!((job.version, job.job_type), (1, JobType::Batch));
    // A blocking list wakes on any job's write.
    let list = c.jobs(None, ReadOptions::default()).await.unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            c.jobs(
                None,
                ReadOptions::blocking(list.index, Duration::from_secs(30)),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let purged = c.purge_job("default", "other").await.unwrap();
    let answer = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    assert_eq!(answer.index, purged.index);
    assert_eq!(answer.value.len(), 1);
    agents.shutdown().await;
}
