//! Query parameters, parsed strictly: each endpoint names the ones it takes, and an
//! unknown one, a bad number or a bad duration is a 400 naming it — a typo must not
//! silently turn a blocking query into an immediate one.

use std::marker::PhantomData;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;

/// The parameters a read, a write or a stream may take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    /// `index=N`: block until past N.
    pub index: u64,
    /// Whether `index` was given at all (the event stream starts at the next write
    /// without one, after write 0 with `index=0`).
    pub has_index: bool,
    /// `wait=30s`: block at most this long.
    pub wait: Option<Duration>,
    /// `stale`: answer from this server.
    pub stale: bool,
    /// `pretty`: indented JSON.
    pub pretty: bool,
    /// `namespace=`.
    pub namespace: Option<String>,
    /// `prefix=`.
    pub prefix: Option<String>,
    /// `topic=` (may repeat).
    pub topics: Vec<String>,
}

/// What every read takes.
pub const READ: &[&str] = &["index", "wait", "stale", "pretty"];

/// The parameters one kind of endpoint takes (a marker type per list).
pub trait Allowed {
    /// The keys; any other is refused.
    const KEYS: &'static [&'static str];
}

macro_rules! allowed {
    ($($(#[$doc:meta])* $name:ident = $keys:expr;)*) => {$(
        $(#[$doc])*
        pub enum $name {}
        impl Allowed for $name {
            const KEYS: &'static [&'static str] = $keys;
        }
    )*};
}

allowed! {
    /// A read: `index`, `wait`, `stale`, `pretty`.
    Read = READ;
    /// The volume list: a read's, `namespace` and `prefix`.
    VolumeList = &["index", "wait", "stale", "pretty", "namespace", "prefix"];
    /// One volume: a read's and `namespace`.
    VolumeRead = &["index", "wait", "stale", "pretty", "namespace"];
    /// A write: `pretty`.
    Write = &["pretty"];
    /// The event stream: `index` and `topic` (repeatable).
    EventStream = &["index", "topic"];
    /// An operator read answered as JSON: `pretty`, `stale`.
    OperatorRead = &["pretty", "stale"];
    /// The snapshot download: `stale`.
    SnapshotRead = &["stale"];
}

/// The query parameters of a request, parsed with the keys `A` allows: a handler
/// that takes a `Checked<A>` runs only when they are valid; otherwise the 400 that
/// names the problem is answered before it.
pub struct Checked<A>(pub Params, pub PhantomData<A>);

impl<A: Allowed, S: Send + Sync> FromRequestParts<S> for Checked<A> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parse(parts.uri.query(), A::KEYS).map(|p| Checked(p, PhantomData))
    }
}

fn flag(key: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "" | "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "{key}={value:?}: expected no value, true or false"
        ))),
    }
}

/// Parses a wait like Nomad's: `30s`, `500ms`, `5m`, `1m30s`.
fn duration(value: &str) -> Result<Duration, ApiError> {
    humantime::parse_duration(value).map_err(|e| {
        ApiError::bad_request(format!(
            "wait={value:?}: not a duration ({e}); write it with a unit, like 30s or 500ms"
        ))
    })
}

/// Parses `raw` (the query string), allowing only `allowed` keys.
///
/// # Errors
/// 400 naming the first unknown key or bad value.
pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Params, ApiError> {
    let mut p = Params::default();
    let Some(raw) = raw else {
        return Ok(p);
    };
    for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
        if !allowed.contains(&&*key) {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter {key:?} (this endpoint takes: {})",
                allowed.join(", ")
            )));
        }
        match &*key {
            "index" => {
                p.has_index = true;
                p.index = value.parse().map_err(|_| {
                    ApiError::bad_request(format!("index={value:?}: not a non-negative integer"))
                })?;
            }
            "wait" => p.wait = Some(duration(&value)?),
            "stale" => p.stale = flag(&key, &value)?,
            "pretty" => p.pretty = flag(&key, &value)?,
            "namespace" => p.namespace = Some(value.into_owned()),
            "prefix" => p.prefix = Some(value.into_owned()),
            "topic" => p.topics.push(value.into_owned()),
            _ => {}
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_parameters_parse() {
        let p = parse(Some("index=7&wait=1m30s&stale&pretty=true"), READ).unwrap();
        assert_eq!(p.index, 7);
        assert_eq!(p.wait, Some(Duration::from_secs(90)));
        assert!(p.stale && p.pretty);
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = parse(Some("idx=7"), READ).unwrap_err();
        assert!(e.body.message.contains("\"idx\""), "{}", e.body.message);
        let e = parse(Some("index=-1"), READ).unwrap_err();
        assert!(e.body.message.contains("index="), "{}", e.body.message);
        let e = parse(Some("wait=30"), READ).unwrap_err();
        assert!(e.body.message.contains("wait="), "{}", e.body.message);
        let e = parse(Some("stale=maybe"), READ).unwrap_err();
        assert!(e.body.message.contains("stale="), "{}", e.body.message);
    }
}
