//! The TLS material in handshakes over in-memory pipes.

use super::*;
use crate::certs::{Ca, CertKind, IssuedCert};
use rcgen::ExtendedKeyUsagePurpose;
use rustls::pki_types::pem::PemObject;
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

    /// A certificate with the server's names and usages, valid from `from` to `to`
    /// (days from now, negative in the past).
    fn issue_dated(&self, from: i64, to: i64) -> IssuedCert {
        let now = time::OffsetDateTime::now_utc();
        self.ca
            .issue_unchecked(
                &["server.global.schedstate", "localhost"],
                vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ],
                now + time::Duration::days(from),
                now + time::Duration::days(to),
            )
            .unwrap()
    }

    /// A certificate valid for a day with `dns` names and `ekus` usages only.
    fn issue_named(&self, dns: &[&str], ekus: Vec<ExtendedKeyUsagePurpose>) -> IssuedCert {
        let now = time::OffsetDateTime::now_utc();
        self.ca
            .issue_unchecked(
                dns,
                ekus,
                now - time::Duration::hours(1),
                now + time::Duration::days(1),
            )
            .unwrap()
    }

    /// Writes `cert` as `<stem>.pem`/`<stem>-key.pem` (overwriting, for reloads).
    fn write(&self, stem: &str, cert: &IssuedCert) -> (PathBuf, PathBuf) {
        let cert_path = self.dir.path().join(format!("{stem}.pem"));
        let key_path = self.dir.path().join(format!("{stem}-key.pem"));
        std::fs::write(&cert_path, &cert.cert_pem).unwrap();
        std::fs::write(&key_path, &cert.key_pem).unwrap();
        owner_only(&key_path);
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
        rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext { .. })
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
    owner_only(&files.key);
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
    let err = Tls::load(TlsOptions::new(files.clone())).unwrap_err();
    assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err:?}");
    // A key others can read is refused, as the cluster key is, before it is read.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_b, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = Tls::load(TlsOptions::new(files)).unwrap_err();
        assert!(
            matches!(err, TlsError::KeyReadableByOthers { mode: 0o640, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("chmod 600"), "{err}");
        owner_only(&key_b);
    }
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
    let cert_as_key = pki.dir.path().join("cert-as-key.pem");
    std::fs::copy(&cert, &cert_as_key).unwrap();
    owner_only(&cert_as_key);
    let err = Tls::load(TlsOptions::new(TlsFiles {
        key: cert_as_key,
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
    owner_only(&garbage);
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
    let (cert, key) = crate::certs::write_pem_files(pki.dir.path(), "ca-copy", &pki.ca).unwrap();
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

/// Makes `path` readable by its owner only, as a private key file must be.
fn owner_only(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

mod refusals;
