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

/// What a server of the previous release (store format 2) decodes requests as: the
/// commands in their format-2 shape ([`schedstate::state::v2::CommandV2`], pinned by
/// the golden files), no variant after `TimeoutNow`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
enum PreviousRelease {
    AppendEntries(AppendEntriesRequest<legacy::LegacyConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Forward(schedstate::state::v2::CommandV2, Option<WriteKey>),
    ReadIndex,
    PreVote(PreVoteRequest),
    TimeoutNow(TimeoutNowRequest),
}

fn append(commands: Vec<Command>, keyed: bool) -> AppendEntriesRequest<TypeConfig> {
    use openraft::{CommittedLeaderId, EntryPayload, LogId, Vote};
    let log_id = |index| LogId::new(CommittedLeaderId::new(2, 1), index);
    let keys = keyed.then(|| crate::ProposalKeys {
        at_ms: 7,
        keys: commands.iter().map(|_| None).collect(),
    });
    AppendEntriesRequest {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(log_id(4)),
        entries: vec![
            crate::Entry {
                log_id: log_id(5),
                payload: EntryPayload::Blank,
            },
            crate::Entry {
                log_id: log_id(6),
                payload: EntryPayload::Normal(crate::Proposal {
                    commands: commands.into_iter().map(std::sync::Arc::new).collect(),
                    keys,
                    raise_format: None,
                }),
            },
        ],
        leader_commit: Some(log_id(5)),
    }
}

#[test]
fn entries_of_format_2_go_in_the_previous_releases_shape_and_format_3_apart() {
    use schedstate::model::{Job, JobDefinition};
    let plain = vec![
        Command::UpsertJobs {
            jobs: vec![Job::new("default", "web")],
        },
        Command::DeleteNodes {
            ids: vec!["n1".into()],
        },
    ];
    for keyed in [false, true] {
        let bytes = RpcRequest::AppendEntries(append(plain.clone(), keyed))
            .encode()
            .unwrap();
        assert_eq!(bytes[0], 0, "the old AppendEntries variant");
        let PreviousRelease::AppendEntries(old) = postcard::from_bytes(&bytes).unwrap() else {
            panic!("decoded as another variant")
        };
        let openraft::EntryPayload::Normal(legacy::LegacyProposal(p)) = &old.entries[1].payload
        else {
            panic!("not a proposal")
        };
        let got: Vec<Command> = p.commands.iter().map(|c| (**c).clone()).collect();
        assert_eq!(got, plain);
        let Ok(RpcRequest::AppendEntries(back)) = RpcRequest::decode(&bytes) else {
            panic!("this build reads it back")
        };
        assert_eq!(
            RpcRequest::AppendEntries(back).encode().unwrap(),
            bytes,
            "the same bytes again"
        );
    }
    let defined = Command::UpsertJobs {
        jobs: vec![Job {
            definition: Some(JobDefinition::new("{}")),
            ..Job::new("default", "web")
        }],
    };
    let bytes = RpcRequest::AppendEntries(append(vec![defined.clone()], false))
        .encode()
        .unwrap();
    assert!(postcard::from_bytes::<PreviousRelease>(&bytes).is_err());
    let Ok(RpcRequest::AppendEntries(back)) = RpcRequest::decode(&bytes) else {
        panic!("this build reads it")
    };
    let openraft::EntryPayload::Normal(p) = &back.entries[1].payload else {
        panic!("not a proposal")
    };
    assert_eq!(*p.commands[0], defined);
    // Forwarded the same way; the formats question is unknown to the old release.
    for (command, old) in [(plain[0].clone(), true), (defined, false)] {
        let bytes = RpcRequest::Forward(command.clone(), None).encode().unwrap();
        assert_eq!(postcard::from_bytes::<PreviousRelease>(&bytes).is_ok(), old);
        let Ok(RpcRequest::Forward(back, None)) = RpcRequest::decode(&bytes) else {
            panic!("this build reads it")
        };
        assert_eq!(back, command);
    }
    let bytes = RpcRequest::Formats.encode().unwrap();
    assert!(postcard::from_bytes::<PreviousRelease>(&bytes).is_err());
    let answer = RpcAnswer::Formats(3).encode().unwrap();
    assert!(matches!(
        RpcAnswer::decode(&answer),
        Ok(RpcAnswer::Formats(3))
    ));
}
