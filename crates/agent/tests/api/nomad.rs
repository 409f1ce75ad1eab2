//! Nomad's list parameters and headers over HTTP, without Nomad's clients (those are
//! `crates/server/tests/server/nomad_compat.rs`): pages and `X-Nomad-NextToken`, `reverse`,
//! `prefix`, `filter`, namespaces, the stub shapes and `?full`, Nomad's headers.

use schedstate::model::ClientStatus;
use schedstate::state::Command;
use serde_json::Value;

use crate::support::{Agents, alloc};
use crate::upsert;

async fn get(agents: &Agents, path: &str) -> (u16, reqwest::header::HeaderMap, Value) {
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

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i["ID"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_filter_reverse_and_take_namespaces() {
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    for id in ["n1", "n2", "n3", "n4", "n5"] {
        c.apply(&upsert(id, "ebs")).await.unwrap();
    }
    let mut batch = alloc("b1", "n2");
    batch.namespace = "batch".into();
    batch.client_status = ClientStatus::Complete;
    c.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("a1", "n1"), alloc("a2", "n1"), batch],
    })
    .await
    .unwrap();

    let (s, h, page) = get(&agents, "/v1/nodes?per_page=2").await;
    assert_eq!(s, 200);
    assert_eq!(ids(&page), ["n1", "n2"]);
    assert_eq!(h["X-Nomad-NextToken"], "n3");
    assert_eq!(h["X-Nomad-KnownLeader"], "true");
    assert_eq!(h["X-Nomad-LastContact"], "0");
    assert!(h.contains_key("X-Nomad-Index"));
    // The stub shape: Nomad's names, no fingerprints.
    assert_eq!(page[0]["SchedulingEligibility"], "eligible");
    assert!(page[0].get("CSINodePlugins").is_none());
    let (_, h, page) = get(&agents, "/v1/nodes?per_page=2&next_token=n3").await;
    assert_eq!(ids(&page), ["n3", "n4"]);
    let (_, h2, last) = get(&agents, "/v1/nodes?per_page=2&next_token=n5").await;
    assert_eq!(ids(&last), ["n5"]);
    assert!(!h2.contains_key("X-Nomad-NextToken"));
    assert_eq!(h["X-Nomad-NextToken"], "n5");
    let (_, _, rev) = get(&agents, "/v1/nodes?reverse=true&per_page=3").await;
    assert_eq!(ids(&rev), ["n5", "n4", "n3"]);
    let (_, _, full) = get(&agents, "/v1/nodes?prefix=n4&full=true").await;
    assert_eq!(ids(&full), ["n4"]);
    assert!(
        full[0]["CSINodePlugins"]["ebs"]["Healthy"]
            .as_bool()
            .unwrap()
    );
    // `ID matches "^n[34]$" or (CreateIndex > 0 and ID == n1)`
    let filter = "ID%20matches%20%22%5En%5B34%5D%24%22%20or%20(CreateIndex%20%3E%200%20and%20ID%20%3D%3D%20n1)";
    let (_, _, filtered) = get(&agents, &format!("/v1/nodes?filter={filter}")).await;
    assert_eq!(ids(&filtered), ["n1", "n3", "n4"]);
    let (s, _, e) = get(&agents, "/v1/nodes?filter=Status%20%3D%3D").await;
    assert_eq!((s, e["kind"].as_str()), (400, Some("BadRequest")));

    // Allocations: the default namespace unless one is named; * for all.
    let (_, _, default) = get(&agents, "/v1/allocations").await;
    assert_eq!(ids(&default), ["a1", "a2"]);
    let (_, _, all) = get(&agents, "/v1/allocations?namespace=*").await;
    assert_eq!(ids(&all), ["a1", "a2", "b1"]);
    let (_, _, batch) = get(&agents, "/v1/allocations?namespace=batch").await;
    assert_eq!(ids(&batch), ["b1"]);
    assert_eq!(batch[0]["ClientStatus"], "complete");
    // A volume registered and deregistered in Nomad's shape; server fields ignored.
    let http = crate::support::http();
    let body = serde_json::json!({"Volumes": [{
        "ID": "vol-9", "Namespace": "batch", "PluginID": "ebs", "Name": "data",
        "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}],
        "CreateIndex": 999, "ModifyIndex": 999, "Schedulable": true,
    }]});
    let resp = http
        .put(agents.url(0, "/v1/volume/csi/vol-9"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (s, _, vol) = get(&agents, "/v1/volume/csi/vol-9?namespace=batch").await;
    assert_eq!(s, 200);
    assert_eq!(vol["Name"], "data");
    assert_ne!(vol["CreateIndex"], 999);
    assert_eq!(
        vol["RequestedCapabilities"][0]["AccessMode"],
        "single-node-writer"
    );
    let resp = http
        .delete(agents.url(0, "/v1/volume/csi/vol-9?namespace=batch"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (s, _, _) = get(&agents, "/v1/volume/csi/vol-9?namespace=batch").await;
    assert_eq!(s, 404);
    let (_, _, one) = get(&agents, "/v1/allocation/b1").await;
    assert_eq!(
        (one["Namespace"].as_str(), one["NodeID"].as_str()),
        (Some("batch"), Some("n2"))
    );
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_gzipped_for_clients_that_ask_but_streams_are_not() {
    use std::io::Read;
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    for i in 0..40 {
        c.apply(&upsert(&format!("node-{i:02}"), "ebs"))
            .await
            .unwrap();
    }
    let http = crate::support::http();
    let resp = http
        .get(agents.url(0, "/v1/nodes?full=true"))
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    let zipped = resp.bytes().await.unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&zipped[..])
        .read_to_string(&mut text)
        .expect("gzip");
    let nodes: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(nodes.as_array().unwrap().len(), 40);
    assert!(
        zipped.len() < text.len() / 2,
        "{} of {}",
        zipped.len(),
        text.len()
    );
    // Without asking, plain; the event stream never (each line leaves at once).
    let plain = http.get(agents.url(0, "/v1/nodes")).send().await.unwrap();
    assert!(!plain.headers().contains_key("content-encoding"));
    let stream = http
        .get(agents.url(0, "/v1/event/stream?index=0"))
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert!(!stream.headers().contains_key("content-encoding"));
    drop(stream);
    agents.shutdown().await;
}

/// A long list is written as its reader takes it (chunked, `list_body.rs`): byte for
/// byte the answer made whole, through the agent's own GET path, through hyper
/// (`Connection: close` sends a connection there), gzipped, and paged; a short one
/// still leaves with its length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lists_stream_whole_through_every_path() {
    use std::io::{Read, Write};
    let agents = Agents::start(1, None).await;
    let c = agents.client(0);
    for batch in 0..6 {
        let nodes = (0..200)
            .map(|i| crate::support::node(&format!("node-{:04}", batch * 200 + i), "ebs"))
            .collect();
        c.apply(&Command::UpsertNodes { nodes }).await.unwrap();
    }
    let http = crate::support::http();
    let path = "/v1/nodes?full&pretty";
    let fetch = |close: bool, gzip: bool| {
        let mut req = http.get(agents.url(0, path));
        if close {
            req = req.header("Connection", "close");
        }
        if gzip {
            req = req.header("Accept-Encoding", "gzip");
        }
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            assert!(resp.headers().contains_key("X-Nomad-Index"));
            let zipped = resp.headers().contains_key("content-encoding");
            let bytes = resp.bytes().await.unwrap().to_vec();
            if !zipped {
                return bytes;
            }
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut out)
                .expect("gzip");
            out
        }
    };
    let ours = fetch(false, false).await;
    let parsed: Value = serde_json::from_slice(&ours).unwrap();
    assert_eq!(parsed.as_array().unwrap().len(), 1_200);
    assert_eq!(parsed[1_199]["ID"], "node-1199");
    assert!(ours.len() > 512 << 10, "{} bytes", ours.len());
    // Indented exactly as the compact answer is, item by item (`list_body.rs` pins
    // the bytes against serde_json's own pretty output).
    let compact = {
        let resp = http
            .get(agents.url(0, "/v1/nodes?full"))
            .send()
            .await
            .unwrap();
        resp.bytes().await.unwrap().to_vec()
    };
    assert!(unindented(&ours) == compact, "pretty and compact differ");
    let whole = ours.clone();
    assert!(fetch(true, false).await == whole, "through hyper");
    assert!(fetch(false, true).await == whole, "gzipped");
    assert!(fetch(true, true).await == whole, "gzipped through hyper");

    // On the wire: chunked for the long list, a length for a short one.
    let raw = |target: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", agents.ports[0])).unwrap();
        write!(
            s,
            "GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        String::from_utf8_lossy(&all[..end]).to_lowercase()
    };
    let long = tokio::task::block_in_place(|| raw(path));
    assert!(long.contains("transfer-encoding: chunked"), "{long}");
    let short = tokio::task::block_in_place(|| raw("/v1/nodes?per_page=3"));
    assert!(short.contains("content-length:"), "{short}");

    // Pages of a long list cut the same rows.
    let (_, h, first) = get(&agents, "/v1/nodes?full&per_page=1000").await;
    assert_eq!(first.as_array().unwrap().len(), 1_000);
    assert_eq!(h["X-Nomad-NextToken"], "node-1000");
    let (_, h, rest) = get(&agents, "/v1/nodes?full&per_page=1000&next_token=node-1000").await;
    assert_eq!(rest.as_array().unwrap().len(), 200);
    assert!(!h.contains_key("X-Nomad-NextToken"));
    let mut joined = first.as_array().unwrap().clone();
    joined.extend(rest.as_array().unwrap().iter().cloned());
    assert_eq!(Value::Array(joined), parsed);
    agents.shutdown().await;
}

/// `pretty` with the whitespace outside strings taken out.
fn unindented(pretty: &[u8]) -> Vec<u8> {
    let (mut out, mut in_string, mut escaped) = (Vec::new(), false, false);
    for &b in pretty {
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if !b.is_ascii_whitespace() {
            in_string = b == b'"';
            out.push(b);
        }
    }
    out
}
