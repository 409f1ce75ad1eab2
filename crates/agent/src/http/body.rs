//! Reading a request body without trusting the sender: the content type checked (a
//! JSON route takes a body with no `Content-Type` as JSON, as Nomad does: Nomad's Go
//! client sends none on its writes; a *declared* other type is still refused), the
//! claimed length checked against the route's limit *before* a byte is read, room for
//! the body taken from the agent's budget of bytes in flight *as the bytes arrive*
//! (a claim reserves nothing: a client that claims 16 MiB and sends one byte holds
//! one byte) and within the client's share of it (429 when either is spent), the
//! limit enforced again while reading (a chunked body has no claim), and the whole
//! body due within the body timeout. Every route that reads a body goes through
//! [`read_body`]; the Raft route reads with the servers' own budget.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::service::{BodyPermit, ClientKeys, Service};

/// A request's body with who sent it: what its bytes count against.
pub(crate) struct ClientBody {
    pub client: ClientKeys,
    pub body: Body,
}

impl<S: Send + Sync> FromRequest<S> for ClientBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, _: &S) -> Result<Self, Self::Rejection> {
        let client = req
            .extensions()
            .get::<ClientKeys>()
            .cloned()
            .unwrap_or_else(|| ClientKeys::new(std::net::Ipv4Addr::UNSPECIFIED.into(), None));
        Ok(ClientBody {
            client,
            body: req.into_body(),
        })
    }
}

/// What a route accepts.
pub(crate) struct BodyRule {
    /// The largest body.
    pub limit: usize,
    /// The content type it must declare (parameters such as `charset` allowed). For
    /// [`JSON`] a body with no `Content-Type` at all is taken too.
    pub content_type: &'static str,
}

/// The content type of every JSON route.
pub(crate) const JSON: &str = "application/json";

/// A body read whole, with the budget it holds.
pub(crate) struct ReadBody {
    pub bytes: Bytes,
    /// Released when the body is dropped.
    pub _permit: BodyPermit,
}

/// The `Content-Length` the request claims, if any.
pub(crate) fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get(header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| ApiError::bad_request("Content-Length is not a number")),
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "TooLarge",
        format!("the body is over the limit of {limit} bytes"),
    )
}

/// Checks the content type and the claimed length; nothing is read.
pub(crate) fn check_head(headers: &HeaderMap, rule: &BodyRule) -> Result<Option<u64>, ApiError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    // No header at all is Nomad's Go client (it sets none on writes) and Nomad
    // decodes it as JSON. A declared type other than the route's stays refused: it is
    // a client's mistake, or a browser's "simple" request (text/plain, a form) —
    // which the guard (Origin, Host, Sec-Fetch-*) and the token stop before here
    // anyway; refusing it costs no client of Nomad's anything.
    let taken = match declared.as_deref() {
        None => rule.content_type == JSON,
        Some(d) => d == rule.content_type,
    };
    if !taken {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "send the body as Content-Type: {} (got {})",
                rule.content_type,
                declared.as_deref().unwrap_or("none")
            ),
        ));
    }
    let claimed = content_length(headers)?;
    if claimed.is_some_and(|n| n > rule.limit as u64) {
        return Err(too_large(rule.limit));
    }
    Ok(claimed)
}

/// A body claimed over the limit by at most this factor is read and thrown away
/// (within the body timeout, holding nothing) before the 413, so that an honest client
/// that is still sending sees the answer instead of a reset connection. A larger claim
/// is answered at once and the connection closed.
const DRAIN_FACTOR: u64 = 2;

/// Reads a body under `rule` (see the module's doc).
///
/// # Errors
/// 415 a declared content type other than the route's (or none, off the JSON routes), 413 over the limit (claimed or read), 429 no room in the
/// budget, 408 not sent in time, 400 broken off.
pub(crate) async fn read_body(
    st: &Service,
    headers: &HeaderMap,
    body: ClientBody,
    rule: &BodyRule,
) -> Result<ReadBody, ApiError> {
    let ClientBody { client, body } = body;
    match check_head(headers, rule) {
        Ok(_) => {}
        Err(e) => {
            let claimed = content_length(headers).ok().flatten().unwrap_or(0);
            if e.status == StatusCode::PAYLOAD_TOO_LARGE
                && claimed <= DRAIN_FACTOR.saturating_mul(rule.limit as u64)
            {
                drain(st, body).await;
            }
            return Err(e);
        }
    }
    read_checked(st, st.gates.client_body(&client), body, rule.limit).await
}

/// Reads `body` to its end and drops every piece, within the body timeout.
async fn drain(st: &Service, body: Body) {
    let mut body = body;
    let _ = tokio::time::timeout(st.limits.body_timeout, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
}

/// Reads a body whose head [`check_head`] (or the caller) already checked, holding
/// room for each piece in `permit` before it is kept.
pub(crate) async fn read_checked(
    st: &Service,
    mut permit: BodyPermit,
    body: Body,
    limit: usize,
) -> Result<ReadBody, ApiError> {
    let read = tokio::time::timeout(
        st.limits.body_timeout,
        collect(st, &mut permit, body, limit),
    );
    let bytes = match read.await {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "BodyTimeout",
                format!(
                    "the body did not arrive within {:?}",
                    st.limits.body_timeout
                ),
            ));
        }
        Ok(read) => read?,
    };
    Ok(ReadBody {
        bytes,
        _permit: permit,
    })
}

/// The body's pieces, each counted in `permit` as it arrives, up to `limit`.
/// Nothing is allocated from what the client claims: the buffer grows with what it
/// sent.
async fn collect(
    st: &Service,
    permit: &mut BodyPermit,
    mut body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let mut first: Option<Bytes> = None;
    let mut more: Vec<u8> = Vec::new();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if data.is_empty() {
            continue;
        }
        if len.saturating_add(data.len()) > limit {
            return Err(too_large(limit));
        }
        permit
            .grow(data.len())
            .map_err(|r| ApiError::too_many(r.message(&st.limits)))?;
        len += data.len();
        // One piece (most bodies) is kept as it came; more are joined.
        match first.take() {
            None if more.is_empty() => first = Some(data),
            Some(f) => {
                more.extend_from_slice(&f);
                more.extend_from_slice(&data);
            }
            None => more.extend_from_slice(&data),
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(more)))
}

/// The largest body of the small JSON requests (ACL, node updates).
pub(crate) const SMALL_BODY_BYTES: usize = 16 << 10;

/// A JSON body, or the default for an empty body sent without a content type (as
/// Nomad's clients send a bootstrap).
pub(crate) async fn read_json<T: DeserializeOwned + Default>(
    st: &Service,
    headers: &HeaderMap,
    body: ClientBody,
) -> Result<T, ApiError> {
    let empty_claim = headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0");
    if !headers.contains_key(header::CONTENT_TYPE) && empty_claim {
        return Ok(T::default());
    }
    let rule = BodyRule {
        limit: SMALL_BODY_BYTES,
        content_type: JSON,
    };
    let body = read_body(st, headers, body, &rule).await?;
    if body.bytes.is_empty() {
        return Ok(T::default());
    }
    serde_json::from_slice(&body.bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not a valid request: {e}")))
}

/// Reads a write's JSON body (up to the write limit), which must not be empty:
/// `what` names what it must be ("a command"), `example` shows one.
pub(crate) async fn read_write_json<T: DeserializeOwned>(
    st: &Service,
    headers: &HeaderMap,
    body: ClientBody,
    what: &str,
    example: &str,
) -> Result<T, ApiError> {
    let rule = BodyRule {
        limit: st.limits.write_body_bytes,
        content_type: JSON,
    };
    let body = read_body(st, headers, body, &rule).await?;
    if body.bytes.is_empty() {
        return Err(ApiError::bad_request(format!(
            "the body is empty: send {what} as JSON, like {example}"
        )));
    }
    serde_json::from_slice(&body.bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not {what}: {e}")))
}
