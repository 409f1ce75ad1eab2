//! Nomad's ACL token API as Go's `api` client calls it (`ACLTokens().Create`,
//! `Update`, `Info`, `Self`, `List`, `Delete`): `PUT`, no `Content-Type`, every nil
//! slice `null`, the whole Go struct sent — and Nomad's `ACLToken` and
//! `ACLTokenListStub` back, field by field, with the types Go's structs declare.

use serde_json::{Value, json};

use crate::go_client::{TOKEN, go};
use crate::support::Agents;

/// As [`go`], with another token (or none).
async fn as_token(
    agents: &Agents,
    secret: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = crate::support::http()
        .request(method.parse().unwrap(), agents.url(0, path))
        .header("X-Nomad-Token", secret);
    if let Some(b) = body {
        req = req.body(serde_json::to_vec(b).unwrap());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Go's `api.ACLToken` as its encoder writes a new one.
fn go_token(name: &str, kind: &str, policies: Value, ttl_nanos: u64) -> Value {
    let mut t = json!({
        "AccessorID": "", "SecretID": "", "Name": name, "Type": kind,
        "Policies": policies, "Roles": null, "Global": false,
        "CreateTime": "0001-01-01T00:00:00Z", "CreateIndex": 0, "ModifyIndex": 0,
    });
    if ttl_nanos > 0 {
        t["ExpirationTTL"] = json!(ttl_nanos);
    }
    t
}

fn secs(rfc3339: &Value) -> u64 {
    let t = humantime::parse_rfc3339(rfc3339.as_str().unwrap()).unwrap();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Every field of Nomad's `ACLToken` with the JSON type Go's struct declares.
fn assert_acl_token(t: &Value) {
    for f in ["AccessorID", "SecretID", "Name", "Type", "CreateTime"] {
        assert!(t[f].is_string(), "{f}: {t}");
    }
    for f in ["CreateIndex", "ModifyIndex", "ExpirationTTL"] {
        assert!(t[f].is_u64(), "{f}: {t}");
    }
    assert!(t["Policies"].is_array() && t["Roles"] == json!([]), "{t}");
    assert_eq!(t["Global"], true, "one region: every token is global");
    assert!(t["ExpirationTime"].is_null() || t["ExpirationTime"].is_string());
}

const STUB_FIELDS: [&str; 10] = [
    "AccessorID",
    "Name",
    "Type",
    "Policies",
    "Roles",
    "Global",
    "CreateTime",
    "ExpirationTime",
    "CreateIndex",
    "ModifyIndex",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_tokens_as_the_go_client_calls_them() {
    let agents = Agents::start(1, Some(TOKEN)).await;
    agents
        .client(0)
        .apply(&crate::upsert("n1", "ebs"))
        .await
        .unwrap();

    // Create: a client token with two policies and an hour to live.
    let hour = 3_600_000_000_000_u64;
    let body = go_token("ci", "client", json!(["write", "read"]), hour);
    let (s, made) = go(&agents, "PUT", "/v1/acl/token", Some(&body)).await;
    assert_eq!(s, 200, "{made}");
    assert_acl_token(&made);
    let accessor = made["AccessorID"].as_str().unwrap().to_string();
    let secret = made["SecretID"].as_str().unwrap().to_string();
    assert_eq!((accessor.len(), secret.len()), (36, 36));
    assert_eq!(made["Name"], "ci");
    assert_eq!(made["Type"], "client");
    assert_eq!(made["Policies"], json!(["read", "write"]));
    assert_eq!(made["Scopes"], json!(["read", "write"]));
    assert_eq!(made["ExpirationTTL"], hour);
    let (created, expires) = (secs(&made["CreateTime"]), secs(&made["ExpirationTime"]));
    assert!((3600..=3601).contains(&(expires - created)), "{made}");
    assert!(made["CreateIndex"].as_u64().unwrap() > 0);
    assert_eq!(made["CreateIndex"], made["ModifyIndex"]);

    // Self with that token: its secret answered back.
    let (s, me) = as_token(&agents, &secret, "GET", "/v1/acl/token/self", None).await;
    assert_eq!(s, 200, "{me}");
    assert_acl_token(&me);
    assert_eq!(me, made, "self is the token as made, secret included");

    // Info by accessor: the same, but never the secret.
    let path = format!("/v1/acl/token/{accessor}");
    let (s, info) = go(&agents, "GET", &path, None).await;
    assert_eq!(s, 200, "{info}");
    assert_acl_token(&info);
    assert_eq!(info["SecretID"], "");
    let mut without = made.clone();
    without["SecretID"] = json!("");
    assert_eq!(info, without);

    // List: `ACLTokenListStub`s, no secret, no TTL.
    let (s, list) = go(&agents, "GET", "/v1/acl/tokens", None).await;
    assert_eq!(s, 200, "{list}");
    let stubs = list.as_array().unwrap();
    assert_eq!(stubs.len(), 2, "the bootstrap token and ci");
    let stub = stubs.iter().find(|t| t["AccessorID"] == *accessor).unwrap();
    assert!(stub.get("SecretID").is_none() && stub.get("ExpirationTTL").is_none());
    for f in STUB_FIELDS {
        assert_eq!(stub[f], made[f], "{f}");
    }
    let root = stubs.iter().find(|t| t["AccessorID"] != *accessor).unwrap();
    assert_eq!(
        (&root["Type"], &root["Policies"], &root["ExpirationTime"]),
        (&json!("management"), &json!([]), &Value::Null)
    );

    // Update: what Go's client sends after an Info, renamed and down to reading.
    let mut changed = info.clone();
    changed["Name"] = json!("ci-reader");
    changed["Policies"] = json!(["read"]);
    let (s, updated) = go(&agents, "PUT", &path, Some(&changed)).await;
    assert_eq!(s, 200, "{updated}");
    assert_acl_token(&updated);
    assert_eq!(updated["Name"], "ci-reader");
    assert_eq!(updated["Policies"], json!(["read"]));
    assert_eq!(updated["SecretID"], "");
    for kept in [
        "AccessorID",
        "CreateTime",
        "ExpirationTime",
        "ExpirationTTL",
        "CreateIndex",
    ] {
        assert_eq!(updated[kept], made[kept], "{kept}");
    }
    assert!(updated["ModifyIndex"].as_u64() > made["ModifyIndex"].as_u64());
    let (_, info) = go(&agents, "GET", &path, None).await;
    assert_eq!(info, updated);
    // The same secret now reads and may not write.
    let (s, _) = as_token(&agents, &secret, "GET", "/v1/nodes", None).await;
    assert_eq!(s, 200);
    let elig = json!({"NodeID": "n1", "Eligibility": "ineligible"});
    let (s, e) = as_token(
        &agents,
        &secret,
        "PUT",
        "/v1/node/n1/eligibility",
        Some(&elig),
    )
    .await;
    assert_eq!((s, &e["kind"]), (403, &json!("PermissionDenied")), "{e}");
    // Nomad's other form: the accessor in the body of `/v1/acl/token`.
    let mut again = updated.clone();
    again["Name"] = json!("ci-2");
    let (s, v) = go(&agents, "POST", "/v1/acl/token", Some(&again)).await;
    assert_eq!(
        (s, &v["Name"], &v["AccessorID"]),
        (200, &json!("ci-2"), &json!(accessor))
    );

    // What an update may not do: change the expiry or the secret, name another
    // token, take an unknown token.
    let mut ttl = again.clone();
    ttl["ExpirationTTL"] = json!(2 * hour);
    let mut other = again.clone();
    other["AccessorID"] = json!("00000000-0000-4000-8000-000000000000");
    let mut rotated = again.clone();
    rotated["SecretID"] = json!("a-secret-of-my-own-choosing");
    for (what, body, want) in [
        ("a new TTL", &ttl, 400),
        ("another accessor", &other, 400),
        ("a new secret", &rotated, 400),
    ] {
        let (s, e) = go(&agents, "PUT", &path, Some(body)).await;
        assert_eq!(s, want, "{what}: {e}");
    }
    let mut unknown = again.clone();
    unknown["AccessorID"] = json!("");
    let (s, e) = go(
        &agents,
        "PUT",
        "/v1/acl/token/00000000-0000-4000-8000-000000000000",
        Some(&unknown),
    )
    .await;
    assert_eq!((s, &e["kind"]), (404, &json!("AclTokenNotFound")));

    // A management token: no policies, and none allowed.
    let (s, m) = go(
        &agents,
        "PUT",
        "/v1/acl/token",
        Some(&go_token("ops", "management", Value::Null, 0)),
    )
    .await;
    assert_eq!(s, 200, "{m}");
    assert_acl_token(&m);
    assert_eq!(
        (
            &m["Type"],
            &m["Policies"],
            &m["ExpirationTime"],
            &m["ExpirationTTL"]
        ),
        (&json!("management"), &json!([]), &Value::Null, &json!(0))
    );

    // Refused, and nothing made: an unknown policy (a stable kind), roles,
    // policies on a management token, a client token without any.
    let refusals = [
        (
            go_token("x", "client", json!(["read", "node-write"]), 0),
            "UnknownPolicy",
        ),
        (
            go_token("x", "client", json!(["management"]), 0),
            "UnknownPolicy",
        ),
        (
            go_token("x", "management", json!(["read"]), 0),
            "BadRequest",
        ),
        (go_token("x", "client", Value::Null, 0), "BadRequest"),
        (go_token("x", "admin", json!(["read"]), 0), "BadRequest"),
    ];
    for (body, kind) in refusals {
        let (s, e) = go(&agents, "PUT", "/v1/acl/token", Some(&body)).await;
        assert_eq!((s, e["kind"].as_str()), (400, Some(kind)), "{body}: {e}");
    }
    let mut roles = go_token("x", "client", json!(["read"]), 0);
    roles["Roles"] = json!([{"ID": "r1", "Name": "ops"}]);
    let (s, _) = go(&agents, "PUT", "/v1/acl/token", Some(&roles)).await;
    assert_eq!(s, 400);
    let (_, list) = go(&agents, "GET", "/v1/acl/tokens", None).await;
    assert_eq!(list.as_array().unwrap().len(), 3);

    // Delete; then the secret is unknown: 404 on self, 403 anywhere else; the
    // accessor is not found.
    let (s, v) = go(&agents, "DELETE", &path, None).await;
    assert_eq!(s, 200, "{v}");
    assert!(v["index"].as_u64().unwrap() > 0, "{v}");
    let (s, e) = as_token(&agents, &secret, "GET", "/v1/acl/token/self", None).await;
    assert_eq!((s, &e["kind"]), (404, &json!("UnknownToken")));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("ACL token not found")
    );
    let (s, e) = as_token(&agents, &secret, "GET", "/v1/nodes", None).await;
    assert_eq!((s, &e["kind"]), (403, &json!("UnknownToken")));
    let (s, e) = go(&agents, "GET", &path, None).await;
    assert_eq!((s, &e["kind"]), (404, &json!("AclTokenNotFound")));
    agents.shutdown().await;
}

/// A token made with Nomad's `ExpirationTime` instead of a TTL; one in the past
/// or too far ahead is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_may_be_made_with_an_expiration_time() {
    let agents = Agents::start(1, Some(TOKEN)).await;
    let now = std::time::SystemTime::now();
    let at = |d: i64| {
        let t = if d >= 0 {
            now + std::time::Duration::from_secs(d.unsigned_abs())
        } else {
            now - std::time::Duration::from_secs(d.unsigned_abs())
        };
        humantime::format_rfc3339_nanos(t).to_string()
    };
    let mut body = go_token("later", "client", json!(["read"]), 0);
    body["ExpirationTime"] = json!(at(7200));
    let (s, t) = go(&agents, "PUT", "/v1/acl/token", Some(&body)).await;
    assert_eq!(s, 200, "{t}");
    let ttl = t["ExpirationTTL"].as_u64().unwrap() / 1_000_000_000;
    // Whole seconds: the create time is rounded up, the expiry too.
    assert!((7198..=7202).contains(&ttl), "{t}");
    let asked = now + std::time::Duration::from_secs(7200);
    let asked = asked
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        secs(&t["ExpirationTime"]) >= asked,
        "never sooner than asked: {t}"
    );
    for d in [-60, 20 * 365 * 86_400] {
        body["ExpirationTime"] = json!(at(d));
        let (s, e) = go(&agents, "PUT", "/v1/acl/token", Some(&body)).await;
        assert_eq!(s, 400, "{d}: {e}");
    }
    agents.shutdown().await;
}

/// An open event stream ends once its token is updated out of the read scope, as it
/// ends on a revocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_ends_when_its_token_loses_the_read_scope() {
    use futures_util::StreamExt;
    let agents = Agents::start(1, Some(TOKEN)).await;
    let body = go_token("watcher", "client", json!(["read"]), 0);
    let (s, made) = go(&agents, "PUT", "/v1/acl/token", Some(&body)).await;
    assert_eq!(s, 200, "{made}");
    let resp = crate::support::http()
        .get(agents.url(0, "/v1/event/stream?topic=Node"))
        .header("X-Nomad-Token", made["SecretID"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let c = agents.client(0);
    c.apply(&crate::upsert("n1", "ebs")).await.unwrap();
    let path = format!("/v1/acl/token/{}", made["AccessorID"].as_str().unwrap());
    let mut changed = made.clone();
    changed["SecretID"] = json!("");
    changed["Policies"] = json!(["operator"]);
    let (s, v) = go(&agents, "PUT", &path, Some(&changed)).await;
    assert_eq!(s, 200, "{v}");
    c.apply(&crate::upsert("n2", "ebs")).await.unwrap();
    let mut text = String::new();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(chunk) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream went on: {text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.contains("PermissionDenied"), "{text}");
    agents.shutdown().await;
}
