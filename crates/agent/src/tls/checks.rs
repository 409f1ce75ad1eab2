//! What the agent checks of certificates beyond what rustls checks in a handshake:
//! - that its own certificate is one its peers will accept before it is served (in
//!   its validity period, usable to serve TLS, issued by the CA bundle), so that a bad
//!   file given at start or on SIGHUP is refused with its reason instead of served to
//!   peers that all refuse it;
//! - that a peer's certificate is a server's: the serverAuth usage named explicitly and
//!   the server role name exactly among its DNS names. A handshake accepts wildcards
//!   and certificates without the usage extension; the server role is worth more
//!   (Raft RPCs) than what a wildcard or a client certificate of the CA should get.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::RootCertStore;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use webpki::{EndEntityCert, KeyUsage};

use super::TlsError;
use crate::ca_cert::read_end_entity_facts;

/// A date of a certificate, for messages. Dates before the epoch (which no certificate
/// of ours has) show as the epoch.
fn instant(unix_seconds: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix_seconds.max(0).unsigned_abs())
}

/// Checks this agent's own certificate chain before it is served: `chain[0]` (read
/// from `cert_path`) must be valid at `now`, must not exclude serverAuth from its
/// extended key usages, and, with a CA bundle (`ca`: its path and roots), must chain
/// to it through the rest of `chain`, as the agent's clients and peers will verify.
/// Without a CA only the end-entity certificate's own properties can be checked.
pub(super) fn check_own_cert(
    cert_path: &Path,
    chain: &[CertificateDer<'_>],
    ca: Option<(&Path, &RootCertStore)>,
    algorithms: &WebPkiSupportedAlgorithms,
    now: UnixTime,
) -> Result<(), TlsError> {
    let Some((end_entity, intermediates)) = chain.split_first() else {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_owned(),
        });
    };
    let bad = |reason: String| TlsError::BadCertificate {
        path: cert_path.to_owned(),
        reason,
    };
    // Read by our own walk rather than by webpki's chain verification, so that the
    // dates are checked without a CA as well, and reported as such.
    let facts = read_end_entity_facts(end_entity)
        .ok_or_else(|| bad("unreadable validity or extensions".to_owned()))?;
    let now_secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    if now_secs < facts.not_before {
        return Err(TlsError::CertificateNotYetValid {
            path: cert_path.to_owned(),
            not_before: instant(facts.not_before),
        });
    }
    if now_secs > facts.not_after {
        return Err(TlsError::CertificateExpired {
            path: cert_path.to_owned(),
            not_after: instant(facts.not_after),
        });
    }
    if facts.server_auth == Some(false) {
        // Every client verifying the agent (rustls, like any TLS stack) refuses it.
        return Err(TlsError::CertificateNotForServing {
            path: cert_path.to_owned(),
        });
    }
    let Some((ca_path, roots)) = ca else {
        return Ok(());
    };
    let cert = EndEntityCert::try_from(end_entity).map_err(|e| bad(e.to_string()))?;
    // What rustls's verifiers (the CLI's, the other servers') will check: the chain to
    // the CA, every certificate of it in its validity period, serverAuth if listed.
    cert.verify_for_usage(
        algorithms.all,
        &roots.roots,
        intermediates,
        now,
        KeyUsage::server_auth(),
        None,
        None,
    )
    .map_err(|e| TlsError::CertificateNotFromCa {
        cert: cert_path.to_owned(),
        ca: ca_path.to_owned(),
        reason: match e {
            webpki::Error::UnknownIssuer => "not issued by a CA of the bundle".to_owned(),
            other => format!("the chain does not verify: {other}"),
        },
    })?;
    Ok(())
}

/// Why a certificate chained to the CA is not a server's.
#[derive(Debug)]
pub(super) enum NotAServer {
    /// The chain, a validity period or the usage: what webpki reported.
    Refused(webpki::Error),
    /// The extended key usage extension is missing or does not list serverAuth.
    NoServerAuth,
    /// No DNS name of the certificate is exactly the server role name.
    NotTheRoleName,
}

/// Whether `end_entity` (sent with `intermediates`) is a server's certificate: chained
/// to `roots`, valid at `now`, serverAuth listed in its extended key usages (servers
/// serve TLS; a clientAuth-only certificate is a client's), and `role` (the server role
/// name) among its DNS names exactly — no wildcard matches, so a `*.<region>.schedstate`
/// certificate, whoever obtained it from the CA, is not a server's.
pub(super) fn check_server_role(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &RootCertStore,
    algorithms: &WebPkiSupportedAlgorithms,
    role: &str,
    now: UnixTime,
) -> Result<(), NotAServer> {
    let cert = EndEntityCert::try_from(end_entity).map_err(NotAServer::Refused)?;
    // `server_auth` is webpki's "serverAuth if the extension is present", applied to
    // every certificate of the path; intermediates often carry no usages, so requiring
    // the usage is done below for the end entity alone.
    cert.verify_for_usage(
        algorithms.all,
        &roots.roots,
        intermediates,
        now,
        KeyUsage::server_auth(),
        None,
        None,
    )
    .map_err(NotAServer::Refused)?;
    let facts =
        read_end_entity_facts(end_entity).ok_or(NotAServer::Refused(webpki::Error::BadDer))?;
    if facts.server_auth != Some(true) {
        return Err(NotAServer::NoServerAuth);
    }
    // webpki's `verify_is_valid_for_subject_name` matches wildcards; this is an exact
    // comparison (DNS names are case-insensitive), stricter than it, never looser.
    if !cert
        .valid_dns_names()
        .any(|name| name.eq_ignore_ascii_case(role))
    {
        return Err(NotAServer::NotTheRoleName);
    }
    Ok(())
}
