//! Nodes and the algorithms that change them: copy-on-write insert and remove with
//! splits, merges and redistribution, and the bottom-up bulk build.

use std::mem;
use std::sync::Arc;

use super::keys::{Keys, grow, separator};

/// Most entries of a leaf.
pub(super) const LEAF_MAX: usize = 64;
/// A leaf other than the root holds at least this many entries.
pub(super) const LEAF_MIN: usize = LEAF_MAX / 3;
/// Most children of an inner node.
pub(super) const INNER_MAX: usize = 64;
/// An inner node other than the root has at least this many children.
pub(super) const INNER_MIN: usize = INNER_MAX / 3;
/// Deepest tree a search path can record: with at least `INNER_MIN` children per
/// inner node, far more levels than any addressable number of entries needs.
pub(super) const MAX_DEPTH: usize = 24;

const _: () = assert!(LEAF_MIN >= 1 && 2 * LEAF_MIN <= LEAF_MAX);
const _: () = assert!(INNER_MIN >= 2 && 2 * INNER_MIN <= INNER_MAX);
const _: () = assert!(INNER_MAX < u16::MAX as usize);

/// A node: all leaves are at the same depth.
#[derive(Clone)]
pub(super) enum Node<V> {
    Leaf(Leaf<V>),
    Inner(Inner<V>),
}

/// Entries: `vals[i]` belongs to key `i` of `keys`.
#[derive(Clone)]
pub(super) struct Leaf<V> {
    pub(super) keys: Keys,
    pub(super) vals: Vec<V>,
}

/// `children.len() == keys.len() + 1`. Every key of the subtree `children[i]` is
/// `>= keys[i - 1]` (for `i > 0`) and `< keys[i]` (for `i < keys.len()`). A key here
/// (a separator) need not be a stored key: it is the shortest byte string between the
/// last key on its left and the first on its right when it was chosen.
#[derive(Clone)]
pub(super) struct Inner<V> {
    pub(super) keys: Keys,
    pub(super) children: Vec<Arc<Node<V>>>,
}

/// The child taken at each inner node on the way from the root to a leaf.
pub(super) struct Path {
    idx: [u16; MAX_DEPTH],
    depth: usize,
}

impl Path {
    pub(super) fn new() -> Path {
        Path {
            idx: [0; MAX_DEPTH],
            depth: 0,
        }
    }

    fn push(&mut self, i: usize) {
        assert!(self.depth < MAX_DEPTH, "PMap: tree deeper than {MAX_DEPTH}");
        // i < INNER_MAX + 1 < u16::MAX.
        self.idx[self.depth] = i as u16;
        self.depth += 1;
    }

    pub(super) fn as_slice(&self) -> &[u16] {
        &self.idx[..self.depth]
    }
}

impl<V> Node<V> {
    /// Entries of a leaf, children of an inner node.
    fn size(&self) -> usize {
        match self {
            Node::Leaf(l) => l.keys.len(),
            Node::Inner(n) => n.children.len(),
        }
    }

    fn underfull(&self) -> bool {
        match self {
            Node::Leaf(l) => l.keys.len() < LEAF_MIN,
            Node::Inner(n) => n.children.len() < INNER_MIN,
        }
    }
}

/// Finds `key` from `node` down, recording the path: `Ok(i)` if it is entry `i` of the
/// leaf the path ends at, `Err(i)` if it would be inserted there at `i`.
pub(super) fn locate<V>(mut node: &Node<V>, key: &[u8], path: &mut Path) -> Result<usize, usize> {
    loop {
        match node {
            Node::Inner(n) => {
                let i = n.keys.upper_bound(key);
                path.push(i);
                node = &n.children[i];
            }
            Node::Leaf(l) => return l.keys.search(key),
        }
    }
}

/// The leaf `node` is, owned by this tree alone: a shared one is copied first.
pub(super) fn leaf_mut<V: Clone>(node: &mut Arc<Node<V>>) -> &mut Leaf<V> {
    match Arc::make_mut(node) {
        Node::Leaf(l) => l,
        Node::Inner(_) => unreachable!("PMap: the path ends above the leaves"),
    }
}

/// The leaf `node` is, if this tree owns it alone; `None` if it is shared.
pub(super) fn unique_leaf<V>(node: &mut Arc<Node<V>>) -> Option<&mut Leaf<V>> {
    match Arc::get_mut(node)? {
        Node::Leaf(l) => Some(l),
        Node::Inner(_) => unreachable!("PMap: the path ends above the leaves"),
    }
}

/// The leaf `node` is (shared or not).
pub(super) fn leaf<V>(node: &Node<V>) -> &Leaf<V> {
    match node {
        Node::Leaf(l) => l,
        Node::Inner(_) => unreachable!("PMap: the path ends above the leaves"),
    }
}

/// The inner node `node` is, owned by this tree alone (a shared one is copied: its
/// keys and one reference count per child).
pub(super) fn inner_mut<V: Clone>(node: &mut Arc<Node<V>>) -> &mut Inner<V> {
    match Arc::make_mut(node) {
        Node::Inner(n) => n,
        Node::Leaf(_) => unreachable!("PMap: the path goes below the leaves"),
    }
}

/// Moves the node out if this tree owns it alone, else copies it.
fn take<V: Clone>(node: Arc<Node<V>>) -> Node<V> {
    Arc::try_unwrap(node).unwrap_or_else(|shared| (*shared).clone())
}

impl<V> Leaf<V> {
    pub(super) fn single(key: &[u8], val: V) -> Leaf<V> {
        Leaf {
            keys: Keys::from_sorted(std::iter::once(key)),
            vals: vec![val],
        }
    }

    /// Splits off the upper half; returns the separator and the new right leaf.
    fn split(&mut self) -> (Vec<u8>, Leaf<V>) {
        let mid = self.keys.len() / 2;
        let (left, mut sep) = (self.keys.key(mid - 1), self.keys.key(mid).to_vec());
        sep.truncate(left.common_prefix(&sep) + 1);
        let keys = self.keys.split_off(mid);
        let vals = self.vals.split_off(mid);
        self.vals.shrink_to_fit();
        (sep, Leaf { keys, vals })
    }

    fn concat(a: Leaf<V>, b: Leaf<V>) -> Leaf<V> {
        let keys = Keys::from_sorted(a.keys.iter().chain(b.keys.iter()));
        let mut vals = a.vals;
        vals.reserve_exact(b.vals.len());
        vals.extend(b.vals);
        Leaf { keys, vals }
    }
}

impl<V> Inner<V> {
    /// Splits off the upper half of the children; returns the separator that moves
    /// up and the new right node.
    fn split(&mut self) -> (Vec<u8>, Inner<V>) {
        let n = self.children.len();
        let mid = n / 2;
        debug_assert_eq!(n, self.keys.len() + 1);
        let up = self.keys.key(mid - 1).to_vec();
        let keys = Keys::from_sorted(self.keys.iter().skip(mid));
        self.keys = Keys::from_sorted(self.keys.iter().take(mid - 1));
        let children = self.children.split_off(mid);
        self.children.shrink_to_fit();
        (up, Inner { keys, children })
    }

    fn concat(a: Inner<V>, sep: &[u8], b: Inner<V>) -> Inner<V> {
        let keys = Keys::from_sorted(
            a.keys
                .iter()
                .chain(std::iter::once(sep.into()))
                .chain(b.keys.iter()),
        );
        let mut children = a.children;
        children.reserve_exact(b.children.len());
        children.extend(b.children);
        Inner { keys, children }
    }

    /// Child `ci` fell below its minimum: merges it with a sibling, or shares their
    /// entries evenly if together they would not fit one node.
    fn rebalance(&mut self, ci: usize)
    where
        V: Clone,
    {
        let l = if ci > 0 { ci - 1 } else { ci };
        let right = self.children.remove(l + 1);
        let left = self.children.remove(l);
        let sep = self.keys.key(l).to_vec();
        self.keys.remove(l);
        let (first, second) = match (take(left), take(right)) {
            (Node::Leaf(a), Node::Leaf(b)) => {
                let mut merged = Leaf::concat(a, b);
                if merged.keys.len() <= LEAF_MAX {
                    (Node::Leaf(merged), None)
                } else {
                    let (s, r) = merged.split();
                    (Node::Leaf(merged), Some((s, Node::Leaf(r))))
                }
            }
            (Node::Inner(a), Node::Inner(b)) => {
                let mut merged = Inner::concat(a, &sep, b);
                if merged.children.len() <= INNER_MAX {
                    (Node::Inner(merged), None)
                } else {
                    let (s, r) = merged.split();
                    (Node::Inner(merged), Some((s, Node::Inner(r))))
                }
            }
            _ => unreachable!("PMap: siblings at different depths"),
        };
        self.children.insert(l, Arc::new(first));
        if let Some((s, r)) = second {
            self.keys.insert(l, &s);
            self.children.insert(l + 1, Arc::new(r));
        }
    }
}

/// What an insert did below a node.
pub(super) enum Insert<V> {
    /// The key was there: its old value.
    Replaced(V),
    /// A new entry; the node kept its place.
    Added,
    /// A new entry; the node split: the separator and the new right sibling, for the
    /// parent to take in.
    Split(Vec<u8>, Arc<Node<V>>),
}

/// Inserts at the place [`locate`] found (`path`, then `pos` in the leaf), copying
/// the shared nodes on the way.
pub(super) fn insert<V: Clone>(
    node: &mut Arc<Node<V>>,
    path: &[u16],
    pos: Result<usize, usize>,
    key: &[u8],
    val: V,
) -> Insert<V> {
    let Some((&ci, rest)) = path.split_first() else {
        return match pos {
            Ok(i) => {
                let leaf = leaf_mut(node);
                Insert::Replaced(mem::replace(&mut leaf.vals[i], val))
            }
            Err(i) => {
                let leaf = match unique_leaf(node) {
                    Some(leaf) => {
                        leaf.keys.insert(i, key);
                        grow(&mut leaf.vals, 1);
                        leaf.vals.insert(i, val);
                        leaf
                    }
                    None => {
                        // A copy built with the new entry in it, to its size.
                        let old = leaf(node);
                        let mut vals = Vec::with_capacity(old.vals.len() + 1);
                        vals.extend_from_slice(&old.vals[..i]);
                        vals.push(val);
                        vals.extend_from_slice(&old.vals[i..]);
                        let keys = old.keys.with_inserted(i, key);
                        *node = Arc::new(Node::Leaf(Leaf { keys, vals }));
                        unique_leaf(node).expect("PMap: a node just made")
                    }
                };
                if leaf.keys.len() <= LEAF_MAX {
                    Insert::Added
                } else {
                    let (sep, right) = leaf.split();
                    Insert::Split(sep, Arc::new(Node::Leaf(right)))
                }
            }
        };
    };
    let ci = usize::from(ci);
    let inner = inner_mut(node);
    match insert(&mut inner.children[ci], rest, pos, key, val) {
        Insert::Split(sep, right) => {
            inner.keys.insert(ci, &sep);
            inner.children.insert(ci + 1, right);
            if inner.children.len() <= INNER_MAX {
                Insert::Added
            } else {
                let (up, r) = inner.split();
                Insert::Split(up, Arc::new(Node::Inner(r)))
            }
        }
        other => other,
    }
}

/// Removes entry `i` of the leaf at `path`, copying the shared nodes on the way and
/// rebalancing underfull ones on the way back up. The caller shrinks the root.
pub(super) fn remove<V: Clone>(node: &mut Arc<Node<V>>, path: &[u16], i: usize) -> V {
    let Some((&ci, rest)) = path.split_first() else {
        if let Some(leaf) = unique_leaf(node) {
            leaf.keys.remove(i);
            return leaf.vals.remove(i);
        }
        // A copy built without the entry, to its size.
        let old = leaf(node);
        let val = old.vals[i].clone();
        let mut vals = Vec::with_capacity(old.vals.len() - 1);
        vals.extend_from_slice(&old.vals[..i]);
        vals.extend_from_slice(&old.vals[i + 1..]);
        let keys = old.keys.with_removed(i);
        *node = Arc::new(Node::Leaf(Leaf { keys, vals }));
        return val;
    };
    let ci = usize::from(ci);
    let inner = inner_mut(node);
    let v = remove(&mut inner.children[ci], rest, i);
    if inner.children[ci].underfull() {
        inner.rebalance(ci);
    }
    v
}

/// After a remove: a root inner node left with one child gives way to it; an empty
/// root leaf leaves the tree empty.
pub(super) fn shrink_root<V>(root: &mut Option<Arc<Node<V>>>) {
    let next = match root.as_deref() {
        Some(Node::Inner(n)) if n.children.len() == 1 => Some(Arc::clone(&n.children[0])),
        Some(n) if n.size() == 0 => None,
        _ => return,
    };
    *root = next;
}

/// The root of a tree holding `keys` (sorted, distinct) and their `vals`: leaves and
/// inner nodes filled to the maximum, the last ones of each level evened out so that
/// none is below its minimum.
pub(super) fn build<K: AsRef<[u8]>, V>(keys: &[K], vals: Vec<V>) -> Option<Arc<Node<V>>> {
    debug_assert_eq!(keys.len(), vals.len());
    let n = keys.len();
    if n == 0 {
        return None;
    }
    let mut vals = vals.into_iter();
    let mut nodes = Vec::with_capacity(n.div_ceil(LEAF_MAX));
    // seps[i] lies between nodes[i] and nodes[i + 1].
    let mut seps: Vec<Vec<u8>> = Vec::with_capacity(nodes.capacity());
    let mut start = 0;
    for size in even_sizes(n, LEAF_MAX) {
        let ks = &keys[start..start + size];
        if start > 0 {
            seps.push(separator(keys[start - 1].as_ref(), ks[0].as_ref()).to_vec());
        }
        let leaf = Leaf {
            keys: Keys::from_sorted(ks.iter().map(AsRef::as_ref)),
            vals: vals.by_ref().take(size).collect(),
        };
        nodes.push(Arc::new(Node::Leaf(leaf)));
        start += size;
    }
    while nodes.len() > 1 {
        let count = nodes.len();
        let mut level = Vec::with_capacity(count.div_ceil(INNER_MAX));
        let mut up = Vec::with_capacity(level.capacity());
        let mut children = nodes.into_iter();
        let mut seps_in = seps.into_iter();
        for (g, size) in even_sizes(count, INNER_MAX).enumerate() {
            if g > 0 {
                up.push(seps_in.next().expect("PMap: a separator per boundary"));
            }
            let group: Vec<Vec<u8>> = seps_in.by_ref().take(size - 1).collect();
            let inner = Inner {
                keys: Keys::from_sorted(group.iter().map(Vec::as_slice)),
                children: children.by_ref().take(size).collect(),
            };
            level.push(Arc::new(Node::Inner(inner)));
        }
        nodes = level;
        seps = up;
    }
    nodes.pop()
}

/// Sizes of `ceil(n / max)` groups covering `n` items, differing by one at most.
fn even_sizes(n: usize, max: usize) -> impl Iterator<Item = usize> {
    let groups = n.div_ceil(max);
    let (base, extra) = (n / groups, n % groups);
    (0..groups).map(move |g| base + usize::from(g < extra))
}
