//! [`Gates`]: the counted resources of an agent — connections ([`Connections`]),
//! bytes of request bodies held (the clients' budget, each client's share of it, and
//! the servers' own), waiting blocking queries, open event streams, snapshot
//! downloads, scans ([`Scans`]). Each is taken without waiting: over a limit the
//! caller is refused at once (a connection closed, a request answered 429), so a flood
//! costs the agent nothing it has not budgeted and other clients are served meanwhile.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::connections::Connections;
use super::scans::Scans;
use super::shares::{ClientKeys, Held, Shares};
use crate::config::Limits;

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    BlockingQueries,
    EventStreams,
    /// One client's share of the blocking queries.
    ClientBlockingQueries,
    /// One client's share of the event streams.
    ClientEventStreams,
    SnapshotDownloads,
    BodyBytes,
    /// One client's share of the body budget.
    ClientBodyBytes,
    /// The servers' own body budget (Raft RPCs).
    RaftBodyBytes,
    /// Bytes of large answers not yet sent, in all.
    AnswerBytes,
    /// One client's share of them.
    ClientAnswerBytes,
}

impl Refused {
    /// What the 429 says.
    pub fn message(self, limits: &Limits) -> String {
        match self {
            Refused::BlockingQueries => format!(
                "{} blocking queries are waiting on this server already; retry later or on another server",
                limits.blocking_queries
            ),
            Refused::EventStreams => format!(
                "{} event streams are open on this server already",
                limits.event_streams
            ),
            Refused::ClientBlockingQueries => format!(
                "this client (address or token) has {} blocking queries waiting on this server \
                 already (blocking_queries_per_client)",
                limits.blocking_queries_per_client
            ),
            Refused::ClientEventStreams => format!(
                "this client (address or token) has {} event streams open on this server \
                 already (event_streams_per_client)",
                limits.event_streams_per_client
            ),
            Refused::SnapshotDownloads => format!(
                "{} snapshot downloads are running on this server already",
                limits.snapshot_downloads
            ),
            Refused::BodyBytes => format!(
                "this server holds {} bytes of request bodies already",
                limits.body_bytes_in_flight
            ),
            Refused::ClientBodyBytes => format!(
                "this client (address or token) holds {} bytes of request bodies already \
                 (body_bytes_per_client)",
                limits.body_bytes_per_client
            ),
            Refused::AnswerBytes => format!(
                "this server holds {} bytes of answers its clients have not read yet \
                 (answer_bytes_in_flight); retry later",
                limits.answer_bytes_in_flight
            ),
            Refused::ClientAnswerBytes => format!(
                "this client (address) has {} bytes of answers it has not read yet \
                 (answer_bytes_per_client); read them, or ask for pages (per_page=)",
                limits.answer_bytes_per_client
            ),
            Refused::RaftBodyBytes => format!(
                "this server holds {} bytes of Raft RPC bodies already",
                limits.raft_body_bytes
            ),
        }
    }
}

/// Room for a request body in memory, grown as its bytes arrive ([`BodyPermit::grow`]):
/// a body counts for what was received of it, never for what it claims.
pub(crate) struct BodyPermit {
    budget: Arc<Semaphore>,
    why: Refused,
    permit: Option<OwnedSemaphorePermit>,
    /// The client's share (none for the servers' own RPCs).
    share: Option<Held>,
}

impl BodyPermit {
    /// Room for `more` bytes; refused (and nothing more taken) over the budget or the
    /// client's share.
    pub(crate) fn grow(&mut self, more: usize) -> Result<(), Refused> {
        if more == 0 {
            return Ok(());
        }
        if let Some(share) = &mut self.share
            && !share.grow(more)
        {
            return Err(Refused::ClientBodyBytes);
        }
        // Refused here, the share keeps `more` until the permit is dropped — with
        // the request, which a refusal ends.
        let p = Gates::take(&self.budget, more, self.why)?;
        match &mut self.permit {
            Some(held) => held.merge(p),
            None => self.permit = Some(p),
        }
        Ok(())
    }

    /// The bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }
}

/// A place under a count and its client's share of it, given back when dropped.
pub(crate) struct CountPermit {
    _all: OwnedSemaphorePermit,
    _share: Held,
}

/// A large answer's bytes, held until it was handed to its connection.
pub(crate) struct AnswerPermit {
    _all: OwnedSemaphorePermit,
    _share: Held,
}

/// The counted resources.
pub(crate) struct Gates {
    blocking: Arc<Semaphore>,
    blocking_shares: Arc<Shares>,
    streams: Arc<Semaphore>,
    stream_shares: Arc<Shares>,
    snapshots: Arc<Semaphore>,
    body_bytes: Arc<Semaphore>,
    body_shares: Arc<Shares>,
    raft_body_bytes: Arc<Semaphore>,
    answer_bytes: Arc<Semaphore>,
    answer_shares: Arc<Shares>,
    /// Reads whose work grows with a table.
    pub scans: Scans,
    /// Open connections: clients' and servers'.
    pub conns: Connections,
}

/// A semaphore's permits are `u32`; a limit above that is as good as none.
fn permits(n: usize) -> usize {
    n.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize)
}

impl Gates {
    pub fn new(limits: &Limits) -> Gates {
        Gates {
            blocking: Arc::new(Semaphore::new(permits(limits.blocking_queries))),
            blocking_shares: Shares::new(limits.blocking_queries_per_client),
            streams: Arc::new(Semaphore::new(permits(limits.event_streams))),
            stream_shares: Shares::new(limits.event_streams_per_client),
            snapshots: Arc::new(Semaphore::new(permits(limits.snapshot_downloads))),
            body_bytes: Arc::new(Semaphore::new(permits(limits.body_bytes_in_flight))),
            body_shares: Shares::new(limits.body_bytes_per_client),
            raft_body_bytes: Arc::new(Semaphore::new(permits(limits.raft_body_bytes))),
            answer_bytes: Arc::new(Semaphore::new(permits(limits.answer_bytes_in_flight))),
            answer_shares: Shares::new(limits.answer_bytes_per_client),
            scans: Scans::new(limits),
            conns: Connections::new(limits),
        }
    }

    fn take(sem: &Arc<Semaphore>, n: usize, why: Refused) -> Result<OwnedSemaphorePermit, Refused> {
        let n = u32::try_from(n).map_err(|_| why)?;
        sem.clone().try_acquire_many_owned(n).map_err(|_| why)
    }

    /// A waiting blocking query of `client`.
    pub fn blocking_query(&self, client: &ClientKeys) -> Result<CountPermit, Refused> {
        let share = self
            .blocking_shares
            .take(client, 1)
            .ok_or(Refused::ClientBlockingQueries)?;
        let all = Self::take(&self.blocking, 1, Refused::BlockingQueries)?;
        Ok(CountPermit {
            _all: all,
            _share: share,
        })
    }

    /// An open event stream of `client`.
    pub fn event_stream(&self, client: &ClientKeys) -> Result<CountPermit, Refused> {
        let share = self
            .stream_shares
            .take(client, 1)
            .ok_or(Refused::ClientEventStreams)?;
        let all = Self::take(&self.streams, 1, Refused::EventStreams)?;
        Ok(CountPermit {
            _all: all,
            _share: share,
        })
    }

    /// A running snapshot download.
    pub fn snapshot_download(&self) -> Result<OwnedSemaphorePermit, Refused> {
        Self::take(&self.snapshots, 1, Refused::SnapshotDownloads)
    }

    /// Room for a client's body, empty until it grows.
    pub fn client_body(&self, client: &ClientKeys) -> BodyPermit {
        BodyPermit {
            budget: self.body_bytes.clone(),
            why: Refused::BodyBytes,
            permit: None,
            share: self.body_shares.take(client, 0),
        }
    }

    /// Room for a Raft RPC's body (a server's, already authenticated by its head),
    /// empty until it grows: the servers' own budget, no client's share.
    pub fn raft_body(&self) -> BodyPermit {
        BodyPermit {
            budget: self.raft_body_bytes.clone(),
            why: Refused::RaftBodyBytes,
            permit: None,
            share: None,
        }
    }

    /// Whether a large answer of at least `bytes` could be held for `client` now —
    /// asked before a list is built, so that a client (or all of them) at its budget
    /// of unsent answers is refused before the work, not after. Takes nothing.
    pub fn answer_room(&self, client: &ClientKeys, bytes: usize) -> Result<(), Refused> {
        let held = self.answer_shares.held_by(&client.address);
        if held.saturating_add(bytes) > self.answer_shares.share() {
            return Err(Refused::ClientAnswerBytes);
        }
        if self.answer_bytes.available_permits() < bytes {
            return Err(Refused::AnswerBytes);
        }
        Ok(())
    }

    /// Room for a large answer of `bytes` for `client` (by its address: the answer
    /// is counted outside the token check).
    pub fn answer(&self, client: &ClientKeys, bytes: usize) -> Result<AnswerPermit, Refused> {
        let by_address = ClientKeys {
            address: client.address.clone(),
            token: None,
        };
        let share = self
            .answer_shares
            .take(&by_address, bytes)
            .ok_or(Refused::ClientAnswerBytes)?;
        let all = Self::take(&self.answer_bytes, bytes, Refused::AnswerBytes)?;
        Ok(AnswerPermit {
            _all: all,
            _share: share,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_refused_over_its_limit_and_given_back() {
        let limits = Limits {
            blocking_queries: 1,
            body_bytes_in_flight: 10,
            ..Limits::default()
        };
        let g = Gates::new(&limits);
        let me = ClientKeys::new("10.0.0.1".parse().unwrap(), None);
        let q = g.blocking_query(&me).unwrap();
        assert_eq!(g.blocking_query(&me).err(), Some(Refused::BlockingQueries));
        drop(q);
        assert!(g.blocking_query(&me).is_ok());
        let me = ClientKeys::new("10.0.0.1".parse().unwrap(), None);
        let mut b = g.client_body(&me);
        b.grow(8).unwrap();
        assert_eq!(b.bytes(), 8);
        assert!(g.client_body(&me).grow(3).is_err());
        drop(b);
        assert!(g.client_body(&me).grow(10).is_ok());
        assert!(g.client_body(&me).grow(usize::MAX).is_err());
    }

    #[test]
    fn a_client_holds_its_share_of_body_bytes_and_the_servers_their_own_budget() {
        let limits = Limits {
            body_bytes_in_flight: 100,
            body_bytes_per_client: 30,
            raft_body_bytes: 50,
            ..Limits::default()
        };
        let g = Gates::new(&limits);
        let me = ClientKeys::new("10.0.0.1".parse().unwrap(), Some("t"));
        let mut mine = g.client_body(&me);
        mine.grow(20).unwrap();
        assert_eq!(mine.grow(11), Err(Refused::ClientBodyBytes));
        mine.grow(10).unwrap();
        // Others fill the rest of the clients' budget ...
        let mut others = Vec::new();
        for i in 2..=4 {
            let k = ClientKeys::new(format!("10.0.0.{i}").parse().unwrap(), None);
            let mut b = g.client_body(&k);
            b.grow(if i == 4 { 10 } else { 30 }).unwrap();
            others.push(b);
        }
        let late = ClientKeys::new("10.0.0.9".parse().unwrap(), None);
        assert_eq!(g.client_body(&late).grow(1), Err(Refused::BodyBytes));
        // ... and the servers' RPCs still have theirs.
        g.raft_body().grow(50).unwrap();
    }
}
