//! The client's writes, exactly once: each logical write carries an
//! `Idempotency-Key`, and an attempt whose outcome is unknown (no answer, a 503 while
//! the leader changes) is sent again under the same key, so the agent answers the
//! first outcome instead of applying it twice.

use std::time::Duration;

use hyper::{Method, StatusCode};
use schedstate::model::Job;
use schedstate::state::Command;
use serde::de::DeserializeOwned;

use super::{Client, ClientError, path_segment, request_timeout};
use crate::api::nomad::NomadJob;
use crate::api::{JobWriteResponse, WriteResponse};

/// Attempts of one write against one agent before its last error is returned.
const ATTEMPTS: u32 = 4;
/// The pause before the second attempt; doubled before each later one.
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// A write's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The index it was applied (or first applied) at.
    pub index: u64,
    /// Whether the agent answered a retry with the first apply's outcome
    /// (`Idempotent-Replayed: true`): nothing was applied again.
    pub replayed: bool,
}

/// A new write key: 122 random bits in the UUID v4 form.
///
/// # Panics
/// If the operating system has no randomness to give.
pub fn new_write_key() -> String {
    crate::service::new_uuid().expect("the operating system's random source")
}

/// Whether an attempt that failed with `e` may have been applied: then the same key
/// is sent again. A refusal, a bad request, a missing resource did not apply.
fn outcome_unknown(e: &ClientError) -> bool {
    match e {
        ClientError::Transport { .. } => true,
        ClientError::Api { status, .. } => {
            *status == StatusCode::SERVICE_UNAVAILABLE.as_u16()
                || *status == StatusCode::TOO_MANY_REQUESTS.as_u16()
        }
        ClientError::BadAddress { .. } | ClientError::Decode { .. } => false,
    }
}

impl Client {
    /// Sends one write under `key`, again under the same key while its outcome is
    /// unknown (up to [`ATTEMPTS`] times, pausing between), and reads its answer.
    async fn write_keyed<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
        key: &str,
    ) -> Result<(T, bool), ClientError> {
        let mut pause = FIRST_PAUSE;
        let mut attempt = 1;
        loop {
            let timeout = request_timeout(None);
            let result = match self
                .call(
                    method.clone(),
                    path,
                    query,
                    body.clone(),
                    timeout,
                    Some(key),
                )
                .await
            {
                Ok((answer, url)) if answer.status == StatusCode::OK => {
                    let replayed = answer
                        .headers
                        .get("idempotent-replayed")
                        .is_some_and(|v| v.as_bytes() == b"true");
                    Self::body(&answer, &url).map(|value| (value, replayed))
                }
                Ok((answer, url)) => Err(Self::error(answer, url)),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if attempt < ATTEMPTS && outcome_unknown(&e) => {
                    tracing::debug!(attempt, error = %e, "write outcome unknown; sending it again under its key");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// `POST /v1/commands` under the write key `key`: proposes `command`, answers
    /// its index once it committed and the answering server applied it. Sent again
    /// under the same key while the outcome is unknown; a caller that moves to
    /// another agent (the leader died) sends it there under the same key too, and it
    /// is applied once.
    ///
    /// # Errors
    /// [`ClientError::Api`] with status 409 and the rule's kind for a refused command,
    /// 422 `IdempotencyKeyReused` for a key used with another command; the last
    /// unknown outcome (503, no answer) after the attempts.
    pub async fn apply_keyed(&self, command: &Command, key: &str) -> Result<Written, ClientError> {
        let body = serde_json::to_vec(command).map_err(|e| ClientError::Decode {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        let (answer, replayed): (WriteResponse, bool) = self
            .write_keyed(Method::POST, "/v1/commands", &[], Some(body), key)
            .await?;
        Ok(Written {
            index: answer.index,
            replayed,
        })
    }

    /// `POST /v1/commands`: [`apply_keyed`](Self::apply_keyed) under a new key —
    /// applied once, however often it had to be sent.
    ///
    /// # Errors
    /// As [`apply_keyed`](Self::apply_keyed); [`ClientError::changed_nothing`] says
    /// whether the command is known not to have been applied.
    pub async fn apply(&self, command: &Command) -> Result<u64, ClientError> {
        self.apply_keyed(command, &new_write_key())
            .await
            .map(|w| w.index)
    }

    /// `POST /v1/jobs` with Nomad's `{"Job": …}`: registers `job`, or updates its
    /// definition (type and groups; status, version and indexes are the store's to
    /// set, and a dead job registered again runs again). Applied once, under a new
    /// write key.
    ///
    /// # Errors
    /// 400 for a job the input rules refuse (a duplicate group, an empty plugin id).
    pub async fn register_job(&self, job: &Job) -> Result<JobWriteResponse, ClientError> {
        let mut shape = NomadJob::from(job);
        shape.stop = false;
        let body = serde_json::to_vec(&serde_json::json!({ "Job": shape })).map_err(|e| {
            ClientError::Decode {
                url: self.base.clone(),
                reason: e.to_string(),
            }
        })?;
        self.write_keyed(Method::POST, "/v1/jobs", &[], Some(body), &new_write_key())
            .await
            .map(|(answer, _)| answer)
    }

    /// `DELETE /v1/job/<id>?namespace=`: stops the job (status dead, the row kept;
    /// it expects no plugin instance any more).
    ///
    /// # Errors
    /// 404 `JobNotFound` for an unknown job.
    pub async fn stop_job(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<JobWriteResponse, ClientError> {
        self.delete_job(namespace, id, false).await
    }

    /// `DELETE /v1/job/<id>?namespace=&purge=true`: deletes the job (its allocations
    /// stay until collected).
    ///
    /// # Errors
    /// 404 `JobNotFound` for an unknown job.
    pub async fn purge_job(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<JobWriteResponse, ClientError> {
        self.delete_job(namespace, id, true).await
    }

    async fn delete_job(
        &self,
        namespace: &str,
        id: &str,
        purge: bool,
    ) -> Result<JobWriteResponse, ClientError> {
        let path = format!("/v1/job/{}", path_segment(id));
        let query = [
            ("namespace", namespace),
            ("purge", if purge { "true" } else { "false" }),
        ];
        self.write_keyed(Method::DELETE, &path, &query, None, &new_write_key())
            .await
            .map(|(answer, _)| answer)
    }
}
