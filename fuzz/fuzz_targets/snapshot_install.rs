//! The `snapshot_install` target: a leader's snapshot transfer as the input makes it —
//! chunks at the offset received so far, at 0, at any offset, a little past; data cut
//! from a real snapshot file (sometimes with a byte flipped) or from the input; the
//! last-chunk flag now and then; two snapshot ids — through the receiving side
//! (`SnapshotReceiver::accept`, then `check_snapshot` on a finished transfer).
//!
//! What must hold: no panic; the receiver never holds more than its cap, whatever the
//! offsets claim; a transfer that delivered the real file exactly, under its own
//! metadata, passes the check; anything else is whatever the check says, without a
//! panic.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use openraft::raft::InstallSnapshotRequest;
use openraft::{
    BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote,
};
use schedstate::model::{CsiInfo, CsiNodeInfo, Node};
use schedstate::state::StateStore;
use schedstate_fuzz::harness::input::Input;
use schedstate_raft::NodeId;
use schedstate_raft::snapshot_receiver::{
    Received, SnapshotReceiver, check_snapshot, encode_snapshot,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    run(data);
});

/// Chunks per input, at most.
const MAX_CHUNKS: usize = 48;

fn meta(id: &str) -> SnapshotMeta<NodeId, BasicNode> {
    let members: BTreeMap<NodeId, BasicNode> = (1..=3)
        .map(|id| {
            (
                id,
                BasicNode {
                    addr: format!("10.0.0.{id}:4646"),
                },
            )
        })
        .collect();
    SnapshotMeta {
        last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), 40)),
        last_membership: StoredMembership::new(
            Some(LogId::new(CommittedLeaderId::new(1, 1), 0)),
            Membership::from(members),
        ),
        snapshot_id: id.into(),
    }
}

/// A real snapshot file: a few nodes with plugin fingerprints, at index 40.
fn real() -> &'static Vec<u8> {
    static REAL: OnceLock<Vec<u8>> = OnceLock::new();
    REAL.get_or_init(|| {
        let store = StateStore::new();
        for i in 0..6u64 {
            let mut node = Node::new(format!("node-{i}"), format!("host-{i}"));
            node.add_csi_plugin(CsiInfo::node_instance(
                "ebs",
                format!("alloc-{i}"),
                CsiNodeInfo::default(),
            ));
            store.upsert_node(i + 1, node).expect("a node");
        }
        encode_snapshot(&meta("real"), &store.snapshot()).expect("encodes")
    })
}

fn run(data: &[u8]) {
    let file = real();
    let mut input = Input::new(data);
    let cap = match input.byte() % 3 {
        0 => file.len() as u64,
        1 => 1 + u64::from(input.u16()) % (file.len() as u64 * 2),
        _ => 1 << 20,
    };
    let mut receiver = SnapshotReceiver::default();
    for _ in 0..input.below(MAX_CHUNKS) + 1 {
        if input.is_empty() {
            break;
        }
        let held = receiver.held() as u64;
        let offset = match input.byte() % 6 {
            0 | 1 | 2 => held,
            3 => 0,
            4 => held + 1 + input.below(16) as u64,
            _ => input.u64(),
        };
        let mut chunk = if input.chance(80) {
            let start = (offset as usize).min(file.len());
            let len = (usize::from(input.u16()) % 4097).min(file.len() - start);
            file[start..start + len].to_vec()
        } else {
            let n = usize::from(input.u16()) % 513;
            input.take(n).to_vec()
        };
        if !chunk.is_empty() && input.chance(10) {
            let at = usize::from(input.u16()) % chunk.len();
            chunk[at] ^= 1 << input.below(8);
        }
        let id = if input.chance(90) { "real" } else { "other" };
        let (any_time, at_end) = (input.chance(15), input.chance(70));
        let ends_the_file = (offset as usize).checked_add(chunk.len()) == Some(file.len());
        let done = any_time || (at_end && ends_the_file);
        let request = InstallSnapshotRequest {
            vote: Vote::new_committed(2, 1),
            meta: meta(id),
            offset,
            data: chunk,
            done,
        };
        match receiver.accept(request, cap) {
            Ok(Received::More) => assert!(receiver.held() as u64 <= cap),
            Ok(Received::Mismatch(_)) | Err(_) => {}
            Ok(Received::Done { meta, bytes, .. }) => {
                assert!(bytes.len() as u64 <= cap);
                let checked = check_snapshot(&meta, &bytes);
                if bytes == *file && meta == self::meta("real") {
                    checked.expect("the real snapshot passes");
                }
            }
        }
        assert!(receiver.held() as u64 <= cap);
    }
}
