//! The client's ACL calls: bootstrap, tokens made, listed, read, updated and revoked.

use hyper::Method;

use super::{Client, ClientError, ReadOptions, path_segment, request_timeout};
use crate::api::{AclBootstrapRequest, AclTokenRequest, AclTokenView, WriteResponse};

impl Client {
    /// `POST /v1/acl/bootstrap`: the cluster's first management token, with its
    /// secret — once per cluster (409 `AclAlreadyBootstrapped` after). `secret`
    /// chooses the secret instead of a random one.
    pub async fn acl_bootstrap(&self, secret: Option<&str>) -> Result<AclTokenView, ClientError> {
        let request = AclBootstrapRequest {
            bootstrap_secret: secret.map(str::to_string),
        };
        let body = serde_json::to_vec(&request).map_err(|e| ClientError::Decode {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        self.post_json("/v1/acl/bootstrap", body, None).await
    }

    /// `POST /v1/acl/token`: a new token, with its secret (shown this once).
    pub async fn acl_create_token(
        &self,
        request: &AclTokenRequest,
    ) -> Result<AclTokenView, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        self.post_json("/v1/acl/token", body, None).await
    }

    /// `POST /v1/acl/token/<accessor>`: a token's new name and rights (its secret
    /// and expiry stay); answers the token, without its secret.
    pub async fn acl_update_token(
        &self,
        accessor: &str,
        request: &AclTokenRequest,
    ) -> Result<AclTokenView, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        let path = format!("/v1/acl/token/{}", path_segment(accessor));
        self.post_json(&path, body, None).await
    }

    /// `GET /v1/acl/tokens`: every token, without secrets.
    pub async fn acl_tokens(&self) -> Result<Vec<AclTokenView>, ClientError> {
        let r = self
            .get_list::<Vec<AclTokenView>>("/v1/acl/tokens", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }

    /// `GET /v1/acl/token/self`: the token this client sends.
    pub async fn acl_token_self(&self) -> Result<AclTokenView, ClientError> {
        let r = self
            .get_list::<AclTokenView>("/v1/acl/token/self", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }

    /// `GET /v1/acl/token/<accessor>`.
    pub async fn acl_token(&self, accessor: &str) -> Result<AclTokenView, ClientError> {
        let path = format!("/v1/acl/token/{}", path_segment(accessor));
        let r = self
            .get::<AclTokenView>(&path, &[], ReadOptions::default())
            .await?;
        r.value.ok_or_else(|| ClientError::Api {
            url: format!("{}{path}", self.base),
            status: 404,
            kind: "AclTokenNotFound".into(),
            message: format!("no ACL token {accessor:?}"),
            index: None,
        })
    }

    /// `DELETE /v1/acl/token/<accessor>`: revokes a token; answers the index of the
    /// revocation.
    pub async fn acl_revoke(&self, accessor: &str) -> Result<u64, ClientError> {
        let path = format!("/v1/acl/token/{}", path_segment(accessor));
        let (w, _): (WriteResponse, _) = self
            .call_ok(Method::DELETE, &path, &[], None, request_timeout(None))
            .await?;
        Ok(w.index)
    }
}
