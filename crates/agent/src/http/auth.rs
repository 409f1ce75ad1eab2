//! Who may call, as layers in front of the API routes (the Raft route checks the
//! cluster key itself, see `raft_rpc.rs`):
//!
//! - [`guard`], on every API route: a server whose Raft stopped for good refuses
//!   everything (503 `Stopped`): it must not look alive to a load balancer or a
//!   client; a request a web browser sends for a page of another site — or for a site
//!   whose name was pointed at this server (DNS rebinding) — is refused (403
//!   `CrossOrigin`): browsers mark their requests with `Origin` or `Sec-Fetch-Site`,
//!   other clients send neither, so scripts and libraries are not affected;
//!   A request naming another region than the agent's is refused (400
//!   `NoPathToRegion`), as Nomad refuses a region it has no path to;
//! - [`require`], per group of routes: the ACL token the request carries
//!   (`X-Schedstate-Token`, `X-Nomad-Token` or `Authorization: Bearer`, the scheme in
//!   any case) must be valid and hold the group's scope — 401 without one, 403 with
//!   one no server knows (`UnknownToken`: Nomad's "ACL token not found" is a 403,
//!   which python-nomad and the Go client report as a permission error) or with the
//!   wrong scope ([`Service::authorize`]); `GET /v1/acl/token/self` with a token no
//!   server knows is 404, as in Nomad (the token asked about is not found). The
//!   caller is left in the request's extensions for the handlers that need it.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use schedstate::model::AclScope;

use super::error::ApiError;
use super::{AppState, Connection};
use crate::api::TOKEN_HEADER;
use crate::service::{AuthError, ClientKeys};

pub(crate) async fn guard(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
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
    if let Some(region) = asked_region(req.uri().query())
        && region != st.region
    {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "NoPathToRegion",
            format!(
                "No path to region {region:?}: this cluster serves {:?}",
                st.region
            ),
        )
        .into_response();
    }
    // Who the request counts against, by address until a token is checked.
    let keys = ClientKeys::new(peer_of(&req), None);
    req.extensions_mut().insert(keys);
    next.run(req).await
}

/// The address of the request's client (unspecified for a request that came through
/// no connection of ours: the router driven directly).
fn peer_of(req: &Request) -> std::net::IpAddr {
    req.extensions()
        .get::<Connection>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |c| c.peer)
}

/// The `region=` a request names, if any (empty: none, as Nomad's clients send it
/// unconfigured).
fn asked_region(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, v)| k == "region" && !v.is_empty())
        .map(|(_, v)| v.into_owned())
}

/// What a group of routes needs: a valid token with a scope, or any valid token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// A token holding the scope.
    Scope(AclScope),
    /// Any valid token (`/v1/acl/token/self`).
    AnyToken,
}

/// The layer of a group of routes: `from_fn_with_state((st, need), require)`.
pub(crate) async fn require(
    State((st, need)): State<(AppState, Need)>,
    mut req: Request,
    next: Next,
) -> Response {
    let scope = match need {
        Need::Scope(s) => Some(s),
        Need::AnyToken => None,
    };
    match st.authorize(given_token(req.headers()), scope) {
        Ok(caller) => {
            let accessor = caller.token.as_ref().map(|t| t.accessor_id.to_string());
            let keys = ClientKeys::new(peer_of(&req), accessor.as_deref());
            req.extensions_mut().insert(keys);
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => {
            st.metrics.requests_unauthorized.inc();
            let unknown = matches!(e, AuthError::Unknown);
            let mut e = ApiError::from(e);
            // `self` reads the token the request presents: one no server knows is
            // not found, as Nomad answers it.
            if unknown && need == Need::AnyToken {
                e.status = StatusCode::NOT_FOUND;
            }
            e.into_response()
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        let status = match e {
            // Nomad's status for both (`command/agent/http.go`): a client of Nomad
            // treats them as permission errors; the kind tells them apart.
            AuthError::Denied { .. } | AuthError::Unknown => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        };
        ApiError::new(status, e.kind(), e.to_string())
    }
}

/// The token a request carries: `X-Schedstate-Token`, Nomad's `X-Nomad-Token`, or
/// `Authorization: Bearer <t>` (the scheme in any case, as RFC 9110 says), first
/// found in that order.
pub(crate) fn given_token(headers: &HeaderMap) -> Option<&str> {
    for name in [TOKEN_HEADER, "X-Nomad-Token"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            return Some(v.trim());
        }
    }
    let v = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())?;
    let (scheme, rest) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
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
    fn tokens_are_read_from_any_of_the_three_headers_in_any_case_of_the_scheme() {
        for (k, v) in [
            ("authorization", "Bearer s3"),
            ("authorization", "bearer s3"),
            ("authorization", "BEARER  s3"),
            ("x-nomad-token", "s3"),
            ("x-schedstate-token", "s3"),
        ] {
            assert_eq!(given_token(&headers(&[(k, v)])), Some("s3"), "{k}: {v}");
        }
        assert_eq!(
            given_token(&headers(&[("authorization", "Basic s3")])),
            None
        );
        assert_eq!(given_token(&headers(&[])), None);
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
