//! Restoring a saved snapshot into a running cluster (`PUT /v1/operator/snapshot`):
//! saved from one cluster, restored into another with other data through a follower
//! (proxied to the leader) while one of its servers is down and a blocking query
//! waits; the server that was down catches up, the leader is killed and comes back:
//! every server holds the saved state, its indexes at the restore's. Bad files are
//! 400 and change nothing; a token without the management scope is 403; a body over
//! the limit is 413.

use std::time::Duration;

use schedstate::model::AclScope;
use schedstate::persist::SnapshotHeader;
use schedstate::state::{Command, StateStore};
use schedstate_agent::api::{AclTokenRequest, ErrorBody};
use schedstate_agent::{Agent, Client, ReadOptions};

use crate::support::{Agents, DEADLINE, alloc};
use crate::upsert;

const ROOT_A: &str = "root-secret-of-cluster-a-for-restore";
const ROOT_B: &str = "root-secret-of-cluster-b-for-restore";

fn with_secret(agents: &Agents, i: usize, secret: &str) -> Client {
    Client::new(&agents.url(i, ""), Some(secret.to_string())).expect("client")
}

fn canonical(agents: &Agents, i: usize) -> Vec<u8> {
    agents.agents[i]
        .as_ref()
        .expect("running")
        .server()
        .read_stale()
        .canonical_bytes()
        .expect("canonical bytes")
}

/// A follower's position (any server but the leader).
async fn follower(agents: &Agents) -> usize {
    let leader = agents.wait_leader().await;
    (0..agents.agents.len())
        .find(|i| *i != leader && agents.agents[*i].is_some())
        .expect("a follower")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_saved_from_one_cluster_is_restored_into_another_on_every_server() {
    // Cluster A: the state to save.
    let a = Agents::start(3, Some(ROOT_A)).await;
    let ca = a.client(0);
    for i in 0..5 {
        ca.apply(&upsert(&format!("n{i}"), "ebs"))
            .await
            .expect("write");
    }
    ca.apply(&Command::UpsertAllocs {
        allocs: vec![alloc("a1", "n1"), alloc("a2", "n2")],
    })
    .await
    .expect("write");
    a.wait_applied_everywhere().await;
    let saved = a
        .client(follower(&a).await)
        .snapshot(false)
        .await
        .expect("saved");
    let saved = saved.value;
    a.shutdown().await;

    // Cluster B: other data, more writes than A (its indexes are further on).
    let mut b = Agents::start(3, Some(ROOT_B)).await;
    let cb = b.client(0);
    for i in 0..12 {
        cb.apply(&upsert(&format!("other-{i}"), "nfs"))
            .await
            .expect("write");
    }
    b.wait_applied_everywhere().await;
    let before = cb.nodes(ReadOptions::default()).await.expect("nodes").index;

    // A blocking query waits on B's nodes.
    let blocked = {
        let c = cb.clone();
        tokio::spawn(async move {
            c.nodes(ReadOptions::blocking(before, Duration::from_secs(30)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    // One follower is down during the restore.
    let leader = b.wait_leader().await;
    let down = follower(&b).await;
    b.agents[down].take().expect("running").shutdown().await;
    let via = (0..3)
        .find(|i| *i != leader && *i != down)
        .expect("the other follower");

    // Restored through the other follower: proxied to the leader.
    let done = with_secret(&b, via, ROOT_B)
        .snapshot_restore(saved.clone())
        .await
        .expect("restored");
    assert_eq!(done.bytes, saved.len() as u64);
    assert!(done.index > before, "{} > {before}", done.index);

    let woke = tokio::time::timeout(DEADLINE, blocked)
        .await
        .expect("the blocked query returns")
        .expect("task")
        .expect("read");
    assert!(
        woke.index >= done.index,
        "a blocked query's index never goes back: {} >= {}",
        woke.index,
        done.index
    );
    let mut names: Vec<String> = woke.value.iter().map(|n| n.id.to_string()).collect();
    names.sort();
    assert_eq!(names, ["n0", "n1", "n2", "n3", "n4"]);

    // What every server must hold: the saved file restored at the restore's index.
    let expected = StateStore::new();
    expected
        .restore_from_at(&mut saved.as_slice(), done.index)
        .expect("the saved file restores");
    let expected = expected.snapshot().canonical_bytes().expect("bytes");

    // The server that was down catches up; then the leader is killed.
    b.agents[down] = Some(Agent::start(b.config(down)).await.expect("restarts"));
    b.wait_applied_everywhere().await;
    let leader = b.wait_leader().await;
    b.agents[leader].take().expect("leader").shutdown().await;
    let new_leader = b.wait_leader().await;
    assert_ne!(new_leader, leader);
    b.agents[leader] = Some(Agent::start(b.config(leader)).await.expect("restarts"));
    b.wait_applied_everywhere().await;
    for i in 0..3 {
        assert!(
            canonical(&b, i) == expected,
            "server {} holds the saved state",
            i + 1
        );
    }

    // A's tokens came with A's state: B's own root token is gone, A's works, and
    // the snapshot B answers is the saved state at the restore's index.
    let (status, _) = status_of(
        with_secret(&b, 0, ROOT_B)
            .snapshot(false)
            .await
            .expect_err("B's old token"),
    );
    assert_eq!(status, Some(403));
    let now = with_secret(&b, 0, ROOT_A)
        .snapshot(false)
        .await
        .expect("A's token");
    let reread = StateStore::new();
    let header: SnapshotHeader = reread
        .restore_from(&mut now.value.as_slice())
        .expect("restores");
    assert_eq!(header.last_applied, done.index);
    assert!(reread.snapshot().canonical_bytes().expect("bytes") == expected);
    b.shutdown().await;
}

fn status_of(e: schedstate_agent::ClientError) -> (Option<u16>, String) {
    (e.status(), e.kind().unwrap_or_default().to_string())
}

/// Rewrites the header of a snapshot file (its checksum recomputed): a file whose
/// every checksum holds but whose content breaks an invariant.
fn with_header(file: &[u8], change: impl FnOnce(&mut SnapshotHeader)) -> Vec<u8> {
    let len = u32::from_le_bytes(file[12..16].try_into().unwrap()) as usize;
    let mut header: SnapshotHeader = postcard::from_bytes(&file[16..16 + len]).unwrap();
    change(&mut header);
    let bytes = postcard::to_allocvec(&header).unwrap();
    let mut out = file[..12].to_vec();
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&bytes);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&file[16 + len + 4..]);
    out
}

async fn put(agents: &Agents, i: usize, secret: &str, body: Vec<u8>) -> (u16, String) {
    let resp = crate::support::http()
        .put(agents.url(i, "/v1/operator/snapshot"))
        .header("X-Nomad-Token", secret)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .expect("answer");
    let status = resp.status().as_u16();
    let body = resp.bytes().await.expect("body");
    let kind = serde_json::from_slice::<ErrorBody>(&body)
        .map(|e| e.kind)
        .unwrap_or_default();
    (status, kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_wrong_tokens_and_large_bodies_change_nothing() {
    let agents = Agents::start_with(3, Some(ROOT_A), |c| {
        c.limits.snapshot_restore_bytes = 256 << 10;
    })
    .await;
    let c = agents.client(0);
    for i in 0..3 {
        c.apply(&upsert(&format!("n{i}"), "ebs"))
            .await
            .expect("write");
    }
    let good = c.snapshot(false).await.expect("saved").value;
    c.apply(&upsert("after-save", "ebs")).await.expect("write");
    let before = c.snapshot(false).await.expect("snapshot").value;

    let mut flipped = good.clone();
    let at = flipped.len() - 20;
    flipped[at] ^= 0x01;
    let mut magic = good.clone();
    magic[0] = b'X';
    let broken = with_header(&good, |h| {
        // Rows modified after their table's index: the `row-indexes` invariant.
        for t in &mut h.tables {
            if t.name == "nodes" {
                t.index = 1;
            }
        }
    });
    let bad = [
        ("truncated", good[..good.len() / 2].to_vec()),
        ("flipped byte", flipped),
        ("wrong magic", magic),
        ("broken invariant", broken),
        ("empty", Vec::new()),
    ];
    for (what, file) in bad {
        let (status, kind) = put(&agents, 0, ROOT_A, file).await;
        assert_eq!((status, kind.as_str()), (400, "InvalidSnapshot"), "{what}");
    }

    // Below the management scope: 403.
    let operator = c
        .acl_create_token(&AclTokenRequest {
            name: "operator".into(),
            scopes: vec![AclScope::Operator],
            ..AclTokenRequest::default()
        })
        .await
        .expect("token");
    let secret = operator.secret_id.expect("secret");
    agents.wait_applied_everywhere().await;
    let (status, _) = put(&agents, 0, &secret, good.clone()).await;
    assert_eq!(status, 403);

    // Over the limit: 413, on the leader and on a follower (which reads the body as
    // the leader would before sending it on).
    let leader = agents.wait_leader().await;
    let follower = (leader + 1) % 3;
    for i in [leader, follower] {
        let (status, kind) = put(&agents, i, ROOT_A, vec![0u8; 300 << 10]).await;
        assert_eq!((status, kind.as_str()), (413, "TooLarge"), "agent {i}");
    }
    // A bad file through a follower: the leader's 400, relayed.
    let (status, kind) = put(&agents, follower, ROOT_A, good[..100].to_vec()).await;
    assert_eq!((status, kind.as_str()), (400, "InvalidSnapshot"));

    // Raw restore commands are not writes.
    let (answer, _) = (
        c.apply(&Command::RestoreSnapshot {
            restore: 1,
            chunks: 0,
            len: 0,
            sha256: [0; 32],
        })
        .await
        .expect_err("refused"),
        (),
    );
    assert_eq!(answer.status(), Some(403));

    let after = c.snapshot(false).await.expect("snapshot").value;
    // The operator token was created in between: compare without it.
    let strip = |bytes: &[u8]| {
        let s = StateStore::new();
        s.restore_from(&mut &bytes[..]).expect("restores");
        let v = s.snapshot();
        let mut names: Vec<String> = v.view().nodes().map(|n| n.id.to_string()).collect();
        names.sort();
        (names, v.view().table_index(schedstate::Table::Nodes))
    };
    assert_eq!(
        strip(&before),
        strip(&after),
        "nothing refused changed the state"
    );

    // The good file restores.
    let (status, kind) = put(&agents, 0, ROOT_A, good).await;
    assert_eq!(status, 200, "{kind}");
    let mut names: Vec<String> = c
        .nodes(ReadOptions::default())
        .await
        .expect("nodes")
        .value
        .iter()
        .map(|n| n.id.to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["n0", "n1", "n2"]);
    agents.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_waits_for_every_server_to_read_its_entries() {
    // One server acts as the previous release: it could not decode the pieces.
    let agents = Agents::start_with(3, Some(ROOT_A), |c| {
        if c.id == 3 {
            c.server.max_format = 2;
        }
    })
    .await;
    let c = agents.client(0);
    c.apply(&upsert("n1", "ebs")).await.expect("write");
    let file = c.snapshot(false).await.expect("saved").value;
    agents.wait_applied_everywhere().await;
    let before = canonical(&agents, 0);
    for i in 0..3 {
        let (status, kind) = put(&agents, i, ROOT_A, file.clone()).await;
        assert_eq!(
            (status, kind.as_str()),
            (409, "FormatNotEnabled"),
            "agent {i}"
        );
    }
    agents.wait_applied_everywhere().await;
    assert!(canonical(&agents, 0) == before, "nothing changed");
    agents.shutdown().await;
}
