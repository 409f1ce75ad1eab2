//! Fair shares: how much of one budget a single client may hold at once.
//!
//! A budget shared by everyone (bytes of request bodies, the scan threads) is only as
//! fair as its smallest share: without one, a client with an ordinary token takes all
//! of it and everyone else — the servers' own traffic included — waits. A client is
//! counted twice, by its address and by its token ([`ClientKeys`]), and must fit
//! under the share with both: many addresses behind one token, or many tokens from
//! one address, get no more than one client does. An IPv6 client is counted by its
//! /64, the smallest block a site is given: one host holds 2^64 addresses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

/// Who a request counts against: its address (an IPv6 one cut to its /64) and, with
/// ACL on, its token's accessor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    /// An IPv4 address, or an IPv6 /64 (the address with its last 64 bits zero).
    Address(IpAddr),
    /// A token, by accessor id.
    Token(Arc<str>),
}

impl ClientKey {
    /// The key of an address: IPv4 as it is (an IPv4-mapped IPv6 address too), IPv6
    /// cut to its /64.
    pub(crate) fn address(ip: IpAddr) -> ClientKey {
        ClientKey::Address(match ip {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    IpAddr::V6(bits.into())
                }
            },
        })
    }
}

/// The keys one request counts against (one or two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientKeys {
    pub address: ClientKey,
    pub token: Option<ClientKey>,
}

impl ClientKeys {
    pub(crate) fn new(ip: IpAddr, accessor: Option<&str>) -> ClientKeys {
        ClientKeys {
            address: ClientKey::address(ip),
            token: accessor.map(|a| ClientKey::Token(a.into())),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &ClientKey> {
        std::iter::once(&self.address).chain(self.token.as_ref())
    }
}

/// Per-client amounts of one budget, each under `share`.
pub(crate) struct Shares {
    held: Mutex<HashMap<ClientKey, usize>>,
    share: usize,
}

impl Shares {
    pub(crate) fn new(share: usize) -> Arc<Shares> {
        Arc::new(Shares {
            held: Mutex::default(),
            share,
        })
    }

    /// The most one client may hold.
    pub(crate) fn share(&self) -> usize {
        self.share
    }

    /// `amount` more for `keys`, or `None` when any of its keys would go over the
    /// share (then nothing is taken).
    pub(crate) fn take(self: &Arc<Self>, keys: &ClientKeys, amount: usize) -> Option<Held> {
        let mut held = Held {
            shares: self.clone(),
            keys: keys.clone(),
            amount: 0,
        };
        held.grow(amount).then_some(held)
    }

    fn add(&self, keys: &ClientKeys, amount: usize) -> bool {
        let mut held = self.held.lock();
        let fits = keys.iter().all(|k| {
            held.get(k)
                .copied()
                .unwrap_or(0)
                .checked_add(amount)
                .is_some_and(|n| n <= self.share)
        });
        if fits {
            for k in keys.iter() {
                *held.entry(k.clone()).or_insert(0) += amount;
            }
        }
        fits
    }

    fn remove(&self, keys: &ClientKeys, amount: usize) {
        let mut held = self.held.lock();
        for k in keys.iter() {
            if let Some(n) = held.get_mut(k) {
                *n = n.saturating_sub(amount);
                if *n == 0 {
                    held.remove(k);
                }
            }
        }
    }

    /// What `key` holds now.
    pub(crate) fn held_by(&self, key: &ClientKey) -> usize {
        self.held.lock().get(key).copied().unwrap_or(0)
    }
}

/// An amount of a share, given back when dropped.
pub(crate) struct Held {
    shares: Arc<Shares>,
    keys: ClientKeys,
    amount: usize,
}

impl Held {
    /// Takes `more` into this holding; `false` (and nothing taken) when it would go
    /// over a share.
    pub(crate) fn grow(&mut self, more: usize) -> bool {
        if more == 0 {
            return true;
        }
        let ok = self.shares.add(&self.keys, more);
        if ok {
            self.amount += more;
        }
        ok
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.amount > 0 {
            self.shares.remove(&self.keys, self.amount);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4() {
        let a = ClientKey::address("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = ClientKey::address("2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap());
        let other = ClientKey::address("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, other);
        assert_eq!(
            ClientKey::address("::ffff:10.0.0.1".parse().unwrap()),
            ClientKey::address("10.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn a_client_holds_at_most_its_share_by_address_and_by_token() {
        let shares = Shares::new(10);
        let ip = "10.0.0.1".parse().unwrap();
        let a = ClientKeys::new(ip, Some("tok-a"));
        let b = ClientKeys::new(ip, Some("tok-b"));
        let c = ClientKeys::new("10.0.0.2".parse().unwrap(), Some("tok-a"));
        let mut first = shares.take(&a, 6).unwrap();
        assert!(shares.take(&b, 5).is_none(), "same address, over its share");
        assert!(shares.take(&c, 5).is_none(), "same token, over its share");
        let other = ClientKeys::new("10.0.0.3".parse().unwrap(), Some("tok-c"));
        assert!(
            shares.take(&other, 10).is_some(),
            "another client: its own share"
        );
        assert!(first.grow(4));
        assert!(!first.grow(1), "at the share");
        assert_eq!(shares.held_by(&a.address), 10);
        drop(first);
        assert_eq!(shares.held_by(&a.address), 0);
        assert_eq!(shares.held_by(a.token.as_ref().unwrap()), 0);
        assert!(shares.take(&b, 10).is_some());
    }
}
