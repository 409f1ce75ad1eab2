//! The agent's outgoing HTTP — Raft RPCs, requests proxied to the leader, the bootstrap
//! probe, and the [`Client`](crate::Client) — over hyper's HTTP/1.1 client (the same
//! hyper the server is built on, with hyper-util's connection pool), dialing through
//! [`Dialer`]: TCP with a connect timeout and `TCP_NODELAY`, then, for `https://`, a
//! rustls handshake with a config built here with the `ring` provider (the
//! server-to-server config between agents, the CLI's config for clients), so that no
//! process-wide crypto provider is ever needed and no second HTTP stack is compiled.
//!
//! Answers are read up to a limit the caller gives, never to whatever length they
//! claim, and every request has an overall deadline ([`HttpClient::call`]).
//!
//! An agent bound to one address of a multi-homed machine dials its peers *from* that
//! address ([`PeerDialer::new`]'s `source`): the peers then see the address the agent
//! serves on, not whichever one the routing table picks — and a test's fault proxy
//! can tell which server opened a connection (tests/nemesis).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{HeaderMap, Method, StatusCode, Uri};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::tls::{Tls, TlsError};

/// How one agent dials the others: the scheme, the TLS config, the source address.
#[derive(Clone, Debug)]
pub(crate) struct PeerDialer {
    tls: Option<Arc<ClientConfig>>,
    source: Option<IpAddr>,
}

impl PeerDialer {
    /// Plain HTTP without `tls`; with it, HTTPS presenting this server's certificate
    /// and taking only peers holding a server certificate of the cluster's CA.
    /// Connections leave from `source` (the agent's bind address) when it can reach
    /// the peer; see [`source_for`].
    ///
    /// # Errors
    /// TLS without a CA: servers could not verify each other.
    pub(crate) fn new(tls: Option<&Tls>, source: Option<IpAddr>) -> Result<PeerDialer, TlsError> {
        let tls = tls.map(Tls::server_client_config).transpose()?;
        Ok(PeerDialer { tls, source })
    }

    /// `http` or `https`.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// A client with this dialer's TLS.
    pub(crate) fn client(&self, connect_timeout: Duration) -> HttpClient {
        HttpClient::with_source(self.tls.clone(), connect_timeout, self.source)
    }
}

/// The address a connection to `target` leaves from when the agent is bound to
/// `bind`: `bind` itself when it is one specific address of `target`'s family that can
/// reach it (a loopback address reaches only loopback), else whatever the routing
/// table picks (`None`). An agent bound to `0.0.0.0` serves every address, so it has
/// none to prefer.
pub(crate) fn source_for(bind: Option<IpAddr>, target: IpAddr) -> Option<IpAddr> {
    let bind = bind?;
    let usable = !bind.is_unspecified()
        && bind.is_ipv4() == target.is_ipv4()
        && (!bind.is_loopback() || target.is_loopback());
    usable.then_some(bind)
}

/// Why a request got no (whole) answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{cause}")]
pub struct HttpError {
    kind: HttpErrorKind,
    cause: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpErrorKind {
    /// The connection was never made (refused, unreachable, TLS handshake, timeout).
    Connect,
    /// The deadline passed.
    Timeout,
    /// The request could not be built (a bad URL or header).
    Request,
    /// The answer was larger than the caller's limit.
    TooLarge,
    /// The connection broke while the request or answer was under way.
    Io,
}

impl HttpError {
    fn new(kind: HttpErrorKind, cause: impl Into<String>) -> HttpError {
        HttpError {
            kind,
            cause: cause.into(),
        }
    }

    /// Whether the connection was never made: the request certainly reached nobody.
    pub fn is_connect(&self) -> bool {
        self.kind == HttpErrorKind::Connect
    }

    /// Whether the request's deadline passed (its outcome is unknown).
    pub fn is_timeout(&self) -> bool {
        self.kind == HttpErrorKind::Timeout
    }

    /// Whether the answer was over the caller's limit.
    pub fn is_too_large(&self) -> bool {
        self.kind == HttpErrorKind::TooLarge
    }
}

/// The innermost cause of `e`: hyper's own message ("client error (Connect)") hides
/// what happened.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// A whole answer: status, headers, body.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, whole.
    pub body: Bytes,
}

/// A pooled HTTP/1.1 client. Cheap to clone (clones share connections).
#[derive(Clone, Debug)]
pub(crate) struct HttpClient {
    pool: Pool<Dialer, Full<Bytes>>,
}

impl HttpClient {
    /// A client over `tls` (`https://` URLs; `None`: plain `http://` only), giving up
    /// on a connection after `connect_timeout`. Idle connections are dropped after
    /// 5 s, below the agents' own idle timeout, so none is reused just as the other
    /// side closes it.
    pub(crate) fn new(tls: Option<Arc<ClientConfig>>, connect_timeout: Duration) -> HttpClient {
        HttpClient::with_source(tls, connect_timeout, None)
    }

    /// [`new`](Self::new), its connections leaving from `source` where
    /// [`source_for`] allows.
    pub(crate) fn with_source(
        tls: Option<Arc<ClientConfig>>,
        connect_timeout: Duration,
        source: Option<IpAddr>,
    ) -> HttpClient {
        let dialer = Dialer {
            tls: tls.map(TlsConnector::from),
            connect_timeout,
            source,
        };
        let pool = Pool::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(5))
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(dialer);
        HttpClient { pool }
    }

    /// Sends `method url` with `headers` and `body`, and reads the whole answer, at
    /// most `limit` bytes of body, all within `deadline`.
    ///
    /// # Errors
    /// [`HttpError`]: no connection, a broken one, the deadline, an answer over
    /// `limit`, or a URL or header that does not make a request.
    pub(crate) async fn call(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        limit: usize,
        deadline: Duration,
    ) -> Result<Answer, HttpError> {
        self.call_timed(method, url, headers, body, limit, deadline, deadline)
            .await
    }

    /// [`call`](Self::call), with the answer's head (status and headers) due within
    /// `head` and the whole answer within `deadline`: a server that will never
    /// answer is given up on early, one that sends a long body is given time for it.
    ///
    /// # Errors
    /// As [`call`](Self::call).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn call_timed(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        limit: usize,
        head: Duration,
        deadline: Duration,
    ) -> Result<Answer, HttpError> {
        let bad = |e: &dyn std::fmt::Display| HttpError::new(HttpErrorKind::Request, e.to_string());
        let uri: Uri = url.parse().map_err(|e| bad(&e))?;
        let mut req = hyper::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(Full::new(body)).map_err(|e| bad(&e))?;
        let exchange = async {
            let resp = tokio::time::timeout(head, self.pool.request(req))
                .await
                .map_err(|_| {
                    HttpError::new(
                        HttpErrorKind::Timeout,
                        format!("no answer began within {} ms", head.as_millis()),
                    )
                })?
                .map_err(|e| {
                    let kind = if e.is_connect() {
                        HttpErrorKind::Connect
                    } else {
                        HttpErrorKind::Io
                    };
                    HttpError::new(kind, innermost(&e))
                })?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        HttpError::new(
                            HttpErrorKind::TooLarge,
                            format!("an answer over {limit} bytes"),
                        )
                    } else {
                        HttpError::new(HttpErrorKind::Io, innermost(&*e))
                    }
                })?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(deadline, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(HttpError::new(
                HttpErrorKind::Timeout,
                format!("timed out after {} ms", deadline.as_millis()),
            )),
        }
    }
}

/// Makes the pool's connections: TCP (with a timeout, `TCP_NODELAY`), then TLS for
/// `https`.
#[derive(Clone)]
struct Dialer {
    tls: Option<TlsConnector>,
    connect_timeout: Duration,
    source: Option<IpAddr>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("source", &self.source)
            .finish()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for Dialer {
    type Response = TokioIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let dialer = self.clone();
        Box::pin(async move { dialer.dial(uri).await })
    }
}

impl Dialer {
    async fn dial(self, uri: Uri) -> Result<TokioIo<Stream>, BoxError> {
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            other => return Err(format!("unsupported scheme {other:?}").into()),
        };
        let host = uri.host().ok_or("no host in the URL")?;
        // `[::1]` in a URL, `::1` to connect and to name the server.
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = tokio::time::timeout(self.connect_timeout, connect(&host, port, self.source))
            .await
            .map_err(|_| {
                format!(
                    "connecting to {host}:{port} timed out after {} ms",
                    self.connect_timeout.as_millis()
                )
            })??;
        tcp.set_nodelay(true)?;
        if !https {
            return Ok(TokioIo::new(Stream::Plain(tcp)));
        }
        let Some(tls) = self.tls else {
            return Err("https:// without a TLS configuration".into());
        };
        let name = rustls_pki_types::ServerName::try_from(host)?;
        let tls = tokio::time::timeout(self.connect_timeout, tls.connect(name, tcp))
            .await
            .map_err(|_| "the TLS handshake timed out")??;
        Ok(TokioIo::new(Stream::Tls(Box::new(tls))))
    }
}

/// TCP to `host:port`, each of its addresses in turn, from `source` where
/// [`source_for`] allows.
async fn connect(host: &str, port: u16, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let mut last = None;
    for target in tokio::net::lookup_host((host, port)).await? {
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = source_for(source, target.ip()) {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        match socket.connect(target).await {
            Ok(tcp) => return Ok(tcp),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host} has no address"),
        )
    }))
}

/// A connection of the pool: plain TCP or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A loopback server answering each connection's first request with `answer`
    /// (after `delay`); its address.
    async fn server(answer: &'static [u8], delay: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    tokio::time::sleep(delay).await;
                    let _ = conn.write_all(answer).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        format!("http://{addr}/x")
    }

    /// `GET url` by a plain-HTTP client, the answer read up to `limit`, within
    /// `deadline`.
    async fn get(url: &str, limit: usize, deadline: Duration) -> Result<Answer, HttpError> {
        HttpClient::new(None, Duration::from_secs(1))
            .call(Method::GET, url, &[], Bytes::new(), limit, deadline)
            .await
    }

    #[tokio::test]
    async fn a_whole_answer_comes_back_with_status_headers_and_body() {
        let url = server(
            b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Thing: 7\r\n\r\nhello",
            Duration::ZERO,
        )
        .await;
        let a = HttpClient::new(None, Duration::from_secs(1))
            .call(
                Method::GET,
                &url,
                &[("x-schedstate-token", "t")],
                Bytes::new(),
                64,
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(a.status, StatusCode::CREATED);
        assert_eq!(a.headers["x-thing"], "7");
        assert_eq!(&a.body[..], b"hello");
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_is_refused_whatever_length_it_claims() {
        let url = server(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789",
            Duration::ZERO,
        )
        .await;
        let e = get(&url, 10, Duration::from_secs(5)).await.unwrap_err();
        assert!(e.is_too_large(), "{e}");
    }

    #[tokio::test]
    async fn a_server_that_does_not_answer_is_a_timeout_within_the_deadline() {
        let url = server(b"HTTP/1.1 200 OK\r\n\r\n", Duration::from_secs(30)).await;
        let start = std::time::Instant::now();
        let e = get(&url, 64, Duration::from_millis(300)).await.unwrap_err();
        assert!(e.is_timeout() && !e.is_connect(), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        // A port just released: nothing listens there.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = get(
            &format!("http://127.0.0.1:{port}/"),
            64,
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(e.is_connect(), "{e}");
        assert!(e.to_string().to_lowercase().contains("refused"), "{e}");
    }

    #[tokio::test]
    async fn https_without_a_tls_config_and_bad_urls_are_refused() {
        // A server that is up: what refuses is the missing TLS configuration.
        let url = server(b"HTTP/1.1 200 OK\r\n\r\n", Duration::ZERO)
            .await
            .replace("http://", "https://");
        let e = get(&url, 64, Duration::from_secs(5)).await.unwrap_err();
        assert!(e.is_connect() && e.to_string().contains("TLS"), "{e}");
        let e = get("not a url", 64, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(!e.is_connect() && !e.is_timeout(), "{e}");
    }

    #[test]
    fn a_source_is_used_only_where_it_can_reach_the_target() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let lo = Some(ip("127.0.0.12"));
        assert_eq!(source_for(lo, ip("127.0.0.13")), lo);
        // Loopback cannot reach another host; another family cannot be bound.
        assert_eq!(source_for(lo, ip("10.1.2.3")), None);
        assert_eq!(source_for(lo, ip("::1")), None);
        assert_eq!(source_for(Some(ip("0.0.0.0")), ip("127.0.0.1")), None);
        assert_eq!(source_for(None, ip("127.0.0.1")), None);
        let public = Some(ip("10.0.0.5"));
        assert_eq!(source_for(public, ip("10.0.0.6")), public);
    }

    #[tokio::test]
    async fn connections_leave_from_the_source_address() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = tokio::spawn(async move {
            let (mut conn, peer) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .await;
            peer.ip()
        });
        let source = "127.0.0.7".parse().unwrap();
        HttpClient::with_source(None, Duration::from_secs(1), Some(source))
            .call(
                Method::GET,
                &format!("http://{addr}/"),
                &[],
                Bytes::new(),
                64,
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(seen.await.unwrap(), source);
    }

    #[tokio::test]
    async fn an_answer_that_does_not_begin_in_time_is_a_timeout_however_long_the_deadline() {
        let url = server(b"HTTP/1.1 200 OK\r\n\r\n", Duration::from_secs(30)).await;
        let start = std::time::Instant::now();
        let e = HttpClient::new(None, Duration::from_secs(1))
            .call_timed(
                Method::GET,
                &url,
                &[],
                Bytes::new(),
                64,
                Duration::from_millis(300),
                Duration::from_secs(60),
            )
            .await
            .unwrap_err();
        assert!(e.is_timeout() && e.to_string().contains("began"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
