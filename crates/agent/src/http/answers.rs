//! Large answers held for slow readers, budgeted: an answer of [`METERED_FROM`] bytes
//! or more that is made whole (a point read — a plugin with thousands of
//! allocations —, a list that ends within its first piece) holds its size against
//! the agent's budget of unsent answer bytes and the client's share of it (its
//! address, an IPv6 /64) until the last byte is handed to the connection; over
//! either, the request is answered 429 `TooManyRequests` instead, and the answer
//! built for it is dropped at once. A list is not even begun for a client (or when
//! all clients together are) at the budget already (`Gates::answer_room`, asked
//! before each scan).
//!
//! A long list is not made whole at all: it is written as its reader takes it
//! (`list_body.rs`), a piece at a time, and has no size up front, so it is not
//! counted here. Before that, 90 connections asking for a 7.2 MB list and never
//! reading held 590 MiB (issue 48). The body is handed out in pieces of
//! [`PIECE_BYTES`] as the connection takes them, so the connection's own buffers hold
//! one piece; the rest waits here, counted, until the client reads it or the write
//! timeout (`stall.rs`) ends the connection. Streams (the event stream, snapshot
//! downloads) have no size up front and budgets of their own.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};

use super::AppState;
use super::error::ApiError;
use crate::service::{AnswerPermit, ClientKeys};

/// Answers below this size are not counted: they leave in one write.
pub(crate) const METERED_FROM: u64 = 64 << 10;

/// The size of the pieces a metered answer is handed out in.
const PIECE_BYTES: usize = 64 << 10;

/// The layer (inside the guard, which names the client, and inside compression, so
/// that it sees the answer's own size).
pub(crate) async fn meter(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let client = req.extensions().get::<ClientKeys>().cloned();
    let resp = next.run(req).await;
    let Some(len) = http_body::Body::size_hint(resp.body()).exact() else {
        return resp;
    };
    if len < METERED_FROM {
        return resp;
    }
    let client =
        client.unwrap_or_else(|| ClientKeys::new(std::net::Ipv4Addr::UNSPECIFIED.into(), None));
    let bytes = usize::try_from(len).unwrap_or(usize::MAX);
    match st.gates.answer(&client, bytes) {
        Ok(permit) => resp.map(|body| Body::new(Metered::new(body, permit))),
        Err(refused) => ApiError::too_many(refused.message(&st.limits)).into_response(),
    }
}

/// A body handed out in pieces, holding its permit until it is done or dropped.
struct Metered {
    inner: Body,
    /// What the inner body gave and was not handed out yet.
    left: Bytes,
    _permit: AnswerPermit,
}

impl Metered {
    fn new(inner: Body, permit: AnswerPermit) -> Metered {
        Metered {
            inner,
            left: Bytes::new(),
            _permit: permit,
        }
    }
}

impl http_body::Body for Metered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.left.is_empty() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.left = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            }
        }
        let n = this.left.len().min(PIECE_BYTES);
        Poll::Ready(Some(Ok(Frame::data(this.left.split_to(n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let left = self.left.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + left);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + left);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_metered_body_comes_out_whole_in_pieces() {
        let limits = crate::Limits::default();
        let gates = crate::service::Gates::new(&limits);
        let me = ClientKeys::new("10.0.0.1".parse().unwrap(), None);
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let permit = gates.answer(&me, data.len()).unwrap();
        let mut body = Metered::new(Body::from(data.clone()), permit);
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(data.len() as u64)
        );
        let mut out = Vec::new();
        let mut pieces = 0;
        while let Some(frame) = body.frame().await {
            let piece = frame.unwrap().into_data().unwrap();
            assert!(piece.len() <= PIECE_BYTES);
            out.extend_from_slice(&piece);
            pieces += 1;
        }
        assert_eq!(out, data);
        assert_eq!(pieces, 4);
    }
}
