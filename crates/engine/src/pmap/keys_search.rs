//! Searches of a node's key array: where a key is or belongs, bounds, the end of a
//! prefix's keys, and the prefetch hints batched lookups give ahead of a search.

use std::cmp::Ordering;

use super::{H, Head, Keys, exact, head, padded, top};
use crate::prefetch::prefetch;

impl Keys {
    /// How `q` compares with the node prefix, on the bytes both have: `Less` or
    /// `Greater` put it before or after every key; `Equal` with `q` at least as long as
    /// the prefix means `q` starts with it.
    #[inline]
    pub(super) fn cmp_prefix(&self, q: &[u8]) -> Ordering {
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
    pub(in crate::pmap) fn search(&self, q: &[u8]) -> Result<usize, usize> {
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
    pub(in crate::pmap) fn prefetch_heads(&self) {
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
    pub(in crate::pmap) fn prefetch_candidate(&self, q: &[u8]) -> Option<usize> {
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
    pub(in crate::pmap) fn upper_bound(&self, q: &[u8]) -> usize {
        match self.search(q) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// The number of keys `< q`.
    #[inline]
    pub(in crate::pmap) fn lower_bound(&self, q: &[u8]) -> usize {
        match self.search(q) {
            Ok(i) | Err(i) => i,
        }
    }

    /// Where the keys that start with `prefix` end, given that none before key `i`
    /// does (`i` is the prefix's lower bound): found from the group numbers, without
    /// a search, where the keys are grouped and `prefix` lies within their group
    /// prefix. Then `i`'s group starts with `prefix` or no key does (`Some(i)`), and
    /// its keys do up to the next group, whose prefix decides. `None` where that does
    /// not tell (not grouped, a longer prefix, or every later key of the node starts
    /// with `prefix`): the caller searches.
    pub(in crate::pmap) fn prefix_end_from(&self, i: usize, prefix: &[u8]) -> Option<usize> {
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
}
