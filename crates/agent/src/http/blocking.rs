//! Every read of the state as a blocking query (`?index=&wait=`): rounds of reading
//! with a watch set and waiting on it, until the answer's index passes the one asked
//! for or the wait runs out.
//!
//! Two kinds of read, by what a round costs:
//!
//! - [`blocking`]: a point read (one row, one plugin or volume with what it is built
//!   from), a bounded amount of work: read inline on the async worker;
//! - [`scan`]: a list, whose work grows with a table (every row made into its JSON
//!   shape, a filter over each, whole objects, `?pretty`): each round — the read and,
//!   once answered, the answer's JSON — runs through the agent's [`Scans`]: off the
//!   async workers, a bounded number at a time, a share per client, within a time
//!   budget the list checks as it goes (422 `BudgetExceeded` past it). An unfiltered
//!   list of a small table ([`INLINE_LIST_ROWS`]) is read inline instead.
//!
//! A list's round keeps only the rows of its page (shared pointers) and answers by
//! writing them as the reader takes them (`list_body.rs`): a slow reader of a long
//! list holds a piece of it, not all of it.
//!
//! Between rounds nothing of the read is held but its watch set: an answer that does
//! not end the query is dropped at once. A connection that offers to park the wait
//! (`park.rs`) gets a [`Parked`] mark instead of a waiting future.
//!
//! [`Scans`]: crate::service::Gates::scans

use std::time::Instant;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::state::{StateSnapshot, StateView, Table};
use schedstate::{QueryOptions, WatchSet};
use serde::Serialize;

use super::answers::METERED_FROM;
use super::error::ApiError;
use super::list_body::Listed;
use super::park::{Parked, ParkedWait, Place};
use super::query::Params;
use super::{AppState, json_body};
use crate::api::NOMAD_NEXT_TOKEN_HEADER;
use crate::service::{Budget, ClientKeys, ScanRefused, Service};

/// What a read found: its index, the value (`None`: 404) and, for a page of a list,
/// the token of the next page.
pub(super) type Found<T> = (u64, Option<T>, Option<String>);

/// A point read as a blocking query with the request's `index` and `wait`; `None`
/// from `read` is a 404 of `missing`.
pub(super) async fn blocking<T: Serialize + Send>(
    st: &AppState,
    p: &Params,
    missing: impl Fn() -> ApiError + Sync,
    mut read: impl FnMut(StateView<'_>) -> Found<T> + Send,
) -> Response {
    run(st, p, Cost::Point, missing, |v, _| {
        let (index, value, next) = read(v);
        Ok((index, value.map(Whole), next))
    })
    .await
}

/// A list as a blocking query, each round a scan (see the module's doc); `read`
/// checks its budget as it goes (`Listing::cut` does) and answers the rows of its
/// page, which are written as the reader takes them (`list_body.rs`).
pub(super) async fn scan(
    st: &AppState,
    p: &Params,
    table: Table,
    read: impl FnMut(StateView<'_>, &Budget) -> Result<Found<Listed>, ApiError> + Send,
) -> Response {
    let cost = Cost::List {
        table,
        filtered: p.filter.is_some(),
    };
    run(st, p, cost, unreachable_missing, read).await
}

/// A list of at most this many rows, unfiltered, is read inline like a point read: a
/// thread hop would cost more than the list (a blocking list of a small table, woken
/// often, is the common case).
const INLINE_LIST_ROWS: usize = 256;

/// What a round costs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cost {
    Point,
    /// A list of `table`, with a filter or not.
    List {
        table: Table,
        filtered: bool,
    },
}

impl Cost {
    /// Whether this round is a scan: a list with a filter, or of a table past
    /// [`INLINE_LIST_ROWS`] rows now.
    fn scans(self, st: &Service) -> bool {
        match self {
            Cost::Point => false,
            Cost::List { filtered: true, .. } => true,
            Cost::List { table, .. } => {
                st.server.reader().snapshot().view().row_count(table) > INLINE_LIST_ROWS
            }
        }
    }
}

/// A value an answer is made of.
trait Reply: Send {
    /// The answer with this value (status 200; the index headers are added after).
    fn into_response(self, at: &ReplyAt<'_>) -> Response;
}

/// What a reply may need of its round.
struct ReplyAt<'a> {
    st: &'a AppState,
    client: &'a ClientKeys,
    /// The snapshot the round read.
    snapshot: &'a StateSnapshot,
    pretty: bool,
}

/// A value answered whole: one JSON document.
struct Whole<T>(T);

impl<T: Serialize + Send> Reply for Whole<T> {
    fn into_response(self, at: &ReplyAt<'_>) -> Response {
        json_body(StatusCode::OK, &self.0, at.pretty)
    }
}

impl Reply for Listed {
    fn into_response(self, at: &ReplyAt<'_>) -> Response {
        Listed::into_response(self, at.st, at.client, at.snapshot, at.pretty)
    }
}

/// What one round came to.
enum Round {
    /// The answer (or an error) to send.
    Answer(Response),
    /// Nothing new yet: wait on the watch set.
    Wait,
}

async fn run<T: Reply>(
    st: &AppState,
    p: &Params,
    cost: Cost,
    missing: impl Fn() -> ApiError + Sync,
    mut read: impl FnMut(StateView<'_>, &Budget) -> Result<Found<T>, ApiError> + Send,
) -> Response {
    let wait = p.wait.unwrap_or(st.max_wait).min(st.max_wait);
    let opts = QueryOptions::new(p.index, wait);
    let deadline = p
        .park
        .as_ref()
        .and_then(|o| o.deadline)
        .unwrap_or_else(|| Instant::now() + opts.effective_wait());
    let client = p
        .client
        .clone()
        .unwrap_or_else(|| ClientKeys::new(std::net::Ipv4Addr::UNSPECIFIED.into(), None));
    // A query that may wait holds a place under the limit of blocking queries.
    let mut waiting = if p.index > 0 {
        let place = p.park.as_ref().and_then(|o| o.place.as_ref());
        match Place::take_or_new(place, st, &client) {
            Ok(w) => Some(w),
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    let mut stopping = st.stopping.clone();
    let mut last_round = false;
    loop {
        let watch = WatchSet::new();
        let mut one = |budget: &Budget| {
            round(
                st,
                p,
                &client,
                &opts,
                RoundEnd {
                    deadline,
                    last: last_round,
                },
                &watch,
                &missing,
                budget,
                &mut read,
            )
        };
        let outcome = match cost.scans(st) {
            false => one(&Budget::unlimited()),
            true => {
                // A client (or all of them) at its budget of unsent answers gets no
                // list built for it: the answer would be refused once made.
                if let Err(r) = st.gates.answer_room(&client, METERED_FROM as usize) {
                    return ApiError::too_many(r.message(&st.limits)).into_response();
                }
                match st.gates.scans.run(&client, one).await {
                    Ok(r) => r,
                    Err(refused) => return scan_refused(st, &refused).into_response(),
                }
            }
        };
        if let Round::Answer(resp) = outcome {
            return resp;
        }
        if waiting.is_none() {
            // A query without an index is answered by its first round; should one
            // not be, it answers with the next rather than wait unaccounted.
            last_round = true;
            continue;
        }
        if p.park.is_some()
            && let Some(waiting) = waiting.take()
        {
            return Parked::response(ParkedWait {
                watch,
                deadline,
                waiting,
            });
        }
        tokio::select! {
            () = watch.changed() => {}
            () = tokio::time::sleep_until(deadline.into()) => last_round = true,
            // The agent is stopping: answer now with what is there.
            _ = stopping.wait_for(|s| *s) => last_round = true,
        }
    }
}

/// When a round must answer whatever it reads.
#[derive(Clone, Copy)]
struct RoundEnd {
    deadline: Instant,
    /// The wait ran out, or the agent is stopping.
    last: bool,
}

/// One round: read with `watch`, and answer when the read passed the index asked
/// for (or it is the last round); the value is dropped otherwise.
#[allow(clippy::too_many_arguments)]
fn round<T: Reply>(
    st: &AppState,
    p: &Params,
    client: &ClientKeys,
    opts: &QueryOptions,
    end: RoundEnd,
    watch: &WatchSet,
    missing: &impl Fn() -> ApiError,
    budget: &Budget,
    read: &mut impl FnMut(StateView<'_>, &Budget) -> Result<Found<T>, ApiError>,
) -> Round {
    let snapshot = st.server.reader().snapshot();
    let found = read(snapshot.watched(watch), budget);
    let (index, value, next) = match found {
        Ok(f) => f,
        Err(e) => return Round::Answer(e.into_response()),
    };
    let index = at_least_one(&snapshot.view(), index);
    let last = end.last || Instant::now() >= end.deadline || *st.stopping.borrow();
    if opts.is_answered_by(index) || last {
        let at = ReplyAt {
            st,
            client,
            snapshot: &snapshot,
            pretty: p.pretty,
        };
        return Round::Answer(answer(st, &at, index, value, next, missing));
    }
    Round::Wait
}

/// The answer to a read: the value as JSON with its index, or `missing` (a 404)
/// with the index of the absence.
fn answer<T: Reply>(
    st: &Service,
    at: &ReplyAt<'_>,
    index: u64,
    value: Option<T>,
    next_token: Option<String>,
    missing: impl Fn() -> ApiError,
) -> Response {
    match value {
        Some(value) => {
            let mut resp = value.into_response(at);
            super::with_index(st, &mut resp, index);
            if let Some(token) = next_token.and_then(|t| HeaderValue::from_str(&t).ok()) {
                resp.headers_mut().insert(NOMAD_NEXT_TOKEN_HEADER, token);
            }
            resp
        }
        None => {
            let mut resp = missing().into_response();
            super::with_index(st, &mut resp, index);
            resp
        }
    }
}

/// An answer's index raised to 1 once the store holds anything, as Nomad does: a
/// client that blocks with 0 is answered at once, so an empty table or a row never
/// deleted (index 0) would make it poll in a loop. Safe: every later write is above
/// 1, so the raised index still moves when the answer changes.
fn at_least_one(v: &StateView<'_>, index: u64) -> u64 {
    index.max(v.last_applied().min(1))
}

/// The index of a row that is not there: its table's delete index (raised to 1).
pub(super) fn absent(v: &StateView<'_>, table: Table) -> u64 {
    at_least_one(v, v.delete_index(table))
}

pub(super) fn index_of(v: &StateView<'_>, tables: &[Table]) -> u64 {
    tables.iter().map(|t| v.table_index(*t)).max().unwrap_or(0)
}

fn unreachable_missing() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        "a list is never missing",
    )
}

/// The answer to a scan that did not run.
fn scan_refused(st: &Service, refused: &ScanRefused) -> ApiError {
    match refused {
        ScanRefused::ClientQueue(n) => ApiError::too_many(format!(
            "this client (address or token) has {n} lists or filtered reads waiting or \
             running already (scans_waiting_per_client); wait for some to finish"
        )),
        ScanRefused::Busy(wait) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Busy",
            format!(
                "no scan thread came free for this read within {wait:?} ({} at once, \
                 scan_threads; this client's others queued first); retry later or on another \
                 server",
                st.limits.scan_threads
            ),
        ),
    }
}

/// The answer to a scan that went over its budget after `items` items.
pub(super) fn over_budget(budget: &Budget, items: usize) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "BudgetExceeded",
        format!(
            "this list went over its time budget of {:?} (scan_budget) after {items} items; \
             narrow it with prefix=, per_page= or a cheaper filter",
            budget.limit()
        ),
    )
}
