//! Volume claims (docs/rules.md §4.8): the free-claims table by access mode, the
//! schedulable rules, idempotent re-claims, release steps, gc claims and atomic
//! batches — all through claim commands on a cluster built from node fingerprints.

use std::sync::Arc;

use crate::support::volumes::*;
use crate::support::*;
use schedstate::Table;
use schedstate::model::{ClientStatus, CsiVolumeClaim, DesiredStatus, id};
use schedstate::state::{Command, StateError};

fn is_max(err: &StateError, mode: Mode) -> bool {
    matches!(err, StateError::MaxClaimsReached { mode: m, .. } if *m == mode)
}

fn is_unschedulable(err: &StateError, mode: Mode) -> bool {
    matches!(err, StateError::Unschedulable { mode: m, .. } if *m == mode)
}

/// A cluster with volume `vol` requesting every capability (so that writes are
/// schedulable while the mode is unknown).
fn cluster_any_caps() -> H {
    let mut h = cluster();
    h.register(vec![volume_caps(
        "vol",
        &[
            cap(Access::SingleNodeReaderOnly, Attach::FileSystem),
            cap(Access::SingleNodeWriter, Attach::FileSystem),
            cap(Access::MultiNodeReaderOnly, Attach::FileSystem),
            cap(Access::MultiNodeSingleWriter, Attach::FileSystem),
            cap(Access::MultiNodeMultiWriter, Attach::FileSystem),
        ],
    )]);
    h
}

// ---------------------------------------------------------------------------------
// Free claims by access mode

#[test]
fn claims_single_node_reader_only_allows_one_reader_and_no_writer() {
    let mut h = cluster_any_caps();
    let m = Access::SingleNodeReaderOnly;
    h.claim("vol", claim("a1", Mode::Read, m));
    assert_eq!(h.stored("vol").access_mode, m);
    let err = h.claim_rejected("vol", claim("a2", Mode::Read, m));
    assert!(is_max(&err, Mode::Read), "{err:?}");
    // Writes are never free; a read-only mode is not even write-schedulable, which is
    // checked first.
    let err = h.claim_rejected("vol", claim("a3", Mode::Write, m));
    assert!(is_unschedulable(&err, Mode::Write), "{err:?}");
    assert_eq!(keys(&h.stored("vol").read_allocs), ["a1"]);
}

#[test]
fn claims_single_node_writer_reads_need_no_claims_and_writes_need_no_writer() {
    let m = Access::SingleNodeWriter;
    // Writer first: no more readers nor writers.
    let mut h = cluster_any_caps();
    h.claim("vol", claim("a1", Mode::Write, m));
    let err = h.claim_rejected("vol", claim("a2", Mode::Read, m));
    assert!(is_max(&err, Mode::Read), "{err:?}");
    let err = h.claim_rejected("vol", claim("a3", Mode::Write, m));
    assert!(is_max(&err, Mode::Write), "{err:?}");

    // Reader first: no second reader, but a write claim is free (no write claims).
    let mut h = cluster_any_caps();
    h.claim("vol", claim("a1", Mode::Read, m));
    let err = h.claim_rejected("vol", claim("a2", Mode::Read, m));
    assert!(is_max(&err, Mode::Read), "{err:?}");
    h.claim("vol", claim("a3", Mode::Write, m));
    let err = h.claim_rejected("vol", claim("a4", Mode::Write, m));
    assert!(is_max(&err, Mode::Write), "{err:?}");
    let s = h.stored("vol");
    assert_eq!(keys(&s.read_allocs), ["a1"]);
    assert_eq!(keys(&s.write_allocs), ["a3"]);
}

#[test]
fn claims_multi_node_reader_only_allows_any_readers_and_no_writer() {
    let mut h = cluster_any_caps();
    let m = Access::MultiNodeReaderOnly;
    for a in ["a1", "a2", "a3", "a4"] {
        h.claim("vol", claim(a, Mode::Read, m));
    }
    let err = h.claim_rejected("vol", claim("a5", Mode::Write, m));
    assert!(is_unschedulable(&err, Mode::Write), "{err:?}");
    assert_eq!(keys(&h.stored("vol").read_allocs), ["a1", "a2", "a3", "a4"]);
}

#[test]
fn claims_multi_node_single_writer_allows_any_readers_and_one_writer() {
    let mut h = cluster_any_caps();
    let m = Access::MultiNodeSingleWriter;
    h.claim("vol", claim("a1", Mode::Read, m));
    h.claim("vol", claim("a2", Mode::Read, m));
    h.claim("vol", claim("a3", Mode::Write, m));
    let err = h.claim_rejected("vol", claim("a4", Mode::Write, m));
    assert!(is_max(&err, Mode::Write), "{err:?}");
    h.claim("vol", claim("a4", Mode::Read, m));
    let s = h.stored("vol");
    assert_eq!(keys(&s.read_allocs), ["a1", "a2", "a4"]);
    assert_eq!(keys(&s.write_allocs), ["a3"]);
}

#[test]
fn claims_multi_node_multi_writer_allows_any_readers_and_writers() {
    let mut h = cluster_any_caps();
    let m = Access::MultiNodeMultiWriter;
    h.claim("vol", claim("a1", Mode::Write, m));
    h.claim("vol", claim("a2", Mode::Read, m));
    h.claim("vol", claim("a3", Mode::Write, m));
    h.claim("vol", claim("a4", Mode::Read, m));
    h.claim("vol", claim("a5", Mode::Write, m));
    let s = h.stored("vol");
    assert_eq!(keys(&s.read_allocs), ["a2", "a4"]);
    assert_eq!(keys(&s.write_allocs), ["a1", "a3", "a5"]);
}

#[test]
fn claims_unknown_access_mode_allows_any_readers_and_writers() {
    let mut h = cluster_any_caps();
    let m = Access::Unknown;
    h.claim("vol", claim("a1", Mode::Write, m));
    h.claim("vol", claim("a2", Mode::Write, m));
    h.claim("vol", claim("a3", Mode::Read, m));
    h.claim("vol", claim("a4", Mode::Read, m));
    let s = h.stored("vol");
    assert_eq!(s.access_mode, Access::Unknown);
    assert_eq!(keys(&s.write_allocs), ["a1", "a2"]);
    assert_eq!(keys(&s.read_allocs), ["a3", "a4"]);
}

// ---------------------------------------------------------------------------------
// Schedulable rules

#[test]
fn claim_without_healthy_node_instance_is_unschedulable() {
    let mut h = cluster_with(&["vol"]);
    // Both node instances turn unhealthy (they stay recorded); the controller is fine.
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "plug-n1", false)],
        &[ctrl_fp(PLUGIN, "plug-c1", true, true)],
    ));
    h.upsert_node(client("n2", &[node_fp(PLUGIN, "plug-n2", false)], &[]));
    let v = h.vol("vol");
    assert_eq!(v.nodes_healthy, 0);
    for mode in [Mode::Read, Mode::Write] {
        let err = h.claim_rejected("vol", claim("a1", mode, Access::MultiNodeMultiWriter));
        assert!(is_unschedulable(&err, mode), "{err:?}");
    }
}

#[test]
fn claim_with_controller_required_and_no_healthy_controller_is_unschedulable() {
    let mut h = cluster_with(&["vol"]);
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "plug-n1", true)],
        &[ctrl_fp(PLUGIN, "plug-c1", false, true)],
    ));
    let v = h.vol("vol");
    assert!(v.controller_required);
    assert_eq!(v.controllers_healthy, 0);
    for mode in [Mode::Read, Mode::Write] {
        let err = h.claim_rejected("vol", claim("a1", mode, Access::MultiNodeMultiWriter));
        assert!(is_unschedulable(&err, mode), "{err:?}");
    }
    // The same plugin no longer requiring a controller: schedulable.
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "plug-n1", true)],
        &[ctrl_fp(PLUGIN, "plug-c1", false, false)],
    ));
    h.claim("vol", claim("a1", Mode::Read, Access::MultiNodeMultiWriter));
}

#[test]
fn claim_after_plugin_vanished_is_unschedulable() {
    let mut h = cluster_with(&["vol"]);
    h.delete_nodes(&["n1", "n2"]);
    let err = h.claim_rejected("vol", claim("a1", Mode::Read, Access::MultiNodeMultiWriter));
    assert!(is_unschedulable(&err, Mode::Read), "{err:?}");
}

#[test]
fn claim_write_on_a_mode_that_cannot_write_is_unschedulable() {
    // Known mode: read-only modes never take a write claim.
    for m in [Access::SingleNodeReaderOnly, Access::MultiNodeReaderOnly] {
        let mut h = cluster_any_caps();
        h.claim("vol", claim("a1", Mode::Read, m));
        let err = h.claim_rejected("vol", claim("a2", Mode::Write, m));
        assert!(is_unschedulable(&err, Mode::Write), "{m:?}: {err:?}");
    }
}

#[test]
fn claim_write_with_unknown_mode_is_decided_by_requested_capabilities() {
    let mut h = cluster();
    h.register(vec![
        volume_caps(
            "ro",
            &[
                cap(Access::SingleNodeReaderOnly, Attach::FileSystem),
                cap(Access::MultiNodeReaderOnly, Attach::BlockDevice),
            ],
        ),
        volume_caps("none", &[]),
        volume_caps(
            "rw",
            &[
                cap(Access::MultiNodeReaderOnly, Attach::FileSystem),
                cap(Access::SingleNodeWriter, Attach::FileSystem),
            ],
        ),
    ]);
    for vol in ["ro", "none"] {
        let err = h.claim_rejected(vol, claim("a1", Mode::Write, Access::Unknown));
        assert!(is_unschedulable(&err, Mode::Write), "{vol}: {err:?}");
        // Reads only need the plugin.
        h.claim(vol, claim("a1", Mode::Read, Access::Unknown));
    }
    h.claim("rw", claim("a1", Mode::Write, Access::Unknown));
    assert_eq!(keys(&h.stored("rw").write_allocs), ["a1"]);
}

#[test]
fn claim_reclaim_is_idempotent_even_when_unschedulable() {
    let mut h = cluster_with(&["vol"]);
    h.claim("vol", claim("a1", Mode::Write, Access::SingleNodeWriter));
    // The volume is now unschedulable: no healthy node instance anywhere.
    h.upsert_node(client(
        "n1",
        &[node_fp(PLUGIN, "plug-n1", false)],
        &[ctrl_fp(PLUGIN, "plug-c1", true, true)],
    ));
    h.upsert_node(client("n2", &[node_fp(PLUGIN, "plug-n2", false)], &[]));
    assert!(!h.vol("vol").schedulable);
    let before = h.stored("vol");
    let vol_index = h.table_index(Table::CsiVolumes);
    // A fresh claim fails...
    let err = h.claim_rejected("vol", claim("a3", Mode::Read, Access::SingleNodeWriter));
    assert!(is_unschedulable(&err, Mode::Read), "{err:?}");
    // ...but re-claiming what is held succeeds and changes nothing, even though the
    // SingleNodeWriter volume also has no free claim left.
    let i = h.claim("vol", claim("a1", Mode::Write, Access::SingleNodeWriter));
    assert!(Arc::ptr_eq(&before, &h.stored("vol")), "row rewritten");
    assert_eq!(h.table_index(Table::CsiVolumes), vol_index);
    assert_eq!(h.last_applied(), i);
}

#[test]
fn claim_reclaim_is_idempotent_before_alloc_and_attachment_checks() {
    let mut h = cluster_with(&["vol"]);
    h.claim("vol", claim("a1", Mode::Read, Access::MultiNodeMultiWriter));
    // The alloc is garbage collected; its re-claim with another attachment mode is
    // still the claim it holds.
    h.delete_allocs(&["a1"]);
    let before = h.stored("vol");
    let i = h.claim(
        "vol",
        claim_full(
            "a1",
            Mode::Read,
            Access::MultiNodeMultiWriter,
            Attach::BlockDevice,
            State::Taken,
        ),
    );
    assert!(Arc::ptr_eq(&before, &h.stored("vol")));
    assert!(h.table_index(Table::CsiVolumes) < i);
}

#[test]
fn claim_for_an_alloc_not_in_the_allocs_table_is_alloc_not_found() {
    let mut h = cluster_with(&["vol"]);
    let err = h.claim_rejected(
        "vol",
        claim("ghost", Mode::Read, Access::MultiNodeMultiWriter),
    );
    assert_eq!(err, StateError::AllocNotFound(id("ghost")));
    // A prefix of an existing alloc id is not that alloc.
    h.upsert_allocs(vec![running("b10", "n1")]);
    let err = h.claim_rejected(
        "vol",
        claim("b1", Mode::Write, Access::MultiNodeMultiWriter),
    );
    assert_eq!(err, StateError::AllocNotFound(id("b1")));
    h.claim(
        "vol",
        claim("b10", Mode::Write, Access::MultiNodeMultiWriter),
    );
}

#[test]
fn claim_attachment_mode_conflict() {
    let mut h = cluster_with(&["vol"]);
    h.claim(
        "vol",
        claim_full(
            "a1",
            Mode::Read,
            Access::MultiNodeMultiWriter,
            Attach::FileSystem,
            State::Taken,
        ),
    );
    let err = h.claim_rejected(
        "vol",
        claim_full(
            "a2",
            Mode::Read,
            Access::MultiNodeMultiWriter,
            Attach::BlockDevice,
            State::Taken,
        ),
    );
    assert_eq!(
        err,
        StateError::AttachmentModeConflict {
            namespace: id(NS),
            id: id("vol"),
            current: Attach::FileSystem,
            requested: Attach::BlockDevice,
        }
    );
    // The same attachment mode is fine.
    h.claim(
        "vol",
        claim_full(
            "a2",
            Mode::Write,
            Access::MultiNodeMultiWriter,
            Attach::FileSystem,
            State::Taken,
        ),
    );
}

#[test]
fn claim_attachment_mode_conflict_is_checked_before_schedulability() {
    let mut h = cluster_with(&["vol"]);
    h.claim("vol", claim("a1", Mode::Read, Access::MultiNodeMultiWriter));
    h.delete_nodes(&["n1", "n2"]);
    let err = h.claim_rejected(
        "vol",
        claim_full(
            "a2",
            Mode::Read,
            Access::MultiNodeMultiWriter,
            Attach::BlockDevice,
            State::Taken,
        ),
    );
    assert!(
        matches!(err, StateError::AttachmentModeConflict { .. }),
        "{err:?}"
    );
    // And alloc existence before that.
    let err = h.claim_rejected(
        "vol",
        claim_full(
            "ghost",
            Mode::Read,
            Access::MultiNodeMultiWriter,
            Attach::BlockDevice,
            State::Taken,
        ),
    );
    assert_eq!(err, StateError::AllocNotFound(id("ghost")));
}

#[test]
fn claim_sets_access_and_attachment_mode_when_unknown() {
    let mut h = cluster_any_caps();
    let i = h.claim(
        "vol",
        claim_full(
            "a1",
            Mode::Read,
            Access::MultiNodeSingleWriter,
            Attach::FileSystem,
            State::Taken,
        ),
    );
    let s = h.stored("vol");
    assert_eq!(s.access_mode, Access::MultiNodeSingleWriter);
    assert_eq!(s.attachment_mode, Attach::FileSystem);
    assert_eq!(keys(&s.read_allocs), ["a1"]);
    assert_eq!(
        s.read_claims.get("a1"),
        Some(&claim_full(
            "a1",
            Mode::Read,
            Access::MultiNodeSingleWriter,
            Attach::FileSystem,
            State::Taken,
        ))
    );
    assert_eq!(s.modify_index, i);
    // A later claim with another access mode does not change the mode in use.
    h.claim("vol", claim("a2", Mode::Read, Access::MultiNodeMultiWriter));
    assert_eq!(h.stored("vol").access_mode, Access::MultiNodeSingleWriter);
}

#[test]
fn claim_moves_the_alloc_from_the_other_side_and_drops_its_past_claim() {
    let mut h = cluster_with(&["vol"]);
    let m = Access::MultiNodeMultiWriter;
    h.claim("vol", claim("a1", Mode::Read, m));
    h.claim("vol", claim("a2", Mode::Read, m));
    h.claim("vol", release("a1", Mode::Read, State::Unpublishing));
    assert!(h.stored("vol").past_claims.contains_key("a1"));

    h.claim("vol", claim("a1", Mode::Write, m));
    let s = h.stored("vol");
    assert_eq!(keys(&s.read_allocs), ["a2"]);
    assert_eq!(keys(s.read_claims.keys()), ["a2"]);
    assert_eq!(keys(&s.write_allocs), ["a1"]);
    assert_eq!(keys(s.write_claims.keys()), ["a1"]);
    assert!(s.past_claims.is_empty());

    // And back.
    h.claim("vol", claim("a1", Mode::Read, m));
    let s = h.stored("vol");
    assert_eq!(keys(&s.read_allocs), ["a1", "a2"]);
    assert!(s.write_allocs.is_empty() && s.write_claims.is_empty());
}

// ---------------------------------------------------------------------------------
// Release steps

#[test]
fn claim_release_steps_record_a_past_claim_and_keep_the_claim() {
    for state in [
        State::Unpublishing,
        State::NodeDetached,
        State::ControllerDetached,
    ] {
        let mut h = cluster_with(&["vol"]);
        h.claim("vol", claim("a1", Mode::Write, Access::SingleNodeWriter));
        let taken = h.stored("vol");
        let step = release("a1", Mode::Write, state);
        let i = h.claim("vol", step.clone());
        let s = h.stored("vol");
        assert_eq!(s.past_claims.get("a1"), Some(&step), "{state:?}");
        assert_eq!(s.past_claims.len(), 1);
        assert_eq!(keys(&s.write_allocs), ["a1"], "{state:?}");
        assert_eq!(s.write_claims, taken.write_claims, "{state:?}");
        assert_eq!(s.access_mode, Access::SingleNodeWriter);
        assert_eq!(s.attachment_mode, Attach::FileSystem);
        assert_eq!(s.modify_index, i);
        assert_eq!(h.table_index(Table::CsiVolumes), i);
        // Still holding: no other writer fits.
        let err = h.claim_rejected("vol", claim("a2", Mode::Write, Access::SingleNodeWriter));
        assert!(is_max(&err, Mode::Write), "{state:?}: {err:?}");
    }
}

#[test]
fn claim_release_step_replaces_the_previous_step() {
    let mut h = cluster_with(&["vol"]);
    h.claim("vol", claim("a1", Mode::Read, Access::MultiNodeMultiWriter));
    h.claim("vol", release("a1", Mode::Read, State::Unpublishing));
    h.claim("vol", release("a1", Mode::Read, State::NodeDetached));
    let step = release("a1", Mode::Read, State::ControllerDetached);
    h.claim("vol", step.clone());
    let s = h.stored("vol");
    assert_eq!(s.past_claims.len(), 1);
    assert_eq!(s.past_claims.get("a1"), Some(&step));
}

#[test]
fn claim_ready_to_free_removes_the_alloc_everywhere_and_resets_modes_when_last() {
    let mut h = cluster_with(&["vol"]);
    let m = Access::MultiNodeSingleWriter;
    h.claim("vol", claim("a1", Mode::Write, m));
    h.claim("vol", claim("a2", Mode::Read, m));
    h.claim("vol", release("a1", Mode::Write, State::ControllerDetached));

    let i = h.claim("vol", release("a1", Mode::Write, State::ReadyToFree));
    let s = h.stored("vol");
    assert!(s.write_allocs.is_empty() && s.write_claims.is_empty());
    assert!(!s.past_claims.contains_key("a1"));
    assert!(!s.read_allocs.contains("a1") && !s.read_claims.contains_key("a1"));
    // a2 still reads: modes stay.
    assert_eq!(keys(&s.read_allocs), ["a2"]);
    assert_eq!(s.access_mode, m);
    assert_eq!(s.attachment_mode, Attach::FileSystem);
    assert_eq!(s.modify_index, i);

    h.claim("vol", release("a2", Mode::Read, State::ReadyToFree));
    let s = h.stored("vol");
    assert!(!s.in_use() && !s.has_claims(), "{s:?}");
    assert_eq!(s.access_mode, Access::Unknown);
    assert_eq!(s.attachment_mode, Attach::Unknown);

    // With the mode reset, a claim of another mode and attachment is accepted.
    h.claim(
        "vol",
        claim_full(
            "a3",
            Mode::Write,
            Access::SingleNodeWriter,
            Attach::BlockDevice,
            State::Taken,
        ),
    );
    let s = h.stored("vol");
    assert_eq!(s.access_mode, Access::SingleNodeWriter);
    assert_eq!(s.attachment_mode, Attach::BlockDevice);
}

#[test]
fn claim_ready_to_free_works_for_a_deleted_alloc() {
    let mut h = cluster_with(&["vol"]);
    h.claim("vol", claim("a1", Mode::Write, Access::SingleNodeWriter));
    h.delete_allocs(&["a1"]);
    h.claim("vol", release("a1", Mode::Write, State::ReadyToFree));
    let s = h.stored("vol");
    assert!(!s.has_claims(), "{s:?}");
    assert_eq!(s.access_mode, Access::Unknown);
}

// ---------------------------------------------------------------------------------
// GC claim

#[test]
fn claim_gc_changes_nothing_but_modify_index_and_persists_repaired_past_claims() {
    let mut h = cluster_with(&["vol"]);
    h.claim(
        "vol",
        claim("a1", Mode::Write, Access::MultiNodeMultiWriter),
    );
    h.claim("vol", claim("a2", Mode::Read, Access::MultiNodeMultiWriter));
    h.claim("vol", claim("a3", Mode::Read, Access::MultiNodeMultiWriter));
    h.delete_allocs(&["a1"]);
    h.upsert_allocs(vec![alloc(
        "a2",
        "n1",
        DesiredStatus::Run,
        ClientStatus::Failed,
    )]);
    let before = h.stored("vol");
    assert!(before.past_claims.is_empty());

    let i = h.claim("vol", gc_claim());
    let after = h.stored("vol");
    assert_eq!(after.modify_index, i);
    assert_eq!(h.table_index(Table::CsiVolumes), i);
    assert_eq!(keys(after.past_claims.keys()), ["a1", "a2"]);
    for a in ["a1", "a2"] {
        let p = &after.past_claims[&id(a)];
        assert_eq!(p.state, State::Unpublishing);
        assert_eq!(
            *p,
            CsiVolumeClaim {
                state: State::Unpublishing,
                ..before
                    .write_claims
                    .get(a)
                    .or_else(|| before.read_claims.get(a))
                    .expect("claim")
                    .clone()
            }
        );
    }
    // Everything else as before.
    let mut same = (*after).clone();
    same.past_claims.clear();
    same.modify_index = before.modify_index;
    assert_eq!(same, *before);
    // The stored row carries no denormalized fields.
    assert!(!after.schedulable && after.provider_version.is_empty());
    assert_eq!(after.provider, PROVIDER);
    assert!(after.controller_required);
}

#[test]
fn claim_gc_on_an_unclaimed_volume_only_moves_modify_index() {
    let mut h = cluster_with(&["vol"]);
    let before = h.stored("vol");
    let i = h.claim("vol", gc_claim());
    let after = h.stored("vol");
    assert_eq!(after.modify_index, i);
    let mut same = (*after).clone();
    same.modify_index = before.modify_index;
    assert_eq!(same, *before);
}

#[test]
fn claim_on_a_missing_volume_is_volume_not_found() {
    let mut h = cluster_with(&["vol"]);
    for c in [
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
        release("a1", Mode::Read, State::ReadyToFree),
        gc_claim(),
    ] {
        let err = h.claim_rejected("ghost", c);
        assert_eq!(
            err,
            StateError::VolumeNotFound {
                namespace: id(NS),
                id: id("ghost"),
            }
        );
    }
    let err = h.reject(&H::claim_cmd(
        "prod",
        "vol",
        claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
    ));
    assert!(matches!(err, StateError::VolumeNotFound { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------------
// Batches

#[test]
fn claim_batch_where_the_last_fails_applies_none() {
    let mut h = cluster_with(&["vol-1", "vol-2"]);
    let m = Access::MultiNodeMultiWriter;
    let failing_last = [
        claim_req(NS, "ghost", claim("a3", Mode::Read, m)),
        claim_req(NS, "vol-1", claim("ghost", Mode::Read, m)),
        claim_req(
            NS,
            "vol-1",
            claim_full("a3", Mode::Read, m, Attach::BlockDevice, State::Taken),
        ),
    ];
    for last in failing_last {
        let cmd = Command::ClaimCsiVolumes {
            claims: vec![
                claim_req(NS, "vol-1", claim("a1", Mode::Write, m)),
                claim_req(NS, "vol-2", claim("a2", Mode::Read, m)),
                claim_req(NS, "vol-1", release("a1", Mode::Write, State::NodeDetached)),
                last,
            ],
        };
        h.reject(&cmd);
        assert!(!h.stored("vol-1").has_claims());
        assert!(!h.stored("vol-2").has_claims());
    }
}

#[test]
fn claim_batch_sees_its_own_earlier_claims() {
    let mut h = cluster_with(&["vol-1", "vol-2"]);
    let m = Access::SingleNodeWriter;
    // Two writers on a single-node-writer volume in one batch: the second sees the
    // first and fails, taking the whole batch with it.
    h.reject(&Command::ClaimCsiVolumes {
        claims: vec![
            claim_req(NS, "vol-2", claim("a3", Mode::Read, m)),
            claim_req(NS, "vol-1", claim("a1", Mode::Write, m)),
            claim_req(NS, "vol-1", claim("a2", Mode::Write, m)),
        ],
    });
    // A batch that claims, frees and claims again succeeds as a whole.
    let i = h.apply(&Command::ClaimCsiVolumes {
        claims: vec![
            claim_req(NS, "vol-2", claim("a3", Mode::Read, m)),
            claim_req(NS, "vol-1", claim("a1", Mode::Write, m)),
            claim_req(NS, "vol-1", release("a1", Mode::Write, State::ReadyToFree)),
            claim_req(NS, "vol-1", claim("a2", Mode::Write, m)),
        ],
    });
    let s1 = h.stored("vol-1");
    assert_eq!(keys(&s1.write_allocs), ["a2"]);
    assert!(!s1.past_claims.contains_key("a1"));
    assert_eq!(s1.modify_index, i);
    assert_eq!(keys(&h.stored("vol-2").read_allocs), ["a3"]);
    assert_eq!(h.table_index(Table::CsiVolumes), i);
}

#[test]
fn claim_empty_batch_is_rejected() {
    let mut h = cluster_with(&["vol"]);
    let err = h.reject(&Command::ClaimCsiVolumes { claims: vec![] });
    assert!(matches!(err, StateError::EmptyRequest { .. }), "{err:?}");
}

#[test]
fn claim_typed_methods_match_commands() {
    let h = cluster_with(&["vol-1", "vol-2"]);
    let i = h.peek();
    h.store
        .claim_csi_volume(
            i,
            NS,
            "vol-1",
            claim("a1", Mode::Read, Access::MultiNodeMultiWriter),
        )
        .expect("claim");
    h.store
        .claim_csi_volumes(
            i + 1,
            vec![claim_req(
                NS,
                "vol-2",
                claim("a2", Mode::Write, Access::MultiNodeMultiWriter),
            )],
        )
        .expect("claims");
    assert_eq!(keys(&h.stored("vol-1").read_allocs), ["a1"]);
    assert_eq!(keys(&h.stored("vol-2").write_allocs), ["a2"]);
    assert_eq!(h.table_index(Table::CsiVolumes), i + 1);
}

#[test]
fn claim_write_with_read_only_access_mode_on_unclaimed_volume_is_refused() {
    for m in [Access::SingleNodeReaderOnly, Access::MultiNodeReaderOnly] {
        let mut h = cluster_any_caps();
        let err = h.claim_rejected("vol", claim("a1", Mode::Write, m));
        assert!(
            matches!(err, StateError::ReadOnlyAccessMode { access_mode, .. } if access_mode == m),
            "{m:?}: {err:?}"
        );
        let s = h.stored("vol");
        assert!(s.write_allocs.is_empty());
        assert_eq!(s.access_mode, Access::Unknown);
    }
}
