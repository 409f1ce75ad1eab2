//! `PMap`, the persistent B+tree, against `BTreeMap<Vec<u8>, u64>`: a property test of
//! random operation sequences (single, bulk and sorted-batch inserts, removes, gets,
//! ranges read from both ends, bulk rebuilds) with retained clones that must keep their
//! contents, and unit tests of edge cases.
//!
//! 64 cases by default; `PROPTEST_CASES=1000 cargo test -p schedstate-engine --test
//! engine pmap` runs more.

use std::ops::Bound;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::Config;
use schedstate_engine::{KeyRef, PMap};

use crate::pmap_check::{Model, as_ref, check_range, within};

/// Every check compares every key.
fn check_same(map: &PMap<u64>, model: &Model) {
    crate::pmap_check::check_same(map, model, usize::MAX);
}

/// Shared key prefixes, 0 to 60 bytes, some prefixes of others, with 0x00 and 0xFF.
fn prefixes() -> Vec<Vec<u8>> {
    let uuid = b"bdd73226-2feb-6e95-28ef-e333b266f103\x00\x01".to_vec();
    let mut node = b"node-0123456789abcdef".to_vec();
    node.truncate(20);
    let mut long = vec![b'p'; 59];
    long.push(b'q');
    let mut long_ff = vec![0xFF; 40];
    long_ff.extend_from_slice(&[0x00; 20]);
    vec![
        Vec::new(),
        vec![0x00],
        vec![0xFF, 0xFF],
        b"a".to_vec(),
        b"ab".to_vec(),
        node.clone(),
        [node.as_slice(), b"x"].concat(),
        uuid,
        long[..30].to_vec(),
        long,
        long_ff,
    ]
}

/// How a bulk operation orders its keys.
#[derive(Debug, Clone, Copy)]
enum Order {
    Ascending,
    Descending,
    Scattered,
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>),
    Remove(Vec<u8>),
    Get(Vec<u8>),
    /// Bounds, then the pattern of front (true) and back (false) reads, cycled.
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>, Vec<bool>),
    /// Inserts `count` counter keys `prefix ‖ be32(start + i * stride)`.
    InsertMany {
        prefix: usize,
        start: u32,
        count: u32,
        stride: u32,
        order: Order,
    },
    /// Removes the same family of keys (present or not).
    RemoveMany {
        prefix: usize,
        start: u32,
        count: u32,
        stride: u32,
        order: Order,
    },
    /// Inserts the keys, sorted and deduplicated, as one batch (`insert_sorted`).
    InsertSorted(Vec<Vec<u8>>),
    /// Inserts the same family of keys as `InsertMany`, as one sorted batch.
    InsertManySorted {
        prefix: usize,
        start: u32,
        count: u32,
        stride: u32,
    },
    /// Removes every key within the bounds (one by one).
    RemoveRange(Bound<Vec<u8>>, Bound<Vec<u8>>),
    /// Replaces the map by one built from its entries (`FromIterator`).
    Rebuild,
    /// Retains a clone of the map with a copy of the model.
    Snapshot,
    /// Drops retained clone `i % len`.
    DropSnapshot(usize),
    /// Compares the map and every retained clone with their models in full.
    Check,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    let n = prefixes().len();
    prop_oneof![
        // Small space: keys collide, and are prefixes of each other.
        (0..n, vec(select(vec![0x00u8, 0x01, b'a', 0xFF]), 0..3)),
        // Large space, short and long keys.
        (0..n, vec(any::<u8>(), 0..40)),
        // Counter keys, as the bulk operations make them.
        (0..n, (0u32..3000).prop_map(|c| c.to_be_bytes().to_vec())),
    ]
    .prop_map(|(p, tail)| [prefixes()[p].as_slice(), &tail].concat())
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key().prop_map(Bound::Included),
        2 => key().prop_map(Bound::Excluded),
    ]
}

fn order() -> impl Strategy<Value = Order> {
    prop_oneof![
        Just(Order::Ascending),
        Just(Order::Descending),
        Just(Order::Scattered)
    ]
}

fn many() -> impl Strategy<Value = (usize, u32, u32, u32, Order)> {
    (
        0..prefixes().len(),
        0u32..2000,
        1u32..1500,
        prop_oneof![Just(1u32), Just(2), Just(7), Just(1 << 24)],
        order(),
    )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => key().prop_map(Op::Insert),
        12 => key().prop_map(Op::Remove),
        8 => key().prop_map(Op::Get),
        6 => (bound(), bound(), vec(any::<bool>(), 1..6))
            .prop_map(|(lo, hi, p)| Op::Range(lo, hi, p)),
        3 => many().prop_map(|(prefix, start, count, stride, order)| Op::InsertMany {
            prefix, start, count, stride, order
        }),
        2 => many().prop_map(|(prefix, start, count, stride, order)| Op::RemoveMany {
            prefix, start, count, stride, order
        }),
        3 => vec(key(), 0..150).prop_map(Op::InsertSorted),
        3 => many().prop_map(|(prefix, start, count, stride, _)| Op::InsertManySorted {
            prefix, start, count, stride
        }),
        2 => (bound(), bound()).prop_map(|(lo, hi)| Op::RemoveRange(lo, hi)),
        1 => Just(Op::Rebuild),
        3 => Just(Op::Snapshot),
        1 => any::<usize>().prop_map(Op::DropSnapshot),
        2 => Just(Op::Check),
    ]
}

fn many_keys(prefix: usize, start: u32, count: u32, stride: u32, order: Order) -> Vec<Vec<u8>> {
    let p = &prefixes()[prefix];
    let mut idx: Vec<u32> = (0..count).collect();
    match order {
        Order::Ascending => {}
        Order::Descending => idx.reverse(),
        // A fixed permutation: sorted by a multiplicative hash.
        Order::Scattered => idx.sort_by_key(|i| i.wrapping_mul(0x9E37_79B9)),
    }
    idx.into_iter()
        .map(|i| {
            let c = start.wrapping_add(i.wrapping_mul(stride));
            [p.as_slice(), &c.to_be_bytes()].concat()
        })
        .collect()
}

struct Run {
    map: PMap<u64>,
    model: Model,
    snapshots: Vec<(PMap<u64>, Model)>,
    next_value: u64,
}

impl Run {
    fn insert(&mut self, k: &[u8]) {
        self.next_value += 1;
        let v = self.next_value;
        assert_eq!(
            self.map.insert(k, v),
            self.model.insert(k.to_vec(), v),
            "insert {k:?}"
        );
    }

    /// One batch: the map's count of new keys and every value as the model's.
    fn insert_sorted(&mut self, keys: Vec<Vec<u8>>) {
        crate::pmap_check::insert_sorted(
            &mut self.map,
            &mut self.model,
            &mut self.next_value,
            keys,
        );
    }

    fn remove(&mut self, k: &[u8]) {
        assert_eq!(self.map.remove(k), self.model.remove(k), "remove {k:?}");
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Insert(k) => self.insert(k),
            Op::Remove(k) => self.remove(k),
            Op::Get(k) => assert_eq!(self.map.get(k), self.model.get(k), "get {k:?}"),
            Op::Range(lo, hi, pattern) => check_range(&self.map, &self.model, lo, hi, pattern),
            &Op::InsertMany {
                prefix,
                start,
                count,
                stride,
                order,
            } => {
                for k in many_keys(prefix, start, count, stride, order) {
                    self.insert(&k);
                }
            }
            &Op::RemoveMany {
                prefix,
                start,
                count,
                stride,
                order,
            } => {
                for k in many_keys(prefix, start, count, stride, order) {
                    self.remove(&k);
                }
            }
            Op::InsertSorted(keys) => self.insert_sorted(keys.clone()),
            &Op::InsertManySorted {
                prefix,
                start,
                count,
                stride,
            } => {
                self.insert_sorted(many_keys(prefix, start, count, stride, Order::Ascending));
            }
            Op::RemoveRange(lo, hi) => {
                let doomed: Vec<Vec<u8>> = self
                    .model
                    .keys()
                    .filter(|k| within(k, lo, hi))
                    .cloned()
                    .collect();
                for k in doomed {
                    self.remove(&k);
                }
            }
            Op::Rebuild => {
                self.map = self.map.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
            }
            Op::Snapshot => {
                self.snapshots.push((self.map.clone(), self.model.clone()));
                if self.snapshots.len() > 6 {
                    self.snapshots.remove(0);
                }
            }
            Op::DropSnapshot(i) => {
                if !self.snapshots.is_empty() {
                    let n = self.snapshots.len();
                    self.snapshots.remove(i % n);
                }
            }
            Op::Check => self.check_all(),
        }
    }

    fn check_all(&self) {
        check_same(&self.map, &self.model);
        for (map, model) in &self.snapshots {
            check_same(map, model);
        }
    }
}

proptest! {
    #![proptest_config(Config::with_cases(64))]

    #[test]
    fn pmap_matches_btreemap(ops in vec(op(), 1..120)) {
        let mut run = Run {
            map: PMap::new(),
            model: Model::new(),
            snapshots: Vec::new(),
            next_value: 0,
        };
        for op in &ops {
            run.apply(op);
        }
        run.check_all();
    }
}

// Edge cases.

fn model_of(map: &PMap<u64>) -> Model {
    map.iter().map(|(k, v)| (k.to_vec(), *v)).collect()
}

#[test]
fn empty_map() {
    let mut m: PMap<u64> = PMap::new();
    assert!(m.is_empty());
    assert_eq!(m.len(), 0);
    assert_eq!(m.get(b""), None);
    assert_eq!(m.get(b"a"), None);
    assert_eq!(m.iter().next(), None);
    assert_eq!(m.iter().next_back(), None);
    assert_eq!(
        m.range((Bound::Included(&b"a"[..]), Bound::Unbounded))
            .next(),
        None
    );
    assert_eq!(m.remove(b"a"), None);
    assert_eq!(m.first(), None);
    assert_eq!(format!("{m:?}"), "{}");
    m.check_invariants().unwrap();
    let built: PMap<u64> = Vec::<(Vec<u8>, u64)>::new().into_iter().collect();
    assert!(built.is_empty());
    assert_eq!(built, m);
}

#[test]
fn one_key_and_the_empty_key() {
    let mut m = PMap::new();
    assert_eq!(m.insert(b"", 1), None);
    assert_eq!(m.get(b""), Some(&1));
    assert_eq!(m.get(b"\x00"), None);
    assert_eq!(m.insert(b"", 2), Some(1));
    assert_eq!(m.len(), 1);
    m.insert(b"\x00", 3);
    m.insert(b"a", 4);
    assert_eq!(
        m.iter().map(|(k, v)| (k.to_vec(), *v)).collect::<Vec<_>>(),
        vec![(b"".to_vec(), 2), (b"\x00".to_vec(), 3), (b"a".to_vec(), 4)]
    );
    assert_eq!(format!("{m:?}"), r#"{b"": 2, b"\x00": 3, b"a": 4}"#);
    assert_eq!(m.remove(b""), Some(2));
    assert_eq!(m.remove(b""), None);
    assert_eq!(m.remove(b"\x00"), Some(3));
    assert_eq!(m.remove(b"a"), Some(4));
    assert!(m.is_empty());
    m.check_invariants().unwrap();
}

#[test]
fn keys_that_prefix_each_other_and_extreme_bytes() {
    let mut m = PMap::new();
    let mut model = Model::new();
    // "", "\0", "\0\0", …, and the same with 0xFF, and mixed: thousands of keys whose
    // heads are equal, so that the full keys decide.
    let mut v = 0;
    for len in 0..300usize {
        for fill in [0x00u8, 0x01, 0x7F, 0xFE, 0xFF] {
            for tail in [None, Some(0x00u8), Some(0xFF)] {
                let mut k = vec![fill; len];
                k.extend(tail);
                v += 1;
                assert_eq!(m.insert(&k, v), model.insert(k, v));
            }
        }
    }
    check_same(&m, &model);
    let probes: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x00; 7],
        vec![0x00; 8],
        vec![0x00; 9],
        vec![0xFF; 8],
        vec![0xFF; 400],
        [vec![0x00; 64], vec![0x01]].concat(),
    ];
    for p in &probes {
        assert_eq!(m.get(p), model.get(p));
        for (lo, hi) in [
            (Bound::Included(p.clone()), Bound::Unbounded),
            (Bound::Excluded(p.clone()), Bound::Unbounded),
            (Bound::Unbounded, Bound::Included(p.clone())),
            (Bound::Unbounded, Bound::Excluded(p.clone())),
            (Bound::Included(p.clone()), Bound::Included(p.clone())),
            (Bound::Excluded(p.clone()), Bound::Excluded(p.clone())),
        ] {
            check_range(&m, &model, &lo, &hi, &[true, false]);
        }
    }
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for k in keys.iter().step_by(2) {
        assert_eq!(m.remove(k), model.remove(k));
    }
    check_same(&m, &model);
}

#[test]
fn range_bounds() {
    let m: PMap<u64> = (0..1000u64).map(|i| (i.to_be_bytes(), i)).collect();
    let k = |i: u64| i.to_be_bytes();
    let collect = |lo: Bound<&[u8]>, hi: Bound<&[u8]>| -> Vec<u64> {
        m.range((lo, hi)).map(|(_, v)| *v).collect()
    };
    use Bound::{Excluded, Included, Unbounded};
    assert_eq!(
        collect(Included(&k(10)), Excluded(&k(13))),
        vec![10, 11, 12]
    );
    assert_eq!(
        collect(Excluded(&k(10)), Included(&k(13))),
        vec![11, 12, 13]
    );
    assert_eq!(collect(Included(&k(10)), Included(&k(10))), vec![10]);
    assert_eq!(
        collect(Excluded(&k(10)), Excluded(&k(11))),
        Vec::<u64>::new()
    );
    assert_eq!(
        collect(Included(&k(20)), Included(&k(10))),
        Vec::<u64>::new()
    );
    assert_eq!(
        collect(Excluded(&k(10)), Excluded(&k(10))),
        Vec::<u64>::new()
    );
    assert_eq!(collect(Unbounded, Excluded(&k(3))), vec![0, 1, 2]);
    assert_eq!(collect(Excluded(&k(996)), Unbounded), vec![997, 998, 999]);
    assert_eq!(collect(Included(&k(5000)), Unbounded), Vec::<u64>::new());
    assert_eq!(collect(Unbounded, Excluded(&k(0))), Vec::<u64>::new());
    assert_eq!(collect(Unbounded, Unbounded).len(), 1000);
    // Keys between stored ones, shorter and longer.
    assert_eq!(collect(Included(&k(10)[..7]), Excluded(&k(2))), vec![0, 1]);
    let after_10 = [&k(10)[..], &[0]].concat();
    assert_eq!(collect(Included(&after_10), Included(&k(12))), vec![11, 12]);
    // From both ends at once.
    let mut it = m.range((Included(&k(100)[..]), Excluded(&k(105)[..])));
    assert_eq!(it.next().map(|(_, v)| *v), Some(100));
    assert_eq!(it.next_back().map(|(_, v)| *v), Some(104));
    assert_eq!(it.next_back().map(|(_, v)| *v), Some(103));
    assert_eq!(it.next().map(|(_, v)| *v), Some(101));
    assert_eq!(it.next().map(|(_, v)| *v), Some(102));
    assert_eq!(it.next_back(), None);
    assert_eq!(it.next(), None);
    // A prefix scan, as the engine does it: from the prefix, stopped by the caller.
    let prefix = &k(0x0300)[..7];
    let scanned: Vec<u64> = m
        .range((Included(prefix), Unbounded))
        .take_while(|(key, _)| key.starts_with(prefix))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(scanned, (0x300..0x3E8).collect::<Vec<_>>());
}

#[test]
fn removing_everything() {
    for n in [1usize, 2, 63, 64, 65, 200, 5000] {
        let mut m = PMap::new();
        for i in 0..n {
            m.insert(format!("key-{i:05}").as_bytes(), i);
        }
        let snapshot = m.clone();
        for i in (0..n).rev() {
            assert_eq!(m.remove(format!("key-{i:05}").as_bytes()), Some(i));
            if i % 97 == 0 {
                m.check_invariants().unwrap();
            }
        }
        assert!(m.is_empty());
        assert_eq!(m.iter().next(), None);
        m.check_invariants().unwrap();
        assert_eq!(snapshot.len(), n);
        assert_eq!(
            snapshot.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>()
        );
        snapshot.check_invariants().unwrap();
    }
}

/// A deterministic permutation of `0..n`.
fn scattered(n: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    let mut s: u64 = 0x2545_F491_4F6C_DD1D;
    for i in (1..v.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

fn uuid_key(i: u32) -> Vec<u8> {
    let h = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{:016x}-{:08x}-{:011x}\0\x01", h, i, h >> 20).into_bytes()
}

#[test]
fn hundred_thousand_sequential_and_random() {
    const N: u32 = 100_000;
    // Sequential inserts (each key after the last), with a snapshot held halfway.
    let mut m = PMap::new();
    let mut half = None;
    for i in 0..N {
        m.insert(&i.to_be_bytes(), u64::from(i));
        if i == N / 2 {
            half = Some(m.clone());
        }
    }
    m.check_invariants().unwrap();
    assert_eq!(m.len(), N as usize);
    let half = half.unwrap();
    assert_eq!(half.len(), N as usize / 2 + 1);
    assert!(half.iter().map(|(_, v)| *v).eq(0..=u64::from(N / 2)));
    for i in scattered(N) {
        assert_eq!(m.get(&i.to_be_bytes()), Some(&u64::from(i)));
    }
    for i in 0..N {
        assert_eq!(m.remove(&i.to_be_bytes()), Some(u64::from(i)));
    }
    assert!(m.is_empty());
    half.check_invariants().unwrap();
    assert_eq!(half.get(&(N / 2).to_be_bytes()), Some(&u64::from(N / 2)));

    // Random inserts of UUID-like keys, then random removes, against a model.
    let order = scattered(N);
    let mut m = PMap::new();
    let mut model = Model::new();
    for &i in &order {
        let k = uuid_key(i);
        assert_eq!(m.insert(&k, u64::from(i)), model.insert(k, u64::from(i)));
    }
    check_same(&m, &model);
    let before = m.clone();
    let built: PMap<u64> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    built.check_invariants().unwrap();
    assert_eq!(built, m);
    for &i in order.iter().rev() {
        let k = uuid_key(i);
        if i % 3 != 0 {
            assert_eq!(m.remove(&k), model.remove(&k));
        }
    }
    check_same(&m, &model);
    assert_eq!(before.len(), N as usize);
    assert_eq!(model_of(&before).len(), N as usize);
    before.check_invariants().unwrap();
}

#[test]
fn clones_keep_their_contents_and_share_until_written() {
    let mut a: PMap<u64> = (0..5000u64).map(|i| (i.to_be_bytes(), i)).collect();
    let b = a.clone();
    assert!(a.ptr_eq(&b));
    // A remove of an absent key copies nothing.
    assert_eq!(a.remove(b"absent"), None);
    assert!(a.ptr_eq(&b));
    a.insert(&7u64.to_be_bytes(), 70);
    assert!(!a.ptr_eq(&b));
    assert_eq!(b.get(&7u64.to_be_bytes()), Some(&7));
    assert_eq!(a.get(&7u64.to_be_bytes()), Some(&70));
    assert_ne!(a, b);
    a.insert(&7u64.to_be_bytes(), 7);
    assert_eq!(a, b);
}

/// Random inserts and removes over a fixed key space, in phases that mostly insert
/// and phases that mostly remove: nodes split, merge, and share entries with siblings
/// of every fill.
#[test]
fn churn_rebalances_with_siblings_of_every_fill() {
    let mut m = PMap::new();
    let mut model = Model::new();
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut snapshots = Vec::new();
    for step in 0..60_000u32 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        // The live size swings between about 1,000 and 3,000 of 4,000 keys.
        let insert_below = if (step / 6_000) % 2 == 0 { 3 } else { 1 };
        let k = uuid_key((s % 4_000) as u32);
        if (s >> 62) < insert_below {
            assert_eq!(
                m.insert(&k, u64::from(step)),
                model.insert(k, u64::from(step))
            );
        } else {
            assert_eq!(m.remove(&k), model.remove(&k));
        }
        if step % 2_000 == 0 {
            m.check_invariants().unwrap();
            snapshots.push((m.clone(), model.clone()));
        }
    }
    check_same(&m, &model);
    for (map, model) in &snapshots {
        check_same(map, model);
    }
}

/// A bulk-built map has full nodes: removing a run of keys empties the leaves of one
/// inner node until it underflows next to full siblings, so inner nodes (not only
/// leaves) share their children evenly instead of merging.
#[test]
fn bulk_built_then_runs_removed() {
    let n = 64 * 64 * 5;
    let mut model: Model = (0..n).map(|i: u64| (uuid_key(i as u32), i)).collect();
    let mut m: PMap<u64> = model.iter().map(|(k, v)| (k.as_slice(), *v)).collect();
    check_same(&m, &model);
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    let snapshot = (m.clone(), model.clone());
    // A run from the front, one from the middle (from its end backwards), one at the end.
    let runs = [(0, 6_000), (9_000, 15_000), (19_000, keys.len())];
    for (r, &(from, to)) in runs.iter().enumerate() {
        let run: Box<dyn Iterator<Item = usize>> = if r == 1 {
            Box::new((from..to).rev())
        } else {
            Box::new(from..to)
        };
        for (j, i) in run.enumerate() {
            assert_eq!(m.remove(&keys[i]), model.remove(&keys[i]));
            if j % 500 == 0 {
                m.check_invariants().unwrap();
            }
        }
        check_same(&m, &model);
    }
    check_same(&snapshot.0, &snapshot.1);
}

/// Nodes whose keys share a 60-byte prefix, probed with keys that leave it at every
/// byte (below and above it), that stop inside it, and that extend it.
#[test]
fn probes_leaving_a_long_shared_prefix_at_every_byte() {
    let prefix: Vec<u8> = (0..60u8).map(|i| 0x40 + i).collect();
    let mut m = PMap::new();
    let mut model = Model::new();
    for i in 0..500u32 {
        let k = [prefix.as_slice(), &i.to_be_bytes()].concat();
        m.insert(&k, u64::from(i));
        model.insert(k, u64::from(i));
    }
    // One key well below, so that the root is not all one prefix.
    m.insert(b"\x00", 9999);
    model.insert(b"\x00".to_vec(), 9999);
    let mut probes = Vec::new();
    for j in 0..prefix.len() {
        for delta in [-1i16, 1] {
            let mut p = prefix[..=j].to_vec();
            p[j] = (i16::from(p[j]) + delta) as u8;
            probes.push(p.clone());
            p.extend_from_slice(&prefix[j + 1..]);
            probes.push(p);
        }
        probes.push(prefix[..j].to_vec());
    }
    probes.push(prefix.clone());
    probes.push([prefix.as_slice(), &[0, 0, 1, 0, 0]].concat());
    for p in &probes {
        assert_eq!(m.get(p), model.get(p), "get {p:?}");
        for (lo, hi) in [
            (Bound::Included(p.clone()), Bound::Unbounded),
            (Bound::Unbounded, Bound::Excluded(p.clone())),
        ] {
            check_range(&m, &model, &lo, &hi, &[true, false, false]);
        }
    }
    check_same(&m, &model);
}

/// Index-shaped keys (`group id ‖ entry id`): many keys per group share a long
/// prefix and their first bytes after the node prefix ("runs"). Probes leave a group's
/// prefix at every byte, below and above, or match it and vary the entry.
#[test]
fn runs_of_keys_sharing_long_prefixes() {
    let group = |g: u32| format!("group-{g:03}-{}", "f".repeat(30)).into_bytes();
    let mut m = PMap::new();
    let mut model = Model::new();
    for g in 0..40u32 {
        for j in 0..12u32 {
            let k = [group(g).as_slice(), &(j * 2).to_be_bytes()].concat();
            let v = u64::from(g * 100 + j);
            m.insert(&k, v);
            model.insert(k, v);
        }
    }
    check_same(&m, &model);
    let mut probes = Vec::new();
    for g in [0u32, 1, 7, 20, 39] {
        let p = group(g);
        for at in 0..p.len() {
            for delta in [-1i16, 1] {
                let mut q = p.clone();
                q[at] = (i16::from(q[at]) + delta) as u8;
                probes.push([q.as_slice(), &7u32.to_be_bytes()].concat());
                probes.push(q[..=at].to_vec());
            }
            probes.push(p[..at].to_vec());
        }
        for j in 0..26u32 {
            probes.push([p.as_slice(), &j.to_be_bytes()].concat());
            probes.push([p.as_slice(), &j.to_be_bytes()[..3]].concat());
            probes.push([p.as_slice(), &j.to_be_bytes(), &[0]].concat());
        }
    }
    for q in &probes {
        assert_eq!(m.get(q), model.get(q), "get {q:?}");
        for lo in [Bound::Included(q.clone()), Bound::Excluded(q.clone())] {
            check_range(&m, &model, &lo, &Bound::Excluded(q.clone()), &[true, false]);
            let first = m.range((as_ref(&lo), Bound::Unbounded)).next();
            let want = model
                .range::<Vec<u8>, _>((lo.clone(), Bound::Unbounded))
                .next()
                .map(|(k, v)| (KeyRef::from(k), v));
            assert_eq!(first, want, "first from {lo:?}");
        }
    }
    // Removing and re-inserting inside the runs keeps them searchable.
    for q in probes.iter().step_by(3) {
        assert_eq!(m.insert(q, 1), model.insert(q.clone(), 1));
    }
    check_same(&m, &model);
    for q in probes.iter().step_by(2) {
        assert_eq!(m.remove(q), model.remove(q));
    }
    check_same(&m, &model);
}

/// An index's keys (a node id, then an allocation id), grouped by node id in their
/// leaves: a prefix scan of each node id, of ids between them, of shorter and longer
/// prefixes, and of a node whose entries fill several leaves.
#[test]
fn prefix_scans_of_index_entries_grouped_by_node() {
    let node = |i: u32| {
        format!(
            "{:08x}-2feb-6e95-28ef-e333b266f103\0\x01",
            i.wrapping_mul(0x9E37_79B9)
        )
    };
    let mut m = PMap::new();
    let mut model = Model::new();
    let mut v = 0;
    for i in 0..400u32 {
        // Node 7 has 300 allocations (several leaves), the others 1 to 12.
        let allocs = if i == 7 { 300 } else { 1 + i % 12 };
        for a in 0..allocs {
            let k = format!(
                "{}{:08x}-0000-0000-0000-000000000000\0\x01",
                node(i),
                a * 77
            );
            m.insert(k.as_bytes(), v);
            model.insert(k.into_bytes(), v);
            v += 1;
        }
    }
    m.check_invariants().unwrap();
    let mut probes: Vec<Vec<u8>> = Vec::new();
    for i in 0..400u32 {
        let n = node(i).into_bytes();
        probes.push(n.clone());
        // Shorter: the id without its terminator, or its first bytes.
        probes.push(n[..n.len() - 2].to_vec());
        probes.push(n[..4].to_vec());
        // Longer than the group prefix: one allocation's key, and past it.
        let first = model.range(n.clone()..).next().unwrap().0.clone();
        probes.push(first.clone());
        probes.push([first.as_slice(), b"x"].concat());
        // Absent: just below and above the id.
        let mut below = n.clone();
        *below.last_mut().unwrap() = 0;
        probes.push(below);
        let mut above = n.clone();
        *above.last_mut().unwrap() = 2;
        probes.push(above);
    }
    probes.push(Vec::new());
    probes.push(vec![0xFF]);
    for p in &probes {
        crate::pmap_check::check_prefix(&m, &model, p);
    }
}
