//! The schedstate agent: a server process holding one replica of the state, serving a
//! Nomad-style HTTP API, talking Raft to the other agents over the same port.
//!
//! ```text
//!          HTTPS :4646 (one port; TLS optional)           the other agents
//!   ┌──────────────────────────────────────┐       ▲
//!   │ accept loop: limits, TLS handshake,  │       │ POST /v1/raft/rpc
//!   │ peer role → guard → ACL token+scope  │       │ (mutual TLS and/or the
//!   │ → consistency (leader; read index)   │       │  cluster key's MACs)
//!   ├──────────┬──────────┬────────┬───────┤       │
//!   │ reads    │ writes   │ events │ ops,  │  ── HttpTransport ──┘
//!   │ blocking │ propose_ │ stream │ acl   │
//!   │ queries  │ or_fwd   │        │       │
//!   └────┬─────┴────┬─────┴───┬────┴───────┘
//!        │          │         │ EventBuffer ◄── ApplyObserver (apply path)
//!        ▼          ▼         │ Metrics     ◄──┘
//!   schedstate_raft::Server (log on disk, state machine = StateStore, ACL tokens in it)
//! ```
//!
//! - [`Agent`] runs one server: [`Agent::start`] with an [`AgentConfig`], then
//!   [`Agent::shutdown`]. `schedstate agent` (the CLI) is this plus signals and logs.
//! - The API (paths after Nomad's): reads of nodes, allocations, plugins, volumes and
//!   jobs, all blocking queries (`?index=&wait=`) answered with `X-Schedstate-Index` (and
//!   `X-Nomad-Index`); consistent unless `?stale`. `POST /v1/commands` takes one
//!   [`Command`](schedstate::state::Command) as JSON; Nomad's own writes (node
//!   eligibility and drain, allocation stop, volume register/deregister, job
//!   register/stop/purge) take Nomad's bodies. `GET /v1/event/stream` streams
//!   committed writes as JSON lines. Status, Raft configuration, peers, snapshot and
//!   Prometheus metrics under `/v1/status`, `/v1/operator`, `/v1/metrics`; ACL tokens
//!   under `/v1/acl`. Every route but leader status, health and the one-time bootstrap
//!   needs a token with its scope (off only in `--dev`). Shapes beyond the model's own
//!   rows are in [`api`].
//! - [`tls`] holds the rustls material (reloaded on SIGHUP); [`certs`] makes a CA and
//!   certificates, or loads a CA (its name and key id read by `ca_cert.rs`).
//! - [`Client`] is the same API from Rust.
//!
//! Nothing here changes the rules or the replication: the store and `schedstate-raft`
//! do that; this crate is transport, process and presentation.

mod agent;
pub mod api;
mod ca_cert;
pub mod certs;
mod client;
mod cluster_key;
mod config;
mod events;
mod http;
mod metrics;
mod outbound;
mod process;
mod service;
pub mod tls;
mod transport;

pub use agent::{Agent, AgentError};
pub use certs::{Ca, CertError, CertKind, IssuedCert};
pub use client::{Client, ClientError, ClientTls, Indexed, ReadOptions, Written, new_write_key};
pub use cluster_key::{CLUSTER_AUTH_HEADER, ClusterKey, ClusterKeyError, MIN_KEY_BYTES};
pub use config::{AgentConfig, ConfigError, Limits, Peers};
pub use events::TopicFilter;
pub use outbound::HttpError;
pub use process::{OpenFileLimit, free_loopback_ports, raise_open_file_limit};
pub use tls::{PeerRole, Tls, TlsError, TlsFiles, TlsOptions};
pub use transport::{
    HttpTransport, MAX_RPC_BYTES, RAFT_RPC_CONTENT_TYPE, RAFT_RPC_PATH, TransportError,
};
