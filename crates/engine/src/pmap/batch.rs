//! Batched lookups: many keys looked up together, a level of the tree at a time.
//!
//! One lookup in a map far larger than the cache is a chain of dependent misses: the
//! child node, then its heads, then the key it compares, then the value. Done one
//! after the other, every lookup waits for each of its misses in turn. Here a group
//! of lookups descends together: at each level every lookup of the group picks its
//! child and asks for it ([`prefetch`]), then for the child's heads, and only then
//! searches; at the leaves each asks for the key and value it will read before any
//! reads them. The misses of a group overlap instead of adding up. The answers are
//! the ones [`PMap::get`] gives.

use super::PMap;
use super::node::Node;
use crate::prefetch::prefetch;

/// Lookups that descend together: enough to keep the memory system busy, few
/// enough that what a group asked for is still in the cache when it is read.
const GROUP: usize = 16;

impl<V> PMap<V> {
    /// The values of `keys`, in their order: `out[i]` is [`get`](Self::get) of
    /// `keys[i]` (`out` is cleared first). Any order and duplicates are fine; keys
    /// in ascending order share the upper levels' cache lines.
    pub fn get_many<'m, K: AsRef<[u8]>>(&'m self, keys: &[K], out: &mut Vec<Option<&'m V>>) {
        out.clear();
        out.reserve(keys.len());
        let Some(root) = self.root.as_deref() else {
            out.resize(keys.len(), None);
            return;
        };
        for group in keys.chunks(GROUP) {
            let mut at: [&Node<V>; GROUP] = [root; GROUP];
            let at = &mut at[..group.len()];
            // Every leaf is at the same depth: the group reaches the leaves together.
            // Per level, three passes over the group, each asking for what the next
            // one reads: the child, then its heads, then the slot it will take (the
            // grandchild's pointer or the value, and the key compared in full).
            while matches!(at[0], Node::Inner(_)) {
                for (node, key) in at.iter_mut().zip(group) {
                    if let Node::Inner(n) = *node {
                        let child: &Node<V> = &n.children[n.keys.upper_bound(key.as_ref())];
                        prefetch(child);
                        *node = child;
                    }
                }
                for node in at.iter() {
                    match node {
                        Node::Inner(n) => n.keys.prefetch_heads(),
                        Node::Leaf(l) => l.keys.prefetch_heads(),
                    }
                }
                for (node, key) in at.iter().zip(group) {
                    match node {
                        Node::Inner(n) => {
                            if let Some(i) = n.keys.prefetch_candidate(key.as_ref()) {
                                prefetch(n.children.as_ptr().wrapping_add(i));
                            }
                        }
                        Node::Leaf(l) => {
                            if let Some(i) = l.keys.prefetch_candidate(key.as_ref()) {
                                prefetch(l.vals.as_ptr().wrapping_add(i));
                            }
                        }
                    }
                }
            }
            for (node, key) in at.iter().zip(group) {
                out.push(match node {
                    Node::Leaf(l) => l.keys.search(key.as_ref()).ok().map(|i| &l.vals[i]),
                    Node::Inner(_) => None,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Every answer is `get`'s, for maps of one leaf to several levels, with
        /// queries present, absent, repeated and unsorted.
        #[test]
        fn get_many_answers_as_get(
            stored in proptest::collection::btree_set(
                proptest::collection::vec(0u8..4, 0..12), 0..3000),
            queries in proptest::collection::vec(
                proptest::collection::vec(0u8..4, 0..12), 0..200),
            take in 0usize..100,
        ) {
            let mut m = PMap::new();
            for (i, k) in stored.iter().enumerate() {
                m.insert(k, i);
            }
            let mut keys: Vec<Vec<u8>> = queries;
            keys.extend(stored.iter().step_by(7).take(take).cloned());
            let mut out = vec![Some(&0)];
            m.get_many(&keys, &mut out);
            prop_assert_eq!(out.len(), keys.len());
            for (k, got) in keys.iter().zip(&out) {
                prop_assert_eq!(*got, m.get(k));
            }
            keys.sort();
            m.get_many(&keys, &mut out);
            for (k, got) in keys.iter().zip(&out) {
                prop_assert_eq!(*got, m.get(k));
            }
        }
    }

    #[test]
    fn an_empty_map_answers_none_for_every_key() {
        let m: PMap<u32> = PMap::new();
        let mut out = Vec::new();
        m.get_many(&[b"a".as_slice(), b"b"], &mut out);
        assert_eq!(out, [None, None]);
    }
}
