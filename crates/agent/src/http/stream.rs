//! `GET /v1/event/stream?index=N&topic=T[:key]`: the committed writes after `N`, one
//! JSON line each ([`EventBatch`](crate::api::EventBatch)), then new ones as they
//! commit, with `{}` heartbeats while idle. Served from this server's buffer (a
//! follower streams what it applied), in Nomad's envelope (`{"Index": N, "Events":
//! [...]}`, payloads in Nomad's shapes). An `N` older than the buffer starts at the
//! oldest write it holds, as Nomad does; a client that falls that far behind
//! mid-stream gets one `{"error": …}` line and the stream ends; so does one whose
//! token is revoked or expires while it is open. A stream holds at most
//! [`PENDING_BYTES`] of lines its client has not read (lines are made as it reads; a
//! large write goes out as several lines of the same index, [`LINE_BYTES`] each); one
//! that reads nothing is ended by the write timeout (`stall.rs`).

use std::collections::VecDeque;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::stream;

use super::error::ApiError;
use super::query::Checked;
use super::{AppState, with_index};
use crate::api::ErrorBody;
use crate::events::{EventBuffer, Since, TopicFilter};
use std::sync::Arc;

use crate::service::{Caller, ClientKeys, CountPermit};
use schedstate::model::AclScope;
use schedstate::state::Commit;

/// At most this many writes are taken from the buffer per lock (more than the
/// pending bound lets a stream send at once, unless they are small).
const BATCH: usize = 64;

/// At most this many bytes of lines wait in a stream for the client to read them
/// (one line may go over it: a line is never cut). A client that reads nothing holds
/// this and the connection's own buffers until the write timeout ends it.
const PENDING_BYTES: usize = 64 << 10;

/// At most this many row changes are made into lines on the async worker; more go
/// to a scan thread.
const INLINE_CHANGES: usize = 64;

/// The row changes of a write (an upper bound: those of unknown tables are not
/// streamed).
fn change_count(commit: &Commit) -> usize {
    let (low, high) = commit.changes().size_hint();
    high.unwrap_or(low)
}

/// A write's events go out in lines of about this size (the same index on each).
const LINE_BYTES: usize = 16 << 10;

struct Open {
    st: AppState,
    /// Who opened the stream: checked again as it goes, so that a revoked or expired
    /// token's stream ends (at the next write or heartbeat).
    caller: Caller,
    _permit: CountPermit,
    cursor: u64,
    filter: TopicFilter,
    newest: tokio::sync::watch::Receiver<u64>,
    pending: VecDeque<Bytes>,
    /// The bytes in `pending`.
    pending_bytes: usize,
    /// A write whose lines are not all made yet, and the change to go on from.
    partial: Option<(Arc<Commit>, usize)>,
    done: bool,
}

impl Open {
    fn push(&mut self, line: Bytes) {
        self.pending_bytes += line.len();
        self.pending.push_back(line);
    }

    /// Makes `commit`'s lines from change `from` while the pending bound allows;
    /// keeps what is left of it for later.
    fn make_lines(&mut self, commit: Arc<Commit>, mut from: usize) {
        loop {
            if self.pending_bytes >= PENDING_BYTES {
                self.partial = Some((commit, from));
                return;
            }
            let (line, next) = EventBuffer::line_from(&commit, &self.filter, from, LINE_BYTES);
            if let Some(line) = line {
                self.push(Bytes::from(line));
            }
            match next {
                Some(n) => from = n,
                None => return,
            }
        }
    }
}

impl Open {
    fn new(
        st: AppState,
        permit: CountPermit,
        cursor: u64,
        filter: TopicFilter,
        caller: Caller,
    ) -> Open {
        st.metrics.event_streams.inc();
        let newest = st.events.subscribe();
        Open {
            st,
            caller,
            _permit: permit,
            cursor,
            filter,
            newest,
            pending: VecDeque::new(),
            pending_bytes: 0,
            partial: None,
            done: false,
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.st.metrics.event_streams.dec();
    }
}

fn compacted(after: u64, held_after: u64) -> ErrorBody {
    ErrorBody {
        kind: "IndexCompacted".into(),
        message: format!(
            "index {after} is older than what this server holds (writes after {held_after}): \
             read the state, then stream from its index"
        ),
        index: Some(held_after),
    }
}

async fn next_chunk(mut s: Open) -> Option<(Result<Bytes, std::convert::Infallible>, Open)> {
    loop {
        if let Some(b) = s.pending.pop_front() {
            s.pending_bytes -= b.len();
            return Some((Ok(b), s));
        }
        if s.done {
            return None;
        }
        if let Some((commit, from)) = s.partial.take() {
            // What is left of a large write: its lines on a scan thread.
            let st = s.st.clone();
            st.gates
                .scans
                .run_queued(|| s.make_lines(commit, from))
                .await;
            continue;
        }
        s.newest.mark_unchanged();
        if let Err(e) = s.st.still_valid(&s.caller, AclScope::Read) {
            let body = ErrorBody {
                kind: e.kind().into(),
                message: format!("{e}: the stream ends"),
                index: None,
            };
            let mut line =
                serde_json::to_vec(&serde_json::json!({ "error": body })).unwrap_or_default();
            line.push(b'\n');
            s.push(Bytes::from(line));
            s.done = true;
            continue;
        }
        match s.st.events.since(s.cursor, BATCH) {
            Since::Compacted { held_after } => {
                let mut line = serde_json::to_vec(
                    &serde_json::json!({ "error": compacted(s.cursor, held_after) }),
                )
                .unwrap_or_default();
                line.push(b'\n');
                s.push(Bytes::from(line));
                s.done = true;
            }
            Since::Writes(writes) if !writes.is_empty() => {
                // Lines are made only as the client reads them: up to the pending
                // bound, the rest asked for again next time. A few changes (a stream
                // keeping up) are made here; a backlog of many — work that grows with
                // what was written — on a scan thread.
                let changes: usize = writes.iter().map(|w| change_count(w)).sum();
                let st = s.st.clone();
                let make = || {
                    for w in writes {
                        if s.pending_bytes >= PENDING_BYTES || s.partial.is_some() {
                            break;
                        }
                        s.cursor = w.index();
                        s.make_lines(w, 0);
                    }
                };
                if changes <= INLINE_CHANGES {
                    make();
                } else {
                    st.gates.scans.run_queued(make).await;
                }
            }
            Since::Writes(_) => {
                let heartbeat = s.st.heartbeat;
                let mut stopping = s.st.stopping.clone();
                tokio::select! {
                    changed = s.newest.changed() => {
                        if changed.is_err() {
                            s.done = true;
                        }
                    }
                    () = tokio::time::sleep(heartbeat) => {
                        s.push(Bytes::from_static(b"{}\n"));
                    }
                    _ = stopping.wait_for(|v| *v) => s.done = true,
                }
            }
        }
    }
}

pub(crate) async fn events(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Checked(p): Checked,
) -> Response {
    let mut filter = TopicFilter::default();
    for t in &p.topics {
        if let Err(why) = filter.add(t) {
            return ApiError::bad_request(format!("topic={t:?}: {why}")).into_response();
        }
    }
    // Without an index, the stream starts with the next write.
    let cursor = if p.has_index {
        p.index
    } else {
        *st.events.subscribe().borrow()
    };
    // An index older than what this server holds starts at the oldest write it holds,
    // as Nomad starts at the closest batch it has.
    let cursor = cursor.max(st.events.held_after());
    let client = p
        .client
        .clone()
        .unwrap_or_else(|| ClientKeys::new(std::net::Ipv4Addr::UNSPECIFIED.into(), None));
    let permit = match st.gates.event_stream(&client) {
        Ok(p) => p,
        Err(r) => return ApiError::too_many(r.message(&st.limits)).into_response(),
    };
    let open = Open::new(st.clone(), permit, cursor, filter, caller);
    let mut resp = Response::new(Body::from_stream(stream::unfold(open, next_chunk)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/x-ndjson"),
    );
    with_index(&st, &mut resp, cursor);
    resp
}
