//! Sorting many encoded keys at once (a batch's, a restore's): by an integer of
//! each key's first eight bytes past the prefix they all share, and only where
//! those are equal by the rest of the keys.
//!
//! Keys of one map share long prefixes (a namespace, a node id) and are up to 78
//! bytes inline: compared whole as the sort moves them, each comparison was a
//! `memcmp` from the first byte and each move a copy of the whole key. Sorting
//! small (integer, position) pairs does neither for keys whose heads differ.

/// The positions of `keys` in key order; equal keys keep their order in `keys`.
///
/// ```
/// let keys = [b"b".as_slice(), b"a", b"ab", b"a"];
/// assert_eq!(schedstate_engine::sorted_order(&keys), [1, 3, 2, 0]);
/// ```
pub fn sorted_order<K: AsRef<[u8]>>(keys: &[K]) -> Vec<usize> {
    let first = keys.first().map_or(&[][..], AsRef::as_ref);
    let shared = keys
        .iter()
        .map(|k| common_prefix(first, k.as_ref()))
        .min()
        .unwrap_or(0);
    let rest = |i: usize| {
        let k = keys[i].as_ref();
        &k[shared.min(k.len())..]
    };
    let mut order: Vec<(u64, usize)> = (0..keys.len()).map(|i| (head(rest(i)), i)).collect();
    // Equal heads may still differ in length (the padding): the rest decides.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| rest(a.1).cmp(rest(b.1)))
            .then(a.1.cmp(&b.1))
    });
    order.into_iter().map(|(_, i)| i).collect()
}

/// The first eight bytes of `s` as a big-endian integer, zero padded. Two keys
/// with different heads compare as their heads (padding only makes a shorter key
/// smaller or equal); equal heads say nothing, and the keys are compared.
pub(crate) fn head(s: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = s.len().min(8);
    b[..n].copy_from_slice(&s[..n]);
    u64::from_be_bytes(b)
}

/// The length of the longest prefix `a` and `b` share.
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::sorted_order;

    proptest! {
        /// The order of a stable sort by the bytes, for keys sharing prefixes, of
        /// several lengths, some equal and some prefixes of others.
        #[test]
        fn sorts_as_the_bytes_stably(
            prefix in proptest::collection::vec(0u8..3, 0..12),
            tails in proptest::collection::vec(proptest::collection::vec(0u8..3, 0..12), 0..60),
        ) {
            let keys: Vec<Vec<u8>> = tails.iter().map(|t| [prefix.as_slice(), t].concat()).collect();
            let mut want: Vec<usize> = (0..keys.len()).collect();
            want.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
            prop_assert_eq!(sorted_order(&keys), want);
        }
    }
}
