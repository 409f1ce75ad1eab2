//! The sorted key array of one node, in one buffer: the keys (whole, or as shared
//! prefixes and tails), then fixed-width heads for the search, run heads, key
//! offsets and group numbers (layout in the module docs of [`super`]).

use smallvec::SmallVec;

use super::key_ref::KeyRef;

// `Keys::with_inserted_many`: several keys spliced in at once.
#[path = "keys_splice.rs"]
mod splice;
// Where a key is or belongs.
#[path = "keys_search.rs"]
mod search;
// One key added or removed, in place or by a copy.
#[path = "keys_edit.rs"]
mod edit;
// The layout checks.
#[path = "keys_check.rs"]
mod check;

/// The sorted, distinct keys of one node.
///
/// `buf` holds, for `n` keys, one region after the other:
///
/// ```text
/// keys                the full keys, concatenated in order (the key area)
/// heads  n × H bytes  per key, its head after the node prefix (native endian)
/// runs   n × H bytes  per key, its head after `run_at` bytes; only if some keys
///                     share a head ("runs")
/// ends   n × 4 bytes  per key, where it ends in the key area (it starts where the
///                     previous one ends); only if the keys differ in length
/// ```
///
/// The key area comes first so that an insert in place moves the keys after the new
/// one and the small per-key regions, not every key.
///
/// *Grouped* keys (`groups > 0`): where the keys have one width and runs, and many
/// share their first `run_at` bytes (an index's entries of one node id), the key
/// area keeps each distinct `run_at`-byte prefix once, in key order, then each
/// key's tail, and a last region numbers each key's prefix:
///
/// ```text
/// prefixes  groups × run_at   the distinct prefixes (the first is key 0's)
/// tails     n × (width − run_at)
/// heads, runs                 as above (no ends: the keys have one width)
/// group     n × 1 byte        per key, the number of its prefix
/// ```
///
/// An insert next to a key of its own group, or a remove that leaves its group
/// another key, changes a grouped array in place like any other; a key that starts
/// or ends a group rebuilds it (the later groups' numbers and the prefixes move: a
/// leaf of 64 entries, a few kilobytes).
///
/// Every key starts with the node's prefix: its first `plen` bytes (key 0's, at the
/// start of the key area), the first eight of which are also in `pfx`.
///
/// A *run* is two or more consecutive keys with one head (they share `plen + H - 1`
/// bytes, often many more: the entries of one node id in an index). Every run's keys
/// share their first `run_at` bytes, so their run heads, taken after those bytes,
/// order them: a search within a run reads run heads and one key, not a key per
/// probe.
#[derive(Clone, Default)]
pub(super) struct Keys {
    buf: Vec<u8>,
    n: u32,
    plen: u32,
    /// The length of every key, if they all have the same one (then `buf` holds no
    /// offsets: key `i` is at `i * width`); 0 if not.
    width: u32,
    /// The length of a prefix the keys of each run share, and where run heads are
    /// taken; 0 if there are no run heads.
    run_at: u32,
    /// The first `min(plen, 8)` bytes of the prefix, big-endian, zero padded: most
    /// queries are checked against the prefix without reading the buffer.
    pfx: u64,
    /// The number of distinct `run_at`-byte prefixes kept once each, if the keys are
    /// grouped; 0 if the key area holds whole keys.
    groups: u32,
}

/// The most prefixes a grouped array keeps (a group number is one byte).
const MAX_GROUPS: usize = u8::MAX as usize + 1;

/// A key's head: an unsigned integer of `H` bytes.
type Head = u32;
/// Bytes per head.
const H: usize = size_of::<Head>();

/// The head of a key suffix `s`: its first `H - 1` bytes, zero padded, then
/// `min(len, H)`, as a big-endian integer.
///
/// - Monotone: for suffixes `a < b`, `head(a) <= head(b)` (where the padded bytes are
///   equal, the shorter suffix is a prefix of the longer one, and a smaller length
///   byte).
/// - Exact below `H` bytes: equal heads whose length byte is below `H` are equal
///   suffixes. Inner nodes hold short separators, so their search reads heads only.
#[inline]
fn head(s: &[u8]) -> Head {
    match s.first_chunk::<H>() {
        Some(b) => (Head::from_be_bytes(*b) & !0xFF) | H as Head,
        None => {
            let mut h: Head = 0;
            for (i, &byte) in s.iter().enumerate() {
                h |= Head::from(byte) << (8 * (H - 1 - i));
            }
            h | s.len() as Head
        }
    }
}

/// The first eight bytes of `s` as a big-endian `u64`, zero padded.
#[inline]
fn padded(s: &[u8]) -> u64 {
    if let Some(b) = s.first_chunk::<8>() {
        return u64::from_be_bytes(*b);
    }
    let mut x = 0;
    // Fewer than eight bytes.
    for (i, &byte) in s.iter().enumerate() {
        x |= u64::from(byte) << (8 * (7 - i));
    }
    x
}

/// The top `k` bytes (`k <= 8`) of a `u64`.
#[inline]
fn top(x: u64, k: usize) -> u64 {
    if k == 0 {
        0
    } else {
        x & (!0u64 << (64 - 8 * k))
    }
}

/// The length of the longest common prefix of `a` and `b`.
#[inline]
pub(super) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while let (Some(x), Some(y)) = (a[i..].first_chunk::<8>(), b[i..].first_chunk::<8>()) {
        if x != y {
            break;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// The shortest key `s` with `left < s <= right` (given `left < right`): the shortest
/// prefix of `right` that is greater than `left`. A separator between two leaves need
/// not be a stored key; short separators keep inner nodes small and their heads exact.
pub(super) fn separator<'k>(left: &[u8], right: &'k [u8]) -> &'k [u8] {
    debug_assert!(left < right);
    &right[..common_prefix(left, right) + 1]
}

/// Converts a byte offset of a node's buffer to its stored width.
#[inline]
fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("PMap: the keys of one node exceed 4 GiB")
}

/// Grows `v` to hold `more` further elements: by an eighth at least, without the
/// doubling of `Vec`, so that nodes mutated in place keep little spare capacity.
#[inline]
pub(super) fn grow<T>(v: &mut Vec<T>, more: usize) {
    if v.capacity() - v.len() < more {
        v.reserve_exact(more.max(v.len() / 8));
    }
}

/// Whether equal heads mean equal suffixes (the suffix is shorter than a head).
#[inline]
fn exact(h: Head) -> bool {
    h & 0xFF < H as Head
}

impl Keys {
    /// Builds the array of `keys`, which must be sorted and distinct.
    pub(super) fn from_sorted<'k, K, I>(keys: I) -> Keys
    where
        K: Into<KeyRef<'k>>,
        I: Iterator<Item = K>,
    {
        // One pass over the source (often another node's keys), then over slices;
        // keys read from a grouped node are first put together in a scratch buffer.
        let refs: SmallVec<[KeyRef<'k>; 80]> = keys.map(Into::into).collect();
        let scratch: Vec<u8>;
        let keys: SmallVec<[&[u8]; 80]> = match refs
            .iter()
            .map(KeyRef::as_contiguous)
            .collect::<Option<_>>()
        {
            Some(keys) => keys,
            None => {
                let mut buf = Vec::with_capacity(refs.iter().map(KeyRef::len).sum());
                refs.iter().for_each(|k| k.extend_into(&mut buf));
                scratch = buf;
                let mut at = 0;
                refs.iter()
                    .map(|k| {
                        at += k.len();
                        &scratch[at - k.len()..at]
                    })
                    .collect()
            }
        };
        Keys::build(&keys)
    }

    /// [`from_sorted`](Self::from_sorted) over whole keys.
    fn build(keys: &[&[u8]]) -> Keys {
        let n = keys.len();
        let total: usize = keys.iter().map(|k| k.len()).sum();
        let (first, last) = (keys.first().copied(), keys.last().copied());
        // For sorted keys, the prefix all share is the one the first and last share.
        let plen = match (first, last) {
            (Some(first), Some(last)) => common_prefix(first, last),
            _ => 0,
        };
        let width = match first {
            Some(k) if !k.is_empty() && keys.iter().all(|x| x.len() == k.len()) => k.len(),
            _ => 0,
        };
        let heads: SmallVec<[Head; 80]> = keys.iter().map(|k| head(&k[plen..])).collect();
        // The prefix every run shares: for a run (sorted), the one its first and
        // last keys share.
        let mut run_at = usize::MAX;
        let mut i = 0;
        while i < n {
            let mut j = i + 1;
            while j < n && heads[j] == heads[i] {
                j += 1;
            }
            if j - i > 1 {
                run_at = run_at.min(common_prefix(keys[i], keys[j - 1]));
            }
            i = j;
        }
        let run_at = if run_at == usize::MAX { 0 } else { run_at };
        // Groups: the first key of each distinct `run_at`-byte prefix, and each key's
        // group number; kept if they save more than a byte or two per key.
        let mut firsts: SmallVec<[usize; 16]> = SmallVec::new();
        let mut group: SmallVec<[u8; 80]> = SmallVec::new();
        if width != 0 && run_at > 0 && n <= MAX_GROUPS {
            for (i, k) in keys.iter().enumerate() {
                if firsts
                    .last()
                    .is_none_or(|&f| keys[f][..run_at] != k[..run_at])
                {
                    firsts.push(i);
                }
                // At most `n <= MAX_GROUPS` groups: the number fits a byte.
                group.push((firsts.len() - 1) as u8);
            }
            if (n - firsts.len()) * run_at <= 2 * n {
                firsts.clear();
            }
        }
        let mut out = Keys {
            buf: Vec::new(),
            n: offset(n),
            plen: offset(plen),
            width: offset(width),
            run_at: offset(run_at),
            pfx: first.map_or(0, |k| padded(&k[..plen.min(8)])),
            groups: offset(firsts.len()),
        };
        let grouped = !firsts.is_empty();
        let key_area = if grouped {
            firsts.len() * run_at + n * (width - run_at)
        } else {
            total
        };
        let mut buf = Vec::with_capacity(out.slot() * n + key_area);
        if grouped {
            for &f in &firsts {
                buf.extend_from_slice(&keys[f][..run_at]);
            }
            for k in keys {
                buf.extend_from_slice(&k[run_at..]);
            }
        } else {
            for k in keys {
                buf.extend_from_slice(k);
            }
        }
        for h in &heads {
            buf.extend_from_slice(&h.to_ne_bytes());
        }
        if run_at > 0 {
            for k in keys {
                buf.extend_from_slice(&out.run_head(k).to_ne_bytes());
            }
        }
        if width == 0 {
            let mut end = 0;
            for k in keys {
                end += k.len();
                buf.extend_from_slice(&offset(end).to_ne_bytes());
            }
        }
        if grouped {
            buf.extend_from_slice(&group);
        }
        out.buf = buf;
        out
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.n as usize
    }

    /// The per-key regions after the key area, in order, by their size per key:
    /// heads, run heads (or 0), ends (or 0), group numbers (or 0).
    #[inline]
    fn regions(&self) -> [usize; 4] {
        [
            H,
            if self.run_at > 0 { H } else { 0 },
            if self.width == 0 { 4 } else { 0 },
            usize::from(self.groups > 0),
        ]
    }

    /// Whether the key area keeps shared prefixes once (see [`Keys`]).
    #[inline]
    fn grouped(&self) -> bool {
        self.groups > 0
    }

    /// Bytes per key before the key area.
    #[inline]
    fn slot(&self) -> usize {
        self.regions().iter().sum()
    }

    /// Where the per-key regions start: after the key area.
    #[inline]
    fn base(&self) -> usize {
        self.buf.len() - self.slot() * self.len()
    }

    /// The head of `key` after the run prefix.
    #[inline]
    fn run_head(&self, key: &[u8]) -> Head {
        head(key.get(self.run_at as usize..).unwrap_or_default())
    }

    #[inline]
    fn head_at(&self, i: usize) -> Head {
        let at = self.base() + H * i;
        Head::from_ne_bytes(self.buf[at..at + H].try_into().unwrap_or_default())
    }

    /// Where key `i` ends in the key area (whole keys only).
    #[inline]
    fn end_at(&self, i: usize) -> usize {
        if self.width != 0 {
            return (i + 1) * self.width as usize;
        }
        let at = self.base() + (self.slot() - 4) * self.len() + 4 * i;
        u32::from_ne_bytes(self.buf[at..at + 4].try_into().unwrap_or_default()) as usize
    }

    #[inline]
    fn start_at(&self, i: usize) -> usize {
        if self.width != 0 {
            i * self.width as usize
        } else if i == 0 {
            0
        } else {
            self.end_at(i - 1)
        }
    }

    /// Key `i`.
    #[inline]
    pub(super) fn key(&self, i: usize) -> KeyRef<'_> {
        if !self.grouped() {
            return KeyRef::from(&self.buf[self.start_at(i)..self.end_at(i)]);
        }
        let run_at = self.run_at as usize;
        let g = usize::from(self.group_at(i));
        let (start, end) = self.stored_at(i);
        KeyRef::new(
            &self.buf[g * run_at..(g + 1) * run_at],
            &self.buf[start..end],
        )
    }

    /// Every key, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = KeyRef<'_>> + Clone + '_ {
        (0..self.len()).map(|i| self.key(i))
    }

    /// The group number of key `i` (grouped arrays).
    #[inline]
    fn group_at(&self, i: usize) -> u8 {
        self.buf[self.base() + 2 * H * self.len() + i]
    }

    /// Where key `i`'s own bytes are in the key area: the whole key, or its tail
    /// (for a grouped array also `i == n`: the end of the tails).
    #[inline]
    fn stored_at(&self, i: usize) -> (usize, usize) {
        if self.grouped() {
            let tail = (self.width - self.run_at) as usize;
            let at = self.groups as usize * self.run_at as usize + i * tail;
            (at, at + tail)
        } else {
            (self.start_at(i), self.end_at(i))
        }
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
