//! The resolvers and verifiers the rustls configs hold: each reads the current material
//! at every handshake, so a reload takes effect from the next one; and the check that
//! a dialed peer holds a server's certificate, whatever address was dialed.

use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::Shared;
use super::checks::{NotAServer, check_server_role};

fn no_ca_error() -> rustls::Error {
    rustls::Error::General("no CA configured".to_owned())
}

/// Serves (server side) and presents (client side) the current certificate.
#[derive(Debug)]
pub(super) struct CurrentCert {
    pub(super) shared: Arc<Shared>,
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
pub(super) struct FixedCert(pub(super) Arc<CertifiedKey>);

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
pub(super) struct CurrentClientVerifier {
    pub(super) shared: Arc<Shared>,
    pub(super) mandatory: bool,
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
/// of the name that was dialed: the name exactly, and the serverAuth usage listed
/// (`checks::check_server_role`, as for `Tls::peer_role`).
#[derive(Debug)]
pub(super) struct ServerRoleVerifier {
    pub(super) shared: Arc<Shared>,
}

impl ServerRoleVerifier {
    /// The rustls error a dialing server reports for a peer that is not a server.
    fn refusal_error(&self, end_entity: &CertificateDer<'_>, refusal: NotAServer) -> rustls::Error {
        let error = match refusal {
            NotAServer::NoServerAuth => CertificateError::InvalidPurpose,
            NotAServer::NotTheRoleName => CertificateError::NotValidForNameContext {
                expected: self.shared.role.clone(),
                presented: webpki::EndEntityCert::try_from(end_entity)
                    .map(|cert| cert.valid_dns_names().map(str::to_owned).collect())
                    .unwrap_or_default(),
            },
            NotAServer::Refused(e) => CertificateError::Other(rustls::OtherError(Arc::new(e))),
        };
        rustls::Error::InvalidCertificate(error)
    }
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
        // rustls's verifier first, for its errors (unknown issuer, expiry, ...) as any
        // TLS client reports them; it lets a wildcard name and a certificate without
        // usages through, so the server role check follows. That verifies the chain a
        // second time: once per connection between servers, which are long-lived.
        let verified = ca.server_verifier.verify_server_cert(
            end_entity,
            intermediates,
            &self.shared.role,
            ocsp_response,
            now,
        )?;
        check_server_role(
            end_entity,
            intermediates,
            &ca.roots,
            self.shared.algorithms(),
            &self.shared.role_name,
            now,
        )
        .map_err(|refusal| self.refusal_error(end_entity, refusal))?;
        Ok(verified)
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
