//! The JSON shapes of the HTTP API: the rows in Nomad's shapes ([`nomad`]), the ACL
//! shapes, write answers, errors, the Raft configuration, the event stream. Shared by
//! the server and the [`Client`](crate::Client).
//!
//! Lists come in the store's key order, which is part of the API: nodes, plugins and
//! a node's allocations by id; volumes by (namespace, id). Volumes' secrets are never
//! answered (`Secrets: null`), their mount flags `["[REDACTED]"]`. Commands
//! (`POST /v1/commands`) keep the model's serde forms.

mod acl;
mod acl_request;
mod agent;
pub mod nomad;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use acl::ttl_nanos as acl_ttl_nanos;
pub use acl::{
    AclBootstrapRequest, AclTokenListStub, AclTokenRequest, AclTokenView, AgentHealth,
    HealthStatus, TokenRequestError,
};
pub use agent::{AgentSelf, AgentStats, NomadStats, StatsError};

/// The header every answer carries: the index the answer reflects (for a read, the
/// index of what it read; for a write, the write's). Pass it back as `?index=` to
/// block until that changes.
pub const INDEX_HEADER: &str = "X-Schedstate-Index";

/// The same value under Nomad's name, for clients written against Nomad.
pub const NOMAD_INDEX_HEADER: &str = "X-Nomad-Index";

/// The header schedstate's own clients send their ACL token in (`X-Nomad-Token` and
/// `Authorization: Bearer` are taken too).
pub const TOKEN_HEADER: &str = "X-Schedstate-Token";

/// Whether the server that answered knows a leader (`true`/`false`).
pub const KNOWN_LEADER_HEADER: &str = "X-Schedstate-KnownLeader";

/// The same under Nomad's name.
pub const NOMAD_KNOWN_LEADER_HEADER: &str = "X-Nomad-KnownLeader";

/// Milliseconds since the answering server last heard from the leader (0 on the
/// leader), Nomad's header.
pub const NOMAD_LAST_CONTACT_HEADER: &str = "X-Nomad-LastContact";

/// On a paginated list: the `next_token` of the next page (absent on the last).
pub const NOMAD_NEXT_TOKEN_HEADER: &str = "X-Nomad-NextToken";

/// The largest request body the public API takes (a `Command`); more is 413.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// One row of `GET /v1/plugins` (defined with the model, where the command line's
/// status tables read it too).
pub use schedstate::model::PluginListStub;

/// The answer to `POST /v1/commands`: the command committed and was applied at
/// `index` on the server that answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteResponse {
    /// The Raft log index of the command's entry (its rows' modify index).
    pub index: u64,
}

/// The answer to a job write (`POST /v1/jobs`, `DELETE /v1/job/<id>`): Nomad's
/// `JobRegisterResponse` / `JobDeregisterResponse`, without an evaluation (the store
/// schedules nothing: `EvalID` is empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobWriteResponse {
    /// Always empty.
    #[serde(rename = "EvalID", default)]
    pub eval_id: String,
    /// The job's `JobModifyIndex` after a registration (unchanged when the same
    /// definition was registered again); the write's index after a stop or purge.
    #[serde(rename = "JobModifyIndex", default)]
    pub job_modify_index: u64,
    /// The Raft log index of the write.
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable name for the kind of error (`NodeNotFound`, `BadRequest`, `NoLeader`,
    /// `IndexCompacted`, …): for a refused command, the store's
    /// [`StateError::kind`](schedstate::state::StateError::kind).
    pub kind: String,
    /// What went wrong, for a person.
    pub message: String,
    /// For a refused command: the index of the no-op entry it became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
}

/// `GET /v1/operator/raft/configuration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftConfiguration {
    /// The index of the configuration's log entry.
    pub index: u64,
    /// Every member.
    pub servers: Vec<RaftServer>,
}

/// One member of the Raft configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftServer {
    /// Its id.
    pub id: u64,
    /// Its address (API and Raft on one port).
    pub address: String,
    /// Whether it is the leader, as the answering server knows.
    pub leader: bool,
    /// Whether it votes (a learner does not).
    pub voter: bool,
}

/// `POST /v1/operator/raft/peer`: add a server (as a learner, then a voter once it
/// caught up), remove one, or leave a joint configuration a lost leader left behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum PeerChange {
    /// Add server `id` at `address` (`host:port`). It must catch up within `wait`
    /// (a duration like `30s`; 30 s when absent) or it is removed again.
    Add {
        /// Its id.
        id: u64,
        /// Its address.
        address: String,
        /// How long it may take to catch up.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait: Option<String>,
    },
    /// Remove server `id`.
    Remove {
        /// Its id.
        id: u64,
    },
    /// Leave a joint configuration for its newer half (nothing to do otherwise).
    Recover,
}

/// How long a new server may take to catch up when the request does not say.
pub const PEER_CATCH_UP_DEFAULT: Duration = Duration::from_secs(30);

/// The longest a request may give a new server to catch up (a longer `wait` is cut).
pub const PEER_CATCH_UP_MAX: Duration = Duration::from_secs(600);

impl PeerChange {
    /// How long an added server may take to catch up: its `wait`, at most
    /// [`PEER_CATCH_UP_MAX`], [`PEER_CATCH_UP_DEFAULT`] when absent; zero for the
    /// other changes.
    ///
    /// # Errors
    /// A `wait` that is not a duration (`30s`, `2m`, `1m 30s`).
    pub fn catch_up(&self) -> Result<Duration, String> {
        match self {
            PeerChange::Add { wait: None, .. } => Ok(PEER_CATCH_UP_DEFAULT),
            PeerChange::Add { wait: Some(w), .. } => humantime::parse_duration(w)
                .map(|d| d.min(PEER_CATCH_UP_MAX))
                .map_err(|e| format!("wait={w:?} is not a duration like 30s: {e}")),
            PeerChange::Remove { .. } | PeerChange::Recover => Ok(Duration::ZERO),
        }
    }

    /// The longest the agent takes to answer this change: the catch-up wait and
    /// every membership step within its deadline (the newest entry applied, the
    /// learner's entry, then the promotion's or the removal's, each waiting for the
    /// one before), the leadership check in front, and a margin for the network.
    pub fn answer_within(&self) -> Duration {
        let steps = 4 * schedstate_raft::MEMBERSHIP_STEP_DEADLINE;
        self.catch_up().unwrap_or_default() + steps + Duration::from_secs(10)
    }
}

/// The answer to `POST /v1/operator/raft/peer`: the change, made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerChangeDone {
    /// The change as it was asked for.
    pub done: PeerChange,
    /// For `recover`: whether the configuration was joint (and was left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_joint: Option<bool>,
}

/// The body of `POST /v1/operator/raft/transfer-leader`: hand the leadership to voter
/// `to`, or (without it) to the most caught-up voter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferLeader {
    /// The voter to hand over to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
}

/// The answer to `POST /v1/operator/raft/transfer-leader`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderTransferred {
    /// The server that leads now.
    pub leader: u64,
}

/// The answer to `PUT /v1/operator/snapshot`: the snapshot file was restored into
/// every server of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRestored {
    /// The Raft index of the restore's last entry: every index of the restored state
    /// (the store's, every table's, every row's) is this one.
    pub index: u64,
    /// The file's size.
    pub bytes: u64,
    /// How many log entries carried it.
    pub pieces: u32,
}

/// One line of `GET /v1/event/stream`, Nomad's envelope: the events of one committed
/// write. An idle stream sends `{}` lines as heartbeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventBatch {
    /// The write's index.
    #[serde(rename = "Index")]
    pub index: u64,
    /// Its row changes that match the stream's topics, in (table, key) order.
    #[serde(rename = "Events")]
    pub events: Vec<Event>,
}

/// One row a committed write changed, as Nomad's `api.Event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `Node`, `Allocation`, `CSIPlugin` or `CSIVolume`.
    #[serde(rename = "Topic")]
    pub topic: String,
    /// As Nomad names them: `NodeRegistration`, `NodeDeregistration`, `NodeDrain`,
    /// `NodeEligibility`, `NodeEvent`, `AllocationUpdated`; and schedstate's own
    /// `AllocationDeleted`, `CSIPluginUpdated`, `CSIPluginDeleted`,
    /// `CSIVolumeRegistered`, `CSIVolumeUpdated`, `CSIVolumeDeregistered`.
    #[serde(rename = "Type")]
    pub kind: String,
    /// The row's id.
    #[serde(rename = "Key")]
    pub key: String,
    /// The row's namespace (allocations and volumes), else empty.
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
    /// Other keys a `topic=Topic:key` filter matches (an allocation's job and node, a
    /// volume's plugin).
    #[serde(rename = "FilterKeys", default)]
    pub filter_keys: Vec<String>,
    /// The write's index.
    #[serde(rename = "Index")]
    pub index: u64,
    /// The row after the write (before it, when it was deleted) in Nomad's shape,
    /// under its kind's name: `{"Node": {…}}`, `{"Allocation": {…}}`,
    /// `{"CSIPlugin": {…}}`, `{"CSIVolume": {…}}`.
    #[serde(rename = "Payload")]
    pub payload: serde_json::Value,
}

/// Redacts a volume for an answer ([`CsiVolume::redact`](schedstate::model::CsiVolume::redact)):
/// no secrets (Nomad's `Secrets: null`), mount flags as `["[REDACTED]"]`. Secrets
/// never leave the server.
pub(crate) fn redact(v: &mut schedstate::model::CsiVolume) {
    v.redact();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(wait: Option<&str>) -> PeerChange {
        PeerChange::Add {
            id: 4,
            address: "127.0.0.1:4646".into(),
            wait: wait.map(str::to_string),
        }
    }

    #[test]
    fn a_peer_change_waits_as_asked_within_bounds_and_the_client_longer() {
        assert_eq!(add(None).catch_up(), Ok(PEER_CATCH_UP_DEFAULT));
        assert_eq!(add(Some("2m")).catch_up(), Ok(Duration::from_secs(120)));
        assert_eq!(add(Some("1000h")).catch_up(), Ok(PEER_CATCH_UP_MAX));
        assert!(add(Some("soon")).catch_up().is_err());
        assert_eq!(PeerChange::Recover.catch_up(), Ok(Duration::ZERO));
        // The client's timeout covers the wait and the steps around it.
        let two_minutes = add(Some("2m")).answer_within();
        assert!(
            two_minutes > Duration::from_secs(120) + 2 * schedstate_raft::MEMBERSHIP_STEP_DEADLINE
        );
        assert!(
            PeerChange::Remove { id: 4 }.answer_within()
                > 2 * schedstate_raft::MEMBERSHIP_STEP_DEADLINE
        );
    }
}
