//! `GET /ui/`: the web UI's files over HTTP, with ACL on — served without a token (they
//! hold no data), with their types and security headers, and refused to browsers of
//! other sites and to DNS rebinding like every API route. (The page itself is tested
//! in a real browser: `crates/server/tests/server/ui.rs`.)

use crate::support::{Agents, http};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_files_need_no_token_carry_a_strict_policy_and_keep_the_guard() {
    let agents = Agents::start(1, Some("ui-root-secret-of-the-api-test")).await;
    let http = http();
    for (path, kind) in [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
    ] {
        // A browser opening the page, then its module scripts (same origin).
        let resp = http
            .get(agents.url(0, path))
            .header("sec-fetch-site", "none")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let h = resp.headers();
        assert_eq!(h["content-type"], kind, "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        for part in [
            "default-src 'self'",
            "script-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ] {
            assert!(csp.contains(part), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
        assert_eq!(h["cache-control"], "no-cache");
        // Asked again with its validator: 304, no body.
        let etag = h["etag"].clone();
        let again = http
            .get(agents.url(0, path))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status().as_u16(), 304, "{path}");
    }
    // `/ui` leads to `/ui/`; an unknown file is 404.
    let bare = http.get(agents.url(0, "/ui")).send().await.unwrap();
    assert_eq!(bare.status().as_u16(), 200, "followed to /ui/");
    assert_eq!(bare.url().path(), "/ui/");
    let missing = http.get(agents.url(0, "/ui/x.js")).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    // The guard: another site's page, or a name pointed at the agent.
    let port = agents.url(0, "").rsplit(':').next().unwrap().to_string();
    for (what, headers) in [
        (
            "another site",
            vec![("sec-fetch-site", "cross-site".to_string())],
        ),
        (
            "DNS rebinding",
            vec![
                ("host", format!("evil.example:{port}")),
                ("sec-fetch-site", "none".to_string()),
            ],
        ),
    ] {
        let mut req = http.get(agents.url(0, "/ui/"));
        for (k, v) in &headers {
            req = req.header(*k, v);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 403, "{what}");
        let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!(body["kind"], "CrossOrigin", "{what}");
    }
    // The page's data still needs the token.
    let plugins = http.get(agents.url(0, "/v1/plugins")).send().await.unwrap();
    assert_eq!(plugins.status().as_u16(), 401);
    agents.shutdown().await;
}
