//! Consistent reads on a follower: ReadIndex, as etcd does it.
//!
//! A follower used to hand a consistent read to the leader whole (the agent proxied
//! the HTTP request), one connection per read in flight: hundreds of blocked reads
//! on a follower filled the leader's connection limit, and Raft's own connections
//! were then refused with them. Instead, the follower asks the leader for a **read
//! index** — the index the leader had applied once it confirmed its leadership with
//! a quorum, in a round that started after the request arrived
//! ([`Server::answer_read_index`], openraft's `ensure_linearizable`, sharing the
//! leader's [`ReadBarrier`] rounds) — waits until it applied that index itself, and
//! serves the read from its own store. Anything committed before the read arrived
//! was committed before the leader's round started, so it is at or below that
//! index: the read is linearizable, and a blocking read then waits on the follower.
//!
//! **Coalescing.** One ReadIndex RPC is in flight per follower at a time; every read
//! that arrived before a round started is answered by that round, and a read arriving
//! during a round waits for the next (the same [`ReadBarrier`] rule the leader
//! applies to its quorum rounds). 15,000 concurrent reads cost a handful of RPCs,
//! each riding the Raft transport's connections to the leader, not one each.
//!
//! **Never a hang.** No leader known (after a short wait for an election), a leader
//! that does not answer within [`READ_INDEX_WAIT`], one this server stops taking for
//! the leader while asked, one that says it is not the leader: each is an error the
//! caller answers 503 with. A leader that does not know the RPC (a server older
//! than this one) fails with [`ReadIndexError::Unsupported`]: the caller falls back
//! to sending the read to it whole.

use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, RaftError};

use crate::forward::leader_moves_from;
use crate::network::RpcFailure;
use crate::{ClusterError, NodeId, ProposeError, Server};

/// How long a leader may take to confirm its leadership for a read index, and a
/// follower to get one: openraft's quorum round plus the leader's apply, on a loaded
/// machine. The agent gives a consistent read as long on the leader.
pub const READ_INDEX_WAIT: Duration = Duration::from_secs(5);

/// How long a leader's confirmation round keeps asking a quorum that did not answer
/// within openraft's heartbeat interval ([`Server::confirm_leadership`]).
const QUORUM_RETRY: Duration = Duration::from_secs(1);

/// How long a follower that knows no leader waits for an election's outcome before
/// it says so.
const LEADER_WAIT: Duration = Duration::from_secs(3);

/// Why a follower got no read index, or did not reach it in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadIndexError {
    /// No leader is known (an election under way, or no quorum).
    #[error("no leader is known")]
    NoLeader,
    /// The leader does not know the ReadIndex RPC (a server older than this one):
    /// send it the read itself.
    #[error("the leader {leader} at {address} does not answer ReadIndex ({reason})")]
    Unsupported {
        /// The leader.
        leader: NodeId,
        /// Its address.
        address: String,
        /// What it answered.
        reason: String,
    },
    /// The leader could not be asked (unreachable, or no answer within
    /// [`READ_INDEX_WAIT`]).
    #[error("the leader {leader} gave no read index: {reason}")]
    Unreachable {
        /// The leader.
        leader: NodeId,
        /// Why.
        reason: String,
    },
    /// This server stopped taking `leader` for the leader while it asked it.
    #[error("server {leader} stopped leading while it was asked for a read index; retry")]
    LeaderMoved {
        /// The server asked.
        leader: NodeId,
    },
    /// The server asked refused: not the leader (any more), no quorum, stopped.
    #[error(transparent)]
    Refused(#[from] ClusterError),
    /// This server had not applied the read index when the caller's time was up.
    #[error("this server had not applied index {index} within {waited_ms} ms")]
    Behind {
        /// The read index.
        index: u64,
        /// How long the caller waited in all.
        waited_ms: u64,
    },
    /// The caller's time was up before a round answered it.
    #[error("no read index within {waited_ms} ms")]
    Timeout {
        /// How long the caller waited.
        waited_ms: u64,
    },
}

impl Server {
    /// On the leader, a ReadIndex RPC's answer: once a confirmation round that
    /// started after this call has finished (shared with the leader's own consistent
    /// reads, [`read_consistent`](Self::read_consistent)), the index this server has
    /// applied — at least everything committed before the call.
    ///
    /// # Errors
    /// [`ClusterError::NotLeader`], no quorum within [`READ_INDEX_WAIT`], stopped.
    pub async fn answer_read_index(&self) -> Result<u64, ClusterError> {
        match tokio::time::timeout(READ_INDEX_WAIT, self.confirm_leadership()).await {
            Ok(Ok(())) => Ok(self.last_applied()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClusterError::Unavailable(format!(
                "leadership not confirmed by a quorum within {READ_INDEX_WAIT:?}"
            ))),
        }
    }

    /// Confirms this server's leadership with a quorum in a round that started after
    /// the call, and waits until it applied everything committed before (openraft's
    /// `ensure_linearizable`); concurrent calls share rounds. openraft gives the
    /// quorum one heartbeat interval (40 ms) to answer: a loaded machine misses that
    /// now and then, and 200 woken blocking reads were answered 503 for it. A round
    /// asks again for up to [`QUORUM_RETRY`] (each try starts after the reads it
    /// answers arrived, so any of them confirms them).
    pub(crate) async fn confirm_leadership(&self) -> Result<(), ClusterError> {
        let raft = self.raft();
        self.leader_reads()
            .confirm(|| async {
                let until = Instant::now() + QUORUM_RETRY;
                loop {
                    match raft.ensure_linearizable().await {
                        Ok(_) => return Ok(()),
                        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                            return Err(ProposeError::not_leader(f).into());
                        }
                        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q))) => {
                            if Instant::now() >= until {
                                return Err(ClusterError::Unavailable(q.to_string()));
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(RaftError::Fatal(_)) => return Err(ClusterError::Stopped),
                    }
                }
            })
            .await
    }

    /// Makes a consistent read possible here, on any server: returns, within
    /// `timeout`, once this server applied everything committed before the call — a
    /// read of its store is then linearizable. On the leader, a confirmation round
    /// of its own; on a follower, a read index from the leader (rounds shared by
    /// every read waiting, one RPC in flight), then its own apply of that index.
    /// Returns the read index.
    ///
    /// # Errors
    /// [`ReadIndexError`]: no leader, the leader unreachable, moved or refusing, the
    /// time up; [`ReadIndexError::Unsupported`] when the leader is an older server
    /// (send it the read instead).
    pub async fn read_index(&self, timeout: Duration) -> Result<u64, ReadIndexError> {
        let start = Instant::now();
        let waited = || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        if self.is_leader() {
            return match tokio::time::timeout(timeout, self.confirm_leadership()).await {
                Ok(Ok(())) => Ok(self.last_applied()),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err(ReadIndexError::Timeout {
                    waited_ms: waited(),
                }),
            };
        }
        let round = self.follower_reads().confirm(|| follower_round(self));
        let index =
            tokio::time::timeout(timeout, round)
                .await
                .map_err(|_| ReadIndexError::Timeout {
                    waited_ms: waited(),
                })??;
        // The round waited for the apply; a snapshot installed since cannot take
        // this server back, but stay exact rather than assume it.
        if self.last_applied() < index {
            let left = timeout.saturating_sub(start.elapsed());
            self.wait_applied(index, left)
                .await
                .map_err(|_| ReadIndexError::Behind {
                    index,
                    waited_ms: waited(),
                })?;
        }
        Ok(index)
    }

    /// ReadIndex rounds this follower has run (one RPC each, at most).
    pub fn read_index_rounds(&self) -> u64 {
        self.follower_reads().rounds()
    }
}

/// One round on a follower: the leader it knows of asked once (or, if this server
/// has become the leader meanwhile, its own confirmation), then this server's own
/// apply of the index awaited.
async fn follower_round(server: &Server) -> Result<u64, ReadIndexError> {
    let (leader, addr) = match server.leader_node().await {
        Some(l) => l,
        None => {
            // An election under way: wait a moment for its outcome.
            let _ = server.wait_for_leader(LEADER_WAIT).await;
            server.leader_node().await.ok_or(ReadIndexError::NoLeader)?
        }
    };
    if leader == server.id() {
        server.confirm_leadership().await?;
        return Ok(server.last_applied());
    }
    if addr.is_empty() {
        return Err(ReadIndexError::NoLeader);
    }
    let start = Instant::now();
    let ask = tokio::time::timeout(
        READ_INDEX_WAIT,
        server.network().read_index(leader, addr.clone()),
    );
    let index = tokio::select! {
        answer = ask => match answer {
            Ok(Ok(Ok(index))) => Ok(index),
            Ok(Ok(Err(refused))) => Err(refused.into()),
            // Not understood: an older server (postcard cannot decode the request).
            Ok(Err(RpcFailure::Protocol { reason, .. })) => Err(ReadIndexError::Unsupported {
                leader,
                address: addr,
                reason,
            }),
            Ok(Err(failure)) => Err(ReadIndexError::Unreachable {
                leader,
                reason: failure.to_string(),
            }),
            Err(_) => Err(ReadIndexError::Unreachable {
                leader,
                reason: format!("no answer within {READ_INDEX_WAIT:?}"),
            }),
        },
        () = leader_moves_from(server, leader) => Err(ReadIndexError::LeaderMoved { leader }),
    }?;
    // The round waits for this server's apply, once for every read it answers:
    // openraft's `wait` wakes each waiter on every change of the metrics, and
    // thousands of reads waiting each on their own were thousands of wakes an entry.
    if server.last_applied() < index {
        server
            .wait_applied(index, READ_INDEX_WAIT)
            .await
            .map_err(|_| ReadIndexError::Behind {
                index,
                waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
            })?;
    }
    Ok(index)
}
