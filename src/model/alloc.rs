//! Allocations: instances of a job's task group placed on a node.

use serde::{Deserialize, Serialize};

use super::{Id, VolumeRequests};

/// What the servers want an allocation to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesiredStatus {
    /// The allocation should run.
    #[default]
    Run,
    /// The allocation should stop.
    Stop,
    /// The allocation should be evicted from its node.
    Evict,
}

/// What the client node reports an allocation is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientStatus {
    /// Not started yet.
    #[default]
    Pending,
    /// Running.
    Running,
    /// Finished successfully.
    Complete,
    /// Finished unsuccessfully.
    Failed,
    /// The node running it was lost.
    Lost,
}

/// A request by an allocation to use a CSI volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiVolumeRequest {
    /// The volume's id, relative to the allocation's namespace.
    pub volume_id: Id,
    /// Whether the volume is requested read-only.
    pub read_only: bool,
}

/// An allocation: one placement of a job's task group on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allocation {
    /// The allocation's id (the key of the allocs table).
    pub id: Id,
    /// The namespace of the job.
    pub namespace: Id,
    /// The job the allocation belongs to.
    pub job_id: Id,
    /// The version of the job the allocation runs (0 for a job never updated, or one
    /// the jobs table does not hold).
    #[serde(default)]
    pub job_version: u64,
    /// The task group of the job the allocation runs.
    pub task_group: Id,
    /// The node the allocation is placed on.
    pub node_id: Id,
    /// What the servers want the allocation to do.
    pub desired_status: DesiredStatus,
    /// What the client reports the allocation is doing.
    pub client_status: ClientStatus,
    /// The CSI volumes the allocation uses.
    #[serde(default)]
    pub csi_volume_requests: VolumeRequests,
    /// The index of the write that created the row.
    pub create_index: u64,
    /// The index of the last write that changed the row.
    pub modify_index: u64,
}

impl Allocation {
    /// Whether the servers want the allocation gone (desired stop or evict).
    pub fn server_terminal(&self) -> bool {
        matches!(
            self.desired_status,
            DesiredStatus::Stop | DesiredStatus::Evict
        )
    }

    /// Whether the client reports the allocation finished (complete, failed or lost).
    pub fn client_terminal(&self) -> bool {
        matches!(
            self.client_status,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        )
    }

    /// Whether the allocation is server-terminal or client-terminal.
    pub fn terminal(&self) -> bool {
        self.server_terminal() || self.client_terminal()
    }
}

#[cfg(test)]
mod tests {
    use super::super::id;
    use super::*;

    fn alloc(desired: DesiredStatus, client: ClientStatus) -> Allocation {
        Allocation {
            id: id("a1"),
            namespace: id("default"),
            job_id: id("web"),
            job_version: 0,
            task_group: "frontend".into(),
            node_id: id("n1"),
            desired_status: desired,
            client_status: client,
            csi_volume_requests: vec![CsiVolumeRequest {
                volume_id: id("vol"),
                read_only: true,
            }]
            .into(),
            create_index: 3,
            modify_index: 7,
        }
    }

    #[test]
    fn terminal_predicates() {
        use ClientStatus::*;
        use DesiredStatus::*;
        for desired in [Run, Stop, Evict] {
            for client in [Pending, Running, Complete, Failed, Lost] {
                let a = alloc(desired, client);
                let server = desired != Run;
                let client_t = !matches!(client, Pending | Running);
                assert_eq!(a.server_terminal(), server, "{desired:?}/{client:?}");
                assert_eq!(a.client_terminal(), client_t, "{desired:?}/{client:?}");
                assert_eq!(a.terminal(), server || client_t, "{desired:?}/{client:?}");
            }
        }
    }

    #[test]
    fn defaults_are_run_and_pending() {
        let a = Allocation::default();
        assert_eq!(a.desired_status, DesiredStatus::Run);
        assert_eq!(a.client_status, ClientStatus::Pending);
        assert!(!a.terminal());
    }
}
