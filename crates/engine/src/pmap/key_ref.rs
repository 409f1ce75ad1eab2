//! [`KeyRef`]: a key stored in a [`PMap`](super::PMap) node, read in place.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// A key as a map stores it: its bytes in at most two pieces, read without a copy.
///
/// A leaf whose keys repeat long prefixes (the entries of one node id in an index:
/// `node id ‖ alloc id`) keeps each distinct prefix once and each key's tail, so a
/// stored key is a prefix piece followed by a tail piece. It compares, hashes and
/// prints as its whole byte string; [`to_vec`](Self::to_vec) copies it out,
/// [`parts`](Self::parts) gives the pieces.
///
/// ```
/// use schedstate_engine::PMap;
/// let mut m = PMap::new();
/// m.insert(b"node-1/alloc-a", 1);
/// let (k, _) = m.first().unwrap();
/// assert_eq!(k, b"node-1/alloc-a");
/// assert!(k.starts_with(b"node-1/"));
/// assert_eq!(k.to_vec(), b"node-1/alloc-a".to_vec());
/// ```
#[derive(Clone, Copy)]
pub struct KeyRef<'a> {
    pre: &'a [u8],
    tail: &'a [u8],
}

impl<'a> KeyRef<'a> {
    /// The key `pre ‖ tail`.
    #[inline]
    pub(super) fn new(pre: &'a [u8], tail: &'a [u8]) -> KeyRef<'a> {
        KeyRef { pre, tail }
    }

    /// The key's two pieces: the key is the first followed by the second (either may
    /// be empty).
    #[inline]
    pub fn parts(&self) -> (&'a [u8], &'a [u8]) {
        (self.pre, self.tail)
    }

    /// The key in one piece, if it is stored in one (no prefix piece).
    #[inline]
    pub fn as_contiguous(&self) -> Option<&'a [u8]> {
        if self.pre.is_empty() {
            Some(self.tail)
        } else if self.tail.is_empty() {
            Some(self.pre)
        } else {
            None
        }
    }

    /// The key's length in bytes.
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.pre.len() + self.tail.len()
    }

    /// Whether the key is the empty byte string.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Byte `i` of the key (`i < len`).
    #[inline]
    pub(super) fn byte(&self, i: usize) -> u8 {
        match self.pre.get(i) {
            Some(&b) => b,
            None => self.tail[i - self.pre.len()],
        }
    }

    /// The key as one owned byte string.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.extend_into(&mut v);
        v
    }

    /// Appends the key's bytes to `out`.
    #[inline]
    pub fn extend_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.pre);
        out.extend_from_slice(self.tail);
    }

    /// Whether the key starts with `prefix`.
    #[inline]
    pub fn starts_with(&self, prefix: &[u8]) -> bool {
        let p = self.pre.len();
        if prefix.len() <= p {
            self.pre.starts_with(prefix)
        } else {
            prefix[..p] == *self.pre && self.tail.starts_with(&prefix[p..])
        }
    }

    /// How the key's bytes from `at` on compare with `rest`.
    #[inline]
    pub(super) fn cmp_from(&self, at: usize, rest: &[u8]) -> Ordering {
        let p = self.pre.len();
        if at >= p {
            return self.tail[at - p..].cmp(rest);
        }
        let head = &self.pre[at..];
        let m = head.len().min(rest.len());
        match head[..m].cmp(&rest[..m]) {
            Ordering::Equal if rest.len() < head.len() => Ordering::Greater,
            Ordering::Equal => self.tail.cmp(&rest[head.len()..]),
            o => o,
        }
    }

    /// How the key compares with the byte string `other`.
    #[inline]
    pub fn cmp_bytes(&self, other: &[u8]) -> Ordering {
        self.cmp_from(0, other)
    }

    /// The length of the longest prefix the key shares with `q`.
    #[inline]
    pub(super) fn common_prefix(&self, q: &[u8]) -> usize {
        let l = super::keys::common_prefix(self.pre, q);
        if l < self.pre.len() {
            l
        } else {
            l + super::keys::common_prefix(self.tail, &q[l..])
        }
    }
}

impl<'a> From<&'a [u8]> for KeyRef<'a> {
    #[inline]
    fn from(key: &'a [u8]) -> KeyRef<'a> {
        KeyRef {
            pre: &[],
            tail: key,
        }
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for KeyRef<'a> {
    #[inline]
    fn from(key: &'a [u8; N]) -> KeyRef<'a> {
        KeyRef {
            pre: &[],
            tail: key,
        }
    }
}

impl<'a> From<&'a Vec<u8>> for KeyRef<'a> {
    #[inline]
    fn from(key: &'a Vec<u8>) -> KeyRef<'a> {
        KeyRef {
            pre: &[],
            tail: key,
        }
    }
}

impl From<KeyRef<'_>> for Vec<u8> {
    fn from(key: KeyRef<'_>) -> Vec<u8> {
        key.to_vec()
    }
}

impl Ord for KeyRef<'_> {
    /// Slice by slice: the pieces' boundaries need not line up.
    fn cmp(&self, other: &Self) -> Ordering {
        if let Some(o) = other.as_contiguous() {
            return self.cmp_bytes(o);
        }
        let (mut a, mut a_rest) = (self.pre, self.tail);
        let (mut b, mut b_rest) = (other.pre, other.tail);
        loop {
            if a.is_empty() {
                if a_rest.is_empty() {
                    return if b.is_empty() && b_rest.is_empty() {
                        Ordering::Equal
                    } else {
                        Ordering::Less
                    };
                }
                a = std::mem::take(&mut a_rest);
                continue;
            }
            if b.is_empty() {
                if b_rest.is_empty() {
                    return Ordering::Greater;
                }
                b = std::mem::take(&mut b_rest);
                continue;
            }
            let m = a.len().min(b.len());
            match a[..m].cmp(&b[..m]) {
                Ordering::Equal => (a, b) = (&a[m..], &b[m..]),
                o => return o,
            }
        }
    }
}

impl PartialOrd for KeyRef<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for KeyRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.cmp(other).is_eq()
    }
}

impl Eq for KeyRef<'_> {}

impl PartialEq<[u8]> for KeyRef<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        self.len() == other.len() && self.cmp_bytes(other).is_eq()
    }
}

impl PartialEq<&[u8]> for KeyRef<'_> {
    fn eq(&self, other: &&[u8]) -> bool {
        *self == **other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for KeyRef<'_> {
    fn eq(&self, other: &[u8; N]) -> bool {
        *self == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for KeyRef<'_> {
    fn eq(&self, other: &&[u8; N]) -> bool {
        *self == other[..]
    }
}

impl PartialEq<Vec<u8>> for KeyRef<'_> {
    fn eq(&self, other: &Vec<u8>) -> bool {
        *self == other[..]
    }
}

impl PartialEq<KeyRef<'_>> for [u8] {
    fn eq(&self, other: &KeyRef<'_>) -> bool {
        *other == *self
    }
}

impl PartialEq<KeyRef<'_>> for &[u8] {
    fn eq(&self, other: &KeyRef<'_>) -> bool {
        *other == **self
    }
}

impl PartialEq<KeyRef<'_>> for Vec<u8> {
    fn eq(&self, other: &KeyRef<'_>) -> bool {
        *other == self[..]
    }
}

impl PartialOrd<[u8]> for KeyRef<'_> {
    fn partial_cmp(&self, other: &[u8]) -> Option<Ordering> {
        Some(self.cmp_bytes(other))
    }
}

impl PartialOrd<&[u8]> for KeyRef<'_> {
    fn partial_cmp(&self, other: &&[u8]) -> Option<Ordering> {
        Some(self.cmp_bytes(other))
    }
}

/// Hashes as the byte slice of the same bytes would.
impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.as_contiguous() {
            Some(k) => k.hash(state),
            None => self.to_vec().hash(state),
        }
    }
}

/// Shown as an escaped byte string.
impl fmt::Debug for KeyRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "b\"{}{}\"",
            self.pre.escape_ascii(),
            self.tail.escape_ascii()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_key_compares_as_its_whole_bytes() {
        let whole: &[u8] = b"node-1/alloc-b";
        let split = KeyRef::new(b"node-1/", b"alloc-b");
        assert_eq!(split, whole);
        assert_eq!(split.len(), whole.len());
        assert_eq!(split.to_vec(), whole);
        for other in [
            &b""[..],
            b"node",
            b"node-1/",
            b"node-1/alloc-a",
            b"node-1/alloc-b",
            b"node-1/alloc-bb",
            b"node-1/alloc-c",
            b"node-2",
            b"nod\xff",
        ] {
            assert_eq!(split.cmp_bytes(other), whole.cmp(other), "{other:?}");
            assert_eq!(
                split.starts_with(other),
                whole.starts_with(other),
                "{other:?}"
            );
            assert_eq!(
                split.common_prefix(other),
                super::super::keys::common_prefix(whole, other),
                "{other:?}"
            );
            let o = KeyRef::new(&other[..other.len() / 2], &other[other.len() / 2..]);
            assert_eq!(split.cmp(&o), whole.cmp(other), "{other:?}");
            assert_eq!(o.cmp(&split), other.cmp(whole), "{other:?}");
            for at in 0..=whole.len() {
                let w = KeyRef::new(&whole[..at], &whole[at..]);
                assert_eq!(w.cmp(&o), whole.cmp(other), "{other:?} split at {at}");
                assert_eq!(w == o, whole == other, "{other:?} split at {at}");
            }
            for at in 0..=whole.len().min(other.len()) {
                assert_eq!(
                    split.cmp_from(at, &other[at..]),
                    whole[at..].cmp(&other[at..]),
                    "{other:?} from {at}"
                );
            }
        }
        for (i, &b) in whole.iter().enumerate() {
            assert_eq!(split.byte(i), b);
        }
        assert_eq!(format!("{split:?}"), "b\"node-1/alloc-b\"");
    }
}
