//! Ordered iteration: two cursors (front and back), each the path from the root to
//! its leaf.

use std::iter::FusedIterator;
use std::ops::Bound;
use std::ptr;

use smallvec::SmallVec;

use super::key_ref::KeyRef;
use super::node::{Inner, Leaf, Node};
use crate::key::prefix_successor;

/// A position: the inner nodes above it with the child taken in each, the leaf, and
/// the entry in the leaf.
struct Cursor<'a, V> {
    path: SmallVec<[(&'a Inner<V>, usize); 6]>,
    leaf: &'a Leaf<V>,
    idx: usize,
}

impl<V> Clone for Cursor<'_, V> {
    fn clone(&self) -> Self {
        Cursor {
            path: self.path.clone(),
            leaf: self.leaf,
            idx: self.idx,
        }
    }
}

impl<'a, V> Cursor<'a, V> {
    #[inline]
    fn entry(&self) -> (KeyRef<'a>, &'a V) {
        (self.leaf.keys.key(self.idx), &self.leaf.vals[self.idx])
    }

    #[inline]
    fn same_place(&self, other: &Cursor<'a, V>) -> bool {
        ptr::eq(self.leaf, other.leaf) && self.idx == other.idx
    }

    /// Moves to the next entry; false past the last one.
    #[inline]
    fn advance(&mut self) -> bool {
        self.idx += 1;
        self.idx < self.leaf.vals.len() || self.next_leaf()
    }

    /// Moves to the first entry of the next leaf; false if there is none.
    fn next_leaf(&mut self) -> bool {
        loop {
            let Some((inner, i)) = self.path.last_mut() else {
                return false;
            };
            if *i + 1 < inner.children.len() {
                *i += 1;
                let child: &'a Node<V> = &inner.children[*i];
                self.descend(child, |_| 0, |_| 0);
                return true;
            }
            self.path.pop();
        }
    }

    /// Moves to the previous entry; false before the first one.
    #[inline]
    fn retreat(&mut self) -> bool {
        if self.idx > 0 {
            self.idx -= 1;
            return true;
        }
        loop {
            let Some((inner, i)) = self.path.last_mut() else {
                return false;
            };
            if *i > 0 {
                *i -= 1;
                let child: &'a Node<V> = &inner.children[*i];
                self.descend(child, |n| n.children.len() - 1, |l| l.vals.len() - 1);
                return true;
            }
            self.path.pop();
        }
    }

    /// Walks down from `node`, taking the child `pick` names in each inner node, and
    /// stops at entry `at` of the leaf.
    fn descend(
        &mut self,
        mut node: &'a Node<V>,
        pick: impl Fn(&Inner<V>) -> usize,
        at: impl Fn(&Leaf<V>) -> usize,
    ) {
        loop {
            match node {
                Node::Inner(n) => {
                    let i = pick(n);
                    self.path.push((n, i));
                    node = &n.children[i];
                }
                Node::Leaf(l) => {
                    self.leaf = l;
                    self.idx = at(l);
                    return;
                }
            }
        }
    }

    /// A cursor at the leaf `root` leads to by `pick`, at entry `at` of it (possibly
    /// one past its end; a leaf is never empty).
    fn seek(
        root: &'a Node<V>,
        pick: impl Fn(&Inner<V>) -> usize,
        at: impl Fn(&Leaf<V>) -> usize,
    ) -> Cursor<'a, V> {
        let mut path = SmallVec::new();
        let mut node = root;
        loop {
            match node {
                Node::Inner(n) => {
                    let i = pick(n);
                    path.push((n, i));
                    node = &n.children[i];
                }
                Node::Leaf(leaf) => {
                    let idx = at(leaf);
                    return Cursor { path, leaf, idx };
                }
            }
        }
    }

    /// The first entry within the lower bound `lo`.
    fn first_from(root: &'a Node<V>, lo: Bound<&[u8]>) -> Option<Cursor<'a, V>> {
        let mut c = match lo {
            Bound::Unbounded => Cursor::seek(root, |_| 0, |_| 0),
            // The child holding the keys just above `q` is the one covering `q`.
            Bound::Included(q) => {
                Cursor::seek(root, |n| n.keys.upper_bound(q), |l| l.keys.lower_bound(q))
            }
            Bound::Excluded(q) => {
                Cursor::seek(root, |n| n.keys.upper_bound(q), |l| l.keys.upper_bound(q))
            }
        };
        if c.idx < c.leaf.vals.len() || c.next_leaf() {
            Some(c)
        } else {
            None
        }
    }

    /// One past the last entry of this cursor's leaf within the upper bound `hi`, if
    /// the bound falls inside the leaf (some entry of it is beyond `hi`); `None` if
    /// every entry of the leaf is within it, so later leaves may be too.
    #[inline]
    fn end_in_leaf(&self, hi: Bound<&[u8]>) -> Option<usize> {
        let end = match hi {
            Bound::Unbounded => return None,
            Bound::Included(q) => self.leaf.keys.upper_bound(q),
            Bound::Excluded(q) => self.leaf.keys.lower_bound(q),
        };
        (end < self.leaf.vals.len()).then_some(end)
    }

    /// The last entry within the upper bound `hi`.
    fn last_until(root: &'a Node<V>, hi: Bound<&[u8]>) -> Option<Cursor<'a, V>> {
        // `at` gives one past the wanted entry.
        let mut c = match hi {
            Bound::Unbounded => Cursor::seek(root, |n| n.children.len() - 1, |l| l.vals.len()),
            Bound::Included(q) => {
                Cursor::seek(root, |n| n.keys.upper_bound(q), |l| l.keys.upper_bound(q))
            }
            // Keys equal to a separator `q` are right of it: the child covering the
            // keys just below `q` is left of it.
            Bound::Excluded(q) => {
                Cursor::seek(root, |n| n.keys.lower_bound(q), |l| l.keys.lower_bound(q))
            }
        };
        if c.idx > 0 {
            c.idx -= 1;
            Some(c)
        } else if c.retreat() {
            Some(c)
        } else {
            None
        }
    }
}

/// An iterator over the entries of a [`PMap`](super::PMap) in key order, from both
/// ends: what [`PMap::iter`](super::PMap::iter) and [`PMap::range`](super::PMap::range)
/// return. It borrows the map, not the bounds it was made with.
pub struct Iter<'a, V> {
    root: Option<&'a Node<V>>,
    /// The next entry from the front; `None` once the two ends have met.
    front: Option<Cursor<'a, V>>,
    /// The next entry from the back; `None` while it is the last entry of the map
    /// (sought only when iterated from the back).
    back: Option<Cursor<'a, V>>,
}

impl<V> Clone for Iter<'_, V> {
    fn clone(&self) -> Self {
        Iter {
            root: self.root,
            front: self.front.clone(),
            back: self.back.clone(),
        }
    }
}

impl<'a, V> Iter<'a, V> {
    pub(super) fn empty() -> Iter<'a, V> {
        Iter {
            root: None,
            front: None,
            back: None,
        }
    }

    pub(super) fn new(root: &'a Node<V>, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Iter<'a, V> {
        match Cursor::first_from(root, lo) {
            Some(front) => Iter::from_front(root, front, hi),
            None => Iter::empty(),
        }
    }

    /// The entries whose key starts with `prefix`. Where the keys of the leaf it
    /// starts in are grouped by a prefix at least as long, the end is read from the
    /// group numbers; else it is the range up to the prefix's successor.
    pub(super) fn with_prefix(root: &'a Node<V>, prefix: &[u8]) -> Iter<'a, V> {
        let Some(front) = Cursor::first_from(root, Bound::Included(prefix)) else {
            return Iter::empty();
        };
        if let Some(end) = front.leaf.keys.prefix_end_from(front.idx, prefix) {
            return Iter::ending_in_leaf(root, front, end);
        }
        let successor = prefix_successor(prefix);
        let hi = successor
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Excluded);
        Iter::from_front(root, front, hi)
    }

    /// The entries from `front` to one before `end` of its leaf (none if `end` is not
    /// after it).
    fn ending_in_leaf(root: &'a Node<V>, front: Cursor<'a, V>, end: usize) -> Iter<'a, V> {
        if end <= front.idx {
            return Iter::empty();
        }
        let mut back = front.clone();
        back.idx = end - 1;
        Iter {
            root: Some(root),
            front: Some(front),
            back: Some(back),
        }
    }

    /// The entries from `front` within the upper bound `hi`.
    fn from_front(root: &'a Node<V>, front: Cursor<'a, V>, hi: Bound<&[u8]>) -> Iter<'a, V> {
        let back = match hi {
            Bound::Unbounded => None,
            // Most bounded ranges (an index prefix: one node's allocations) end in the
            // leaf they start in: the end is found there, without a second descent.
            hi if let Some(end) = front.end_in_leaf(hi) => {
                return Iter::ending_in_leaf(root, front, end);
            }
            hi => match Cursor::last_until(root, hi) {
                Some(b) if front.entry().0 <= b.entry().0 => Some(b),
                _ => return Iter::empty(),
            },
        };
        Iter {
            root: Some(root),
            front: Some(front),
            back,
        }
    }
}

impl<'a, V> Iter<'a, V> {
    /// The next value from the front, without its key: a scan that wants the rows
    /// only reads nothing of the key area (a grouped leaf's key is two pieces, found
    /// through its group number).
    #[inline]
    pub fn next_value(&mut self) -> Option<&'a V> {
        self.step_front().map(|(leaf, i)| &leaf.vals[i])
    }

    /// The entry at the front (its leaf and position), and the front moved past it.
    #[inline]
    fn step_front(&mut self) -> Option<(&'a Leaf<V>, usize)> {
        let front = self.front.as_mut()?;
        let at = (front.leaf, front.idx);
        let met = self.back.as_ref().is_some_and(|b| front.same_place(b));
        if met || !front.advance() {
            self.front = None;
        }
        Some(at)
    }
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (KeyRef<'a>, &'a V);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.step_front()
            .map(|(leaf, i)| (leaf.keys.key(i), &leaf.vals[i]))
    }
}

impl<V> DoubleEndedIterator for Iter<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let front = self.front.as_ref()?;
        if self.back.is_none() {
            let root = self.root?;
            self.back = Cursor::last_until(root, Bound::Unbounded);
        }
        let back = self.back.as_mut()?;
        let entry = back.entry();
        if front.same_place(back) || !back.retreat() {
            self.front = None;
        }
        Some(entry)
    }
}

impl<V> FusedIterator for Iter<'_, V> {}
