//! ACL tokens: who may call a replicated server's API, and for what.
//!
//! A token is a row of the replicated state, so every server answers to the same
//! tokens and a revocation reaches all of them with the log. The secret itself is never
//! stored: a token row holds the SHA-256 of its secret (a server hashes what a request
//! carries and looks the digest up), and an *accessor id*, a second identifier that
//! names the token in listings and revocations without being a credential.

use serde::{Deserialize, Serialize};

use super::Id;

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
    /// The SHA-256 of the secret, 64 lowercase hex digits; unique over the table.
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
