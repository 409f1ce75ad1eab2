//! Who may call, checked in front of every API route (the Raft route checks the
//! cluster key itself, see `raft_rpc.rs`):
//!
//! - a server whose Raft stopped for good refuses everything (503 `Stopped`): it must
//!   not look alive to a load balancer or a client;
//! - a request a web browser sends for a page of another site — or for a site whose
//!   name was pointed at this server (DNS rebinding) — is refused (403
//!   `CrossOrigin`): browsers mark their requests with `Origin` or `Sec-Fetch-Site`,
//!   other clients send neither, so scripts and libraries are not affected;
//! - with `--token`, a request without `Authorization: Bearer <token>` is 401, with
//!   another token 403. The comparison is on SHA-256 digests in constant time, so
//!   neither the token nor its length leaks through timing.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;

pub(crate) async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(why) = st.fatal.get() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Stopped",
            format!("this server's Raft stopped ({why}); it must be restarted"),
        )
        .into_response();
    }
    if let Err(e) = same_origin(req.headers()) {
        return e.into_response();
    }
    if let Some(expected) = &st.token
        && let Err(e) = check_token(req.headers(), expected)
    {
        return e.into_response();
    }
    next.run(req).await
}

/// The token a request carries: `Authorization: Bearer <t>` (the scheme in any case,
/// as RFC 9110 says) or Nomad's `X-Nomad-Token: <t>`.
pub(crate) fn given_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let (scheme, rest) = v.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| rest.trim_start());
    }
    headers.get("X-Nomad-Token").and_then(|v| v.to_str().ok())
}

fn check_token(headers: &HeaderMap, expected: &str) -> Result<(), ApiError> {
    let Some(given) = given_token(headers) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "this agent needs a token: send Authorization: Bearer <token>",
        ));
    };
    let (g, e) = (Sha256::digest(given), Sha256::digest(expected));
    if bool::from(g.ct_eq(&e)) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "the token is not this agent's",
        ))
    }
}

/// Whether `host` (a Host header or an Origin's authority) names this machine by
/// address or as `localhost`, not by a DNS name an attacker may control.
fn is_address_or_localhost(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        // `[::1]:4646`, `127.0.0.1:4646`, `localhost:4646`
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

fn cross_origin(why: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "CrossOrigin", why)
}

fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let fetch_site = headers.get("Sec-Fetch-Site").and_then(|v| v.to_str().ok());
    if origin.is_none() && fetch_site.is_none() {
        return Ok(()); // not a browser
    }
    if let Some(site) = fetch_site
        && site != "same-origin"
        && site != "none"
    {
        return Err(cross_origin(format!(
            "a browser request from another site (Sec-Fetch-Site: {site}) is refused"
        )));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !is_address_or_localhost(host) {
        return Err(cross_origin(format!(
            "a browser request for {host:?} is refused: open the agent by its address"
        )));
    }
    if let Some(origin) = origin {
        let authority = origin.split_once("://").map_or("", |(_, a)| a);
        if !authority.eq_ignore_ascii_case(host) {
            return Err(cross_origin(format!(
                "a browser request from {origin:?} is refused"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn tokens_are_read_from_either_header_in_any_case_of_the_scheme() {
        for (k, v) in [
            ("authorization", "Bearer s3"),
            ("authorization", "bearer s3"),
            ("authorization", "BEARER  s3"),
            ("x-nomad-token", "s3"),
        ] {
            assert_eq!(given_token(&headers(&[(k, v)])), Some("s3"), "{k}: {v}");
        }
        assert_eq!(
            given_token(&headers(&[("authorization", "Basic s3")])),
            None
        );
        assert!(check_token(&headers(&[("authorization", "Bearer s3")]), "s3").is_ok());
        assert_eq!(
            check_token(&headers(&[("authorization", "Bearer s")]), "s3")
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            check_token(&headers(&[]), "s3").unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn browsers_are_held_to_the_same_origin_and_an_address() {
        assert!(same_origin(&headers(&[("host", "evil.example:4646")])).is_ok());
        assert!(
            same_origin(&headers(&[
                ("host", "127.0.0.1:4646"),
                ("origin", "http://127.0.0.1:4646")
            ]))
            .is_ok()
        );
        for bad in [
            vec![
                ("host", "127.0.0.1:4646"),
                ("origin", "http://evil.example"),
            ],
            vec![
                ("host", "evil.example:4646"),
                ("origin", "http://evil.example:4646"),
            ],
            vec![
                ("host", "evil.example:4646"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![("host", "127.0.0.1:4646"), ("sec-fetch-site", "cross-site")],
        ] {
            let e = same_origin(&headers(&bad)).unwrap_err();
            assert_eq!(e.body.kind, "CrossOrigin", "{bad:?}");
        }
        assert!(is_address_or_localhost("[::1]:4646"));
        assert!(is_address_or_localhost("localhost"));
        assert!(!is_address_or_localhost("127.0.0.1.evil.example"));
    }
}
