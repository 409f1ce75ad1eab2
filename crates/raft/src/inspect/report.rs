//! What [`inspect_dir`](super::inspect_dir) reports: plain data, serializable as JSON
//! (`schedstate inspect --json`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use openraft::{BasicNode, LogId, StoredMembership};
use schedstate::state::StateSnapshot;
use serde::Serialize;

use crate::NodeId;

/// A Raft log id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LogIdInfo {
    /// The entry's index.
    pub index: u64,
    /// The term of the leader that wrote it.
    pub term: u64,
    /// That leader.
    pub leader: NodeId,
}

impl From<LogId<NodeId>> for LogIdInfo {
    fn from(l: LogId<NodeId>) -> Self {
        LogIdInfo {
            index: l.index,
            term: l.leader_id.term,
            leader: l.leader_id.node_id,
        }
    }
}

/// The vote in the metadata file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VoteInfo {
    /// The term.
    pub term: u64,
    /// The server voted for (this one, if it stood).
    pub node: NodeId,
    /// Whether a quorum granted it (the server named led the term).
    pub committed: bool,
}

/// One member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberInfo {
    /// Its id.
    pub id: NodeId,
    /// Its address.
    pub address: String,
    /// A voter (else a learner).
    pub voter: bool,
}

/// A membership configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MembershipInfo {
    /// The entry that set it (`None`: none yet, a new server).
    pub log_id: Option<LogIdInfo>,
    /// The voter sets: one, or two during a joint change.
    pub voters: Vec<Vec<NodeId>>,
    /// Every member, voters and learners, by id.
    pub members: Vec<MemberInfo>,
}

impl From<&StoredMembership<NodeId, BasicNode>> for MembershipInfo {
    fn from(m: &StoredMembership<NodeId, BasicNode>) -> Self {
        let voters: Vec<Vec<NodeId>> = m
            .membership()
            .get_joint_config()
            .iter()
            .map(|c| c.iter().copied().collect())
            .collect();
        let voting: BTreeSet<NodeId> = voters.iter().flatten().copied().collect();
        MembershipInfo {
            log_id: m.log_id().map(LogIdInfo::from),
            voters,
            members: m
                .membership()
                .nodes()
                .map(|(id, n)| MemberInfo {
                    id: *id,
                    address: n.addr.clone(),
                    voter: voting.contains(id),
                })
                .collect(),
        }
    }
}

/// One table of a state: its table index (the write index of its last change) and
/// its rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableInfo {
    /// The table's name ([`Table::name`](schedstate::state::Table::name)).
    pub name: &'static str,
    /// Its table index.
    pub index: u64,
    /// Its rows.
    pub rows: u64,
}

/// The newest snapshot file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    /// The file.
    pub file: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its format version (`SCHEDRSN`).
    pub version: u32,
    /// The format version of the store's snapshot inside it (`SCHEDSNP`).
    pub store_version: u32,
    /// The snapshot's id (the last applied index and a build counter).
    pub snapshot_id: String,
    /// The last log entry it includes.
    pub last_log_id: Option<LogIdInfo>,
    /// The membership in force at that entry.
    pub membership: MembershipInfo,
    /// The store's last applied write index (entries that changed no table — a
    /// leader's blank entry, a membership change, a refused command — do not move it).
    pub last_applied: u64,
    /// Its tables.
    pub tables: Vec<TableInfo>,
    /// The write keys it keeps (exactly-once writes).
    pub write_keys: u64,
}

/// One log segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentInfo {
    /// The file.
    pub file: PathBuf,
    /// Its sequence number.
    pub seq: u64,
    /// Its format version (`SCHEDRFT`).
    pub version: u32,
    /// Records in it (purged ones included).
    pub records: u64,
    /// The index of its first record, if it holds any.
    pub first_index: Option<u64>,
    /// The index of its last whole record, if it holds any.
    pub last_index: Option<u64>,
    /// Its size on disk, a torn tail included.
    pub bytes: u64,
}

/// Bytes at the end of the last segment that are not a whole record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// The segment.
    pub file: PathBuf,
    /// Where the partial record (or header) starts.
    pub offset: u64,
    /// How many bytes it has.
    pub bytes: u64,
    /// The segment's header itself is partial: a segment being created.
    pub header: bool,
}

/// The log on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogInfo {
    /// The segments in order (one whose header is torn is in `torn_tail` only).
    pub segments: Vec<SegmentInfo>,
    /// The bytes of every segment.
    pub bytes: u64,
    /// The first entry after the purge point.
    pub first: Option<LogIdInfo>,
    /// The last whole entry.
    pub last: Option<LogIdInfo>,
    /// Entries after the purge point.
    pub entries: u64,
    /// The index the next entry appended would have.
    pub next_index: u64,
    /// The purge point (the last entry removed, or skipped, as a snapshot holds it).
    pub purged: Option<LogIdInfo>,
    /// Records at or before the purge point still on disk (skipped).
    pub purged_records: u64,
    /// A partial record at the end of the last segment, if any.
    pub torn_tail: Option<TornTail>,
}

/// What the committed pointer (`raft-committed`) says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CommittedInfo {
    /// No pointer (no file, or the empty one a log starts with): nothing after the
    /// snapshot is known to be committed here (a server that never committed an
    /// entry, or a directory of a build before the pointer).
    Absent,
    /// It names an entry of the log: every entry up to it is committed.
    InLog {
        /// The entry.
        log_id: LogIdInfo,
    },
    /// It names an entry before the log's first (purged: the snapshot holds it).
    BeforeLog {
        /// The entry.
        log_id: LogIdInfo,
    },
    /// A server ignores it, and so does this reading: why (a torn write, an entry the
    /// log does not hold).
    Ignored {
        /// Why.
        reason: String,
    },
}

impl CommittedInfo {
    /// The committed log id it gives, if any.
    pub fn log_id(&self) -> Option<LogIdInfo> {
        match self {
            CommittedInfo::InLog { log_id } | CommittedInfo::BeforeLog { log_id } => Some(*log_id),
            CommittedInfo::Absent | CommittedInfo::Ignored { .. } => None,
        }
    }
}

/// The state a restart would serve before hearing from a leader: the snapshot, then
/// the committed entries after it.
#[derive(Debug, Clone, Serialize)]
pub struct StateInfo {
    /// The last entry applied (the snapshot's, or the last one replayed).
    pub last_applied: Option<LogIdInfo>,
    /// Entries replayed after the snapshot.
    pub replayed: u64,
    /// Commands among them that the rules refused (committed no-ops, as on every
    /// server).
    pub refused: u64,
    /// Entries in the log after the last applied one: not known to be committed here
    /// (a leader may have committed them since, or a new one may replace them).
    pub not_known_committed: u64,
    /// The membership in force at the last applied entry.
    pub membership: MembershipInfo,
    /// The store's last applied write index.
    pub latest_index: u64,
    /// The cluster's store format at the last applied entry (rolling upgrades: the
    /// snapshot's stream version, raised by the entries that raise it). Above 2, a
    /// server of the previous release can no longer run on this directory.
    pub cluster_format: u32,
    /// The write keys kept at the last applied entry (exactly-once writes).
    pub write_keys: u64,
    /// Commands among the replayed ones answered from their write key (retries),
    /// not applied again.
    pub replays: u64,
    /// Its tables.
    pub tables: Vec<TableInfo>,
    /// The state itself (for checks such as the invariants).
    #[serde(skip)]
    pub snapshot: StateSnapshot,
}

/// One entry of the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerFile {
    /// Its file name.
    pub name: String,
    /// What it is: `raft log segment`, `raft metadata`, `committed pointer`,
    /// `raft snapshot`, `lock`, `temporary`, `folder` or `other`.
    pub kind: &'static str,
    /// Its size (0 for a folder).
    pub bytes: u64,
    /// The format version in its header, for a file of ours that has one.
    pub version: Option<u32>,
}

/// What a replicated server's data directory holds; see the [module](super).
#[derive(Debug, Clone, Serialize)]
pub struct ServerDirReport {
    /// The directory.
    pub dir: PathBuf,
    /// The vote, if one was cast.
    pub vote: Option<VoteInfo>,
    /// The log.
    pub log: LogInfo,
    /// The committed pointer.
    pub committed: CommittedInfo,
    /// The newest snapshot, if any.
    pub snapshot: Option<SnapshotInfo>,
    /// The snapshot's state with the committed entries after it replayed.
    pub state: StateInfo,
    /// Every entry of the directory, by name.
    pub files: Vec<ServerFile>,
}
