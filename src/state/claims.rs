//! Volume claims: taking a read or write claim, and the steps of releasing one
//! (docs/rules.md §4.8).

use std::sync::Arc;

use crate::model::{
    CsiVolume, CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeClaimMode,
    CsiVolumeClaimState,
};

use super::command::CsiVolumeClaimRequest;
use super::error::{Result, StateError};
use super::writer::Writer;

/// Applies a batch of claims in order; any failure rejects the whole batch.
pub(crate) fn claim_volumes(w: &mut Writer, claims: &[CsiVolumeClaimRequest]) -> Result<()> {
    // An empty batch is an input rule (`input.rs`).
    for req in claims {
        claim(w, req)?;
    }
    Ok(())
}

fn claim(w: &mut Writer, req: &CsiVolumeClaimRequest) -> Result<()> {
    let CsiVolumeClaimRequest {
        namespace,
        volume_id,
        claim,
    } = req;
    let stored =
        w.view()
            .csi_volume(namespace, volume_id)
            .ok_or_else(|| StateError::VolumeNotFound {
                namespace: namespace.clone(),
                id: volume_id.clone(),
            })?;
    // Decisions are taken on the denormalized copy: plugin health and repaired past
    // claims included.
    let mut v = w.view().denormalize_csi_volume(&stored);
    let alloc_id = &claim.alloc_id;
    if alloc_id.is_empty() {
        // A garbage-collection claim: only persists the repaired past claims, and
        // moves the modify index even when there were none to repair.
        return store(w, v, &stored, true);
    }
    let taking = claim.state == CsiVolumeClaimState::Taken
        && matches!(
            claim.mode,
            CsiVolumeClaimMode::Read | CsiVolumeClaimMode::Write
        );
    if !taking {
        if claim.state == CsiVolumeClaimState::ReadyToFree {
            v.read_allocs.remove(alloc_id);
            v.write_allocs.remove(alloc_id);
            v.read_claims.remove(alloc_id);
            v.write_claims.remove(alloc_id);
            v.past_claims.remove(alloc_id);
            if !v.in_use() {
                v.access_mode = CsiVolumeAccessMode::Unknown;
                v.attachment_mode = CsiVolumeAttachmentMode::Unknown;
            }
        } else {
            // A release in progress: the alloc keeps its claim until it is freed.
            v.past_claims.insert(alloc_id.clone(), claim.clone());
        }
        return store(w, v, &stored, false);
    }

    let write = claim.mode == CsiVolumeClaimMode::Write;
    let holding = if write {
        v.write_allocs.contains(alloc_id)
    } else {
        v.read_allocs.contains(alloc_id)
    };
    if holding {
        return Ok(());
    }
    if w.view().alloc(alloc_id).is_none() {
        return Err(StateError::AllocNotFound(alloc_id.clone()));
    }
    if v.attachment_mode != CsiVolumeAttachmentMode::Unknown
        && claim.attachment_mode != CsiVolumeAttachmentMode::Unknown
        && v.attachment_mode != claim.attachment_mode
    {
        return Err(StateError::AttachmentModeConflict {
            namespace: namespace.clone(),
            id: volume_id.clone(),
            current: v.attachment_mode,
            requested: claim.attachment_mode,
        });
    }
    // The mode the volume is in after this claim: the claim's own while the volume's is
    // unknown. Claims already held (taken while it was unknown) must fit that mode too,
    // or setting it would leave the volume breaking its own mode.
    let mode = match v.access_mode {
        CsiVolumeAccessMode::Unknown => claim.access_mode,
        known => known,
    };
    let (readers, writers) = (v.read_allocs.len(), v.write_allocs.len());
    let held_fit = mode == v.access_mode || holds_within(mode, readers, writers);
    let (schedulable, free) = if write {
        (v.write_schedulable(), mode.write_claim_free(writers))
    } else {
        (v.read_schedulable(), mode.read_claim_free(readers, writers))
    };
    let free = free && held_fit;
    if !schedulable {
        return Err(StateError::Unschedulable {
            namespace: namespace.clone(),
            id: volume_id.clone(),
            mode: claim.mode,
        });
    }
    if write
        && v.access_mode == CsiVolumeAccessMode::Unknown
        && claim.access_mode != CsiVolumeAccessMode::Unknown
        && !claim.access_mode.can_write()
    {
        // Taken as is, it would set a read-only mode with a writer holding it.
        return Err(StateError::ReadOnlyAccessMode {
            namespace: namespace.clone(),
            id: volume_id.clone(),
            access_mode: claim.access_mode,
        });
    }
    if !free {
        return Err(StateError::MaxClaimsReached {
            namespace: namespace.clone(),
            id: volume_id.clone(),
            mode: claim.mode,
        });
    }
    let (mine, mine_claims, other, other_claims) = if write {
        (
            &mut v.write_allocs,
            &mut v.write_claims,
            &mut v.read_allocs,
            &mut v.read_claims,
        )
    } else {
        (
            &mut v.read_allocs,
            &mut v.read_claims,
            &mut v.write_allocs,
            &mut v.write_claims,
        )
    };
    mine.insert(alloc_id.clone());
    mine_claims.insert(alloc_id.clone(), claim.clone());
    other.remove(alloc_id);
    other_claims.remove(alloc_id);
    v.past_claims.remove(alloc_id);
    if v.access_mode == CsiVolumeAccessMode::Unknown {
        v.access_mode = claim.access_mode;
    }
    if v.attachment_mode == CsiVolumeAttachmentMode::Unknown {
        v.attachment_mode = claim.attachment_mode;
    }
    store(w, v, &stored, false)
}

/// Whether a volume in `mode` may hold `readers` read and `writers` write claims.
fn holds_within(mode: CsiVolumeAccessMode, readers: usize, writers: usize) -> bool {
    match mode {
        CsiVolumeAccessMode::SingleNodeReaderOnly => readers <= 1 && writers == 0,
        CsiVolumeAccessMode::SingleNodeWriter => readers <= 1 && writers <= 1,
        CsiVolumeAccessMode::MultiNodeReaderOnly => writers == 0,
        CsiVolumeAccessMode::MultiNodeSingleWriter => writers <= 1,
        CsiVolumeAccessMode::MultiNodeMultiWriter | CsiVolumeAccessMode::Unknown => true,
    }
}

/// Writes a volume decided on its denormalized copy back as a stored row: identity
/// provider kept, controller requirement as last known, read-only fields cleared. A
/// release step that changes nothing (repeated, or for an alloc without a claim) is
/// not written unless `always`.
fn store(w: &mut Writer, mut v: CsiVolume, stored: &CsiVolume, always: bool) -> Result<()> {
    v.provider.clone_from(&stored.provider);
    v.clear_denormalized();
    if !always && v == *stored {
        return Ok(());
    }
    v.modify_index = w.index;
    w.txn.insert(w.t.volumes, Arc::new(v))?;
    Ok(())
}
