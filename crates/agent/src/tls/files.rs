//! Reading the TLS files: certificates, a private key that must match its certificate,
//! a CA bundle; each failure a [`TlsError`] naming the file.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;

use super::checks::check_own_cert;
use super::{CaMaterial, Material, TlsError, TlsFiles, provider};

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

/// A private key file must be readable by its owner only, as the cluster key's must:
/// a key others can read is a key others may hold.
fn private_to_its_owner(path: &Path) -> Result<(), TlsError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(TlsError::KeyReadableByOthers {
                path: path.to_owned(),
                mode,
            });
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// The certificate chain at `cert` with the key at `key`, checked to belong together.
pub(super) fn read_key_pair(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs = read_certs(cert_path)?;
    private_to_its_owner(key_path)?;
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

pub(super) fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
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

/// All the files of `files`, checked to belong together and the certificate to be
/// one peers accept at `now` (`check_own_cert`): what `Tls::load` and `Tls::reload`
/// make current, or the first reason not to.
pub(super) fn read_material(
    files: &TlsFiles,
    provider: &Arc<CryptoProvider>,
    now: UnixTime,
) -> Result<Material, TlsError> {
    let key = read_key_pair(&files.cert, &files.key, provider)?;
    let roots = match &files.ca {
        None => None,
        Some(path) => Some((path, read_roots(path)?)),
    };
    check_own_cert(
        &files.cert,
        &key.cert,
        roots
            .as_ref()
            .map(|(path, roots)| (path.as_path(), &**roots)),
        &provider.signature_verification_algorithms,
        now,
    )?;
    let ca = match roots {
        None => None,
        Some((path, roots)) => {
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
                WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
                    .build()
                    .map_err(bad_ca)?;
            Some(CaMaterial {
                roots,
                client_verifier,
                server_verifier,
            })
        }
    };
    Ok(Material { key, ca })
}
