//! `Idempotency-Key`: exactly-once writes over HTTP.
//!
//! A client that does not know whether its write landed (a timeout, a 503 while the
//! leader changed) sends it again with the same `Idempotency-Key` header (the IETF
//! httpapi draft's name). The key, scoped to the caller's token, goes into the Raft
//! entry with a digest of the command ([`WriteKey`]); every server's state machine
//! keeps recent keys with their first outcome ([`schedstate_raft::WriteKeys`]), so the
//! retry answers that outcome and index — marked `Idempotent-Replayed: true` — and
//! applies nothing again. The same key with another request is `422
//! IdempotencyKeyReused`.
//!
//! A request that makes several commands (a drain, which also sets the node's
//! eligibility) keys them in order: command `n` of the request under key `k` is
//! `(scope, k, n)`, so a retry makes the same keys.
//!
//! The key: 1–255 visible ASCII characters, bare or as a structured-field string
//! (`"…"`). Keys are remembered for [`WRITE_KEY_TTL_MS`](schedstate_raft::WRITE_KEY_TTL_MS)
//! by the log's clock and at most [`MAX_WRITE_KEYS`](schedstate_raft::MAX_WRITE_KEYS)
//! of them: a retry must come within that.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use schedstate::state::Command;
use schedstate_raft::WriteKey;
use sha2::{Digest, Sha256};

use super::error::ApiError;
use crate::service::Caller;

/// The request header.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The answer header on a replayed outcome.
pub(crate) const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// The longest key.
pub(crate) const MAX_KEY_LEN: usize = 255;

/// Set by [`commit`](super::writes::commit) when an answer replays a kept outcome;
/// read by [`mark_replays`] to add the header.
#[derive(Clone, Default)]
struct Replayed(Arc<AtomicBool>);

/// Adds `Idempotent-Replayed: true` to the answer of a write whose outcome was
/// replayed from its key.
pub(crate) async fn mark_replays(mut req: Request, next: Next) -> Response {
    let replayed = Replayed::default();
    req.extensions_mut().insert(replayed.clone());
    let mut response = next.run(req).await;
    if replayed.0.load(Ordering::Relaxed) {
        response.headers_mut().insert(
            HeaderName::from_static(IDEMPOTENT_REPLAYED),
            HeaderValue::from_static("true"),
        );
    }
    response
}

/// A write request's `Idempotency-Key`, if it sent one, scoped to its caller.
pub(crate) struct IdempotencyKey {
    /// SHA-256 over the scope and the key; `None` without a header.
    base: Option<Sha256>,
    /// Commands keyed so far in this request.
    next: AtomicU32,
    replayed: Replayed,
}

impl IdempotencyKey {
    /// No key: every command applies as sent.
    pub(crate) fn none() -> IdempotencyKey {
        IdempotencyKey {
            base: None,
            next: AtomicU32::new(0),
            replayed: Replayed::default(),
        }
    }

    /// Whether the request sent a key.
    pub(crate) fn is_some(&self) -> bool {
        self.base.is_some()
    }

    /// The key of the request's next command, `command`: `None` without a header.
    pub(crate) fn next_key(&self, command: &Command) -> Option<WriteKey> {
        let base = self.base.as_ref()?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = base.clone();
        id.update(n.to_le_bytes());
        Some(WriteKey {
            id: id.finalize().into(),
            fingerprint: fingerprint(command),
        })
    }

    /// A key of the agent's own for `command`, sent without one by its client: random,
    /// so it never meets a client's; it lets a write this agent forwards be sent again
    /// to a new leader when the one it went to stops answering (see
    /// [`schedstate_raft::FORWARD_DEADLINE`]). `None` if the system has no randomness.
    pub(crate) fn internal(command: &Command) -> Option<WriteKey> {
        let mut id = [0u8; 32];
        getrandom::fill(&mut id).ok()?;
        Some(WriteKey {
            id,
            fingerprint: fingerprint(command),
        })
    }

    /// Notes that an answer replays a kept outcome.
    pub(crate) fn mark_replayed(&self) {
        self.replayed.0.store(true, Ordering::Relaxed);
    }

    /// Refuses a key on a write whose answer cannot be replayed (one that makes a
    /// secret shown once).
    pub(crate) fn refuse(&self, why: &str) -> Result<(), ApiError> {
        if self.is_some() {
            return Err(ApiError::bad_request(format!(
                "Idempotency-Key is not taken on this endpoint: {why}"
            )));
        }
        Ok(())
    }
}

/// The digest a write key's request is known by: of the command's own bytes, so two
/// requests that mean the same write (whatever their JSON's spacing or key order) are
/// the same request.
fn fingerprint(command: &Command) -> [u8; 32] {
    let bytes = command.to_bytes();
    Sha256::new()
        .chain_update(b"schedstate write fingerprint\0")
        .chain_update(&bytes)
        .finalize()
        .into()
}

/// The key's text: bare, or a structured-field string without escapes.
fn parse(value: &HeaderValue) -> Result<&str, String> {
    let raw = value
        .to_str()
        .map_err(|_| "it must be visible ASCII".to_string())?;
    let key = match raw.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or_else(|| "a quoted key must end with a quote".to_string())?,
        None => raw,
    };
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!(
            "it must be 1 to {MAX_KEY_LEN} characters, not {}",
            key.len()
        ));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        return Err("it must be visible ASCII without quotes or backslashes".into());
    }
    Ok(key)
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let replayed = parts
            .extensions
            .get::<Replayed>()
            .cloned()
            .unwrap_or_default();
        let mut values = parts.headers.get_all(IDEMPOTENCY_KEY).iter();
        let Some(value) = values.next() else {
            return Ok(IdempotencyKey {
                replayed,
                ..IdempotencyKey::none()
            });
        };
        if values.next().is_some() {
            return Err(invalid("it was sent more than once".into()));
        }
        let key = parse(value).map_err(invalid)?;
        // Scoped to the token: one client's key never meets another's outcome.
        let scope = parts
            .extensions
            .get::<Caller>()
            .and_then(|c| c.token.as_ref())
            .map_or("", |t| &*t.accessor_id);
        let base = Sha256::new()
            .chain_update(b"schedstate idempotency key\0")
            .chain_update(scope.as_bytes())
            .chain_update([0])
            .chain_update(key.as_bytes())
            .chain_update([0]);
        Ok(IdempotencyKey {
            base: Some(base),
            next: AtomicU32::new(0),
            replayed,
        })
    }
}

fn invalid(why: String) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "InvalidIdempotencyKey",
        format!("Idempotency-Key: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bare_or_quoted_visible_ascii() {
        let ok = |s: &str| parse(&HeaderValue::from_str(s).unwrap()).map(str::to_string);
        assert_eq!(ok("abc-123").unwrap(), "abc-123");
        assert_eq!(ok("\"8e03978e-40d5\"").unwrap(), "8e03978e-40d5");
        assert!(ok("").is_err());
        assert!(ok("\"\"").is_err());
        assert!(ok("\"open").is_err());
        assert!(ok("a b").is_err());
        assert!(ok("a\\b").is_err());
        assert!(ok(&"k".repeat(MAX_KEY_LEN)).is_ok());
        assert!(ok(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(parse(&HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap()).is_err());
    }

    fn key(scope_key: &str) -> IdempotencyKey {
        IdempotencyKey {
            base: Some(Sha256::new().chain_update(scope_key.as_bytes())),
            ..IdempotencyKey::none()
        }
    }

    #[test]
    fn a_request_keys_its_commands_in_order_and_a_retry_makes_the_same_keys() {
        let command = Command::DeleteNodes {
            ids: vec!["n1".into()],
        };
        let first = key("k");
        let (a, b) = (
            first.next_key(&command).unwrap(),
            first.next_key(&command).unwrap(),
        );
        assert_ne!(a.id, b.id);
        assert_eq!(a.fingerprint, b.fingerprint);
        let retry = key("k");
        assert_eq!(retry.next_key(&command), Some(a));
        assert_eq!(retry.next_key(&command), Some(b));
        let other = Command::DeleteNodes {
            ids: vec!["n2".into()],
        };
        let changed = key("k").next_key(&other).unwrap();
        assert_eq!(changed.id, a.id);
        assert_ne!(changed.fingerprint, a.fingerprint);
        assert_ne!(key("j").next_key(&command).unwrap().id, a.id);
        assert_eq!(IdempotencyKey::none().next_key(&command), None);
    }
}
