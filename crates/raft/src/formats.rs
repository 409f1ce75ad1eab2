//! Rolling upgrades: the cluster's format, raised only once every server reads it.
//!
//! A server of the previous release reads the store's format 2 only: its commands,
//! its snapshots. A cluster upgraded one server at a time holds servers of both
//! releases, so the cluster has a format of its own — the newest that every server
//! reads — kept in the replicated state:
//!
//! - it starts at 2 ([`OLDEST_CLUSTER_FORMAT`]) and is raised by a log entry of its
//!   own ([`Proposal::raise_format`]), so every server, a restarted one too, learns it
//!   at the same index and no leader ever lowers it; a snapshot keeps it as the
//!   version of its store stream (a cluster at 2 writes its snapshots in version 2);
//! - the leader raises it once every member (voters and learners) answers that it
//!   reads the newer format ([`RpcRequest::Formats`](crate::wire::RpcRequest)): on
//!   the first write that needs it, and every few seconds while it is behind, so a
//!   cluster whose last server was upgraded gets there on its own;
//! - until then the leader proposes only commands of format 2: one that needs format
//!   3 (a job's definition, a salted token digest, a token update, setting the salt)
//!   is refused before it is proposed — nothing changes — with
//!   [`FORMAT_NOT_ENABLED`], naming the servers that hold the cluster back (the agent
//!   then makes a token's digest unsalted, as format 2 did; it is re-keyed once the
//!   salt is set);
//! - entries of format 2 cross the wire in the previous release's shapes
//!   (`wire/legacy.rs`), so its servers keep up with a newer leader, and its leader
//!   with newer followers.
//!
//! [`ServerOptions::max_format`](crate::ServerOptions) limits a server to format 2,
//! as if it ran the previous release: it refuses what that release cannot decode and
//! never raises the cluster's format — how the tests run a mixed cluster.

use std::sync::Weak;
use std::time::Duration;

use schedstate::state::Command;
use schedstate::state::v2::OLDEST_CLUSTER_FORMAT as STORE_OLDEST;

use crate::error::ProposeError;
use crate::inbound::RpcRefused;
use crate::server::{Inner, Server};
use crate::{NodeId, Proposal};

/// The newest store format this build reads and writes.
pub const NEWEST_FORMAT: u32 = schedstate::persist::SNAPSHOT_VERSION;
/// The format a cluster starts at: what a server of the previous release reads.
pub const OLDEST_CLUSTER_FORMAT: u32 = STORE_OLDEST;
/// The kind of the refusal of a command that needs a newer cluster format
/// ([`ProposeError::Invalid`]).
pub const FORMAT_NOT_ENABLED: &str = "FormatNotEnabled";
/// How long a leader waits for each member's answer when it asks which formats they
/// read.
const ASK_DEADLINE: Duration = Duration::from_secs(2);
/// How often a leader behind its own newest format asks again.
const RAISE_EVERY: Duration = Duration::from_secs(2);

/// A member's answer to "which formats do you read", as a leader asked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFormat {
    /// The member's id.
    pub id: NodeId,
    /// Its address.
    pub address: String,
    /// The newest store format it reads; `None` if it did not answer.
    pub reads: Option<u32>,
}

impl Server {
    /// The newest store format this server reads (its build's, or less when limited
    /// by [`ServerOptions::max_format`](crate::ServerOptions)).
    pub fn max_format(&self) -> u32 {
        self.inner.max_format
    }

    /// The cluster's format as this server applied it: the newest store format every
    /// server reads, raised by the leader once they all do (see the module's doc).
    pub fn cluster_format(&self) -> u32 {
        self.inner.applied.lock().format
    }

    /// On a server limited to format 2, the refusal a server of the previous release
    /// gives a forwarded `command` it cannot decode.
    pub(crate) fn refuses_as_older(&self, command: &Command) -> Option<RpcRefused> {
        (self.max_format() < NEWEST_FORMAT && !command.fits_format_2())
            .then(|| RpcRefused::Malformed(crate::wire::OLDER_REFUSAL.into()))
    }

    /// Asks every other member (voters and learners) which store formats it reads.
    pub async fn member_formats(&self) -> Vec<MemberFormat> {
        let (members, _) = self.members();
        let mut asks = tokio::task::JoinSet::new();
        for (id, address) in members {
            let server = self.clone();
            asks.spawn(async move {
                let reads = if id == server.id() {
                    Some(server.max_format())
                } else {
                    let ask = server.network().formats(id, address.clone());
                    match tokio::time::timeout(ASK_DEADLINE, ask).await {
                        Ok(Ok(reads)) => Some(reads),
                        // A server of the previous release does not know the RPC.
                        Ok(Err(crate::RpcFailure::Protocol { .. })) => Some(OLDEST_CLUSTER_FORMAT),
                        _ => None,
                    }
                };
                MemberFormat { id, address, reads }
            });
        }
        let mut answers = asks.join_all().await;
        answers.sort_by_key(|m| m.id);
        answers
    }

    /// `command` as this cluster can take it: unchanged if its format is enabled or,
    /// on the leader, once the cluster's format is raised to the one it needs — which
    /// happens only if every member reads it.
    ///
    /// # Errors
    /// [`ProposeError::Invalid`] of kind [`FORMAT_NOT_ENABLED`]: the command needs a
    /// format some member does not read (named in the message). Nothing was proposed.
    pub(crate) async fn fit_to_cluster(&self, command: Command) -> Result<Command, ProposeError> {
        let needed = command.format_needed();
        // Most commands fit every format: no lock taken for them.
        if needed <= OLDEST_CLUSTER_FORMAT || needed <= self.cluster_format() || !self.is_leader() {
            // A follower's proposal is refused as not the leader's anyway.
            return Ok(command);
        }
        match self.raise_format(needed).await {
            Ok(()) => Ok(command),
            Err(why) => Err(ProposeError::Invalid {
                kind: FORMAT_NOT_ENABLED.into(),
                message: format!(
                    "the command {} needs the cluster at store format {needed}, and it is at {}: {why}",
                    command.kind(),
                    self.cluster_format()
                ),
            }),
        }
    }

    /// Raises the cluster's format to `format` if every member reads it (on the
    /// leader; one raise at a time).
    ///
    /// # Errors
    /// Why not, in words: the members that do not read it or did not answer, or
    /// that this server is not the leader.
    pub(crate) async fn raise_format(&self, format: u32) -> Result<(), String> {
        let _one = self.inner.raising.lock().await;
        if self.cluster_format() >= format {
            return Ok(());
        }
        if self.max_format() < format {
            return Err(format!(
                "this server, {}, reads at most store format {}; upgrade it",
                self.id(),
                self.max_format()
            ));
        }
        let members = self.member_formats().await;
        let behind: Vec<String> = members
            .iter()
            .filter(|m| m.reads.is_none_or(|r| r < format))
            .map(|m| match m.reads {
                Some(r) => format!(
                    "server {} at {} reads at most format {r} (an older release)",
                    m.id, m.address
                ),
                None => format!(
                    "server {} at {} did not say which formats it reads",
                    m.id, m.address
                ),
            })
            .collect();
        if !behind.is_empty() {
            return Err(format!(
                "{}; upgrade every server to this release, then try again",
                behind.join("; ")
            ));
        }
        match self
            .inner
            .raft
            .client_write(Proposal::raise_format(format))
            .await
        {
            Ok(written) => {
                tracing::info!(
                    format,
                    index = written.log_id.index,
                    "every server reads store format {format}: the cluster's format raised"
                );
                Ok(())
            }
            Err(e) => Err(format!("the raise was not committed: {e}")),
        }
    }
}

/// The leader's periodic raise: while the cluster's format is behind this server's
/// newest, asks the members again every [`RAISE_EVERY`] and raises it once they all
/// read it. Ends when the server is dropped.
pub(crate) async fn keep_raising(server: Weak<Inner>) {
    let mut said_why = String::new();
    loop {
        tokio::time::sleep(RAISE_EVERY).await;
        let Some(inner) = server.upgrade() else {
            return;
        };
        let server = Server { inner };
        let newest = server.max_format();
        if !server.is_leader() || server.cluster_format() >= newest {
            continue;
        }
        if let Err(why) = server.raise_format(newest).await {
            // Said once per reason, not every round.
            if why != said_why {
                tracing::info!(
                    cluster_format = server.cluster_format(),
                    "the cluster's store format stays behind this server's ({newest}): {why}"
                );
                said_why = why;
            }
        }
    }
}
