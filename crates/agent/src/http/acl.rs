//! `/v1/acl/…`: bootstrap the cluster's ACL once, create, list, read, update and
//! revoke tokens (management scope), and read the caller's own token — in Nomad's
//! shapes (`ACLToken`, `ACLTokenListStub`; see [`crate::api::AclTokenView`]), on
//! Nomad's paths, `PUT` and `POST` alike.
//!
//! The server makes every secret and accessor id itself (122 random bits each; the
//! bootstrap secret may be given, as Nomad allows) and proposes only the secret's
//! digest, keyed with the cluster's ACL salt (the bootstrap makes the salt; a token
//! created in a cluster without one carries a new one, which salts the stored digests
//! too): the secret is in the one answer that created the token and nowhere else — not
//! in the log, the state, a snapshot, the event stream or a log line. `GET
//! /v1/acl/token/self` answers back the secret its caller presented (Nomad shows it
//! there); a read by accessor, a list or an update never shows one (`SecretID: ""`).

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schedstate::model::{AclScope, AclToken, unsalted_digest};
use schedstate::state::Command;
use schedstate_raft::FORMAT_NOT_ENABLED;

use super::auth::given_token;
use super::body::ClientBody;
use super::body::read_json;
use super::error::ApiError;
use super::idempotency::IdempotencyKey;
use super::query::Checked;
use super::reads::absent;
use super::writes::commit;
use super::{AppState, json, with_index};
use crate::api::{
    AclBootstrapRequest, AclTokenListStub, AclTokenRequest, AclTokenView, TokenRequestError,
};
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
        token: token.clone(),
        salt: Some(salt),
    };
    let committed = match commit(&st, &key, command).await {
        // A rolling upgrade under way: a server of the previous release keeps
        // digests unsalted, so this one is too (re-keyed once a salt is set).
        Err(e) if e.body.kind == FORMAT_NOT_ENABLED => {
            token.secret_hash = unsalted_digest(&secret);
            commit(&st, &key, Command::AclBootstrap { token, salt: None }).await
        }
        other => other,
    };
    match committed {
        Ok(index) => {
            tracing::info!(accessor = %accessor, index, "ACL bootstrapped");
            created(&st, index, &accessor, secret, p.pretty)
        }
        Err(e) => e.into_response(),
    }
}

/// Whole seconds, rounded up.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A new token's create time: now, rounded up to the second, so that its expiry
/// (that second plus the TTL, rounded up) is never sooner than asked and the TTL it
/// answers is the one asked (to the second).
fn create_time_now() -> u64 {
    ceil_secs(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

impl From<TokenRequestError> for ApiError {
    fn from(e: TokenRequestError) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, e.kind, e.message)
    }
}

/// The expiry a create asks for, in seconds since the epoch: `ExpirationTTL` from
/// now, else `ExpirationTime`; within [`MAX_TTL`] of now, and in the future.
fn asked_expiry(request: &AclTokenRequest, now: u64) -> Result<Option<u64>, ApiError> {
    let too_far = || {
        ApiError::bad_request(format!(
            "an expiry over {} days away: make a token without expiry instead",
            MAX_TTL.as_secs() / 86_400
        ))
    };
    if let Some(ttl) = request.ttl()? {
        if ttl > MAX_TTL {
            return Err(too_far());
        }
        return Ok(Some(now + ceil_secs(ttl)));
    }
    let Some(at) = request.expiration_secs()? else {
        return Ok(None);
    };
    if at <= now {
        return Err(ApiError::bad_request("ExpirationTime is not in the future"));
    }
    if at - now > MAX_TTL.as_secs() {
        return Err(too_far());
    }
    Ok(Some(at))
}

/// `POST`/`PUT /v1/acl/token`: a new token (management) — or, with an
/// `AccessorID`, an update of that token, as Nomad takes it.
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
    if !request.accessor_id.is_empty() {
        let accessor = request.accessor_id.clone();
        return update_token(&st, &key, &accessor, &request, p.pretty).await;
    }
    if !request.secret_id.is_empty() {
        return ApiError::bad_request(
            "SecretID must be empty: the server makes every secret (the bootstrap token's may be chosen)",
        )
        .into_response();
    }
    let scopes = match request.scopes() {
        Ok(s) => s,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let now = create_time_now();
    let expiry = match asked_expiry(&request, now) {
        Ok(e) => e,
        Err(e) => return e.into_response(),
    };
    let (secret, accessor) = match (new_id(), new_id()) {
        (Ok(s), Ok(a)) => (s, a),
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    let mut token = AclToken::new(accessor.as_str(), request.name, scopes, String::new());
    token.create_time = now;
    token.expiration_time = expiry;
    if let Err(e) = key.refuse(SECRET_ONCE) {
        return e.into_response();
    }
    // The digest is keyed with the cluster's salt as this server knows it (a new one
    // when it has none: the command sets it). A salt set meanwhile elsewhere refuses
    // the write (`AclSaltMismatch`); it is made again once the salt is here.
    let mut attempt = 0;
    // Unsalted while a rolling upgrade keeps the cluster at format 2.
    let mut unsalted = false;
    let index = loop {
        attempt += 1;
        let salt = match st.server.read_stale().view().acl_salt() {
            Some(s) => Some(s),
            None if unsalted => None,
            None => match new_salt() {
                Ok(s) => Some(s),
                Err(e) => return no_random(e).into_response(),
            },
        };
        token.secret_hash = match &salt {
            Some(salt) => salt.digest(&secret),
            None => unsalted_digest(&secret),
        };
        let command = Command::CreateAclTokens {
            tokens: vec![token.clone()],
            salt,
        };
        match commit(&st, &key, command).await {
            Ok(index) => break index,
            Err(e) if e.body.kind == FORMAT_NOT_ENABLED && !unsalted => unsalted = true,
            Err(e) if e.body.kind == "AclSaltMismatch" && attempt < 5 => {
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            Err(e) => return e.into_response(),
        }
    };
    tracing::info!(accessor = %accessor, index, "ACL token created");
    created(&st, index, &accessor, secret, p.pretty)
}

/// `POST`/`PUT /v1/acl/token/{accessor}`: a token's new name and rights
/// (management), Nomad's update. Its secret and expiry stay: a body may send them
/// back as they are (Go's client sends what it read), not change them.
pub(crate) async fn update(
    State(st): State<AppState>,
    Path(accessor): Path<String>,
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
    if !request.accessor_id.is_empty() && request.accessor_id != accessor {
        return ApiError::bad_request(format!(
            "the body's AccessorID {:?} does not match the path's {accessor:?}",
            request.accessor_id
        ))
        .into_response();
    }
    update_token(&st, &key, &accessor, &request, p.pretty).await
}

async fn update_token(
    st: &AppState,
    key: &IdempotencyKey,
    accessor: &str,
    request: &AclTokenRequest,
    pretty: bool,
) -> Response {
    let scopes = match request.scopes() {
        Ok(s) => s,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let Some(stored) = st.server.read_stale().view().acl_token(accessor) else {
        return ApiError::not_found("AclTokenNotFound", format!("no ACL token {accessor:?}"))
            .into_response();
    };
    if !request.secret_id.is_empty()
        && st
            .server
            .read_stale()
            .view()
            .acl_digest_of(&request.secret_id)
            != stored.secret_hash
    {
        return ApiError::bad_request(
            "a token's SecretID cannot be changed: make a new token and revoke this one",
        )
        .into_response();
    }
    let ttl = match request.ttl() {
        Ok(t) => t.map_or(0, |t| t.as_nanos()),
        Err(e) => return ApiError::from(e).into_response(),
    };
    let at = match request.expiration_secs() {
        Ok(a) => a,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let kept_ttl = ttl == 0 || ttl == u128::from(crate::api::acl_ttl_nanos(&stored));
    let kept_time = at.is_none() || at == stored.expiration_time;
    if !kept_ttl || !kept_time {
        return ApiError::bad_request(
            "a token's expiry cannot be changed: make a new token and revoke this one",
        )
        .into_response();
    }
    let command = Command::UpdateAclToken {
        accessor_id: accessor.into(),
        name: request.name.clone(),
        scopes,
    };
    match commit(st, key, command).await {
        Ok(index) => {
            tracing::info!(accessor = %accessor, index, "ACL token updated");
            match st.server.read_stale().view().acl_token(accessor) {
                Some(t) => json(st, StatusCode::OK, index, &AclTokenView::of(&t), pretty),
                None => ApiError::not_found(
                    "AclTokenNotFound",
                    format!("the token {accessor:?} was revoked since"),
                )
                .into_response(),
            }
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/acl/tokens`: every token, without secrets (management).
pub(crate) async fn list(State(st): State<AppState>, Checked(p): Checked) -> Response {
    if !st.acl {
        return acl_off().into_response();
    }
    let snapshot = st.server.read_stale();
    let view = snapshot.view();
    let tokens: Vec<AclTokenListStub> = view
        .acl_tokens()
        .map(|t| AclTokenListStub::of(&t))
        .collect();
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

/// `GET /v1/acl/token/self`: the caller's own token (any valid token), with the
/// secret it presented, as Nomad answers it.
pub(crate) async fn own(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Checked(p): Checked,
    headers: HeaderMap,
) -> Response {
    match caller.token {
        Some(t) => {
            let mut view = AclTokenView::of(&t);
            view.secret_id = given_token(&headers).map(str::to_string);
            json(&st, StatusCode::OK, t.modify_index, &view, p.pretty)
        }
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
