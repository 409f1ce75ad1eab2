//! The domain model: the rows this store keeps and the values they are made of.
//!
//! Everything here is plain data. The types carry no behaviour beyond small,
//! pure helpers (status predicates, derived counts, the CSI claim rules); all
//! state transitions live in the state layer. Once a value is stored it is
//! immutable: rows are shared between snapshots and readers behind an
//! [`Arc`](std::sync::Arc), and a change is made by building a new value and
//! storing that in its place.

mod acl;
mod alloc;
mod csi_info;
mod fingerprints;
mod job;
mod node;
mod plugin;
mod stub;
mod volume;

pub use acl::{AclScope, AclToken};
pub use alloc::{Allocation, ClientStatus, CsiVolumeRequest, DesiredStatus};
pub use csi_info::{CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiTopology};
pub use fingerprints::Fingerprints;
pub use job::{CsiPluginType, Expected, Job, JobStatus, JobType, Task, TaskCsiPlugin, TaskGroup};
pub use node::{Node, NodeStatus};
pub use plugin::{CsiPlugin, PluginInstances, PluginJob};
pub use stub::AllocListStub;
pub use volume::{
    CsiMountOptions, CsiVolume, CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeCapability,
    CsiVolumeClaim, CsiVolumeClaimMode, CsiVolumeClaimState,
};

/// An identifier (node, alloc, plugin, volume, namespace or job id).
///
/// Cheap to clone; serializes as a plain string.
pub type Id = std::sync::Arc<str>;

/// Builds an [`Id`] from a string slice.
pub fn id(s: &str) -> Id {
    Id::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_builds_equal_shared_strings() {
        let a = id("node-1");
        let b = a.clone();
        assert_eq!(&*a, "node-1");
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert_eq!(a, id("node-1"));
    }
}
