//! A list's answer, written as its reader takes it: what a slow reader of a long list
//! holds is bounded, whatever the list's size (issue 48, item 4).
//!
//! A list round (`blocking.rs`) keeps only the rows of its page — shared pointers
//! into the snapshot it read, 8 bytes each — and how to show one ([`Listed`]). The
//! answer is then written [`PIECE_BYTES`] at a time: the first piece by the round
//! itself; if the list ends within it, that is the whole answer, sent with its
//! length as before. A longer one is sent chunked, each next piece made only once
//! the connection has taken the one before, on a scan thread in the client's lanes
//! (`Scans::run_in_lane`): a reader that takes nothing costs one piece and the
//! snapshot it reads from, and a client reading many long lists at once waits behind
//! itself. The write timeout (`stall.rs`) ends a connection that stops reading.
//!
//! The bytes are exactly those of the whole answer made at once (`?pretty`
//! included): items are written one by one, compact or re-indented one level deep
//! (`pretty.rs`), between the array's brackets.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use schedstate::state::{StateSnapshot, StateView};
use serde::Serialize;

use super::AppState;
use super::error::ApiError;
use super::pretty::reindent_into;
use crate::service::ClientKeys;

/// The size of the pieces a list is written in (a piece may pass it by one item).
pub(super) const PIECE_BYTES: usize = 64 << 10;

/// The rows of a list's page, and how each is shown.
pub(super) struct Listed {
    rows: Box<dyn ListRows>,
}

impl Listed {
    /// `rows`, each shown in the answer as `show` makes it from the snapshot the list
    /// was read from (a volume's item is built from its plugin and allocations too).
    pub(super) fn new<R, T, F>(rows: Vec<R>, show: F) -> Listed
    where
        R: Send + Sync + 'static,
        T: Serialize + 'static,
        F: Fn(&StateView<'_>, &R) -> T + Send + Sync + 'static,
    {
        Listed {
            rows: Box::new(RowsShown {
                rows,
                show,
                _item: std::marker::PhantomData,
            }),
        }
    }

    /// The answer (status 200; the caller adds the index headers): whole when it
    /// fits in one piece, else streamed as described in the module's doc.
    pub(super) fn into_response(
        self,
        st: &AppState,
        client: &ClientKeys,
        snapshot: &StateSnapshot,
        pretty: bool,
    ) -> Response {
        let mut writer = Writer {
            rows: self.rows,
            next: 0,
            pretty,
            scratch: Vec::new(),
        };
        let mut first = Vec::new();
        let done = match writer.fill(&snapshot.view(), &mut first) {
            Ok(done) => done,
            Err(e) => return encoding_failed(&e).into_response(),
        };
        let body = if done {
            Body::from(first)
        } else {
            let open = Open {
                st: st.clone(),
                client: client.clone(),
                snapshot: snapshot.clone(),
                writer: Some(writer),
                first: Some(Bytes::from(first)),
            };
            // Fused: the compressor may ask again after the end.
            Body::from_stream(futures_util::StreamExt::fuse(futures_util::stream::unfold(
                open, next_piece,
            )))
        };
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

/// A list's rows and how each is shown, behind one object type for every row type.
trait ListRows: Send + Sync {
    fn len(&self) -> usize;
    /// Appends row `i` as compact JSON.
    fn write(&self, view: &StateView<'_>, i: usize, out: &mut Vec<u8>) -> serde_json::Result<()>;
}

struct RowsShown<R, F, T> {
    rows: Vec<R>,
    show: F,
    _item: std::marker::PhantomData<fn() -> T>,
}

impl<R, T, F> ListRows for RowsShown<R, F, T>
where
    R: Send + Sync,
    T: Serialize,
    F: Fn(&StateView<'_>, &R) -> T + Send + Sync,
{
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn write(&self, view: &StateView<'_>, i: usize, out: &mut Vec<u8>) -> serde_json::Result<()> {
        serde_json::to_writer(out, &(self.show)(view, &self.rows[i]))
    }
}

/// Where the writing of a list is.
struct Writer {
    rows: Box<dyn ListRows>,
    /// The next row to write; `rows.len() + 1` once the closing bracket is written.
    next: usize,
    pretty: bool,
    /// An item's compact bytes, re-indented into the piece (`?pretty`).
    scratch: Vec<u8>,
}

impl Writer {
    /// Appends the next items to `out` until it holds [`PIECE_BYTES`] or the list
    /// is written to its end; `true` at the end.
    fn fill(&mut self, view: &StateView<'_>, out: &mut Vec<u8>) -> serde_json::Result<bool> {
        let len = self.rows.len();
        if self.next == 0 {
            out.push(b'[');
        }
        while self.next < len {
            if out.len() >= PIECE_BYTES {
                return Ok(false);
            }
            if self.next > 0 {
                out.push(b',');
            }
            if self.pretty {
                out.extend_from_slice(b"\n  ");
                self.scratch.clear();
                self.rows.write(view, self.next, &mut self.scratch)?;
                reindent_into(&self.scratch, 1, out);
            } else {
                self.rows.write(view, self.next, out)?;
            }
            self.next += 1;
        }
        if self.next == len {
            if self.pretty && len > 0 {
                out.push(b'\n');
            }
            out.push(b']');
            if self.pretty {
                out.push(b'\n');
            }
            self.next += 1;
        }
        Ok(true)
    }
}

/// A list being streamed.
struct Open {
    st: AppState,
    client: ClientKeys,
    snapshot: StateSnapshot,
    /// `None` once the list is written to its end.
    writer: Option<Writer>,
    /// The piece the round made.
    first: Option<Bytes>,
}

/// The next piece of a streamed list, made on a scan thread in the client's lanes.
async fn next_piece(mut s: Open) -> Option<(Result<Bytes, std::io::Error>, Open)> {
    if let Some(first) = s.first.take() {
        return Some((Ok(first), s));
    }
    let mut writer = s.writer.take()?;
    let st = s.st.clone();
    let snapshot = &s.snapshot;
    let (made, writer) = st
        .gates
        .scans
        .run_in_lane(&s.client, move || {
            let mut piece = Vec::with_capacity(PIECE_BYTES + PIECE_BYTES / 8);
            let made = writer
                .fill(&snapshot.view(), &mut piece)
                .map(|done| (piece, done));
            (made, writer)
        })
        .await;
    match made {
        Ok((piece, done)) => {
            if !done {
                s.writer = Some(writer);
            }
            Some((Ok(Bytes::from(piece)), s))
        }
        // The head is sent: all that is left is to cut the answer short.
        Err(e) => Some((Err(std::io::Error::other(e)), s)),
    }
}

fn encoding_failed(e: &serde_json::Error) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        format!("encoding the answer: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use schedstate::state::StateStore;

    /// Every piece of a list of `n` items, and the items as one JSON array.
    fn pieces(n: usize, pretty: bool) -> (Vec<Vec<u8>>, serde_json::Value) {
        let snap = StateStore::new().snapshot();
        let rows: Vec<usize> = (0..n).collect();
        // Strings that hold what re-indenting treats as structure.
        let shown = |_: &StateView<'_>, i: &usize| {
            serde_json::json!({
                "ID": format!("n{i:05}"),
                "Name": format!("node \"{i}\", [rack]: {{a}}"),
                "Tags": [], "Meta": {}, "Nested": {"List": [i, {"Deep": true}]},
            })
        };
        let whole: Vec<_> = rows.iter().map(|r| shown(&snap.view(), r)).collect();
        let mut writer = Writer {
            rows: Listed::new(rows, shown).rows,
            next: 0,
            pretty,
            scratch: Vec::new(),
        };
        let mut out = Vec::new();
        loop {
            let mut piece = Vec::new();
            let done = writer.fill(&snap.view(), &mut piece).unwrap();
            out.push(piece);
            if done {
                break;
            }
        }
        (out, serde_json::Value::Array(whole))
    }

    #[test]
    fn a_list_written_in_pieces_is_byte_for_byte_the_whole_answer() {
        for n in [0, 1, 2, 3_000] {
            for pretty in [false, true] {
                let (pieces, whole) = pieces(n, pretty);
                let want = if pretty {
                    let mut b = serde_json::to_vec_pretty(&whole).unwrap();
                    b.push(b'\n');
                    b
                } else {
                    serde_json::to_vec(&whole).unwrap()
                };
                assert_eq!(pieces.concat(), want, "{n} items, pretty {pretty}");
                for p in &pieces {
                    assert!(p.len() < PIECE_BYTES + 1024, "a piece of {}", p.len());
                }
                if n == 3_000 {
                    assert!(pieces.len() > 2, "{} pieces", pieces.len());
                }
            }
        }
    }
}
