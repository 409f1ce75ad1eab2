//! `/v1/acl/…`: bootstrap the cluster's ACL once, create, list, read and revoke tokens
//! (management scope), and read the caller's own token.
//!
//! The server makes every secret and accessor id itself (122 random bits each; the
//! bootstrap secret may be given, as Nomad allows) and proposes only the secret's
//! digest, keyed with the cluster's ACL salt (the bootstrap makes the salt; a token
//! created in a cluster without one carries a new one, which salts the stored digests
//! too): the secret is in the one answer that created the token and nowhere else — not
//! in the log, the state, a snapshot, the event stream or a log line.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::model::{AclScope, AclToken};
use schedstate::state::Command;

use super::body::ClientBody;
use super::body::read_json;
use super::error::ApiError;
use super::idempotency::IdempotencyKey;
use super::query::Checked;
use super::reads::absent;
use super::writes::commit;
use super::{AppState, json, with_index};
use crate::api::{AclBootstrapRequest, AclTokenRequest, AclTokenView};
use crate::service::{Caller, Service, new_salt, new_uuid, unix_now};

/// The longest a token may be made to live: beyond it, make one without expiry.
const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

fn acl_off() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "AclDisabled",
        "ACL is off on this agent (--dev): there are no tokens",
    )
}

fn no_random(e: getrandom::Error) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        format!("the system's random generator failed: {e}"),
    )
}

fn new_id() -> Result<String, ApiError> {
    new_uuid().map_err(no_random)
}

/// What a newly made token answers: its view, with the secret this once.
fn created(st: &Service, index: u64, accessor: &str, secret: String, pretty: bool) -> Response {
    let stored = st.server.read_stale().view().acl_token(accessor);
    let Some(stored) = stored else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            "the token committed but is not applied here yet; read it back later",
        )
        .into_response();
    };
    let mut view = AclTokenView::of(&stored);
    view.secret_id = Some(secret);
    json(st, StatusCode::OK, index, &view, pretty)
}

/// `POST /v1/acl/bootstrap`: needs no token, works once per cluster.
/// Why the writes that make a secret take no `Idempotency-Key`: a replay could not
/// show the secret again (only its hash is kept).
const SECRET_ONCE: &str = "its answer holds a new secret, shown once; if the outcome is unknown, list the tokens before trying again";

pub(crate) async fn bootstrap(
    State(st): State<AppState>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    if !st.acl {
        return acl_off().into_response();
    }
    let request: AclBootstrapRequest = match read_json(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let secret = match request.bootstrap_secret {
        Some(s) => {
            let printable = s.bytes().all(|b| b.is_ascii_graphic());
            if !(16..=128).contains(&s.len()) || !printable {
                return ApiError::bad_request(
                    "BootstrapSecret must be 16 to 128 printable ASCII characters without spaces",
                )
                .into_response();
            }
            s
        }
        None => match new_id() {
            Ok(s) => s,
            Err(e) => return e.into_response(),
        },
    };
    let accessor = match new_id() {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let salt = match new_salt() {
        Ok(s) => s,
        Err(e) => return no_random(e).into_response(),
    };
    let mut token = AclToken::new(
        accessor.as_str(),
        "Bootstrap Token",
        vec![AclScope::Management],
        salt.digest(&secret),
    );
    token.create_time = unix_now();
    if let Err(e) = key.refuse(SECRET_ONCE) {
        return e.into_response();
    }
    let command = Command::AclBootstrap {
        token,
        salt: Some(salt),
    };
    match commit(&st, &key, command).await {
        Ok(index) => {
            tracing::info!(accessor = %accessor, index, "ACL bootstrapped");
            created(&st, index, &accessor, secret, p.pretty)
        }
        Err(e) => e.into_response(),
    }
}

/// The first whole second at which a token living `ttl` from now has expired:
/// rounded up, so a token never lives less than asked (at most a second more).
fn expires_after(ttl: Duration) -> u64 {
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        + ttl;
    end.as_secs() + u64::from(end.subsec_nanos() > 0)
}

/// `POST /v1/acl/token`: a new token (management).
pub(crate) async fn create(
    State(st): State<AppState>,
    Checked(p): Checked,
    key: IdempotencyKey,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    if !st.acl {
        return acl_off().into_response();
    }
    let request: AclTokenRequest = match read_json(&st, &headers, body).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let (scopes, ttl) = match (request.scopes(), request.ttl()) {
        (Ok(s), Ok(t)) => (s, t),
        (Err(e), _) | (_, Err(e)) => return ApiError::bad_request(e).into_response(),
    };
    if ttl.is_some_and(|t| t > MAX_TTL) {
        return ApiError::bad_request(format!(
            "ExpirationTTL over {} days: make a token without expiry instead",
            MAX_TTL.as_secs() / 86_400
        ))
        .into_response();
    }
    let (secret, accessor) = match (new_id(), new_id()) {
        (Ok(s), Ok(a)) => (s, a),
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    let now = unix_now();
    let mut token = AclToken::new(accessor.as_str(), request.name, scopes, String::new());
    token.create_time = now;
    token.expiration_time = ttl.map(expires_after);
    if let Err(e) = key.refuse(SECRET_ONCE) {
        return e.into_response();
    }
    // The digest is keyed with the cluster's salt as this server knows it (a new one
    // when it has none: the command sets it). A salt set meanwhile elsewhere refuses
    // the write (`AclSaltMismatch`); it is made again once the salt is here.
    let mut attempt = 0;
    let index = loop {
        attempt += 1;
        let salt = match st.server.read_stale().view().acl_salt() {
            Some(s) => s,
            None => match new_salt() {
                Ok(s) => s,
                Err(e) => return no_random(e).into_response(),
            },
        };
        token.secret_hash = salt.digest(&secret);
        let command = Command::CreateAclTokens {
            tokens: vec![token.clone()],
            salt: Some(salt),
        };
        match commit(&st, &key, command).await {
            Ok(index) => break index,
            Err(e) if e.body.kind == "AclSaltMismatch" && attempt < 5 => {
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            Err(e) => return e.into_response(),
        }
    };
    tracing::info!(accessor = %accessor, index, "ACL token created");
    created(&st, index, &accessor, secret, p.pretty)
}

/// `GET /v1/acl/tokens`: every token, without secrets (management).
pub(crate) async fn list(State(st): State<AppState>, Checked(p): Checked) -> Response {
    if !st.acl {
        return acl_off().into_response();
    }
    let snapshot = st.server.read_stale();
    let view = snapshot.view();
    let tokens: Vec<AclTokenView> = view.acl_tokens().map(|t| AclTokenView::of(&t)).collect();
    let index = view.table_index(schedstate::Table::AclTokens);
    json(&st, StatusCode::OK, index, &tokens, p.pretty)
}

/// `GET /v1/acl/token/{accessor}` (management).
pub(crate) async fn read(
    State(st): State<AppState>,
    Path(accessor): Path<String>,
    Checked(p): Checked,
) -> Response {
    if !st.acl {
        return acl_off().into_response();
    }
    let snapshot = st.server.read_stale();
    match snapshot.view().acl_token(&accessor) {
        Some(t) => json(
            &st,
            StatusCode::OK,
            t.modify_index,
            &AclTokenView::of(&t),
            p.pretty,
        ),
        None => {
            let mut resp =
                ApiError::not_found("AclTokenNotFound", format!("no ACL token {accessor:?}"))
                    .into_response();
            // As every read of a missing row: the index of its table's last delete.
            let index = absent(&snapshot.view(), schedstate::Table::AclTokens);
            with_index(&st, &mut resp, index);
            resp
        }
    }
}

/// `GET /v1/acl/token/self`: the caller's own token (any valid token).
pub(crate) async fn own(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Checked(p): Checked,
) -> Response {
    match caller.token {
        Some(t) => json(
            &st,
            StatusCode::OK,
            t.modify_index,
            &AclTokenView::of(&t),
            p.pretty,
        ),
        None => acl_off().into_response(),
    }
}

/// `DELETE /v1/acl/token/{accessor}`: revoke (management).
pub(crate) async fn revoke(
    State(st): State<AppState>,
    Path(accessor): Path<String>,
    Checked(p): Checked,
    key: IdempotencyKey,
) -> Response {
    if !st.acl {
        return acl_off().into_response();
    }
    let command = Command::DeleteAclTokens {
        accessor_ids: vec![accessor.as_str().into()],
    };
    match commit(&st, &key, command).await {
        Ok(index) => {
            tracing::info!(accessor = %accessor, index, "ACL token revoked");
            json(
                &st,
                StatusCode::OK,
                index,
                &crate::api::WriteResponse { index },
                p.pretty,
            )
        }
        Err(e) => e.into_response(),
    }
}
