//! Parking a blocking query outside its request. A blocked client costs what its wait
//! holds; inside hyper and the router that was the connection's two 8 KiB buffers and
//! every layer's future (issue 25: 19.9 KiB per client). A connection served by
//! `gets.rs` offers to park ([`ParkOffer`] in the request): a blocking read that is not
//! answered yet then answers at once with a [`Parked`] mark holding only its watch
//! set, its deadline and its place under the limit; the connection waits on that, with
//! no request, router or buffer alive, and asks again (with the same deadline) when
//! something the read watched changed or the wait ran out. Every round is a whole
//! request through the router — auth, consistency, limits — so parking changes what a
//! wait holds, never what it answers.

use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use schedstate::WatchSet;

use super::error::ApiError;
use crate::service::{ClientKeys, CountPermit, Service};

/// In a request's extensions: its connection can hold the wait itself.
#[derive(Debug, Clone, Default)]
pub struct ParkOffer {
    /// When the query's wait runs out: `None` in its first round (the read sets it
    /// from `wait`), then the first round's deadline.
    pub deadline: Option<Instant>,
    /// From the second round on: the query's place under the limit, kept from the
    /// round before — a query that waits is never refused halfway for a place it held.
    pub place: Option<Place>,
}

impl PartialEq for ParkOffer {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline && self.place.is_some() == other.place.is_some()
    }
}

impl Eq for ParkOffer {}

/// A query's place under the limit, handed from one round to the next (taken once).
#[derive(Clone)]
pub struct Place(Arc<Mutex<Option<Waiting>>>);

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Place")
    }
}

impl Place {
    pub(crate) fn new(waiting: Waiting) -> Place {
        Place(Arc::new(Mutex::new(Some(waiting))))
    }

    /// The place, or a new one (or the `429` that says there is none).
    pub(crate) fn take_or_new(
        place: Option<&Place>,
        st: &Arc<Service>,
        client: &ClientKeys,
    ) -> Result<Waiting, ApiError> {
        match place.and_then(|p| p.0.lock().take()) {
            Some(w) => Ok(w),
            None => Waiting::new(st, client),
        }
    }
}

/// In a response's extensions: the read is not answered yet; wait on it, then send
/// the request again with [`ParkOffer::deadline`] set to its deadline. Taken once.
#[derive(Clone)]
pub(crate) struct Parked(Arc<Mutex<Option<ParkedWait>>>);

impl Parked {
    /// An answer that parks `wait`: no body; the connection never sends it.
    pub(crate) fn response(wait: ParkedWait) -> Response {
        let mut resp = StatusCode::ACCEPTED.into_response();
        resp.extensions_mut()
            .insert(Parked(Arc::new(Mutex::new(Some(wait)))));
        resp
    }

    /// The wait, if `resp` parks one.
    pub(crate) fn take(resp: &Response) -> Option<ParkedWait> {
        resp.extensions().get::<Parked>()?.0.lock().take()
    }
}

/// What a parked read holds: the reads it watches, its deadline, and its place under
/// the limit of blocking queries (and in the metrics) until it is dropped.
pub(crate) struct ParkedWait {
    pub watch: WatchSet,
    pub deadline: Instant,
    /// Handed to the next round ([`ParkOffer::place`]).
    pub waiting: Waiting,
}

/// A waiting blocking query: counted in the metrics and against the limit while it
/// lives (parked or inside its request).
pub(crate) struct Waiting {
    st: Arc<Service>,
    _permit: CountPermit,
}

impl Waiting {
    /// A place under the limit, or the `429` that says there is none.
    pub(crate) fn new(st: &Arc<Service>, client: &ClientKeys) -> Result<Waiting, ApiError> {
        let permit = st
            .gates
            .blocking_query(client)
            .map_err(|r| ApiError::too_many(r.message(&st.limits)))?;
        st.metrics.blocking_waiting.inc();
        Ok(Waiting {
            st: st.clone(),
            _permit: permit,
        })
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.st.metrics.blocking_waiting.dec();
    }
}
