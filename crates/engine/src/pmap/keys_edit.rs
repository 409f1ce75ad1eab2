//! Changes to a node's key array, one key at a time: in place where the new key fits
//! the array's prefix, runs and groups, else by a rebuild; copies with a key added or
//! removed; splitting an array in two.

use super::{Head, Keys, exact, grow, head, offset};
use crate::pmap::KeyRef;

impl Keys {
    /// Whether `key` can be added at `i` without rebuilding: it starts with the node
    /// prefix (else every head changes), has the node's width if it has one, and if
    /// it joins or forms a run, the run keeps `run_at` shared bytes.
    pub(super) fn fits(&self, i: usize, key: &[u8]) -> bool {
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

    /// Where an insert of `key` at `i` in place puts its bytes in the key area, which
    /// bytes (the whole key, or its tail after the group prefix) and its group number;
    /// `None` if the array must be rebuilt instead: the key does not
    /// [fit](Self::fits), or in a grouped array, its prefix is not the group of a key
    /// next to it (a new group renumbers the ones after it).
    pub(super) fn placement<'q>(&self, i: usize, key: &'q [u8]) -> Option<(usize, &'q [u8], u8)> {
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

    /// Whether key `i` can be removed in place: in a grouped array, another key of
    /// its group stays (and with it the group's prefix).
    pub(super) fn removable(&self, i: usize) -> bool {
        if !self.grouped() {
            return true;
        }
        let g = self.group_at(i);
        (i > 0 && self.group_at(i - 1) == g) || (i + 1 < self.len() && self.group_at(i + 1) == g)
    }

    /// The bytes of each region for a new key (heads, run heads, ends: the end is
    /// fixed up by the caller).
    pub(super) fn new_slot(&self, key: &[u8]) -> [Head; 2] {
        [head(&key[self.plen as usize..]), self.run_head(key)]
    }

    /// A copy with `key` inserted at `i` (where [`search`](Self::search) said it
    /// belongs), allocated to its size.
    pub(in crate::pmap) fn with_inserted(&self, i: usize, key: &[u8]) -> Keys {
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
    pub(in crate::pmap) fn insert(&mut self, i: usize, key: &[u8]) {
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
    pub(in crate::pmap) fn with_removed(&self, i: usize) -> Keys {
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
    pub(in crate::pmap) fn remove(&mut self, i: usize) {
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
    pub(in crate::pmap) fn split_off(&mut self, from: usize) -> Keys {
        let right = Keys::from_sorted(self.iter().skip(from));
        *self = Keys::from_sorted(self.iter().take(from));
        right
    }
}
