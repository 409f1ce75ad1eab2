//! Sorted batch inserts: many keys put into a map in one walk down the tree.
//!
//! Inserting keys one at a time descends from the root for each, and moves the keys
//! after each new one inside its leaf; a leaf that takes several keys of a batch is
//! searched, copied (if shared) and shifted once per key. Here the batch, sorted,
//! is split among the children of each inner node by their separators, so every
//! node on the way is visited once, and each leaf it reaches is rebuilt once with
//! its new keys merged in: one copy, sized to its new contents. Nodes that overflow
//! split into as many nodes as their entries need, three quarters full, so that the
//! next inserts into them do not split them at once. The result is the map the same
//! inserts one by one would give (the tree's shape may differ: that is not
//! observable but through [`PMap::check_invariants`], which both pass).

use std::mem;
use std::sync::Arc;
use std::vec;

use smallvec::SmallVec;

use super::PMap;
use super::key_ref::KeyRef;
use super::keys::Keys;
use super::node::{self, INNER_MAX, Inner, Insert, LEAF_MAX, Leaf, Node};

/// The fill of the leaves a batch splits a leaf into.
const LEAF_FILL: usize = LEAF_MAX * 3 / 4;
/// The fill of the inner nodes a batch splits an inner node into.
const INNER_FILL: usize = INNER_MAX * 3 / 4;

/// The right siblings a batch made of one node, each with the separator before it,
/// for the parent to take in.
type Siblings<V> = SmallVec<[(Vec<u8>, Arc<Node<V>>); 2]>;

impl<V: Clone> PMap<V> {
    /// Inserts `entries`, which must be sorted by key and distinct (panics
    /// otherwise), replacing the values of keys already present; returns how many
    /// keys were new. The map then holds what inserting them one by one with
    /// [`insert`](Self::insert) would give, at a fraction of the cost when many keys
    /// land in the same leaves: each node on the way is visited, and copied if
    /// shared, once per batch instead of once per key.
    ///
    /// ```
    /// use schedstate_engine::PMap;
    /// let mut m: PMap<u32> = (0..100u32).map(|i| (i.to_be_bytes(), i)).collect();
    /// let before = m.clone();
    /// let added = m.insert_sorted(vec![(50u32.to_be_bytes(), 0), (500u32.to_be_bytes(), 1)]);
    /// assert_eq!(added, 1);
    /// assert_eq!(m.get(&50u32.to_be_bytes()), Some(&0));
    /// assert_eq!(m.len(), 101);
    /// assert_eq!(before.get(&50u32.to_be_bytes()), Some(&50)); // clones never change
    /// ```
    pub fn insert_sorted<K: AsRef<[u8]>>(&mut self, entries: Vec<(K, V)>) -> usize {
        assert!(
            entries
                .windows(2)
                .all(|w| w[0].0.as_ref() < w[1].0.as_ref()),
            "PMap::insert_sorted: keys not sorted and distinct"
        );
        let Some(root) = self.root.as_mut() else {
            *self = PMap::from_sorted(entries);
            return self.len;
        };
        let (keys, vals): (Vec<K>, Vec<V>) = entries.into_iter().unzip();
        let mut vals = vals.into_iter();
        let mut added = 0;
        let siblings = into_node(root, &keys, &mut vals, &mut added);
        if !siblings.is_empty() {
            grow_root(root, siblings);
        }
        self.len += added;
        added
    }
}

/// Puts `keys` (sorted, distinct, all within `node`'s separators) with the next
/// values of `vals` into the subtree at `node`; returns the siblings it split off.
fn into_node<V: Clone, K: AsRef<[u8]>>(
    node: &mut Arc<Node<V>>,
    keys: &[K],
    vals: &mut vec::IntoIter<V>,
    added: &mut usize,
) -> Siblings<V> {
    if matches!(**node, Node::Leaf(_)) {
        into_leaf(node, keys, vals, added)
    } else {
        into_inner(node, keys, vals, added)
    }
}

fn into_leaf<V: Clone, K: AsRef<[u8]>>(
    node: &mut Arc<Node<V>>,
    keys: &[K],
    vals: &mut vec::IntoIter<V>,
    added: &mut usize,
) -> Siblings<V> {
    let mut siblings = Siblings::new();
    if let [key] = keys {
        // One key: the single insert, in place if this tree owns the leaf.
        let key = key.as_ref();
        let pos = node::leaf(node).keys.search(key);
        let val = vals.next().expect("PMap: a value per key");
        match node::insert(node, &[], pos, key, val) {
            Insert::Replaced(_) => {}
            Insert::Added => *added += 1,
            Insert::Split(sep, right) => {
                *added += 1;
                siblings.push((sep, right));
            }
        }
        return siblings;
    }
    // The old values are moved out of a leaf this tree owns alone, else cloned.
    let mut owned = node::unique_leaf(node).map(|l| mem::take(&mut l.vals).into_iter());
    let old = node::leaf(node);
    let n_old = old.keys.len();
    let mut old_val = |i: usize| match &mut owned {
        Some(vals) => vals.next().expect("PMap: a value per key"),
        None => old.vals[i].clone(),
    };
    // The new keys' places among the old, and the merged values.
    let mut inserts: SmallVec<[(usize, &[u8]); 16]> = SmallVec::with_capacity(keys.len());
    let mut merged_vals = Vec::with_capacity(n_old + keys.len());
    let mut i = 0;
    for key in keys {
        let key = key.as_ref();
        let pos = old.keys.search(key);
        let (Ok(at) | Err(at)) = pos;
        while i < at {
            merged_vals.push(old_val(i));
            i += 1;
        }
        merged_vals.push(vals.next().expect("PMap: a value per key"));
        if pos.is_ok() {
            drop(old_val(i));
            i += 1;
        } else {
            inserts.push((at, key));
        }
    }
    while i < n_old {
        merged_vals.push(old_val(i));
        i += 1;
    }
    *added += inserts.len();
    let n = merged_vals.len();
    // One leaf: the old key array with the new keys spliced in, where they fit it.
    if n <= LEAF_MAX {
        let spliced = if inserts.is_empty() {
            Some(old.keys.clone())
        } else {
            old.keys.with_inserted_many(&inserts)
        };
        if let Some(keys) = spliced {
            *node = Arc::new(Node::Leaf(Leaf {
                keys,
                vals: merged_vals,
            }));
            return siblings;
        }
    }
    // Else the merged keys, built into as many leaves as they fill.
    let mut merged: SmallVec<[KeyRef<'_>; 128]> = SmallVec::with_capacity(n);
    let mut new_keys = inserts.iter().peekable();
    for i in 0..=n_old {
        while let Some(&(_, key)) = new_keys.next_if(|(at, _)| *at == i) {
            merged.push(KeyRef::from(key));
        }
        if i < n_old {
            merged.push(old.keys.key(i));
        }
    }
    // Every leaf is built before the node is replaced: the merged keys borrow it.
    let mut merged_vals = merged_vals.into_iter();
    let mut seps: SmallVec<[Vec<u8>; 2]> = SmallVec::new();
    let mut leaves: SmallVec<[Leaf<V>; 2]> = SmallVec::new();
    let mut start = 0;
    for size in fill_sizes(n, LEAF_MAX, LEAF_FILL) {
        let ks = &merged[start..start + size];
        if start > 0 {
            seps.push(separator(merged[start - 1], ks[0]));
        }
        leaves.push(Leaf {
            keys: Keys::from_sorted(ks.iter().copied()),
            vals: merged_vals.by_ref().take(size).collect(),
        });
        start += size;
    }
    drop(merged);
    let mut leaves = leaves.into_iter().map(|l| Arc::new(Node::Leaf(l)));
    *node = leaves.next().expect("PMap: a leaf");
    siblings.extend(seps.into_iter().zip(leaves));
    siblings
}

fn into_inner<V: Clone, K: AsRef<[u8]>>(
    node: &mut Arc<Node<V>>,
    keys: &[K],
    vals: &mut vec::IntoIter<V>,
    added: &mut usize,
) -> Siblings<V> {
    let Inner {
        keys: seps,
        children,
    } = node::inner_mut(node);
    // Per child that split: its place and its new siblings.
    let mut grown: SmallVec<[(usize, Siblings<V>); 4]> = SmallVec::new();
    let mut j = 0;
    while j < keys.len() {
        let c = seps.upper_bound(keys[j].as_ref());
        // The keys below the child's right separator are the child's.
        let end = if c < seps.len() {
            let right = seps.key(c);
            j + keys[j..].partition_point(|k| right.cmp_bytes(k.as_ref()).is_gt())
        } else {
            keys.len()
        };
        let split = into_node(&mut children[c], &keys[j..end], vals, added);
        if !split.is_empty() {
            grown.push((c, split));
        }
        j = end;
    }
    if grown.is_empty() {
        return Siblings::new();
    }
    // The children with the new siblings after the ones that split them off, and the
    // separators between them.
    let count = children.len() + grown.iter().map(|(_, s)| s.len()).sum::<usize>();
    let mut all_children = Vec::with_capacity(count);
    let mut all_seps: SmallVec<[KeyRef<'_>; 128]> = SmallVec::with_capacity(count - 1);
    let mut grown_at = grown.iter().peekable();
    for (i, child) in mem::take(children).into_iter().enumerate() {
        if i > 0 {
            all_seps.push(seps.key(i - 1));
        }
        all_children.push(child);
        if let Some((_, split)) = grown_at.next_if(|(c, _)| *c == i) {
            for (sep, sibling) in split {
                all_seps.push(KeyRef::from(sep.as_slice()));
                all_children.push(Arc::clone(sibling));
            }
        }
    }
    let sizes: SmallVec<[usize; 4]> = fill_sizes(count, INNER_MAX, INNER_FILL).collect();
    let mut ups: SmallVec<[Vec<u8>; 2]> = SmallVec::new();
    let mut groups: SmallVec<[Keys; 2]> = SmallVec::new();
    let mut start = 0;
    for &size in &sizes {
        if start > 0 {
            ups.push(all_seps[start - 1].to_vec());
        }
        groups.push(Keys::from_sorted(
            all_seps[start..start + size - 1].iter().copied(),
        ));
        start += size;
    }
    drop(all_seps);
    drop(grown);
    let mut all_children = all_children.into_iter();
    let mut groups = groups.into_iter();
    *seps = groups.next().expect("PMap: a group");
    children.extend(all_children.by_ref().take(sizes[0]));
    ups.into_iter()
        .zip(groups)
        .zip(&sizes[1..])
        .map(|((up, keys), &size)| {
            let children = all_children.by_ref().take(size).collect();
            (up, Arc::new(Node::Inner(Inner { keys, children })))
        })
        .collect()
}

/// After a batch split the root: new levels above it until one node holds all.
fn grow_root<V>(root: &mut Arc<Node<V>>, siblings: Siblings<V>) {
    let mut nodes = Vec::with_capacity(siblings.len() + 1);
    let mut seps = Vec::with_capacity(siblings.len());
    nodes.push(Arc::clone(root));
    for (sep, node) in siblings {
        seps.push(sep);
        nodes.push(node);
    }
    while nodes.len() > 1 {
        let mut level = Vec::new();
        let mut up = Vec::new();
        let mut children = nodes.into_iter();
        let mut seps_in = seps.into_iter();
        let count = children.len();
        for (g, size) in fill_sizes(count, INNER_MAX, INNER_FILL).enumerate() {
            if g > 0 {
                up.push(seps_in.next().expect("PMap: a separator per boundary"));
            }
            let group: Vec<Vec<u8>> = seps_in.by_ref().take(size - 1).collect();
            level.push(Arc::new(Node::Inner(Inner {
                keys: Keys::from_sorted(group.iter().map(Vec::as_slice)),
                children: children.by_ref().take(size).collect(),
            })));
        }
        nodes = level;
        seps = up;
    }
    *root = nodes.pop().expect("PMap: a root");
}

/// The shortest key between `left` and `right` (see `keys::separator`).
fn separator(left: KeyRef<'_>, right: KeyRef<'_>) -> Vec<u8> {
    let mut sep = right.to_vec();
    sep.truncate(left.common_prefix(&sep) + 1);
    sep
}

/// The sizes of the nodes `n` entries fill: one node if they fit, else as many as
/// `fill` entries each need, evened out (each at least `fill / 2`, above a node's
/// minimum).
fn fill_sizes(n: usize, max: usize, fill: usize) -> impl Iterator<Item = usize> {
    let groups = if n <= max { 1 } else { n.div_ceil(fill) };
    let (base, extra) = (n / groups, n % groups);
    (0..groups).map(move |g| base + usize::from(g < extra))
}
