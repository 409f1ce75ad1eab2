//! ACL tokens over HTTP: nothing but the public routes before bootstrap; bootstrap
//! once; every route refuses a missing, unknown or wrong-scope token and takes the
//! three header forms; a revoked token is refused on every server within a second;
//! secrets appear once and nowhere else.

use std::time::{Duration, Instant};

use schedstate::model::AclScope;
use schedstate_agent::api::{AclTokenRequest, AclTokenView, ErrorBody};
use schedstate_agent::{Client, ReadOptions};

use crate::support::{Agents, DEADLINE};
use crate::{state_bytes, upsert};

const ROOT: &str = "root-secret-for-the-acl-tests";

async fn status_and_kind(resp: reqwest::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body = resp.bytes().await.expect("body");
    let kind = serde_json::from_slice::<ErrorBody>(&body)
        .map(|e| e.kind)
        .unwrap_or_default();
    (status, kind)
}

fn with_secret(agents: &Agents, i: usize, secret: &str) -> Client {
    Client::new(&agents.url(i, ""), Some(secret.to_string())).expect("client")
}

async fn token(agents: &Agents, scopes: &[AclScope], ttl: Option<&str>) -> AclTokenView {
    let t = agents
        .client(0)
        .acl_create_token(&AclTokenRequest {
            name: format!("{scopes:?}"),
            scopes: scopes.to_vec(),
            expiration_ttl: ttl.map(|t| t.into()),
            ..AclTokenRequest::default()
        })
        .await
        .expect("token created");
    agents.wait_applied_everywhere().await;
    t
}

/// One route and the scope it needs.
struct Route {
    method: &'static str,
    path: &'static str,
    body: Option<Vec<u8>>,
    needs: AclScope,
}

fn routes() -> Vec<Route> {
    let command = serde_json::to_vec(&upsert("n9", "ebs")).unwrap();
    let job = br#"{"Job":{"ID":"j9","TaskGroups":[{"Name":"g","Count":2,"Tasks":[{"Name":"t","CSIPluginConfig":{"ID":"ebs","Type":"node"}}]}]}}"#.to_vec();
    let r = |method, path, needs| Route {
        method,
        path,
        body: None,
        needs,
    };
    vec![
        r("GET", "/v1/nodes", AclScope::Read),
        r("GET", "/v1/node/n1", AclScope::Read),
        r("GET", "/v1/node/n1/allocations", AclScope::Read),
        r("GET", "/v1/allocation/a1", AclScope::Read),
        r("GET", "/v1/plugins", AclScope::Read),
        r("GET", "/v1/plugin/csi/ebs", AclScope::Read),
        r("GET", "/v1/volumes", AclScope::Read),
        r("GET", "/v1/volume/csi/v1?namespace=default", AclScope::Read),
        r(
            "GET",
            "/v1/event/stream?index=0&topic=Node:n1",
            AclScope::Read,
        ),
        Route {
            method: "POST",
            path: "/v1/commands",
            body: Some(command),
            needs: AclScope::Write,
        },
        Route {
            method: "POST",
            path: "/v1/node/n1/eligibility",
            body: Some(br#"{"Eligibility":"ineligible"}"#.to_vec()),
            needs: AclScope::Write,
        },
        Route {
            method: "POST",
            path: "/v1/node/n1/drain",
            body: Some(br#"{"DrainSpec":{"Deadline":0}}"#.to_vec()),
            needs: AclScope::Write,
        },
        Route {
            method: "PUT",
            path: "/v1/volume/csi/v9",
            body: Some(br#"{"Volumes":[{"ID":"v9","PluginID":"ebs"}]}"#.to_vec()),
            needs: AclScope::Write,
        },
        r("DELETE", "/v1/volume/csi/v9", AclScope::Write),
        r("GET", "/v1/jobs", AclScope::Read),
        r("GET", "/v1/job/j1?namespace=default", AclScope::Read),
        r("GET", "/v1/job/j1/allocations", AclScope::Read),
        Route {
            method: "POST",
            path: "/v1/jobs",
            body: Some(job.clone()),
            needs: AclScope::Write,
        },
        Route {
            method: "PUT",
            path: "/v1/jobs",
            body: Some(job.clone()),
            needs: AclScope::Write,
        },
        Route {
            method: "POST",
            path: "/v1/job/j9",
            body: Some(job),
            needs: AclScope::Write,
        },
        r("DELETE", "/v1/job/j9?purge=true", AclScope::Write),
        r("POST", "/v1/allocation/a1/stop", AclScope::Write),
        r("GET", "/v1/allocations", AclScope::Read),
        r("GET", "/v1/operator/snapshot", AclScope::Management),
        Route {
            method: "PUT",
            path: "/v1/operator/snapshot",
            body: Some(b"SCHEDSNP not a real file".to_vec()),
            needs: AclScope::Management,
        },
        r("GET", "/v1/operator/raft/configuration", AclScope::Operator),
        r("GET", "/v1/status/peers", AclScope::Operator),
        r("GET", "/v1/metrics", AclScope::Operator),
        r("GET", "/v1/agent/self", AclScope::Operator),
        Route {
            method: "POST",
            path: "/v1/operator/raft/peer",
            body: Some(br#"{"op":"remove","id":99}"#.to_vec()),
            needs: AclScope::Operator,
        },
        r("GET", "/v1/acl/tokens", AclScope::Management),
        r("GET", "/v1/acl/token/nobody", AclScope::Management),
        r("DELETE", "/v1/acl/token/nobody", AclScope::Management),
        Route {
            method: "PUT",
            path: "/v1/acl/token/nobody",
            body: Some(br#"{"Name":"x","Type":"client","Policies":["read"]}"#.to_vec()),
            needs: AclScope::Management,
        },
        Route {
            method: "POST",
            path: "/v1/acl/token",
            body: Some(br#"{"Name":"x","Scopes":["read"]}"#.to_vec()),
            needs: AclScope::Management,
        },
    ]
}

fn request(
    http: &reqwest::Client,
    agents: &Agents,
    i: usize,
    route: &Route,
) -> reqwest::RequestBuilder {
    let url = agents.url(i, route.path);
    let r = match route.method {
        "GET" => http.get(url),
        "DELETE" => http.delete(url),
        "PUT" => http.put(url),
        _ => http.post(url),
    };
    match &route.body {
        Some(b) => r.header("content-type", "application/json").body(b.clone()),
        None => r,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_bootstrap_only_the_public_routes_answer_and_bootstrap_runs_once() {
    let agents = Agents::start_with(1, None, |c| c.acl = true).await;
    let http = crate::support::http();
    let (s, kind) =
        status_and_kind(http.get(agents.url(0, "/v1/nodes")).send().await.unwrap()).await;
    assert_eq!((s, kind.as_str()), (401, "AclNotBootstrapped"));
    for path in ["/v1/status/leader", "/v1/agent/health"] {
        let resp = http.get(agents.url(0, path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    // Nomad's clients bootstrap with an empty body and no content type.
    let resp = http
        .post(agents.url(0, "/v1/acl/bootstrap"))
        .header("content-length", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let root: AclTokenView = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    let secret = root.secret_id.clone().expect("the secret, this once");
    assert_eq!(root.token_type, "management");
    let c = with_secret(&agents, 0, &secret);
    assert_eq!(
        c.acl_token_self().await.unwrap().accessor_id,
        root.accessor_id
    );
    let e = c.acl_bootstrap(None).await.unwrap_err();
    assert_eq!(
        (e.status(), e.kind()),
        (Some(409), Some("AclAlreadyBootstrapped"))
    );
    // Listings never carry a secret.
    let listed = c.acl_tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].secret_id.is_none());
    // Nor does the state: the snapshot holds the secret's hash only.
    let snap = c.snapshot(false).await.unwrap().value;
    assert!(!snap.windows(secret.len()).any(|w| w == secret.as_bytes()));
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_missing_unknown_and_wrong_scope_tokens_and_takes_three_headers() {
    let agents = Agents::start(3, Some(ROOT)).await;
    agents.client(0).apply(&upsert("n1", "ebs")).await.unwrap();
    let mut by_scope = Vec::new();
    for scope in AclScope::ALL {
        let t = token(&agents, &[scope], None).await;
        by_scope.push((scope, t.secret_id.expect("secret")));
    }
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    let before = state_bytes(&agents, leader).await;
    let http = crate::support::http();
    for route in routes() {
        for i in [leader, follower] {
            let what = format!("{} {} on {i}", route.method, route.path);
            let (s, kind) =
                status_and_kind(request(&http, &agents, i, &route).send().await.unwrap()).await;
            assert_eq!(
                (s, kind.as_str()),
                (401, "Unauthorized"),
                "no token: {what}"
            );
            let (s, kind) = status_and_kind(
                request(&http, &agents, i, &route)
                    .header("X-Nomad-Token", "not-a-token-of-this-cluster")
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            // Nomad's 403 ("ACL token not found"), schedstate's kind.
            assert_eq!((s, kind.as_str()), (403, "UnknownToken"), "unknown: {what}");
            for (scope, secret) in &by_scope {
                if *scope == route.needs || *scope == AclScope::Management {
                    continue;
                }
                let (s, kind) = status_and_kind(
                    request(&http, &agents, i, &route)
                        .header("X-Schedstate-Token", secret)
                        .send()
                        .await
                        .unwrap(),
                )
                .await;
                assert_eq!(
                    (s, kind.as_str()),
                    (403, "PermissionDenied"),
                    "{scope}: {what}"
                );
            }
        }
    }
    assert_eq!(
        state_bytes(&agents, leader).await,
        before,
        "nothing refused wrote"
    );

    // The right scope passes, in each of the three header forms.
    let read = &by_scope[0].1;
    let forms: [(&str, String); 3] = [
        ("X-Nomad-Token", read.clone()),
        ("X-Schedstate-Token", read.clone()),
        ("Authorization", format!("bearer {read}")),
    ];
    for (name, value) in forms {
        let resp = http
            .get(agents.url(follower, "/v1/node/n1"))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
    }
    // A write token writes; management does everything.
    let write = with_secret(&agents, follower, &by_scope[1].1);
    write.apply(&upsert("n2", "ebs")).await.unwrap();
    let operator = with_secret(&agents, follower, &by_scope[2].1);
    assert_eq!(operator.peers().await.unwrap().len(), 3);
    let management = with_secret(&agents, follower, &by_scope[3].1);
    assert!(
        management
            .nodes(ReadOptions::default())
            .await
            .unwrap()
            .value
            .len()
            == 2
    );
    // Tokens are never written as commands, whoever sends them.
    let forged = schedstate::state::Command::DeleteAclTokens {
        accessor_ids: vec!["x".into()],
    };
    let e = management.apply(&forged).await.unwrap_err();
    assert_eq!(
        (e.status(), e.kind()),
        (Some(403), Some("PermissionDenied"))
    );
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_refused_on_every_server_within_a_second() {
    let agents = Agents::start(3, Some(ROOT)).await;
    let reader = token(&agents, &[AclScope::Read], None).await;
    let secret = reader.secret_id.clone().unwrap();
    for i in 0..3 {
        with_secret(&agents, i, &secret)
            .nodes(ReadOptions::stale())
            .await
            .expect("accepted everywhere");
    }
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    agents
        .client(follower)
        .acl_revoke(&reader.accessor_id)
        .await
        .expect("revoked through a follower");
    let revoked = Instant::now();
    let mut refused = [false; 3];
    while refused.iter().any(|r| !r) {
        for (i, done) in refused.iter_mut().enumerate() {
            if *done {
                continue;
            }
            let e = with_secret(&agents, i, &secret)
                .nodes(ReadOptions::stale())
                .await;
            if let Err(e) = e {
                assert_eq!((e.status(), e.kind()), (Some(403), Some("UnknownToken")));
                *done = true;
            }
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(1),
            "still accepted after a second: {refused:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The last management token that never expires cannot be revoked.
    let root = agents.client(0).acl_token_self().await.unwrap();
    let e = agents
        .client(0)
        .acl_revoke(&root.accessor_id)
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.kind()),
        (Some(409), Some("LastManagementToken"))
    );
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refused() {
    let agents = Agents::start(1, Some(ROOT)).await;
    let brief = token(&agents, &[AclScope::Read], Some("1s")).await;
    assert!(brief.expiration_time.is_some());
    let c = with_secret(&agents, 0, brief.secret_id.as_deref().unwrap());
    let start = Instant::now();
    loop {
        match c.nodes(ReadOptions::stale()).await {
            Ok(_) => assert!(start.elapsed() < DEADLINE, "never expired"),
            Err(e) => {
                assert_eq!((e.status(), e.kind()), (Some(401), Some("TokenExpired")));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        start.elapsed() >= Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    // Bad requests for tokens are 400 and make nothing.
    let root = agents.client(0);
    for bad in [
        AclTokenRequest::default(),
        AclTokenRequest {
            scopes: vec![AclScope::Read],
            expiration_ttl: Some("soon".into()),
            ..AclTokenRequest::default()
        },
    ] {
        let e = root.acl_create_token(&bad).await.unwrap_err();
        assert_eq!(e.status(), Some(400), "{e}");
    }
    assert_eq!(root.acl_tokens().await.unwrap().len(), 2);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_ends_when_its_token_is_revoked() {
    use futures_util::StreamExt;
    let agents = Agents::start(1, Some(ROOT)).await;
    let reader = token(&agents, &[AclScope::Read], None).await;
    let resp = crate::support::http()
        .get(agents.url(0, "/v1/event/stream?topic=Node"))
        .header("X-Nomad-Token", reader.secret_id.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    agents.client(0).apply(&upsert("n1", "ebs")).await.unwrap();
    agents
        .client(0)
        .acl_revoke(&reader.accessor_id)
        .await
        .unwrap();
    let revoked = Instant::now();
    let mut text = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream went on: {text}");
    assert!(
        revoked.elapsed() < Duration::from_secs(1),
        "{:?}",
        revoked.elapsed()
    );
    assert!(
        text.contains(r#""Key":"n1""#) || text.contains(r#""key":"n1""#),
        "{text}"
    );
    let last = text.lines().last().unwrap_or_default();
    assert!(last.contains("UnknownToken"), "{text}");
    agents.shutdown().await;
}
