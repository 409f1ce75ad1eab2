//! The key array against a sorted `Vec`, in both layouts.

use super::*;

/// Index-like keys: `node ‖ alloc`, eight bytes each, `allocs` per node.
fn index_keys(nodes: u64, allocs: u64) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for n in 0..nodes {
        for a in 0..allocs {
            let node = (n * 0x0101_0101_0101 + 0x4142_4344_0000_0000).to_be_bytes();
            let alloc = (a * 7919 + n).to_be_bytes();
            keys.push([node, alloc].concat());
        }
    }
    keys.sort();
    keys
}

/// Everything a search and a read of `keys` can tell equals `model`.
fn same(keys: &Keys, model: &[Vec<u8>]) {
    keys.check().unwrap();
    assert_eq!(keys.len(), model.len());
    assert!(keys.iter().eq(model.iter().map(KeyRef::from)));
    let mut probes: Vec<Vec<u8>> = model.to_vec();
    for k in model {
        let mut below = k.clone();
        *below.last_mut().unwrap() = below.last().unwrap().wrapping_sub(1);
        probes.push(below);
        probes.push([k.as_slice(), &[0]].concat());
        probes.push(k[..k.len() / 2].to_vec());
        probes.push(k[..k.len().min(9)].to_vec());
    }
    probes.push(Vec::new());
    probes.push(vec![0xFF; 20]);
    for q in &probes {
        let want = model.binary_search(q);
        assert_eq!(keys.search(q), want, "search {q:?}");
        if let Some(i) = keys.prefetch_candidate(q) {
            assert!(i <= model.len());
        }
    }
}

#[test]
fn keys_sharing_long_prefixes_keep_each_prefix_once() {
    let model = index_keys(6, 10);
    let keys = Keys::from_sorted(model.iter().map(KeyRef::from));
    assert_eq!(keys.groups, 6, "one group per node");
    // The allocs of a node also share their leading zero bytes.
    let run_at = keys.run_at as usize;
    assert!(run_at >= 8, "{run_at}");
    let whole: usize = model.iter().map(Vec::len).sum();
    assert_eq!(keys.base(), 6 * run_at + 60 * (16 - run_at));
    assert!(keys.base() < whole);
    same(&keys, &model);
}

#[test]
fn keys_without_long_shared_prefixes_stay_whole() {
    // One key per node: no runs, nothing to share.
    let model = index_keys(40, 1);
    let keys = Keys::from_sorted(model.iter().map(KeyRef::from));
    assert_eq!(keys.groups, 0);
    same(&keys, &model);
    // Keys of several widths.
    let mut model = index_keys(3, 5);
    model.push(vec![0xFF; 3]);
    let keys = Keys::from_sorted(model.iter().map(KeyRef::from));
    assert_eq!(keys.groups, 0);
    same(&keys, &model);
}

#[test]
fn inserts_and_removes_keep_grouped_keys_searchable() {
    let mut model = index_keys(4, 8);
    let mut keys = Keys::from_sorted(model.iter().map(KeyRef::from));
    let mut copy = keys.clone();
    assert!(keys.grouped());
    let extra = index_keys(7, 9);
    for (step, k) in extra.iter().enumerate() {
        let Err(i) = model.binary_search(k) else {
            continue;
        };
        if step % 2 == 0 {
            keys.insert(i, k);
            copy = copy.with_inserted(i, k);
        } else {
            copy.insert(i, k);
            keys = keys.with_inserted(i, k);
        }
        model.insert(i, k.clone());
        same(&keys, &model);
        same(&copy, &model);
        if step % 3 == 0 {
            let j = (step * 7) % model.len();
            keys.remove(j);
            copy = copy.with_removed(j);
            model.remove(j);
            same(&keys, &model);
            same(&copy, &model);
        }
    }
    assert!(keys.grouped());
    // Splitting and emptying.
    let right = keys.split_off(model.len() / 2);
    let rest = model.split_off(model.len() / 2);
    same(&keys, &model);
    same(&right, &rest);
    while !model.is_empty() {
        keys.remove(0);
        model.remove(0);
        same(&keys, &model);
    }
}

#[test]
fn a_key_before_every_group_becomes_the_first_prefix() {
    let mut model = index_keys(3, 10);
    let mut keys = Keys::from_sorted(model.iter().map(KeyRef::from));
    assert!(keys.grouped());
    let first = [[0u8; 8], [1u8; 8]].concat();
    keys.insert(0, &first);
    model.insert(0, first);
    same(&keys, &model);
    let last = [[0xFFu8; 8], [1u8; 8]].concat();
    keys.insert(model.len(), &last);
    model.push(last);
    same(&keys, &model);
}

/// The keys a batch adds next to one key.
type NewKeys = dyn Fn(&[u8]) -> Vec<Vec<u8>>;

/// `with_inserted_many` against the keys it should hold, for batches that fit in
/// place and batches that need a rebuild (`None`, then checked through
/// `from_sorted`), in grouped, run and plain arrays.
#[test]
fn several_inserts_at_once_keep_every_layout_searchable() {
    let mut plain: Vec<Vec<u8>> = (0..30u32)
        .map(|i| (i * 1000 + 7).to_be_bytes().to_vec())
        .collect();
    plain.push(vec![0xFF, 0, 0]);
    let layouts = [index_keys(4, 8), index_keys(40, 1), plain];
    let batches: [&NewKeys; 6] = [
        // Next to existing keys (same groups, same runs).
        &|k| {
            let mut a = k.to_vec();
            *a.last_mut().unwrap() = a.last().unwrap().wrapping_add(1);
            vec![a]
        },
        &|k| {
            let mut a = k.to_vec();
            *a.last_mut().unwrap() ^= 1;
            vec![a]
        },
        // Two side by side.
        &|k| {
            let mut a = k.to_vec();
            let mut b = k.to_vec();
            *a.last_mut().unwrap() = a.last().unwrap().wrapping_add(1);
            *b.last_mut().unwrap() = b.last().unwrap().wrapping_add(2);
            vec![a, b]
        },
        // A different head: the byte before the last moved.
        &|k| {
            let mut a = k.to_vec();
            let at = a.len() - 2;
            a[at] = a[at].wrapping_add(1);
            vec![a]
        },
        // A different head, further in.
        &|k| {
            let mut a = k.to_vec();
            let at = a.len().min(5) - 1;
            a[at] = a[at].wrapping_add(128);
            vec![a]
        },
        // A new group or prefix.
        &|k| vec![[&[0x42], k].concat()[..k.len()].to_vec(), vec![0; k.len()]],
    ];
    for model in layouts {
        let keys = Keys::from_sorted(model.iter().map(KeyRef::from));
        let mut in_place = 0;
        for batch in batches {
            for stride in [1, 3, 7] {
                let mut new: Vec<Vec<u8>> = model
                    .iter()
                    .step_by(stride)
                    .flat_map(|k| batch(k))
                    .filter(|k| model.binary_search(k).is_err())
                    .collect();
                new.sort();
                new.dedup();
                let inserts: Vec<(usize, &[u8])> = new
                    .iter()
                    .map(|k| (model.binary_search(k).unwrap_err(), k.as_slice()))
                    .collect();
                let mut want = model.clone();
                want.extend(new.iter().cloned());
                want.sort();
                match keys.with_inserted_many(&inserts) {
                    Some(got) => {
                        in_place += 1;
                        same(&got, &want);
                    }
                    None => same(&Keys::from_sorted(want.iter().map(KeyRef::from)), &want),
                }
            }
        }
        assert!(in_place > 0, "some batches fit in place: {model:?}");
    }
}
