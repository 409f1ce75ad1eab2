//! `GET /ui/` and `GET /ui/<asset>`: the read-only web UI (issue 53). Its files —
//! plain HTML, CSS and JavaScript modules under `crates/agent/ui/`, no build step —
//! are compiled into the binary; nothing is fetched at run time. They hold no data
//! and need no token: every data call the page makes goes to this agent's public API
//! with the token the user types, in `X-Nomad-Token`.
//!
//! Every answer carries a strict Content-Security-Policy (only this origin's scripts,
//! styles and connections; no inline script or style, no `eval`, no framing, no form
//! submissions), `X-Content-Type-Options: nosniff` and `Referrer-Policy:
//! no-referrer`. The router puts these routes behind the same guard as the API
//! (cross-site requests and DNS rebinding are refused).

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::error::ApiError;

/// The policy of every UI answer: this origin only, no inline code, no framing.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// One compiled-in file: its name under `/ui/`, content type and bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../../ui/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the UI.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("views.js", JS),
    asset!("storage.js", JS),
    asset!("favicon.svg", "image/svg+xml"),
];

/// `GET /ui`: to `/ui/`, so that the page's relative links resolve under it.
pub(crate) async fn redirect() -> Response {
    secured(Redirect::permanent("/ui/").into_response(), false)
}

/// `GET /ui/`: the page.
pub(crate) async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /ui/<asset>`.
pub(crate) async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    serve(&name, &headers)
}

fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(a) = ASSETS.iter().find(|a| a.name == name) else {
        let e = ApiError::new(
            StatusCode::NOT_FOUND,
            "NoSuchPath",
            format!("no file /ui/{name}"),
        );
        return secured(e.into_response(), false);
    };
    // `no-cache`: the browser keeps a file but asks each time whether it changed (a
    // new binary brings new files); the same file is a 304 without a body.
    let etag = format!("\"{}-{:016x}\"", env!("CARGO_PKG_VERSION"), fnv1a(a.body));
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            )],
            a.body,
        )
            .into_response()
    };
    if let Ok(v) = HeaderValue::from_str(&etag) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    secured(resp, true)
}

/// FNV-1a, 64 bits: a file's validator (not a security measure).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Adds the security headers (and, for a file, its cache policy).
fn secured(mut resp: Response, cacheable: bool) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if cacheable { "no-cache" } else { "no-store" }),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_found_by_its_name_and_has_a_type() {
        let none = HeaderMap::new();
        for a in ASSETS {
            let r = serve(a.name, &none);
            assert_eq!(r.status(), StatusCode::OK, "{}", a.name);
            assert_eq!(r.headers()[header::CONTENT_TYPE], a.content_type);
            assert!(
                r.headers()[header::CONTENT_SECURITY_POLICY]
                    .to_str()
                    .unwrap()
                    .contains("script-src 'self'")
            );
            assert!(!a.body.is_empty(), "{}", a.name);
            // Asked again with its validator: not modified.
            let mut again = HeaderMap::new();
            again.insert(header::IF_NONE_MATCH, r.headers()[header::ETAG].clone());
            assert_eq!(serve(a.name, &again).status(), StatusCode::NOT_MODIFIED);
        }
        assert_eq!(
            serve("../Cargo.toml", &none).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(serve("nope.js", &none).status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn no_asset_holds_inline_code_or_eval() {
        let page = std::str::from_utf8(ASSETS[0].body).expect("utf-8");
        assert!(!page.contains("<style"), "inline style");
        assert!(!page.contains("style="), "inline style attribute");
        for line in page.lines().filter(|l| l.contains("<script")) {
            assert!(line.contains("src="), "inline script: {line}");
        }
        // No inline event handler (` onclick=` and the like).
        for (i, _) in page.match_indices(" on") {
            let rest = &page[i + 3..];
            let name_len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
            assert!(
                name_len == 0 || !rest[name_len..].starts_with('='),
                "an inline event handler at {i}"
            );
        }
        for a in ASSETS.iter().filter(|a| a.content_type == JS) {
            let text = std::str::from_utf8(a.body).expect("utf-8");
            for bad in ["eval(", "new Function", "innerHTML", "localStorage"] {
                assert!(!text.contains(bad), "{} uses {bad}", a.name);
            }
        }
    }
}
