//! [`Client`]: the HTTP API from Rust — what the CLI's `--address` commands, the
//! cluster demo, the tests and the benchmark use.

use std::time::Duration;

use axum::body::Bytes;
use hyper::{HeaderMap, Method, StatusCode, Uri};
use schedstate::model::{AllocListStub, Allocation, CsiPlugin, CsiVolume, Job, Node};
use serde::de::DeserializeOwned;

use crate::api::nomad::{
    NomadAllocListStub, NomadAllocation, NomadCsiPlugin, NomadCsiVolume, NomadJob, NomadNode,
    ShapeError,
};
use crate::api::{
    AclBootstrapRequest, AclTokenRequest, AclTokenView, AgentHealth, AgentSelf, ErrorBody,
    INDEX_HEADER, PeerChange, PeerChangeDone, PluginListStub, RaftConfiguration, TOKEN_HEADER,
    WriteResponse,
};
use crate::outbound::{Answer, HttpClient, HttpError};

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
            headers.push(("content-type", "application/json"));
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

    /// `GET /v1/nodes` (whole nodes: `?full`).
    pub async fn nodes(&self, opts: ReadOptions) -> Result<Indexed<Vec<Node>>, ClientError> {
        self.list_as::<NomadNode, Node>("/v1/nodes", &[], opts)
            .await
    }

    /// `GET /v1/node/<id>`.
    pub async fn node(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Node>>, ClientError> {
        let path = format!("/v1/node/{}", path_segment(id));
        self.get_as::<NomadNode, Node>(&path, &[], opts).await
    }

    /// `GET /v1/node/<id>/allocations`.
    pub async fn node_allocations(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Vec<Allocation>>>, ClientError> {
        let path = format!("/v1/node/{}/allocations", path_segment(id));
        let r = self.get::<Vec<NomadAllocation>>(&path, &[], opts).await?;
        let value = r
            .value
            .map(|list| {
                list.into_iter()
                    .map(|a| Allocation::try_from(a).map_err(|e| self.shape_error(&path, &e)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Indexed {
            value,
            index: r.index,
        })
    }

    /// `GET /v1/allocations?namespace=` (every namespace when `None`; whole
    /// allocations: `?full`).
    pub async fn allocations(
        &self,
        namespace: Option<&str>,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<Allocation>>, ClientError> {
        let ns = namespace.unwrap_or("*");
        self.list_as::<NomadAllocation, Allocation>("/v1/allocations", &[("namespace", ns)], opts)
            .await
    }

    /// `GET /v1/allocation/<id>`.
    pub async fn allocation(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Allocation>>, ClientError> {
        let path = format!("/v1/allocation/{}", path_segment(id));
        self.get_as::<NomadAllocation, Allocation>(&path, &[], opts)
            .await
    }

    /// `GET /v1/plugins` (whole plugins, summed up as list rows).
    pub async fn plugins(
        &self,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<PluginListStub>>, ClientError> {
        let r = self
            .list_as::<NomadCsiPlugin, CsiPlugin>("/v1/plugins", &[], opts)
            .await?;
        Ok(Indexed {
            value: r.value.iter().map(PluginListStub::of).collect(),
            index: r.index,
        })
    }

    /// `GET /v1/plugin/csi/<id>`: the plugin with its allocations filled in.
    pub async fn plugin(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<CsiPlugin>>, ClientError> {
        let path = format!("/v1/plugin/csi/{}", path_segment(id));
        self.get_as::<NomadCsiPlugin, CsiPlugin>(&path, &[], opts)
            .await
    }

    /// `GET /v1/volumes?namespace=&prefix=` (every namespace when `namespace` is
    /// `None`): denormalized, secrets redacted.
    pub async fn volumes(
        &self,
        namespace: Option<&str>,
        prefix: Option<&str>,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<CsiVolume>>, ClientError> {
        let mut extra = vec![("namespace", namespace.unwrap_or("*"))];
        if let Some(p) = prefix {
            extra.push(("prefix", p));
        }
        self.list_as::<NomadCsiVolume, CsiVolume>("/v1/volumes", &extra, opts)
            .await
    }

    /// `GET /v1/volume/csi/<id>?namespace=`: denormalized, secrets redacted.
    pub async fn volume(
        &self,
        namespace: &str,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<CsiVolume>>, ClientError> {
        let path = format!("/v1/volume/csi/{}", path_segment(id));
        self.get_as::<NomadCsiVolume, CsiVolume>(&path, &[("namespace", namespace)], opts)
            .await
    }

    /// `GET /v1/jobs?namespace=` (every namespace when `None`; whole jobs: `?full`),
    /// in (namespace, id) order.
    pub async fn jobs(
        &self,
        namespace: Option<&str>,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<Job>>, ClientError> {
        let ns = namespace.unwrap_or("*");
        self.list_as::<NomadJob, Job>("/v1/jobs", &[("namespace", ns)], opts)
            .await
    }

    /// `GET /v1/job/<id>?namespace=`: answers with the job's modify index, so a
    /// blocking read with it wakes on a write of this job only.
    pub async fn job(
        &self,
        namespace: &str,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Job>>, ClientError> {
        let path = format!("/v1/job/{}", path_segment(id));
        self.get_as::<NomadJob, Job>(&path, &[("namespace", namespace)], opts)
            .await
    }

    /// `GET /v1/job/<id>/allocations?namespace=`: the job's allocations as stubs
    /// (`None` when neither the job nor an allocation of it exists).
    pub async fn job_allocations(
        &self,
        namespace: &str,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Vec<AllocListStub>>>, ClientError> {
        let path = format!("/v1/job/{}/allocations", path_segment(id));
        let r = self
            .get::<Vec<NomadAllocListStub>>(&path, &[("namespace", namespace)], opts)
            .await?;
        let value = r
            .value
            .map(|list| {
                list.into_iter()
                    .map(|a| {
                        Allocation::try_from(a)
                            .map(|a| AllocListStub::new(std::sync::Arc::new(a)))
                            .map_err(|e| self.shape_error(&path, &e))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Indexed {
            value,
            index: r.index,
        })
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

    /// `GET /v1/status/leader`: the leader's address, if the server knows one.
    pub async fn leader(&self) -> Result<Option<String>, ClientError> {
        let (s, _): (String, _) = self
            .call_ok(
                Method::GET,
                "/v1/status/leader",
                &[],
                None,
                request_timeout(None),
            )
            .await?;
        Ok((!s.is_empty()).then_some(s))
    }

    /// `GET /v1/status/peers`: the voters' addresses.
    pub async fn peers(&self) -> Result<Vec<String>, ClientError> {
        let r = self
            .get_list::<Vec<String>>("/v1/status/peers", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }

    /// `GET /v1/operator/raft/configuration`.
    pub async fn raft_configuration(&self) -> Result<RaftConfiguration, ClientError> {
        let r = self
            .get_list::<RaftConfiguration>(
                "/v1/operator/raft/configuration",
                &[],
                ReadOptions::default(),
            )
            .await?;
        Ok(r.value)
    }

    /// `POST /v1/operator/raft/peer`: waits as long as the agent may take to answer
    /// ([`PeerChange::answer_within`]: an added server's catch-up wait and every
    /// step's deadline), so that the answer, not a timeout here, says what happened.
    pub async fn change_peer(&self, change: &PeerChange) -> Result<PeerChangeDone, ClientError> {
        let body = serde_json::to_vec(change).map_err(|e| ClientError::Decode {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        self.post_json("/v1/operator/raft/peer", body, Some(change.answer_within()))
            .await
    }

    /// `GET /v1/operator/snapshot`: the whole state as a snapshot file (the store's
    /// `SCHEDSNP` format), with the index it holds. Consistent unless `stale`.
    pub async fn snapshot(&self, stale: bool) -> Result<Indexed<Vec<u8>>, ClientError> {
        let query: &[(&str, &str)] = if stale { &[("stale", "")] } else { &[] };
        let (answer, url) = self
            .call(
                Method::GET,
                "/v1/operator/snapshot",
                query,
                None,
                request_timeout(None),
                None,
            )
            .await?;
        if answer.status != StatusCode::OK {
            return Err(Self::error(answer, url));
        }
        Ok(Indexed {
            index: Self::index_of(&answer.headers),
            value: answer.body.to_vec(),
        })
    }

    /// `GET /v1/agent/self`: the server's id, leader, term and last applied index.
    /// (Nomad's shape; schedstate's numbers are its `stats.schedstate`.)
    pub async fn agent_self(&self) -> Result<AgentSelf, ClientError> {
        #[derive(serde::Deserialize)]
        struct Stats {
            schedstate: AgentSelf,
        }
        #[derive(serde::Deserialize)]
        struct Nomad {
            stats: Stats,
        }
        let r = self
            .get_list::<Nomad>("/v1/agent/self", &[], ReadOptions::default())
            .await?;
        Ok(r.value.stats.schedstate)
    }

    /// `GET /v1/regions`.
    pub async fn regions(&self) -> Result<Vec<String>, ClientError> {
        let r = self
            .get_list::<Vec<String>>("/v1/regions", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }

    /// `GET /v1/metrics?format=prometheus`: Prometheus text.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let query = [("format", "prometheus")];
        let (answer, url) = self
            .call(
                Method::GET,
                "/v1/metrics",
                &query,
                None,
                request_timeout(None),
                None,
            )
            .await?;
        if answer.status != StatusCode::OK {
            return Err(Self::error(answer, url));
        }
        String::from_utf8(answer.body.to_vec()).map_err(|e| ClientError::Decode {
            url,
            reason: e.to_string(),
        })
    }

    /// `GET /v1/agent/health` (no token needed).
    pub async fn health(&self) -> Result<AgentHealth, ClientError> {
        let r = self
            .get_list::<AgentHealth>("/v1/agent/health", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }

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
