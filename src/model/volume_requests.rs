//! The CSI volumes an allocation requests, as a list one word wide.
//!
//! Every allocation row carries this list and almost every one leaves it empty; as a
//! `Vec` it took three words of each row (24 of an allocation's 112 heap bytes with
//! its `Arc`), as a [`ThinVec`] one, with its length and capacity in the heap block
//! of a non-empty list and no allocation at all for an empty one. It serializes
//! exactly as a `Vec` does (a sequence), so snapshots, log records and JSON are
//! unchanged.

use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Serialize};
use thin_vec::ThinVec;

use super::CsiVolumeRequest;

/// The CSI volumes an allocation requests, in the order given. Reads as a slice;
/// made from a `Vec` (`vec![..].into()`), an iterator (`collect`) or [`push`](Self::push).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VolumeRequests(ThinVec<CsiVolumeRequest>);

impl VolumeRequests {
    /// An empty list (no allocation).
    pub fn new() -> VolumeRequests {
        VolumeRequests(ThinVec::new())
    }

    /// Appends a request.
    pub fn push(&mut self, request: CsiVolumeRequest) {
        self.0.push(request);
    }

    /// Removes every request.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Keeps the requests `keep` says yes to.
    pub fn retain(&mut self, keep: impl FnMut(&CsiVolumeRequest) -> bool) {
        self.0.retain(keep);
    }
}

impl Deref for VolumeRequests {
    type Target = [CsiVolumeRequest];

    fn deref(&self) -> &[CsiVolumeRequest] {
        &self.0
    }
}

impl DerefMut for VolumeRequests {
    fn deref_mut(&mut self) -> &mut [CsiVolumeRequest] {
        &mut self.0
    }
}

impl From<Vec<CsiVolumeRequest>> for VolumeRequests {
    fn from(requests: Vec<CsiVolumeRequest>) -> VolumeRequests {
        VolumeRequests(ThinVec::from(requests))
    }
}

impl FromIterator<CsiVolumeRequest> for VolumeRequests {
    fn from_iter<I: IntoIterator<Item = CsiVolumeRequest>>(iter: I) -> VolumeRequests {
        VolumeRequests(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a VolumeRequests {
    type Item = &'a CsiVolumeRequest;
    type IntoIter = std::slice::Iter<'a, CsiVolumeRequest>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for VolumeRequests {
    type Item = CsiVolumeRequest;
    type IntoIter = thin_vec::IntoIter<CsiVolumeRequest>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::super::id;
    use super::*;

    fn request(volume: &str, read_only: bool) -> CsiVolumeRequest {
        CsiVolumeRequest {
            volume_id: id(volume),
            read_only,
        }
    }

    #[test]
    fn one_word_in_a_row() {
        assert_eq!(size_of::<VolumeRequests>(), size_of::<usize>());
    }

    #[test]
    fn serializes_as_a_vec_does() {
        for list in [
            vec![],
            vec![request("vol-a", false)],
            vec![request("vol-a", false), request("vol-b", true)],
        ] {
            let thin = VolumeRequests::from(list.clone());
            assert_eq!(
                postcard::to_stdvec(&thin).unwrap(),
                postcard::to_stdvec(&list).unwrap()
            );
            assert_eq!(
                serde_json::to_string(&thin).unwrap(),
                serde_json::to_string(&list).unwrap()
            );
            let bytes = postcard::to_stdvec(&list).unwrap();
            let back: VolumeRequests = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(&back[..], &list[..]);
        }
    }

    #[test]
    fn a_claimed_length_is_not_allocated_up_front() {
        // A record that claims 2^62 requests and holds none: refused as a decode
        // error, after preallocating at most thin-vec's cap (4,096 elements), not a
        // capacity overflow or an allocation of the claimed size.
        let mut bytes = postcard::to_stdvec(&(1u64 << 62)).unwrap();
        assert!(postcard::from_bytes::<VolumeRequests>(&bytes).is_err());
        bytes.extend(postcard::to_stdvec(&request("vol-a", false)).unwrap());
        assert!(postcard::from_bytes::<VolumeRequests>(&bytes).is_err());
    }

    #[test]
    fn reads_and_edits_like_a_list() {
        let mut list: VolumeRequests = [request("b", false), request("a", true)]
            .into_iter()
            .collect();
        list.push(request("c", false));
        assert_eq!(list.len(), 3);
        list.retain(|r| !r.read_only);
        let ids: Vec<&str> = list.iter().map(|r| r.volume_id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        list[0].read_only = true;
        assert!(list.first().unwrap().read_only);
        list.clear();
        assert!(list.is_empty());
    }
}
