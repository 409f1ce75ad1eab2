//! `PMap` (the engine's own persistent B+tree) against `imbl::OrdMap<Key, Arc<u64>>`,
//! the map the engine stores tables in today (`root.rs`: `OrdMap<Key, Row>`, a row an
//! `Arc`), at 100,000 keys shaped like the engine's:
//!
//! - `primary`: `Key::str(uuid)`, a 36-character id encoded with its terminator (38
//!   bytes), as the allocs table;
//! - `index`: `Key::str(node) ‖ Key::str(alloc)` (76 bytes), 10 allocs on each of
//!   10,000 nodes, as the allocs-by-node index.
//!
//! Ids from SplitMix64 exactly as the engine benchmark (`benches/common/splitmix.rs`).
//! Benchmarks, each for both maps and both key shapes:
//!
//! - `get`: a random existing key;
//! - `overwrite_held` / `insert_remove_held`: a write to a map whose previous version
//!   is held (a clone taken before each write, released at the next), so the write
//!   copies its path: replacing a random key's value; inserting a new key and removing
//!   it again (two writes);
//! - `range10` (primary): the 10 entries from a random key on; `prefix10` (index): the
//!   10 entries of a random node, as `View::index_eq` scans them (from the prefix,
//!   stopped at the first key without it);
//! - `load_inserts`: 100,000 inserts in random order into a new, uniquely owned map;
//!   `load_from_iter`: `FromIterator` of the same (PMap sorts and builds bottom-up;
//!   imbl inserts one by one).
//!
//! Heap bytes after a load are counted by this binary's global allocator (requested
//! bytes, the allocator's own overhead not included) and printed first, as
//! `# heap …` lines: the map alone, with keys built and values allocated beforehand
//! (PMap copies the key bytes into its nodes; `Key` stores them inline).
//!
//! `cargo bench -p schedstate-engine --bench pmap`; one group with e.g.
//! `cargo bench -p schedstate-engine --bench pmap -- get`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group};
use imbl::OrdMap;
use schedstate_engine::{Key, PMap};

#[path = "../../../benches/common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix64;

const NODES: usize = 10_000;
const PER_NODE: usize = 10;
const N: usize = NODES * PER_NODE;
const LOOKUPS: usize = 1 << 20;

// ---- counting allocator -------------------------------------------------------------

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn signed(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is
// only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(signed(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(signed(layout.size()), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(signed(layout.size()), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(signed(new_size) - signed(layout.size()), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

// ---- the two maps behind one interface ----------------------------------------------

trait Map: Clone {
    const NAME: &'static str;
    fn empty() -> Self;
    fn put(&mut self, k: &Key, v: Arc<u64>);
    fn del(&mut self, k: &Key);
    fn fetch(&self, k: &Key) -> Option<&Arc<u64>>;
    /// Sum of the first `n` values from `k` on.
    fn scan_from(&self, k: &Key, n: usize) -> u64;
    /// Number of entries whose key starts with `prefix`, scanned as the engine does.
    fn scan_prefix(&self, prefix: &Key) -> usize;
    fn collect(entries: &[(Key, Arc<u64>)]) -> Self;
}

impl Map for PMap<Arc<u64>> {
    const NAME: &'static str = "pmap";

    fn empty() -> Self {
        PMap::new()
    }

    fn put(&mut self, k: &Key, v: Arc<u64>) {
        self.insert(k.as_bytes(), v);
    }

    fn del(&mut self, k: &Key) {
        self.remove(k.as_bytes());
    }

    fn fetch(&self, k: &Key) -> Option<&Arc<u64>> {
        self.get(k.as_bytes())
    }

    fn scan_from(&self, k: &Key, n: usize) -> u64 {
        self.range((Bound::Included(k.as_bytes()), Bound::Unbounded))
            .take(n)
            .map(|(_, v)| **v)
            .sum()
    }

    fn scan_prefix(&self, prefix: &Key) -> usize {
        let p = prefix.as_bytes();
        self.range((Bound::Included(p), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(p))
            .fold(0, |n, (_, v)| {
                black_box(v);
                n + 1
            })
    }

    fn collect(entries: &[(Key, Arc<u64>)]) -> Self {
        entries
            .iter()
            .map(|(k, v)| (k.as_bytes(), Arc::clone(v)))
            .collect()
    }
}

impl Map for OrdMap<Key, Arc<u64>> {
    const NAME: &'static str = "imbl";

    fn empty() -> Self {
        OrdMap::new()
    }

    fn put(&mut self, k: &Key, v: Arc<u64>) {
        self.insert(k.clone(), v);
    }

    fn del(&mut self, k: &Key) {
        self.remove(k);
    }

    fn fetch(&self, k: &Key) -> Option<&Arc<u64>> {
        self.get(k)
    }

    fn scan_from(&self, k: &Key, n: usize) -> u64 {
        self.range::<_, Key>((Bound::Included(k), Bound::Unbounded))
            .take(n)
            .map(|(_, v)| **v)
            .sum()
    }

    fn scan_prefix(&self, prefix: &Key) -> usize {
        self.range::<_, Key>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix.as_bytes()))
            .fold(0, |n, (_, v)| {
                black_box(v);
                n + 1
            })
    }

    fn collect(entries: &[(Key, Arc<u64>)]) -> Self {
        entries
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect()
    }
}

// ---- data ----------------------------------------------------------------------------

struct Data {
    /// `(key, value)` in insertion (random) order.
    primary: Vec<(Key, Arc<u64>)>,
    index: Vec<(Key, Arc<u64>)>,
    /// `Key::str(node)`: the prefix of that node's index entries.
    node_prefixes: Vec<Key>,
    /// Keys absent from both datasets, for insert-then-remove.
    fresh: Vec<Key>,
}

fn data() -> Data {
    // As the engine benchmark (and the go-memdb peer): per node its id, two plugin
    // draws, then its allocs' ids.
    let mut rng = SplitMix64(42);
    let mut nodes = Vec::with_capacity(NODES);
    let mut allocs = Vec::with_capacity(N);
    for _ in 0..NODES {
        nodes.push(rng.uuid());
        let _ = rng.intn(10);
        let _ = rng.intn(9);
        allocs.extend((0..PER_NODE).map(|_| rng.uuid()));
    }
    assert_eq!(
        allocs[0], "09bc585a-2448-23f2-de44-31fa3c80db06",
        "dataset drift"
    );
    let primary: Vec<(Key, Arc<u64>)> = allocs
        .iter()
        .enumerate()
        .map(|(i, id)| (Key::str(id), Arc::new(i as u64)))
        .collect();
    let index: Vec<(Key, Arc<u64>)> = allocs
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let k = Key::builder().str(&nodes[i / PER_NODE]).str(id).build();
            (k, Arc::new(i as u64))
        })
        .collect();
    assert_eq!(primary[0].0.as_bytes().len(), 38);
    assert_eq!(index[0].0.as_bytes().len(), 76);
    let node_prefixes = nodes.iter().map(|n| Key::str(n)).collect();
    let mut rng = SplitMix64(777);
    let fresh = (0..4096).map(|_| Key::str(&rng.uuid())).collect();
    Data {
        primary,
        index,
        node_prefixes,
        fresh,
    }
}

fn load<M: Map>(entries: &[(Key, Arc<u64>)]) -> M {
    let mut m = M::empty();
    for (k, v) in entries {
        m.put(k, Arc::clone(v));
    }
    m
}

/// Prints the heap the map takes after loading `entries` by inserts and by
/// `FromIterator`.
fn report_heap<M: Map>(shape: &str, entries: &[(Key, Arc<u64>)]) {
    let base = live();
    let m: M = load(entries);
    let by_inserts = live() - base;
    drop(m);
    let base = live();
    let m = M::collect(entries);
    let by_collect = live() - base;
    drop(m);
    let mib = |b: isize| b as f64 / 1_048_576.0;
    println!(
        "# heap {} {shape}: inserts {:.2} MiB ({} B/entry), from_iter {:.2} MiB ({} B/entry)",
        M::NAME,
        mib(by_inserts),
        by_inserts / entries.len() as isize,
        mib(by_collect),
        by_collect / entries.len() as isize,
    );
}

fn indexes(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = SplitMix64(seed);
    (0..LOOKUPS).map(|_| rng.intn(n) as u32).collect()
}

// ---- benchmarks ----------------------------------------------------------------------

fn bench_map<M: Map>(c: &mut Criterion, shape: &str, entries: &[(Key, Arc<u64>)], d: &Data) {
    let name = |what: &str| format!("{what}/{}/{shape}", M::NAME);
    let map: M = load(entries);

    let order = indexes(1001, entries.len());
    let mut i = 0usize;
    c.bench_function(&name("get"), |b| {
        b.iter(|| {
            let k = &entries[order[i] as usize].0;
            i = (i + 1) % LOOKUPS;
            black_box(map.fetch(black_box(k)))
        })
    });

    let mut m = map.clone();
    let mut held = m.clone();
    let mut i = 0usize;
    let value = Arc::new(7u64);
    c.bench_function(&name("overwrite_held"), |b| {
        b.iter(|| {
            held = m.clone();
            let k = &entries[order[i] as usize].0;
            i = (i + 1) % LOOKUPS;
            m.put(k, Arc::clone(&value));
        })
    });
    drop((m, held));

    let mut m = map.clone();
    let mut held = m.clone();
    let mut i = 0usize;
    c.bench_function(&name("insert_remove_held"), |b| {
        b.iter(|| {
            let k = &d.fresh[i % d.fresh.len()];
            i += 1;
            held = m.clone();
            m.put(k, Arc::clone(&value));
            held = m.clone();
            m.del(k);
        })
    });
    drop((m, held));

    if shape == "primary" {
        let mut i = 0usize;
        c.bench_function(&name("range10"), |b| {
            b.iter(|| {
                let k = &entries[order[i] as usize].0;
                i = (i + 1) % LOOKUPS;
                map.scan_from(black_box(k), 10)
            })
        });
    } else {
        let order = indexes(2001, NODES);
        let mut i = 0usize;
        c.bench_function(&name("prefix10"), |b| {
            b.iter(|| {
                let p = &d.node_prefixes[order[i] as usize];
                i = (i + 1) % LOOKUPS;
                let n = map.scan_prefix(black_box(p));
                assert_eq!(n, PER_NODE);
                n
            })
        });
    }
    drop(map);

    let mut slow = c.benchmark_group("load");
    slow.sample_size(10);
    slow.bench_function(name("load_inserts"), |b| {
        b.iter_batched(|| (), |()| load::<M>(entries), BatchSize::PerIteration)
    });
    slow.bench_function(name("load_from_iter"), |b| {
        b.iter_batched(|| (), |()| M::collect(entries), BatchSize::PerIteration)
    });
    slow.finish();
}

/// A plugin's worth of lookups (2,100 sorted keys of the 100,000), one `get` each
/// against one `get_many`. Each iteration takes the next of 48 disjoint key sets, so
/// the paths it reads were last read ~48 iterations (~100,000 lookups) before: the
/// cache misses of a large table, not a warm loop over the same keys.
fn bench_batched(c: &mut Criterion, entries: &[(Key, Arc<u64>)]) {
    const PER_SET: usize = 2_100;
    const SETS: usize = 48;
    let map: PMap<Arc<u64>> = load(entries);
    let order = indexes(3001, entries.len());
    let sets: Vec<Vec<&[u8]>> = order
        .chunks(PER_SET)
        .take(SETS)
        .map(|set| {
            let mut keys: Vec<&[u8]> = set
                .iter()
                .map(|&i| entries[i as usize].0.as_bytes())
                .collect();
            keys.sort_unstable();
            keys
        })
        .collect();
    let mut i = 0usize;
    c.bench_function("lookup_2100_sorted/one_by_one", |b| {
        b.iter(|| {
            let keys = &sets[i % SETS];
            i += 1;
            keys.iter()
                .filter_map(|k| map.get(k))
                .map(|v| **v)
                .sum::<u64>()
        })
    });
    let mut out = Vec::new();
    let mut i = 0usize;
    c.bench_function("lookup_2100_sorted/get_many", |b| {
        b.iter(|| {
            let keys = &sets[i % SETS];
            i += 1;
            map.get_many(keys, &mut out);
            out.iter().flatten().map(|v| ***v).sum::<u64>()
        })
    });
}

fn benches(c: &mut Criterion) {
    let d = data();
    bench_batched(c, &d.primary);
    for (shape, entries) in [("primary", &d.primary), ("index", &d.index)] {
        report_heap::<PMap<Arc<u64>>>(shape, entries);
        report_heap::<OrdMap<Key, Arc<u64>>>(shape, entries);
    }
    for (shape, entries) in [("primary", &d.primary), ("index", &d.index)] {
        bench_map::<PMap<Arc<u64>>>(c, shape, entries, &d);
        bench_map::<OrdMap<Key, Arc<u64>>>(c, shape, entries, &d);
    }
}

/// `PMAP_AB=rounds`: instead of criterion, the point operations of both maps in
/// alternation, `rounds` rounds of 200,000 operations each, and the median ns per
/// operation of each: load that comes and goes on a shared machine then hits both
/// maps alike (criterion measures one benchmark after the other).
fn ab(rounds: usize) {
    const OPS: usize = 200_000;
    let d = data();
    for (shape, entries) in [("primary", &d.primary), ("index", &d.index)] {
        let p: PMap<Arc<u64>> = load(entries);
        let o: OrdMap<Key, Arc<u64>> = load(entries);
        let order = indexes(1001, entries.len());
        let nodes = indexes(2001, NODES);
        let mut results: Vec<(String, Vec<f64>)> = Vec::new();
        let mut record = |name: String, ns: f64| match results.iter_mut().find(|r| r.0 == name) {
            Some(r) => r.1.push(ns),
            None => results.push((name, vec![ns])),
        };
        fn time(f: impl FnOnce()) -> f64 {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / OPS as f64
        }
        fn ops<M: Map>(
            m: &M,
            shape: &str,
            entries: &[(Key, Arc<u64>)],
            order: &[u32],
            nodes: &[u32],
            d: &Data,
            round: usize,
        ) -> Vec<(&'static str, f64)> {
            let off = round * OPS;
            let get = time(|| {
                for i in 0..OPS {
                    black_box(m.fetch(&entries[order[(off + i) % LOOKUPS] as usize].0));
                }
            });
            let scan = time(|| {
                for i in 0..OPS {
                    if shape == "primary" {
                        black_box(m.scan_from(&entries[order[(off + i) % LOOKUPS] as usize].0, 10));
                    } else {
                        black_box(
                            m.scan_prefix(&d.node_prefixes[nodes[(off + i) % LOOKUPS] as usize]),
                        );
                    }
                }
            });
            let mut w = m.clone();
            let value = Arc::new(7u64);
            let write = time(|| {
                let mut held = w.clone();
                for i in 0..OPS {
                    held = w.clone();
                    w.put(
                        &entries[order[(off + i) % LOOKUPS] as usize].0,
                        Arc::clone(&value),
                    );
                }
                drop(held);
            });
            vec![("get", get), ("scan10", scan), ("overwrite_held", write)]
        }
        for round in 0..rounds {
            for (what, ns) in ops(&p, shape, entries, &order, &nodes, &d, round) {
                record(format!("{what}/{shape}/pmap"), ns);
            }
            for (what, ns) in ops(&o, shape, entries, &order, &nodes, &d, round) {
                record(format!("{what}/{shape}/imbl"), ns);
            }
        }
        for (name, v) in &mut results {
            v.sort_by(f64::total_cmp);
            let _ = name;
        }
        for pair in results.chunks(1) {
            let (name, v) = &pair[0];
            if !name.ends_with("/pmap") {
                continue;
            }
            let other = name.replace("/pmap", "/imbl");
            let Some((_, w)) = results.iter().find(|r| r.0 == other) else {
                continue;
            };
            let (pm, im) = (v[v.len() / 2], w[w.len() / 2]);
            println!(
                "{:<24} pmap median {pm:>7.1} ns (min {:>7.1})  imbl median {im:>7.1} ns (min {:>7.1})  imbl/pmap {:.2} (min {:.2})",
                name.trim_end_matches("/pmap"),
                v[0],
                w[0],
                im / pm,
                w[0] / v[0],
            );
        }
    }
}

criterion_group! {
    name = pmap;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}

/// `PMAP_ONE=<get|scan10|overwrite_held|load>/<primary|index>/<pmap|imbl>/<ops>`: builds
/// that one map and runs that many operations (or loads it that many times), nothing
/// else: for a profiler or a cache simulator
/// (`valgrind --tool=cachegrind`), whose counts do not depend on the machine's load.
/// Run it with 0 operations too, and subtract.
fn one(spec: &str) {
    let parts: Vec<&str> = spec.split('/').collect();
    let [what, shape, map, ops] = parts[..] else {
        panic!("PMAP_ONE=<op>/<shape>/<map>/<ops>");
    };
    let ops: usize = ops.parse().expect("ops");
    let d = data();
    let entries = if shape == "primary" {
        &d.primary
    } else {
        &d.index
    };
    fn run<M: Map>(what: &str, shape: &str, entries: &[(Key, Arc<u64>)], d: &Data, ops: usize) {
        if what == "load" {
            for _ in 0..ops {
                black_box(load::<M>(entries));
            }
            return;
        }
        let m: M = load(entries);
        let order = indexes(1001, entries.len());
        let nodes = indexes(2001, NODES);
        let value = Arc::new(7u64);
        let mut w = m.clone();
        let mut held = w.clone();
        for i in 0..ops {
            let k = &entries[order[i % LOOKUPS] as usize].0;
            match what {
                "get" => {
                    black_box(m.fetch(k));
                }
                // What the other operations cost beside the map: reading the key.
                "touch" => {
                    black_box(k.as_bytes().last());
                }
                "scan10" if shape == "primary" => {
                    black_box(m.scan_from(k, 10));
                }
                "scan10" => {
                    black_box(m.scan_prefix(&d.node_prefixes[nodes[i % LOOKUPS] as usize]));
                }
                _ => {
                    held = w.clone();
                    w.put(k, Arc::clone(&value));
                }
            }
        }
        drop(held);
    }
    match map {
        "pmap" => run::<PMap<Arc<u64>>>(what, shape, entries, &d, ops),
        _ => run::<OrdMap<Key, Arc<u64>>>(what, shape, entries, &d, ops),
    }
}

fn main() {
    if let Ok(spec) = std::env::var("PMAP_ONE") {
        one(&spec);
        return;
    }
    if let Some(rounds) = std::env::var("PMAP_AB").ok().and_then(|r| r.parse().ok()) {
        ab(rounds);
        return;
    }
    pmap();
    Criterion::default().configure_from_args().final_summary();
}
