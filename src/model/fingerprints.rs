//! A node's fingerprints of one kind (controller or node), by plugin id.

use std::fmt;
use std::ops::Index;
use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{CsiInfo, Id};

/// A small map from plugin id to fingerprint, in plugin id order.
///
/// A node reports a handful of plugins, and every update of the node stores a new copy
/// of its row, which an older snapshot may keep alive. A sorted vector holds two entries
/// in one 48-byte allocation where a `BTreeMap` takes a ~290-byte node, so copies are
/// cheaper to make and to retain. The API is the part of `BTreeMap`'s this crate needs;
/// it serializes exactly as a `BTreeMap<Id, Arc<CsiInfo>>` does.
///
/// ```
/// use std::sync::Arc;
/// use schedstate::model::{CsiInfo, Fingerprints};
///
/// let mut f = Fingerprints::new();
/// f.insert("ebs".into(), Arc::new(CsiInfo::default()));
/// f.insert("nfs".into(), Arc::new(CsiInfo::default()));
/// assert!(f.contains_key("ebs"));
/// assert_eq!(f.keys().map(|k| &**k).collect::<Vec<_>>(), ["ebs", "nfs"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Fingerprints {
    /// Sorted by plugin id, ids unique.
    entries: Vec<(Id, Arc<CsiInfo>)>,
}

impl Fingerprints {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    fn find(&self, plugin_id: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| (**k).cmp(plugin_id))
    }

    /// Number of fingerprints.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The fingerprint of `plugin_id`, if any.
    pub fn get(&self, plugin_id: &str) -> Option<&Arc<CsiInfo>> {
        self.find(plugin_id).ok().map(|i| &self.entries[i].1)
    }

    /// Whether there is a fingerprint for `plugin_id`.
    pub fn contains_key(&self, plugin_id: &str) -> bool {
        self.find(plugin_id).is_ok()
    }

    /// Files `info` under `plugin_id`; returns the fingerprint it replaced.
    pub fn insert(&mut self, plugin_id: Id, info: Arc<CsiInfo>) -> Option<Arc<CsiInfo>> {
        match self.find(&plugin_id) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, info)),
            Err(i) => {
                self.entries.insert(i, (plugin_id, info));
                None
            }
        }
    }

    /// Removes the fingerprint of `plugin_id`.
    pub fn remove(&mut self, plugin_id: &str) -> Option<Arc<CsiInfo>> {
        let i = self.find(plugin_id).ok()?;
        Some(self.entries.remove(i).1)
    }

    /// Removes and returns the entry with the smallest plugin id.
    pub fn pop_first(&mut self) -> Option<(Id, Arc<CsiInfo>)> {
        if self.entries.is_empty() {
            None
        } else {
            Some(self.entries.remove(0))
        }
    }

    /// Removes every fingerprint.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Keeps only the entries `keep` returns true for.
    pub fn retain(&mut self, mut keep: impl FnMut(&Id, &mut Arc<CsiInfo>) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    /// The entries in plugin id order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            inner: self.entries.iter(),
        }
    }

    /// The plugin ids in order.
    pub fn keys(&self) -> impl Iterator<Item = &Id> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The fingerprints in plugin id order.
    pub fn values(&self) -> impl Iterator<Item = &Arc<CsiInfo>> {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The fingerprints in plugin id order, to change in place (not their keys).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Arc<CsiInfo>> {
        self.entries.iter_mut().map(|(_, v)| v)
    }
}

/// Iterator over `(plugin id, fingerprint)` in plugin id order.
#[derive(Clone)]
pub struct Iter<'a> {
    inner: std::slice::Iter<'a, (Id, Arc<CsiInfo>)>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a Id, &'a Arc<CsiInfo>);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|(k, v)| (k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Fingerprints {
    type Item = (&'a Id, &'a Arc<CsiInfo>);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Fingerprints {
    type Item = (Id, Arc<CsiInfo>);
    type IntoIter = std::vec::IntoIter<(Id, Arc<CsiInfo>)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl FromIterator<(Id, Arc<CsiInfo>)> for Fingerprints {
    /// Later entries replace earlier ones with the same plugin id (as a map's inserts).
    fn from_iter<I: IntoIterator<Item = (Id, Arc<CsiInfo>)>>(iter: I) -> Self {
        let mut f = Fingerprints::new();
        for (k, v) in iter {
            f.insert(k, v);
        }
        f
    }
}

impl Index<&str> for Fingerprints {
    type Output = Arc<CsiInfo>;

    /// # Panics
    /// If there is no fingerprint for the plugin id (as `BTreeMap`'s index).
    fn index(&self, plugin_id: &str) -> &Arc<CsiInfo> {
        match self.get(plugin_id) {
            Some(v) => v,
            None => panic!("no fingerprint for plugin {plugin_id:?}"),
        }
    }
}

impl fmt::Debug for Fingerprints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Fingerprints {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Fingerprints {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor;

        impl<'de> Visitor<'de> for MapVisitor {
            type Value = Fingerprints;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from plugin id to fingerprint")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Fingerprints, A::Error> {
                // The size hint comes from the input: never trust it for an allocation.
                let mut f = Fingerprints {
                    entries: Vec::with_capacity(access.size_hint().unwrap_or(0).min(16)),
                };
                while let Some((k, v)) = access.next_entry::<Id, Arc<CsiInfo>>()? {
                    // Filed under its own plugin id (the store refuses anything else):
                    // one heap copy of the id for the key and the fingerprint, not two.
                    let k = if k == v.plugin_id {
                        v.plugin_id.clone()
                    } else {
                        k
                    };
                    f.insert(k, v);
                }
                Ok(f)
            }
        }

        deserializer.deserialize_map(MapVisitor)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn info(alloc: &str) -> Arc<CsiInfo> {
        Arc::new(CsiInfo {
            alloc_id: alloc.into(),
            ..CsiInfo::default()
        })
    }

    #[test]
    fn behaves_like_a_btree_map() {
        let mut f = Fingerprints::new();
        let mut m = BTreeMap::new();
        let ops = [("b", "1"), ("a", "2"), ("c", "3"), ("a", "4"), ("b", "5")];
        for (k, a) in ops {
            assert_eq!(
                f.insert(k.into(), info(a)),
                m.insert(Id::from(k), info(a)),
                "{k}"
            );
        }
        assert_eq!(f.iter().collect::<Vec<_>>(), m.iter().collect::<Vec<_>>());
        assert_eq!(f.remove("a"), m.remove("a"));
        assert_eq!(f.remove("zz"), None);
        assert_eq!(f.len(), m.len());
        assert_eq!(f.get("c"), m.get("c"));
        assert_eq!(f["b"].alloc_id.as_str(), "5");
        assert_eq!(f.pop_first(), m.pop_first());
        f.retain(|k, _| &**k != "c");
        assert!(f.is_empty());
    }

    #[test]
    fn serializes_exactly_as_a_btree_map() {
        let f: Fingerprints = [("nfs", "1"), ("ebs", "2")]
            .into_iter()
            .map(|(k, a)| (Id::from(k), info(a)))
            .collect();
        let m: BTreeMap<Id, Arc<CsiInfo>> = f.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let bytes = postcard::to_allocvec(&f).expect("encode");
        assert_eq!(bytes, postcard::to_allocvec(&m).expect("encode"));
        let back: Fingerprints = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back, f);
    }

    #[test]
    fn a_decoded_key_shares_its_fingerprints_plugin_id() {
        let filed = |key: &str, plugin: &str| {
            let info = Arc::new(CsiInfo {
                plugin_id: plugin.into(),
                ..CsiInfo::default()
            });
            (Id::from(key), info)
        };
        let f: Fingerprints = [filed("ebs", "ebs"), filed("nfs", "other")]
            .into_iter()
            .collect();
        let bytes = postcard::to_allocvec(&f).expect("encode");
        let back: Fingerprints = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(back, f);
        let (ebs_key, ebs) = back.iter().next().expect("ebs");
        assert!(Id::ptr_eq(ebs_key, &ebs.plugin_id));
        // A key that is not its fingerprint's plugin id stays as it was sent.
        let (nfs_key, nfs) = back.iter().nth(1).expect("nfs");
        assert_eq!((&**nfs_key, &*nfs.plugin_id), ("nfs", "other"));
    }

    #[test]
    fn decoding_keeps_the_last_of_duplicate_keys() {
        // A map encoded by hand with the same key twice: the later entry wins, as when
        // decoding into a BTreeMap.
        let pairs: Vec<(Id, Arc<CsiInfo>)> = vec![("a".into(), info("1")), ("a".into(), info("2"))];
        let mut bytes = vec![2u8];
        for pair in &pairs {
            bytes.extend(postcard::to_allocvec(pair).expect("encode"));
        }
        let f: Fingerprints = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(f.len(), 1);
        assert_eq!(f["a"].alloc_id.as_str(), "2");
    }
}
