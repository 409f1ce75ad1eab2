//! TLS for the agent's port and between servers (rustls with the `ring` provider),
//! reloadable without restarting.
//!
//! Design:
//! - [`Tls`] holds the current material — this agent's certificate and key, and the
//!   verifiers built from the CA bundle — behind a `RwLock<Arc<Material>>`.
//!   [`Tls::reload`] reads the files again and swaps the `Arc`; a failed reload keeps
//!   the old material.
//! - Both [`Tls::load`] and [`Tls::reload`] refuse a certificate the agent's peers
//!   would refuse: expired, not valid yet, not usable to serve TLS, or not issued by
//!   the CA bundle read with it (`checks.rs`). Serving it would cut the agent off from
//!   every client and server; refusing it on SIGHUP keeps the old certificate served.
//! - The rustls configs are built once, and their certificate resolvers and verifiers
//!   are small objects that read the *current* material at each handshake. So an
//!   acceptor or client config handed out before a reload serves the new certificate
//!   and trusts the new CA from the next handshake on; established connections keep
//!   what they negotiated. The server keeps no resumption state, so every handshake
//!   verifies the client against the current CA.
//! - Roles are Nomad's: a certificate of the CA is a server's iff it lists the
//!   serverAuth extended key usage and names [`server_role_name`]
//!   (`server.<region>.schedstate`) exactly among its DNS names — a wildcard such as
//!   `*.<region>.schedstate` does not make a server, nor does a clientAuth-only
//!   certificate with the name. [`Tls::peer_role`] tells the HTTP layer what a
//!   connected peer is; [`Tls::server_client_config`] makes a server accept only
//!   another server as the peer it dials, whatever address it dialed.
//! - The crypto provider is passed explicitly to every builder, so nothing depends on
//!   a process-wide default provider being installed.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::NoServerSessionStorage;
use rustls::server::danger::ClientCertVerifier;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ServerConfig};

mod checks;
mod files;
mod verifiers;

pub(crate) use files::{KeyCheckError, key_matches_cert};
use files::{read_key_pair, read_material, read_roots};
use verifiers::{CurrentCert, CurrentClientVerifier, FixedCert, ServerRoleVerifier};

/// The region of an agent whose configuration names none.
pub const DEFAULT_REGION: &str = "global";

/// The one application protocol the agent speaks (HTTP/1.1, Raft RPCs included).
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The DNS name (subject alternative name) that marks a certificate as a server's in
/// `region`: `server.<region>.schedstate`, like Nomad's `server.<region>.nomad`. It
/// must be among the certificate's DNS names as is (a wildcard does not count), and
/// the certificate must list the serverAuth extended key usage.
pub fn server_role_name(region: &str) -> String {
    format!("server.{region}.schedstate")
}

/// The PEM files of an agent's TLS material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This agent's certificate chain, end-entity certificate first.
    pub cert: PathBuf,
    /// The private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA bundle peers' certificates must chain to. Without it, client
    /// certificates are not requested and servers cannot call each other over TLS.
    pub ca: Option<PathBuf>,
}

/// How the agent uses TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// The PEM files.
    pub files: TlsFiles,
    /// Require a client certificate (chained to the CA) on every connection to the
    /// agent's port. Needs a CA. Off, a certificate is optional but verified if sent.
    pub verify_clients: bool,
    /// The region, for the server role name ([`DEFAULT_REGION`] by default).
    pub region: String,
}

impl TlsOptions {
    /// Options for `files`, with client certificates optional and the default region.
    pub fn new(files: TlsFiles) -> TlsOptions {
        TlsOptions {
            files,
            verify_clients: false,
            region: DEFAULT_REGION.to_owned(),
        }
    }
}

/// What the peer of a connection to the agent's port proved to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    /// No client certificate (or no CA configured to verify one).
    Anonymous,
    /// A certificate chained to the CA, but not a server's.
    Client,
    /// A certificate chained to the CA, listing the serverAuth extended key usage and
    /// naming [`server_role_name`] of this agent's region exactly (no wildcard): another
    /// server.
    Server,
}

/// Why TLS material could not be loaded or a config built.
///
/// Messages name files, never their contents: no key material is ever included.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A certificate file is not valid PEM.
    #[error("{path}: invalid PEM: {reason}")]
    BadPem {
        /// The file.
        path: PathBuf,
        /// What is wrong (from the certificate file only).
        reason: String,
    },
    /// The certificate file holds no certificate.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The end-entity certificate cannot be parsed.
    #[error("{path}: invalid certificate: {reason}")]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// What rustls/webpki reported.
        reason: String,
    },
    /// This agent's certificate is past its notAfter date: nobody would accept it.
    #[error(
        "{path}: the certificate expired at {}; not serving it",
        humantime::format_rfc3339_seconds(*not_after)
    )]
    CertificateExpired {
        /// The certificate file.
        path: PathBuf,
        /// Its notAfter date.
        not_after: std::time::SystemTime,
    },
    /// This agent's certificate is before its notBefore date (or this machine's clock
    /// is behind): nobody would accept it yet.
    #[error(
        "{path}: the certificate is not valid before {}; not serving it",
        humantime::format_rfc3339_seconds(*not_before)
    )]
    CertificateNotYetValid {
        /// The certificate file.
        path: PathBuf,
        /// Its notBefore date.
        not_before: std::time::SystemTime,
    },
    /// This agent's certificate lists extended key usages without serverAuth (a CLI
    /// certificate, say): no TLS client would accept it from a server.
    #[error("{path}: the certificate is not for TLS servers (no serverAuth usage)")]
    CertificateNotForServing {
        /// The certificate file.
        path: PathBuf,
    },
    /// This agent's certificate does not verify against the CA bundle read with it.
    #[error("{cert}: the certificate does not verify against the CA bundle {ca}: {reason}")]
    CertificateNotFromCa {
        /// The certificate file.
        cert: PathBuf,
        /// The CA bundle.
        ca: PathBuf,
        /// What webpki reported (about the certificates, never the key).
        reason: String,
    },
    /// The key file holds no private key.
    #[error("{path} holds no PEM private key")]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key file's key cannot be read or is of an unsupported kind.
    #[error("{path}: the private key is malformed or of an unsupported kind")]
    BadKey {
        /// The file.
        path: PathBuf,
    },
    /// The key file can be read by other users than its owner.
    #[error("{path}: mode {mode:o} lets other users read the private key; chmod 600 it")]
    KeyReadableByOthers {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The private key is not the key of the certificate.
    #[error("the key in {key} does not belong to the certificate in {cert}")]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The CA bundle is unusable.
    #[error("CA bundle {path}: {reason}")]
    BadCa {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `verify_clients` was asked for without a CA to verify them against.
    #[error("verifying client certificates needs a CA bundle")]
    VerifyClientsWithoutCa,
    /// A CA is needed (server-to-server config, [`client_config`]) and none was given.
    #[error("no CA bundle configured")]
    NoCa,
    /// The region does not make a valid DNS name for the server role.
    #[error("region {0:?} does not make a valid server role name")]
    BadRegion(String),
    /// rustls refused to build a config.
    #[error("TLS configuration: {0}")]
    Config(rustls::Error),
}

/// The TLS material of an agent, reloadable. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Tls {
    inner: Arc<Inner>,
}

struct Inner {
    opts: TlsOptions,
    shared: Arc<Shared>,
    server_config: Arc<ServerConfig>,
    /// `None` without a CA: servers cannot verify each other then.
    peer_client_config: Option<Arc<ClientConfig>>,
}

/// What the resolvers and verifiers inside the configs read at each handshake.
struct Shared {
    provider: Arc<CryptoProvider>,
    role: ServerName<'static>,
    /// `role` as text, for the exact comparison with a certificate's DNS names.
    role_name: String,
    current: RwLock<Arc<Material>>,
}

impl Shared {
    fn current(&self) -> Arc<Material> {
        self.current.read().clone()
    }

    fn algorithms(&self) -> &WebPkiSupportedAlgorithms {
        &self.provider.signature_verification_algorithms
    }
}

/// One generation of files, parsed.
struct Material {
    key: Arc<CertifiedKey>,
    ca: Option<CaMaterial>,
}

struct CaMaterial {
    /// The CA bundle, for the server role check (`checks::check_server_role`).
    roots: Arc<RootCertStore>,
    client_verifier: Arc<dyn ClientCertVerifier>,
    server_verifier: Arc<WebPkiServerVerifier>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("options", &self.inner.opts)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The material holds the private key: show only the role.
        f.debug_struct("Shared")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// Reads the certificate chain, key and CA bundle of `opts` and builds the agent's
    /// configs. Fails on unreadable files, a missing certificate or key, a key that is
    /// not the certificate's, an unusable CA bundle, `verify_clients` without a CA, or
    /// a certificate peers would refuse: expired, not valid yet, without serverAuth
    /// usage, or (with a CA bundle) not verifying against it.
    pub fn load(opts: TlsOptions) -> Result<Tls, TlsError> {
        if opts.verify_clients && opts.files.ca.is_none() {
            return Err(TlsError::VerifyClientsWithoutCa);
        }
        let role_name = server_role_name(&opts.region);
        let role = ServerName::try_from(role_name.clone())
            .map_err(|_| TlsError::BadRegion(opts.region.clone()))?;
        let provider = provider();
        let material = read_material(&opts.files, &provider, UnixTime::now())?;
        let shared = Arc::new(Shared {
            provider: provider.clone(),
            role,
            role_name,
            current: RwLock::new(Arc::new(material)),
        });

        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?;
        let builder = if opts.files.ca.is_some() {
            builder.with_client_cert_verifier(Arc::new(CurrentClientVerifier {
                shared: shared.clone(),
                mandatory: opts.verify_clients,
            }))
        } else {
            builder.with_no_client_auth()
        };
        let mut server = builder.with_cert_resolver(Arc::new(CurrentCert {
            shared: shared.clone(),
        }));
        server.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        // A resumed session skips certificate verification; without resumption a
        // client certificate is checked against the current CA at every connection.
        // Connections are long-lived (keep-alive), so full handshakes cost little.
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;

        let peer_client_config = match opts.files.ca {
            Some(_) => {
                let mut client = ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(TlsError::Config)?
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ServerRoleVerifier {
                        shared: shared.clone(),
                    }))
                    .with_client_cert_resolver(Arc::new(CurrentCert {
                        shared: shared.clone(),
                    }));
                client.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
                Some(Arc::new(client))
            }
            None => None,
        };

        Ok(Tls {
            inner: Arc::new(Inner {
                opts,
                shared,
                server_config: Arc::new(server),
                peer_client_config,
            }),
        })
    }

    /// Reads the files again and, if all of them are good, makes them the material of
    /// every new handshake (through configs built before as well). On error the old
    /// material stays in use and the error is returned for the caller to log. Refused
    /// like at [`load`](Self::load): a certificate that is expired, not valid yet,
    /// without serverAuth usage or not verifying against the (new) CA bundle — the
    /// old certificate goes on being served rather than one that nobody accepts.
    pub fn reload(&self) -> Result<(), TlsError> {
        let material = read_material(
            &self.inner.opts.files,
            &self.inner.shared.provider,
            UnixTime::now(),
        )?;
        *self.inner.shared.current.write() = Arc::new(material);
        Ok(())
    }

    /// The options this was loaded with.
    pub fn options(&self) -> &TlsOptions {
        &self.inner.opts
    }

    /// Whether a CA bundle is configured (client certificates are requested, and
    /// servers can call each other).
    pub fn has_ca(&self) -> bool {
        self.inner.opts.files.ca.is_some()
    }

    /// The rustls server config of the agent's port: this agent's certificate, ALPN
    /// `http/1.1`, client certificates verified against the CA (required iff
    /// `verify_clients`), none requested without a CA.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.inner.server_config.clone()
    }

    /// A tokio acceptor over [`server_config`](Self::server_config).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.server_config())
    }

    /// What the peer of an accepted connection is, from the certificates rustls
    /// verified during its handshake (`ServerConnection::peer_certificates`).
    ///
    /// Only certificates from a handshake on [`server_config`](Self::server_config)
    /// may be passed: the handshake verified them as a client's; here they are
    /// verified again as a server's (chain to the current CA, serverAuth usage listed,
    /// the role name exactly). A reload between the handshake and this call can only
    /// make the answer stricter (a certificate of a CA no longer trusted is a client).
    pub fn peer_role(&self, certs: Option<&[CertificateDer<'_>]>) -> PeerRole {
        if !self.has_ca() {
            // No certificate was requested, so none was verified.
            return PeerRole::Anonymous;
        }
        let Some((end_entity, intermediates)) = certs.and_then(|c| c.split_first()) else {
            return PeerRole::Anonymous;
        };
        let shared = &self.inner.shared;
        let current = shared.current();
        let Some(ca) = current.ca.as_ref() else {
            return PeerRole::Client;
        };
        match checks::check_server_role(
            end_entity,
            intermediates,
            &ca.roots,
            shared.algorithms(),
            &shared.role_name,
            UnixTime::now(),
        ) {
            Ok(()) => PeerRole::Server,
            // Verified against the CA by the handshake, but not a server's.
            Err(_) => PeerRole::Client,
        }
    }

    /// The client config one server uses to call another (Raft RPCs, forwarded
    /// requests): presents this agent's certificate, and accepts the peer only if its
    /// certificate chains to the CA and is a server's as for [`peer_role`](Self::peer_role)
    /// (serverAuth usage, [`server_role_name`] of this region exactly) — whatever name
    /// or address was dialed, so addresses need not be in the certificates. ALPN `http/1.1`. Needs a CA ([`TlsError::NoCa`]).
    pub fn server_client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        self.inner.peer_client_config.clone().ok_or(TlsError::NoCa)
    }
}

/// A client config for the CLI and API clients: verifies the agent's certificate
/// against the CA bundle at `ca` for the name the caller dials (usual hostname/IP
/// verification), and presents `client_cert` (certificate and key files) if given.
/// ALPN `http/1.1`.
///
/// The CA is required ([`TlsError::NoCa`] for `None`): agents use a private CA, so the
/// system roots would never verify them, and trusting anything is not offered.
pub fn client_config(
    ca: Option<&Path>,
    client_cert: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let ca = ca.ok_or(TlsError::NoCa)?;
    let provider = provider();
    let roots = read_roots(ca)?;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_root_certificates(roots);
    let mut config = match client_cert {
        Some((cert, key)) => {
            let key = read_key_pair(cert, key, &provider)?;
            builder.with_client_cert_resolver(Arc::new(FixedCert(key)))
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests;
