//! The Raft log's records and its metadata file, on the project's segment framing
//! ([`schedstate::persist::segment`]).
//!
//! ```text
//! raft-NNNNNNNNNNNNNNNNNNNN.log := segment with MAGIC "SCHEDRFT", VERSION 4
//! record payload := postcard(RaftRecord)   (index first, then term, leader, body:
//!                   blank | one command | membership | several commands
//!                   | keyed commands: the leader's clock, per command its write key)
//! ```
//! Version 2 added jobs (the job commands, an allocation's job version); version 3 the
//! keyed body (exactly-once writes, [`crate::WriteKeys`]) — a body kind of its own, so
//! a version-2 record reads as it is; version 4 the commands of the store's format 3
//! (a job's registered definition, the ACL salt) and the entry raising the cluster's
//! format (rolling upgrades, `formats.rs`). Older segments are still read —
//! their commands through their format's shape ([`schedstate::state::v1::CommandV1`]
//! for version 1, [`schedstate::state::v2::CommandV2`] for versions 2 and 3).
//! Segments of an older version are never appended to: records of this build go to a
//! new segment after one.
//! ```text
//! raft-meta      := MAGIC "SCHEDRMT" | VERSION u32 | LEN u32 | postcard(RaftMeta) | CRC u32
//! ```
//! Raft logs start at index 0 (the initial membership), the framing's positions at 1:
//! a record's position in the framing (and a header's `PREV_INDEX`) is its Raft index
//! plus one.
//!
//! The records are this crate's own types, not openraft's serde forms, so that a
//! change inside openraft cannot change the files silently; the golden files in the
//! tests pin both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::{BasicNode, CommittedLeaderId, EntryPayload, LogId, Membership, Vote};
use schedstate::persist::PersistError;
use schedstate::persist::segment::SegmentFormat;
use schedstate::state::Command;
use schedstate::state::v1::CommandV1;
use schedstate::state::v2::CommandV2;
use serde::{Deserialize, Serialize};

use crate::{Entry, NodeId, Proposal, ProposalKeys, TypeConfig, WriteKey};

/// The first bytes of every Raft log segment.
pub const RAFT_LOG_MAGIC: &[u8; 8] = b"SCHEDRFT";
/// The Raft log format version this build writes (it reads 1 to 4).
pub const RAFT_LOG_VERSION: u32 = 4;
/// The first bytes of the metadata file (vote, purge point).
pub const RAFT_META_MAGIC: &[u8; 8] = b"SCHEDRMT";
/// The metadata format version.
pub const RAFT_META_VERSION: u32 = 1;

/// The Raft log's segment format.
pub(crate) const RAFT_LOG_FORMAT: SegmentFormat = SegmentFormat {
    magic: RAFT_LOG_MAGIC,
    version: RAFT_LOG_VERSION,
    oldest_version: 1,
    kind: "raft log segment",
    probe: |version, payload| decode_record(version, payload).ok().map(|r| r.index),
};

/// A record's payload in a segment of format `version`.
pub(crate) fn decode_record(version: u32, payload: &[u8]) -> Result<RaftRecord, postcard::Error> {
    match version {
        1 => Ok(postcard::from_bytes::<RaftRecordOf<CommandV1>>(payload)?.into_current()),
        2 | 3 => Ok(postcard::from_bytes::<RaftRecordOf<CommandV2>>(payload)?.into_current()),
        _ => postcard::from_bytes::<RaftRecord>(payload),
    }
}

/// A record of an older format: the same layout, its commands in that format's shape
/// (format 1: no `Keyed` body, which was appended and so never read there).
#[derive(Deserialize)]
struct RaftRecordOf<C> {
    index: u64,
    term: u64,
    leader: NodeId,
    body: RecordBodyOf<C>,
}

#[derive(Deserialize)]
enum RecordBodyOf<C> {
    Blank,
    Command(C),
    Membership {
        configs: Vec<Vec<NodeId>>,
        nodes: Vec<(NodeId, String)>,
    },
    Commands(Vec<C>),
    Keyed {
        at_ms: u64,
        commands: Vec<(C, Option<WriteKey>)>,
    },
}

impl<C: Into<Command>> RaftRecordOf<C> {
    fn into_current(self) -> RaftRecord {
        let cmd = |c: C| Arc::new(c.into());
        let body = match self.body {
            RecordBodyOf::Blank => RecordBody::Blank,
            RecordBodyOf::Command(c) => RecordBody::Command(cmd(c)),
            RecordBodyOf::Membership { configs, nodes } => {
                RecordBody::Membership { configs, nodes }
            }
            RecordBodyOf::Commands(cs) => RecordBody::Commands(cs.into_iter().map(cmd).collect()),
            RecordBodyOf::Keyed { at_ms, commands } => RecordBody::Keyed {
                at_ms,
                commands: commands.into_iter().map(|(c, k)| (cmd(c), k)).collect(),
            },
        };
        RaftRecord {
            index: self.index,
            term: self.term,
            leader: self.leader,
            body,
        }
    }
}

/// The file name of segment `seq` (named by the store, whose tools recognize a
/// server's directory by it).
pub(crate) fn segment_name(seq: u64) -> String {
    schedstate::persist::server_segment_name(seq)
}

/// The sequence number of a segment file name.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    schedstate::persist::parse_server_segment_name(name)
}

/// The path of the metadata file in `dir`.
pub(crate) fn meta_path(dir: &Path) -> PathBuf {
    schedstate::persist::server_meta_path(dir)
}

/// Whether `dir` is (or was) a replicated server's data directory
/// ([`schedstate::persist::is_server_dir`], re-exported for this crate's users).
pub use schedstate::persist::is_server_dir;

/// One log entry as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RaftRecord {
    pub index: u64,
    pub term: u64,
    pub leader: NodeId,
    pub body: RecordBody,
}

/// What an entry carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum RecordBody {
    /// A new leader's first entry.
    Blank,
    /// One command for the state machine.
    Command(Arc<Command>),
    /// A membership change: the (joint) voter sets and every member's address.
    Membership {
        configs: Vec<Vec<NodeId>>,
        nodes: Vec<(NodeId, String)>,
    },
    /// Several commands batched in one entry, applied in order at its index.
    Commands(Vec<Arc<Command>>),
    /// Commands of which at least one carries a write key (format version 3).
    Keyed {
        /// The proposing leader's clock, ms since the Unix epoch.
        at_ms: u64,
        /// The commands in order, each with its key if it has one.
        commands: Vec<(Arc<Command>, Option<WriteKey>)>,
    },
    /// The cluster's format raised to this one, every server reading it (format
    /// version 4; [`crate::Server::cluster_format`]).
    FormatRaised(u32),
}

impl RaftRecord {
    pub(crate) fn from_entry(entry: &Entry) -> RaftRecord {
        let body = match &entry.payload {
            EntryPayload::Blank => RecordBody::Blank,
            EntryPayload::Normal(Proposal {
                raise_format: Some(format),
                ..
            }) => RecordBody::FormatRaised(*format),
            EntryPayload::Normal(p) => match (&p.keys, p.commands.as_slice()) {
                (Some(keys), _) => RecordBody::Keyed {
                    at_ms: keys.at_ms,
                    commands: p
                        .commands
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (c.clone(), p.key(i).copied()))
                        .collect(),
                },
                (None, [one]) => RecordBody::Command(one.clone()),
                (None, many) => RecordBody::Commands(many.to_vec()),
            },
            EntryPayload::Membership(m) => membership_record(m),
        };
        RaftRecord {
            index: entry.log_id.index,
            term: entry.log_id.leader_id.term,
            leader: entry.log_id.leader_id.node_id,
            body,
        }
    }

    pub(crate) fn log_id(&self) -> LogId<NodeId> {
        log_id(self.term, self.leader, self.index)
    }

    pub(crate) fn into_entry(self) -> Entry {
        let log_id = self.log_id();
        let payload = match self.body {
            RecordBody::Blank => EntryPayload::Blank,
            RecordBody::Command(c) => EntryPayload::Normal(Proposal::new(vec![c])),
            RecordBody::Commands(commands) => EntryPayload::Normal(Proposal::new(commands)),
            RecordBody::Keyed { at_ms, commands } => {
                let (commands, keys) = commands.into_iter().unzip();
                EntryPayload::Normal(Proposal {
                    commands,
                    keys: Some(ProposalKeys { at_ms, keys }),
                    raise_format: None,
                })
            }
            RecordBody::FormatRaised(format) => {
                EntryPayload::Normal(Proposal::raise_format(format))
            }
            RecordBody::Membership { configs, nodes } => {
                EntryPayload::Membership(membership_from(configs, nodes))
            }
        };
        openraft::Entry::<TypeConfig> { log_id, payload }
    }
}

fn membership_record(m: &Membership<NodeId, BasicNode>) -> RecordBody {
    RecordBody::Membership {
        configs: m
            .get_joint_config()
            .iter()
            .map(|c| c.iter().copied().collect())
            .collect(),
        nodes: m.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
    }
}

pub(crate) fn membership_from(
    configs: Vec<Vec<NodeId>>,
    nodes: Vec<(NodeId, String)>,
) -> Membership<NodeId, BasicNode> {
    let configs: Vec<BTreeSet<NodeId>> = configs
        .into_iter()
        .map(|c| c.into_iter().collect())
        .collect();
    let nodes: BTreeMap<NodeId, BasicNode> = nodes
        .into_iter()
        .map(|(id, addr)| (id, BasicNode { addr }))
        .collect();
    Membership::new(configs, nodes)
}

/// A stored membership, as in a snapshot's metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MembershipRecord {
    pub log_id: Option<(u64, NodeId, u64)>,
    pub configs: Vec<Vec<NodeId>>,
    pub nodes: Vec<(NodeId, String)>,
}

impl MembershipRecord {
    pub(crate) fn from_stored(m: &openraft::StoredMembership<NodeId, BasicNode>) -> Self {
        let RecordBody::Membership { configs, nodes } = membership_record(m.membership()) else {
            unreachable!("membership_record always builds a membership body")
        };
        MembershipRecord {
            log_id: m.log_id().map(|l| log_id_parts(&l)),
            configs,
            nodes,
        }
    }

    pub(crate) fn into_stored(self) -> openraft::StoredMembership<NodeId, BasicNode> {
        openraft::StoredMembership::new(
            self.log_id.map(|(t, n, i)| log_id(t, n, i)),
            membership_from(self.configs, self.nodes),
        )
    }
}

pub(crate) fn log_id(term: u64, leader: NodeId, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, leader), index)
}

pub(crate) fn log_id_parts(l: &LogId<NodeId>) -> (u64, NodeId, u64) {
    (l.leader_id.term, l.leader_id.node_id, l.index)
}

/// What the metadata file holds: the vote and the purge point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RaftMeta {
    /// (term, node, committed).
    pub vote: Option<(u64, NodeId, bool)>,
    /// The last purged log id.
    pub last_purged: Option<(u64, NodeId, u64)>,
}

impl RaftMeta {
    pub(crate) fn vote(&self) -> Option<Vote<NodeId>> {
        self.vote.map(|(term, node, committed)| {
            if committed {
                Vote::new_committed(term, node)
            } else {
                Vote::new(term, node)
            }
        })
    }

    pub(crate) fn set_vote(&mut self, vote: &Vote<NodeId>) {
        self.vote = Some((vote.leader_id.term, vote.leader_id.node_id, vote.committed));
    }

    pub(crate) fn last_purged(&self) -> Option<LogId<NodeId>> {
        self.last_purged.map(|(t, n, i)| log_id(t, n, i))
    }

    pub(crate) fn encode(&self) -> Result<Vec<u8>, PersistError> {
        let body = postcard::to_allocvec(self)?;
        let mut out = Vec::with_capacity(body.len() + 20);
        out.extend_from_slice(RAFT_META_MAGIC);
        out.extend_from_slice(&RAFT_META_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Reads the metadata file of `dir`; `None` if there is none (a new log).
    ///
    /// # Errors
    /// The file's I/O error, or its damage (see [`decode`](Self::decode)).
    pub(crate) fn read(dir: &Path) -> Result<Option<RaftMeta>, PersistError> {
        let path = meta_path(dir);
        match std::fs::read(&path) {
            Ok(bytes) => RaftMeta::decode(&path, &bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(PersistError::Io { path, source }),
        }
    }

    pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<RaftMeta, PersistError> {
        let corrupt = |offset: u64, reason: &str| PersistError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        };
        if bytes.len() < 8 || &bytes[0..8] != RAFT_META_MAGIC {
            return Err(PersistError::BadMagic {
                path: path.to_path_buf(),
                kind: "raft metadata",
            });
        }
        if bytes.len() < 20 {
            return Err(corrupt(0, "shorter than its header"));
        }
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let version = u32_at(8);
        if version != RAFT_META_VERSION {
            return Err(PersistError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
                supported: RAFT_META_VERSION,
            });
        }
        let len = u32_at(12) as usize;
        if bytes.len() != 16 + len + 4 {
            return Err(corrupt(12, "length does not match the file"));
        }
        if u32_at(16 + len) != crc32fast::hash(&bytes[..16 + len]) {
            return Err(PersistError::Checksum {
                path: path.to_path_buf(),
                offset: 0,
                what: "raft metadata",
            });
        }
        postcard::from_bytes(&bytes[16..16 + len])
            .map_err(|e| corrupt(16, &format!("does not decode: {e}")))
    }
}
