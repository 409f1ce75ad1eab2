//! Several keys put into a node's key array at once: the array copied a region at a
//! time, in the pieces between the new keys (a leaf taking a few keys of a sorted
//! batch, `insert_sorted.rs`), where each new key fits the array as one in-place
//! insert would.

use smallvec::SmallVec;

use super::{Head, Keys, common_prefix, exact, head, offset};

impl Keys {
    /// A copy with several keys inserted, each `(i, key)` at `i` (where
    /// [`search`](Self::search) said it belongs among the current keys; several may
    /// share an `i`), in ascending key order; allocated to its size. The current
    /// bytes are copied a region at a time, in the pieces between the new keys: a
    /// leaf taking a few keys of a batch is not rebuilt key by key. `None` where
    /// a new key does not fit the array's prefix, runs or groups (as one insert
    /// that would rebuild): then the caller builds the array anew.
    pub(in crate::pmap) fn with_inserted_many(&self, inserts: &[(usize, &[u8])]) -> Option<Keys> {
        struct Placed<'q> {
            i: usize,
            start: usize,
            bytes: &'q [u8],
            group: u8,
            slot: [Head; 2],
        }
        let (plen, run_at) = (self.plen as usize, self.run_at as usize);
        let mut placed: SmallVec<[Placed<'_>; 16]> = SmallVec::with_capacity(inserts.len());
        for (n, &(i, key)) in inserts.iter().enumerate() {
            let (start, bytes, group) = self.placement(i, key)?;
            // Two new keys side by side: they must not start a run the array lacks
            // (each was checked against the current keys only).
            if n > 0 && inserts[n - 1].0 == i {
                let prev = inserts[n - 1].1;
                let h = head(&key[plen..]);
                let joins = exact(h)
                    || head(&prev[plen..]) != h
                    || (run_at > 0 && common_prefix(prev, key) >= run_at);
                if !joins {
                    return None;
                }
            }
            let slot = self.new_slot(key);
            placed.push(Placed {
                i,
                start,
                bytes,
                group,
                slot,
            });
        }
        let (n, base) = (self.len(), self.base());
        let added: usize = placed.iter().map(|p| p.bytes.len()).sum();
        let mut buf = Vec::with_capacity(self.buf.len() + placed.len() * self.slot() + added);
        let mut at = 0;
        for p in &placed {
            buf.extend_from_slice(&self.buf[at..p.start]);
            buf.extend_from_slice(p.bytes);
            at = p.start;
        }
        buf.extend_from_slice(&self.buf[at..base]);
        let mut region = base;
        for (r, e) in self.regions().into_iter().enumerate() {
            if e == 0 {
                continue;
            }
            let mut j = 0;
            if r == 2 {
                // Ends: each key's end moves by the bytes of the new keys before it.
                let mut shift = 0;
                for p in &placed {
                    for old in j..p.i {
                        buf.extend_from_slice(&offset(self.end_at(old) + shift).to_ne_bytes());
                    }
                    j = p.i;
                    shift += p.bytes.len();
                    buf.extend_from_slice(&offset(p.start + shift).to_ne_bytes());
                }
                for old in j..n {
                    buf.extend_from_slice(&offset(self.end_at(old) + shift).to_ne_bytes());
                }
            } else {
                for p in &placed {
                    buf.extend_from_slice(&self.buf[region + e * j..region + e * p.i]);
                    j = p.i;
                    if r < 2 {
                        buf.extend_from_slice(&p.slot[r].to_ne_bytes());
                    } else {
                        buf.push(p.group);
                    }
                }
                buf.extend_from_slice(&self.buf[region + e * j..region + e * n]);
            }
            region += e * n;
        }
        Some(Keys {
            buf,
            // The caller keeps a node within its bounds: far below u32::MAX keys.
            n: self.n + placed.len() as u32,
            ..*self
        })
    }
}
