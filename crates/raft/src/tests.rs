//! openraft's own conformance suite for log storage and state machines, run against
//! this crate's on-disk log and the store's state machine.

use std::sync::Arc;

use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use parking_lot::Mutex;
use schedstate::state::StateStore;

use crate::log_store::{LogOptions, LogStore};
use crate::snapshot_cadence::SnapshotCadence;
use crate::state_machine::{Applied, StateMachine};
use crate::{NodeId, TypeConfig};

struct OnDisk;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for OnDisk {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().map_err(|e| openraft::StorageIOError::read(&e))?;
        // Tiny segments and cache: the suite's logs then span several files, and most
        // reads go back to the disk.
        let options = LogOptions {
            segment_bytes: 256,
            cache_bytes: 200,
        };
        let (log, _) =
            LogStore::open(dir.path(), options).map_err(|e| openraft::StorageIOError::read(&e))?;
        let sm = StateMachine::open(
            dir.path(),
            StateStore::new(),
            Arc::new(Mutex::new(Applied::default())),
            Arc::default(),
            Arc::default(),
            None,
            // openraft's suite asks for its snapshots itself.
            SnapshotCadence::new(u64::MAX, tokio::sync::mpsc::unbounded_channel().0),
        )
        .map_err(|e| openraft::StorageIOError::read(&e))?;
        Ok((dir, log, sm))
    }
}

type S = Suite<TypeConfig, LogStore, StateMachine, OnDisk, tempfile::TempDir>;

async fn fresh() -> (tempfile::TempDir, LogStore, StateMachine) {
    OnDisk.build().await.unwrap()
}

/// Runs each named case of the suite on a fresh store; returns the failures.
macro_rules! cases {
    ($($name:ident),* $(,)?) => {{
        let mut failed = Vec::new();
        $(
            let (_dir, log, sm) = fresh().await;
            if let Err(e) = S::$name(log, sm).await {
                failed.push((stringify!($name), e.to_string()));
            }
        )*
        failed
    }};
}

// Left out: `get_initial_state_membership_from_log_and_sm` appends index 3 after
// index 1. openraft itself never leaves a hole in a log, and this log refuses one (a
// record must follow the one before it, which is what lets a reopen prove nothing is
// missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes_on_the_disk_log_and_the_store() {
    let failed = cases!(
        last_membership_in_log_initial,
        last_membership_in_log,
        last_membership_in_log_multi_step,
        get_membership_initial,
        get_membership_from_log_and_empty_sm,
        get_membership_from_empty_log_and_sm,
        get_membership_from_log_le_sm_last_applied,
        get_membership_from_log_gt_sm_last_applied_1,
        get_membership_from_log_gt_sm_last_applied_2,
        get_initial_state_without_init,
        get_initial_state_with_state,
        get_initial_state_last_log_gt_sm,
        get_initial_state_last_log_lt_sm,
        get_initial_state_log_ids,
        get_initial_state_re_apply_committed,
        save_vote,
        get_log_entries,
        limited_get_log_entries,
        try_get_log_entry,
        initial_logs,
        get_log_state,
        get_log_id,
        last_id_in_log,
        last_applied_state,
        purge_logs_upto_0,
        purge_logs_upto_5,
        purge_logs_upto_20,
        delete_logs_since_11,
        delete_logs_since_0,
        append_to_log,
        snapshot_meta,
        apply_single,
        apply_multiple
    );
    for (name, err) in &failed {
        eprintln!("{name}: {err}");
    }
    assert!(failed.is_empty(), "{} suite cases failed", failed.len());
    S::transfer_snapshot(&OnDisk).await.unwrap();
}
