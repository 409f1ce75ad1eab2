//! The inbound checks, RPC by RPC: what passes and what is refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::{CommittedLeaderId, Entry, LeaderId};

use super::*;
use crate::Proposal;

fn view() -> ServerView {
    ServerView {
        id: 2,
        current_term: 5,
        vote: Vote::new_committed(5, 1),
        members: [1, 2, 3].into(),
        voters: [1, 2, 3].into(),
        configs: vec![[1, 2, 3].into()],
        configs_index: Some(3),
        committed_configs: vec![[1, 2, 3].into()],
        committed_index: Some(3),
    }
}

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn blank(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Proposal::new(Vec::<Arc<_>>::new())),
    }
}

fn membership(configs: Vec<BTreeSet<NodeId>>, addr: &str) -> Membership<NodeId, BasicNode> {
    let nodes: BTreeMap<NodeId, BasicNode> = configs
        .iter()
        .flatten()
        .map(|id| (*id, BasicNode { addr: addr.into() }))
        .collect();
    Membership::new(configs, nodes)
}

fn append(
    leader: NodeId,
    term: u64,
    prev: Option<LogId<NodeId>>,
    entries: Vec<Entry<TypeConfig>>,
) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: Vote::new_committed(term, leader),
        prev_log_id: prev,
        entries,
        leader_commit: prev,
    }
}

#[test]
fn a_leaders_ordinary_requests_pass() {
    let v = view();
    check_append(
        &v,
        &append(1, 5, Some(log_id(4, 9)), vec![blank(4, 10), blank(5, 11)]),
    )
    .unwrap();
    check_append(&v, &append(1, 6, None, vec![blank(0, 0), blank(6, 1)])).unwrap();
    check_append(&v, &append(1, 5, Some(log_id(5, 3)), vec![])).unwrap();
    check_vote(&v, &VoteRequest::new(Vote::new(6, 3), Some(log_id(5, 20)))).unwrap();
}

#[test]
fn terms_that_could_overflow_or_leap_are_refused() {
    let v = view();
    for term in [u64::MAX, MAX_TERM, 5 + MAX_TERM_STEP + 1] {
        let e = check_append(&v, &append(1, term, None, vec![])).unwrap_err();
        assert!(matches!(e, RpcRefused::Term { .. }), "{e}");
        let e = check_vote(&v, &VoteRequest::new(Vote::new(term, 3), None)).unwrap_err();
        assert!(matches!(e, RpcRefused::Term { .. }), "{e}");
    }
    let e = check_append(&v, &append(1, 5, Some(log_id(u64::MAX, 1)), vec![])).unwrap_err();
    assert!(matches!(e, RpcRefused::Term { .. }), "{e}");
}

#[test]
fn gaps_disorder_and_terms_out_of_order_are_refused() {
    let v = view();
    let p = Some(log_id(4, 9));
    let gap = append(1, 5, p, vec![blank(5, 11)]);
    assert!(matches!(
        check_append(&v, &gap),
        Err(RpcRefused::NotConsecutive { expected: 10, .. })
    ));
    let swapped = append(1, 5, p, vec![blank(5, 11), blank(5, 10)]);
    assert!(matches!(
        check_append(&v, &swapped),
        Err(RpcRefused::NotConsecutive { .. })
    ));
    let backwards = append(1, 5, p, vec![blank(5, 10), blank(4, 11)]);
    assert!(matches!(
        check_append(&v, &backwards),
        Err(RpcRefused::TermOrder { .. })
    ));
    let above_leader = append(1, 5, p, vec![blank(6, 10)]);
    assert!(matches!(
        check_append(&v, &above_leader),
        Err(RpcRefused::TermOrder { .. })
    ));
    let below_prev = append(1, 5, p, vec![blank(3, 10)]);
    assert!(matches!(
        check_append(&v, &below_prev),
        Err(RpcRefused::TermOrder { .. })
    ));
}

#[test]
fn a_made_up_leader_and_a_membership_jump_are_refused() {
    let v = view();
    let e = check_append(&v, &append(99, 5, Some(log_id(4, 9)), vec![])).unwrap_err();
    assert!(
        matches!(e, RpcRefused::NotAMember { sender: 99, .. }),
        "{e}"
    );
    // The hijack: leader 99 with a membership of itself alone.
    let hijack = append(
        99,
        5,
        Some(log_id(4, 9)),
        vec![Entry {
            log_id: log_id(5, 10),
            payload: EntryPayload::Membership(membership(vec![[99].into()], "127.0.0.1:9")),
        }],
    );
    let e = check_append(&v, &hijack).unwrap_err();
    assert!(matches!(e, RpcRefused::MembershipJump { .. }), "{e}");
    // A legitimate step: a learner added, then the joint configuration with it; its
    // leader is then a member the request introduced.
    let m1 = {
        let mut nodes: BTreeMap<NodeId, BasicNode> = [1, 2, 3, 4]
            .into_iter()
            .map(|id| {
                (
                    id,
                    BasicNode {
                        addr: format!("10.0.0.{id}:4646"),
                    },
                )
            })
            .collect();
        nodes.insert(
            4,
            BasicNode {
                addr: "10.0.0.4:4646".into(),
            },
        );
        Membership::new(vec![[1, 2, 3].into()], nodes)
    };
    let m2 = membership(vec![[1, 2, 3].into(), [1, 2, 3, 4].into()], "10.0.0.9:4646");
    let steps = append(
        4,
        5,
        Some(log_id(4, 9)),
        vec![
            Entry {
                log_id: log_id(5, 10),
                payload: EntryPayload::Membership(m1),
            },
            Entry {
                log_id: log_id(5, 11),
                payload: EntryPayload::Membership(m2),
            },
        ],
    );
    check_append(&v, &steps).unwrap();
    let bad_address = append(
        1,
        5,
        Some(log_id(4, 9)),
        vec![Entry {
            log_id: log_id(5, 10),
            payload: EntryPayload::Membership(membership(vec![[1, 2, 3].into()], "")),
        }],
    );
    assert!(matches!(
        check_append(&v, &bad_address),
        Err(RpcRefused::BadAddress { .. })
    ));
    // A fresh server takes any sender.
    check_append(
        &ServerView::default(),
        &append(99, 1, None, vec![blank(0, 0)]),
    )
    .unwrap();
    let e = check_vote(&v, &VoteRequest::new(Vote::new(6, 99), None)).unwrap_err();
    assert!(matches!(e, RpcRefused::NotAMember { .. }), "{e}");
}

#[test]
fn membership_entries_a_new_leader_resends_are_taken_and_jumps_still_refused() {
    let s = |v: &[u64]| v.iter().copied().collect::<BTreeSet<NodeId>>();
    let entry = |term, index, configs: Vec<BTreeSet<NodeId>>| Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(membership(configs, "10.0.0.1:4646")),
    };
    // Server 1 removed itself: {1, 2, 3} (index 0), the joint entry (3) and {2, 3}
    // (4), all committed here.
    let v = ServerView {
        id: 3,
        members: s(&[2, 3]),
        voters: s(&[2, 3]),
        configs: vec![s(&[2, 3])],
        configs_index: Some(4),
        committed_configs: vec![s(&[2, 3])],
        committed_index: Some(4),
        ..view()
    };
    // The new leader, 2, probes from the middle of its log: every entry again.
    let resend = |last: Entry<TypeConfig>| {
        append(
            2,
            6,
            None,
            vec![
                entry(0, 0, vec![s(&[1, 2, 3])]),
                blank(1, 1),
                blank(1, 2),
                entry(1, 3, vec![s(&[1, 2, 3]), s(&[2, 3])]),
                entry(1, 4, vec![s(&[2, 3])]),
                last,
            ],
        )
    };
    check_append(&v, &resend(blank(6, 5))).unwrap();
    // Above the committed index the entries step from the resent ones, as before.
    let e = check_append(&v, &resend(entry(6, 5, vec![s(&[99])]))).unwrap_err();
    assert!(matches!(e, RpcRefused::MembershipJump { .. }), "{e}");
    check_append(&v, &resend(entry(6, 5, vec![s(&[2, 3]), s(&[2, 3, 4])]))).unwrap();
    // Entries that begin before an uncommitted joint entry may replace it: they step
    // from the committed membership, not from it.
    let joint = ServerView {
        configs: vec![s(&[2, 3]), s(&[2, 3, 4])],
        configs_index: Some(5),
        ..v.clone()
    };
    let replace = |configs| append(2, 7, Some(log_id(6, 4)), vec![entry(7, 5, configs)]);
    check_append(&joint, &replace(vec![s(&[2, 3]), s(&[2, 3, 5])])).unwrap();
    let e = check_append(&joint, &replace(vec![s(&[99])])).unwrap_err();
    assert!(matches!(e, RpcRefused::MembershipJump { .. }), "{e}");
    // After the joint entry, the next steps from it.
    let after = append(
        2,
        7,
        Some(log_id(6, 5)),
        vec![entry(7, 6, vec![s(&[2, 3, 4])])],
    );
    check_append(&joint, &after).unwrap();
}

#[test]
fn membership_steps() {
    let s = |v: &[u64]| v.iter().copied().collect::<BTreeSet<NodeId>>();
    assert!(is_step(&[s(&[1, 2, 3])], &[s(&[1, 2, 3])]));
    assert!(is_step(
        &[s(&[1, 2, 3])],
        &[s(&[1, 2, 3]), s(&[1, 2, 3, 4])]
    ));
    assert!(is_step(&[s(&[1, 2, 3]), s(&[2, 3, 4])], &[s(&[2, 3, 4])]));
    assert!(!is_step(&[s(&[1, 2, 3])], &[s(&[99])]));
    assert!(!is_step(&[s(&[1, 2, 3])], &[s(&[99]), s(&[1, 2, 3])]));
    assert!(is_step(&[], &[s(&[99])]));
    let _ = LeaderId::new(1, 1);
}
