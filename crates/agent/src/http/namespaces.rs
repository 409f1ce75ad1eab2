//! Which namespace a request names. A list reads one namespace or, with `*`, every
//! one (`reads::namespace_of`); a request about one row — a read of one job or volume,
//! any write — names exactly one, so `*` there is a 400, in the query or in the
//! body, never a silent `default` nor a namespace literally named `*` (a job stored
//! there could be neither read nor stopped through the job API).

use super::error::ApiError;
use super::query::Params;

/// What names every namespace in a list.
const ALL: &str = "*";

/// The one namespace a request about one row names: `?namespace=`, `default` when
/// none (or an empty one) is named. `what` says what the request does ("a read of
/// one job"), for the message.
///
/// # Errors
/// `*` (400).
pub(super) fn one_namespace(p: &Params, what: &str) -> Result<String, ApiError> {
    match p.namespace.as_deref() {
        Some(ALL) => Err(every(what, "?namespace=*")),
        Some(ns) if !ns.is_empty() => Ok(ns.to_string()),
        _ => Ok("default".to_string()),
    }
}

/// The namespace a row in a write's body names, or, when it names none (`""`), the
/// request's one namespace.
///
/// # Errors
/// `*` in the body or in the query (400).
pub(super) fn body_namespace(named: &str, p: &Params, what: &str) -> Result<String, ApiError> {
    match named {
        ALL => Err(every(what, "\"Namespace\": \"*\"")),
        "" => one_namespace(p, what),
        ns => Ok(ns.to_string()),
    }
}

fn every(what: &str, said: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{said} names every namespace; {what} names one (leave it out for \"default\")"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(ns: Option<&str>) -> Params {
        Params {
            namespace: ns.map(str::to_string),
            ..Params::default()
        }
    }

    #[test]
    fn one_row_names_one_namespace() {
        assert_eq!(one_namespace(&params(None), "x").unwrap(), "default");
        assert_eq!(one_namespace(&params(Some("")), "x").unwrap(), "default");
        assert_eq!(one_namespace(&params(Some("ops")), "x").unwrap(), "ops");
        let e = one_namespace(&params(Some("*")), "a read of one job").unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert!(e.body.message.contains("a read of one job"), "{e:?}");
        assert_eq!(
            body_namespace("", &params(Some("ops")), "x").unwrap(),
            "ops"
        );
        assert_eq!(
            body_namespace("web", &params(Some("ops")), "x").unwrap(),
            "web"
        );
        let e = body_namespace("*", &params(None), "a job registration").unwrap_err();
        assert!(e.body.message.contains("\"Namespace\": \"*\""), "{e:?}");
        assert!(body_namespace("", &params(Some("*")), "x").is_err());
    }
}
