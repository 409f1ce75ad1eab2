//! Helpers of the durability tests: a deterministic generator of realistic command
//! streams, replay helpers, and readers and writers of the on-disk layout (files of a
//! data directory, log segments and their record boundaries). Temporary directories,
//! canonical bytes and the invariant check are in [`super`].

use std::collections::BTreeMap;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schedstate::model::{
    Allocation, ClientStatus, CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiVolume,
    CsiVolumeAccessMode, CsiVolumeAttachmentMode, CsiVolumeCapability, CsiVolumeClaim,
    CsiVolumeClaimMode, CsiVolumeClaimState, CsiVolumeRequest, DesiredStatus, Node, NodeStatus, id,
};
use schedstate::persist::{DurableStore, Options, PersistError, SyncPolicy, WAL_VERSION};
use schedstate::state::{Command, CsiVolumeClaimRequest, StateError, StateStore};

use super::canonical;

// ---------------------------------------------------------------------------------
// Golden files

/// Builds the golden files of `golden` (a `tests/golden/vN` folder) from `cmds`: a data
/// directory whose snapshot holds the first `in_snapshot` commands and whose log holds
/// the rest (`data/`), a standalone snapshot of the end state (`state.snap`) and its
/// canonical bytes (`expected.canonical`). A file that is missing is written; one that
/// exists must equal what this build writes and is never overwritten: committed golden
/// files are never regenerated (a new format version gets a new folder).
pub fn write_golden_files(golden: &Path, cmds: &[(u64, Command)], in_snapshot: usize) {
    let work = super::TempDir::new("golden-gen");
    let (db, _) = DurableStore::open(work.path(), fast()).unwrap();
    for (index, cmd) in &cmds[..in_snapshot] {
        assert!(apply_durable(&db, *index, cmd), "{} refused", cmd.kind());
    }
    db.compact().unwrap();
    for (index, cmd) in &cmds[in_snapshot..] {
        assert!(apply_durable(&db, *index, cmd), "{} refused", cmd.kind());
    }
    let state = canonical(db.store());
    let snap = snapshot_bytes(db.store());
    drop(db);
    let mut data = files(work.path());
    data.remove("LOCK");
    assert_eq!(
        data.len(),
        2,
        "one snapshot, one segment: {:?}",
        data.keys()
    );

    // A log segment is kept up to its last record: the zeros preallocated after it
    // are its clean end, and need not be committed.
    let mut wanted: Vec<(PathBuf, Vec<u8>)> = data
        .into_iter()
        .map(|(name, mut bytes)| {
            if name.starts_with("wal-") {
                bytes.truncate(records_end(&bytes));
            }
            (golden.join("data").join(name), bytes)
        })
        .collect();
    wanted.push((golden.join("state.snap"), snap));
    wanted.push((golden.join("expected.canonical"), state));
    for (path, bytes) in &wanted {
        match fs::read(path) {
            Ok(existing) => assert!(
                existing == *bytes,
                "{} exists and differs from what this build writes: golden files are \
                 never regenerated; a new format version gets a new folder",
                path.display()
            ),
            Err(_) => {
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, bytes).unwrap();
                eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Files of a data directory

/// The regular files of `dir`, by name, with their bytes.
pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("read dir") {
        let entry = entry.expect("dir entry");
        if entry.file_type().expect("file type").is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            out.insert(name, fs::read(entry.path()).expect("read file"));
        }
    }
    out
}

/// Asserts that two sets of files are equal, ignoring the (empty) `LOCK` file a
/// read-write open creates; reports names and lengths, not bytes.
#[track_caller]
pub fn assert_same_files(
    got: &BTreeMap<String, Vec<u8>>,
    want: &BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    let strip = |m: &BTreeMap<String, Vec<u8>>| {
        let mut m = m.clone();
        if m.get("LOCK").is_some_and(Vec::is_empty) {
            m.remove("LOCK");
        }
        m
    };
    let (got, want) = (strip(got), strip(want));
    if got != want {
        let names = |m: &BTreeMap<String, Vec<u8>>| {
            m.iter()
                .map(|(k, v)| format!("{k} ({} bytes)", v.len()))
                .collect::<Vec<_>>()
        };
        let differ: Vec<&String> = got
            .iter()
            .filter(|(k, v)| want.get(*k) != Some(v))
            .map(|(k, _)| k)
            .collect();
        panic!(
            "{what}: files differ: got {:?}, want {:?}, differing {differ:?}",
            names(&got),
            names(&want)
        );
    }
}

/// Makes `dir` hold exactly `content` (creating it if needed).
pub fn reset_dir(dir: &Path, content: &BTreeMap<String, Vec<u8>>) {
    fs::create_dir_all(dir).expect("create dir");
    for entry in fs::read_dir(dir).expect("read dir") {
        let entry = entry.expect("dir entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if !content.contains_key(&name) {
            fs::remove_file(entry.path()).expect("remove file");
        }
    }
    for (name, bytes) in content {
        fs::write(dir.join(name), bytes).expect("write file");
    }
}

/// Copies the regular files of `src` into `dst` (created if needed).
pub fn copy_dir(src: &Path, dst: &Path) {
    reset_dir(dst, &files(src));
}

/// The files of `dir` whose names start with `prefix`, sorted.
pub fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    out.sort();
    out
}

/// The log segments of `dir`, in order.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    named(dir, "wal-")
}

/// The snapshot files of `dir`, in order.
pub fn snapshots(dir: &Path) -> Vec<PathBuf> {
    named(dir, "snapshot-")
}

/// The file name of a path.
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

// Log segments' record boundaries, parsed independently of the library (shared with
// the raft and CLI tests).
pub use schedstate_test_support::segment::{SEGMENT_HEADER_LEN, records_end, whole_records};

/// A live log segment's bytes without the zeros preallocated after its records: the
/// segment as a clean close or a compaction leaves it.
pub fn only_records(mut segment: Vec<u8>) -> Vec<u8> {
    let end = records_end(&segment);
    assert!(
        segment[end..].iter().all(|&b| b == 0),
        "only zeros after the records"
    );
    segment.truncate(end);
    segment
}

/// Cuts the zeros preallocated after the records of every log segment in `dir`: the
/// files as a build before preallocation wrote them (which this one reads alike), so
/// that tests damaging every byte damage records, not kilobytes of zeros.
pub fn trim_zero_tails(dir: &Path) {
    for segment in segments(dir) {
        let bytes = only_records(fs::read(&segment).expect("read a segment"));
        fs::write(&segment, bytes).expect("rewrite a segment");
    }
}

/// The byte ranges of the records of a well-formed log segment.
pub fn record_spans(segment: &[u8]) -> Vec<Range<usize>> {
    let out = whole_records(segment);
    let end = out.last().map_or(SEGMENT_HEADER_LEN, |r| r.end);
    assert_eq!(end, segment.len(), "segment is not well formed");
    out
}

/// A log segment built here from the documented format: `MAGIC | VERSION | SEQ |
/// PREV_INDEX | CRC` then `LEN | CRC(LEN, payload) | postcard((index, command))`.
pub fn craft_segment(seq: u64, prev_index: u64, records: &[(u64, Command)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"SCHEDWAL");
    out.extend_from_slice(&WAL_VERSION.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&prev_index.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    for record in records {
        let payload = postcard::to_allocvec(record).expect("encode a record");
        let len = u32::try_from(payload.len())
            .expect("a small record")
            .to_le_bytes();
        let mut h = crc32fast::Hasher::new();
        h.update(&len);
        h.update(&payload);
        out.extend_from_slice(&len);
        out.extend_from_slice(&h.finalize().to_le_bytes());
        out.extend_from_slice(&payload);
    }
    out
}

/// The file name of log segment `seq`.
pub fn seg_name(seq: u64) -> String {
    format!("wal-{seq:020}.log")
}

// ---------------------------------------------------------------------------------
// Errors

/// A short name of an error's variant (for assertion messages and tallies).
pub fn kind(e: &PersistError) -> &'static str {
    match e {
        PersistError::Io { .. } => "Io",
        PersistError::Locked { .. } => "Locked",
        PersistError::NotADirectory { .. } => "NotADirectory",
        PersistError::BadMagic { .. } => "BadMagic",
        PersistError::UnsupportedVersion { .. } => "UnsupportedVersion",
        PersistError::Checksum { .. } => "Checksum",
        PersistError::Corrupt { .. } => "Corrupt",
        PersistError::MissingSegment { .. } => "MissingSegment",
        PersistError::Replay { .. } => "Replay",
        PersistError::State(_) => "State",
        PersistError::Encode(_) => "Encode",
        PersistError::Poisoned { .. } => "Poisoned",
        PersistError::NoSpace { .. } => "NoSpace",
        PersistError::TooLarge { .. } => "TooLarge",
        _ => "other",
    }
}

/// The file an error names, if it names one.
pub fn error_path(e: &PersistError) -> Option<&Path> {
    match e {
        PersistError::Io { path, .. }
        | PersistError::Locked { path }
        | PersistError::NotADirectory { path }
        | PersistError::BadMagic { path, .. }
        | PersistError::UnsupportedVersion { path, .. }
        | PersistError::Checksum { path, .. }
        | PersistError::Corrupt { path, .. }
        | PersistError::MissingSegment { path, .. }
        | PersistError::Replay { path, .. }
        | PersistError::NoSpace { path } => Some(path),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------
// Stores

/// Options with the given sync policy and compaction threshold.
pub fn options(sync: SyncPolicy, compact_after_bytes: u64) -> Options {
    Options {
        sync,
        compact_after_bytes,
    }
}

/// No fsync, no automatic compaction.
pub fn fast() -> Options {
    options(SyncPolicy::Never, u64::MAX)
}

/// The snapshot-format bytes of a store's current state.
pub fn snapshot_bytes(store: &StateStore) -> Vec<u8> {
    let mut out = Vec::new();
    store.snapshot_to(&mut out).expect("snapshot_to");
    out
}

/// Applies to an in-memory store: true if accepted, false if the rules refused it.
pub fn apply_mem(store: &StateStore, index: u64, cmd: &Command) -> bool {
    match store.apply(index, cmd) {
        Ok(_) => true,
        Err(e @ (StateError::StaleIndex { .. } | StateError::Engine(_))) => {
            panic!("engine error at {index}: {e}")
        }
        Err(_) => false,
    }
}

/// Applies through a durable store: true if accepted (and logged), false if the rules
/// refused it. Any other error panics.
pub fn apply_durable(db: &DurableStore, index: u64, cmd: &Command) -> bool {
    match db.apply(index, cmd) {
        Ok(_) => true,
        Err(PersistError::State(e @ (StateError::StaleIndex { .. } | StateError::Engine(_)))) => {
            panic!("engine error at {index}: {e}")
        }
        Err(PersistError::State(_)) => false,
        Err(e) => panic!("{} at {index} failed: {e}", cmd.kind()),
    }
}

/// Feeds `n` generated commands to a durable store; returns the accepted ones.
pub fn run_durable(db: &DurableStore, g: &mut Gen, n: usize) -> Vec<(u64, Command)> {
    let mut accepted = Vec::new();
    for _ in 0..n {
        let (index, cmd) = g.next();
        if apply_durable(db, index, &cmd) {
            accepted.push((index, cmd));
        }
    }
    accepted
}

/// Feeds `n` generated commands to an in-memory store; returns the accepted ones.
pub fn run_mem(store: &StateStore, g: &mut Gen, n: usize) -> Vec<(u64, Command)> {
    let mut accepted = Vec::new();
    for _ in 0..n {
        let (index, cmd) = g.next();
        if apply_mem(store, index, &cmd) {
            accepted.push((index, cmd));
        }
    }
    accepted
}

/// A fresh in-memory store fed `records`, every one of which must be accepted.
pub fn replay(records: &[(u64, Command)]) -> StateStore {
    let store = StateStore::new();
    for (index, cmd) in records {
        if let Err(e) = store.apply(*index, cmd) {
            panic!("replay of {} at {index} failed: {e}", cmd.kind());
        }
    }
    store
}

/// The canonical bytes of a fresh replay of `records`.
pub fn replay_bytes(records: &[(u64, Command)]) -> Vec<u8> {
    canonical(&replay(records))
}

// ---------------------------------------------------------------------------------
// The command generator

/// The plugins fingerprinted by the nodes.
pub const PLUGINS: [&str; 3] = ["ebs", "efs", "nfs"];
/// The namespaces of allocations and volumes.
pub const NAMESPACES: [&str; 2] = ["default", "prod"];
/// Node ids are `n0`..`n{NODES-1}`.
pub const NODES: u32 = 10;
/// Workload alloc ids are `a0`..`a{ALLOCS-1}`.
pub const ALLOCS: u32 = 40;
/// Volume ids are `vol0`..`vol{VOLUMES-1}` in each namespace.
pub const VOLUMES: u32 = 6;

/// A deterministic stream of realistic, mostly valid commands at increasing log
/// indexes: the same seed gives the same stream, whatever happens to the commands.
/// It keeps no model of the state, so a consumer may skip commands (for example
/// those at or below an index already recovered) and stay in step.
///
/// Ids come from small pools so that most writes name things that exist: nodes
/// fingerprinting a few CSI plugins (node and controller instances run by plugin
/// allocations), workload allocations (some requesting volumes, some stopping),
/// plugin allocations stopped (which removes their instances), volumes registered on
/// the plugins, claims, release steps and gc claims, deregistrations, node status
/// changes and deletions. Refused commands (a missing node, plugin, alloc or volume, a
/// conflicting claim, a mismatched fingerprint…) are part of the stream.
#[derive(Debug, Clone)]
pub struct Gen {
    rng: fastrand::Rng,
    index: u64,
}

impl Gen {
    /// The stream of `seed`, starting after index 0.
    pub fn new(seed: u64) -> Gen {
        Gen {
            rng: fastrand::Rng::with_seed(seed),
            index: 0,
        }
    }

    /// The next command and its index (indexes grow by 1 to 3).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> (u64, Command) {
        self.index += self.rng.u64(1..=3);
        let cmd = self.command();
        (self.index, cmd)
    }

    fn pick<'a>(&mut self, list: &[&'a str]) -> &'a str {
        list[self.rng.usize(..list.len())]
    }

    fn node_id(&mut self) -> String {
        format!("n{}", self.rng.u32(..NODES))
    }

    fn alloc_no(&mut self) -> u32 {
        self.rng.u32(..ALLOCS)
    }

    /// One command.
    pub fn command(&mut self) -> Command {
        match self.rng.u32(..100) {
            0..26 => Command::UpsertNode { node: self.node() },
            26..44 => Command::UpsertAllocs {
                allocs: (0..self.rng.usize(1..=3)).map(|_| self.alloc()).collect(),
            },
            44..48 => Command::UpsertAllocs {
                allocs: vec![self.plugin_alloc()],
            },
            48..53 => Command::DeleteAllocs {
                ids: (0..self.rng.usize(1..=3))
                    .map(|_| id(&format!("a{}", self.alloc_no())))
                    .collect(),
            },
            53..56 => Command::DeleteNodes {
                ids: vec![id(&self.node_id())],
            },
            56..59 => Command::UpdateNodeStatus {
                id: id(&self.node_id()),
                status: [
                    NodeStatus::Ready,
                    NodeStatus::Down,
                    NodeStatus::Disconnected,
                    NodeStatus::Initializing,
                ][self.rng.usize(..4)],
            },
            59..61 => Command::UpdateNodeDrain {
                id: id(&self.node_id()),
                drain: self.rng.bool(),
            },
            61..63 => Command::UpdateNodeEligibility {
                id: id(&self.node_id()),
                eligible: self.rng.bool(),
            },
            63..73 => Command::RegisterCsiVolumes {
                volumes: (0..self.rng.usize(1..=2)).map(|_| self.volume()).collect(),
            },
            73..77 => {
                let ns = self.pick(&NAMESPACES);
                Command::DeregisterCsiVolumes {
                    namespace: id(ns),
                    ids: vec![id(&format!("vol{}", self.rng.u32(..VOLUMES)))],
                    force: self.rng.bool(),
                }
            }
            _ => Command::ClaimCsiVolumes {
                claims: (0..self.rng.usize(1..=2)).map(|_| self.claim()).collect(),
            },
        }
    }

    fn fingerprint(&mut self, plugin: &str, node: &str, controller: bool) -> Arc<CsiInfo> {
        let healthy = self.rng.u32(..100) < 85;
        let alloc = if controller {
            format!("ctrl-{plugin}-{node}")
        } else {
            format!("plug-{plugin}-{node}")
        };
        Arc::new(CsiInfo {
            plugin_id: id(plugin),
            alloc_id: id(&alloc),
            healthy,
            health_description: if healthy { "healthy" } else { "probe failed" }.into(),
            update_time: self.rng.u64(1..1_000_000),
            provider: format!("{plugin}.csi.example.com").into(),
            provider_version: if self.rng.u32(..10) == 0 {
                "1.1.0"
            } else {
                "1.0.0"
            }
            .into(),
            requires_controller_plugin: plugin == "ebs",
            requires_topologies: false,
            controller_info: controller.then(|| CsiControllerInfo {
                supports_attach_detach: true,
                supports_list_volumes: self.rng.bool(),
                ..Default::default()
            }),
            node_info: (!controller).then(|| CsiNodeInfo {
                id: format!("i-{node}").into(),
                max_volumes: 16,
                accessible_topology: None,
                requires_node_stage_volume: true,
            }),
        })
    }

    fn node(&mut self) -> Node {
        let node_id = self.node_id();
        let mut n = Node::new(id(&node_id), format!("client-{node_id}"));
        if self.rng.u32(..10) == 0 {
            n.status = NodeStatus::Initializing;
        }
        for plugin in PLUGINS {
            if self.rng.u32(..10) < 6 {
                let fp = self.fingerprint(plugin, &node_id, false);
                n.csi_node_plugins.insert(id(plugin), fp);
            }
            if self.rng.u32(..10) < 2 {
                let fp = self.fingerprint(plugin, &node_id, true);
                n.csi_controller_plugins.insert(id(plugin), fp);
            }
        }
        if self.rng.u32(..40) == 0 {
            // Filed under the wrong plugin id: refused.
            let fp = self.fingerprint("efs", &node_id, false);
            n.csi_node_plugins.insert(id("ebs"), fp);
        }
        n
    }

    fn alloc(&mut self) -> Allocation {
        let no = self.alloc_no();
        let desired = match self.rng.u32(..100) {
            0..80 => DesiredStatus::Run,
            80..95 => DesiredStatus::Stop,
            _ => DesiredStatus::Evict,
        };
        let client = match self.rng.u32(..100) {
            0..60 => ClientStatus::Running,
            60..75 => ClientStatus::Pending,
            75..85 => ClientStatus::Complete,
            85..95 => ClientStatus::Failed,
            _ => ClientStatus::Lost,
        };
        let requests = if self.rng.u32(..10) < 3 {
            vec![CsiVolumeRequest {
                volume_id: id(&format!("vol{}", self.rng.u32(..VOLUMES))),
                read_only: self.rng.bool(),
            }]
        } else {
            Vec::new()
        };
        Allocation {
            id: id(&format!("a{no}")),
            namespace: id(NAMESPACES[(no % 2) as usize]),
            job_id: id(["web", "db", "cache"][(no % 3) as usize]),
            task_group: format!("group-{}", no % 4).into(),
            node_id: id(&format!("n{}", (no + self.rng.u32(..2)) % NODES)),
            desired_status: desired,
            client_status: client,
            csi_volume_requests: requests.into(),
            ..Default::default()
        }
    }

    /// A plugin allocation, usually stopped (which removes the instance it ran).
    fn plugin_alloc(&mut self) -> Allocation {
        let plugin = self.pick(&PLUGINS);
        let node = self.node_id();
        let controller = self.rng.u32(..4) == 0;
        let alloc_id = if controller {
            format!("ctrl-{plugin}-{node}")
        } else {
            format!("plug-{plugin}-{node}")
        };
        Allocation {
            id: id(&alloc_id),
            namespace: id("system"),
            job_id: id(&format!("csi-{plugin}")),
            task_group: if controller { "controller" } else { "node" }.into(),
            node_id: id(&node),
            desired_status: if self.rng.u32(..10) < 7 {
                DesiredStatus::Stop
            } else {
                DesiredStatus::Run
            },
            client_status: ClientStatus::Running,
            ..Default::default()
        }
    }

    fn volume_access(vol_no: u32) -> CsiVolumeAccessMode {
        if vol_no.is_multiple_of(2) {
            CsiVolumeAccessMode::MultiNodeMultiWriter
        } else {
            CsiVolumeAccessMode::SingleNodeWriter
        }
    }

    fn volume(&mut self) -> CsiVolume {
        let ns = self.pick(&NAMESPACES);
        let no = self.rng.u32(..VOLUMES);
        let plugin = PLUGINS[(no % 3) as usize];
        let mut v = CsiVolume::new(id(ns), id(&format!("vol{no}")), id(plugin));
        v.external_id = format!("ext-{ns}-{no}");
        v.name = format!("volume {no} rev {}", self.rng.u32(..3));
        v.requested_capabilities = vec![CsiVolumeCapability {
            access_mode: Self::volume_access(no),
            attachment_mode: CsiVolumeAttachmentMode::FileSystem,
        }];
        v.parameters
            .insert("type".into(), self.pick(&["gp3", "io2"]).into());
        if self.rng.bool() {
            v.secrets
                .insert("token".into(), format!("s{}", self.rng.u32(..5)));
        }
        v
    }

    fn claim(&mut self) -> CsiVolumeClaimRequest {
        let ns = self.pick(&NAMESPACES);
        let vol_no = self.rng.u32(..VOLUMES);
        let alloc_no = self.alloc_no();
        let claim = if self.rng.u32(..12) == 0 {
            CsiVolumeClaim {
                mode: CsiVolumeClaimMode::Gc,
                state: CsiVolumeClaimState::Taken,
                ..Default::default()
            }
        } else {
            let state = match self.rng.u32(..100) {
                0..70 => CsiVolumeClaimState::Taken,
                70..75 => CsiVolumeClaimState::Unpublishing,
                75..80 => CsiVolumeClaimState::NodeDetached,
                80..85 => CsiVolumeClaimState::ControllerDetached,
                _ => CsiVolumeClaimState::ReadyToFree,
            };
            CsiVolumeClaim {
                alloc_id: id(&format!("a{alloc_no}")),
                node_id: id(&format!("n{}", alloc_no % NODES)),
                external_node_id: format!("i-n{}", alloc_no % NODES),
                mode: if self.rng.u32(..10) < 6 {
                    CsiVolumeClaimMode::Read
                } else {
                    CsiVolumeClaimMode::Write
                },
                access_mode: Self::volume_access(vol_no),
                attachment_mode: if self.rng.u32(..20) == 0 {
                    CsiVolumeAttachmentMode::BlockDevice
                } else {
                    CsiVolumeAttachmentMode::FileSystem
                },
                state,
            }
        };
        CsiVolumeClaimRequest {
            namespace: id(ns),
            volume_id: id(&format!("vol{vol_no}")),
            claim,
        }
    }
}
