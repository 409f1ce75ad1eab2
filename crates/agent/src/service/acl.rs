//! Who is calling: a request's secret resolved to an ACL token of the replicated
//! state, and whether that token may act in a scope.
//!
//! A secret is never compared as text: the server computes the digest of what the
//! request carries — `HMAC-SHA256(cluster salt, SHA-256(secret))`, or the bare SHA-256
//! in a state with no salt yet (`schedstate::model::acl` says why a salt and not a
//! slow hash) — and looks it up in the tokens' unique index, so timing can tell an
//! attacker at most something about a digest, never about a secret or its length; the
//! digest found is then compared again in constant time. Tokens are checked against
//! this server's copy of the state, so a revocation applies on each server as soon as
//! it applied the log entry (a heartbeat later on a follower).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use schedstate::model::{AclSalt, AclScope, AclToken};
use schedstate::state::Command;
use schedstate_raft::{ProposeError, Server};
use subtle::ConstantTimeEq;

use super::Service;
use crate::cluster_key::hex;

/// Why a request is not let through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthError {
    /// No token was sent.
    #[error(
        "this agent needs a token: send X-Nomad-Token, X-Schedstate-Token or Authorization: Bearer"
    )]
    Missing,
    /// The cluster has no token yet.
    #[error(
        "the cluster's ACL is not bootstrapped: run `schedstate acl bootstrap` (POST /v1/acl/bootstrap) once"
    )]
    NotBootstrapped,
    /// The secret is no token's.
    #[error(
        "ACL token not found: the token is not known to this server (revoked, mistyped, or not replicated here yet)"
    )]
    Unknown,
    /// The token expired.
    #[error("the token {accessor} expired")]
    Expired {
        /// Its accessor id (not a secret).
        accessor: String,
    },
    /// The token lacks the scope.
    #[error("the token {accessor} may not do this: it needs the {needed} scope")]
    Denied {
        /// Its accessor id.
        accessor: String,
        /// The scope the route needs.
        needed: AclScope,
    },
}

impl AuthError {
    /// The error's stable kind in the API.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            AuthError::Missing => "Unauthorized",
            AuthError::NotBootstrapped => "AclNotBootstrapped",
            AuthError::Unknown => "UnknownToken",
            AuthError::Expired { .. } => "TokenExpired",
            AuthError::Denied { .. } => "PermissionDenied",
        }
    }
}

/// The caller of a request that passed: its token, or none when ACL is off.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The token (ACL on), `None` with ACL off (`--dev`).
    pub token: Option<Arc<AclToken>>,
}

/// A new cluster ACL salt: 32 bytes from the operating system's generator.
pub(crate) fn new_salt() -> Result<AclSalt, getrandom::Error> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b)?;
    Ok(AclSalt(b))
}

/// Salts the digests of a state bootstrapped before salts existed (format 1 or 2):
/// proposes `SetAclSalt` with a new salt if this server's state has tokens and no
/// salt. Run by a server when it becomes the leader; a salt set meanwhile by another
/// makes the proposal a refused no-op (`AclAlreadySalted`), which is fine.
pub(crate) async fn salt_if_unsalted(server: Server) {
    // What this leader's log holds applied first: a salt set in an entry it has not
    // applied yet would make the proposal a refused no-op entry.
    let last = server.raft().metrics().borrow().last_log_index.unwrap_or(0);
    let _ = server
        .wait_applied(last, std::time::Duration::from_secs(10))
        .await;
    let unsalted = {
        let snap = server.read_stale();
        let v = snap.view();
        v.acl_bootstrapped() && v.acl_salt().is_none()
    };
    if !unsalted {
        return;
    }
    let salt = match new_salt() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "could not make an ACL salt; token digests stay unsalted");
            return;
        }
    };
    // While a rolling upgrade holds the cluster at format 2 the salt waits: asked
    // again until every server reads format 3, for as long as this server leads.
    let mut told = false;
    loop {
        match server.propose(Command::SetAclSalt { salt }).await {
            Ok(c) => tracing::info!(index = c.index, "ACL token digests salted"),
            Err(ProposeError::Refused { error, .. }) => {
                tracing::debug!(%error, "ACL salt not set here")
            }
            Err(ProposeError::Invalid { kind, message })
                if kind == schedstate_raft::FORMAT_NOT_ENABLED && server.is_leader() =>
            {
                if !told {
                    tracing::info!("ACL token digests stay unsalted for now: {message}");
                    told = true;
                }
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                continue;
            }
            Err(e) => tracing::info!(error = %e, "could not salt ACL token digests yet"),
        }
        return;
    }
}

/// A new random identifier in the UUID v4 form (122 random bits): a secret or an
/// accessor id.
pub(crate) fn new_uuid() -> Result<String, getrandom::Error> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = hex(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// Seconds since the Unix epoch by this machine's clock.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Service {
    /// The caller of a request carrying `secret`, if it may act in `scope` (`None`:
    /// any valid token will do).
    ///
    /// # Errors
    /// [`AuthError`]: no token, not bootstrapped, unknown, expired, lacking the scope.
    pub(crate) fn authorize(
        &self,
        secret: Option<&str>,
        scope: Option<AclScope>,
    ) -> Result<Caller, AuthError> {
        if !self.acl {
            return Ok(Caller { token: None });
        }
        let snapshot = self.server.read_stale();
        let view = snapshot.view();
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            return Err(if view.acl_bootstrapped() {
                AuthError::Missing
            } else {
                AuthError::NotBootstrapped
            });
        };
        let hash = view.acl_digest_of(secret);
        let token = view
            .acl_token_by_secret_hash(&hash)
            .filter(|t| bool::from(t.secret_hash.as_bytes().ct_eq(hash.as_bytes())));
        let Some(token) = token else {
            return Err(if view.acl_bootstrapped() {
                AuthError::Unknown
            } else {
                AuthError::NotBootstrapped
            });
        };
        if token.expired_at(unix_now()) {
            return Err(AuthError::Expired {
                accessor: token.accessor_id.to_string(),
            });
        }
        if let Some(needed) = scope
            && !token.allows(needed)
        {
            return Err(AuthError::Denied {
                accessor: token.accessor_id.to_string(),
                needed,
            });
        }
        Ok(Caller { token: Some(token) })
    }

    /// Whether a caller let in earlier still may call: its token not revoked (nor
    /// replaced), not expired, and still holding `scope` (a token's scopes may be
    /// updated). What a long-lived request (the event stream) checks as it goes on.
    ///
    /// # Errors
    /// [`AuthError::Unknown`] revoked, [`AuthError::Expired`],
    /// [`AuthError::Denied`] no longer in the scope.
    pub(crate) fn still_valid(&self, caller: &Caller, scope: AclScope) -> Result<(), AuthError> {
        let Some(token) = &caller.token else {
            return Ok(());
        };
        let current = self
            .server
            .read_stale()
            .view()
            .acl_token(&token.accessor_id);
        // The same row by its create index: a salt set meanwhile re-keyed the digest,
        // which changes no token (a revoked and re-made accessor id would differ).
        match current {
            Some(t) if t.create_index == token.create_index => {
                if t.expired_at(unix_now()) {
                    Err(AuthError::Expired {
                        accessor: t.accessor_id.to_string(),
                    })
                } else if !t.allows(scope) {
                    Err(AuthError::Denied {
                        accessor: t.accessor_id.to_string(),
                        needed: scope,
                    })
                } else {
                    Ok(())
                }
            }
            _ => Err(AuthError::Unknown),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_are_random_and_uuids_are_v4() {
        assert_ne!(new_salt().unwrap(), new_salt().unwrap());
        let u = new_uuid().unwrap();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(u, new_uuid().unwrap());
    }
}
