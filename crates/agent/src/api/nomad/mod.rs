//! Nomad's JSON shapes of the rows this store keeps, so that Nomad's own clients
//! (its Go `api` package, python-nomad, the nomad CLI, Terraform) read a schedstate
//! agent unchanged: `ID`, `NodeID`, `SchedulingEligibility`, `CSIControllerPlugins`,
//! `ControllersHealthy`, RFC 3339 times, Nomad's enum spellings.
//!
//! Each shape converts from the store's model type and back without loss: every field
//! the store has is carried (under Nomad's name where Nomad has one, a name in Nomad's
//! style where it has none), so the agent's [`Client`](crate::Client) reads these
//! shapes and hands the CLI the model types it always had. Fields Nomad has and the
//! store does not (datacenters, resources, task states) are left out rather than
//! invented; Nomad's clients take missing fields as empty. Server-assigned fields
//! (`CreateIndex`, `ModifyIndex`) are optional in input.
//!
//! | file | shapes |
//! |---|---|
//! | `node.rs` | `Node` (with its `DrainStrategy` while draining), `NodeListStub` |
//! | `alloc.rs` | `Allocation`, `AllocListStub` |
//! | `csi.rs` | `CSIInfo` (a plugin instance / fingerprint), `CSIPlugin` (with its `ControllerJobs`/`NodeJobs`), `CSIPluginListStub` |
//! | `job.rs` | `Job`, `JobListStub`, `TaskGroup`, `Task`, `TaskCSIPluginConfig` |
//! | `job_definition.rs` | a job's registered definition: what is kept of a registration, and a read's answer (the row laid over it) |
//! | `volume.rs` | `CSIVolume`, `CSIVolumeListStub`, `CSIVolumeClaim` |
//! | `time.rs` | Go's `time.Time` as RFC 3339 (the zero time for 0) |

mod alloc;
mod csi;
mod job;
mod job_definition;
mod node;
pub(crate) mod time;
mod volume;

pub use alloc::{NomadAllocListStub, NomadAllocation};
pub use csi::{
    NomadCsiInfo, NomadCsiPlugin, NomadCsiPluginListStub, NomadJobDescription, NomadJobDescriptions,
};
pub use job::{NomadJob, NomadJobListStub, NomadTask, NomadTaskCsiPluginConfig, NomadTaskGroup};
pub use job_definition::{DefinitionTooLarge, STORE_OWNED, definition_of, job_answer};
pub use node::{NomadDrainStrategy, NomadNode, NomadNodeListStub};
pub use volume::{NomadCsiVolume, NomadCsiVolumeListStub};

/// A Nomad shape that does not make a model row (a bad enum spelling, a time that is
/// not RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ShapeError {
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

/// A field Go may send as `null` (a nil pointer, map or slice) read as its default,
/// as Nomad reads it: `#[serde(default, deserialize_with = "nullable")]`.
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
}

impl ShapeError {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> ShapeError {
        ShapeError {
            field,
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests;
