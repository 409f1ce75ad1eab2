//! Forged Raft RPCs handed straight to a follower's `answer_rpc` — the path every
//! transport takes — as an attacker on the network (or a server with a bug) would
//! send them. Each one once crashed, bricked, silently stopped or hijacked a server;
//! each is now refused, the follower's Raft keeps running, and the cluster keeps
//! committing writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta,
    StoredMembership, Vote,
};
use schedstate_raft::inbound::RpcRefused;
use schedstate_raft::wire::{RpcAnswer, RpcRequest, answer_rpc};
use schedstate_raft::{NodeId, Proposal, Server, ServerOptions, TypeConfig};

use crate::support::*;

/// A three-server cluster that committed a few writes; its leader and one follower.
async fn cluster() -> (Arc<Cluster>, Server, Server) {
    let cluster = Arc::new(Cluster::start(3, ServerOptions::default()).await);
    for seq in 0..5 {
        propose_until_known(&cluster, &marker_node("before", seq)).await;
    }
    cluster.converge().await;
    let leader = cluster.wait_leader(&[]).await;
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != leader.id())
        .unwrap();
    (cluster, leader, follower)
}

/// Servers `ids` at the addresses `address` gives them.
fn nodes(
    ids: std::ops::RangeInclusive<NodeId>,
    address: impl Fn(NodeId) -> String,
) -> BTreeMap<NodeId, BasicNode> {
    ids.map(|id| (id, BasicNode { addr: address(id) }))
        .collect()
}

fn last_log_id(s: &Server) -> LogId<NodeId> {
    s.raft().metrics().borrow().last_applied.expect("applied")
}

fn vote_of(s: &Server) -> Vote<NodeId> {
    s.raft().metrics().borrow().vote
}

fn running(s: &Server) -> bool {
    s.raft().metrics().borrow().running_state.is_ok()
}

fn entry(
    term: u64,
    leader: NodeId,
    index: u64,
    payload: EntryPayload<TypeConfig>,
) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, leader), index),
        payload,
    }
}

fn blank_proposal() -> EntryPayload<TypeConfig> {
    EntryPayload::Normal(Proposal::new(Vec::new()))
}

/// The cluster is healthy: the follower's Raft runs and a write through it commits
/// and reaches it.
async fn still_serving(cluster: &Cluster, follower: &Server, tag: &str) {
    assert!(running(follower), "{tag}: the follower's Raft stopped");
    let index = propose_until_known(cluster, &marker_node(tag, 0)).await;
    follower.wait_applied(index, DEADLINE).await.unwrap();
    assert!(
        follower
            .read_stale()
            .view()
            .node(&format!("{tag}-0"))
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_chunk_at_a_far_offset_allocates_nothing() {
    let (cluster, leader, follower) = cluster().await;
    let meta = SnapshotMeta {
        last_log_id: Some(last_log_id(&leader)),
        last_membership: StoredMembership::default(),
        snapshot_id: "forged".into(),
    };
    let chunk = |offset: u64, data: Vec<u8>, done: bool| {
        RpcRequest::InstallSnapshot(InstallSnapshotRequest {
            vote: vote_of(&leader),
            meta: meta.clone(),
            offset,
            data,
            done,
        })
    };
    // Out of place (no transfer under way, then not at the received offset): the
    // answer is openraft's own mismatch, on which a leader starts over.
    for request in [
        chunk(1 << 40, vec![1], false),
        chunk(1 << 40, vec![1], true),
    ] {
        match answer_rpc(&follower, request).await.unwrap() {
            RpcAnswer::InstallSnapshot(Err(e)) => {
                assert!(
                    e.to_string().contains("mismatch") || e.to_string().contains("Mismatch"),
                    "{e}"
                )
            }
            other => panic!("not a mismatch: {other:?}"),
        }
    }
    answer_rpc(&follower, chunk(0, vec![0; 100], false))
        .await
        .unwrap();
    assert!(matches!(
        answer_rpc(&follower, chunk(1 << 40, vec![1], false))
            .await
            .unwrap(),
        RpcAnswer::InstallSnapshot(Err(_))
    ));
    still_serving(&cluster, &follower, "after-offset").await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_past_the_cap_or_that_does_not_decode_is_refused_and_raft_runs_on() {
    let options = ServerOptions {
        max_snapshot_bytes: 1 << 20,
        ..ServerOptions::default()
    };
    let cluster = Arc::new(Cluster::start(3, options).await);
    propose_until_known(&cluster, &marker_node("before", 0)).await;
    let leader = cluster.wait_leader(&[]).await;
    let follower = cluster
        .live()
        .into_iter()
        .find(|s| s.id() != leader.id())
        .unwrap();
    let members = nodes(1..=3, |id| format!("server-{id}"));
    let meta = SnapshotMeta {
        last_log_id: Some(LogId::new(
            CommittedLeaderId::new(vote_of(&leader).leader_id.term, leader.id()),
            last_log_id(&leader).index + 1_000,
        )),
        last_membership: StoredMembership::new(None, Membership::from(members)),
        snapshot_id: "garbage".into(),
    };
    let request = |offset: u64, data: Vec<u8>, done: bool| {
        RpcRequest::InstallSnapshot(InstallSnapshotRequest {
            vote: vote_of(&leader),
            meta: meta.clone(),
            offset,
            data,
            done,
        })
    };
    // A garbage final chunk: refused before openraft sees it (it used to stop the core).
    let e = answer_rpc(
        &follower,
        request(0, b"not a snapshot at all".to_vec(), true),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, RpcRefused::Snapshot(_)), "{e}");
    // Past the cap: refused, the partial transfer dropped.
    answer_rpc(&follower, request(0, vec![0; 600 << 10], false))
        .await
        .unwrap();
    let e = answer_rpc(&follower, request(600 << 10, vec![0; 600 << 10], false))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
    assert_eq!(follower.snapshots_installed(), 0);
    still_serving(&cluster, &follower, "after-garbage").await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_with_the_largest_term_is_refused_and_the_server_restarts_fine() {
    let (cluster, leader, follower) = cluster().await;
    let term_before = follower.term();
    for term in [u64::MAX, 1 << 62, term_before + (1 << 33)] {
        let heartbeat = RpcRequest::AppendEntries(AppendEntriesRequest {
            vote: Vote::new_committed(term, leader.id()),
            prev_log_id: None,
            entries: vec![],
            leader_commit: None,
        });
        let e = answer_rpc(&follower, heartbeat).await.unwrap_err();
        assert!(matches!(e, RpcRefused::Term { .. }), "{e}");
        let vote = RpcRequest::Vote(VoteRequest::new(Vote::new(term, leader.id()), None));
        let e = answer_rpc(&follower, vote).await.unwrap_err();
        assert!(matches!(e, RpcRefused::Term { .. }), "{e}");
    }
    assert_eq!(follower.term(), term_before, "a refused term was taken");
    // Nothing was persisted: the server restarts, elects and serves as before.
    let id = follower.id();
    cluster.crash(id).await;
    let back = cluster.open(id).await;
    assert!(back.term() < 1 << 32);
    cluster.converge().await;
    still_serving(&cluster, &back, "after-brick").await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gapped_and_out_of_order_entries_are_refused_and_the_core_keeps_running() {
    let (cluster, leader, follower) = cluster().await;
    let last = last_log_id(&follower);
    let term = vote_of(&leader).leader_id.term;
    let append = |entries: Vec<Entry<TypeConfig>>| {
        RpcRequest::AppendEntries(AppendEntriesRequest {
            vote: Vote::new_committed(term, leader.id()),
            prev_log_id: Some(last),
            entries,
            leader_commit: Some(last),
        })
    };
    let gapped = append(vec![entry(
        term,
        leader.id(),
        last.index + 5,
        blank_proposal(),
    )]);
    let e = answer_rpc(&follower, gapped).await.unwrap_err();
    assert!(matches!(e, RpcRefused::NotConsecutive { .. }), "{e}");
    let swapped = append(vec![
        entry(term, leader.id(), last.index + 2, blank_proposal()),
        entry(term, leader.id(), last.index + 1, blank_proposal()),
    ]);
    let e = answer_rpc(&follower, swapped).await.unwrap_err();
    assert!(matches!(e, RpcRefused::NotConsecutive { .. }), "{e}");
    let above = append(vec![entry(
        term + 1,
        leader.id(),
        last.index + 1,
        blank_proposal(),
    )]);
    let e = answer_rpc(&follower, above).await.unwrap_err();
    assert!(matches!(e, RpcRefused::TermOrder { .. }), "{e}");
    still_serving(&cluster, &follower, "after-gaps").await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_leader_cannot_rewrite_the_membership() {
    let (cluster, leader, follower) = cluster().await;
    let before = follower.members();
    let last = last_log_id(&follower);
    let term = vote_of(&leader).leader_id.term;
    let attacker: BTreeMap<NodeId, BasicNode> = [(
        99,
        BasicNode {
            addr: "127.0.0.1:9".into(),
        },
    )]
    .into();
    let hijack = |leader_id: NodeId| {
        RpcRequest::AppendEntries(AppendEntriesRequest {
            vote: Vote::new_committed(term, leader_id),
            prev_log_id: Some(last),
            entries: vec![entry(
                term,
                leader_id,
                last.index + 1,
                EntryPayload::Membership(Membership::from(attacker.clone())),
            )],
            leader_commit: Some(last),
        })
    };
    for leader_id in [99, leader.id()] {
        let e = answer_rpc(&follower, hijack(leader_id)).await.unwrap_err();
        assert!(
            matches!(e, RpcRefused::MembershipJump { .. }),
            "leader {leader_id}: {e}"
        );
    }
    let heartbeat = RpcRequest::AppendEntries(AppendEntriesRequest {
        vote: Vote::new_committed(term + 1, 99),
        prev_log_id: Some(last),
        entries: vec![],
        leader_commit: None,
    });
    let e = answer_rpc(&follower, heartbeat).await.unwrap_err();
    assert!(
        matches!(e, RpcRefused::NotAMember { sender: 99, .. }),
        "{e}"
    );
    assert_eq!(follower.members(), before);
    let id = follower.id();
    cluster.crash(id).await;
    let back = cluster.open(id).await;
    assert_eq!(back.members(), before, "after a restart too");
    still_serving(&cluster, &back, "after-hijack").await;
    cluster.shutdown().await;
}

#[test]
fn trailing_bytes_are_refused() {
    let request = RpcRequest::Vote(VoteRequest::new(Vote::new(1, 1), None));
    let mut bytes = request.encode().unwrap();
    assert!(RpcRequest::decode(&bytes).is_ok());
    bytes.extend_from_slice(&[0; 64]);
    let e = RpcRequest::decode(&bytes).unwrap_err();
    assert!(matches!(e, RpcRefused::Malformed(_)), "{e}");
    // A heartbeat followed by megabytes of zeros is not a heartbeat.
    let zeros = vec![0u8; 16 << 20];
    assert!(RpcRequest::decode(&zeros).is_err());
}

/// Writes the seeds of the `raft_rpc` fuzz target (`fuzz/seeds/raft_rpc/`): one real
/// request of each kind, behind the view bytes the target reads first (a member at
/// term 5, or a fresh server). Run once when the wire format changes.
#[test]
#[ignore = "writes the fuzz seeds; run when the wire format changes"]
fn write_raft_rpc_fuzz_seeds() {
    use schedstate::state::Command;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/raft_rpc");
    std::fs::create_dir_all(&dir).unwrap();
    let leader = 1;
    let prev = LogId::new(CommittedLeaderId::new(4, leader), 9);
    let members = nodes(1..=4, |id| format!("10.0.0.{id}:4646"));
    let requests = [
        (
            "heartbeat",
            RpcRequest::AppendEntries(AppendEntriesRequest {
                vote: Vote::new_committed(5, leader),
                prev_log_id: Some(prev),
                entries: vec![],
                leader_commit: Some(prev),
            }),
        ),
        (
            "append-two-entries-and-a-learner",
            RpcRequest::AppendEntries(AppendEntriesRequest {
                vote: Vote::new_committed(5, leader),
                prev_log_id: Some(prev),
                entries: vec![
                    entry(5, leader, 10, blank_proposal()),
                    entry(
                        5,
                        leader,
                        11,
                        EntryPayload::Membership(Membership::new(
                            vec![[1, 2, 3].into()],
                            members.clone(),
                        )),
                    ),
                ],
                leader_commit: Some(prev),
            }),
        ),
        (
            "vote",
            RpcRequest::Vote(VoteRequest::new(Vote::new(6, 3), Some(prev))),
        ),
        (
            "snapshot-chunk",
            RpcRequest::InstallSnapshot(InstallSnapshotRequest {
                vote: Vote::new_committed(5, leader),
                meta: SnapshotMeta {
                    last_log_id: Some(prev),
                    last_membership: StoredMembership::new(Some(prev), Membership::from(members)),
                    snapshot_id: "5-1".into(),
                },
                offset: 0,
                data: b"SCHEDRSN".to_vec(),
                done: false,
            }),
        ),
        (
            "forward",
            RpcRequest::Forward(
                Command::UpsertNode {
                    node: marker_node("seed", 1),
                },
                None,
            ),
        ),
        (
            "pre-vote",
            RpcRequest::PreVote(schedstate_raft::pre_vote::PreVoteRequest {
                candidate: 3,
                term: 6,
                last_log_id: Some(prev),
            }),
        ),
        (
            "timeout-now",
            RpcRequest::TimeoutNow(schedstate_raft::transfer::TimeoutNowRequest {
                from: leader,
                term: 6,
            }),
        ),
    ];
    for (name, request) in requests {
        let body = request.encode().unwrap();
        // A member at term 5 (view byte 0, term kind 1, term 5 as a u16).
        let mut member = vec![0u8, 1, 5, 0];
        member.extend_from_slice(&body);
        std::fs::write(dir.join(name), &member).unwrap();
        // A fresh server.
        let mut fresh = vec![1u8];
        fresh.extend_from_slice(&body);
        std::fs::write(dir.join(format!("{name}-fresh")), &fresh).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_breaking_an_input_rule_costs_no_log_entry() {
    use schedstate::model::Node;
    use schedstate::state::Command;
    use schedstate_raft::ProposeError;

    let (cluster, leader, follower) = cluster().await;
    let last = |s: &Server| s.raft().metrics().borrow().last_log_index;
    let before = last(&leader);
    let huge_id = Command::UpsertNode {
        node: Node::new("n".repeat(15 << 20), "host"),
    };
    let control = Command::UpsertNode {
        node: Node::new("n1", "host\u{1b}[2J"),
    };
    for command in [huge_id, control] {
        for (who, result) in [
            ("leader", leader.propose(command.clone()).await),
            (
                "follower",
                follower.propose_or_forward(command.clone()).await,
            ),
        ] {
            match result {
                Err(ProposeError::Invalid { kind, message }) => {
                    assert_eq!(kind, "InvalidInput", "{who}: {message}");
                    assert!(message.len() < 400, "{who}: the message repeats the input");
                }
                other => panic!("{who}: {other:?}"),
            }
        }
    }
    assert_eq!(last(&leader), before, "a refused command took a log entry");
    still_serving(&cluster, &follower, "after-invalid").await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_entry_outgrows_an_rpc_whatever_clients_send_at_once() {
    use schedstate::model::CsiVolume;
    use schedstate::state::{Command, MAX_ENTRIES, MAX_TEXT_BYTES};
    use schedstate_raft::ProposeError;

    let (cluster, leader, follower) = cluster().await;
    // Volumes of a plugin that does not exist: cheap to refuse at apply, so the test
    // is about the size of entries, not the work of applying them. Each volume carries
    // 1,024 parameters of 4 KiB: ~4 MiB.
    let value = "v".repeat(MAX_TEXT_BYTES);
    let volumes = |tag: &str, n: usize| Command::RegisterCsiVolumes {
        volumes: (0..n)
            .map(|i| {
                let mut v = CsiVolume::new("default", format!("{tag}-{i}"), "no-such-plugin");
                for p in 0..MAX_ENTRIES {
                    v.parameters.insert(format!("p{p}"), value.clone());
                }
                v
            })
            .collect(),
    };
    // One command over an entry's budget (32 MiB encoded) within the input rules:
    // refused before the log.
    let before = leader.raft().metrics().borrow().last_log_index;
    match leader.propose(volumes("huge", 9)).await {
        Err(ProposeError::Invalid { kind, .. }) => assert_eq!(kind, "TooLarge"),
        other => panic!("{other:?}"),
    }
    assert_eq!(leader.raft().metrics().borrow().last_log_index, before);
    // Eight ~8 MiB commands at once (~67 MiB, over one RPC): they cannot share one
    // entry, and every entry reaches the follower (none is too large for an RPC).
    let proposals: Vec<_> = (0..8)
        .map(|k| {
            let cluster = cluster.clone();
            let command = volumes(&format!("big{k}"), 2);
            tokio::spawn(async move {
                // Each is refused at apply (no such plugin), so sending it again after
                // a leader change (a debug build applying 67 MiB can miss heartbeats)
                // changes nothing.
                loop {
                    let leader = cluster.wait_leader(&[]).await;
                    match leader.propose(command.clone()).await {
                        Err(ProposeError::Refused { index, .. }) => return index,
                        Err(e) if !e.is_refusal() => continue,
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    let mut last = 0;
    for p in proposals {
        last = last.max(p.await.unwrap());
    }
    cluster.wait_all_applied(last).await;
    still_serving(&cluster, &follower, "after-big").await;
    cluster.shutdown().await;
}
