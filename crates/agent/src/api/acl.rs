//! The JSON shapes of the ACL endpoints (`/v1/acl/…`) in Nomad's shapes — its
//! `ACLToken` ([`AclTokenView`]) and `ACLTokenListStub` ([`AclTokenListStub`]) — with
//! schedstate's `Scopes` beside Nomad's fields, so that Nomad's clients and
//! schedstate's own CLI both read them.
//!
//! What Nomad has and schedstate derives: `Type` (`management` for a token holding
//! the management scope, else `client`), `Policies` (a client token's scopes by name:
//! `read`, `write`, `operator`; none for a management token, as in Nomad), `Global`
//! (always `true`: a cluster is one region), `ExpirationTTL` (expiry minus creation,
//! in nanoseconds as Go's `time.Duration`; 0 without expiry), `Roles` (always empty:
//! there are no roles). None of it is stored: a token row keeps its scopes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use schedstate::model::{AclScope, AclToken};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use super::acl_request::{AclTokenRequest, TokenRequestError};

/// A token as the API shows it (Nomad's `ACLToken`). The secret appears in the
/// answer that created the token, and in `GET /v1/acl/token/self` (the caller's
/// own, which it just presented); everywhere else `SecretID` is `""` — only the
/// secret's hash is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclTokenView {
    /// The token's public name: what listings and revocations use.
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    /// The secret, only in the answer to a bootstrap, a creation or `self` (`""`
    /// on the wire otherwise).
    #[serde(
        rename = "SecretID",
        default,
        serialize_with = "secret_out",
        deserialize_with = "secret_in"
    )]
    pub secret_id: Option<String>,
    /// Its label.
    #[serde(rename = "Name")]
    pub name: String,
    /// `management` or `client`, as Nomad types tokens.
    #[serde(rename = "Type")]
    pub token_type: String,
    /// Nomad's policies: a client token's scopes by name; none for management.
    #[serde(rename = "Policies", default)]
    pub policies: Vec<String>,
    /// Nomad's roles: always empty.
    #[serde(rename = "Roles", default)]
    pub roles: Vec<serde_json::Value>,
    /// Nomad's global flag: always `true` (one region).
    #[serde(rename = "Global", default)]
    pub global: bool,
    /// What it may do (schedstate's own field).
    #[serde(rename = "Scopes")]
    pub scopes: Vec<AclScope>,
    /// When it was made (RFC 3339).
    #[serde(rename = "CreateTime")]
    pub create_time: String,
    /// When it stops being accepted (RFC 3339), if ever.
    #[serde(rename = "ExpirationTime", default)]
    pub expiration_time: Option<String>,
    /// How long it was made to live, in nanoseconds (Go's `time.Duration`); 0 for
    /// ever.
    #[serde(rename = "ExpirationTTL", default)]
    pub expiration_ttl: u64,
    /// The index of the write that made it.
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    /// The index of the write that last changed it.
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// A token in a list (Nomad's `ACLTokenListStub`): no `SecretID`, no TTL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclTokenListStub {
    /// See [`AclTokenView`].
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    /// Its label.
    #[serde(rename = "Name")]
    pub name: String,
    /// `management` or `client`.
    #[serde(rename = "Type")]
    pub token_type: String,
    /// A client token's scopes by name.
    #[serde(rename = "Policies", default)]
    pub policies: Vec<String>,
    /// Always empty.
    #[serde(rename = "Roles", default)]
    pub roles: Vec<serde_json::Value>,
    /// Always `true`.
    #[serde(rename = "Global", default)]
    pub global: bool,
    /// What it may do.
    #[serde(rename = "Scopes")]
    pub scopes: Vec<AclScope>,
    /// When it was made (RFC 3339).
    #[serde(rename = "CreateTime")]
    pub create_time: String,
    /// When it stops being accepted (RFC 3339), if ever.
    #[serde(rename = "ExpirationTime", default)]
    pub expiration_time: Option<String>,
    /// The index of the write that made it.
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    /// The index of the write that last changed it.
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

#[allow(clippy::ref_option)] // serde's `serialize_with` hands a reference
fn secret_out<S: Serializer>(secret: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(secret.as_deref().unwrap_or(""))
}

fn secret_in<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// Seconds since the epoch as RFC 3339 (whole seconds, UTC).
pub(crate) fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// Nomad's type of a token.
pub(crate) fn token_type(token: &AclToken) -> &'static str {
    if token.is_management() {
        "management"
    } else {
        "client"
    }
}

/// Nomad's policies of a token: a client token's scopes by name.
pub(crate) fn policies(token: &AclToken) -> Vec<String> {
    if token.is_management() {
        return Vec::new();
    }
    token.scopes.iter().map(|s| s.name().to_string()).collect()
}

/// The time to live a token was made with, in nanoseconds (0: none).
pub fn ttl_nanos(token: &AclToken) -> u64 {
    token.expiration_time.map_or(0, |e| {
        e.saturating_sub(token.create_time)
            .saturating_mul(1_000_000_000)
    })
}

impl AclTokenView {
    /// The view of a stored token (no secret).
    pub fn of(token: &AclToken) -> AclTokenView {
        AclTokenView {
            accessor_id: token.accessor_id.to_string(),
            secret_id: None,
            name: token.name.clone(),
            token_type: token_type(token).to_string(),
            policies: policies(token),
            roles: Vec::new(),
            global: true,
            scopes: token.scopes.clone(),
            create_time: rfc3339(token.create_time),
            expiration_time: token.expiration_time.map(rfc3339),
            expiration_ttl: ttl_nanos(token),
            create_index: token.create_index,
            modify_index: token.modify_index,
        }
    }

    /// Whether the token has expired by the clock of this machine.
    pub fn expired(&self) -> bool {
        self.expiration_time
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            .is_some_and(|t| t <= SystemTime::now())
    }
}

impl AclTokenListStub {
    /// The list entry of a stored token.
    pub fn of(token: &AclToken) -> AclTokenListStub {
        AclTokenListStub {
            accessor_id: token.accessor_id.to_string(),
            name: token.name.clone(),
            token_type: token_type(token).to_string(),
            policies: policies(token),
            roles: Vec::new(),
            global: true,
            scopes: token.scopes.clone(),
            create_time: rfc3339(token.create_time),
            expiration_time: token.expiration_time.map(rfc3339),
            create_index: token.create_index,
            modify_index: token.modify_index,
        }
    }
}

/// `POST /v1/acl/bootstrap`: optionally the secret the first management token gets
/// (as Nomad allows, for automation that must know it in advance).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclBootstrapRequest {
    /// The secret to use (16 to 128 printable ASCII characters without spaces);
    /// a random one when absent.
    #[serde(
        rename = "BootstrapSecret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub bootstrap_secret: Option<String>,
}

/// `GET /v1/agent/health`: whether the server answers, and (for the servers forming a
/// cluster) whether it has never been part of one. Needs no token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentHealth {
    /// Nomad's shape: `{"server": {"ok": true, "message": "ok"}}`.
    pub server: HealthStatus,
}

/// One part of [`AgentHealth`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthStatus {
    /// Whether it is healthy.
    pub ok: bool,
    /// Why (or `ok`).
    pub message: String,
    /// The server never was part of a cluster (no membership, no log, no vote).
    #[serde(default)]
    pub fresh: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_never_carries_the_hash_and_has_nomads_fields() {
        let mut t = AclToken::new(
            "a",
            "n",
            vec![AclScope::Read, AclScope::Write],
            "ab".repeat(32),
        );
        t.create_time = 1_700_000_000;
        t.expiration_time = Some(1_700_003_600);
        let v = serde_json::to_value(AclTokenView::of(&t)).unwrap();
        assert!(!v.to_string().contains(&"ab".repeat(32)), "{v}");
        assert_eq!(v["SecretID"], "");
        assert_eq!(v["Type"], "client");
        assert_eq!(v["Policies"], serde_json::json!(["read", "write"]));
        assert_eq!(v["Roles"], serde_json::json!([]));
        assert_eq!(v["Global"], true);
        assert_eq!(v["CreateTime"], "2023-11-14T22:13:20Z");
        assert_eq!(v["ExpirationTime"], "2023-11-14T23:13:20Z");
        assert_eq!(v["ExpirationTTL"], 3_600_000_000_000_u64);
        // "" reads back as no secret.
        let back: AclTokenView = serde_json::from_value(v).unwrap();
        assert_eq!(back.secret_id, None);
        let stub = serde_json::to_value(AclTokenListStub::of(&t)).unwrap();
        assert!(stub.get("SecretID").is_none() && stub.get("ExpirationTTL").is_none());
        t.scopes = vec![AclScope::Management];
        t.expiration_time = None;
        let v = serde_json::to_value(AclTokenView::of(&t)).unwrap();
        assert_eq!(
            (
                &v["Type"],
                &v["Policies"],
                &v["ExpirationTime"],
                &v["ExpirationTTL"]
            ),
            (
                &serde_json::json!("management"),
                &serde_json::json!([]),
                &serde_json::Value::Null,
                &serde_json::json!(0)
            )
        );
    }
}
