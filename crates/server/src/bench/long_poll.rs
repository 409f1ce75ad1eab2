//! One blocking query on a connection of its own: `GET /v1/node/{id}?index=…&wait=…`
//! over plain HTTP/1.1 from a chosen loopback source address, read until the answer's
//! head and body are in. Written on a bare TCP stream, not the agent's `Client`: the
//! load tool needs one connection per waiter from a source address it picks (a few
//! hundred addresses of 127.0.0.0/8, so that neither the ephemeral ports of one address
//! nor the agent's connections-per-client limit run out), which a pooled client does
//! not give.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The largest answer head and body read (a node in Nomad's shape is a few KiB).
const MAX_ANSWER: usize = 1 << 20;

/// Why a long-poll failed.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// Connecting, writing or reading.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The agent closed the connection before a whole answer.
    #[error("the agent closed the connection before a whole answer")]
    Closed,
    /// The answer is not HTTP/1.1 as the agent writes it.
    #[error("a malformed answer: {0}")]
    Malformed(&'static str),
    /// The answer is larger than any node read.
    #[error("an answer over {MAX_ANSWER} bytes")]
    TooLarge,
}

/// What a blocking query answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// `X-Nomad-Index`.
    pub index: u64,
}

/// The `n`-th source address of the waiters: 127.0.1.0 onwards, `per_address`
/// connections each (127.0.0.1, where the tool's own writes come from, is not used).
pub fn source_address(n: usize, per_address: usize) -> Ipv4Addr {
    let base = u32::from(Ipv4Addr::new(127, 0, 1, 0));
    let offset = u32::try_from(n / per_address.max(1)).unwrap_or(u32::MAX);
    // 127.0.1.0 + offset stays inside 127.0.0.0/8 for fewer than 16.7 million addresses;
    // the tool's client limit keeps it far below.
    Ipv4Addr::from(
        base.saturating_add(offset)
            .min(u32::from(Ipv4Addr::new(127, 255, 255, 254))),
    )
}

/// Connects from `source` to `agent` and sends the blocking read of node `id`.
pub async fn open(
    source: Ipv4Addr,
    agent: SocketAddr,
    id: &str,
    index: u64,
    wait: Duration,
) -> Result<TcpStream, PollError> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::V4(SocketAddrV4::new(source, 0)))?;
    let mut stream = socket.connect(agent).await?;
    stream.set_nodelay(true)?;
    let request = format!(
        "GET /v1/node/{id}?index={index}&wait={}ms HTTP/1.1\r\nHost: {agent}\r\nAccept: application/json\r\n\r\n",
        wait.as_millis()
    );
    stream.write_all(request.as_bytes()).await?;
    Ok(stream)
}

/// Reads the answer to the request [`open`] sent: its status and `X-Nomad-Index`
/// (the body is read and dropped).
pub async fn answer(stream: &mut TcpStream) -> Result<Answer, PollError> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        read_more(stream, &mut buf).await?;
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| PollError::Malformed("head"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or(PollError::Malformed("status line"))?;
    let mut index = None;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("x-nomad-index") {
            index = Some(value.parse().map_err(|_| PollError::Malformed("index"))?);
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| PollError::Malformed("length"))?,
            );
        }
    }
    let length = length.ok_or(PollError::Malformed("no Content-Length"))?;
    if length > MAX_ANSWER {
        return Err(PollError::TooLarge);
    }
    while buf.len() < head_end + length {
        read_more(stream, &mut buf).await?;
    }
    Ok(Answer {
        status,
        index: index.ok_or(PollError::Malformed("no X-Nomad-Index"))?,
    })
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), PollError> {
    if buf.len() > MAX_ANSWER {
        return Err(PollError::TooLarge);
    }
    let mut chunk = [0u8; 4096];
    let n = stream.read(&mut chunk).await?;
    if n == 0 {
        return Err(PollError::Closed);
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_addresses_fill_one_address_then_the_next() {
        assert_eq!(source_address(0, 100), Ipv4Addr::new(127, 0, 1, 0));
        assert_eq!(source_address(99, 100), Ipv4Addr::new(127, 0, 1, 0));
        assert_eq!(source_address(100, 100), Ipv4Addr::new(127, 0, 1, 1));
        assert_eq!(source_address(300 * 100, 100), Ipv4Addr::new(127, 0, 2, 44));
        assert!(source_address(usize::MAX, 1).is_loopback());
    }

    #[tokio::test]
    async fn reads_status_and_index_and_refuses_a_cut_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            for reply in [
                &b"HTTP/1.1 404 Not Found\r\nX-Nomad-Index: 17\r\ncontent-length: 2\r\n\r\n{}"[..],
                &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"[..],
            ] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut req = vec![0u8; 4096];
                let n = s.read(&mut req).await.unwrap();
                assert!(req[..n].starts_with(b"GET /v1/node/n1?index=5&wait=1000ms HTTP/1.1\r\n"));
                s.write_all(reply).await.unwrap();
            }
        });
        let src = Ipv4Addr::LOCALHOST;
        let mut s = open(src, addr, "n1", 5, Duration::from_secs(1))
            .await
            .unwrap();
        let a = answer(&mut s).await.unwrap();
        assert_eq!(
            a,
            Answer {
                status: 404,
                index: 17
            }
        );
        let mut s = open(src, addr, "n1", 5, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(matches!(answer(&mut s).await, Err(PollError::Closed)));
        server.await.unwrap();
    }
}
