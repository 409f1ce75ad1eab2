//! [`StallGuard`]: a connection whose writes make no progress for the write timeout is
//! ended.
//!
//! A client that asks for a large answer (or opens an event stream) and never reads
//! it holds what the agent has not sent yet for as long as the connection lives:
//! 90 such clients held 590 MiB (issue 48). Under the guard, a write that stays
//! blocked — the client's receive window closed — for [`Limits::write_timeout`]
//! fails, the connection closes and what it held is freed. The timer runs only while
//! a write is blocked and starts again at each write that goes through, so a slow
//! but moving reader is never cut, and a parked blocking query, which writes
//! nothing while it waits, holds no timer.
//!
//! [`Limits::write_timeout`]: crate::Limits::write_timeout

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `IO` whose blocked writes time out.
pub(crate) struct StallGuard<IO> {
    io: IO,
    timeout: Duration,
    /// Set while a write (or flush) is blocked: when it gives up.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<IO> StallGuard<IO> {
    pub(crate) fn new(io: IO, timeout: Duration) -> Self {
        StallGuard {
            io,
            timeout,
            stalled: None,
        }
    }

    /// What a write's outcome means under the guard: ready resets the timer; blocked
    /// starts it (once) and fails the write when it runs out.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {timeout:?} (write_timeout)"),
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for StallGuard<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for StallGuard<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_the_client_never_reads_fails_after_the_timeout() {
        let (client, server) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(server, Duration::from_millis(100));
        let start = std::time::Instant::now();
        let e = guarded.write_all(&[0u8; 64 << 10]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(100));
        drop(client);
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_not_cut() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(server, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let mut n = 0;
            while n < 16 << 10 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                n += client.read(&mut buf).await.unwrap();
            }
            n
        });
        guarded.write_all(&[0u8; 16 << 10]).await.unwrap();
        assert!(reader.await.unwrap() >= 16 << 10);
    }
}
