//! [`Gates`]: the counted resources of an agent — connections per client and in all,
//! bytes of request bodies held, waiting blocking queries, open event streams,
//! snapshot downloads. Each is taken without waiting: over a limit the caller is
//! refused at once (a connection closed, a request answered 429), so a flood costs
//! the agent nothing it has not budgeted and other clients are served meanwhile.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Limits;

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    BlockingQueries,
    EventStreams,
    SnapshotDownloads,
    BodyBytes,
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
            Refused::SnapshotDownloads => format!(
                "{} snapshot downloads are running on this server already",
                limits.snapshot_downloads
            ),
            Refused::BodyBytes => format!(
                "this server holds {} bytes of request bodies already",
                limits.body_bytes_in_flight
            ),
        }
    }
}

/// Held while a request body of some size is in memory.
pub(crate) struct BodyPermit(#[allow(dead_code)] OwnedSemaphorePermit);

/// The counted resources.
pub(crate) struct Gates {
    blocking: Arc<Semaphore>,
    streams: Arc<Semaphore>,
    snapshots: Arc<Semaphore>,
    body_bytes: Arc<Semaphore>,
    conns: Arc<Mutex<Conns>>,
    conns_per_client: usize,
    conns_total: usize,
}

#[derive(Default)]
struct Conns {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

/// An open connection, counted until dropped.
pub(crate) struct ConnPermit {
    conns: Arc<Mutex<Conns>>,
    ip: IpAddr,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut c = self.conns.lock();
        c.total -= 1;
        if let Some(n) = c.by_client.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.by_client.remove(&self.ip);
            }
        }
    }
}

/// A semaphore's permits are `u32`; a limit above that is as good as none.
fn permits(n: usize) -> usize {
    n.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize)
}

impl Gates {
    pub fn new(limits: &Limits) -> Gates {
        Gates {
            blocking: Arc::new(Semaphore::new(permits(limits.blocking_queries))),
            streams: Arc::new(Semaphore::new(permits(limits.event_streams))),
            snapshots: Arc::new(Semaphore::new(permits(limits.snapshot_downloads))),
            body_bytes: Arc::new(Semaphore::new(permits(limits.body_bytes_in_flight))),
            conns: Arc::default(),
            conns_per_client: limits.conns_per_client,
            conns_total: limits.conns,
        }
    }

    fn take(sem: &Arc<Semaphore>, n: usize, why: Refused) -> Result<OwnedSemaphorePermit, Refused> {
        let n = u32::try_from(n).map_err(|_| why)?;
        sem.clone().try_acquire_many_owned(n).map_err(|_| why)
    }

    /// A waiting blocking query.
    pub fn blocking_query(&self) -> Result<OwnedSemaphorePermit, Refused> {
        Self::take(&self.blocking, 1, Refused::BlockingQueries)
    }

    /// An open event stream.
    pub fn event_stream(&self) -> Result<OwnedSemaphorePermit, Refused> {
        Self::take(&self.streams, 1, Refused::EventStreams)
    }

    /// A running snapshot download.
    pub fn snapshot_download(&self) -> Result<OwnedSemaphorePermit, Refused> {
        Self::take(&self.snapshots, 1, Refused::SnapshotDownloads)
    }

    /// Room for a body of `bytes`.
    pub fn body(&self, bytes: usize) -> Result<BodyPermit, Refused> {
        Self::take(&self.body_bytes, bytes.max(1), Refused::BodyBytes).map(BodyPermit)
    }

    /// A new connection from `ip`, or `None` when that client or the agent has as
    /// many as allowed.
    pub fn connection(&self, ip: IpAddr) -> Option<ConnPermit> {
        let mut c = self.conns.lock();
        if c.total >= self.conns_total {
            return None;
        }
        let n = c.by_client.entry(ip).or_insert(0);
        if *n >= self.conns_per_client {
            return None;
        }
        *n += 1;
        c.total += 1;
        Some(ConnPermit {
            conns: self.conns.clone(),
            ip,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_counted_per_client_and_in_all() {
        let limits = Limits {
            conns_per_client: 2,
            conns: 3,
            ..Limits::default()
        };
        let g = Gates::new(&limits);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = g.connection(a).unwrap();
        let _a2 = g.connection(a).unwrap();
        assert!(g.connection(a).is_none(), "a third from one client");
        let _b1 = g.connection(b).unwrap();
        assert!(g.connection(b).is_none(), "a fourth in all");
        drop(a1);
        assert!(g.connection(a).is_some(), "room again once one closed");
    }

    #[test]
    fn work_is_refused_over_its_limit_and_given_back() {
        let limits = Limits {
            blocking_queries: 1,
            body_bytes_in_flight: 10,
            ..Limits::default()
        };
        let g = Gates::new(&limits);
        let q = g.blocking_query().unwrap();
        assert_eq!(g.blocking_query().err(), Some(Refused::BlockingQueries));
        drop(q);
        assert!(g.blocking_query().is_ok());
        let b = g.body(8).unwrap();
        assert!(g.body(3).is_err());
        drop(b);
        assert!(g.body(10).is_ok());
        assert!(g.body(usize::MAX).is_err());
    }
}
