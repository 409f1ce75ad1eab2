//! Watched key ranges, found by a key that falls inside them: an interval tree.
//!
//! A commit asks, for each key it changed, "which watched ranges contain this key?".
//! Checking every range made a commit cost grow with the number of waiters. Here the
//! ranges are the nodes of a treap (a binary search tree balanced by random priorities)
//! ordered by lower bound, each node knowing the largest upper bound below it. A search
//! skips every subtree whose largest upper bound lies below the key, and every right
//! subtree once the lower bounds pass the key: O(log n) per range found, expected.
//!
//! Nodes live in one vector and point at each other by position, so the tree needs no
//! `unsafe` and no allocation per node beyond its bounds.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

use super::watch::Signal;

/// "No node".
const NIL: usize = usize::MAX;

struct Node {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    id: u64,
    /// `None` for a free slot.
    signal: Option<Arc<Signal>>,
    priority: u64,
    left: usize,
    right: usize,
    /// The node of this subtree with the largest upper bound.
    max: usize,
}

/// Watched ranges of one map, each with the watch set that registered it.
pub(crate) struct Intervals {
    nodes: Vec<Node>,
    free: Vec<usize>,
    root: usize,
    len: usize,
    rng: fastrand::Rng,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            len: 0,
            // Fixed seed: priorities only balance the tree, and a fixed sequence keeps
            // runs reproducible.
            rng: fastrand::Rng::with_seed(0x5eed_1a7e),
        }
    }
}

/// Lower bounds are half-lines `[x, ∞)` / `(x, ∞)`; ordered so that a greater bound
/// admits a subset of the keys a smaller one admits.
fn cmp_lo(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Less,
        (_, Bound::Unbounded) => Ordering::Greater,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Less),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Greater),
    }
}

/// Upper bounds are half-lines `(-∞, x]` / `(-∞, x)`; ordered so that a greater bound
/// admits a superset of the keys a smaller one admits.
fn cmp_hi(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Greater,
        (_, Bound::Unbounded) => Ordering::Less,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x.cmp(y)
        }
        (Bound::Included(x), Bound::Excluded(y)) => x.cmp(y).then(Ordering::Greater),
        (Bound::Excluded(x), Bound::Included(y)) => x.cmp(y).then(Ordering::Less),
    }
}

fn admits_lo(lo: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match lo {
        Bound::Included(l) => key >= l.as_slice(),
        Bound::Excluded(l) => key > l.as_slice(),
        Bound::Unbounded => true,
    }
}

fn admits_hi(hi: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match hi {
        Bound::Included(h) => key <= h.as_slice(),
        Bound::Excluded(h) => key < h.as_slice(),
        Bound::Unbounded => true,
    }
}

impl Intervals {
    /// Number of registered ranges.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Registers range `(lo, hi)` for set `id`.
    pub(crate) fn insert(
        &mut self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        id: u64,
        signal: Arc<Signal>,
    ) {
        let node = Node {
            lo,
            hi,
            id,
            signal: Some(signal),
            priority: self.rng.u64(..),
            left: NIL,
            right: NIL,
            max: NIL,
        };
        let n = match self.free.pop() {
            Some(n) => {
                self.nodes[n] = node;
                n
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.nodes[n].max = n;
        self.root = self.insert_at(self.root, n);
        self.len += 1;
    }

    /// Removes one registration of range `(lo, hi)` by set `id`; returns whether it
    /// was there.
    pub(crate) fn remove(&mut self, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>, id: u64) -> bool {
        let (root, removed) = self.remove_at(self.root, lo, hi, id);
        self.root = root;
        let Some(n) = removed else {
            return false;
        };
        let slot = &mut self.nodes[n];
        slot.signal = None;
        slot.lo = Bound::Unbounded;
        slot.hi = Bound::Unbounded;
        self.free.push(n);
        self.len -= 1;
        if self.len == 0 {
            // Give the memory back once nobody watches a range here any more.
            self.nodes = Vec::new();
            self.free = Vec::new();
        }
        true
    }

    /// Calls `f` with the signal of every range that contains `key`.
    pub(crate) fn for_each_containing(&self, key: &[u8], f: &mut impl FnMut(&Arc<Signal>)) {
        self.visit(self.root, key, f);
    }

    /// Calls `f` with the signal of every range.
    pub(crate) fn for_each(&self, f: &mut impl FnMut(&Arc<Signal>)) {
        for node in &self.nodes {
            if let Some(s) = &node.signal {
                f(s);
            }
        }
    }

    fn visit(&self, t: usize, key: &[u8], f: &mut impl FnMut(&Arc<Signal>)) {
        if t == NIL {
            return;
        }
        let node = &self.nodes[t];
        if !admits_hi(&self.nodes[node.max].hi, key) {
            return; // no range below here reaches up to the key
        }
        self.visit(node.left, key, f);
        if !admits_lo(&node.lo, key) {
            return; // this range and every one to its right start above the key
        }
        if admits_hi(&node.hi, key)
            && let Some(s) = &node.signal
        {
            f(s);
        }
        self.visit(node.right, key, f);
    }

    /// Tree order: lower bound, then upper bound, then set id. Equal only for the same
    /// range of the same set, whose registrations are interchangeable.
    fn cmp_key(&self, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>, id: u64, t: usize) -> Ordering {
        let node = &self.nodes[t];
        cmp_lo(lo, &node.lo)
            .then_with(|| cmp_hi(hi, &node.hi))
            .then(id.cmp(&node.id))
    }

    fn update(&mut self, t: usize) {
        let (left, right) = (self.nodes[t].left, self.nodes[t].right);
        let mut max = t;
        for child in [left, right] {
            if child != NIL {
                let m = self.nodes[child].max;
                if cmp_hi(&self.nodes[m].hi, &self.nodes[max].hi) == Ordering::Greater {
                    max = m;
                }
            }
        }
        self.nodes[t].max = max;
    }

    fn rotate_right(&mut self, t: usize) -> usize {
        let l = self.nodes[t].left;
        self.nodes[t].left = self.nodes[l].right;
        self.nodes[l].right = t;
        self.update(t);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, t: usize) -> usize {
        let r = self.nodes[t].right;
        self.nodes[t].right = self.nodes[r].left;
        self.nodes[r].left = t;
        self.update(t);
        self.update(r);
        r
    }

    fn insert_at(&mut self, t: usize, n: usize) -> usize {
        if t == NIL {
            return n;
        }
        let goes_left = {
            let node = &self.nodes[n];
            self.cmp_key(&node.lo, &node.hi, node.id, t) == Ordering::Less
        };
        let mut t = t;
        if goes_left {
            let l = self.insert_at(self.nodes[t].left, n);
            self.nodes[t].left = l;
            if self.nodes[l].priority > self.nodes[t].priority {
                t = self.rotate_right(t);
            }
        } else {
            let r = self.insert_at(self.nodes[t].right, n);
            self.nodes[t].right = r;
            if self.nodes[r].priority > self.nodes[t].priority {
                t = self.rotate_left(t);
            }
        }
        self.update(t);
        t
    }

    /// Removes one node equal to `(lo, hi, id)` from subtree `t`; returns the new
    /// subtree and the removed node.
    fn remove_at(
        &mut self,
        t: usize,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        id: u64,
    ) -> (usize, Option<usize>) {
        if t == NIL {
            return (NIL, None);
        }
        match self.cmp_key(lo, hi, id, t) {
            Ordering::Less => {
                let (l, removed) = self.remove_at(self.nodes[t].left, lo, hi, id);
                self.nodes[t].left = l;
                self.update(t);
                (t, removed)
            }
            Ordering::Greater => {
                let (r, removed) = self.remove_at(self.nodes[t].right, lo, hi, id);
                self.nodes[t].right = r;
                self.update(t);
                (t, removed)
            }
            Ordering::Equal => {
                let merged = self.merge(self.nodes[t].left, self.nodes[t].right);
                (merged, Some(t))
            }
        }
    }

    /// Joins two subtrees whose keys are all ordered `a` before `b`.
    fn merge(&mut self, a: usize, b: usize) -> usize {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a].priority > self.nodes[b].priority {
            let r = self.merge(self.nodes[a].right, b);
            self.nodes[a].right = r;
            self.update(a);
            a
        } else {
            let l = self.merge(a, self.nodes[b].left);
            self.nodes[b].left = l;
            self.update(b);
            b
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

    fn bound(kind: u8, x: u8) -> Bound<Vec<u8>> {
        match kind % 3 {
            0 => Bound::Included(vec![x]),
            1 => Bound::Excluded(vec![x]),
            _ => Bound::Unbounded,
        }
    }

    fn contains((lo, hi): &Range, key: &[u8]) -> bool {
        admits_lo(lo, key) && admits_hi(hi, key)
    }

    /// `for_each_containing` finds exactly the ranges a scan over all of them finds,
    /// under random inserts (duplicates included) and removals.
    #[test]
    fn containing_matches_a_scan_under_inserts_and_removals() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut tree = Intervals::default();
        // One signal per set, as in the registry: a set's duplicate registrations are
        // interchangeable.
        let sets: Vec<Arc<Signal>> = (0..40).map(|_| Arc::new(Signal::default())).collect();
        let mut live: Vec<(Range, u64)> = Vec::new();
        for step in 0..3000u64 {
            if live.is_empty() || rng.u8(..) < 150 {
                let range = (
                    bound(rng.u8(..), rng.u8(0..20)),
                    bound(rng.u8(..), rng.u8(0..20)),
                );
                // Few ids, so that one set registers the same range more than once.
                let id = rng.u64(0..40);
                let signal = Arc::clone(&sets[id as usize]);
                tree.insert(range.0.clone(), range.1.clone(), id, signal);
                live.push((range, id));
            } else {
                let (range, id) = live.swap_remove(rng.usize(..live.len()));
                assert!(tree.remove(&range.0, &range.1, id), "step {step}");
            }
            assert_eq!(tree.len(), live.len());
            let key = [rng.u8(0..20)];
            let mut found: Vec<*const Signal> = Vec::new();
            tree.for_each_containing(&key, &mut |s| found.push(Arc::as_ptr(s)));
            found.sort_unstable();
            let mut want: Vec<*const Signal> = live
                .iter()
                .filter(|(r, _)| contains(r, &key))
                .map(|(_, id)| Arc::as_ptr(&sets[*id as usize]))
                .collect();
            want.sort_unstable();
            assert_eq!(found, want, "step {step} key {key:?}");
        }
        let not_there = (Bound::Included(vec![200]), Bound::Unbounded);
        assert!(!tree.remove(&not_there.0, &not_there.1, 1));
    }

    #[test]
    fn signals_are_the_registered_ones() {
        let mut tree = Intervals::default();
        let a = Arc::new(Signal::default());
        let b = Arc::new(Signal::default());
        tree.insert(bound(0, 1), bound(1, 5), 1, Arc::clone(&a));
        tree.insert(bound(1, 5), bound(2, 0), 2, Arc::clone(&b));
        tree.for_each_containing(&[3], &mut |s| s.fire());
        assert!(a.is_fired() && !b.is_fired());
        tree.for_each_containing(&[5], &mut |s| s.fire());
        assert!(!b.is_fired(), "(5, ..) excludes 5");
        tree.for_each_containing(&[5, 0], &mut |s| s.fire());
        assert!(b.is_fired());
        assert!(tree.remove(&bound(0, 1), &bound(1, 5), 1));
        assert!(tree.remove(&bound(1, 5), &bound(2, 0), 2));
        assert_eq!(tree.len(), 0);
    }
}
