//! TLS on the client ports, on real processes, with certificates made at
//! run time: the ZooKeeper protocol on `secure_client_addr` beside the plain
//! port (a migration), the gRPC port with `[tls] grpc = true`, zkctl's
//! `--cacert`, and a certificate re-read on SIGHUP without dropping a session;
//! members in mutual TLS, each accepted only with a certificate that names
//! it, and the admin port over TLS.

use crate::support::{runtime, within, Ensemble, Settings};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use zabkeeper_client::{Client, ClientTls};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_proto::peer as peer_pb;
use zabkeeper_proto::peer::peer_client::PeerClient;
use zookeeper_client as zk;

/// A CA and a server certificate for localhost and 127.0.0.1 it signed.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "zabkeeper test CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("server key");
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let cert = rcgen::CertificateParams::new(names).expect("params").signed_by(&key, &issuer).expect("certificate");
    Pki { ca_pem: ca.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() }
}

impl Pki {
    /// Writes the member's certificate and key, and the CA, into `dir`.
    fn install(&self, dir: &Path) {
        std::fs::write(dir.join("ca.pem"), &self.ca_pem).expect("write CA");
        std::fs::write(dir.join("cert.pem"), &self.cert_pem).expect("write certificate");
        std::fs::write(dir.join("key.pem"), &self.key_pem).expect("write key");
    }

    fn client(&self) -> ClientTls {
        ClientTls { ca_pem: self.ca_pem.as_bytes().to_vec(), identity: None }
    }
}

/// A 3-member ensemble with TLS on gRPC and a TLS ZooKeeper port beside the
/// plain one; returns it and each member's secure address.
fn tls_ensemble(pki: &Pki) -> (Ensemble, Vec<String>) {
    let mut ensemble = Ensemble::configure(Settings { size: 3, ..Settings::default() });
    pki.install(ensemble.dir.path());
    let text = std::fs::read_to_string(&ensemble.config).expect("read config");
    let mut secure = Vec::new();
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if line.starts_with("client_addr") {
            let addr = format!("127.0.0.1:{}", crate::support::free_port());
            out.push_str(&format!("secure_client_addr = \"{addr}\"\n"));
            secure.push(addr);
        }
    }
    let dir = ensemble.dir.path().display().to_string();
    out.push_str(&format!(
        "\n[tls]\ncert_file = \"{dir}/cert.pem\"\nkey_file = \"{dir}/key.pem\"\nca_file = \"{dir}/ca.pem\"\ngrpc = true\n"
    ));
    std::fs::write(&ensemble.config, out).expect("write config");
    ensemble.start_all();
    (ensemble, secure)
}

async fn zk_tls(addr: &str, ca_pem: &str) -> Result<zk::Client, zk::Error> {
    let tls = zk::TlsOptions::new().with_pem_ca(ca_pem)?;
    let connector = zk::Client::connector().with_tls(tls).with_session_timeout(Duration::from_secs(20));
    within(20, connector.with_connection_timeout(Duration::from_secs(5)).secure_connect(addr)).await
}

#[test]
fn tls_client_ports_serve_every_client_and_reload_on_sighup() {
    let first = pki();
    let (ensemble, secure) = tls_ensemble(&first);
    let grpc = ensemble.grpc_all();
    let rt = runtime();
    let session = rt.block_on(within(60, async {
        // gRPC over TLS: the Rust client trusts the CA; a plain client cannot talk to it.
        let client =
            Client::connect(&grpc, crate::support::options().with_tls(first.client())).await.expect("TLS gRPC");
        client.create("/tls", b"over tls", CreateMode::Persistent, &Acl::open_unsafe()).await.expect("create");
        let plain = crate::support::options().with_connect_timeout(Duration::from_secs(2));
        assert!(Client::connect(&grpc, plain).await.is_err(), "plain gRPC must not reach a TLS port");

        // The ZooKeeper protocol over TLS (the zookeeper-client crate), and the plain port beside it.
        let zk = zk_tls(&secure[2], &first.ca_pem).await.expect("TLS ZooKeeper port");
        zk.sync("/tls").await.expect("sync");
        assert_eq!(zk.get_data("/tls").await.expect("read over TLS").0, b"over tls".to_vec());
        let plain_zk = zk::Client::connector().connect(&ensemble.zookeeper(&[1])).await.expect("plain port");
        plain_zk.sync("/tls").await.expect("sync");
        assert_eq!(plain_zk.get_data("/tls").await.expect("plain read").0, b"over tls".to_vec());
        (client, zk)
    }));

    // zkctl --cacert.
    let out = Command::new(crate::support::cli_binary())
        .args(["--server", &grpc, "--cacert"])
        .arg(ensemble.dir.path().join("ca.pem"))
        .args(["get", "/tls"])
        .output()
        .expect("run zkctl");
    assert!(out.status.success(), "zkctl over TLS: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "over tls");

    // A new CA and certificate, re-read on SIGHUP: new connections need the
    // new CA, and the sessions already open carry on.
    let second = pki();
    second.install(ensemble.dir.path());
    for member in &ensemble.members {
        let pid = member.pid().expect("running");
        let sent = Command::new("kill").args(["-HUP", &pid.to_string()]).status().expect("kill -HUP");
        assert!(sent.success());
    }
    rt.block_on(within(60, async {
        let (client, zk) = session;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let refreshed = zk_tls(&secure[0], &second.ca_pem).await;
            if refreshed.is_ok() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the new certificate was never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stale = crate::support::options().with_tls(first.client()).with_connect_timeout(Duration::from_secs(2));
        assert!(Client::connect(&grpc, stale).await.is_err(), "the old CA no longer verifies new connections");
        let fresh = Client::connect(&grpc, crate::support::options().with_tls(second.client())).await.expect("new CA");
        fresh.set_data("/tls", b"after reload", -1).await.expect("write after reload");
        client.sync("/tls").await.expect("the old gRPC session lives");
        assert_eq!(client.get_data("/tls").await.expect("old session reads").0, b"after reload".to_vec());
        zk.sync("/tls").await.expect("the old TLS ZooKeeper session lives");
        assert_eq!(zk.get_data("/tls").await.expect("old TLS session reads").0, b"after reload".to_vec());
    }));
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

#[test]
fn a_missing_certificate_stops_the_start_naming_the_file() {
    let ensemble = Ensemble::configure(Settings { size: 1, ..Settings::default() });
    let text = std::fs::read_to_string(&ensemble.config).expect("read config");
    let missing = ensemble.dir.path().join("absent.pem");
    let config = format!("{text}\n[tls]\ncert_file = \"{0}\"\nkey_file = \"{0}\"\ngrpc = true\n", missing.display());
    std::fs::write(&ensemble.config, config).expect("write config");
    let out = Command::new(crate::support::server_binary())
        .arg("--config")
        .arg(&ensemble.config)
        .output()
        .expect("run zabkeeper");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started without its certificate");
    assert!(err.contains("cert_file") && err.contains("absent.pem"), "{err}");
}

/// A CA that issues certificates for the names asked, each with its key.
struct Authority {
    ca_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Authority {
    fn new() -> Authority {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "zabkeeper ensemble CA");
        let ca = params.self_signed(&key).expect("CA certificate");
        Authority { ca_pem: ca.pem(), issuer: rcgen::Issuer::new(params, key) }
    }

    /// A certificate for `names` (DNS names or IPs) and its key, as PEM.
    fn issue(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names).expect("params").signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// A client certificate whose subject is `CN=<cn>,O=zabkeeper test`, and its key, as PEM.
    fn issue_subject(&self, cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "zabkeeper test");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// A client's TLS: trusts this CA and shows a certificate of its own.
    fn client(&self) -> ClientTls {
        let (cert, key) = self.issue(&["zabkeeper-client"]);
        ClientTls { ca_pem: self.ca_pem.as_bytes().to_vec(), identity: Some((cert.into_bytes(), key.into_bytes())) }
    }
}

/// Writes member `id`'s certificate and key where `[tls]` looks for them.
fn install_member(dir: &Path, id: u64, (cert, key): &(String, String)) {
    std::fs::write(dir.join(format!("member-{id}.pem")), cert).expect("write certificate");
    std::fs::write(dir.join(format!("member-{id}-key.pem")), key).expect("write key");
}

/// Lines of member `id`'s log holding every one of `words` (once its
/// colours are taken out).
fn log_lines(ensemble: &Ensemble, id: u64, words: &[&str]) -> usize {
    let mut plain = String::new();
    let mut escape = false;
    for c in ensemble.log(id).chars() {
        match (escape, c) {
            (false, '\x1b') => escape = true,
            (false, c) => plain.push(c),
            (true, 'm') => escape = false,
            (true, _) => {}
        }
    }
    plain.lines().filter(|l| words.iter().all(|w| l.contains(w))).count()
}

#[test]
fn members_talk_mutual_tls_and_refuse_a_certificate_for_another_member_or_none() {
    // Each member on a loopback address of its own (127.0.0.N), so that a
    // certificate names one member and no other.
    let ca = Authority::new();
    let mut ensemble = Ensemble::configure(Settings { size: 3, ..Settings::default() });
    let text = std::fs::read_to_string(&ensemble.config).expect("read config");
    let mut config = String::new();
    let mut member = 0u8;
    for line in text.lines() {
        if line.starts_with("[[server]]") {
            member += 1;
        }
        let ip = format!("127.0.0.{}:", member.max(1));
        config.push_str(&line.replace("127.0.0.1:", &ip));
        config.push('\n');
    }
    for m in &mut ensemble.members {
        let ip = std::net::IpAddr::from([127, 0, 0, m.id as u8]);
        for addr in [&mut m.ports.peer, &mut m.ports.grpc, &mut m.ports.client, &mut m.ports.admin] {
            addr.set_ip(ip);
        }
        m.ports.metrics.set_ip(ip);
    }
    let dir = ensemble.dir.path().to_path_buf();
    let d = dir.display();
    config.push_str(&format!(
        "\n[tls]\ncert_file = \"{d}/member-{{id}}.pem\"\nkey_file = \"{d}/member-{{id}}-key.pem\"\nca_file = \"{d}/ca.pem\"\n\
         client_auth = true\ngrpc = true\nadmin = true\npeer = true\n"
    ));
    std::fs::write(&ensemble.config, config).expect("write config");
    std::fs::write(dir.join("ca.pem"), &ca.ca_pem).expect("write CA");
    let certs: Vec<(String, String)> = (1..=3).map(|id| ca.issue(&[&format!("127.0.0.{id}")])).collect();
    install_member(&dir, 1, &certs[0]);
    install_member(&dir, 2, &certs[1]);
    // Member 3 holds member 2's certificate: from the ensemble's CA, but not its own.
    install_member(&dir, 3, &certs[1]);
    let client_tls = ca.client();
    ensemble.admin_tls = Some(client_tls.clone());

    for id in ensemble.ids() {
        ensemble.spawn(id);
    }
    ensemble.wait_serving(vec![1, 2], Duration::from_secs(30));
    let rt = runtime();
    rt.block_on(within(60, async {
        let grpc = ensemble.grpc(&[1, 2]);
        let client =
            Client::connect(&grpc, crate::support::options().with_tls(client_tls.clone())).await.expect("mTLS gRPC");
        client.create("/mtls", b"quorum of two", CreateMode::Persistent, &Acl::open_unsafe()).await.expect("create");
        let anonymous = ClientTls { identity: None, ..client_tls.clone() };
        let refused = crate::support::options().with_tls(anonymous).with_connect_timeout(Duration::from_secs(2));
        assert!(Client::connect(&grpc, refused).await.is_err(), "client_auth: a client without a certificate");

        // Member 3 is refused however long it tries, and the refusal is
        // logged. (Its own ports show member 2's certificate too, so it is
        // watched from the leader.)
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        for _ in 0..20 {
            let status = ensemble.status(leader).await.expect("the leader answers its admin port");
            assert!(!status.synced_followers.contains(&3), "member 3 joined with member 2's certificate");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let refusals = log_lines(&ensemble, 1, &["peer refused", "claimed=3"])
            + log_lines(&ensemble, 2, &["peer refused", "claimed=3"]);
        assert!(refusals > 0, "no refusal of member 3 logged:\n{}\n{}", ensemble.log(1), ensemble.log(2));

        // The same refusal at the RPC: a certificate from the CA that names
        // no member cannot speak for member 2.
        let peer = ensemble.members[0].ports.peer;
        let endpoint = tonic::transport::Endpoint::from_shared(format!("https://{peer}"))
            .expect("uri")
            .tls_config(client_tls.tonic_config().domain_name("127.0.0.1"))
            .expect("tls");
        let channel = endpoint.connect().await.expect("the CA's certificate passes the handshake");
        let mut raw = PeerClient::new(channel);
        let claim = peer_pb::Notification {
            from: 2,
            vote: Some(peer_pb::Vote { leader: 2, zxid: 0, epoch: 0, nominated: false }),
            round: 1,
            state: peer_pb::PeerState::Looking as i32,
            accepted_epoch: 0,
            configuration: Vec::new(),
            peer_addr: String::new(),
            endpoints: String::new(),
        };
        let status = raw.notify(claim).await.expect_err("a claim the certificate does not back");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
        assert!(status.message().contains("member 2"), "{status:?}");
    }));

    // Its own certificate, re-read on SIGHUP: member 3 joins and catches up.
    install_member(&dir, 3, &certs[2]);
    let pid = ensemble.member(3).pid().expect("member 3 runs");
    assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().expect("kill -HUP").success());
    ensemble.wait_serving(vec![1, 2, 3], Duration::from_secs(30));
    let grpc3 = ensemble.grpc(&[3]);
    rt.block_on(within(60, async {
        let client =
            Client::connect(&grpc3, crate::support::options().with_tls(client_tls.clone())).await.expect("member 3");
        client.sync("/mtls").await.expect("sync");
        assert_eq!(client.get_data("/mtls").await.expect("read on member 3").0, b"quorum of two".to_vec());
    }));

    // zkctl over TLS with a client certificate, to the gRPC and admin ports.
    let client_cert = dir.join("client.pem");
    let client_key = dir.join("client-key.pem");
    let (cert, key) = client_tls.identity.clone().expect("identity");
    std::fs::write(&client_cert, cert).expect("write client certificate");
    std::fs::write(&client_key, key).expect("write client key");
    let zkctl = |args: &[&str]| {
        Command::new(crate::support::cli_binary())
            .args(["--server", &grpc3, "--admin", &ensemble.admin(3), "--cacert"])
            .arg(dir.join("ca.pem"))
            .arg("--cert")
            .arg(&client_cert)
            .arg("--key")
            .arg(&client_key)
            .args(args)
            .output()
            .expect("run zkctl")
    };
    let out = zkctl(&["get", "/mtls"]);
    assert!(out.status.success(), "zkctl get: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "quorum of two");
    let out = zkctl(&["--json", "admin", "status"]);
    assert!(out.status.success(), "zkctl admin status: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"serving\":true"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let plain = Command::new(crate::support::cli_binary())
        .args(["--admin", &ensemble.admin(3), "--timeout-ms", "2000", "admin", "status"])
        .output()
        .expect("run zkctl");
    assert!(!plain.status.success(), "a plain admin call reached a TLS admin port");

    // Member 3 again, with no certificate on its peer links at all.
    ensemble.kill(3);
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(20)));
    let handshakes_before = log_lines(&ensemble, leader, &["TLS handshake failed"]);
    ensemble.spawn_with_env(3, &[("ZABKEEPER_TLS_PEER", "false")]);
    rt.block_on(within(60, async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while log_lines(&ensemble, leader, &["TLS handshake failed"]) == handshakes_before {
            assert!(tokio::time::Instant::now() < deadline, "the leader never refused member 3's plain connection");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let status = ensemble.status(3).await.expect("member 3 answers");
        assert!(!status.serving, "member 3 joined without a certificate");
    }));
    ensemble.kill(3);
    ensemble.spawn(3);
    ensemble.wait_serving(vec![1, 2, 3], Duration::from_secs(30));
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// A client certificate is an `x509` identity, as ZooKeeper's
/// X509AuthenticationProvider makes it: on the TLS ZooKeeper port and the
/// gRPC port, `x509:` ACLs admit the subject they name and no other, `auth`
/// ACLs expand to it, `addauth x509` passes with a certificate and fails
/// without one, and `x509_superuser` passes every ACL.
#[test]
fn a_client_certificate_is_an_x509_identity_on_both_client_ports() {
    const APP: &str = "CN=app,O=zabkeeper test";
    // zookeeper-client's TLS takes the process's default provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = Authority::new();
    let mut ensemble = Ensemble::configure(Settings { size: 1, ..Settings::default() });
    let dir = ensemble.dir.path().to_path_buf();
    let text = std::fs::read_to_string(&ensemble.config).expect("read config");
    let secure = format!("127.0.0.1:{}", crate::support::free_port());
    let mut config = String::from("x509_superuser = \"CN=admin,O=zabkeeper test\"\n");
    for line in text.lines() {
        config.push_str(line);
        config.push('\n');
        if line.starts_with("client_addr") {
            config.push_str(&format!("secure_client_addr = \"{secure}\"\n"));
        }
    }
    let d = dir.display();
    config.push_str(&format!(
        "\n[tls]\ncert_file = \"{d}/member.pem\"\nkey_file = \"{d}/member-key.pem\"\nca_file = \"{d}/ca.pem\"\n\
         client_auth = true\ngrpc = true\n"
    ));
    std::fs::write(&ensemble.config, config).expect("write config");
    std::fs::write(dir.join("ca.pem"), &ca.ca_pem).expect("write CA");
    let (cert, key) = ca.issue(&["localhost", "127.0.0.1"]);
    std::fs::write(dir.join("member.pem"), cert).expect("write certificate");
    std::fs::write(dir.join("member-key.pem"), key).expect("write key");
    ensemble.start_all();

    let zk_as = |cn: &str| {
        let (cert, key) = ca.issue_subject(cn);
        let (ca_pem, secure) = (ca.ca_pem.clone(), secure.clone());
        async move {
            let tls = zk::TlsOptions::new().with_pem_ca(&ca_pem)?.with_pem_identity(&cert, &key)?;
            let connector = zk::Client::connector().with_tls(tls).with_session_timeout(Duration::from_secs(20));
            within(20, connector.with_connection_timeout(Duration::from_secs(5)).secure_connect(&secure)).await
        }
    };
    let grpc_as = |cn: &str| {
        let (cert, key) = ca.issue_subject(cn);
        let tls =
            ClientTls { ca_pem: ca.ca_pem.as_bytes().to_vec(), identity: Some((cert.into_bytes(), key.into_bytes())) };
        crate::support::options().with_tls(tls)
    };
    runtime().block_on(within(60, async {
        let app = zk_as("app").await.expect("app connects with its certificate");
        let only_app = [zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("x509", APP))];
        app.create("/x509", b"for app", &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&only_app)))
            .await
            .expect("an x509 ACL is valid");
        assert_eq!(app.get_data("/x509").await.expect("app reads").0, b"for app".to_vec());
        app.create("/mine", b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all()))
            .await
            .expect("auth expands to the certificate's identity");
        let (acl, _) = app.get_acl("/mine").await.expect("getACL");
        assert_eq!(acl.iter().map(|a| (a.scheme(), a.id())).collect::<Vec<_>>(), vec![("x509", APP)]);
        app.auth("x509", b"").await.expect("addauth x509 with a certificate");

        let other = zk_as("other").await.expect("other connects");
        assert_eq!(other.get_data("/x509").await.unwrap_err(), zk::Error::NoAuth, "another subject");
        let admin = zk_as("admin").await.expect("admin connects");
        assert_eq!(admin.get_data("/x509").await.expect("the x509 superuser reads").0, b"for app".to_vec());

        let plain = within(20, zk::Client::connect(&ensemble.zookeeper(&[1]))).await.expect("plain port");
        assert_eq!(plain.get_data("/x509").await.unwrap_err(), zk::Error::NoAuth, "no certificate");
        assert_eq!(plain.auth("x509", APP.as_bytes()).await.unwrap_err(), zk::Error::AuthFailed, "a subject is no certificate");

        let grpc = ensemble.grpc(&[1]);
        let app = Client::connect(&grpc, grpc_as("app")).await.expect("gRPC with app's certificate");
        assert_eq!(app.get_data("/x509").await.expect("app reads over gRPC").0, b"for app".to_vec());
        let other = Client::connect(&grpc, grpc_as("other")).await.expect("gRPC with other's certificate");
        let err = other.get_data("/x509").await.expect_err("another subject over gRPC");
        assert!(matches!(&err, zabkeeper_client::ClientError::Server(z) if z.code == zabkeeper_core::error::ErrorCode::NoAuth), "{err}");
    }));
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}
