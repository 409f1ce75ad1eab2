//! The comparison of a `PMap` with its `BTreeMap` model, shared by the property test
//! (`pmap.rs`) and the fuzz target (`fuzz/fuzz_targets/pmap.rs` includes this file):
//! one definition of "everything observable of the map equals the model".

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

// The includer's `PMap` (`schedstate_engine::PMap` in the engine's tests, the same
// type as `schedstate::engine::PMap` in the fuzz crate).
use super::{KeyRef, PMap};

/// The model: a plain ordered map.
pub type Model = BTreeMap<Vec<u8>, u64>;

/// Whether `k` lies within `lo..hi`.
pub fn within(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let above = match lo {
        Bound::Unbounded => true,
        Bound::Included(b) => k >= b.as_slice(),
        Bound::Excluded(b) => k > b.as_slice(),
    };
    let below = match hi {
        Bound::Unbounded => true,
        Bound::Included(b) => k <= b.as_slice(),
        Bound::Excluded(b) => k < b.as_slice(),
    };
    above && below
}

/// A borrowed bound.
pub fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
    }
}

/// Inserts `keys`, sorted and deduplicated, into `map` as one batch
/// (`PMap::insert_sorted`) and into `model`, each with the next value of `next_value`,
/// and checks the map's count of new keys against the model's.
pub fn insert_sorted(
    map: &mut PMap<u64>,
    model: &mut Model,
    next_value: &mut u64,
    mut keys: Vec<Vec<u8>>,
) {
    keys.sort();
    keys.dedup();
    let entries: Vec<(Vec<u8>, u64)> = keys
        .into_iter()
        .map(|k| {
            *next_value += 1;
            (k, *next_value)
        })
        .collect();
    let new = entries
        .iter()
        .filter(|(k, _)| !model.contains_key(k))
        .count();
    model.extend(entries.iter().cloned());
    assert_eq!(map.insert_sorted(entries), new, "keys added");
}

/// Reads `map.range(lo, hi)` from the front (`true`) and the back (`false`) as
/// `pattern` says, cycled, and compares every entry with the model.
pub fn check_range(
    map: &PMap<u64>,
    model: &Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    pattern: &[bool],
) {
    let mut expected: VecDeque<(KeyRef<'_>, u64)> = model
        .iter()
        .filter(|(k, _)| within(k, lo, hi))
        .map(|(k, v)| (KeyRef::from(k), *v))
        .collect();
    let mut it = map.range((as_ref(lo), as_ref(hi)));
    for &front in pattern.iter().cycle() {
        let (got, want) = if front {
            (it.next(), expected.pop_front())
        } else {
            (it.next_back(), expected.pop_back())
        };
        assert_eq!(
            got.map(|(k, v)| (k, *v)),
            want,
            "range {lo:?}..{hi:?}, from the {}",
            if front { "front" } else { "back" }
        );
        if want.is_none() {
            break;
        }
    }
    assert_eq!(it.next(), None, "range {lo:?}..{hi:?}: exhausted");
    assert_eq!(it.next_back(), None, "range {lo:?}..{hi:?}: exhausted");
    // The values alone, as a scan of rows reads them.
    let mut it = map.range((as_ref(lo), as_ref(hi)));
    let values: Vec<u64> = std::iter::from_fn(|| it.next_value().copied()).collect();
    let want: Vec<u64> = model
        .iter()
        .filter(|(k, _)| within(k, lo, hi))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(values, want, "values of range {lo:?}..{hi:?}");
    if let Bound::Included(p) = lo {
        check_prefix(map, model, p);
    }
}

/// `prefix(p)` yields exactly the model's entries whose key starts with `p`, from
/// both ends.
pub fn check_prefix(map: &PMap<u64>, model: &Model, p: &[u8]) {
    let want: Vec<(Vec<u8>, u64)> = model
        .iter()
        .filter(|(k, _)| k.starts_with(p))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let got: Vec<(Vec<u8>, u64)> = map.prefix(p).map(|(k, v)| (k.to_vec(), *v)).collect();
    assert_eq!(got, want, "prefix {p:?}");
    let mut back: Vec<(Vec<u8>, u64)> =
        map.prefix(p).rev().map(|(k, v)| (k.to_vec(), *v)).collect();
    back.reverse();
    assert_eq!(back, want, "prefix {p:?} from the back");
}

/// Everything observable of `map` equals `model`: its structure, length and entries in
/// order from both ends, first and last, gets of `sample` keys spread over it (every
/// key when the model has no more), and ranges between them. Linear in the map, so
/// that large fuzz inputs stay fast.
pub fn check_same(map: &PMap<u64>, model: &Model, sample: usize) {
    if let Err(e) = map.check_invariants() {
        panic!("invariants: {e}");
    }
    assert_eq!(map.len(), model.len());
    assert_eq!(map.is_empty(), model.is_empty());
    let want = || model.iter().map(|(k, v)| (KeyRef::from(k), *v));
    assert!(map.iter().map(|(k, v)| (k, *v)).eq(want()), "iteration");
    assert!(
        map.iter().rev().map(|(k, v)| (k, *v)).eq(want().rev()),
        "reverse iteration"
    );
    assert_eq!(map.first().map(|(k, v)| (k, *v)), want().next());
    assert_eq!(map.last().map(|(k, v)| (k, *v)), want().next_back());
    let step = model.len() / sample.max(1) + 1;
    for (k, v) in model.iter().step_by(step) {
        assert_eq!(map.get(k), Some(v), "get {k:?}");
    }
    let keys: Vec<&Vec<u8>> = model.keys().step_by(step).collect();
    if keys.len() >= 2 {
        let (a, b) = (keys[keys.len() / 3], keys[2 * keys.len() / 3]);
        for (lo, hi) in [
            (Bound::Included(a.clone()), Bound::Excluded(b.clone())),
            (Bound::Excluded(a.clone()), Bound::Included(b.clone())),
            (Bound::Included(b.clone()), Bound::Unbounded),
        ] {
            check_range(map, model, &lo, &hi, &[true, false, true]);
        }
    }
}
