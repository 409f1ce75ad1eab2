//! The `pmap` target: the engine's persistent B+tree (`PMap`) against a `BTreeMap`
//! model. Up to 512 operations decoded from the input — inserts, removes, gets,
//! ranges read from both ends, runs of counter keys inserted (one by one or as one
//! sorted batch) or removed (splits, merges, redistribution), rebuilds through
//! `FromIterator`, retained clones — over keys with shared prefixes of 0 to 60 bytes,
//! short and long, with 0x00 and 0xFF.
//! Every result is compared with the model; at check operations the map and the
//! oldest retained clone, and at the end the map and every retained clone, must equal
//! their models exactly (contents, length, order from both ends, sampled gets, ranges)
//! and pass `check_invariants`.
//!
//! The logic lives here rather than in `src/harness/` (it needs nothing of the
//! store); it decodes with the same `Input` reader as the other targets.
#![no_main]

use std::ops::Bound;

use schedstate::engine::{KeyRef, PMap};
use schedstate_fuzz::harness::input::Input;

#[path = "../../crates/engine/tests/engine/pmap_check.rs"]
mod pmap_check;
use pmap_check::{Model, check_range, within};

/// Operations per input, at most.
const MAX_OPS: usize = 512;
/// Clones retained at once.
const MAX_SNAPSHOTS: usize = 6;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    run(data);
});

fn prefixes() -> [Vec<u8>; 9] {
    let mut long = vec![b'p'; 59];
    long.push(b'q');
    let mut long_ff = vec![0xFF; 40];
    long_ff.extend_from_slice(&[0x00; 20]);
    [
        Vec::new(),
        vec![0x00],
        vec![0xFF, 0xFF],
        b"a".to_vec(),
        b"node-0123456789abcde".to_vec(),
        b"node-0123456789abcdex".to_vec(),
        b"bdd73226-2feb-6e95-28ef-e333b266f103\x00\x01".to_vec(),
        long,
        long_ff,
    ]
}

struct Run<'a> {
    input: Input<'a>,
    prefixes: [Vec<u8>; 9],
    map: PMap<u64>,
    model: Model,
    snapshots: Vec<(PMap<u64>, Model)>,
    next_value: u64,
}

fn run(data: &[u8]) {
    let mut r = Run {
        input: Input::new(data),
        prefixes: prefixes(),
        map: PMap::new(),
        model: Model::new(),
        snapshots: Vec::new(),
        next_value: 0,
    };
    for _ in 0..MAX_OPS {
        if r.input.is_empty() {
            break;
        }
        r.step();
    }
    r.check_all();
}

impl Run<'_> {
    fn key(&mut self) -> Vec<u8> {
        let mut k = self.prefixes[self.input.below(self.prefixes.len())].clone();
        match self.input.below(4) {
            // Small space: keys collide and prefix each other.
            0 => {
                let n = self.input.below(4);
                for _ in 0..n {
                    k.push(self.input.pick(&[0x00, 0x01, b'a', 0xFF]));
                }
            }
            // Any bytes, up to 40.
            1 => {
                let n = self.input.below(41);
                k.extend_from_slice(self.input.take(n));
            }
            // Counter keys, as the runs make them.
            _ => k.extend_from_slice(&u32::from(self.input.u16() % 4096).to_be_bytes()),
        }
        k
    }

    fn bound(&mut self) -> Bound<Vec<u8>> {
        match self.input.below(3) {
            0 => Bound::Unbounded,
            1 => Bound::Included(self.key()),
            _ => Bound::Excluded(self.key()),
        }
    }

    /// Counter keys `prefix ‖ be32(start + i * stride)`, ascending, descending or
    /// scattered.
    fn run_keys(&mut self) -> Vec<Vec<u8>> {
        let prefix = self.prefixes[self.input.below(self.prefixes.len())].clone();
        let start = u32::from(self.input.u16() % 4096);
        // Mostly short runs (fast inputs); one in ten up to 4,081 keys (deep trees).
        let scale = if self.input.chance(10) { 16 } else { 1 };
        let count = 1 + scale * u32::from(self.input.byte());
        let stride = self.input.pick(&[1u32, 1, 2, 7, 1 << 24]);
        let mut idx: Vec<u32> = (0..count).collect();
        match self.input.below(3) {
            0 => {}
            1 => idx.reverse(),
            _ => idx.sort_by_key(|i| i.wrapping_mul(0x9E37_79B9)),
        }
        idx.into_iter()
            .map(|i| {
                let c = start.wrapping_add(i.wrapping_mul(stride));
                [prefix.as_slice(), &c.to_be_bytes()].concat()
            })
            .collect()
    }

    fn insert(&mut self, k: &[u8]) {
        self.next_value += 1;
        let v = self.next_value;
        assert_eq!(
            self.map.insert(k, v),
            self.model.insert(k.to_vec(), v),
            "insert {k:?}"
        );
    }

    /// The keys, sorted and deduplicated, as one batch (`insert_sorted`).
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

    fn step(&mut self) {
        match self.input.below(16) {
            0..=4 => {
                let k = self.key();
                self.insert(&k);
            }
            5..=7 => {
                let k = self.key();
                self.remove(&k);
            }
            8 => {
                let k = self.key();
                assert_eq!(self.map.get(&k), self.model.get(&k), "get {k:?}");
            }
            9 => {
                let (lo, hi) = (self.bound(), self.bound());
                // Front (bit set) or back (bit clear), the byte's bits cycled.
                let byte = self.input.byte();
                let pattern: Vec<bool> = (0..8).map(|i| byte >> i & 1 == 1).collect();
                check_range(&self.map, &self.model, &lo, &hi, &pattern);
            }
            10 => {
                let keys = self.run_keys();
                if self.input.bool() {
                    for k in keys {
                        self.insert(&k);
                    }
                } else {
                    self.insert_sorted(keys);
                }
            }
            11 => {
                for k in self.run_keys() {
                    self.remove(&k);
                }
            }
            12 => {
                let (lo, hi) = (self.bound(), self.bound());
                let doomed: Vec<Vec<u8>> = self
                    .model
                    .keys()
                    .filter(|k| within(k, &lo, &hi))
                    .cloned()
                    .collect();
                for k in doomed {
                    self.remove(&k);
                }
            }
            13 => {
                if self.input.bool() {
                    self.map = self.map.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
                } else {
                    self.snapshots.push((self.map.clone(), self.model.clone()));
                    if self.snapshots.len() > MAX_SNAPSHOTS {
                        self.snapshots.remove(0);
                    }
                }
            }
            14 => {
                if !self.snapshots.is_empty() {
                    let i = self.input.below(self.snapshots.len());
                    self.snapshots.remove(i);
                }
            }
            _ => {
                check_same(&self.map, &self.model);
                if let Some((map, model)) = self.snapshots.first() {
                    check_same(map, model);
                }
            }
        }
    }

    fn check_all(&self) {
        check_same(&self.map, &self.model);
        for (map, model) in &self.snapshots {
            check_same(map, model);
        }
    }
}

/// Everything observable of `map` equals `model`, with gets and ranges sampled over
/// at most 512 keys (linear: large inputs keep the fuzzer fast).
fn check_same(map: &PMap<u64>, model: &Model) {
    pmap_check::check_same(map, model, 512);
}
