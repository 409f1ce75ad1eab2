//! Creating a certificate authority and issuing the agents' certificates: what
//! `schedstate tls ca create` / `tls cert create`, the cluster demo and the tests use.
//!
//! The model is Nomad's: one private CA per cluster, and the *role* of a certificate is
//! carried by a DNS name in its subject alternative names. A server's certificate names
//! `server.<region>.schedstate` (see [`crate::tls::server_role_name`]); the agent grants
//! server rights (Raft RPCs) to a peer only for that name, whatever address it dials or
//! accepts from. Clients and CLI users get other names (a server role name is refused
//! for them), so a stolen client certificate cannot pose as a server; the agent also
//! wants the name exactly (no wildcard) and the serverAuth usage.
//!
//! Keys are ECDSA P-256 (small, fast, supported by every TLS stack). Key files are
//! created with mode 0600 from the start and existing files are never overwritten.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::{Duration, OffsetDateTime};

use crate::tls::server_role_name;

/// Why a CA or a certificate could not be created, loaded or written.
///
/// No variant carries key material: a key that does not parse is reported by path only.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file could not be created or written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file to be written exists already; it is left as it was.
    #[error("{path} exists already; not overwriting it")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// The CA certificate file is not a PEM certificate rcgen can read.
    #[error("{path} is not a PEM CA certificate")]
    BadCaCert {
        /// The file.
        path: PathBuf,
    },
    /// The CA key file is not a PEM private key rcgen can read (PKCS#8 ECDSA or Ed25519
    /// with the ring backend).
    #[error("{path} is not a usable PEM private key")]
    BadCaKey {
        /// The file.
        path: PathBuf,
    },
    /// The CA key is not the key of the CA certificate.
    #[error("the key in {key} does not belong to the certificate in {cert}")]
    CaKeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// A name given for a certificate is not a valid DNS name (or region).
    #[error("invalid name {0:?} for a certificate")]
    InvalidName(String),
    /// A server role name (`server.<region>.schedstate`) asked for in a certificate
    /// that is not a server's: a client or CLI certificate must never carry it.
    #[error("{0:?} is a server role name; only a server certificate may carry it")]
    ServerRoleNameForNonServer(String),
    /// `valid_days` was zero.
    #[error("a certificate must be valid for at least one day")]
    ZeroValidity,
    /// rcgen could not generate a key or sign a certificate.
    #[error("certificate generation failed: {0}")]
    Generate(rcgen::Error),
}

/// A certificate authority: its certificate and its key, able to issue certificates.
///
/// `Debug` shows the certificate only, never the key.
pub struct Ca {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// What a certificate is for: decides its names and extended key usages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertKind {
    /// An agent acting as a server of `region`: named `server.<region>.schedstate`,
    /// `localhost`, `127.0.0.1` and `::1`; usable to serve TLS and, because servers call
    /// each other (Raft RPCs, forwarded requests), as a client certificate too.
    Server {
        /// The region the server belongs to (`global` by default in the agent).
        region: String,
    },
    /// A client agent: named `client.global.schedstate`; client and server usage, like
    /// Nomad's client certificates.
    Client,
    /// A CLI or API user: named `cli.global.schedstate`; client usage only.
    Cli,
}

impl CertKind {
    /// The role name the certificate carries as its first DNS name and common name.
    pub fn role_name(&self) -> String {
        match self {
            CertKind::Server { region } => server_role_name(region),
            CertKind::Client => "client.global.schedstate".to_owned(),
            CertKind::Cli => "cli.global.schedstate".to_owned(),
        }
    }
}

/// A certificate issued by a [`Ca`], with its new private key, both PEM-encoded.
///
/// `Debug` shows the certificate only, never the key.
#[derive(Clone)]
pub struct IssuedCert {
    /// The certificate (PEM, one `CERTIFICATE` block).
    pub cert_pem: String,
    /// Its private key (PEM, PKCS#8). Secret: write it with [`write_pem_files`].
    pub key_pem: String,
}

impl std::fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// Something with a certificate and a key in PEM, written by [`write_pem_files`].
pub trait PemPair {
    /// The certificate, PEM.
    fn cert_pem(&self) -> &str;
    /// The private key, PEM. Secret.
    fn key_pem(&self) -> &str;
}

impl PemPair for IssuedCert {
    fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
    fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

impl PemPair for Ca {
    fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
    fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

fn new_key() -> Result<KeyPair, CertError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(CertError::Generate)
}

/// `not_before`/`not_after` for `valid_days` from now. `not_before` is an hour back so
/// that a peer whose clock is slightly behind still accepts a fresh certificate.
fn validity(params: &mut CertificateParams, valid_days: u32) -> Result<(), CertError> {
    if valid_days == 0 {
        return Err(CertError::ZeroValidity);
    }
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(i64::from(valid_days));
    Ok(())
}

/// Whether `name` has the form of [`server_role_name`] for some region.
fn is_server_role_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.strip_prefix("server.")
        .and_then(|rest| rest.strip_suffix(".schedstate"))
        .is_some_and(|region| !region.is_empty())
}

fn dns_san(name: &str) -> Result<SanType, CertError> {
    // webpki only matches syntactically valid DNS names; refuse others here rather than
    // issue a certificate that can never match.
    if rustls::pki_types::DnsName::try_from(name).is_err() {
        return Err(CertError::InvalidName(name.to_owned()));
    }
    let ia5 = name
        .to_owned()
        .try_into()
        .map_err(|_| CertError::InvalidName(name.to_owned()))?;
    Ok(SanType::DnsName(ia5))
}

impl Ca {
    /// Creates a new CA: a fresh P-256 key and a self-signed certificate named
    /// `common_name`, valid for `valid_days`, allowed to sign end-entity certificates
    /// only (path length 0).
    pub fn create(common_name: &str, valid_days: u32) -> Result<Ca, CertError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, valid_days)?;
        let key = new_key()?;
        let cert = params.self_signed(&key).map_err(CertError::Generate)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from its certificate and key files (PEM), to issue more certificates.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Ca, CertError> {
        let cert_pem = read_string(cert_path)?;
        let key_pem = read_string(key_path)?;
        let key = KeyPair::from_pem(&key_pem).map_err(|_| CertError::BadCaKey {
            path: key_path.to_owned(),
        })?;
        // The issued certificates must verify against this certificate: its public key
        // has to be the key's.
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|_| {
            CertError::BadCaCert {
                path: cert_path.to_owned(),
            }
        })?;
        let key_der =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| CertError::BadCaKey {
                path: key_path.to_owned(),
            })?;
        let identity = crate::ca_cert::read_ca_identity(&der);
        match crate::tls::key_matches_cert(der, key_der) {
            Ok(true) => {}
            Ok(false) => {
                return Err(CertError::CaKeyMismatch {
                    cert: cert_path.to_owned(),
                    key: key_path.to_owned(),
                });
            }
            Err(crate::tls::KeyCheckError::BadKey) => {
                return Err(CertError::BadCaKey {
                    path: key_path.to_owned(),
                });
            }
            Err(crate::tls::KeyCheckError::BadCert) => {
                return Err(CertError::BadCaCert {
                    path: cert_path.to_owned(),
                });
            }
        }
        let identity = identity.ok_or_else(|| CertError::BadCaCert {
            path: cert_path.to_owned(),
        })?;
        let mut params = CertificateParams::default();
        params.distinguished_name = identity.name;
        params.key_identifier_method = identity.key_id;
        let issuer = Issuer::new(params, key);
        Ok(Ca {
            cert_pem,
            key_pem,
            issuer,
        })
    }

    /// The CA certificate, PEM: what every agent and client trusts (`ca` file).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PEM. Secret.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Issues a certificate of `kind` with a new P-256 key, valid for `valid_days`, with
    /// `extra_dns` and `extra_ips` added to its subject alternative names (the addresses
    /// clients dial a server by, for instance).
    pub fn issue(
        &self,
        kind: &CertKind,
        extra_dns: &[String],
        extra_ips: &[IpAddr],
        valid_days: u32,
    ) -> Result<IssuedCert, CertError> {
        let role = kind.role_name();
        let mut sans = vec![dns_san(&role)?];
        let mut ips: Vec<IpAddr> = Vec::new();
        let ekus = match kind {
            CertKind::Server { .. } => {
                // A server is dialed locally by its own CLI and by tests.
                sans.push(dns_san("localhost")?);
                ips.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
                ips.push(IpAddr::V6(Ipv6Addr::LOCALHOST));
                vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ]
            }
            CertKind::Client => vec![
                ExtendedKeyUsagePurpose::ClientAuth,
                ExtendedKeyUsagePurpose::ServerAuth,
            ],
            CertKind::Cli => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        for name in extra_dns {
            // Client certificates also list serverAuth (like Nomad's), so this name
            // alone is what keeps one from being a server's (see `tls::checks`).
            if !matches!(kind, CertKind::Server { .. }) && is_server_role_name(name) {
                return Err(CertError::ServerRoleNameForNonServer(name.clone()));
            }
            let san = dns_san(name)?;
            if !sans.contains(&san) {
                sans.push(san);
            }
        }
        for ip in extra_ips {
            if !ips.contains(ip) {
                ips.push(*ip);
            }
        }
        sans.extend(ips.into_iter().map(SanType::IpAddress));

        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, role);
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = ekus;
        // Lets verifiers find the issuing key when a CA is rotated with a new key.
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, valid_days)?;
        self.sign(params)
    }

    /// Signs `params` (an end-entity certificate's) with a new P-256 key.
    fn sign(&self, params: CertificateParams) -> Result<IssuedCert, CertError> {
        let key = new_key()?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(CertError::Generate)?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Issues a certificate no `schedstate tls cert create` would: any DNS names (a
    /// wildcard included: they are not checked), any extended key usages (none at all
    /// for an empty list) and any validity period (expired, or not valid yet). For the
    /// tests of what the agent refuses.
    #[cfg(test)]
    pub(crate) fn issue_unchecked(
        &self,
        dns: &[&str],
        ekus: Vec<ExtendedKeyUsagePurpose>,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<IssuedCert, CertError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, dns.first().copied().unwrap_or("test"));
        params.distinguished_name = dn;
        for name in dns {
            let ia5 = (*name)
                .to_owned()
                .try_into()
                .map_err(|_| CertError::InvalidName((*name).to_owned()))?;
            params.subject_alt_names.push(SanType::DnsName(ia5));
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = ekus;
        params.use_authority_key_identifier_extension = true;
        params.not_before = not_before;
        params.not_after = not_after;
        self.sign(params)
    }
}

fn read_string(path: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|source| CertError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Writes `<dir>/<stem>.pem` (the certificate, mode 0644) and `<dir>/<stem>-key.pem`
/// (the key, mode 0600) and returns their paths.
///
/// Neither file may exist already ([`CertError::Exists`], checked for both before
/// either is written). The key file is created with mode 0600, so it is never readable
/// by others, not even between creation and a `chmod`. If writing the key fails after
/// the certificate was written, the certificate file is removed again.
pub fn write_pem_files(
    dir: &Path,
    stem: &str,
    pair: &impl PemPair,
) -> Result<(PathBuf, PathBuf), CertError> {
    let cert_path = dir.join(format!("{stem}.pem"));
    let key_path = dir.join(format!("{stem}-key.pem"));
    for path in [&cert_path, &key_path] {
        if path.symlink_metadata().is_ok() {
            return Err(CertError::Exists { path: path.clone() });
        }
    }
    write_new(&cert_path, pair.cert_pem(), 0o644)?;
    if let Err(e) = write_new(&key_path, pair.key_pem(), 0o600) {
        let _ = std::fs::remove_file(&cert_path);
        return Err(e);
    }
    Ok((cert_path, key_path))
}

/// Creates `path` (which must not exist: `create_new`, so a file or symlink put there
/// since the check is not followed or truncated) with `mode`, and writes `contents`.
fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), CertError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                CertError::Exists {
                    path: path.to_owned(),
                }
            } else {
                CertError::Write {
                    path: path.to_owned(),
                    source,
                }
            }
        })?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| CertError::Write {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_have_modes_and_are_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create("schedstate test CA", 30).unwrap();
        let (cert, key) = write_pem_files(dir.path(), "ca", &ca).unwrap();
        // The umask may clear bits of 0644 but never adds any.
        let cert_mode = std::fs::metadata(&cert).unwrap().permissions().mode() & 0o777;
        assert_eq!(cert_mode & !0o644, 0, "cert mode {cert_mode:o}");
        let key_mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(key_mode, 0o600);

        let issued = ca
            .issue(&CertKind::Cli, &[], &[], 1)
            .expect("issue a CLI cert");
        match write_pem_files(dir.path(), "ca", &issued) {
            Err(CertError::Exists { path }) => assert_eq!(path, cert),
            other => panic!("expected Exists, got {other:?}"),
        }
        // The CA's files are unchanged.
        assert_eq!(std::fs::read_to_string(&cert).unwrap(), ca.cert_pem());
        assert_eq!(std::fs::read_to_string(&key).unwrap(), ca.key_pem());

        // Only the key file exists: still refused, and the certificate is not written.
        std::fs::write(dir.path().join("x-key.pem"), "old").unwrap();
        assert!(matches!(
            write_pem_files(dir.path(), "x", &issued),
            Err(CertError::Exists { .. })
        ));
        assert!(!dir.path().join("x.pem").exists());
    }

    #[test]
    fn load_round_trips_and_refuses_a_foreign_key() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create("schedstate test CA", 30).unwrap();
        let (cert, key) = write_pem_files(dir.path(), "ca", &ca).unwrap();
        let loaded = Ca::load(&cert, &key).unwrap();
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        // Certificates issued by the loaded CA chain to the original certificate (the
        // handshake tests in `tls` check the chain; here, that issuing works).
        loaded
            .issue(
                &CertKind::Server {
                    region: "global".into(),
                },
                &["node1.example".into()],
                &["10.0.0.1".parse().unwrap()],
                1,
            )
            .unwrap();

        let other = Ca::create("other", 1).unwrap();
        let (_, other_key) = write_pem_files(dir.path(), "other", &other).unwrap();
        match Ca::load(&cert, &other_key) {
            Err(CertError::CaKeyMismatch { .. }) => {}
            other => panic!("expected CaKeyMismatch, got {other:?}"),
        }
        match Ca::load(&key, &key) {
            Err(CertError::BadCaCert { .. }) => {}
            other => panic!("expected BadCaCert, got {other:?}"),
        }
    }

    #[test]
    fn bad_names_and_zero_validity_are_refused() {
        let ca = Ca::create("schedstate test CA", 30).unwrap();
        assert!(matches!(
            ca.issue(&CertKind::Client, &["not a name".into()], &[], 1),
            Err(CertError::InvalidName(_))
        ));
        assert!(matches!(
            ca.issue(&CertKind::Client, &[], &[], 0),
            Err(CertError::ZeroValidity)
        ));
        // A client or CLI certificate never carries a server role name; a server's
        // may carry another region's.
        for kind in [CertKind::Client, CertKind::Cli] {
            for name in ["server.global.schedstate", "SERVER.west.Schedstate"] {
                assert!(matches!(
                    ca.issue(&kind, &[name.into()], &[], 1),
                    Err(CertError::ServerRoleNameForNonServer(n)) if n == name
                ));
            }
            ca.issue(&kind, &["server.example.com".into()], &[], 1)
                .unwrap();
        }
        ca.issue(
            &CertKind::Server {
                region: "global".into(),
            },
            &["server.west.schedstate".into()],
            &[],
            1,
        )
        .unwrap();
        let err = format!("{:?}", ca);
        assert!(!err.contains("PRIVATE KEY"));
    }
}
