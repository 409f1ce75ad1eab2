//! `Idempotency-Key` over HTTP: a write retried under its key is answered with its
//! first outcome and index, through any agent and after the leader is gone; another
//! request under the key is 422; bad keys are 400; keys are per token.

use schedstate::model::AclScope;
use schedstate_agent::api::{AclTokenRequest, WriteResponse};

use super::support::{Agents, node};
use super::{error_of, upsert};

const SECRET: &str = "idempotency-test-management-secret";

async fn index_of(r: reqwest::Response) -> u64 {
    let body = r.bytes().await.unwrap();
    serde_json::from_slice::<WriteResponse>(&body)
        .unwrap()
        .index
}

fn json(command: &schedstate::state::Command) -> Vec<u8> {
    serde_json::to_vec(command).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_write_applies_once_through_any_agent_and_after_its_leader_is_gone() {
    let mut agents = Agents::start(3, Some(SECRET)).await;
    let http = super::support::http();
    let urls: Vec<String> = (0..3).map(|i| agents.url(i, "/v1/commands")).collect();
    let drains: Vec<String> = (0..3)
        .map(|i| agents.url(i, "/v1/node/keyed-1/drain"))
        .collect();
    let post = |i: usize, key: &str, body: Vec<u8>| {
        http.post(&urls[i])
            .header("x-nomad-token", SECRET)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(body)
            .send()
    };
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    let body = json(&upsert("keyed-1", "ebs"));

    let first = post(leader, "k-1", body.clone()).await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let index = index_of(first).await;

    // The same request again, through a follower (forwarded with its key), and with
    // the key as a structured-field string: the first answer, nothing applied.
    for (via, key) in [(follower, "k-1"), (leader, "\"k-1\"")] {
        let again = post(via, key, body.clone()).await.unwrap();
        assert_eq!(again.status(), 200);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(index_of(again).await, index);
    }

    // Another request under the key: 422, nothing applied.
    let other = post(follower, "k-1", json(&upsert("keyed-2", "ebs")))
        .await
        .unwrap();
    let (status, e) = error_of(other).await;
    assert_eq!((status, e.kind.as_str()), (422, "IdempotencyKeyReused"));
    assert_eq!(e.index, Some(index));

    // Bad keys: 400, nothing proposed.
    for bad in ["", "a b", "\"open", &"k".repeat(256)] {
        let r = post(leader, bad, body.clone()).await.unwrap();
        let (status, e) = error_of(r).await;
        assert_eq!(
            (status, e.kind.as_str()),
            (400, "InvalidIdempotencyKey"),
            "{bad:?}"
        );
    }
    let twice = http
        .post(agents.url(leader, "/v1/commands"))
        .header("x-nomad-token", SECRET)
        .header("content-type", "application/json")
        .header("idempotency-key", "a")
        .header("idempotency-key", "b")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(twice).await.0, 400);
    // A token's secret is shown once: its creation takes no key.
    let create = http
        .post(agents.url(leader, "/v1/acl/token"))
        .header("x-nomad-token", SECRET)
        .header("idempotency-key", "t-1")
        .header("content-type", "application/json")
        .body(r#"{"Name": "writer", "Scopes": ["write"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(create).await.0, 400);

    // Keys are per token: another token's "k-1" is its own write.
    let writer = agents
        .client(leader)
        .acl_create_token(&AclTokenRequest {
            name: "writer".into(),
            scopes: vec![AclScope::Write],
            ..AclTokenRequest::default()
        })
        .await
        .unwrap();
    let theirs = http
        .post(agents.url(leader, "/v1/commands"))
        .header("x-nomad-token", writer.secret_id.unwrap())
        .header("content-type", "application/json")
        .header("idempotency-key", "k-1")
        .body(json(&upsert("keyed-3", "ebs")))
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 200);
    assert!(theirs.headers().get("idempotent-replayed").is_none());

    // A Nomad-shaped write with several commands (drain off, then eligible) replays
    // as a whole.
    let drain = |i: usize| {
        http.post(&drains[i])
            .header("x-nomad-token", SECRET)
            .header("content-type", "application/json")
            .header("idempotency-key", "drain-1")
            .body(r#"{"DrainSpec": null, "MarkEligible": true}"#)
            .send()
    };
    let d1 = drain(leader).await.unwrap();
    assert_eq!(d1.status(), 200);
    let d2 = drain(follower).await.unwrap();
    assert_eq!(d2.status(), 200);
    assert_eq!(d2.headers()["idempotent-replayed"], "true");

    // The leader goes; the client retries the first write through a survivor.
    agents.wait_applied_everywhere().await;
    let gone = agents.agents[leader].take().unwrap();
    gone.shutdown().await;
    let survivor = agents.wait_leader().await;
    let retry = post(survivor, "k-1", body.clone()).await.unwrap();
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(index_of(retry).await, index);
    let n = agents.agents[survivor]
        .as_ref()
        .unwrap()
        .server()
        .read_stale()
        .view()
        .node("keyed-1")
        .unwrap();
    assert_eq!(n.create_index, index);

    // The Rust client keys its writes and says when an answer was a replay.
    let client = agents.client(survivor);
    let command = schedstate::state::Command::UpsertNode {
        node: node("keyed-4", "ebs"),
    };
    let w1 = client.apply_keyed(&command, "client-1").await.unwrap();
    let w2 = client.apply_keyed(&command, "client-1").await.unwrap();
    assert!(!w1.replayed && w2.replayed);
    assert_eq!(w1.index, w2.index);
    agents.shutdown().await;
}
