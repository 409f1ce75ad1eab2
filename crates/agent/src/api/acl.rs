//! The JSON shapes of the ACL endpoints (`/v1/acl/…`), in Nomad's field names so that
//! Nomad's clients read them: `AccessorID`, `SecretID`, `Name`, `Type`, `CreateTime`,
//! `ExpirationTime`, `CreateIndex`, `ModifyIndex`, with schedstate's `Scopes`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use schedstate::model::{AclScope, AclToken};
use serde::{Deserialize, Serialize};

/// A token as the API shows it. The secret appears once — in the answer that created
/// it — and never again: listings and reads carry no `SecretID`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclTokenView {
    /// The token's public name: what listings and revocations use.
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    /// The secret, only in the answer to a bootstrap or a creation.
    #[serde(rename = "SecretID", default, skip_serializing_if = "Option::is_none")]
    pub secret_id: Option<String>,
    /// Its label.
    #[serde(rename = "Name")]
    pub name: String,
    /// `management` or `client`, as Nomad types tokens.
    #[serde(rename = "Type")]
    pub token_type: String,
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
    /// The same (tokens are never edited).
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

impl AclTokenView {
    /// The view of a stored token (no secret).
    pub fn of(token: &AclToken) -> AclTokenView {
        AclTokenView {
            accessor_id: token.accessor_id.to_string(),
            secret_id: None,
            name: token.name.clone(),
            token_type: if token.is_management() {
                "management"
            } else {
                "client"
            }
            .to_string(),
            scopes: token.scopes.clone(),
            create_time: rfc3339(token.create_time),
            expiration_time: token.expiration_time.map(rfc3339),
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

/// `POST /v1/acl/token`: a new token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclTokenRequest {
    /// Its label.
    #[serde(rename = "Name", default, deserialize_with = "super::nomad::nullable")]
    pub name: String,
    /// What it may do (at least one scope, unless `Type` is `management`).
    #[serde(
        rename = "Scopes",
        default,
        deserialize_with = "super::nomad::nullable"
    )]
    pub scopes: Vec<AclScope>,
    /// Nomad's `management` means the management scope; `client` (or nothing) means
    /// the scopes listed.
    #[serde(rename = "Type", default, skip_serializing_if = "Option::is_none")]
    pub token_type: Option<String>,
    /// How long it is accepted: a duration like `"24h"` (or, as Nomad's Go client
    /// sends it, a number of nanoseconds); none: forever.
    #[serde(
        rename = "ExpirationTTL",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub expiration_ttl: Option<serde_json::Value>,
}

impl AclTokenRequest {
    /// The scopes asked for, `Type` included.
    ///
    /// # Errors
    /// An unknown type, or no scope at all.
    pub fn scopes(&self) -> Result<Vec<AclScope>, String> {
        let mut scopes = self.scopes.clone();
        match self.token_type.as_deref() {
            None | Some("client") => {}
            Some("management") => scopes.push(AclScope::Management),
            Some(other) => {
                return Err(format!(
                    "unknown token Type {other:?} (management or client)"
                ));
            }
        }
        if scopes.is_empty() {
            return Err(
                "a token needs at least one scope: read, write, operator or management".into(),
            );
        }
        scopes.sort_unstable();
        scopes.dedup();
        Ok(scopes)
    }

    /// The time to live asked for.
    ///
    /// # Errors
    /// Not a duration, or zero.
    pub fn ttl(&self) -> Result<Option<Duration>, String> {
        let ttl = match &self.expiration_ttl {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(s)) => humantime::parse_duration(s)
                .map_err(|e| format!("ExpirationTTL {s:?} is not a duration: {e}"))?,
            Some(serde_json::Value::Number(n)) => n
                .as_u64()
                .map(Duration::from_nanos)
                .ok_or_else(|| format!("ExpirationTTL {n} is not a number of nanoseconds"))?,
            Some(other) => return Err(format!("ExpirationTTL {other} is not a duration")),
        };
        if ttl.is_zero() {
            return Err("ExpirationTTL must be above zero".into());
        }
        Ok(Some(ttl))
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
    fn requests_name_scopes_and_a_ttl_either_way() {
        let r: AclTokenRequest =
            serde_json::from_str(r#"{"Name":"d","Scopes":["read","read"],"ExpirationTTL":"1h"}"#)
                .unwrap();
        assert_eq!(r.scopes(), Ok(vec![AclScope::Read]));
        assert_eq!(r.ttl(), Ok(Some(Duration::from_secs(3600))));
        let r: AclTokenRequest =
            serde_json::from_str(r#"{"Type":"management","ExpirationTTL":60000000000}"#).unwrap();
        assert_eq!(r.scopes(), Ok(vec![AclScope::Management]));
        assert_eq!(r.ttl(), Ok(Some(Duration::from_secs(60))));
        for bad in [r#"{"Name":"x"}"#, r#"{"Type":"root","Scopes":["read"]}"#] {
            let r: AclTokenRequest = serde_json::from_str(bad).unwrap();
            assert!(r.scopes().is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<AclTokenRequest>(r#"{"Scopes":["admin"]}"#).is_err());
        let r: AclTokenRequest =
            serde_json::from_str(r#"{"Scopes":["read"],"ExpirationTTL":"0s"}"#).unwrap();
        assert!(r.ttl().is_err());
    }

    #[test]
    fn a_view_never_carries_the_hash() {
        let t = AclToken::new("a", "n", vec![AclScope::Read], "ab".repeat(32));
        let json = serde_json::to_string(&AclTokenView::of(&t)).unwrap();
        assert!(
            !json.contains(&"ab".repeat(32)) && !json.contains("SecretID"),
            "{json}"
        );
        assert!(json.contains(r#""Type":"client""#), "{json}");
    }
}
