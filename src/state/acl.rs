//! ACL token writes and reads (docs/rules.md §10).
//!
//! - Bootstrap makes the first token, once: it is refused as soon as the tokens table
//!   has ever been written (its table index is above 0), whatever was deleted since.
//! - Created tokens are new rows: an accessor id or a secret hash already used is
//!   refused.
//! - An update changes a token's name and scopes only (its secret, times and create
//!   index stay; a new token and a revocation rotate a secret); it sets
//!   `modify_index`, and an update to what the token has stores nothing.
//! - Revoking — or updating out of the management scope — the last management token
//!   that never expires is refused: bootstrap cannot be run again, so without it
//!   nobody could manage tokens any more.
//! - The cluster's salt (format 3, `model::acl` says why) is set once — by the
//!   bootstrap, or on an older state by the first token write that carries one or by
//!   `SetAclSalt` — and every stored digest is re-keyed with it in the same write. A
//!   token write's digests must be keyed with the cluster's salt (`AclSaltMismatch`).

use std::sync::Arc;

use crate::engine::Key;
use crate::model::{AclSalt, AclScope, AclToken, Id};

use super::error::{Result, StateError};
use super::read::StateView;
use super::table::Table;
use super::tables::AclSaltRow;
use super::writer::Writer;

/// The scopes of a token as stored: sorted, each once.
fn normalized(mut token: AclToken, index: u64) -> AclToken {
    token.scopes.sort_unstable();
    token.scopes.dedup();
    token.create_index = index;
    token.modify_index = index;
    token
}

fn insert_new(w: &mut Writer, token: &AclToken) -> Result<()> {
    let view = w.view();
    if view.acl_token(&token.accessor_id).is_some() {
        return Err(StateError::AclTokenExists(token.accessor_id.clone()));
    }
    if view.acl_token_by_secret_hash(&token.secret_hash).is_some() {
        return Err(StateError::AclSecretInUse);
    }
    w.txn
        .insert(w.t.acl_tokens, Arc::new(normalized(token.clone(), w.index)))?;
    Ok(())
}

/// Stores `salt` as the cluster's and re-keys every stored digest with it
/// (`AclSalt::rekey`: the salted digest of the same secret). The caller checked that
/// there is none yet.
fn store_salt(w: &mut Writer, salt: AclSalt) -> Result<()> {
    let tokens: Vec<Arc<AclToken>> = w.view().acl_tokens().collect();
    for old in tokens {
        let Some(digest) = salt.rekey(&old.secret_hash) else {
            return Err(StateError::InvalidInput {
                field: "token secret_hash".into(),
                reason: "a stored digest is not 64 lowercase hex digits".into(),
            });
        };
        let mut token = (*old).clone();
        token.secret_hash = digest;
        token.modify_index = w.index;
        w.txn.insert(w.t.acl_tokens, Arc::new(token))?;
    }
    w.txn.insert(
        w.t.acl_salt,
        Arc::new(AclSaltRow {
            salt,
            create_index: w.index,
        }),
    )?;
    Ok(())
}

/// Checks that a token write's digests are keyed with the cluster's salt, setting it
/// (and re-keying the stored digests) when the write carries one and the cluster has
/// none.
fn keyed_with(w: &mut Writer, salt: Option<AclSalt>) -> Result<()> {
    match (w.view().acl_salt(), salt) {
        (Some(have), Some(got)) if have == got => Ok(()),
        (Some(_), _) => Err(StateError::AclSaltMismatch),
        (None, Some(new)) => store_salt(w, new),
        (None, None) => Ok(()),
    }
}

/// Sets the salt of a bootstrapped cluster that has none (`SetAclSalt`).
pub(crate) fn set_salt(w: &mut Writer, salt: AclSalt) -> Result<()> {
    if !w.view().acl_bootstrapped() {
        return Err(StateError::AclNotBootstrapped);
    }
    if let Some(set_at) = w.view().acl_salt_index() {
        return Err(StateError::AclAlreadySalted { set_at });
    }
    store_salt(w, salt)
}

/// The first token of a cluster (a management token), once, with the cluster's salt.
pub(crate) fn bootstrap(w: &mut Writer, token: &AclToken, salt: Option<AclSalt>) -> Result<()> {
    let bootstrapped_at = w.view().table_index(Table::AclTokens);
    if bootstrapped_at > 0 {
        return Err(StateError::AclAlreadyBootstrapped { bootstrapped_at });
    }
    if !token.is_management() || token.expiration_time.is_some() {
        return Err(StateError::InvalidInput {
            field: "bootstrap token".into(),
            reason: "must be a management token that never expires".into(),
        });
    }
    keyed_with(w, salt)?;
    insert_new(w, token)
}

/// New tokens; atomic.
pub(crate) fn create(w: &mut Writer, tokens: &[AclToken], salt: Option<AclSalt>) -> Result<()> {
    if w.view().table_index(Table::AclTokens) == 0 {
        return Err(StateError::AclNotBootstrapped);
    }
    keyed_with(w, salt)?;
    for token in tokens {
        insert_new(w, token)?;
    }
    Ok(())
}

/// Revokes tokens; atomic: an unknown accessor id fails all.
pub(crate) fn delete(w: &mut Writer, accessor_ids: &[Id]) -> Result<()> {
    for id in accessor_ids {
        if w.view().acl_token(id).is_none() {
            return Err(StateError::AclTokenNotFound(id.clone()));
        }
        w.txn.delete(w.t.acl_tokens, &Key::str(id))?;
    }
    a_lasting_manager_left(w)
}

/// Whether some management token without an expiry is left.
fn a_lasting_manager_left(w: &Writer) -> Result<()> {
    let view = w.view();
    if !view
        .acl_tokens()
        .any(|t| t.is_management() && t.expiration_time.is_none())
    {
        return Err(StateError::LastManagementToken);
    }
    Ok(())
}

/// A token's new name and scopes; the rest of the row stays.
pub(crate) fn update(w: &mut Writer, id: &Id, name: &str, scopes: &[AclScope]) -> Result<()> {
    let Some(stored) = w.view().acl_token(id) else {
        return Err(StateError::AclTokenNotFound(id.clone()));
    };
    let mut token = (*stored).clone();
    token.name = name.to_string();
    token.scopes = scopes.to_vec();
    token.scopes.sort_unstable();
    token.scopes.dedup();
    if token == *stored {
        return Ok(());
    }
    token.modify_index = w.index;
    let demoted = stored.is_management() && !token.is_management();
    w.txn.insert(w.t.acl_tokens, Arc::new(token))?;
    if demoted {
        a_lasting_manager_left(w)?;
    }
    Ok(())
}

impl<'a> StateView<'a> {
    /// The token with this accessor id.
    pub fn acl_token(&self, accessor_id: &str) -> Option<Arc<AclToken>> {
        self.view.get(self.t.acl_tokens, &Key::str(accessor_id))
    }

    /// The cluster's ACL salt, once set: what token digests are keyed with
    /// ([`AclSalt::digest`]); `None` in a state without ACL, or one of format 1 or 2 not
    /// salted yet, whose digests are the bare SHA-256.
    pub fn acl_salt(&self) -> Option<AclSalt> {
        self.acl_salt_row().map(|r| r.salt)
    }

    /// The index of the write that set the salt.
    pub fn acl_salt_index(&self) -> Option<u64> {
        self.acl_salt_row().map(|r| r.create_index)
    }

    pub(crate) fn acl_salt_row(&self) -> Option<Arc<AclSaltRow>> {
        self.view.get(self.t.acl_salt, &AclSaltRow::key())
    }

    /// The digest under which a token with `secret` is stored in this state: keyed
    /// with the salt once there is one, the bare SHA-256 before.
    pub fn acl_digest_of(&self, secret: &str) -> String {
        match self.acl_salt() {
            Some(salt) => salt.digest(secret),
            None => crate::model::unsalted_digest(secret),
        }
    }

    /// The token whose secret hashes to `secret_hash` (64 lowercase hex digits): how a
    /// server finds the token a request carries.
    pub fn acl_token_by_secret_hash(&self, secret_hash: &str) -> Option<Arc<AclToken>> {
        self.view
            .index_eq(
                self.t.acl_tokens_by_secret,
                Key::str(secret_hash).as_bytes(),
            )
            .next()
    }

    /// Every token, in accessor id order.
    pub fn acl_tokens(&self) -> impl Iterator<Item = Arc<AclToken>> + 'a {
        self.view.iter(self.t.acl_tokens)
    }

    /// Whether the cluster's ACL was bootstrapped: a token was ever written.
    pub fn acl_bootstrapped(&self) -> bool {
        self.table_index(Table::AclTokens) > 0
    }
}
