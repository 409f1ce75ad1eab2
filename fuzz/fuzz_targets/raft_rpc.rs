//! The `raft_rpc` target: bytes as a Raft RPC off the network — decoded
//! (`RpcRequest::decode`, no trailing bytes) and, when they decode, checked against a
//! server's view (`schedstate_raft::inbound`) as every inbound RPC is before openraft
//! sees it; the same bytes also as an answer (`RpcAnswer::decode`).
//!
//! What must hold: no panic, no allocation beyond what the input can fill; a request
//! that decodes re-encodes to bytes that decode to the same encoding; a request the
//! checks pass keeps every term below `MAX_TERM` and within `MAX_TERM_STEP` of the
//! server's, its entries consecutive after `prev_log_id`, and its sender a member.
//!
//! The first byte picks the view (a fresh server, or a member of `{1, 2, 3}` at a
//! term from the next bytes); the rest is the RPC.
#![no_main]

use openraft::Vote;
use schedstate_fuzz::harness::input::Input;
use schedstate_raft::inbound::{
    MAX_TERM, MAX_TERM_STEP, ServerView, check_append, check_pre_vote, check_snapshot_chunk,
    check_timeout_now,
    check_vote,
};
use schedstate_raft::snapshot_receiver::SnapshotReceiver;
use schedstate_raft::wire::{RpcAnswer, RpcRequest};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    run(data);
});

fn view(input: &mut Input<'_>) -> ServerView {
    if input.bool() {
        return ServerView::default();
    }
    let term = match input.byte() % 4 {
        0 => 0,
        1 => u64::from(input.u16()),
        2 => input.u64(),
        _ => MAX_TERM - 1,
    };
    ServerView {
        id: 2,
        current_term: term,
        vote: Vote::new_committed(term, 1),
        members: [1, 2, 3].into(),
        voters: [1, 2, 3].into(),
        configs: vec![[1, 2, 3].into()],
        ..ServerView::default()
    }
}

fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let view = view(&mut input);
    let bytes = input.rest();
    let _ = RpcAnswer::decode(bytes);
    let Ok(request) = RpcRequest::decode(bytes) else {
        return;
    };
    let encoded = request.encode().expect("a decoded request encodes");
    let again = RpcRequest::decode(&encoded).expect("its encoding decodes");
    assert_eq!(again.encode().expect("encodes"), encoded);
    let limit = view
        .current_term
        .saturating_add(MAX_TERM_STEP)
        .min(MAX_TERM - 1);
    match &request {
        RpcRequest::AppendEntries(rpc) => {
            if check_append(&view, rpc).is_ok() {
                assert!(rpc.vote.leader_id.term <= limit);
                let mut next = rpc.prev_log_id.map_or(0, |p| p.index + 1);
                for e in &rpc.entries {
                    assert_eq!(e.log_id.index, next);
                    assert!(e.log_id.leader_id.term <= rpc.vote.leader_id.term);
                    next += 1;
                }
            }
        }
        RpcRequest::Vote(rpc) => {
            if check_vote(&view, rpc).is_ok() {
                assert!(rpc.vote.leader_id.term <= limit);
                assert!(
                    !view.has_membership() || view.members.contains(&rpc.vote.leader_id.node_id)
                );
            }
        }
        RpcRequest::InstallSnapshot(rpc) => {
            if check_snapshot_chunk(&view, rpc).is_ok() {
                assert!(rpc.vote.leader_id.term <= limit);
                let mut receiver = SnapshotReceiver::default();
                let cap = 1 << 16;
                let _ = receiver.accept(rpc.clone(), cap);
                assert!(receiver.held() as u64 <= cap);
            }
        }
        RpcRequest::PreVote(rpc) => {
            if check_pre_vote(&view, rpc).is_ok() {
                assert!(rpc.term <= limit);
                assert!(rpc.last_log_id.is_none_or(|l| l.leader_id.term <= rpc.term));
                assert!(!view.has_membership() || view.members.contains(&rpc.candidate));
            }
        }
        RpcRequest::TimeoutNow(rpc) => {
            if check_timeout_now(&view, rpc).is_ok() {
                assert!(rpc.term <= limit);
                assert!(!view.has_membership() || view.members.contains(&rpc.from));
            }
        }
        RpcRequest::Forward(..) | RpcRequest::ReadIndex | RpcRequest::Formats => {}
    }
}
