//! Certificates peers would refuse, refused on load and on reload; the server role
//! given only for the serverAuth usage and the exact role name.

use super::*;

/// An acceptor serving `cert` with none of the agent's checks: a peer the agent's own
/// `Tls::load` would refuse to become, for the server-to-server verifier's tests.
fn raw_acceptor(cert: &IssuedCert) -> tokio_rustls::TlsAcceptor {
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap();
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der(&cert.cert_pem)], key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// The certificate the agent behind `acceptor` serves now.
async fn served(
    acceptor: &tokio_rustls::TlsAcceptor,
    cli: &Arc<ClientConfig>,
) -> CertificateDer<'static> {
    handshake(acceptor.clone(), cli.clone(), "localhost")
        .await
        .client
        .unwrap()
}

#[tokio::test]
async fn reload_refuses_a_certificate_peers_would_refuse_and_keeps_serving_the_old() {
    let pki = Pki::new("schedstate test CA");
    let first = pki.issue(&server_kind());
    let files = pki.files("agent", &first);
    let agent = Tls::load(TlsOptions::new(files.clone())).unwrap();
    let acceptor = agent.acceptor();
    let peer_config = agent.server_client_config().unwrap();
    let cli = client_config(Some(&pki.ca_path), None).unwrap();
    assert_eq!(served(&acceptor, &cli).await, der(&first.cert_pem));

    let foreign = Pki::new("foreign CA");
    let bad = [
        ("expired", pki.issue_dated(-30, -1)),
        ("not valid yet", pki.issue_dated(1, 30)),
        ("from another CA", foreign.issue(&server_kind())),
        ("CLI (clientAuth only)", pki.issue(&CertKind::Cli)),
    ];
    for (what, cert) in &bad {
        pki.write("agent", cert);
        let err = agent.reload().unwrap_err();
        match (*what, &err) {
            ("expired", TlsError::CertificateExpired { path, .. })
            | ("not valid yet", TlsError::CertificateNotYetValid { path, .. })
            | ("CLI (clientAuth only)", TlsError::CertificateNotForServing { path }) => {
                assert_eq!(*path, files.cert, "{what}");
            }
            ("from another CA", TlsError::CertificateNotFromCa { cert, ca, reason }) => {
                assert_eq!(*cert, files.cert);
                assert_eq!(ca, files.ca.as_ref().unwrap());
                assert!(
                    reason.contains("not issued by a CA of the bundle"),
                    "{reason}"
                );
            }
            _ => panic!("{what}: {err:?}"),
        }
        // The message names the file, never the key.
        let message = err.to_string();
        assert!(
            message.contains(&*files.cert.to_string_lossy()),
            "{message}"
        );
        assert!(!message.contains("PRIVATE KEY") && !message.contains(&cert.key_pem[40..80]));
        // The old certificate is still what every new handshake gets.
        assert_eq!(
            served(&acceptor, &cli).await,
            der(&first.cert_pem),
            "{what}"
        );
    }

    // A new CA bundle without the certificate issued by it: the (still current)
    // certificate does not verify against the new bundle, so neither is taken.
    let peer = pki.server("peer", false);
    pki.write("agent", &first);
    let rotated = Pki::new("rotated CA");
    std::fs::write(&pki.ca_path, rotated.ca.cert_pem()).unwrap();
    assert!(
        matches!(agent.reload(), Err(TlsError::CertificateNotFromCa { .. })),
        "a CA bundle that does not issue the certificate"
    );
    assert_eq!(served(&acceptor, &cli).await, der(&first.cert_pem));
    // The old CA is still the one trusted: a peer of the old CA is still a server.
    let out = handshake(peer.acceptor(), peer_config.clone(), "localhost").await;
    out.client.unwrap();
    let certs = Some(vec![der(&pki.issue(&server_kind()).cert_pem)]);
    assert_eq!(agent.peer_role(certs.as_deref()), PeerRole::Server);

    // Good files again: taken.
    std::fs::write(&pki.ca_path, pki.ca.cert_pem()).unwrap();
    let second = pki.issue(&server_kind());
    pki.write("agent", &second);
    agent.reload().unwrap();
    assert_eq!(served(&acceptor, &cli).await, der(&second.cert_pem));
}

#[test]
fn load_refuses_a_certificate_peers_would_refuse() {
    let pki = Pki::new("schedstate test CA");
    let foreign = Pki::new("foreign CA");
    let expired = pki.issue_dated(-30, -1);
    let early = pki.issue_dated(1, 30);
    let cli = pki.issue(&CertKind::Cli);
    let alien = foreign.issue(&server_kind());

    let files = pki.files("expired", &expired);
    let err = Tls::load(TlsOptions::new(files.clone())).unwrap_err();
    assert!(
        matches!(&err, TlsError::CertificateExpired { path, .. } if *path == files.cert),
        "{err:?}"
    );
    assert!(err.to_string().contains("expired at"), "{err}");
    let files = pki.files("early", &early);
    let err = Tls::load(TlsOptions::new(files)).unwrap_err();
    assert!(
        matches!(err, TlsError::CertificateNotYetValid { .. }),
        "{err:?}"
    );
    let err = Tls::load(TlsOptions::new(pki.files("cli", &cli))).unwrap_err();
    assert!(
        matches!(err, TlsError::CertificateNotForServing { .. }),
        "{err:?}"
    );
    let err = Tls::load(TlsOptions::new(pki.files("alien", &alien))).unwrap_err();
    assert!(
        matches!(err, TlsError::CertificateNotFromCa { .. }),
        "{err:?}"
    );

    // Without a CA the dates and the usage are still checked; the issuer cannot be.
    let no_ca = |stem: &str, cert: &IssuedCert| TlsFiles {
        ca: None,
        ..pki.files(stem, cert)
    };
    let err = Tls::load(TlsOptions::new(no_ca("expired", &expired))).unwrap_err();
    assert!(
        matches!(err, TlsError::CertificateExpired { .. }),
        "{err:?}"
    );
    let err = Tls::load(TlsOptions::new(no_ca("early", &early))).unwrap_err();
    assert!(
        matches!(err, TlsError::CertificateNotYetValid { .. }),
        "{err:?}"
    );
    let err = Tls::load(TlsOptions::new(no_ca("cli", &cli))).unwrap_err();
    assert!(
        matches!(err, TlsError::CertificateNotForServing { .. }),
        "{err:?}"
    );
    Tls::load(TlsOptions::new(no_ca("alien", &alien))).unwrap();
}

#[tokio::test]
async fn the_server_role_needs_server_auth_and_the_exact_name() {
    let pki = Pki::new("schedstate test CA");
    let agent = pki.server("agent", false);
    let acceptor = agent.acceptor();
    let both = || {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    };
    let not_servers = [
        (
            "wildcard",
            pki.issue_named(&["*.global.schedstate"], both()),
        ),
        (
            "clientAuth only",
            pki.issue_named(
                &["server.global.schedstate"],
                vec![ExtendedKeyUsagePurpose::ClientAuth],
            ),
        ),
        (
            "no usages listed",
            pki.issue_named(&["server.global.schedstate"], vec![]),
        ),
        (
            "a longer name",
            pki.issue_named(&["x.server.global.schedstate"], both()),
        ),
    ];
    for (what, cert) in &not_servers {
        // As a client of the agent's port: accepted, as a client.
        let (c, k) = pki.write("peer", cert);
        let config = client_config(Some(&pki.ca_path), Some((&c, &k))).unwrap();
        let out = handshake(acceptor.clone(), config, "localhost").await;
        let certs = out.server.unwrap();
        assert!(certs.is_some(), "{what}");
        assert_eq!(
            agent.peer_role(certs.as_deref()),
            PeerRole::Client,
            "{what}"
        );
    }
    // The exact name, any case, with the usages `tls cert create --server` gives.
    let server = pki.issue_named(&["localhost", "SERVER.Global.schedstate"], both());
    let certs = Some(vec![der(&server.cert_pem)]);
    assert_eq!(agent.peer_role(certs.as_deref()), PeerRole::Server);
    let certs = Some(vec![der(&pki.issue(&server_kind()).cert_pem)]);
    assert_eq!(agent.peer_role(certs.as_deref()), PeerRole::Server);

    // Dialed as a server (Raft RPCs): each refused by the server-to-server verifier.
    let config = agent.server_client_config().unwrap();
    for (what, cert) in &not_servers {
        let out = handshake(raw_acceptor(cert), config.clone(), "localhost").await;
        match (*what, tls_error(out.client)) {
            (
                "wildcard" | "a longer name",
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForNameContext { expected, .. },
                ),
            ) => assert_eq!(
                expected,
                ServerName::try_from("server.global.schedstate").unwrap()
            ),
            (
                "clientAuth only" | "no usages listed",
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::InvalidPurpose
                    | rustls::CertificateError::InvalidPurposeContext { .. },
                ),
            ) => {}
            (what, e) => panic!("{what}: {e:?}"),
        }
    }
    let out = handshake(raw_acceptor(&server), config, "localhost").await;
    out.client.unwrap();
}
