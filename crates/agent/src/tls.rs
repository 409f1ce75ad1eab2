//! TLS for the agent's port and between servers (rustls with the `ring` provider),
//! reloadable without restarting.
//!
//! Design:
//! - [`Tls`] holds the current material — this agent's certificate and key, and the
//!   verifiers built from the CA bundle — behind a `RwLock<Arc<Material>>`.
//!   [`Tls::reload`] reads the files again and swaps the `Arc`; a failed reload keeps
//!   the old material.
//! - The rustls configs are built once, and their certificate resolvers and verifiers
//!   are small objects that read the *current* material at each handshake. So an
//!   acceptor or client config handed out before a reload serves the new certificate
//!   and trusts the new CA from the next handshake on; established connections keep
//!   what they negotiated. The server keeps no resumption state, so every handshake
//!   verifies the client against the current CA.
//! - Roles are Nomad's: a certificate is a server's iff it is valid for the DNS name
//!   [`server_role_name`] (`server.<region>.schedstate`). [`Tls::peer_role`] tells the
//!   HTTP layer what a connected peer is; [`Tls::server_client_config`] makes a server
//!   accept only another server as the peer it dials, whatever address it dialed.
//! - The crypto provider is passed explicitly to every builder, so nothing depends on
//!   a process-wide default provider being installed.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{
    ClientHello, NoServerSessionStorage, ResolvesServerCert, WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};

/// The region of an agent whose configuration names none.
pub const DEFAULT_REGION: &str = "global";

/// The one application protocol the agent speaks (HTTP/1.1, Raft RPCs included).
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The DNS name (subject alternative name) that marks a certificate as a server's in
/// `region`: `server.<region>.schedstate`, like Nomad's `server.<region>.nomad`.
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
    /// A certificate chained to the CA, but not valid for the server role name.
    Client,
    /// A certificate chained to the CA and valid for [`server_role_name`] of this
    /// agent's region: another server.
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
    /// not the certificate's, an unusable CA bundle, or `verify_clients` without a CA.
    pub fn load(opts: TlsOptions) -> Result<Tls, TlsError> {
        if opts.verify_clients && opts.files.ca.is_none() {
            return Err(TlsError::VerifyClientsWithoutCa);
        }
        let role = ServerName::try_from(server_role_name(&opts.region))
            .map_err(|_| TlsError::BadRegion(opts.region.clone()))?;
        let provider = provider();
        let material = read_material(&opts.files, &provider)?;
        let shared = Arc::new(Shared {
            provider: provider.clone(),
            role,
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
    /// material stays in use and the error is returned.
    pub fn reload(&self) -> Result<(), TlsError> {
        let material = read_material(&self.inner.opts.files, &self.inner.shared.provider)?;
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
    /// may be passed: the chain is not verified again here.
    pub fn peer_role(&self, certs: Option<&[CertificateDer<'_>]>) -> PeerRole {
        if !self.has_ca() {
            // No certificate was requested, so none was verified.
            return PeerRole::Anonymous;
        }
        let Some(end_entity) = certs.and_then(|c| c.first()) else {
            return PeerRole::Anonymous;
        };
        match webpki::EndEntityCert::try_from(end_entity) {
            Ok(cert)
                if cert
                    .verify_is_valid_for_subject_name(&self.inner.shared.role)
                    .is_ok() =>
            {
                PeerRole::Server
            }
            // Verified against the CA, but not a server's.
            _ => PeerRole::Client,
        }
    }

    /// The client config one server uses to call another (Raft RPCs, forwarded
    /// requests): presents this agent's certificate, and accepts the peer only if its
    /// certificate chains to the CA and is valid for [`server_role_name`] of this
    /// region — whatever name or address was dialed, so addresses need not be in the
    /// certificates. ALPN `http/1.1`. Needs a CA ([`TlsError::NoCa`]).
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

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The certificate chain at `cert` with the key at `key`, checked to belong together.
fn read_key_pair(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs = read_certs(cert_path)?;
    let key_bytes = read_file(key_path)?;
    // The PEM error is dropped on purpose: it may quote a line of the key file.
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey {
            path: key_path.to_owned(),
        },
        _ => TlsError::BadKey {
            path: key_path.to_owned(),
        },
    })?;
    let signing_key =
        provider
            .key_provider
            .load_private_key(key)
            .map_err(|_| TlsError::BadKey {
                path: key_path.to_owned(),
            })?;
    let certified = CertifiedKey::new(certs, signing_key);
    match certified.keys_match() {
        // `Unknown`: the key cannot tell its public key; the handshake will fail
        // visibly if it is wrong.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(certified))
        }
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch {
            cert: cert_path.to_owned(),
            key: key_path.to_owned(),
        }),
        Err(e) => Err(TlsError::BadCertificate {
            path: cert_path.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// Why [`key_matches_cert`] could not compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyCheckError {
    BadKey,
    BadCert,
}

/// Whether `key` is the private key of `cert` (for `certs::Ca::load`).
pub(crate) fn key_matches_cert(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<bool, KeyCheckError> {
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|_| KeyCheckError::BadKey)?;
    match CertifiedKey::new(vec![cert], signing_key).keys_match() {
        Ok(()) => Ok(true),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => Ok(false),
        Err(rustls::Error::InconsistentKeys(_)) => Err(KeyCheckError::BadKey),
        Err(_) => Err(KeyCheckError::BadCert),
    }
}

fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let certs = read_certs(path).map_err(|e| match e {
        TlsError::NoCertificate { path } => TlsError::BadCa {
            path,
            reason: "no certificate in the file".to_owned(),
        },
        other => other,
    })?;
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

fn read_material(files: &TlsFiles, provider: &Arc<CryptoProvider>) -> Result<Material, TlsError> {
    let key = read_key_pair(&files.cert, &files.key, provider)?;
    let ca = match &files.ca {
        None => None,
        Some(path) => {
            let roots = read_roots(path)?;
            let bad_ca = |e: rustls::server::VerifierBuilderError| TlsError::BadCa {
                path: path.clone(),
                reason: e.to_string(),
            };
            // Whether a certificate is required is decided by `CurrentClientVerifier`;
            // this verifier only checks the certificates that are sent.
            let client_verifier =
                WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                    .build()
                    .map_err(bad_ca)?;
            let server_verifier =
                WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(bad_ca)?;
            Some(CaMaterial {
                client_verifier,
                server_verifier,
            })
        }
    };
    Ok(Material { key, ca })
}

fn no_ca_error() -> rustls::Error {
    rustls::Error::General("no CA configured".to_owned())
}

/// Serves (server side) and presents (client side) the current certificate.
#[derive(Debug)]
struct CurrentCert {
    shared: Arc<Shared>,
}

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.shared.current().key.clone())
    }
}

impl ResolvesClientCert for CurrentCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.shared.current().key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A client certificate loaded once (CLI/API clients).
#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesClientCert for FixedCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Verifies client certificates against the current CA.
#[derive(Debug)]
struct CurrentClientVerifier {
    shared: Arc<Shared>,
    mandatory: bool,
}

impl ClientCertVerifier for CurrentClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The hints would have to borrow from `self`, and the CA can change under it.
        // An empty list tells clients to send whatever certificate they have, which is
        // what our clients do anyway.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let current = self.shared.current();
        let ca = current.ca.as_ref().ok_or_else(no_ca_error)?;
        ca.client_verifier
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, self.shared.algorithms())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, self.shared.algorithms())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.shared.algorithms().supported_schemes()
    }
}

/// Verifies a dialed server against the current CA and the server role name, in place
/// of the name that was dialed.
#[derive(Debug)]
struct ServerRoleVerifier {
    shared: Arc<Shared>,
}

impl ServerCertVerifier for ServerRoleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let current = self.shared.current();
        let ca = current.ca.as_ref().ok_or_else(no_ca_error)?;
        ca.server_verifier.verify_server_cert(
            end_entity,
            intermediates,
            &self.shared.role,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, self.shared.algorithms())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, self.shared.algorithms())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.shared.algorithms().supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{Ca, CertKind, IssuedCert};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A CA and a directory to write certificates to.
    struct Pki {
        dir: tempfile::TempDir,
        ca: Ca,
        ca_path: PathBuf,
    }

    impl Pki {
        /// A CA named `name`: distinct names, so that a foreign chain is an unknown
        /// issuer rather than a bad signature.
        fn new(name: &str) -> Pki {
            let dir = tempfile::tempdir().unwrap();
            let ca = Ca::create(name, 30).unwrap();
            let ca_path = dir.path().join("ca.pem");
            std::fs::write(&ca_path, ca.cert_pem()).unwrap();
            Pki { dir, ca, ca_path }
        }

        fn issue(&self, kind: &CertKind) -> IssuedCert {
            self.ca.issue(kind, &[], &[], 1).unwrap()
        }

        /// Writes `cert` as `<stem>.pem`/`<stem>-key.pem` (overwriting, for reloads).
        fn write(&self, stem: &str, cert: &IssuedCert) -> (PathBuf, PathBuf) {
            let cert_path = self.dir.path().join(format!("{stem}.pem"));
            let key_path = self.dir.path().join(format!("{stem}-key.pem"));
            std::fs::write(&cert_path, &cert.cert_pem).unwrap();
            std::fs::write(&key_path, &cert.key_pem).unwrap();
            (cert_path, key_path)
        }

        fn files(&self, stem: &str, cert: &IssuedCert) -> TlsFiles {
            let (cert, key) = self.write(stem, cert);
            TlsFiles {
                cert,
                key,
                ca: Some(self.ca_path.clone()),
            }
        }

        /// An agent with a server certificate of region `global`.
        fn server(&self, stem: &str, verify_clients: bool) -> Tls {
            let cert = self.issue(&server_kind());
            Tls::load(TlsOptions {
                verify_clients,
                ..TlsOptions::new(self.files(stem, &cert))
            })
            .unwrap()
        }
    }

    fn server_kind() -> CertKind {
        CertKind::Server {
            region: DEFAULT_REGION.into(),
        }
    }

    /// The rustls error inside a handshake's I/O error.
    fn tls_error(result: Result<impl Sized, std::io::Error>) -> rustls::Error {
        let Err(e) = result else {
            panic!("the handshake succeeded");
        };
        e.get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
            .unwrap_or_else(|| panic!("not a TLS error: {e:?}"))
            .clone()
    }

    fn unknown_issuer() -> rustls::Error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    /// What each side of one handshake saw.
    struct Outcome {
        /// The server side: the client's certificates, or the handshake error.
        server: Result<Option<Vec<CertificateDer<'static>>>, std::io::Error>,
        /// The client side: the server's end-entity certificate, or the error.
        client: Result<CertificateDer<'static>, std::io::Error>,
    }

    /// One handshake in memory, then one byte each way so that a TLS 1.3 client
    /// learns whether the server accepted its certificate.
    async fn handshake(
        acceptor: tokio_rustls::TlsAcceptor,
        client: Arc<ClientConfig>,
        dial: &str,
    ) -> Outcome {
        let (c, s) = tokio::io::duplex(64 * 1024);
        let name = ServerName::try_from(dial.to_owned()).unwrap();
        let server = async move {
            let mut stream = acceptor.accept(s).await?;
            let certs = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await?;
            stream.write_all(&byte).await?;
            stream.flush().await?;
            Ok(certs)
        };
        let client = async move {
            let mut stream = tokio_rustls::TlsConnector::from(client)
                .connect(name, c)
                .await?;
            let seen = stream.get_ref().1.peer_certificates().unwrap()[0]
                .clone()
                .into_owned();
            stream.write_all(b"x").await?;
            stream.flush().await?;
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await?;
            Ok(seen)
        };
        let (server, client) = tokio::join!(server, client);
        Outcome { server, client }
    }

    #[tokio::test]
    async fn peer_roles() {
        let pki = Pki::new("schedstate test CA");
        let agent = pki.server("agent", false);
        let acceptor = agent.acceptor();

        // Another server, with its server-to-server config.
        let other = pki.server("other", false);
        let out = handshake(
            acceptor.clone(),
            other.server_client_config().unwrap(),
            "localhost",
        )
        .await;
        let certs = out.server.unwrap();
        assert_eq!(agent.peer_role(certs.as_deref()), PeerRole::Server);
        out.client.unwrap();

        // A client certificate, and a CLI one: chained to the CA, not a server's.
        for kind in [CertKind::Client, CertKind::Cli] {
            let (cert, key) = pki.write("client", &pki.issue(&kind));
            let config = client_config(Some(&pki.ca_path), Some((&cert, &key))).unwrap();
            let out = handshake(acceptor.clone(), config, "127.0.0.1").await;
            let certs = out.server.unwrap();
            assert!(certs.is_some());
            assert_eq!(
                agent.peer_role(certs.as_deref()),
                PeerRole::Client,
                "{kind:?}"
            );
        }

        // No certificate: anonymous while certificates are optional.
        let config = client_config(Some(&pki.ca_path), None).unwrap();
        let out = handshake(acceptor.clone(), config.clone(), "localhost").await;
        let certs = out.server.unwrap();
        assert_eq!(agent.peer_role(certs.as_deref()), PeerRole::Anonymous);

        // ... and refused when they are required.
        let strict = pki.server("strict", true);
        let out = handshake(strict.acceptor(), config, "localhost").await;
        assert_eq!(
            tls_error(out.server),
            rustls::Error::NoCertificatesPresented
        );
        assert!(out.client.is_err());

        // A server certificate of another region is only a client here.
        let west = pki.issue(&CertKind::Server {
            region: "west".into(),
        });
        let (cert, key) = pki.write("west", &west);
        let config = client_config(Some(&pki.ca_path), Some((&cert, &key))).unwrap();
        let certs = handshake(acceptor, config, "localhost")
            .await
            .server
            .unwrap();
        assert_eq!(agent.peer_role(certs.as_deref()), PeerRole::Client);
    }

    #[tokio::test]
    async fn client_cert_from_another_ca_is_refused() {
        let pki = Pki::new("schedstate test CA");
        let agent = pki.server("agent", false);
        let foreign = Pki::new("foreign CA");
        let (cert, key) = foreign.write("client", &foreign.issue(&server_kind()));
        // The client trusts our CA (to verify the agent) but presents a foreign cert.
        let config = client_config(Some(&pki.ca_path), Some((&cert, &key))).unwrap();
        let out = handshake(agent.acceptor(), config, "localhost").await;
        assert_eq!(tls_error(out.server), unknown_issuer());
    }

    #[tokio::test]
    async fn server_to_server_checks_the_role_not_the_dialed_name() {
        let pki = Pki::new("schedstate test CA");
        let dialer = pki.server("dialer", false);
        let config = dialer.server_client_config().unwrap();

        // A real server, dialed by names and addresses its certificate does not hold.
        let peer = pki.server("peer", false);
        for dial in ["node7.example.com", "10.1.2.3", "localhost"] {
            let out = handshake(peer.acceptor(), config.clone(), dial).await;
            out.client.unwrap();
            let certs = out.server.unwrap();
            assert_eq!(peer.peer_role(certs.as_deref()), PeerRole::Server);
        }

        // A peer whose certificate lacks the role (a client certificate, even one
        // naming the dialed host) is refused.
        let imposter = pki
            .ca
            .issue(&CertKind::Client, &["localhost".into()], &[], 1)
            .unwrap();
        let tls = Tls::load(TlsOptions::new(pki.files("imposter", &imposter))).unwrap();
        let out = handshake(tls.acceptor(), config.clone(), "localhost").await;
        assert!(matches!(
            tls_error(out.client),
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext {
                expected,
                ..
            }) if expected == ServerName::try_from("server.global.schedstate").unwrap()
        ));

        // A server certificate from another CA is refused.
        let foreign = Pki::new("foreign CA");
        let tls = foreign.server("foreign", false);
        let out = handshake(tls.acceptor(), config.clone(), "localhost").await;
        assert_eq!(tls_error(out.client), unknown_issuer());

        // The CLI config, by contrast, checks the dialed name.
        let cli = client_config(Some(&pki.ca_path), None).unwrap();
        let out = handshake(peer.acceptor(), cli.clone(), "node7.example.com").await;
        assert!(matches!(
            tls_error(out.client),
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. }
            )
        ));
        handshake(peer.acceptor(), cli, "localhost")
            .await
            .client
            .unwrap();
    }

    #[tokio::test]
    async fn reload_applies_to_configs_built_before() {
        let pki = Pki::new("schedstate test CA");
        let first = pki.issue(&server_kind());
        let files = pki.files("agent", &first);
        let agent = Tls::load(TlsOptions::new(files.clone())).unwrap();
        let acceptor = agent.acceptor();
        let peer_config = agent.server_client_config().unwrap();
        let cli = client_config(Some(&pki.ca_path), None).unwrap();

        let seen = handshake(acceptor.clone(), cli.clone(), "localhost").await;
        assert_eq!(seen.client.unwrap(), der(&first.cert_pem));

        // New certificate and key in the same files.
        let second = pki.issue(&server_kind());
        pki.write("agent", &second);
        agent.reload().unwrap();
        let seen = handshake(acceptor.clone(), cli.clone(), "localhost").await;
        assert_eq!(seen.client.unwrap(), der(&second.cert_pem));

        // A broken reload (key of another certificate) keeps the material in use.
        let third = pki.issue(&server_kind());
        std::fs::write(&files.key, &third.key_pem).unwrap();
        assert!(matches!(agent.reload(), Err(TlsError::KeyMismatch { .. })));
        let seen = handshake(acceptor.clone(), cli.clone(), "localhost").await;
        assert_eq!(seen.client.unwrap(), der(&second.cert_pem));

        // A new CA (and certificates from it): the old acceptor now refuses clients of
        // the old CA and the old server-to-server config trusts the new one.
        let rotated = Pki::new("rotated CA");
        let cert = rotated.issue(&server_kind());
        pki.write("agent", &cert);
        std::fs::write(&pki.ca_path, rotated.ca.cert_pem()).unwrap();
        agent.reload().unwrap();
        let (c, k) = pki.write("old-client", &pki.issue(&CertKind::Client));
        let old_client = client_config(Some(&rotated.ca_path), Some((&c, &k))).unwrap();
        let out = handshake(acceptor.clone(), old_client, "localhost").await;
        assert_eq!(tls_error(out.server), unknown_issuer());
        let new_peer = rotated.server("new-peer", false);
        let out = handshake(new_peer.acceptor(), peer_config, "localhost").await;
        out.client.unwrap();
        let certs = out.server.unwrap();
        assert_eq!(new_peer.peer_role(certs.as_deref()), PeerRole::Server);
    }

    #[test]
    fn load_errors() {
        let pki = Pki::new("schedstate test CA");
        let a = pki.issue(&server_kind());
        let b = pki.issue(&server_kind());
        let (cert, _) = pki.write("a", &a);
        let (_, key_b) = pki.write("b", &b);
        let files = TlsFiles {
            cert: cert.clone(),
            key: key_b.clone(),
            ca: None,
        };
        let err = Tls::load(TlsOptions::new(files)).unwrap_err();
        assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err:?}");
        let message = err.to_string();
        assert!(!message.contains("PRIVATE KEY") && !message.contains(&b.key_pem[40..80]));

        // verify_clients without a CA, and the server-to-server config without one.
        let files = pki.files("a", &a);
        let no_ca = TlsFiles {
            ca: None,
            ..files.clone()
        };
        let err = Tls::load(TlsOptions {
            verify_clients: true,
            ..TlsOptions::new(no_ca.clone())
        })
        .unwrap_err();
        assert!(matches!(err, TlsError::VerifyClientsWithoutCa));
        let tls = Tls::load(TlsOptions::new(no_ca)).unwrap();
        assert!(matches!(tls.server_client_config(), Err(TlsError::NoCa)));
        assert_eq!(
            tls.peer_role(Some(&[der(&a.cert_pem)])),
            PeerRole::Anonymous
        );
        assert!(matches!(client_config(None, None), Err(TlsError::NoCa)));

        // Missing file, no certificate, no key, garbage key, bad CA.
        let missing = pki.dir.path().join("missing.pem");
        let err = Tls::load(TlsOptions::new(TlsFiles {
            cert: missing.clone(),
            ..files.clone()
        }))
        .unwrap_err();
        assert!(matches!(&err, TlsError::Read { path, .. } if *path == missing));
        let empty = pki.dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        let err = Tls::load(TlsOptions::new(TlsFiles {
            cert: empty.clone(),
            ..files.clone()
        }))
        .unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err:?}");
        let err = Tls::load(TlsOptions::new(TlsFiles {
            key: cert.clone(),
            ..files.clone()
        }))
        .unwrap_err();
        assert!(matches!(err, TlsError::NoKey { .. }), "{err:?}");
        let garbage = pki.dir.path().join("garbage-key.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0IGJ5dGVz\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let err = Tls::load(TlsOptions::new(TlsFiles {
            key: garbage,
            ..files.clone()
        }))
        .unwrap_err();
        assert!(matches!(err, TlsError::BadKey { .. }), "{err:?}");
        assert!(!err.to_string().contains("c2VjcmV0"));
        let err = Tls::load(TlsOptions::new(TlsFiles {
            ca: Some(empty),
            ..files.clone()
        }))
        .unwrap_err();
        assert!(matches!(err, TlsError::BadCa { .. }), "{err:?}");
        let err = Tls::load(TlsOptions {
            region: "not a region".into(),
            ..TlsOptions::new(files)
        })
        .unwrap_err();
        assert!(matches!(err, TlsError::BadRegion(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_loaded_ca_issues_certificates_that_verify() {
        let pki = Pki::new("schedstate test CA");
        let (cert, key) =
            crate::certs::write_pem_files(pki.dir.path(), "ca-copy", &pki.ca).unwrap();
        let loaded = Ca::load(&cert, &key).unwrap();
        let issued = loaded.issue(&server_kind(), &[], &[], 1).unwrap();
        let agent = Tls::load(TlsOptions::new(pki.files("agent", &issued))).unwrap();
        let other = pki.server("other", false);
        let out = handshake(
            agent.acceptor(),
            other.server_client_config().unwrap(),
            "localhost",
        )
        .await;
        out.client.unwrap();
        // And the other way round: the loaded CA's certificate as a client.
        let out = handshake(
            other.acceptor(),
            agent.server_client_config().unwrap(),
            "localhost",
        )
        .await;
        assert_eq!(
            other.peer_role(out.server.unwrap().as_deref()),
            PeerRole::Server
        );
    }

    #[test]
    fn role_name() {
        assert_eq!(server_role_name("global"), "server.global.schedstate");
        assert_eq!(
            CertKind::Server {
                region: "eu".into()
            }
            .role_name(),
            server_role_name("eu")
        );
    }
}
