//! The staging and commit of a restore, unit by unit.

use std::path::Path;

use openraft::{BasicNode, SnapshotMeta};
use schedstate::model::Node;
use schedstate::state::Table;

use super::*;
use crate::WriteKeys;
use crate::snapshot_file;

/// A snapshot file of a store with `nodes` nodes written at indexes 1..=nodes.
fn file(nodes: usize) -> Vec<u8> {
    let store = StateStore::new();
    for i in 0..nodes {
        let node = Node::new(format!("node-{i}"), format!("client-{i}"));
        store
            .apply(i as u64 + 1, &Command::UpsertNode { node })
            .unwrap();
    }
    let mut bytes = Vec::new();
    store.snapshot_to(&mut bytes).unwrap();
    bytes
}

/// The commands a leader proposes for `bytes`, in pieces of `piece` bytes.
fn commands(restore: u64, bytes: &[u8], piece: usize) -> (Vec<Arc<Command>>, Command) {
    let pieces: Vec<Arc<Command>> = bytes
        .chunks(piece)
        .enumerate()
        .map(|(seq, b)| {
            Arc::new(Command::StageSnapshotChunk {
                restore,
                seq: seq as u32,
                bytes: b.to_vec(),
            })
        })
        .collect();
    let last = Command::RestoreSnapshot {
        restore,
        chunks: pieces.len() as u32,
        len: bytes.len() as u64,
        sha256: Sha256::digest(bytes).into(),
    };
    (pieces, last)
}

fn canonical(store: &StateStore) -> Vec<u8> {
    store.snapshot().canonical_bytes().unwrap()
}

#[test]
fn pieces_then_the_last_entry_restore_the_file_with_every_index_at_the_entry() {
    let bytes = file(5);
    let (pieces, last) = commands(7, &bytes, 100);
    assert!(pieces.len() > 2);
    let store = StateStore::new();
    let mut staging = None;
    for p in &pieces {
        stage(&mut staging, p).unwrap();
    }
    commit(&mut staging, &store, 40, &last).unwrap();
    assert!(staging.is_none());
    let v = store.snapshot();
    let v = v.view();
    assert_eq!(v.last_applied(), 40);
    assert_eq!(v.table_index(Table::Nodes), 40);
    assert_eq!(v.table_index(Table::Jobs), 40);
    // Never bootstrapped: the tokens table stays at 0.
    assert!(!v.acl_bootstrapped());
    assert_eq!(v.nodes().count(), 5);
    assert!(
        v.nodes()
            .all(|n| n.create_index == 40 && n.modify_index == 40)
    );
    // The next write applies after it.
    let node = Node::new("node-new", "client-new");
    store.apply(41, &Command::UpsertNode { node }).unwrap();
}

#[test]
fn staging_survives_a_raft_snapshot_taken_between_pieces() {
    let bytes = file(20);
    let (pieces, last) = commands(9, &bytes, 64);
    let half = pieces.len() / 2;
    let state = StateStore::new();
    state
        .apply(
            1,
            &Command::UpsertNode {
                node: Node::new("before", "before"),
            },
        )
        .unwrap();
    let mut staging = None;
    for p in &pieces[..half] {
        stage(&mut staging, p).unwrap();
    }
    // A snapshot built now holds the staged pieces; a server installs it.
    let meta = SnapshotMeta::<NodeId, BasicNode>::default();
    let snap = snapshot_file::encode(
        &meta,
        &WriteKeys::default(),
        staging.as_ref(),
        &state.snapshot(),
        3,
    )
    .unwrap();
    assert_eq!(
        u32::from_le_bytes(snap[8..12].try_into().unwrap()),
        snapshot_file::RAFT_SNAPSHOT_STAGED_VERSION
    );
    let other = StateStore::new();
    let (_, _, _, mut installed) =
        snapshot_file::restore(Path::new("<test>"), &snap, &other).unwrap();
    assert_eq!(installed, staging);
    for p in &pieces[half..] {
        stage(&mut installed, p).unwrap();
    }
    commit(&mut installed, &other, 90, &last).unwrap();
    assert_eq!(other.snapshot().view().nodes().count(), 20);

    // Without staging the file is version 2, as before restores existed.
    let plain =
        snapshot_file::encode(&meta, &WriteKeys::default(), None, &state.snapshot(), 3).unwrap();
    assert_eq!(u32::from_le_bytes(plain[8..12].try_into().unwrap()), 2);
    let (_, _, _, none) =
        snapshot_file::restore(Path::new("<test>"), &plain, &StateStore::new()).unwrap();
    assert!(none.is_none());
}

#[test]
fn a_piece_out_of_order_abandons_the_restore_and_its_last_entry_changes_nothing() {
    let bytes = file(5);
    let (pieces, last) = commands(3, &bytes, 50);
    let store = StateStore::new();
    store
        .apply(
            1,
            &Command::UpsertNode {
                node: Node::new("kept", "kept"),
            },
        )
        .unwrap();
    let before = canonical(&store);
    let mut staging = None;
    stage(&mut staging, &pieces[0]).unwrap();
    let e = stage(&mut staging, &pieces[2]).unwrap_err();
    assert_eq!(e.kind(), "RestoreRefused");
    assert!(staging.is_none());
    for p in &pieces[1..] {
        assert!(stage(&mut staging, p).is_err());
    }
    let e = commit(&mut staging, &store, 50, &last).unwrap_err();
    assert_eq!(e.kind(), "RestoreRefused", "{e}");
    assert_eq!(canonical(&store), before);
}

#[test]
fn a_hash_or_length_mismatch_or_a_bad_file_is_refused() {
    let bytes = file(3);
    let store = StateStore::new();
    let before = canonical(&store);

    let (pieces, last) = commands(4, &bytes, 40);
    let mut staging = None;
    for p in &pieces {
        stage(&mut staging, p).unwrap();
    }
    let Command::RestoreSnapshot {
        restore,
        chunks,
        len,
        mut sha256,
    } = last
    else {
        unreachable!()
    };
    sha256[0] ^= 1;
    let wrong = Command::RestoreSnapshot {
        restore,
        chunks,
        len,
        sha256,
    };
    let e = commit(&mut staging, &store, 10, &wrong).unwrap_err();
    assert!(e.to_string().contains("SHA-256"), "{e}");
    assert!(staging.is_none());

    // A file whose hash matches but whose bytes are damaged: the checks refuse it.
    let mut bad = bytes.clone();
    let at = bad.len() - 10;
    bad[at] ^= 0xff;
    let (pieces, last) = commands(5, &bad, 40);
    for p in &pieces {
        stage(&mut staging, p).unwrap();
    }
    let e = commit(&mut staging, &store, 11, &last).unwrap_err();
    assert!(e.to_string().contains("fails its checks"), "{e}");
    assert_eq!(canonical(&store), before);
}

#[test]
fn a_new_restore_abandons_the_one_staged() {
    let a = file(2);
    let b = file(4);
    let (pa, la) = commands(1, &a, 30);
    let (pb, lb) = commands(2, &b, 30);
    let store = StateStore::new();
    let mut staging = None;
    stage(&mut staging, &pa[0]).unwrap();
    for p in &pb {
        stage(&mut staging, p).unwrap();
    }
    assert!(stage(&mut staging, &pa[1]).is_err());
    assert!(commit(&mut staging, &store, 5, &la).is_err());
    // The refused entry dropped restore 2's staging too: it must start again.
    assert!(commit(&mut staging, &store, 6, &lb).is_err());
    for p in &pb {
        stage(&mut staging, p).unwrap();
    }
    commit(&mut staging, &store, 7, &lb).unwrap();
    assert_eq!(store.snapshot().view().nodes().count(), 4);
}

#[test]
fn a_durable_store_refuses_restore_commands_and_logs_nothing() {
    use schedstate::persist::{DurableStore, Options, PersistError};
    let dir = tempfile::tempdir().unwrap();
    let (pieces, last) = commands(1, &file(1), 1 << 20);
    {
        let (db, _) = DurableStore::open(dir.path(), Options::default()).unwrap();
        let node = Node::new("kept", "kept");
        db.apply(1, &Command::UpsertNode { node }).unwrap();
        for (i, c) in [&*pieces[0], &last].into_iter().enumerate() {
            match db.apply(2 + i as u64, c) {
                Err(PersistError::State(e)) => assert_eq!(e.kind(), "ReplicatedOnly"),
                other => panic!("{other:?}"),
            }
        }
    }
    let (db, report) = DurableStore::open(dir.path(), Options::default()).unwrap();
    assert_eq!(report.last_applied, 1, "nothing but the node was logged");
    assert_eq!(db.snapshot().view().nodes().count(), 1);
}

#[test]
fn a_store_outside_a_cluster_refuses_restore_commands() {
    let store = StateStore::new();
    let (pieces, last) = commands(1, &file(1), 1 << 20);
    for c in [&*pieces[0], &last] {
        let e = store.apply(1, c).unwrap_err();
        assert_eq!(e.kind(), "ReplicatedOnly", "{e}");
    }
}
