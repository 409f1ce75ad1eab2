//! The layout checks of a node's key array, for the invariant checks of the tests and
//! the fuzz targets.

use std::cmp::Ordering;

use super::{H, Head, Keys, MAX_GROUPS, common_prefix, head, padded};

impl Keys {
    /// Checks the layout (for [`PMap::check_invariants`](crate::pmap::PMap::check_invariants)).
    pub(in crate::pmap) fn check(&self) -> Result<(), String> {
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
