//! Allocation list stubs: the summary of an allocation that a denormalized plugin
//! lists.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Allocation, ClientStatus, DesiredStatus, Id, VolumeRequests};

/// The summary of an allocation used in listings and denormalized rows: id,
/// namespace, job, task group, node, both statuses and both indexes.
///
/// A stub *is* the stored allocation, shared: building one counts one reference
/// instead of copying five ids (a plugin with thousands of allocations builds
/// thousands of stubs per read). It dereferences to the [`Allocation`], so the
/// summary reads as fields (`stub.id`, `stub.modify_index`), and it serializes,
/// compares and prints as the summary alone. A stub decoded from JSON holds only the
/// summary; the allocation's other fields are their defaults there.
///
/// ```
/// use std::sync::Arc;
/// use schedstate::model::{AllocListStub, Allocation};
///
/// let alloc = Arc::new(Allocation { id: "a1".into(), node_id: "n1".into(), ..Default::default() });
/// let stub = AllocListStub::new(alloc);
/// assert_eq!(&*stub.node_id, "n1");
/// let json = serde_json::to_string(&stub).unwrap();
/// assert!(!json.contains("csi_volume_requests"));
/// let back: AllocListStub = serde_json::from_str(&json).unwrap();
/// assert_eq!(back, stub);
/// ```
#[derive(Clone, Default)]
pub struct AllocListStub {
    alloc: Arc<Allocation>,
}

impl AllocListStub {
    /// The stub of a stored allocation (shares it).
    pub fn new(alloc: Arc<Allocation>) -> Self {
        AllocListStub { alloc }
    }

    /// The allocation behind the stub.
    pub fn allocation(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    fn summary(&self) -> Summary<'_> {
        let a = &*self.alloc;
        Summary {
            id: &a.id,
            namespace: &a.namespace,
            job_id: &a.job_id,
            task_group: &a.task_group,
            node_id: &a.node_id,
            desired_status: a.desired_status,
            client_status: a.client_status,
            create_index: a.create_index,
            modify_index: a.modify_index,
        }
    }
}

impl From<Arc<Allocation>> for AllocListStub {
    fn from(alloc: Arc<Allocation>) -> Self {
        AllocListStub::new(alloc)
    }
}

impl Deref for AllocListStub {
    type Target = Allocation;

    fn deref(&self) -> &Allocation {
        &self.alloc
    }
}

/// The fields a stub shows, borrowed; the serialized form of a stub.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename = "AllocListStub")]
struct Summary<'a> {
    id: &'a Id,
    namespace: &'a Id,
    job_id: &'a Id,
    task_group: &'a Id,
    node_id: &'a Id,
    desired_status: DesiredStatus,
    client_status: ClientStatus,
    create_index: u64,
    modify_index: u64,
}

/// The same fields, owned, for decoding.
#[derive(Deserialize)]
#[serde(rename = "AllocListStub")]
struct OwnedSummary {
    id: Id,
    namespace: Id,
    job_id: Id,
    task_group: Id,
    node_id: Id,
    desired_status: DesiredStatus,
    client_status: ClientStatus,
    create_index: u64,
    modify_index: u64,
}

impl PartialEq for AllocListStub {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.alloc, &other.alloc) || self.summary() == other.summary()
    }
}

impl Eq for AllocListStub {}

impl fmt::Debug for AllocListStub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.summary();
        f.debug_struct("AllocListStub")
            .field("id", s.id)
            .field("namespace", s.namespace)
            .field("job_id", s.job_id)
            .field("task_group", s.task_group)
            .field("node_id", s.node_id)
            .field("desired_status", &s.desired_status)
            .field("client_status", &s.client_status)
            .field("create_index", &s.create_index)
            .field("modify_index", &s.modify_index)
            .finish()
    }
}

impl Serialize for AllocListStub {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.summary().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AllocListStub {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = OwnedSummary::deserialize(deserializer)?;
        Ok(AllocListStub::new(Arc::new(Allocation {
            id: s.id,
            namespace: s.namespace,
            job_id: s.job_id,
            job_version: 0,
            task_group: s.task_group,
            node_id: s.node_id,
            desired_status: s.desired_status,
            client_status: s.client_status,
            csi_volume_requests: VolumeRequests::new(),
            create_index: s.create_index,
            modify_index: s.modify_index,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CsiVolumeRequest;

    fn alloc() -> Arc<Allocation> {
        Arc::new(Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            job_version: 0,
            task_group: "frontend".into(),
            node_id: "n1".into(),
            desired_status: DesiredStatus::Stop,
            client_status: ClientStatus::Running,
            csi_volume_requests: vec![CsiVolumeRequest {
                volume_id: "vol".into(),
                read_only: true,
            }]
            .into(),
            create_index: 3,
            modify_index: 7,
        })
    }

    #[test]
    fn a_stub_reads_as_its_allocation_and_shares_it() {
        let a = alloc();
        let s = AllocListStub::new(a.clone());
        assert!(Arc::ptr_eq(s.allocation(), &a));
        assert_eq!((&*s.id, &*s.node_id, &*s.job_id), ("a1", "n1", "web"));
        assert_eq!((s.create_index, s.modify_index), (3, 7));
        assert_eq!(Arc::strong_count(&a), 2);
    }

    #[test]
    fn it_serializes_as_the_summary_in_the_old_field_order() {
        let json = serde_json::to_string(&AllocListStub::new(alloc())).expect("json");
        assert_eq!(
            json,
            r#"{"id":"a1","namespace":"default","job_id":"web","task_group":"frontend","node_id":"n1","desired_status":"stop","client_status":"running","create_index":3,"modify_index":7}"#
        );
        let json: serde_json::Value = serde_json::from_str(&json).expect("value");
        assert_eq!(json["desired_status"], "stop");
    }

    #[test]
    fn equality_is_on_the_summary() {
        let a = alloc();
        let other = Arc::new(Allocation {
            csi_volume_requests: VolumeRequests::new(),
            ..(*a).clone()
        });
        assert_eq!(AllocListStub::new(a.clone()), AllocListStub::new(other));
        let moved = Arc::new(Allocation {
            modify_index: 8,
            ..(*a).clone()
        });
        assert_ne!(AllocListStub::new(a), AllocListStub::new(moved));
    }

    #[test]
    fn a_decoded_stub_round_trips() {
        let s = AllocListStub::new(alloc());
        let bytes = postcard::to_allocvec(&s).expect("encode");
        let back: AllocListStub = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back, s);
        assert!(back.csi_volume_requests.is_empty());
    }
}
