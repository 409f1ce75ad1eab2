//! [`Client`]: the HTTP API from Rust — what the CLI's `--address` commands, the
//! cluster demo, the tests and the benchmark use.
//!
//! Here the request itself (the URL, the token, the timeout, the error of an answer,
//! the index header); the calls in one file per group: `reads.rs` (the cluster's rows),
//! `writes.rs` (exactly once), `operator.rs` (Raft, snapshots, the agent), `acl.rs`.

use std::time::Duration;

use axum::body::Bytes;
use hyper::{HeaderMap, Method, StatusCode, Uri};
use serde::de::DeserializeOwned;

use crate::api::nomad::ShapeError;
use crate::api::{ErrorBody, INDEX_HEADER, TOKEN_HEADER};
use crate::outbound::{Answer, HttpClient, HttpError};

mod acl;
mod operator;
mod reads;
mod writes;

pub use writes::{Written, new_write_key};

/// Why a request to an agent failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not a usable base URL.
    #[error("bad agent address {address:?}: {reason}")]
    BadAddress {
        /// What was given.
        address: String,
        /// Why it is not usable.
        reason: String,
    },
    /// No answer (connection refused or reset, timeout). For a write, the outcome is
    /// unknown: the client's writes were sent again under their `Idempotency-Key`
    /// before this was returned; send it again under the same key, or read first.
    #[error("no answer from {url}: {cause}")]
    Transport {
        /// The request's URL.
        url: String,
        /// The innermost cause, for a person (`Connection refused (os error 111)`).
        cause: String,
        /// The HTTP client's error.
        #[source]
        source: HttpError,
    },
    /// The agent answered with an error status.
    #[error("{status} from {url}: {kind}: {message}")]
    Api {
        /// The request's URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error's kind ([`ErrorBody::kind`]).
        kind: String,
        /// Its message.
        message: String,
        /// For a refused command, the index of its no-op entry.
        index: Option<u64>,
    },
    /// The answer's body was not what the API promises.
    #[error("unreadable answer from {url}: {reason}")]
    Decode {
        /// The request's URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
}

impl ClientError {
    /// The HTTP status of an [`Api`](Self::Api) error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The kind of an [`Api`](Self::Api) error (`NodeNotFound`, `NoLeader`, …).
    pub fn kind(&self) -> Option<&str> {
        match self {
            ClientError::Api { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// Whether the request certainly changed nothing: the agent refused it before or
    /// instead of proposing it (4xx), or the connection was never made. A 503 or a
    /// dropped connection leaves a write's outcome unknown.
    pub fn changed_nothing(&self) -> bool {
        match self {
            ClientError::Api { status, .. } => (400..500).contains(status),
            ClientError::Transport { source, .. } => source.is_connect(),
            ClientError::BadAddress { .. } => true,
            ClientError::Decode { .. } => false,
        }
    }
}

/// How a read is made: blocking (`index` + `wait`) and/or stale.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Block until what the read depends on moves past this index (0: answer now).
    pub index: u64,
    /// How long to block at most (the server's default when `None`).
    pub wait: Option<Duration>,
    /// Answer from the server asked, without checking with the leader.
    pub stale: bool,
}

impl ReadOptions {
    /// A blocking read: answer once past `index`, or after `wait`.
    pub fn blocking(index: u64, wait: Duration) -> Self {
        ReadOptions {
            index,
            wait: Some(wait),
            stale: false,
        }
    }

    /// A stale read (from the server asked).
    pub fn stale() -> Self {
        ReadOptions {
            stale: true,
            ..ReadOptions::default()
        }
    }

    fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if self.index > 0 {
            q.push(("index", self.index.to_string()));
        }
        if let Some(w) = self.wait {
            q.push(("wait", format!("{}ms", w.as_millis())));
        }
        if self.stale {
            q.push(("stale", String::new()));
        }
        q
    }
}

/// The TLS files a client presents and trusts for `https://` agents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA certificate (PEM) the agents' certificates are checked against.
    pub ca_cert: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM), for agents that require one.
    pub client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// A read's value and the index it reflects.
#[derive(Debug, Clone, PartialEq)]
pub struct Indexed<T> {
    /// What was read.
    pub value: T,
    /// The `X-Schedstate-Index` of the answer.
    pub index: u64,
}

/// A client of one agent. Cheap to clone (clones share connections).
///
/// ```no_run
/// # async fn f() -> Result<(), schedstate_agent::ClientError> {
/// use schedstate::model::Node;
/// use schedstate::state::Command;
/// use schedstate_agent::{Client, ReadOptions};
///
/// let client = Client::new("http://127.0.0.1:4646", None)?;
/// let index = client.apply(&Command::UpsertNode { node: Node::new("n1", "dc1") }).await?;
/// let node = client.node("n1", ReadOptions::default()).await?;
/// assert!(node.index >= index && node.value.is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    http: HttpClient,
    base: String,
    token: Option<String>,
}

/// The largest answer read (a snapshot download of a large cluster is the biggest);
/// read as it arrives, never allocated from a claimed length.
const ANSWER_BYTES: usize = 4 << 30;

/// How long a request may take: a blocking read its wait (plus the server's jitter
/// of up to 1/16) and a margin; anything else a minute (a write during an election
/// waits for the new leader).
fn request_timeout(opts: Option<&ReadOptions>) -> Duration {
    const MARGIN: Duration = Duration::from_secs(5);
    match opts {
        Some(o) if o.index > 0 => {
            let wait = o.wait.unwrap_or(Duration::from_secs(300));
            wait + wait / 16 + MARGIN
        }
        _ => Duration::from_secs(60),
    }
}

fn path_segment(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

impl Client {
    /// A client of the agent at `address` (`http://host:port`; a bare `host:port`
    /// means http), sending `token` (an ACL token's secret) in `X-Schedstate-Token`
    /// when given.
    ///
    /// # Errors
    /// [`ClientError::BadAddress`]: not an http URL.
    pub fn new(address: &str, token: Option<String>) -> Result<Client, ClientError> {
        Client::with_tls(address, token, None)
    }

    /// A client of the agent at `address`, `http://` or `https://` (then checked
    /// against `tls`'s CA, presenting its client certificate if any).
    ///
    /// # Errors
    /// [`ClientError::BadAddress`]: not an http(s) URL, unreadable TLS files.
    pub fn with_tls(
        address: &str,
        token: Option<String>,
        tls: Option<&ClientTls>,
    ) -> Result<Client, ClientError> {
        let bad = |reason: &str| ClientError::BadAddress {
            address: address.to_string(),
            reason: reason.to_string(),
        };
        let trimmed = address.trim().trim_end_matches('/');
        let base = if trimmed.contains("://") {
            trimmed.to_string()
        } else {
            format!("http://{trimmed}")
        };
        let url: Uri = base
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        if url.host().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        let config = match (url.scheme_str().unwrap_or(""), tls) {
            ("http", _) => None,
            ("https", Some(tls)) => {
                let cert = tls
                    .client_cert
                    .as_ref()
                    .map(|(c, k)| (c.as_path(), k.as_path()));
                let config = crate::tls::client_config(tls.ca_cert.as_deref(), cert)
                    .map_err(|e| bad(&e.to_string()))?;
                Some(config)
            }
            ("https", None) => {
                return Err(bad(
                    "https:// needs the CA certificate that signed the agent's (--ca-cert or SCHEDSTATE_CACERT)",
                ));
            }
            (other, _) => return Err(bad(&format!("{other}:// is not http:// or https://"))),
        };
        let http = HttpClient::new(config, Duration::from_secs(5));
        Ok(Client { http, base, token })
    }

    /// The base URL requests go to.
    pub fn address(&self) -> &str {
        &self.base
    }

    /// `method path?query` with a JSON `body` (and an `Idempotency-Key`, for a
    /// write that has one), answered whole within `timeout`.
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
        timeout: Duration,
        key: Option<&str>,
    ) -> Result<(Answer, String), ClientError> {
        self.call_typed(method, path, query, body, "application/json", timeout, key)
            .await
    }

    /// As [`call`](Self::call), the body sent as `content_type`.
    #[allow(clippy::too_many_arguments)]
    async fn call_typed(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
        content_type: &str,
        timeout: Duration,
        key: Option<&str>,
    ) -> Result<(Answer, String), ClientError> {
        let mut url = format!("{}{path}", self.base);
        if !query.is_empty() {
            url.push('?');
            url.push_str(
                &form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(query)
                    .finish(),
            );
        }
        let mut headers = Vec::new();
        if let Some(t) = &self.token {
            headers.push((TOKEN_HEADER, t.as_str()));
        }
        if body.is_some() {
            headers.push(("content-type", content_type));
        }
        if let Some(key) = key {
            headers.push(("idempotency-key", key));
        }
        let body = body.map(Bytes::from).unwrap_or_default();
        match self
            .http
            .call(method, &url, &headers, body, ANSWER_BYTES, timeout)
            .await
        {
            Ok(answer) => Ok((answer, url)),
            Err(source) => Err(ClientError::Transport {
                url,
                cause: source.to_string(),
                source,
            }),
        }
    }

    /// A call whose answer must be 200; its body, decoded.
    async fn call_ok<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(T, HeaderMap), ClientError> {
        let (answer, url) = self.call(method, path, query, body, timeout, None).await?;
        if answer.status != StatusCode::OK {
            return Err(Self::error(answer, url));
        }
        let value = Self::body(&answer, &url)?;
        Ok((value, answer.headers))
    }

    fn error(answer: Answer, url: String) -> ClientError {
        let status = answer.status.as_u16();
        match serde_json::from_slice::<ErrorBody>(&answer.body) {
            Ok(body) => ClientError::Api {
                url,
                status,
                kind: body.kind,
                message: body.message,
                index: body.index,
            },
            Err(_) => ClientError::Api {
                url,
                status,
                kind: "Http".into(),
                message: String::from_utf8_lossy(&answer.body).into_owned(),
                index: None,
            },
        }
    }

    fn body<T: DeserializeOwned>(answer: &Answer, url: &str) -> Result<T, ClientError> {
        serde_json::from_slice(&answer.body).map_err(|e| ClientError::Decode {
            url: url.to_string(),
            reason: e.to_string(),
        })
    }

    fn index_of(headers: &HeaderMap) -> u64 {
        headers
            .get(INDEX_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// `GET path` with `opts`; a 404 is `None` when `missing_ok`.
    async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        extra: &[(&str, &str)],
        opts: ReadOptions,
    ) -> Result<Indexed<Option<T>>, ClientError> {
        let own = opts.query();
        let mut q: Vec<(&str, &str)> = own.iter().map(|(k, v)| (*k, v.as_str())).collect();
        q.extend_from_slice(extra);
        let (answer, url) = self
            .call(
                Method::GET,
                path,
                &q,
                None,
                request_timeout(Some(&opts)),
                None,
            )
            .await?;
        let index = Self::index_of(&answer.headers);
        match answer.status {
            StatusCode::OK => Ok(Indexed {
                value: Some(Self::body(&answer, &url)?),
                index,
            }),
            StatusCode::NOT_FOUND => {
                let e = Self::error(answer, url);
                // A 404 of a row the API did not find is an answer; one of an unknown
                // path is an error.
                if e.kind().is_some_and(|k| k.ends_with("NotFound")) {
                    Ok(Indexed { value: None, index })
                } else {
                    Err(e)
                }
            }
            _ => Err(Self::error(answer, url)),
        }
    }

    async fn get_list<T: DeserializeOwned>(
        &self,
        path: &str,
        extra: &[(&str, &str)],
        opts: ReadOptions,
    ) -> Result<Indexed<T>, ClientError> {
        let r = self.get::<T>(path, extra, opts).await?;
        match r.value {
            Some(value) => Ok(Indexed {
                value,
                index: r.index,
            }),
            None => Err(ClientError::Decode {
                url: format!("{}{path}", self.base),
                reason: "404 for a list".into(),
            }),
        }
    }

    /// A read in a Nomad shape `W`, as the model type `M` (404: `None`).
    async fn get_as<W, M>(
        &self,
        path: &str,
        extra: &[(&str, &str)],
        opts: ReadOptions,
    ) -> Result<Indexed<Option<M>>, ClientError>
    where
        W: DeserializeOwned,
        M: TryFrom<W, Error = ShapeError>,
    {
        let r = self.get::<W>(path, extra, opts).await?;
        let value = r
            .value
            .map(|w| M::try_from(w).map_err(|e| self.shape_error(path, &e)))
            .transpose()?;
        Ok(Indexed {
            value,
            index: r.index,
        })
    }

    /// A whole list (`?full`) in Nomad shape `W`, as model types `M`.
    async fn list_as<W, M>(
        &self,
        path: &str,
        extra: &[(&str, &str)],
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<M>>, ClientError>
    where
        W: DeserializeOwned,
        M: TryFrom<W, Error = ShapeError>,
    {
        let mut extra = extra.to_vec();
        extra.push(("full", "true"));
        let r = self.get_list::<Vec<W>>(path, &extra, opts).await?;
        let value = r
            .value
            .into_iter()
            .map(|w| M::try_from(w).map_err(|e| self.shape_error(path, &e)))
            .collect::<Result<_, _>>()?;
        Ok(Indexed {
            value,
            index: r.index,
        })
    }

    fn shape_error(&self, path: &str, e: &ShapeError) -> ClientError {
        ClientError::Decode {
            url: format!("{}{path}", self.base),
            reason: e.to_string(),
        }
    }

    /// POSTs a JSON `body` and reads a JSON answer; `within` replaces the client's
    /// request timeout for calls the agent may take longer to answer.
    async fn post_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
        within: Option<std::time::Duration>,
    ) -> Result<T, ClientError> {
        let timeout = within.unwrap_or_else(|| request_timeout(None));
        let (answer, _) = self
            .call_ok(Method::POST, path, &[], Some(body), timeout)
            .await?;
        Ok(answer)
    }
}
