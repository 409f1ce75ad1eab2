//! The wire format's compatibility with older servers, and answers round-tripped.

use super::*;

/// What a server built before [`RpcRequest::ReadIndex`] decodes requests as:
/// the same variants in the same order, without the last.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum OlderRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Forward(Command, Option<WriteKey>),
}

#[test]
fn an_older_server_cannot_decode_a_read_index_request() {
    let bytes = RpcRequest::ReadIndex.encode().unwrap();
    assert!(postcard::from_bytes::<OlderRequest>(&bytes).is_err());
    assert!(matches!(
        RpcRequest::decode(&bytes),
        Ok(RpcRequest::ReadIndex)
    ));
}

/// What a server built before [`RpcRequest::PreVote`] decodes requests as.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum BeforePreVote {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Forward(Command, Option<WriteKey>),
    ReadIndex,
}

#[test]
fn an_older_server_cannot_decode_a_pre_vote_and_the_answers_cross_the_wire() {
    let request = PreVoteRequest {
        candidate: 3,
        term: 8,
        last_log_id: Some(openraft::LogId::new(
            openraft::CommittedLeaderId::new(7, 1),
            41,
        )),
    };
    let bytes = RpcRequest::PreVote(request.clone()).encode().unwrap();
    assert!(postcard::from_bytes::<BeforePreVote>(&bytes).is_err());
    assert!(matches!(RpcRequest::decode(&bytes), Ok(RpcRequest::PreVote(r)) if r == request));
    for answer in [
        PreVoteAnswer::Granted,
        PreVoteAnswer::LeaderAlive { leader: 1, ms: 40 },
        PreVoteAnswer::LogBehind {
            mine: request.last_log_id,
        },
    ] {
        let bytes = RpcAnswer::PreVote(answer.clone()).encode().unwrap();
        match RpcAnswer::decode(&bytes).unwrap() {
            RpcAnswer::PreVote(back) => assert_eq!(back, answer),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_timeout_now_crosses_the_wire_and_an_older_server_refuses_it() {
    use crate::transfer::{TimeoutNowAnswer, TimeoutNowRequest};
    let request = TimeoutNowRequest { from: 1, term: 9 };
    let bytes = RpcRequest::TimeoutNow(request.clone()).encode().unwrap();
    assert!(postcard::from_bytes::<BeforePreVote>(&bytes).is_err());
    assert!(matches!(RpcRequest::decode(&bytes), Ok(RpcRequest::TimeoutNow(r)) if r == request));
    for answer in [
        TimeoutNowAnswer::Standing,
        TimeoutNowAnswer::Refused("no".into()),
    ] {
        let bytes = RpcAnswer::TimeoutNow(answer.clone()).encode().unwrap();
        match RpcAnswer::decode(&bytes).unwrap() {
            RpcAnswer::TimeoutNow(back) => assert_eq!(back, answer),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_read_index_answer_crosses_the_wire() {
    for answer in [
        Ok(42),
        Err(ReadIndexRefusal::NotLeader {
            leader: Some(2),
            address: Some("a:1".into()),
        }),
        Err(ReadIndexRefusal::Unavailable("no quorum".into())),
        Err(ReadIndexRefusal::Stopped),
    ] {
        let bytes = RpcAnswer::ReadIndex(answer.clone()).encode().unwrap();
        match RpcAnswer::decode(&bytes).unwrap() {
            RpcAnswer::ReadIndex(back) => assert_eq!(back, answer),
            other => panic!("{other:?}"),
        }
    }
}
