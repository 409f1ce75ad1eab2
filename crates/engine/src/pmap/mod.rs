//! [`PMap`]: a persistent B+tree from byte-string keys to values, built for the
//! engine's tables and indexes (encoded [`Key`](crate::Key) bytes to rows).
//!
//! # Persistence
//!
//! A map is an `Arc` of its root node and a length: [`Clone`] is O(1), and clones
//! share every node. A mutation walks from the root to one leaf and changes only the
//! nodes on that path: a node this map owns alone (reference count 1) is changed in
//! place, a shared one is copied first, so every other clone keeps its contents. A
//! freshly built or uniquely owned map is therefore mutated without copies (bulk
//! loads), and a map whose previous version is held copies one path per write:
//! `depth` nodes, three at 100,000 keys. [`PMap::remove`] of an absent key and
//! [`PMap::get`] change nothing: a mutation first finds its place read-only, then
//! copies exactly the path to it.
//!
//! # Layout
//!
//! ```text
//! Node = Leaf  { keys: Keys, vals: Vec<V> }
//!      | Inner { keys: Keys /* separators */, children: Vec<Arc<Node>> }
//!
//! Keys = { buf: Vec<u8>, n, plen, width, run_at, groups: u32, pfx: u64 }
//!
//! buf:  keys             the full keys, concatenated in order (or, grouped, the
//!                        distinct prefixes, then the tails)
//!       heads  n × 4 B   per key: a u32 "head" of its bytes after the node prefix
//!       runs   n × 4 B   per key: a u32 head of its bytes after `run_at`
//!                        (only in nodes with runs, see below)
//!       ends   n × 4 B   per key: its end offset in the key area
//!                        (only if the keys differ in length)
//!       group  n × 1 B   per key: the number of its prefix (grouped only)
//! ```
//!
//! - `plen`: the length of a prefix every key of the node shares (the first bytes of
//!   key 0); `pfx`: its first eight bytes, inline, so most queries are checked against
//!   the prefix without touching the buffer. For sorted keys the prefix all share is
//!   the one the first and last share: O(key) to recompute on a split or merge. An
//!   insert that does not share it rebuilds the node's heads with a shorter one.
//! - A head is the 3 bytes after the prefix, zero padded, then `min(length, 4)` in
//!   the low byte, as a big-endian `u32`. Heads are monotone in key order, and exact
//!   for suffixes under 4 bytes (equal heads then mean equal keys). Inner nodes hold
//!   separators (the shortest prefix of the right node's first key above the left
//!   node's last, 2–3 bytes for random ids), so their searches read heads only.
//! - A search compares the query with the prefix, binary-searches the heads (64 heads
//!   are 256 bytes: two or three cache lines, instead of a line per probed key as with
//!   80-byte inline keys) and, unless the head is exact, compares one full key.
//! - A *run* is two or more keys with the same head: in an index map
//!   (`node id ‖ alloc id`), the entries of one node id share every byte of the head.
//!   Nodes with runs keep a second array of heads taken after `run_at` bytes, a prefix
//!   every run's keys share (its node id): a search that lands in a run
//!   binary-searches those and compares one key, instead of a key per probe.
//! - `width`: when every key of the node has the same length (the engine's keys of
//!   one map mostly do: encoded ids), there are no offsets; key `i` is at `i * width`.
//! - *Grouped* keys: in a node of one width with runs, where many keys share their
//!   first `run_at` bytes (an index's entries of one node id or one job), the key
//!   area keeps each distinct `run_at`-byte prefix once and then each key's tail,
//!   with a one-byte group number per key. A stored key is then two pieces, so keys
//!   are read as [`KeyRef`]s. In the replicated benchmark (10,000 allocations, each
//!   in three maps) this took 1.5 MiB off 19 MiB of heap. An insert next to a key of
//!   its group, or a remove that leaves its group another key, is done in place;
//!   anything else rebuilds the node.
//!
//! Per entry a leaf costs its key bytes plus 4–12 bytes of heads and offsets plus the
//! value, in arrays allocated to the node's fill: a copied node gets exactly its size
//! (a copy for an insert is built with the new entry in it), a node changed in place
//! grows by an eighth at a time (a quarter left 1.9 MiB more slack in the
//! 10,000-node workload; an eighth costs its bulk load ~5 %). A node is three
//! allocations (the `Arc`, the buffer, the values or children).
//!
//! # Shape
//!
//! At most 64 entries per leaf and 64 children per inner node, by measurement
//! (`benches/pmap.rs`: leaves of 32 were slower to read and no faster to write, 48
//! within noise of 64); every node but the root holds at least a third of that. A split halves a node; a remove that
//! leaves a node below its minimum merges it with a sibling or, if together they would
//! overflow a node, shares their entries evenly. All leaves are at the same depth,
//! O(log n): three levels at 100,000 keys.

mod batch;
mod insert_sorted;
mod iter;
mod key_ref;
mod keys;
mod node;

use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

pub use iter::Iter;
pub use key_ref::KeyRef;
use node::{INNER_MAX, INNER_MIN, Insert, LEAF_MAX, LEAF_MIN, Leaf, Node, Path};

/// A persistent ordered map from byte strings to `V`, with O(1) clones.
///
/// ```
/// use schedstate_engine::PMap;
/// let mut a = PMap::new();
/// a.insert(b"k1", 1);
/// let snapshot = a.clone();
/// a.insert(b"k2", 2);
/// assert_eq!(a.get(b"k2"), Some(&2));
/// assert_eq!(snapshot.get(b"k2"), None); // clones never change
/// assert_eq!(a.iter().map(|(k, _)| k).collect::<Vec<_>>(), [b"k1", b"k2"]);
/// ```
pub struct PMap<V> {
    root: Option<Arc<Node<V>>>,
    len: usize,
}

impl<V> Clone for PMap<V> {
    /// O(1): one reference count.
    fn clone(&self) -> Self {
        PMap {
            root: self.root.clone(),
            len: self.len,
        }
    }
}

impl<V> Default for PMap<V> {
    fn default() -> Self {
        PMap::new()
    }
}

impl<V> PMap<V> {
    /// An empty map (allocates nothing).
    pub const fn new() -> PMap<V> {
        PMap { root: None, len: 0 }
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the two maps share their root (then they are equal).
    pub fn ptr_eq(&self, other: &PMap<V>) -> bool {
        match (&self.root, &other.root) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.get_key_value(key).map(|(_, v)| v)
    }

    /// The stored key equal to `key`, and its value.
    #[inline]
    pub fn get_key_value(&self, key: &[u8]) -> Option<(KeyRef<'_>, &V)> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Inner(n) => node = &n.children[n.keys.upper_bound(key)],
                Node::Leaf(l) => {
                    let i = l.keys.search(key).ok()?;
                    return Some((l.keys.key(i), &l.vals[i]));
                }
            }
        }
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get_key_value(key).is_some()
    }

    /// Every entry in key order.
    pub fn iter(&self) -> Iter<'_, V> {
        self.range(..)
    }

    /// The entries with keys within `range`, in key order (from both ends). Takes
    /// `(Bound<&[u8]>, Bound<&[u8]>)` or `..`; the iterator borrows the map only. A
    /// range whose start lies after its end is empty (where `BTreeMap::range` panics).
    ///
    /// A bounded end is found in the leaf the range starts in when it ends there,
    /// else with a second descent; an unbounded one costs nothing until the iterator
    /// is used from the back. For a prefix scan, [`prefix`](Self::prefix).
    pub fn range<R: RangeBounds<[u8]>>(&self, range: R) -> Iter<'_, V> {
        match self.root.as_deref() {
            Some(root) => Iter::new(root, range.start_bound(), range.end_bound()),
            None => Iter::empty(),
        }
    }

    /// The entries whose key starts with `prefix`, in key order: the range from
    /// `prefix` to its successor, whose end is often found without a second search
    /// (an index's entries of one id, grouped in their leaf).
    pub fn prefix(&self, prefix: &[u8]) -> Iter<'_, V> {
        match self.root.as_deref() {
            Some(root) => Iter::with_prefix(root, prefix),
            None => Iter::empty(),
        }
    }

    /// The first entry.
    pub fn first(&self) -> Option<(KeyRef<'_>, &V)> {
        self.iter().next()
    }

    /// The last entry.
    pub fn last(&self) -> Option<(KeyRef<'_>, &V)> {
        self.iter().next_back()
    }

    /// Checks every structural invariant: all leaves at one depth, node sizes within
    /// their bounds, keys sorted and within their separators, prefixes, heads and
    /// offsets consistent, the length. O(n); for tests and fuzzing.
    pub fn check_invariants(&self) -> Result<(), String> {
        let Some(root) = self.root.as_deref() else {
            return if self.len == 0 {
                Ok(())
            } else {
                Err(format!("empty tree of length {}", self.len))
            };
        };
        let mut check = Check {
            leaf_depth: None,
            count: 0,
        };
        check.node(root, None, None, 0)?;
        if check.count != self.len {
            return Err(format!("{} entries, length {}", check.count, self.len));
        }
        Ok(())
    }
}

impl<V: Clone> PMap<V> {
    /// Inserts or replaces; returns the value `key` had.
    pub fn insert(&mut self, key: &[u8], val: V) -> Option<V> {
        let Some(root) = self.root.as_mut() else {
            self.root = Some(Arc::new(Node::Leaf(Leaf::single(key, val))));
            self.len = 1;
            return None;
        };
        let mut path = Path::new();
        let pos = node::locate(root, key, &mut path);
        match node::insert(root, path.as_slice(), pos, key, val) {
            Insert::Replaced(old) => Some(old),
            Insert::Added => {
                self.len += 1;
                None
            }
            Insert::Split(sep, right) => {
                let left = Arc::clone(root);
                *root = Arc::new(Node::Inner(node::Inner {
                    keys: keys::Keys::from_sorted(std::iter::once(sep.as_slice())),
                    children: vec![left, right],
                }));
                self.len += 1;
                None
            }
        }
    }

    /// Removes `key`; returns its value. Copies nothing if it is absent.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let root = self.root.as_mut()?;
        let mut path = Path::new();
        let i = node::locate(root, key, &mut path).ok()?;
        let val = node::remove(root, path.as_slice(), i);
        self.len -= 1;
        node::shrink_root(&mut self.root);
        Some(val)
    }

    /// A map of `entries` sorted by key, built bottom-up with full nodes (no
    /// intermediate copies). `entries` must be sorted and distinct; panics otherwise.
    pub fn from_sorted<K: AsRef<[u8]>>(entries: impl IntoIterator<Item = (K, V)>) -> PMap<V> {
        let (keys, vals): (Vec<K>, Vec<V>) = entries.into_iter().unzip();
        assert!(
            keys.windows(2).all(|w| w[0].as_ref() < w[1].as_ref()),
            "PMap::from_sorted: keys not sorted and distinct"
        );
        PMap {
            len: keys.len(),
            root: node::build(&keys, vals),
        }
    }
}

/// The checks of [`PMap::check_invariants`].
struct Check {
    leaf_depth: Option<usize>,
    count: usize,
}

impl Check {
    fn node<V>(
        &mut self,
        node: &Node<V>,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: usize,
    ) -> Result<(), String> {
        let is_root = depth == 0;
        let keys = match node {
            Node::Leaf(l) => &l.keys,
            Node::Inner(n) => &n.keys,
        };
        keys.check().map_err(|e| format!("depth {depth}: {e}"))?;
        for k in keys.iter() {
            if lo.is_some_and(|lo| k.cmp_bytes(lo).is_lt())
                || hi.is_some_and(|hi| k.cmp_bytes(hi).is_ge())
            {
                return Err(format!("depth {depth}: key {k:?} outside its separators"));
            }
        }
        match node {
            Node::Leaf(l) => {
                let n = l.keys.len();
                if l.vals.len() != n {
                    return Err(format!("leaf with {n} keys, {} values", l.vals.len()));
                }
                let min = if is_root { 1 } else { LEAF_MIN };
                if !(min..=LEAF_MAX).contains(&n) {
                    return Err(format!("depth {depth}: leaf of {n} entries"));
                }
                match self.leaf_depth {
                    Some(d) if d != depth => {
                        return Err(format!("leaves at depths {d} and {depth}"));
                    }
                    _ => self.leaf_depth = Some(depth),
                }
                self.count += n;
            }
            Node::Inner(inner) => {
                let n = inner.children.len();
                if n != inner.keys.len() + 1 {
                    return Err(format!(
                        "inner node: {n} children, {} keys",
                        inner.keys.len()
                    ));
                }
                let min = if is_root { 2 } else { INNER_MIN };
                if !(min..=INNER_MAX).contains(&n) {
                    return Err(format!("depth {depth}: inner node of {n} children"));
                }
                for (i, child) in inner.children.iter().enumerate() {
                    let clo = if i == 0 {
                        lo.map(<[u8]>::to_vec)
                    } else {
                        Some(inner.keys.key(i - 1).to_vec())
                    };
                    let chi = if i + 1 == n {
                        hi.map(<[u8]>::to_vec)
                    } else {
                        Some(inner.keys.key(i).to_vec())
                    };
                    self.node(child, clo.as_deref(), chi.as_deref(), depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

impl<V: PartialEq> PartialEq for PMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && (self.ptr_eq(other) || self.iter().eq(other.iter()))
    }
}

impl<V: Eq> Eq for PMap<V> {}

/// Keys are shown as escaped byte strings.
impl<V: fmt::Debug> fmt::Debug for PMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a, V> IntoIterator for &'a PMap<V> {
    type Item = (KeyRef<'a>, &'a V);
    type IntoIter = Iter<'a, V>;

    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

/// Later entries win over earlier ones with the same key. Sorts, then builds
/// bottom-up ([`PMap::from_sorted`]).
impl<K: AsRef<[u8]>, V: Clone> FromIterator<(K, V)> for PMap<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut entries: Vec<(K, V)> = iter.into_iter().collect();
        entries.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        // Keep the last of equal keys: each later duplicate hands its value to the
        // entry that stays.
        entries.dedup_by(|later, kept| {
            let dup = later.0.as_ref() == kept.0.as_ref();
            if dup {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            dup
        });
        PMap::from_sorted(entries)
    }
}

impl<K: AsRef<[u8]>, V: Clone> Extend<(K, V)> for PMap<V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k.as_ref(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_merge_smoke() {
        let mut m = PMap::new();
        for i in 0..10_000u32 {
            m.insert(&i.to_be_bytes(), i);
            if i % 997 == 0 {
                m.check_invariants().unwrap();
            }
        }
        m.check_invariants().unwrap();
        for i in (0..10_000u32).step_by(2) {
            assert_eq!(m.remove(&i.to_be_bytes()), Some(i));
        }
        m.check_invariants().unwrap();
        assert_eq!(m.len(), 5_000);
        let built: PMap<u32> = (0..10_000u32).map(|i| (i.to_be_bytes(), i)).collect();
        built.check_invariants().unwrap();
        assert_eq!(built.len(), 10_000);
    }
}
