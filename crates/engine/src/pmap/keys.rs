//! The sorted key array of one node, in one buffer: the keys (whole, or as shared
//! prefixes and tails), then fixed-width heads for the search, run heads, key
//! offsets and group numbers (layout in the module docs of [`super`]).

use std::cmp::Ordering;

use smallvec::SmallVec;

use super::key_ref::KeyRef;
use crate::prefetch::prefetch;

// `Keys::with_inserted_many`: several keys spliced in at once.
#[path = "keys_splice.rs"]
mod splice;

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

    /// How `q` compares with the node prefix, on the bytes both have: `Less` or
    /// `Greater` put it before or after every key; `Equal` with `q` at least as long as
    /// the prefix means `q` starts with it.
    #[inline]
    fn cmp_prefix(&self, q: &[u8]) -> Ordering {
        let plen = self.plen as usize;
        let m = q.len().min(plen);
        let k = m.min(8);
        // `padded(q)` then its top `k` bytes: `q[..k]`, zero padded.
        match top(padded(q), k).cmp(&top(self.pfx, k)) {
            Ordering::Equal if m > 8 => q[8..m].cmp(&self.buf[8..m]),
            o => o,
        }
    }

    /// Where `q` is: `Ok(i)` if it is key `i`, `Err(i)` if it would be inserted at `i`.
    #[inline]
    pub(super) fn search(&self, q: &[u8]) -> Result<usize, usize> {
        let n = self.len();
        let plen = self.plen as usize;
        if plen > 0 {
            match self.cmp_prefix(q) {
                Ordering::Less => return Err(0),
                Ordering::Greater => return Err(n),
                // `q` is a proper prefix of the node prefix: before every key.
                Ordering::Equal if q.len() < plen => return Err(0),
                Ordering::Equal => {}
            }
        }
        let hq = head(&q[plen..]);
        let at = self.base();
        let (heads, _) = self.buf[at..at + H * n].as_chunks::<H>();
        // Keys whose head is below `hq` are below `q`; above it, above `q`.
        let lo = heads.partition_point(|h| Head::from_ne_bytes(*h) < hq);
        if lo == n || Head::from_ne_bytes(heads[lo]) != hq {
            return Err(lo);
        }
        if exact(hq) {
            return Ok(lo);
        }
        if self.run_at > 0 && lo + 1 < n && Head::from_ne_bytes(heads[lo + 1]) == hq {
            let hi = lo + heads[lo..].partition_point(|h| Head::from_ne_bytes(*h) == hq);
            return self.search_run(q, lo, hi);
        }
        self.search_keys(q, plen + H - 1, lo, lo + 1)
    }

    /// The search among the keys `lo..hi`, which share their first `shared` bytes with
    /// `q` (on the bytes `q` has) and each other: by full keys, from `shared` on.
    fn search_keys(
        &self,
        q: &[u8],
        shared: usize,
        mut lo: usize,
        mut hi: usize,
    ) -> Result<usize, usize> {
        let rest = &q[shared..];
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid).cmp_from(shared, rest) {
                Ordering::Equal => return Ok(mid),
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
            }
        }
        Err(lo)
    }

    /// The search within the run `lo..hi` (two or more keys whose head is `q`'s):
    /// by run heads, then one key confirms, or tells that `q` leaves the run's shared
    /// prefix (and lies before or after the whole run).
    fn search_run(&self, q: &[u8], lo: usize, hi: usize) -> Result<usize, usize> {
        let n = self.len();
        let run_at = self.run_at as usize;
        let hs = self.run_head(q);
        let at = self.base() + H * n;
        let runs = &self.buf[at..at + H * n];
        let (runs, _) = runs[H * lo..H * hi].as_chunks::<H>();
        let j = lo + runs.partition_point(|h| Head::from_ne_bytes(*h) < hs);
        let c = j.min(hi - 1);
        let k = self.key(c);
        let l = k.common_prefix(q);
        if l < run_at {
            // The run's keys share `run_at` bytes; `q` leaves them at `l`.
            return if l == q.len() || q[l] < k.byte(l) {
                Err(lo)
            } else {
                Err(hi)
            };
        }
        if j == hi {
            return Err(hi);
        }
        let hk = Head::from_ne_bytes(runs[j - lo]);
        if hk != hs {
            return Err(j);
        }
        if l == q.len() && l == k.len() {
            return Ok(j);
        }
        if exact(hs) {
            // Equal exact run heads would be equal keys, and `q != k`.
            return Err(j + usize::from(k.cmp_bytes(q).is_lt()));
        }
        // Equal run heads of eight bytes or more (rare): the keys decide.
        let end = j + runs[j - lo..].partition_point(|h| Head::from_ne_bytes(*h) == hs);
        self.search_keys(q, run_at + H - 1, j, end)
    }

    /// Prefetches the heads, the first thing a search reads (a hint: batched lookups
    /// ask for it while they still work on other lookups).
    #[inline]
    pub(super) fn prefetch_heads(&self) {
        let base = self.base();
        for line in self.buf[base..base + H * self.len()].chunks(64) {
            prefetch(line.as_ptr());
        }
    }

    /// Prefetches what a search for `q` reads after the heads, found from the heads
    /// alone (a hint, possibly the wrong key in a run): the key it compares in full
    /// (where keys have one width, so its place needs no offsets) and its run head.
    /// Returns that key's position, near which the search ends (`None`: past every
    /// key), for the caller to ask for the value or child there.
    #[inline]
    pub(super) fn prefetch_candidate(&self, q: &[u8]) -> Option<usize> {
        let (n, plen) = (self.len(), self.plen as usize);
        let hq = head(q.get(plen..)?);
        let at = self.base();
        let (heads, _) = self.buf[at..at + H * n].as_chunks::<H>();
        let lo = heads.partition_point(|h| Head::from_ne_bytes(*h) < hq);
        if lo == n {
            return None;
        }
        if self.grouped() {
            prefetch(self.buf[self.stored_at(lo).0..].as_ptr());
        } else if self.width != 0 {
            prefetch(self.buf[lo * self.width as usize..].as_ptr());
        }
        if self.run_at > 0 {
            prefetch(self.buf[at + H * (n + lo)..].as_ptr());
        }
        Some(lo)
    }

    /// The number of keys `<= q`: the child of an inner node that covers `q`.
    #[inline]
    pub(super) fn upper_bound(&self, q: &[u8]) -> usize {
        match self.search(q) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// The number of keys `< q`.
    #[inline]
    pub(super) fn lower_bound(&self, q: &[u8]) -> usize {
        match self.search(q) {
            Ok(i) | Err(i) => i,
        }
    }

    /// Whether `key` can be added at `i` without rebuilding: it starts with the node
    /// prefix (else every head changes), has the node's width if it has one, and if
    /// it joins or forms a run, the run keeps `run_at` shared bytes.
    fn fits(&self, i: usize, key: &[u8]) -> bool {
        if self.n == 0
            || (self.width != 0 && key.len() != self.width as usize)
            || key.len() < self.plen as usize
            || !self.cmp_prefix(key).is_eq()
        {
            return false;
        }
        let h = head(&key[self.plen as usize..]);
        if exact(h) {
            return true;
        }
        let run_at = self.run_at as usize;
        let joins = |j: usize| {
            self.head_at(j) != h || (run_at > 0 && self.key(j).common_prefix(key) >= run_at)
        };
        (i == 0 || joins(i - 1)) && (i == self.len() || joins(i))
    }

    /// Where the keys that start with `prefix` end, given that none before key `i`
    /// does (`i` is the prefix's lower bound): found from the group numbers, without
    /// a search, where the keys are grouped and `prefix` lies within their group
    /// prefix. Then `i`'s group starts with `prefix` or no key does (`Some(i)`), and
    /// its keys do up to the next group, whose prefix decides. `None` where that does
    /// not tell (not grouped, a longer prefix, or every later key of the node starts
    /// with `prefix`): the caller searches.
    pub(super) fn prefix_end_from(&self, i: usize, prefix: &[u8]) -> Option<usize> {
        let (n, run_at) = (self.len(), self.run_at as usize);
        if !self.grouped() || prefix.len() > run_at || i >= n {
            return None;
        }
        let group_prefix = |g: u8| &self.buf[usize::from(g) * run_at..][..prefix.len()];
        let numbers = &self.buf[self.base() + 2 * H * n..][..n];
        let g = numbers[i];
        if group_prefix(g) != prefix {
            return Some(i);
        }
        // A group's keys are consecutive, and the groups are numbered in key order.
        let end = i + numbers[i..].iter().take_while(|&&x| x == g).count();
        if end == n || group_prefix(numbers[end]) == prefix {
            return None;
        }
        Some(end)
    }

    /// The group number of key `i` (grouped arrays).
    #[inline]
    fn group_at(&self, i: usize) -> u8 {
        self.buf[self.base() + 2 * H * self.len() + i]
    }

    /// Where an insert of `key` at `i` in place puts its bytes in the key area, which
    /// bytes (the whole key, or its tail after the group prefix) and its group number;
    /// `None` if the array must be rebuilt instead: the key does not
    /// [fit](Self::fits), or in a grouped array, its prefix is not the group of a key
    /// next to it (a new group renumbers the ones after it).
    fn placement<'q>(&self, i: usize, key: &'q [u8]) -> Option<(usize, &'q [u8], u8)> {
        if !self.fits(i, key) {
            return None;
        }
        if !self.grouped() {
            return Some((self.start_at(i), key, 0));
        }
        let run_at = self.run_at as usize;
        let neighbours = [i.checked_sub(1), (i < self.len()).then_some(i)];
        let g = neighbours
            .into_iter()
            .flatten()
            .find(|&j| self.key(j).parts().0 == &key[..run_at])
            .map(|j| self.group_at(j))?;
        // Key `i`'s tail goes where the current key `i`'s starts (one past the last
        // tail for `i == n`).
        Some((self.stored_at(i).0, &key[run_at..], g))
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

    /// Whether key `i` can be removed in place: in a grouped array, another key of
    /// its group stays (and with it the group's prefix).
    fn removable(&self, i: usize) -> bool {
        if !self.grouped() {
            return true;
        }
        let g = self.group_at(i);
        (i > 0 && self.group_at(i - 1) == g) || (i + 1 < self.len() && self.group_at(i + 1) == g)
    }

    /// The bytes of each region for a new key (heads, run heads, ends: the end is
    /// fixed up by the caller).
    fn new_slot(&self, key: &[u8]) -> [Head; 2] {
        [head(&key[self.plen as usize..]), self.run_head(key)]
    }

    /// A copy with `key` inserted at `i` (where [`search`](Self::search) said it
    /// belongs), allocated to its size.
    pub(super) fn with_inserted(&self, i: usize, key: &[u8]) -> Keys {
        let Some((start, bytes, g)) = self.placement(i, key) else {
            let keys = self.iter();
            return Keys::from_sorted(
                keys.clone()
                    .take(i)
                    .chain(std::iter::once(KeyRef::from(key)))
                    .chain(keys.skip(i)),
            );
        };
        let n = self.len();
        let base = self.base();
        let klen = bytes.len();
        let mut buf = Vec::with_capacity(self.buf.len() + self.slot() + klen);
        buf.extend_from_slice(&self.buf[..start]);
        buf.extend_from_slice(bytes);
        buf.extend_from_slice(&self.buf[start..base]);
        let new = self.new_slot(key);
        let mut at = base;
        for (r, e) in self.regions().into_iter().enumerate() {
            if e == 0 {
                continue;
            }
            buf.extend_from_slice(&self.buf[at..at + e * i]);
            if r == 2 {
                buf.extend_from_slice(&offset(start + klen).to_ne_bytes());
                for j in i..n {
                    buf.extend_from_slice(&offset(self.end_at(j) + klen).to_ne_bytes());
                }
            } else {
                if r < 2 {
                    buf.extend_from_slice(&new[r].to_ne_bytes());
                } else {
                    buf.push(g);
                }
                buf.extend_from_slice(&self.buf[at + e * i..at + e * n]);
            }
            at += e * n;
        }
        Keys {
            buf,
            n: self.n + 1,
            ..*self
        }
    }

    /// Inserts `key` at `i` in place (where [`search`](Self::search) said it belongs).
    pub(super) fn insert(&mut self, i: usize, key: &[u8]) {
        let Some((start, bytes, g)) = self.placement(i, key) else {
            *self = self.with_inserted(i, key);
            return;
        };
        let n = self.len();
        let regions = self.regions();
        let slot = self.slot();
        let (klen, old, b) = (bytes.len(), self.buf.len(), self.base());
        let new = self.new_slot(key);
        grow(&mut self.buf, slot + klen);
        self.buf.resize(old + slot + klen, 0);
        // From the top down, each part to its new place (never over a part not yet
        // moved): each region (last first, its elements after `i` first), then the
        // keys after the new one.
        let nb = b + klen;
        let mut pre = slot;
        for (r, e) in regions.into_iter().enumerate().rev() {
            pre -= e;
            if e == 0 {
                continue;
            }
            let (from, to) = (b + pre * n, nb + pre * (n + 1));
            self.buf
                .copy_within(from + e * i..from + e * n, to + e * (i + 1));
            self.buf.copy_within(from..from + e * i, to);
            if r < 2 {
                self.buf[to + e * i..to + e * (i + 1)].copy_from_slice(&new[r].to_ne_bytes());
            } else if r == 3 {
                self.buf[to + i] = g;
            }
        }
        self.buf.copy_within(start..b, start + klen);
        self.buf[start..start + klen].copy_from_slice(bytes);
        self.n += 1;
        if self.width == 0 {
            // The ends region: the last but the group numbers, which only grouped
            // arrays (of one width) have.
            let at = nb + (slot - 4) * (n + 1);
            let set = |buf: &mut Vec<u8>, j: usize, end: usize| {
                buf[at + 4 * j..at + 4 * j + 4].copy_from_slice(&offset(end).to_ne_bytes());
            };
            set(&mut self.buf, i, start + klen);
            for j in i + 1..=n {
                let e = self.end_at(j);
                set(&mut self.buf, j, e + klen);
            }
        }
    }

    /// A copy without key `i`, allocated to its size.
    pub(super) fn with_removed(&self, i: usize) -> Keys {
        if self.n == 1 {
            return Keys::default();
        }
        if !self.removable(i) {
            let keys = self.iter();
            return Keys::from_sorted(keys.clone().take(i).chain(keys.skip(i + 1)));
        }
        let n = self.len();
        let ((start, end), base) = (self.stored_at(i), self.base());
        let klen = end - start;
        let mut buf = Vec::with_capacity(self.buf.len() - self.slot() - klen);
        buf.extend_from_slice(&self.buf[..start]);
        buf.extend_from_slice(&self.buf[end..base]);
        let mut at = base;
        for (r, e) in self.regions().into_iter().enumerate() {
            if e == 0 {
                continue;
            }
            buf.extend_from_slice(&self.buf[at..at + e * i]);
            if r == 2 {
                for j in i + 1..n {
                    buf.extend_from_slice(&offset(self.end_at(j) - klen).to_ne_bytes());
                }
            } else {
                buf.extend_from_slice(&self.buf[at + e * (i + 1)..at + e * n]);
            }
            at += e * n;
        }
        Keys {
            buf,
            n: self.n - 1,
            ..*self
        }
    }

    /// Removes key `i` in place. The prefixes stay valid (they may now be shorter
    /// than they could be).
    pub(super) fn remove(&mut self, i: usize) {
        if self.n == 1 {
            *self = Keys::default();
            return;
        }
        if !self.removable(i) {
            *self = self.with_removed(i);
            return;
        }
        let n = self.len();
        let regions = self.regions();
        let slot = self.slot();
        let ((start, end), old, b) = (self.stored_at(i), self.buf.len(), self.base());
        let klen = end - start;
        // From the bottom up, each part to its new place (never over a part not yet
        // moved): the keys after key `i`, then each region (first first, its elements
        // before `i` first).
        self.buf.copy_within(end..b, start);
        let nb = b - klen;
        let mut pre = 0;
        for e in regions {
            if e == 0 {
                continue;
            }
            let (from, to) = (b + pre * n, nb + pre * (n - 1));
            self.buf.copy_within(from..from + e * i, to);
            self.buf
                .copy_within(from + e * (i + 1)..from + e * n, to + e * i);
            pre += e;
        }
        self.buf.truncate(old - slot - klen);
        self.n -= 1;
        if self.width == 0 {
            let at = nb + (slot - 4) * (n - 1);
            for j in i..n - 1 {
                let e = self.end_at(j) - klen;
                self.buf[at + 4 * j..at + 4 * j + 4].copy_from_slice(&offset(e).to_ne_bytes());
            }
        }
    }

    /// The keys from `from` on, and the first `from` kept here; both allocated to
    /// their size, with the longest prefix each shares.
    pub(super) fn split_off(&mut self, from: usize) -> Keys {
        let right = Keys::from_sorted(self.iter().skip(from));
        *self = Keys::from_sorted(self.iter().take(from));
        right
    }

    /// Checks the layout (for [`PMap::check_invariants`](super::PMap::check_invariants)).
    pub(super) fn check(&self) -> Result<(), String> {
        let n = self.len();
        if self.buf.len() < self.slot() * n {
            return Err(format!("a buffer of {} bytes for {n} keys", self.buf.len()));
        }
        if self.grouped() {
            self.check_groups()?;
        } else {
            let ends: Vec<usize> = (0..n).map(|i| self.end_at(i)).collect();
            if ends.windows(2).any(|w| w[0] > w[1])
                || ends.last().copied().unwrap_or(0) != self.base()
            {
                return Err("key offsets out of order or not covering the key area".into());
            }
        }
        let plen = self.plen as usize;
        if n == 0 && (plen != 0 || self.pfx != 0 || self.width != 0 || self.run_at != 0) {
            return Err("an empty node with a prefix, width or runs".into());
        }
        if self.width != 0 && self.iter().any(|k| k.len() != self.width as usize) {
            return Err("a key of another width in a node of one width".into());
        }
        let keys: Vec<Vec<u8>> = self.iter().map(|k| k.to_vec()).collect();
        if n > 0 && self.pfx != padded(&keys[0][..plen.min(8)]) {
            return Err("prefix bytes stale".into());
        }
        let run_at = self.run_at as usize;
        for (i, k) in keys.iter().enumerate() {
            if k.len() < plen || k[..plen] != keys[0][..plen] {
                return Err(format!("key {i} does not start with the node prefix"));
            }
            if n > 0 && self.cmp_prefix(k) != Ordering::Equal {
                return Err(format!("key {i} is not within the stored prefix"));
            }
            if self.head_at(i) != head(&k[plen..]) {
                return Err(format!("head {i} is stale"));
            }
            if i > 0 && keys[i - 1] >= *k {
                return Err(format!("keys {} and {i} out of order", i - 1));
            }
            if i > 0 && self.head_at(i - 1) == self.head_at(i) {
                if run_at == 0 {
                    return Err(format!(
                        "keys {} and {i} form a run without run heads",
                        i - 1
                    ));
                }
                if common_prefix(&keys[i - 1], k) < run_at {
                    return Err(format!(
                        "keys {} and {i}: a run sharing less than run_at",
                        i - 1
                    ));
                }
            }
            if run_at > 0 {
                let at = self.base() + H * (n + i);
                let stored =
                    Head::from_ne_bytes(self.buf[at..at + H].try_into().unwrap_or_default());
                if stored != self.run_head(k) {
                    return Err(format!("run head {i} is stale"));
                }
            }
        }
        Ok(())
    }

    /// The checks of a grouped array: its sizes, and distinct prefixes in key order,
    /// each numbered by its keys.
    fn check_groups(&self) -> Result<(), String> {
        let (n, groups) = (self.len(), self.groups as usize);
        let (width, run_at) = (self.width as usize, self.run_at as usize);
        if width <= run_at || run_at == 0 || groups > n.min(MAX_GROUPS) {
            return Err(format!(
                "{groups} groups of {run_at} bytes for {n} keys of {width}"
            ));
        }
        if self.base() != groups * run_at + n * (width - run_at) {
            return Err("a grouped key area of the wrong size".into());
        }
        let numbers = &self.buf[self.base() + 2 * H * n..];
        let mut expected = 0;
        for (i, &g) in numbers.iter().enumerate() {
            let g = usize::from(g);
            if i > 0 && g != expected {
                expected += 1;
            }
            if g != expected {
                return Err(format!("key {i} numbered {g}, not {expected}"));
            }
        }
        if expected + 1 != groups {
            return Err(format!("{} of {groups} groups used", expected + 1));
        }
        let prefix = |g: usize| &self.buf[g * run_at..(g + 1) * run_at];
        if (1..groups).any(|g| prefix(g - 1) >= prefix(g)) {
            return Err("group prefixes not distinct and in order".into());
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
