//! The fault proxy: every server-to-server connection of a test cluster goes through
//! it, and the test sets, per directed link, whether it is up, cut, dropped or delayed.
//!
//! Each server `i` has a loopback address of its own (`127.x.y.(i+1)`), listens on a
//! private port there, and dials its peers *from* that address (the agent binds its
//! outbound connections to its bind address). The cluster's membership names, for
//! server `j`, a proxy port on `j`'s address, not its private port. So the proxy
//! knows the destination from the port a connection arrived on and the source from
//! the connection's peer address, and applies the rule of link `source → destination`.
//!
//! A link's rule governs the connections its source opens to its destination, both
//! ways: TCP needs both directions, so a one-way loss on a real network breaks such
//! a connection whichever way the packets are lost. `cut(a, b)` alone is therefore
//! "a cannot reach b, b can still reach a" — an asymmetric partition.
//!
//! - **Cut**: new connections are closed as soon as they are accepted, open ones at
//!   once (the sender sees a reset or EOF, quickly — a crashed host or a firewall
//!   that rejects).
//! - **Drop**: a blackhole. New connections are accepted and never forwarded, open
//!   ones stop moving bytes; the sender waits until its own deadline, as it does in a
//!   real partition. Bytes already sent stay in the socket buffers and move on when
//!   the link heals, like TCP's retransmissions after a partition ends (late,
//!   possibly duplicate, requests are part of the test).
//! - **Delay(d)**: every chunk arrives `d` later, in order.
//!
//! Connections from an address that is not a server's (none in these tests) pass.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What a link does to its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Bytes flow.
    #[default]
    Up,
    /// Connections are closed.
    Cut,
    /// Bytes stop flowing; nothing is closed.
    Drop,
    /// Bytes flow this much later.
    Delay(Duration),
}

/// The rules: (source, destination) server positions → fault; absent means up.
type Rules = HashMap<(usize, usize), Fault>;

/// The proxy of one cluster.
pub struct Proxy {
    rules: Arc<watch::Sender<Rules>>,
    /// Server position by its address, to know who dials.
    servers: Arc<parking_lot::Mutex<HashMap<IpAddr, usize>>>,
    /// Each server's private address, by position.
    upstreams: Arc<parking_lot::Mutex<HashMap<usize, SocketAddr>>>,
    accept_loops: Vec<JoinHandle<()>>,
    /// Every connection's task, to stop them all with the proxy.
    conns: Arc<parking_lot::Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    pub fn new() -> Proxy {
        Proxy {
            rules: Arc::new(watch::channel(Rules::new()).0),
            servers: Default::default(),
            upstreams: Default::default(),
            accept_loops: Vec::new(),
            conns: Default::default(),
        }
    }

    /// Puts server `position` (address `ip`, listening privately on `private`)
    /// behind the proxy; returns the address its peers dial.
    pub async fn add_server(
        &mut self,
        position: usize,
        ip: IpAddr,
        private: SocketAddr,
    ) -> SocketAddr {
        self.servers.lock().insert(ip, position);
        self.upstreams.lock().insert(position, private);
        let listener = TcpListener::bind((ip, 0)).await.expect("proxy port");
        let public = listener.local_addr().expect("proxy address");
        let rules = self.rules.clone();
        let servers = self.servers.clone();
        let upstreams = self.upstreams.clone();
        let conns = self.conns.clone();
        self.accept_loops.push(tokio::spawn(async move {
            while let Ok((inbound, from)) = listener.accept().await {
                let source = servers.lock().get(&from.ip()).copied();
                let private = upstreams.lock()[&position];
                let task = tokio::spawn(relay(
                    inbound,
                    from.ip(),
                    source.map(|s| (s, position)),
                    private,
                    rules.subscribe(),
                ));
                let mut conns = conns.lock();
                conns.retain(|t| !t.is_finished());
                conns.push(task);
            }
        }));
        public
    }

    /// Server `position` now listens privately on `private` (new connections go
    /// there).
    pub fn move_server(&self, position: usize, private: SocketAddr) {
        self.upstreams.lock().insert(position, private);
    }

    /// Sets the fault of link `from → to`.
    pub fn set(&self, from: usize, to: usize, fault: Fault) {
        self.rules.send_modify(|r| {
            if fault == Fault::Up {
                r.remove(&(from, to));
            } else {
                r.insert((from, to), fault);
            }
        });
    }

    /// Sets `fault` on both directions between every server of `a` and every one of
    /// `b`.
    pub fn between(&self, a: &[usize], b: &[usize], fault: Fault) {
        for &x in a {
            for &y in b {
                if x != y {
                    self.set(x, y, fault);
                    self.set(y, x, fault);
                }
            }
        }
    }

    /// Every link up.
    pub fn heal(&self) {
        self.rules.send_modify(Rules::clear);
    }

    /// The fault of link `from → to`.
    pub fn fault(&self, from: usize, to: usize) -> Fault {
        self.rules
            .borrow()
            .get(&(from, to))
            .copied()
            .unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for t in &self.accept_loops {
            t.abort();
        }
        for t in self.conns.lock().iter() {
            t.abort();
        }
    }
}

/// The rule of `link` now (`None`: not a server's connection, always up).
fn rule(rules: &watch::Receiver<Rules>, link: Option<(usize, usize)>) -> Fault {
    link.and_then(|l| rules.borrow().get(&l).copied())
        .unwrap_or_default()
}

/// Waits while `link` is dropped; `false` if it is (or becomes) cut.
async fn passable(rules: &mut watch::Receiver<Rules>, link: Option<(usize, usize)>) -> bool {
    loop {
        match rule(rules, link) {
            Fault::Cut => return false,
            Fault::Drop => {
                if rules.changed().await.is_err() {
                    return false;
                }
            }
            Fault::Up | Fault::Delay(_) => return true,
        }
    }
}

/// One connection: held while its link drops, closed when it is cut, else relayed to
/// the server's private port from the same source address (so the server sees who
/// dialed, and its per-client limits count each server apart).
async fn relay(
    inbound: TcpStream,
    source_ip: IpAddr,
    link: Option<(usize, usize)>,
    private: SocketAddr,
    mut rules: watch::Receiver<Rules>,
) {
    if !passable(&mut rules, link).await {
        return;
    }
    let upstream = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(source_ip, 0))?;
        socket.connect(private).await
    };
    let Ok(upstream) = upstream.await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (up_read, up_write) = upstream.into_split();
    // Either direction ending (EOF, error, a cut) ends the connection: both tasks
    // stop and both sockets close.
    let there = pump(in_read, up_write, link, rules.clone());
    let back = pump(up_read, in_write, link, rules);
    tokio::select! {
        () = there => {}
        () = back => {}
    }
}

/// Moves bytes from `from` to `to` under the link's rule until EOF, an error or a cut.
async fn pump(
    mut from: OwnedReadHalf,
    to: OwnedWriteHalf,
    link: Option<(usize, usize)>,
    mut rules: watch::Receiver<Rules>,
) {
    // Chunks with the instant they may be written: a delay adds latency, not a
    // limit on throughput.
    let (tx, rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(write_in_time(rx, to));
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if !passable(&mut rules, link).await {
            break;
        }
        let n = tokio::select! {
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            // A cut or drop takes effect on an idle connection too.
            changed = rules.changed() => {
                if changed.is_err() { break }
                continue;
            }
        };
        // Read just before a drop began: held until the link heals.
        if !passable(&mut rules, link).await {
            break;
        }
        let due = match rule(&rules, link) {
            Fault::Delay(d) => Instant::now() + d,
            _ => Instant::now(),
        };
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    // A cut closes at once; an EOF lets what was read go first.
    if rule(&rules, link) == Fault::Cut {
        writer.abort();
    } else {
        let _ = writer.await;
    }
}

async fn write_in_time(
    mut rx: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    mut to: OwnedWriteHalf,
) {
    while let Some((due, chunk)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        if to.write_all(&chunk).await.is_err() {
            return;
        }
    }
    let _ = to.shutdown().await;
}

/// The proxy alone, in front of an echo server: each fault does what it says.
mod tests {
    use super::*;

    /// An echo server on `ip`; its address.
    async fn echo(ip: IpAddr) -> SocketAddr {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = conn.read(&mut buf).await {
                        if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A connection from `source` to `to`.
    async fn dial(source: IpAddr, to: SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(source, 0)).unwrap();
        socket.connect(to).await.unwrap()
    }

    /// Sends `msg` and reads it back, within `within`: `None` if nothing came.
    async fn round_trip(conn: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
        conn.write_all(msg).await.ok()?;
        let mut got = vec![0u8; msg.len()];
        match tokio::time::timeout(within, conn.read_exact(&mut got)).await {
            Ok(Ok(_)) => Some(got),
            _ => None,
        }
    }

    #[tokio::test]
    async fn each_fault_acts_on_its_own_directed_link_and_heals() {
        let ips: Vec<IpAddr> = (1..=3)
            .map(|i| format!("127.0.201.{i}").parse().unwrap())
            .collect();
        let mut proxy = Proxy::new();
        let server = echo(ips[2]).await;
        let public = proxy.add_server(2, ips[2], server).await;
        // Both other servers are known to the proxy (by address).
        proxy.servers.lock().insert(ips[0], 0);
        proxy.servers.lock().insert(ips[1], 1);
        let short = Duration::from_millis(300);

        let mut a = dial(ips[0], public).await;
        assert_eq!(
            round_trip(&mut a, b"up", short).await.as_deref(),
            Some(&b"up"[..])
        );

        // Dropped: an open connection stalls, a new one is accepted and stalls too;
        // the other source's link is untouched.
        proxy.set(0, 2, Fault::Drop);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(round_trip(&mut a, b"lost", short).await, None);
        let mut fresh = dial(ips[0], public).await;
        assert_eq!(round_trip(&mut fresh, b"held", short).await, None);
        let mut b = dial(ips[1], public).await;
        assert_eq!(
            round_trip(&mut b, b"b", short).await.as_deref(),
            Some(&b"b"[..])
        );

        // Healed: what was held arrives, late.
        proxy.heal();
        let mut late = vec![0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), a.read_exact(&mut late))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&late, b"lost");
        let mut late = vec![0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), fresh.read_exact(&mut late))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&late, b"held");

        // Delayed: it arrives, at least that much later.
        proxy.set(0, 2, Fault::Delay(Duration::from_millis(150)));
        let start = Instant::now();
        assert!(
            round_trip(&mut a, b"slow", Duration::from_secs(5))
                .await
                .is_some()
        );
        assert!(
            start.elapsed() >= Duration::from_millis(300),
            "{:?}",
            start.elapsed()
        );

        // Cut: the open connection is closed, a new one closed on arrival.
        proxy.set(0, 2, Fault::Cut);
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(5), a.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        let mut c = dial(ips[0], public).await;
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        assert_eq!(
            round_trip(&mut b, b"still", short).await.as_deref(),
            Some(&b"still"[..])
        );
        assert_eq!(proxy.fault(0, 2), Fault::Cut);
        assert_eq!(proxy.fault(2, 0), Fault::Up);
    }
}
