//! The body of `POST`/`PUT /v1/acl/token` (create) and `/v1/acl/token/<accessor>`
//! (update): Nomad's `ACLToken` as its clients send it, and schedstate's own form
//! (`Scopes`), as one shape.
//!
//! Nomad's fields map onto scopes: `Type: management` is the management scope; a
//! client token's `Policies` are scope names — `read`, `write`, `operator` — and any
//! other name is refused (`UnknownPolicy`), never ignored: schedstate has no policy
//! documents, so a policy it cannot name would silently grant less (or more) than
//! asked. schedstate's `Scopes` counts only when `Policies` is empty (an answer sent
//! back carries both, and Nomad's field wins). `Roles` must be empty. `Global` is taken either way (a cluster is one
//! region). `AccessorID` may be `""` on a create, as Go's client sends it; `SecretID`
//! must be `""` on a create (the server makes every secret). `CreateTime`,
//! `CreateIndex`, `ModifyIndex` and `Hash`, which Go's client sends back from its
//! struct, are ignored.

use std::time::Duration;

use schedstate::model::AclScope;
use serde::{Deserialize, Serialize};

use super::nomad::nullable;

/// A token body that does not make a token: its stable kind (`UnknownPolicy`,
/// `BadRequest`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TokenRequestError {
    /// The error's kind in the API.
    pub kind: &'static str,
    /// What is wrong.
    pub message: String,
}

fn bad(message: impl Into<String>) -> TokenRequestError {
    TokenRequestError {
        kind: "BadRequest",
        message: message.into(),
    }
}

/// A token to create or update.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclTokenRequest {
    /// Nomad's accessor id: `""` (or absent) on a create; on an update, absent,
    /// `""` or the token's own.
    #[serde(
        rename = "AccessorID",
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub accessor_id: String,
    /// Nomad's secret: `""` (or absent) on a create; on an update, absent, `""` or
    /// the token's own (a secret is never changed).
    #[serde(
        rename = "SecretID",
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub secret_id: String,
    /// Its label.
    #[serde(rename = "Name", default, deserialize_with = "nullable")]
    pub name: String,
    /// What it may do (schedstate's form): `read`, `write`, `operator`,
    /// `management`.
    #[serde(rename = "Scopes", default, deserialize_with = "nullable")]
    pub scopes: Vec<AclScope>,
    /// Nomad's `management` means the management scope; `client` (or nothing)
    /// means the scopes and policies listed.
    #[serde(rename = "Type", default, skip_serializing_if = "Option::is_none")]
    pub token_type: Option<String>,
    /// Nomad's policies of a client token: scope names (`read`, `write`,
    /// `operator`).
    #[serde(
        rename = "Policies",
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub policies: Vec<String>,
    /// Nomad's roles: must be empty.
    #[serde(
        rename = "Roles",
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub roles: Vec<serde_json::Value>,
    /// Nomad's global flag: taken either way (one region).
    #[serde(rename = "Global", default, skip_serializing_if = "Option::is_none")]
    pub global: Option<bool>,
    /// How long it is accepted: a duration like `"24h"` (or, as Nomad's Go client
    /// sends it, a number of nanoseconds, 0 for none); none: forever.
    #[serde(
        rename = "ExpirationTTL",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub expiration_ttl: Option<serde_json::Value>,
    /// Nomad's other way: when it stops being accepted (RFC 3339, UTC; Go's zero
    /// time or `null`: never). `ExpirationTTL` wins when both are given.
    #[serde(
        rename = "ExpirationTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub expiration_time: Option<String>,
    /// Sent back by Go's client; ignored.
    #[serde(rename = "CreateTime", default, skip_serializing)]
    pub create_time: Option<serde_json::Value>,
    /// Sent back by Go's client; ignored.
    #[serde(rename = "CreateIndex", default, skip_serializing)]
    pub create_index: Option<serde_json::Value>,
    /// Sent back by Go's client; ignored.
    #[serde(rename = "ModifyIndex", default, skip_serializing)]
    pub modify_index: Option<serde_json::Value>,
    /// Sent back by some clients; ignored.
    #[serde(rename = "Hash", default, skip_serializing)]
    pub hash: Option<serde_json::Value>,
}

impl AclTokenRequest {
    /// The scopes asked for: `Type`, `Policies` and `Scopes` together.
    ///
    /// # Errors
    /// An unknown type or policy name, roles, policies on a management token, no
    /// scope at all.
    pub fn scopes(&self) -> Result<Vec<AclScope>, TokenRequestError> {
        if !self.roles.is_empty() {
            return Err(bad(
                "Roles are not supported: a token's rights are its Type and Policies (read, write, operator)",
            ));
        }
        // Nomad's field wins: a body sent back from an answer carries both.
        let mut scopes = if self.policies.is_empty() {
            self.scopes.clone()
        } else {
            Vec::new()
        };
        for name in &self.policies {
            match AclScope::from_name(name) {
                Some(AclScope::Management) | None => {
                    return Err(TokenRequestError {
                        kind: "UnknownPolicy",
                        message: format!(
                            "unknown policy {name:?}: the policies are read, write and operator (a management token is Type management)"
                        ),
                    });
                }
                Some(scope) => scopes.push(scope),
            }
        }
        match self.token_type.as_deref() {
            None | Some("" | "client") => {}
            Some("management") => {
                if !self.policies.is_empty() {
                    return Err(bad("a management token cannot be associated with policies"));
                }
                scopes.push(AclScope::Management);
            }
            Some(other) => {
                return Err(bad(format!(
                    "unknown token Type {other:?} (management or client)"
                )));
            }
        }
        if scopes.is_empty() {
            return Err(bad(
                "a client token needs at least one policy (or scope): read, write or operator",
            ));
        }
        scopes.sort_unstable();
        scopes.dedup();
        Ok(scopes)
    }

    /// The time to live asked for.
    ///
    /// # Errors
    /// Not a duration, or a zero duration written as text.
    pub fn ttl(&self) -> Result<Option<Duration>, TokenRequestError> {
        let ttl = match &self.expiration_ttl {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(s)) => humantime::parse_duration(s)
                .map_err(|e| bad(format!("ExpirationTTL {s:?} is not a duration: {e}")))?,
            // Go's `time.Duration`: nanoseconds, 0 for none.
            Some(serde_json::Value::Number(n)) => match n.as_u64() {
                Some(0) => return Ok(None),
                Some(n) => Duration::from_nanos(n),
                None => {
                    return Err(bad(format!(
                        "ExpirationTTL {n} is not a number of nanoseconds"
                    )));
                }
            },
            Some(other) => return Err(bad(format!("ExpirationTTL {other} is not a duration"))),
        };
        if ttl.is_zero() {
            return Err(bad("ExpirationTTL must be above zero"));
        }
        Ok(Some(ttl))
    }

    /// The expiration time asked for, in whole seconds since the epoch (rounded up,
    /// so a token never lives less than asked).
    ///
    /// # Errors
    /// Not an RFC 3339 time in UTC.
    pub fn expiration_secs(&self) -> Result<Option<u64>, TokenRequestError> {
        let Some(s) = self.expiration_time.as_deref() else {
            return Ok(None);
        };
        let nanos = super::nomad::time::from_rfc3339("ExpirationTime", s)
            .map_err(|e| bad(e.to_string()))?;
        Ok((nanos > 0).then(|| nanos.div_ceil(1_000_000_000)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> AclTokenRequest {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn requests_name_scopes_and_a_ttl_either_way() {
        let r = parse(r#"{"Name":"d","Scopes":["read","read"],"ExpirationTTL":"1h"}"#);
        assert_eq!(r.scopes(), Ok(vec![AclScope::Read]));
        assert_eq!(r.ttl(), Ok(Some(Duration::from_secs(3600))));
        let r = parse(r#"{"Type":"management","ExpirationTTL":60000000000}"#);
        assert_eq!(r.scopes(), Ok(vec![AclScope::Management]));
        assert_eq!(r.ttl(), Ok(Some(Duration::from_secs(60))));
        for bad in [r#"{"Name":"x"}"#, r#"{"Type":"root","Scopes":["read"]}"#] {
            assert!(parse(bad).scopes().is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<AclTokenRequest>(r#"{"Scopes":["admin"]}"#).is_err());
        assert!(
            parse(r#"{"Scopes":["read"],"ExpirationTTL":"0s"}"#)
                .ttl()
                .is_err()
        );
        assert_eq!(parse(r#"{"ExpirationTTL":0}"#).ttl(), Ok(None));
    }

    #[test]
    fn nomads_body_as_go_sends_it() {
        let r = parse(
            r#"{"AccessorID":"","SecretID":"","Name":"ci","Type":"client",
                "Policies":["write","read"],"Roles":null,"Global":false,
                "CreateTime":"0001-01-01T00:00:00Z","CreateIndex":0,"ModifyIndex":0}"#,
        );
        assert_eq!(r.scopes(), Ok(vec![AclScope::Read, AclScope::Write]));
        assert_eq!((r.ttl(), r.expiration_secs()), (Ok(None), Ok(None)));
        let r = parse(r#"{"Type":"client","Policies":["read"],"Scopes":["read","write"]}"#);
        assert_eq!(r.scopes(), Ok(vec![AclScope::Read]), "Policies win");
        let r = parse(
            r#"{"Type":"management","Policies":null,"ExpirationTime":"2030-01-01T00:00:00.5Z"}"#,
        );
        assert_eq!(r.scopes(), Ok(vec![AclScope::Management]));
        assert_eq!(r.expiration_secs(), Ok(Some(1_893_456_001)));
        let e = parse(r#"{"Type":"client","Policies":["read","node-read"]}"#)
            .scopes()
            .unwrap_err();
        assert_eq!(e.kind, "UnknownPolicy");
        assert!(e.message.contains("node-read"), "{e}");
        let e = parse(r#"{"Type":"client","Policies":["management"]}"#)
            .scopes()
            .unwrap_err();
        assert_eq!(e.kind, "UnknownPolicy");
        for bad in [
            r#"{"Type":"management","Policies":["read"]}"#,
            r#"{"Type":"client","Policies":["read"],"Roles":[{"Name":"r"}]}"#,
            r#"{"Type":"client","Policies":null}"#,
        ] {
            assert_eq!(parse(bad).scopes().unwrap_err().kind, "BadRequest", "{bad}");
        }
        assert!(
            parse(r#"{"ExpirationTime":"tomorrow"}"#)
                .expiration_secs()
                .is_err()
        );
    }
}
