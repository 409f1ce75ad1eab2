//! [`Connections`]: who may hold a connection open — clients under a cap each (by
//! address, an IPv6 /64) and in all, the servers of the cluster apart.
//!
//! A connection is counted as it is accepted, before anything is known of it but its
//! address. The servers' own connections (Raft RPCs, forwarded writes, read indexes)
//! must never be shut out by clients: on one host, or behind one NAT, servers and
//! clients share an address, and 100 clients' connections once closed the leader to
//! its followers (issue 48). So, with mutual TLS, where a certificate says who is a
//! server:
//!
//! - a connection over a client cap is not closed at once but handed a *probation*
//!   place (a few at a time, [`PROBATION`]) for its TLS handshake; it is kept only if
//!   its certificate is a server's of the cluster's CA;
//! - a connection whose certificate is a server's — admitted either way — moves to
//!   the servers' own count ([`Limits::server_conns`]) and frees its client place.
//!
//! Without a CA, nothing proves a server before its first request: every connection
//! is a client's.
//!
//! [`Limits::server_conns`]: crate::Limits::server_conns

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::shares::ClientKey;
use crate::config::Limits;

/// Handshakes at once of connections over a client cap, waiting to show a server's
/// certificate.
pub(crate) const PROBATION: usize = 64;

/// What lets a connection stay open; dropped when it closes.
pub(crate) enum Admission {
    /// Under the client caps.
    Client(#[allow(dead_code)] ConnPermit),
    /// Over them, until its handshake shows a server (then [`Admission::Server`]).
    Probation(#[allow(dead_code)] OwnedSemaphorePermit),
    /// A server of the cluster, on the servers' own count.
    Server(#[allow(dead_code)] OwnedSemaphorePermit),
}

/// The counts.
pub(crate) struct Connections {
    clients: Arc<Mutex<Conns>>,
    per_client: usize,
    total: usize,
    probation: Arc<Semaphore>,
    servers: Arc<Semaphore>,
}

#[derive(Default)]
struct Conns {
    total: usize,
    by_client: HashMap<ClientKey, usize>,
}

/// A client's open connection, counted until dropped.
pub(crate) struct ConnPermit {
    conns: Arc<Mutex<Conns>>,
    client: ClientKey,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut c = self.conns.lock();
        c.total -= 1;
        if let Some(n) = c.by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                c.by_client.remove(&self.client);
            }
        }
    }
}

impl Connections {
    pub(crate) fn new(limits: &Limits) -> Connections {
        Connections {
            clients: Arc::default(),
            per_client: limits.conns_per_client,
            total: limits.conns,
            probation: Arc::new(Semaphore::new(PROBATION)),
            servers: Arc::new(Semaphore::new(limits.server_conns)),
        }
    }

    /// A connection just accepted from `ip`: a client's place, or — when
    /// `servers_provable` (mutual TLS) and the client caps are full — a probation
    /// place; `None`: close it.
    pub(crate) fn admit(&self, ip: IpAddr, servers_provable: bool) -> Option<Admission> {
        if let Some(p) = self.client(ip) {
            return Some(Admission::Client(p));
        }
        if !servers_provable {
            return None;
        }
        self.probation
            .clone()
            .try_acquire_owned()
            .ok()
            .map(Admission::Probation)
    }

    /// What a connection holds once its handshake showed whether it is a server's:
    /// a server's moves to the servers' count (freeing any client place, or keeping
    /// it when the servers' count is full); a client's keeps its client place; one on
    /// probation is closed (`None`) unless it is a server's and the servers' count has
    /// room.
    pub(crate) fn after_handshake(&self, held: Admission, server: bool) -> Option<Admission> {
        if !server {
            return match held {
                Admission::Probation(_) => None,
                other => Some(other),
            };
        }
        if matches!(held, Admission::Server(_)) {
            return Some(held);
        }
        match self.servers.clone().try_acquire_owned() {
            Ok(p) => Some(Admission::Server(p)),
            Err(_) => match held {
                Admission::Probation(_) => None,
                other => Some(other),
            },
        }
    }

    /// A client's place from `ip`, or `None` when that client (an address, an IPv6
    /// /64) or all clients together hold as many as allowed.
    pub(crate) fn client(&self, ip: IpAddr) -> Option<ConnPermit> {
        let client = ClientKey::address(ip);
        let mut c = self.clients.lock();
        if c.total >= self.total {
            return None;
        }
        let n = c.by_client.entry(client.clone()).or_insert(0);
        if *n >= self.per_client {
            if *n == 0 {
                c.by_client.remove(&client);
            }
            return None;
        }
        *n += 1;
        c.total += 1;
        Some(ConnPermit {
            conns: self.clients.clone(),
            client,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_client: usize, total: usize) -> Limits {
        Limits {
            conns_per_client: per_client,
            conns: total,
            server_conns: 2,
            ..Limits::default()
        }
    }

    #[test]
    fn connections_are_counted_per_client_and_in_all() {
        let c = Connections::new(&limits(2, 3));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = c.client(a).unwrap();
        let _a2 = c.client(a).unwrap();
        assert!(c.client(a).is_none(), "a third from one client");
        let _b1 = c.client(b).unwrap();
        assert!(c.client(b).is_none(), "a fourth in all");
        drop(a1);
        assert!(c.client(a).is_some(), "room again once one closed");
    }

    #[test]
    fn connections_of_one_ipv6_64_are_counted_together() {
        let c = Connections::new(&limits(2, 100));
        let _a = c.client("2001:db8::1".parse().unwrap()).unwrap();
        let _b = c.client("2001:db8::2".parse().unwrap()).unwrap();
        assert!(c.client("2001:db8::3".parse().unwrap()).is_none());
        assert!(c.client("2001:db8:0:1::1".parse().unwrap()).is_some());
    }

    #[test]
    fn servers_get_in_over_the_client_caps_and_free_their_client_places() {
        let c = Connections::new(&limits(1, 100));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let first = c.admit(ip, true).unwrap();
        assert!(matches!(first, Admission::Client(_)));
        // Over the cap: without mutual TLS, closed; with it, on probation.
        assert!(c.admit(ip, false).is_none());
        let second = c.admit(ip, true).unwrap();
        assert!(matches!(second, Admission::Probation(_)));
        // Not a server: closed. A server: kept, on the servers' count.
        assert!(c.after_handshake(second, false).is_none());
        let third = c.admit(ip, true).unwrap();
        let third = c.after_handshake(third, true);
        assert!(matches!(third, Some(Admission::Server(_))));
        // The first turns out a server's too: its client place is freed.
        let first = c.after_handshake(first, true).unwrap();
        assert!(matches!(first, Admission::Server(_)));
        assert!(matches!(c.admit(ip, false), Some(Admission::Client(_))));
        // The servers' count (2 here) is full now: one more on probation is closed,
        // one with a client place keeps it.
        let fourth = c.admit(ip, true).unwrap();
        assert!(matches!(fourth, Admission::Client(_)));
        let fifth = c.admit(ip, true).unwrap();
        assert!(matches!(fifth, Admission::Probation(_)));
        assert!(c.after_handshake(fifth, true).is_none());
        assert!(matches!(
            c.after_handshake(fourth, true),
            Some(Admission::Client(_))
        ));
    }
}
