//! The agent's outgoing HTTP — Raft RPCs, reads proxied to the leader, the bootstrap
//! probe, and the [`Client`](crate::Client) — over one HTTP client library (reqwest)
//! whose TLS is always a rustls config built here with the `ring` provider: the
//! server-to-server config (mutual TLS, peers checked for the server role) between
//! agents, the CLI's config for clients, and a config that trusts nothing for plain
//! `http://`, so that no process-wide crypto provider is ever needed.

use std::sync::Arc;

use rustls::ClientConfig;

use crate::tls::{Tls, TlsError, no_tls_client_config};

/// How one agent dials the others: the scheme and the TLS config.
#[derive(Clone, Debug)]
pub(crate) struct PeerDialer {
    tls: Option<Arc<ClientConfig>>,
}

impl PeerDialer {
    /// Plain HTTP without `tls`; with it, HTTPS presenting this server's certificate
    /// and taking only peers holding a server certificate of the cluster's CA.
    ///
    /// # Errors
    /// TLS without a CA: servers could not verify each other.
    pub(crate) fn new(tls: Option<&Tls>) -> Result<PeerDialer, TlsError> {
        let tls = tls.map(Tls::server_client_config).transpose()?;
        Ok(PeerDialer { tls })
    }

    /// `http` or `https`.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// A client builder with this dialer's TLS.
    pub(crate) fn builder(&self) -> reqwest::ClientBuilder {
        builder(self.tls.as_deref())
    }
}

/// A reqwest builder over `tls` (or a config that trusts nothing, for `http://`).
pub(crate) fn builder(tls: Option<&ClientConfig>) -> reqwest::ClientBuilder {
    let config = tls.cloned().unwrap_or_else(no_tls_client_config);
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .https_only(false)
}
