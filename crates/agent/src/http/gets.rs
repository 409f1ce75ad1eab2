//! A connection's plain GETs served by the accept loop itself, so that a blocked
//! client costs only what its wait holds (issue 25). hyper keeps two 8 KiB buffers
//! and the router's futures for as long as a request is in flight, which for a
//! blocking query is minutes; here the head is read into a buffer sized to it, each
//! round of the request goes through the router as a whole request (auth, consistency,
//! limits: the same answers as through hyper), and a read that is not answered yet is
//! parked (`park.rs`): between rounds the connection holds the head's bytes, its watch
//! set and a timer — about 1 KiB.
//!
//! Only what needs nothing else of HTTP is served here: `GET` over HTTP/1.1, no body,
//! no `Expect`, no upgrade, no `Connection: close`, a head of at most 8 KiB, and not
//! the streamed answers (the event stream, snapshot downloads). At the first request
//! that is anything else, the connection goes to hyper for the rest of its life, with
//! the bytes read so far ([`Prefixed`]); keep-alive connections that only read — a
//! client node's blocking loop — stay here.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Uri, Version, header};
use axum::response::Response;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::watch;
use tower::ServiceExt;

use super::park::{ParkOffer, Parked, Place};
use super::serve::Connection;

/// The longest head served here (Nomad's clients send a few hundred bytes); a longer
/// one goes to hyper, which takes up to its own limit.
const HEAD_BYTES: usize = 8 << 10;

/// The most header lines in a head served here; more go to hyper.
const HEADER_LINES: usize = 48;

/// What a client may send ahead (pipelined requests) while one of its requests is
/// answered or parked; more closes the connection.
const AHEAD_BYTES: usize = 64 << 10;

/// What a first read reserves for a head.
const HEAD_RESERVE: usize = 512;

/// An answer up to this size leaves in one write with its head.
const ONE_WRITE_BYTES: usize = 16 << 10;

/// Serves the connection's GETs until it closes (`None`) or a request that is not a
/// plain GET arrives: then the connection, with what was read of it, for hyper.
pub(super) async fn serve_gets<IO>(
    mut io: IO,
    app: &Router,
    conn: Connection,
    stopping: &mut watch::Receiver<bool>,
    head_timeout: Duration,
) -> Option<Prefixed<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut carry = Vec::new();
    loop {
        // Within the header-read timeout, as hyper does: a client that sends nothing
        // (or an idle keep-alive connection) is closed after it.
        let read = tokio::select! {
            r = tokio::time::timeout(head_timeout, read_head(&mut io, &mut carry)) => r,
            _ = stopping.wait_for(|s| *s) => return None,
        };
        let len = match read {
            Ok(Ok(Head::Complete(len))) => len,
            Ok(Ok(Head::NotOurs)) => return Some(Prefixed::new(carry, io)),
            Ok(Ok(Head::Closed) | Err(_)) | Err(_) => return None,
        };
        let Some(get) = PlainGet::new(&carry[..len]) else {
            return Some(Prefixed::new(carry, io));
        };
        carry.drain(..len);
        if carry.is_empty() {
            // A parked connection holds no read buffer.
            carry = Vec::new();
        }
        if !answer(&mut io, &mut carry, app, conn, stopping, &get).await {
            return None;
        }
    }
}

/// What reading a head found.
enum Head {
    /// A whole head of this many bytes.
    Complete(usize),
    /// Not one served here (too long, too many lines, not HTTP): hyper's to answer.
    NotOurs,
    /// The client closed the connection.
    Closed,
}

/// Reads until `carry` holds a whole head.
async fn read_head<IO: AsyncRead + Unpin>(io: &mut IO, carry: &mut Vec<u8>) -> io::Result<Head> {
    loop {
        if !carry.is_empty() {
            let mut lines = [httparse::EMPTY_HEADER; HEADER_LINES];
            match httparse::Request::new(&mut lines).parse(carry) {
                Ok(httparse::Status::Complete(len)) => return Ok(Head::Complete(len)),
                Ok(httparse::Status::Partial) if carry.len() < HEAD_BYTES => {}
                _ => return Ok(Head::NotOurs),
            }
        }
        if carry.capacity() == carry.len() {
            carry.reserve(HEAD_RESERVE);
        }
        if io.read_buf(carry).await? == 0 {
            return Ok(Head::Closed);
        }
    }
}

/// A plain GET's head, kept as its bytes (a few hundred; the parsed form is several
/// times larger) and parsed again for each round.
struct PlainGet {
    head: Box<[u8]>,
}

impl PlainGet {
    /// `head` if it is a request served here.
    fn new(head: &[u8]) -> Option<PlainGet> {
        let (uri, headers) = parse(head)?;
        if matches!(uri.path(), "/v1/event/stream" | "/v1/operator/snapshot") {
            return None;
        }
        let has = |name| headers.contains_key(name);
        if has(header::TRANSFER_ENCODING) || has(header::UPGRADE) || has(header::EXPECT) {
            return None;
        }
        if headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes() != b"0")
        {
            return None;
        }
        let closes = headers.get_all(header::CONNECTION).iter().any(|v| {
            v.as_bytes().split(|b| *b == b',').any(|token| {
                let token = token.trim_ascii();
                token.eq_ignore_ascii_case(b"close") || token.eq_ignore_ascii_case(b"upgrade")
            })
        });
        (!closes).then(|| PlainGet { head: head.into() })
    }

    /// The request of one round.
    fn request(&self, conn: Connection, offer: &ParkOffer) -> Option<Request> {
        let (uri, headers) = parse(&self.head)?;
        let mut req = Request::new(Body::empty());
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        *req.version_mut() = Version::HTTP_11;
        req.extensions_mut().insert(conn);
        req.extensions_mut().insert(offer.clone());
        Some(req)
    }
}

/// A `GET` over HTTP/1.1: its target and headers.
fn parse(head: &[u8]) -> Option<(Uri, HeaderMap)> {
    let mut lines = [httparse::EMPTY_HEADER; HEADER_LINES];
    let mut req = httparse::Request::new(&mut lines);
    let httparse::Status::Complete(_) = req.parse(head).ok()? else {
        return None;
    };
    if req.method? != "GET" || req.version? != 1 {
        return None;
    }
    let path = req.path?;
    if !path.starts_with('/') {
        return None;
    }
    let uri: Uri = path.parse().ok()?;
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    for line in req.headers.iter() {
        let name = HeaderName::from_bytes(line.name.as_bytes()).ok()?;
        headers.append(name, HeaderValue::from_bytes(line.value).ok()?);
    }
    Some((uri, headers))
}

/// Answers one GET, parking it between rounds while its read waits. `false` when the
/// connection is done (the client left, a write failed).
async fn answer<IO>(
    io: &mut IO,
    carry: &mut Vec<u8>,
    app: &Router,
    conn: Connection,
    stopping: &mut watch::Receiver<bool>,
    get: &PlainGet,
) -> bool
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut offer = ParkOffer::default();
    loop {
        let Some(req) = get.request(conn, &offer) else {
            return false;
        };
        let resp = tokio::select! {
            r = app.clone().oneshot(req) => match r {
                Ok(r) => r,
                Err(never) => match never {},
            },
            () = client_gone(io, carry) => return false,
        };
        let Some(parked) = Parked::take(&resp) else {
            return write_response(io, resp).await.is_ok();
        };
        drop(resp);
        let deadline = tokio::select! {
            () = parked.watch.changed() => parked.deadline,
            () = tokio::time::sleep_until(parked.deadline.into()) => parked.deadline,
            // Stopping: the next round answers with what is there.
            _ = stopping.wait_for(|s| *s) => Instant::now(),
            () = client_gone(io, carry) => return false,
        };
        offer = ParkOffer {
            deadline: Some(deadline),
            place: Some(Place::new(parked.waiting)),
        };
    }
}

/// Resolves when the client closes the connection (or sends more ahead than
/// [`AHEAD_BYTES`]); what it sends ahead is kept for the next request.
async fn client_gone<IO: AsyncRead + Unpin>(io: &mut IO, carry: &mut Vec<u8>) {
    while carry.len() < AHEAD_BYTES {
        match io.read_buf(carry).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Writes `resp` as HTTP/1.1 with its length and the date, as hyper would. A large
/// answer of known size is written piece by piece as the body gives them
/// (`answers.rs` hands a metered answer out in pieces and holds its budget until the
/// last one is written). A body of unknown size (a long list made as it is read,
/// `list_body.rs`; a gzipped answer) is gathered up to [`GATHER_BYTES`]: one that
/// ends by then is sent with its length, a longer one chunked as the body gives it.
async fn write_response<IO: AsyncWrite + Unpin>(io: &mut IO, resp: Response) -> io::Result<()> {
    use http_body_util::BodyExt;
    let (parts, mut body) = resp.into_parts();
    let exact = http_body::Body::size_hint(&body)
        .exact()
        .and_then(|n| usize::try_from(n).ok());
    if let Some(len) = exact.filter(|n| *n > ONE_WRITE_BYTES) {
        io.write_all(&head(&parts, Framing::Length(len))).await?;
        let mut sent = 0usize;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(io::Error::other)?.into_data() {
                sent += data.len();
                if sent > len {
                    return Err(io::Error::other("the answer is longer than it said"));
                }
                io.write_all(&data).await?;
            }
        }
        if sent != len {
            // The connection cannot carry on: its next answer would be misread.
            return Err(io::Error::other("the answer is shorter than it said"));
        }
        return io.flush().await;
    }
    let mut gathered = Vec::new();
    let mut ended = true;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(io::Error::other)?.into_data() {
            gathered.extend_from_slice(&data);
            if gathered.len() > GATHER_BYTES {
                ended = false;
                break;
            }
        }
    }
    if ended {
        let mut out = head(&parts, Framing::Length(gathered.len()));
        if gathered.len() <= ONE_WRITE_BYTES {
            out.extend_from_slice(&gathered);
            io.write_all(&out).await?;
        } else {
            io.write_all(&out).await?;
            io.write_all(&gathered).await?;
        }
        return io.flush().await;
    }
    io.write_all(&head(&parts, Framing::Chunked)).await?;
    write_chunk(io, &gathered).await?;
    drop(gathered);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(io::Error::other)?.into_data()
            && !data.is_empty()
        {
            write_chunk(io, &data).await?;
        }
    }
    io.write_all(b"0\r\n\r\n").await?;
    io.flush().await
}

/// What a body of unknown size is gathered up to before it is sent chunked.
const GATHER_BYTES: usize = 64 << 10;

/// How an answer's end is told.
enum Framing {
    Length(usize),
    Chunked,
}

/// The head of an answer: status, its headers (less the framing ones, which are
/// ours), the framing and the date.
fn head(parts: &axum::http::response::Parts, framing: Framing) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let reason = parts.status.canonical_reason().unwrap_or("");
    out.extend_from_slice(format!("HTTP/1.1 {} {reason}\r\n", parts.status.as_u16()).as_bytes());
    for (name, value) in &parts.headers {
        let ours = [
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::CONNECTION,
            header::DATE,
        ];
        if ours.contains(name) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Length(len) => {
            out.extend_from_slice(format!("content-length: {len}\r\n").as_bytes())
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    let date = httpdate::fmt_http_date(SystemTime::now());
    out.extend_from_slice(format!("date: {date}\r\n\r\n").as_bytes());
    out
}

/// One chunk of a chunked answer.
async fn write_chunk<IO: AsyncWrite + Unpin>(io: &mut IO, data: &[u8]) -> io::Result<()> {
    io.write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    io.write_all(data).await?;
    io.write_all(b"\r\n").await
}

/// A connection handed to hyper with the bytes already read from it, which hyper
/// reads first.
pub(super) struct Prefixed<IO> {
    prefix: Vec<u8>,
    at: usize,
    io: IO,
}

impl<IO> Prefixed<IO> {
    fn new(prefix: Vec<u8>, io: IO) -> Self {
        Prefixed { prefix, at: 0, io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_gets_are_served_here_and_the_rest_goes_to_hyper() {
        let ours = |head: &str| PlainGet::new(head.as_bytes()).is_some();
        assert!(ours(
            "GET /v1/node/n1?index=7&wait=5m HTTP/1.1\r\nHost: a\r\nX-Nomad-Token: t\r\n\r\n"
        ));
        assert!(ours(
            "GET /v1/nodes HTTP/1.1\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
        ));
        for not in [
            "POST /v1/commands HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "GET /v1/nodes HTTP/1.0\r\n\r\n",
            "GET /v1/nodes HTTP/1.1\r\nConnection: Keep-Alive, close\r\n\r\n",
            "GET /v1/nodes HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
            "GET /v1/nodes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /v1/nodes HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET /v1/nodes HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
            "GET /v1/event/stream?index=3 HTTP/1.1\r\n\r\n",
            "GET /v1/operator/snapshot HTTP/1.1\r\n\r\n",
            "GET http://a/v1/nodes HTTP/1.1\r\n\r\n",
            "GET /v1/nodes HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ] {
            assert!(!ours(not), "{not:?}");
        }
    }

    #[tokio::test]
    async fn heads_are_read_whole_and_oversized_ones_left_to_hyper() {
        let (mut client, mut server) = tokio::io::duplex(64 << 10);
        client
            .write_all(b"GET /v1/nodes HTTP/1.1\r\nHost: a\r\n\r\nGET /v1")
            .await
            .unwrap();
        let mut carry = Vec::new();
        let Head::Complete(len) = read_head(&mut server, &mut carry).await.unwrap() else {
            panic!("no head");
        };
        assert_eq!(&carry[len..], b"GET /v1");

        let (mut client, mut server) = tokio::io::duplex(64 << 10);
        let mut carry = Vec::new();
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(HEAD_BYTES));
        client.write_all(long.as_bytes()).await.unwrap();
        assert!(matches!(
            read_head(&mut server, &mut carry).await.unwrap(),
            Head::NotOurs
        ));

        let (client, mut server) = tokio::io::duplex(64 << 10);
        drop(client);
        let mut carry = Vec::new();
        assert!(matches!(
            read_head(&mut server, &mut carry).await.unwrap(),
            Head::Closed
        ));
    }

    #[tokio::test]
    async fn hyper_reads_the_prefix_first() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut p = Prefixed::new(b"abc".to_vec(), server);
        client.write_all(b"def").await.unwrap();
        drop(client);
        let mut all = Vec::new();
        p.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"abcdef");
    }
}
