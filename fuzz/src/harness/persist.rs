//! The `persist` target: damaged and forged persistence files.
//!
//! The first byte picks a mode:
//! - 0: the rest is a snapshot stream for [`StateStore::restore_from`] (into a store
//!   already holding state);
//! - 1: a real snapshot of a state built from the input, then damaged (bytes changed,
//!   inserted, removed, cut), usually with its checksums recomputed so that the damage
//!   reaches the decoder;
//! - 2: the rest is a log segment `wal-00000000000000000001.log`, opened with
//!   [`DurableStore::open_read_only`];
//! - 3: a real log segment of commands decoded from the input, then damaged, usually
//!   with its checksums recomputed.
//!
//! Properties: nothing panics; a failed restore leaves the store exactly as it was; a
//! restored state survives a second round trip and accepts further commands; a log that
//! opens gives a state that passes every invariant (it was built by accepted commands);
//! an undamaged file gives exactly the state it was made from.

use std::path::Path;

use schedstate::model::{CsiVolumeClaim, CsiVolumeClaimMode, Node, id};
use schedstate::persist::{DurableStore, WAL_MAGIC, WAL_VERSION};
use schedstate::state::StateStore;

use super::commands::canonical;
use super::generate::{Gen, fingerprint};
use super::input::Input;

/// Commands used to build a state or a log, at most.
const MAX_COMMANDS: usize = 24;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    match inp.byte() % 4 {
        0 => restore(inp.rest(), None),
        1 => {
            let (source, mut image) = built_snapshot(&mut inp);
            let damaged = damage(&mut inp, &mut image);
            if !inp.chance(15) {
                fix_snapshot_checksums(&mut image);
            }
            restore(&image, (!damaged).then_some(&source));
        }
        2 => open_log(inp.rest(), None),
        _ => {
            let (expected, mut bytes) = built_log(&mut inp);
            let damaged = damage(&mut inp, &mut bytes);
            if !inp.chance(15) {
                fix_log_checksums(&mut bytes);
            }
            open_log(&bytes, (!damaged).then_some(&expected));
        }
    }
}

/// A store holding a little of everything, for restores to replace.
fn populated() -> StateStore {
    let store = StateStore::new();
    let mut inp = Input::new(&[]);
    let mut node = Node::new("n1", "client-1");
    let mut fp = fingerprint(&mut inp, "ebs", 3);
    std::sync::Arc::make_mut(&mut fp).healthy = true;
    node.csi_controller_plugins
        .insert(fp.plugin_id.clone(), fp.clone());
    node.csi_node_plugins.insert(fp.plugin_id.clone(), fp);
    let vol = schedstate::model::CsiVolume::new("default", "v1", "ebs");
    let alloc = schedstate::model::Allocation {
        id: id("a1"),
        namespace: id("default"),
        node_id: id("n1"),
        ..Default::default()
    };
    let claim = CsiVolumeClaim {
        alloc_id: id("a1"),
        node_id: id("n1"),
        mode: CsiVolumeClaimMode::Read,
        ..Default::default()
    };
    store.upsert_node(1, node).expect("node");
    store.upsert_allocs(2, vec![alloc]).expect("alloc");
    store.register_csi_volumes(3, vec![vol]).expect("volume");
    let _ = store.claim_csi_volume(4, "default", "v1", claim);
    store
}

/// A state built from the input and its snapshot image.
fn built_snapshot(inp: &mut Input<'_>) -> (StateStore, Vec<u8>) {
    let store = StateStore::new();
    let mut generator = Gen::default();
    for _ in 0..inp.below(MAX_COMMANDS) {
        let index = generator.index(inp, store.snapshot().view().last_applied());
        let cmd = generator.command(inp);
        let _ = store.apply(index, &cmd);
    }
    let mut image = Vec::new();
    store.snapshot_to(&mut image).expect("snapshot_to");
    (store, image)
}

/// Damages `bytes` as the input says; returns whether anything was done.
fn damage(inp: &mut Input<'_>, bytes: &mut Vec<u8>) -> bool {
    let edits = match inp.below(8) {
        0..=2 => 0,
        3..=5 => 1,
        n => n - 4,
    };
    let mut damaged = false;
    for _ in 0..edits {
        let len = bytes.len();
        let at = if len == 0 {
            0
        } else {
            usize::from(inp.u16()) % len
        };
        match inp.below(6) {
            0 | 1 if len > 0 => {
                let b = inp.byte();
                damaged |= bytes[at] != b;
                bytes[at] = b;
            }
            2 if len > 0 => {
                // A length-sized field: plausible big and small values.
                let v = inp.pick(&[0u32, 1, 0xff, 0xffff, 0x00ff_ffff, u32::MAX, 64 << 20]);
                let end = (at + 4).min(len);
                let before = bytes[at..end].to_vec();
                bytes[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
                damaged |= bytes[at..end] != before[..];
            }
            3 => {
                let b = inp.byte();
                bytes.insert(at.min(len), b);
                damaged = true;
            }
            4 if len > 0 => {
                let n = (1 + inp.below(8)).min(len - at);
                bytes.drain(at..at + n);
                damaged = true;
            }
            _ => {
                damaged |= at < len;
                bytes.truncate(at);
            }
        }
    }
    damaged
}

/// Recomputes both checksums of a snapshot image, as far as its header length allows.
fn fix_snapshot_checksums(image: &mut [u8]) {
    if image.len() < 16 {
        return;
    }
    let header_len = u32::from_le_bytes([image[12], image[13], image[14], image[15]]) as usize;
    let Some(crc_at) = 16usize.checked_add(header_len) else {
        return;
    };
    if crc_at + 4 > image.len() {
        return;
    }
    let crc = crc32fast::hash(&image[..crc_at]);
    image[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    let body = crc_at + 4;
    if body + 4 > image.len() {
        return;
    }
    let end = image.len() - 4;
    let crc = crc32fast::hash(&image[body..end]);
    image[end..].copy_from_slice(&crc.to_le_bytes());
}

/// Restores `bytes` over a populated store; `source`: the store an undamaged image was
/// taken from.
fn restore(bytes: &[u8], source: Option<&StateStore>) {
    let store = populated();
    let before = store.snapshot();
    let before_bytes = canonical(&before);
    match store.restore_from(&mut &bytes[..]) {
        Err(e) => {
            assert!(source.is_none(), "an undamaged snapshot was refused: {e}");
            let after = store.snapshot();
            assert!(
                after.raw().same_version(before.raw()),
                "a failed restore ({e}) published a version"
            );
            assert_eq!(canonical(&after), before_bytes, "a failed restore ({e})");
        }
        Ok(header) => {
            let snap = store.snapshot();
            assert_eq!(snap.view().last_applied(), header.last_applied);
            if let Some(source) = source {
                assert_eq!(canonical(&snap), canonical(&source.snapshot()));
                if let Err(e) = snap.view().check_invariants() {
                    panic!("restored state: {e}");
                }
            }
            // Whatever was accepted survives another round trip...
            let mut again = Vec::new();
            store.snapshot_to(&mut again).expect("snapshot_to");
            let other = StateStore::new();
            other
                .restore_from(&mut again.as_slice())
                .expect("a snapshot of a restored state");
            assert_eq!(canonical(&other.snapshot()), canonical(&snap));
            // ...and takes further writes without panicking.
            let next = header.last_applied.saturating_add(1);
            let mut inp = Input::new(bytes);
            let mut generator = Gen::default();
            for i in 0..4 {
                let cmd = generator.command(&mut inp);
                let _ = store.apply(next.saturating_add(i), &cmd);
            }
            let _ = store.snapshot().view().check_invariants();
        }
    }
}

/// The bytes of a segment header.
fn segment_header(seq: u64, prev_index: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(32);
    h.extend_from_slice(WAL_MAGIC);
    h.extend_from_slice(&WAL_VERSION.to_le_bytes());
    h.extend_from_slice(&seq.to_le_bytes());
    h.extend_from_slice(&prev_index.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

fn record_crc(len: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(len);
    h.update(payload);
    h.finalize()
}

/// A log segment of commands decoded from the input, and the store that recovery must
/// give (`None` if the log must not open).
///
/// Recovery's rules, restated: the first segment must not start after the snapshot
/// (index 0 without one); record indexes strictly increase; a record at index 0, which
/// no store ever writes, is corrupt (it is not "already in the snapshot", with or without
/// one), and so is one at or below the index its segment's header starts after; a record
/// at or below the snapshot index is already in the snapshot and skipped;
/// every other record replays, and a refused one fails the open.
fn built_log(inp: &mut Input<'_>) -> (Option<StateStore>, Vec<u8>) {
    let prev_index = if inp.chance(5) { 1 } else { 0 };
    let mut bytes = segment_header(1, prev_index);
    let direct = StateStore::new();
    let mut ok = prev_index == 0;
    let mut generator = Gen::default();
    let mut last = 0;
    let mut previous: Option<u64> = None;
    for _ in 0..inp.below(MAX_COMMANDS) {
        let index = generator.index(inp, last);
        let cmd = generator.command(inp);
        if index == 0 || previous.is_some_and(|p| index <= p) {
            ok = false;
        } else {
            ok &= direct.apply(index, &cmd).is_ok();
        }
        previous = Some(index);
        last = last.max(index);
        let payload = postcard::to_allocvec(&(index, &cmd)).expect("encode");
        let len = (payload.len() as u32).to_le_bytes();
        bytes.extend_from_slice(&len);
        bytes.extend_from_slice(&record_crc(&len, &payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
    }
    (ok.then_some(direct), bytes)
}

/// Recomputes the header checksum and every record checksum reachable by the
/// (possibly damaged) record lengths.
fn fix_log_checksums(bytes: &mut [u8]) {
    if bytes.len() < 32 {
        return;
    }
    let crc = crc32fast::hash(&bytes[..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    let mut at = 32usize;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let Some(end) = (at + 8).checked_add(len as usize) else {
            return;
        };
        if end > bytes.len() {
            return;
        }
        let crc = record_crc(&bytes[at..at + 4], &bytes[at + 8..end]);
        bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

/// A fresh directory, removed when dropped (also when a check panics).
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new() -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix("schedstate-fuzz-persist-")
            .tempdir()
            .expect("create a temporary directory");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Opens `bytes` as the only log segment of a data directory; `expected`: the store an
/// undamaged log must give (`Some(None)`: one whose commands cannot all replay).
fn open_log(bytes: &[u8], expected: Option<&Option<StateStore>>) {
    let dir = TempDir::new();
    let path = dir.path().join("wal-00000000000000000001.log");
    std::fs::write(&path, bytes).expect("write the segment");
    match DurableStore::open_read_only(dir.path()) {
        Ok((store, report)) => {
            let snap = store.snapshot();
            if let Err(e) = snap.view().check_invariants() {
                panic!("state replayed from a log: {e}");
            }
            assert_eq!(report.last_applied, snap.view().last_applied());
            assert_eq!(report.snapshot_index, None);
            match expected {
                Some(Some(direct)) => {
                    assert_eq!(canonical(&snap), canonical(&direct.snapshot()));
                    assert!(report.torn_tail.is_none(), "{report:?}");
                }
                Some(None) => panic!("a log with a refused command opened: {report:?}"),
                None => {}
            }
        }
        Err(e) => {
            if let Some(Some(_)) = expected {
                panic!("an undamaged log was refused: {e}");
            }
        }
    }
    // Read-only: the file is as it was.
    assert_eq!(std::fs::read(&path).expect("read back"), bytes);
}
