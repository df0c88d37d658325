//! TLS on the listeners and between members: certificates from PEM files
//! named in the config, re-read on SIGHUP without dropping a connection.
//!
//! Each TLS listener holds a [`ServerTls`]: the current rustls config behind
//! a lock. A handshake takes the config current when it starts, so a reload
//! changes what new connections see and leaves open ones alone. A reload
//! that fails (a half-written file, a key that does not match) keeps the old
//! certificate and says why.

use futures::future;
use futures::{Stream, StreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use zabkeeper_config::{Member, TlsConfig};
use zabkeeper_core::ids::ServerId;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM of the kind asked.
    #[error("tls {key} {path}: {reason}")]
    File {
        /// The config key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the certificates (a key that does not match, an
    /// unusable CA).
    #[error("tls: {0}")]
    Rustls(String),
}

/// A listener's TLS settings, reloadable.
pub struct ServerTls {
    files: TlsConfig,
    alpn: Vec<Vec<u8>>,
    client_auth: bool,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl ServerTls {
    /// Loads the certificates `files` names; `alpn` lists the application
    /// protocols offered (`h2` for gRPC, none for the ZooKeeper port).
    /// Clients must show a certificate from the CA if `files.client_auth`.
    pub fn load(files: &TlsConfig, alpn: &[&[u8]]) -> Result<Arc<ServerTls>, TlsError> {
        ServerTls::load_with(files, alpn, files.client_auth)
    }

    fn load_with(files: &TlsConfig, alpn: &[&[u8]], client_auth: bool) -> Result<Arc<ServerTls>, TlsError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let current = RwLock::new(Arc::new(server_config(files, &alpn, client_auth)?));
        Ok(Arc::new(ServerTls { files: files.clone(), alpn, client_auth, current }))
    }

    /// Re-reads the files; on failure the certificate in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = Arc::new(server_config(&self.files, &self.alpn, self.client_auth)?);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        Ok(())
    }

    /// An acceptor with the certificate current now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().unwrap_or_else(PoisonError::into_inner).clone())
    }
}

/// TLS handshakes one listener runs at once: a client that stalls its
/// handshake holds one of these until the deadline, never the accept loop.
const HANDSHAKES: usize = 64;

/// The TLS streams of `incoming`'s connections, for a tonic server: each
/// handshake must finish within `deadline`; one that fails is logged and
/// its connection dropped.
pub fn tls_incoming<IO>(
    incoming: impl Stream<Item = std::io::Result<IO>>,
    tls: Arc<ServerTls>,
    deadline: Duration,
) -> impl Stream<Item = std::io::Result<TlsStream<IO>>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    incoming
        .filter_map(|accepted| future::ready(accepted.ok()))
        .map(move |io| {
            let acceptor = tls.acceptor();
            async move { tokio::time::timeout(deadline, acceptor.accept(io)).await }
        })
        .buffer_unordered(HANDSHAKES)
        .filter_map(move |handshake| {
            future::ready(match handshake {
                Ok(Ok(stream)) => Some(Ok(stream)),
                Ok(Err(e)) => {
                    tracing::info!(error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::info!(?deadline, "no TLS handshake in time; closing");
                    None
                }
            })
        })
}

/// The crypto provider every TLS config here uses (ring, chosen explicitly
/// rather than through a process-wide default).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(files: &TlsConfig, alpn: &[Vec<u8>], client_auth: bool) -> Result<rustls::ServerConfig, TlsError> {
    let certs = read_certs("cert_file", &files.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&files.key_file).map_err(|e| TlsError::File {
        key: "key_file",
        path: files.key_file.clone(),
        reason: format!("no private key: {e}"),
    })?;
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match (&files.ca_file, client_auth) {
        (Some(ca), true) => {
            let roots = Arc::new(root_store(ca)?);
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| TlsError::Rustls(format!("client certificate verifier: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Rustls(format!("cert_file and key_file do not make a usable identity: {e}")))?;
    config.alpn_protocols = alpn.to_vec();
    Ok(config)
}

/// The certificates in a PEM file (at least one).
pub fn read_certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |reason: String| TlsError::File { key, path: path.to_path_buf(), reason };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(format!("malformed PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error("no CERTIFICATE in the file".into()));
    }
    Ok(certs)
}

/// A root store holding the CA certificates of `path`.
pub fn root_store(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs("ca_file", path)? {
        roots.add(cert).map_err(|e| TlsError::File {
            key: "ca_file",
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// Mutual TLS among members. The listener demands a certificate from the
/// ensemble's CA; a member dialing a peer shows its own certificate and
/// checks the peer's against the name that member must carry. Which member
/// a caller is comes from its messages, so [`PeerTls::check`] is asked once
/// the claim is known: a certificate from the CA but for another member is
/// refused as surely as none.
pub struct PeerTls {
    /// The peer listener's side.
    pub server: Arc<ServerTls>,
    files: TlsConfig,
    /// The names the config file sets explicitly (`peer_name`), with the
    /// peer host the file gives: they count while the member is still there.
    explicit: HashMap<ServerId, (String, String)>,
    /// The host of each member's peer address in the configuration in
    /// force (the file's until the replicated one is known).
    names: RwLock<HashMap<ServerId, String>>,
    dialing: RwLock<tonic::transport::ClientTlsConfig>,
}

impl PeerTls {
    /// Loads this member's certificate and the CA; `members` gives each
    /// member's certificate name.
    pub fn load(files: &TlsConfig, members: &[Member]) -> Result<Arc<PeerTls>, TlsError> {
        let server = ServerTls::load_with(files, &[b"h2"], true)?;
        let explicit = members
            .iter()
            .filter_map(|m| Some((m.id, (m.peer_addr.host().to_string(), m.peer_name.clone()?))))
            .collect();
        let names = RwLock::new(members.iter().map(|m| (m.id, m.peer_addr.host().to_string())).collect());
        let dialing = RwLock::new(dialing_config(files)?);
        Ok(Arc::new(PeerTls { server, files: files.clone(), explicit, names, dialing }))
    }

    /// Re-reads the files for both sides; on failure both keep what they had.
    pub fn reload(&self) -> Result<(), TlsError> {
        let dialing = dialing_config(&self.files)?;
        self.server.reload()?;
        *self.dialing.write().unwrap_or_else(PoisonError::into_inner) = dialing;
        Ok(())
    }

    /// How to dial member `to`: this member's certificate, the CA, and the
    /// name `to`'s certificate must carry.
    pub fn dial(&self, to: ServerId) -> tonic::transport::ClientTlsConfig {
        let config = self.dialing.read().unwrap_or_else(PoisonError::into_inner).clone();
        match self.name(to) {
            Some(name) => config.domain_name(name),
            None => config,
        }
    }

    /// Takes the members of the configuration now in force, each with the
    /// host of its peer address: the name its certificate must carry (a
    /// member added, moved to a new host, or removed since the file was written).
    pub fn learn<'a>(&self, members: impl IntoIterator<Item = (ServerId, &'a str)>) {
        let names = members.into_iter().map(|(id, host)| (id, host.to_string())).collect();
        *self.names.write().unwrap_or_else(PoisonError::into_inner) = names;
    }

    fn name(&self, id: ServerId) -> Option<String> {
        let host = self.names.read().unwrap_or_else(PoisonError::into_inner).get(&id).cloned()?;
        match self.explicit.get(&id) {
            Some((file_host, name)) if *file_host == host => Some(name.clone()),
            _ => Some(host),
        }
    }

    /// Whether `certs`, the chain a caller showed (already verified against
    /// the CA by the handshake), names member `from`, as it claims to be.
    /// Only members of the configuration in force are let in: a certificate
    /// of the CA alone (a client's, say) must not open a learner's stream,
    /// which carries the whole tree. So under peer TLS a member is added
    /// before it starts, and it is then checked against its line's host.
    pub fn check(&self, from: ServerId, certs: Option<&[CertificateDer<'_>]>) -> Result<(), String> {
        let name = self.name(from).ok_or_else(|| {
            format!("server {from} is in no configuration in force (under peer TLS, add a member before it starts)")
        })?;
        let leaf = certs.and_then(|c| c.first()).ok_or("no client certificate")?;
        certificate_names(leaf, &name).map_err(|e| format!("its certificate does not name member {from} ({name}): {e}"))
    }
}

/// Whether the certificate `leaf` is valid for `name` (a DNS name or an IP,
/// matched against its subject alternative names as a TLS client would).
pub fn certificate_names(leaf: &CertificateDer<'_>, name: &str) -> Result<(), String> {
    let cert = webpki::EndEntityCert::try_from(leaf).map_err(|e| format!("unreadable certificate: {e:?}"))?;
    let server_name =
        rustls::pki_types::ServerName::try_from(name).map_err(|e| format!("{name:?} is not a name: {e}"))?;
    cert.verify_is_valid_for_subject_name(&server_name).map_err(|e| format!("{e:?}"))
}

/// tonic's client side of the peer port: this member's identity and the CA.
pub fn dialing_config(files: &TlsConfig) -> Result<tonic::transport::ClientTlsConfig, TlsError> {
    let read = |key: &'static str, path: &Path| {
        std::fs::read(path).map_err(|e| TlsError::File { key, path: path.to_path_buf(), reason: e.to_string() })
    };
    let ca = files.ca_file.as_deref().ok_or_else(|| TlsError::Rustls("dialing a member needs tls.ca_file".into()))?;
    // A member dials its peers as any TLS client of ours does: it trusts the
    // CA and shows its own certificate. tonic builds its rustls config from
    // the process's default crypto provider, ambiguous when both ring and
    // aws-lc-rs are linked: ring, unless the program already chose.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = tonic::transport::Certificate::from_pem(read("ca_file", ca)?);
    let identity =
        tonic::transport::Identity::from_pem(read("cert_file", &files.cert_file)?, read("key_file", &files.key_file)?);
    Ok(tonic::transport::ClientTlsConfig::new().ca_certificate(ca).identity(identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a certificate for `localhost` it signed, as PEM files in `dir`.
    fn certificates(dir: &Path, tag: &str) -> TlsConfig {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
        let path = |name: &str| dir.join(format!("{tag}-{name}"));
        std::fs::write(path("ca.pem"), ca.pem()).unwrap();
        std::fs::write(path("cert.pem"), cert.pem()).unwrap();
        std::fs::write(path("key.pem"), key.serialize_pem()).unwrap();
        TlsConfig {
            cert_file: path("cert.pem"),
            key_file: path("key.pem"),
            ca_file: Some(path("ca.pem")),
            client_auth: false,
            grpc: false,
            admin: false,
            peer: false,
        }
    }

    #[test]
    fn a_peer_is_accepted_only_with_a_certificate_naming_the_member_it_claims_or_joins_as() {
        let dir = tempfile::tempdir().unwrap();
        let files = certificates(dir.path(), "a");
        let config = zabkeeper_config::ServerConfig::parse(
            "data_dir = \"d{id}\"\n\
             [[server]]\nid = 1\npeer_addr = \"localhost:1\"\ngrpc_addr = \"localhost:2\"\n\
             [[server]]\nid = 2\npeer_addr = \"127.0.0.2:1\"\ngrpc_addr = \"127.0.0.2:2\"\n\
             [[server]]\nid = 3\npeer_addr = \"127.0.0.3:1\"\ngrpc_addr = \"127.0.0.3:2\"\npeer_name = \"localhost\"\n",
            Some(1),
        )
        .unwrap();
        let peers = PeerTls::load(&files, &config.members).expect("loads");
        let cert = read_certs("cert_file", &files.cert_file).unwrap();
        assert_eq!(peers.check(1, Some(&cert)), Ok(()));
        assert_eq!(peers.check(3, Some(&cert)), Ok(()), "peer_name overrides the peer address's host");
        let other = peers.check(2, Some(&cert)).unwrap_err();
        assert!(other.contains("member 2") && other.contains("127.0.0.2"), "{other}");
        assert!(peers.check(1, None).unwrap_err().contains("no client certificate"));
        assert!(peers.check(9, Some(&cert)).unwrap_err().contains("no configuration"), "a stranger is refused");
        // The configuration in force names each member by its peer host; the
        // file's peer_name counts while the member is where the file says.
        peers.learn([(1, "localhost"), (2, "localhost"), (3, "127.0.0.3"), (9, "localhost")]);
        assert_eq!(peers.check(9, Some(&cert)), Ok(()), "member 9 added at localhost");
        assert_eq!(peers.check(2, Some(&cert)), Ok(()), "member 2 moved to localhost");
        assert_eq!(peers.check(3, Some(&cert)), Ok(()), "peer_name still counts at the file's host");
        peers.learn([(1, "localhost"), (3, "127.0.0.33")]);
        assert!(
            peers.check(3, Some(&cert)).unwrap_err().contains("127.0.0.33"),
            "moved: its peer_name no longer counts"
        );
        assert!(peers.check(2, Some(&cert)).is_err(), "removed: refused");
        assert!(peers.server.acceptor().config().alpn_protocols == vec![b"h2".to_vec()]);
    }

    #[test]
    fn loads_reloads_and_keeps_the_old_certificate_when_a_reload_fails() {
        let dir = tempfile::tempdir().unwrap();
        let files = certificates(dir.path(), "a");
        let tls = ServerTls::load(&files, &[b"h2"]).expect("loads");
        let before = tls.acceptor().config().clone();
        assert_eq!(before.alpn_protocols, vec![b"h2".to_vec()]);
        let other = certificates(dir.path(), "b");
        std::fs::copy(&other.cert_file, &files.cert_file).unwrap();
        std::fs::copy(&other.key_file, &files.key_file).unwrap();
        tls.reload().expect("reloads");
        assert!(!Arc::ptr_eq(&before, tls.acceptor().config()), "new connections get the new certificate");
        std::fs::write(&files.key_file, "not a key").unwrap();
        let failed = tls.reload().unwrap_err().to_string();
        assert!(failed.contains("key_file") && failed.contains("no private key"), "{failed}");
        let mismatched = certificates(dir.path(), "c");
        std::fs::copy(&mismatched.key_file, &files.key_file).unwrap();
        let failed = tls.reload().unwrap_err().to_string();
        assert!(failed.contains("do not make a usable identity"), "{failed}");
    }

    #[test]
    fn missing_or_empty_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = certificates(dir.path(), "a");
        files.cert_file = dir.path().join("nope.pem");
        let err = ServerTls::load(&files, &[]).err().expect("refused").to_string();
        assert!(err.contains("cert_file") && err.contains("nope.pem"), "{err}");
        std::fs::write(&files.cert_file, "").unwrap();
        let err = ServerTls::load(&files, &[]).err().expect("refused").to_string();
        assert!(err.contains("no CERTIFICATE"), "{err}");
    }
}
