//! Query parameters as Nomad takes them: the ones the agent uses are parsed (a bad
//! number, duration or flag is a 400 naming it), any other is ignored — Nomad's
//! clients send parameters the agent has no use for (`region` on every call, `stale`
//! as `False`), and Nomad ignores what it does not use.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;

/// The parameters of a request.
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
    /// `namespace=` (`*`: every namespace).
    pub namespace: Option<String>,
    /// `region=`: must be the agent's.
    pub region: Option<String>,
    /// `prefix=`: ids starting with it.
    pub prefix: Option<String>,
    /// `per_page=N`: a page of at most N items.
    pub per_page: Option<usize>,
    /// `next_token=`: the page starting at this item.
    pub next_token: Option<String>,
    /// `reverse`: the list in reverse order.
    pub reverse: bool,
    /// `filter=`: a go-bexpr expression over each item.
    pub filter: Option<String>,
    /// `full` (schedstate's own): lists answer whole objects, not Nomad's stubs.
    pub full: bool,
    /// `format=prometheus` on `/v1/metrics`.
    pub format: Option<String>,
    /// `topic=` (may repeat).
    pub topics: Vec<String>,
    /// `force` on a volume deregistration.
    pub force: bool,
    /// `purge` on a job deregistration: delete the row, not only stop the job.
    pub purge: bool,
    /// `enable` on a node drain (the form without a body).
    pub enable: Option<bool>,
    /// Not a parameter: the request's connection can park a blocking read's wait
    /// (`park.rs`).
    pub park: Option<super::park::ParkOffer>,
    /// Not a parameter: who the request counts against (its address, its token).
    pub client: Option<crate::service::ClientKeys>,
}

/// The query parameters of a request, parsed; a handler that takes a `Checked` runs
/// only when they are valid; otherwise the 400 that names the problem is answered
/// before it.
pub struct Checked(pub Params);

impl<S: Send + Sync> FromRequestParts<S> for Checked {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let mut p = parse(parts.uri.query())?;
        p.park = parts.extensions.get::<super::park::ParkOffer>().cloned();
        p.client = parts
            .extensions
            .get::<crate::service::ClientKeys>()
            .cloned();
        Ok(Checked(p))
    }
}

/// A boolean as Go's `strconv.ParseBool` reads it (and a bare key as true).
fn flag(key: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "" | "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
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

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ApiError> {
    value
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{key}={value:?}: not a non-negative integer")))
}

/// Parses `raw` (the query string).
///
/// # Errors
/// 400 naming the first bad value of a parameter the agent uses.
pub fn parse(raw: Option<&str>) -> Result<Params, ApiError> {
    let mut p = Params::default();
    let Some(raw) = raw else {
        return Ok(p);
    };
    for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
        match &*key {
            "index" => {
                p.has_index = true;
                p.index = number(&key, &value)?;
            }
            "wait" => p.wait = Some(duration(&value)?),
            "stale" => p.stale = flag(&key, &value)?,
            "pretty" => p.pretty = flag(&key, &value)?,
            "reverse" => p.reverse = flag(&key, &value)?,
            "full" => p.full = flag(&key, &value)?,
            "force" => p.force = flag(&key, &value)?,
            "purge" => p.purge = flag(&key, &value)?,
            "enable" => p.enable = Some(flag(&key, &value)?),
            "namespace" => p.namespace = Some(value.into_owned()),
            "region" => p.region = Some(value.into_owned()),
            "prefix" => p.prefix = Some(value.into_owned()),
            "per_page" => {
                let n: usize = number(&key, &value)?;
                p.per_page = (n > 0).then_some(n);
            }
            "next_token" => p.next_token = Some(value.into_owned()).filter(|t| !t.is_empty()),
            "filter" => p.filter = Some(value.into_owned()).filter(|f| !f.trim().is_empty()),
            "format" => p.format = Some(value.into_owned()),
            "topic" => p.topics.push(value.into_owned()),
            // What Nomad's clients send and the agent has no use for (`type=csi`,
            // `resources`, `task_states`, …): ignored, as Nomad ignores it.
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
        let p = parse(Some(
            "index=7&wait=1m30s&stale&pretty=true&per_page=2&next_token=n3&reverse=1&region=global",
        ))
        .unwrap();
        assert_eq!(p.index, 7);
        assert_eq!(p.wait, Some(Duration::from_secs(90)));
        assert!(p.stale && p.pretty && p.reverse);
        assert_eq!((p.per_page, p.next_token.as_deref()), (Some(2), Some("n3")));
        assert_eq!(p.region.as_deref(), Some("global"));
        // python-nomad sends booleans as Python spells them.
        assert!(!parse(Some("stale=False")).unwrap().stale);
        assert!(parse(Some("stale=True")).unwrap().stale);
    }

    #[test]
    fn unknown_parameters_are_ignored_and_bad_values_named() {
        assert_eq!(parse(Some("type=csi&idx=7")).unwrap(), Params::default());
        let e = parse(Some("index=-1")).unwrap_err();
        assert!(e.body.message.contains("index="), "{}", e.body.message);
        let e = parse(Some("wait=30")).unwrap_err();
        assert!(e.body.message.contains("wait="), "{}", e.body.message);
        let e = parse(Some("stale=maybe")).unwrap_err();
        assert!(e.body.message.contains("stale="), "{}", e.body.message);
        let e = parse(Some("per_page=many")).unwrap_err();
        assert!(e.body.message.contains("per_page="), "{}", e.body.message);
    }
}
