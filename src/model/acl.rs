//! ACL tokens: who may call a replicated server's API, and for what.
//!
//! A token is a row of the replicated state, so every server answers to the same
//! tokens and a revocation reaches all of them with the log. The secret itself is never
//! stored: a token row holds a *digest* of its secret (a server computes the digest of
//! what a request carries and looks it up), and an *accessor id*, a second identifier
//! that names the token in listings and revocations without being a credential.
//!
//! # Salted digests
//!
//! The digest is `HMAC-SHA256(salt, SHA-256(secret))` ([`AclSalt::digest`]), in 64
//! lowercase hex digits, where the salt is 32 random bytes of the cluster's own
//! ([`AclSalt`]): made by the server that proposes the command bootstrapping the ACL
//! (or the first token write of an older state), carried in that command so every
//! replica stores the same, and kept in the replicated state beside the tokens (and in
//! snapshots). Before format 3 the digest was the bare `SHA-256(secret)`; when a salt
//! is set on such a state, each stored digest `d` becomes `HMAC-SHA256(salt, d)`
//! ([`AclSalt::rekey`]) in the same write — which is exactly the salted digest of the
//! same secret, so every token keeps working and no secret is needed. A state with no
//! salt (no ACL yet, or not migrated) keeps the bare SHA-256.
//!
//! **Why a salt beside the digests, not a slow hash** (bcrypt, scrypt, Argon2): a slow
//! hash protects secrets a person chose, which an attacker can guess. The secrets made
//! here are 122 random bits (a bootstrap secret a user gives is at least 16
//! characters), out of reach of any guessing, and a server computes a digest on every
//! request: a slow hash would cost tens of milliseconds of CPU per API call, a way to
//! exhaust a server with bad tokens. What a salt does defeat is precomputation: with
//! bare SHA-256, a snapshot's digests could be matched against tables computed once
//! for every cluster, and two clusters holding the same secret (a bootstrap secret
//! reused) would show the same digest. With a per-cluster salt neither works: a
//! digest means nothing without the salt, and the same secret has unrelated digests in
//! two clusters. (The salt travels with the digests in snapshots; it is not a secret
//! key, and does not need to be.)

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Id;

/// A cluster's ACL salt: 32 random bytes, the HMAC key of every token digest (the
/// module's doc says why).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclSalt(pub [u8; 32]);

impl std::fmt::Debug for AclSalt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not a secret, but nothing a log line needs either.
        f.write_str("AclSalt(..)")
    }
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// The bytes of 64 lowercase hex digits, if that is what `s` is.
fn unhex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// The unsalted digest of a secret, as format 1 and 2 stored it (and a state without a
/// salt still does): its SHA-256 in 64 lowercase hex digits.
///
/// ```
/// use schedstate::model::unsalted_digest;
/// assert_eq!(
///     unsalted_digest("abc"),
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
pub fn unsalted_digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

impl AclSalt {
    fn mac(&self, message: &[u8]) -> String {
        // An HMAC takes a key of any length: `new_from_slice` cannot fail here.
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC accepts a 32-byte key");
        mac.update(message);
        hex(&mac.finalize().into_bytes())
    }

    /// The digest a token with `secret` is stored and looked up under:
    /// `HMAC-SHA256(salt, SHA-256(secret))`, 64 lowercase hex digits.
    ///
    /// ```
    /// use schedstate::model::{AclSalt, unsalted_digest};
    /// let (a, b) = (AclSalt([1; 32]), AclSalt([2; 32]));
    /// // The same secret: unrelated digests in two clusters.
    /// assert_ne!(a.digest("s3cret"), b.digest("s3cret"));
    /// // An unsalted digest re-keyed is the salted digest of the same secret.
    /// assert_eq!(a.rekey(&unsalted_digest("s3cret")), Some(a.digest("s3cret")));
    /// ```
    pub fn digest(&self, secret: &str) -> String {
        self.mac(&Sha256::digest(secret.as_bytes()))
    }

    /// A digest stored before the salt (`SHA-256(secret)` in hex) re-keyed:
    /// `HMAC-SHA256(salt, SHA-256(secret))`, the salted digest of the same secret,
    /// computed without it. `None` if `unsalted` is not 64 lowercase hex digits.
    pub fn rekey(&self, unsalted: &str) -> Option<String> {
        unhex32(unsalted).map(|d| self.mac(&d))
    }
}

/// What a token may do. A token holds a set of scopes; `management` implies every
/// other one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AclScope {
    /// Reads: every `GET` of the state, blocking queries, the event stream.
    Read,
    /// Writes: the state's commands.
    Write,
    /// Operations: snapshots, membership changes, metrics, the servers' status.
    Operator,
    /// Tokens: create, list and revoke them; implies every other scope.
    Management,
}

impl AclScope {
    /// Every scope, weakest first.
    pub const ALL: [AclScope; 4] = [
        AclScope::Read,
        AclScope::Write,
        AclScope::Operator,
        AclScope::Management,
    ];

    /// The scope's name, as the API and the CLI spell it.
    pub const fn name(self) -> &'static str {
        match self {
            AclScope::Read => "read",
            AclScope::Write => "write",
            AclScope::Operator => "operator",
            AclScope::Management => "management",
        }
    }

    /// The scope called `name`.
    ///
    /// ```
    /// use schedstate::model::AclScope;
    /// assert_eq!(AclScope::from_name("operator"), Some(AclScope::Operator));
    /// assert_eq!(AclScope::from_name("admin"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<AclScope> {
        AclScope::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl std::fmt::Display for AclScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One ACL token, as stored: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclToken {
    /// The token's public name in listings and revocations (the key of the table).
    pub accessor_id: Id,
    /// A label for people ("dashboards", "scheduler-1").
    pub name: String,
    /// What the token may do: sorted, each scope once, never empty.
    pub scopes: Vec<AclScope>,
    /// The digest of the secret, 64 lowercase hex digits; unique over the table:
    /// [`AclSalt::digest`] with the cluster's salt, or, in a state without one, the
    /// bare SHA-256 ([`unsalted_digest`]).
    pub secret_hash: String,
    /// When the token was made, in seconds since the Unix epoch (the proposing
    /// server's clock: part of the command, so every replica stores the same value).
    pub create_time: u64,
    /// When the token stops being accepted, in seconds since the Unix epoch; `None`
    /// for never.
    #[serde(default)]
    pub expiration_time: Option<u64>,
    /// The index of the write that created the row.
    pub create_index: u64,
    /// The index of the last write that changed the row.
    pub modify_index: u64,
}

impl AclToken {
    /// Whether the token may act in `scope` (`management` may do everything).
    ///
    /// ```
    /// use schedstate::model::{AclScope, AclToken};
    /// let mut t = AclToken::new("a1", "dashboards", vec![AclScope::Read], "00".repeat(32));
    /// assert!(t.allows(AclScope::Read) && !t.allows(AclScope::Write));
    /// t.scopes = vec![AclScope::Management];
    /// assert!(t.allows(AclScope::Operator));
    /// ```
    pub fn allows(&self, scope: AclScope) -> bool {
        self.scopes
            .iter()
            .any(|s| *s == scope || *s == AclScope::Management)
    }

    /// Whether the token is a management token.
    pub fn is_management(&self) -> bool {
        self.scopes.contains(&AclScope::Management)
    }

    /// Whether the token has expired at `now` (seconds since the Unix epoch).
    pub fn expired_at(&self, now: u64) -> bool {
        self.expiration_time.is_some_and(|t| now >= t)
    }

    /// A token with no expiry, created at time 0 and index 0.
    pub fn new(
        accessor_id: impl Into<Id>,
        name: impl Into<String>,
        scopes: Vec<AclScope>,
        secret_hash: impl Into<String>,
    ) -> AclToken {
        AclToken {
            accessor_id: accessor_id.into(),
            name: name.into(),
            scopes,
            secret_hash: secret_hash.into(),
            create_time: 0,
            expiration_time: None,
            create_index: 0,
            modify_index: 0,
        }
    }
}
