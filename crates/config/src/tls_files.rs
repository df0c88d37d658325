//! The `[tls]` section: which listeners speak TLS, with which certificate,
//! and the CA members and clients must chain to.
//!
//! One section serves every member: paths may hold `{id}`, so each member
//! reads its own certificate (`/etc/zabkeeper/tls/member-{id}.pem`).

use super::{invalid, ConfigError};
use serde::Deserialize;
use std::path::PathBuf;
use zabkeeper_core::ids::ServerId;

/// The section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTls {
    cert_file: String,
    key_file: String,
    ca_file: Option<String>,
    client_auth: Option<bool>,
    grpc: Option<bool>,
    admin: Option<bool>,
    peer: Option<bool>,
}

/// TLS settings of one member, its paths resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConfig {
    /// This member's certificate chain (PEM); on the peer port it is shown
    /// both as a server and as a client, so it must name the member.
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// The ensemble's CA (PEM): it signs members' certificates, and client
    /// certificates when `client_auth` is set.
    pub ca_file: Option<PathBuf>,
    /// Whether the TLS client ports (ZooKeeper, gRPC, admin) demand a client
    /// certificate signed by `ca_file`.
    pub client_auth: bool,
    /// Whether the gRPC client port speaks TLS (else plain HTTP/2).
    pub grpc: bool,
    /// Whether the admin port speaks TLS.
    pub admin: bool,
    /// Whether members talk mutual TLS on the peer port, each accepted only
    /// with a certificate from `ca_file` naming the member it claims to be.
    pub peer: bool,
}

impl FileTls {
    /// The settings of member `id`; a combination that cannot work names
    /// its key.
    pub(super) fn resolve(&self, id: ServerId) -> Result<TlsConfig, ConfigError> {
        let path = |p: &str| PathBuf::from(p.replace("{id}", &id.to_string()));
        let client_auth = self.client_auth.unwrap_or(false);
        let peer = self.peer.unwrap_or(false);
        if self.ca_file.is_none() {
            if client_auth {
                return Err(invalid("tls.client_auth", "needs tls.ca_file, the CA client certificates must chain to"));
            }
            if peer {
                return Err(invalid("tls.peer", "needs tls.ca_file, the CA every member's certificate must chain to"));
            }
        }
        Ok(TlsConfig {
            cert_file: path(&self.cert_file),
            key_file: path(&self.key_file),
            ca_file: self.ca_file.as_deref().map(path),
            client_auth,
            grpc: self.grpc.unwrap_or(false),
            admin: self.admin.unwrap_or(false),
            peer,
        })
    }
}

/// Whether `name` can be matched against a certificate: a DNS name or an IP.
pub(super) fn check_certificate_name(key: &str, name: &str) -> Result<(), ConfigError> {
    rustls_pki_types::ServerName::try_from(name)
        .map(|_| ())
        .map_err(|e| invalid(key, format!("{name:?} cannot be matched against a certificate: {e}")))
}

#[cfg(test)]
mod tests {
    use crate::{ServerConfig, Sources};

    const PODS: &str = r#"
data_dir = "/data"
[[server]]
id = 1
peer_addr = "zk-0.zk-peers:2888"
grpc_addr = "zk-0.zk-peers:3181"
[[server]]
id = 2
peer_addr = "10.0.0.2:2888"
grpc_addr = "10.0.0.2:3181"
peer_name = "zk-1.zk-peers"
[tls]
cert_file = "/tls/member-{id}.pem"
key_file = "/tls/member-{id}-key.pem"
ca_file = "/tls/ca.pem"
peer = true
admin = true
"#;

    #[test]
    fn each_member_reads_its_own_files_and_peers_are_named() {
        let c = ServerConfig::parse(PODS, Some(2)).unwrap();
        let tls = c.tls.clone().expect("[tls]");
        assert_eq!(tls.cert_file.to_str(), Some("/tls/member-2.pem"));
        assert_eq!(tls.key_file.to_str(), Some("/tls/member-2-key.pem"));
        assert!(tls.peer && tls.admin && !tls.grpc && !tls.client_auth);
        assert_eq!(c.members[0].peer_name(), "zk-0.zk-peers", "the peer address's host by default");
        assert_eq!(c.members[1].peer_name(), "zk-1.zk-peers");
    }

    #[test]
    fn what_cannot_work_is_refused_naming_the_key() {
        let err = |text: &str| ServerConfig::parse(text, Some(1)).unwrap_err().to_string();
        let no_ca = PODS.replace("ca_file = \"/tls/ca.pem\"\n", "");
        assert!(err(&no_ca).contains("tls.peer"), "{}", err(&no_ca));
        let client_auth = format!("{no_ca}client_auth = true\n").replace("peer = true\n", "");
        assert!(err(&client_auth).contains("tls.client_auth"));
        let bad_name = PODS.replace("peer_name = \"zk-1.zk-peers\"", "peer_name = \"not a name\"");
        assert!(err(&bad_name).contains("server[id=2].peer_name"), "{}", err(&bad_name));
        let unknown = PODS.replace("admin = true", "admim = true");
        assert!(err(&unknown).contains("admim"));
    }

    #[test]
    fn the_environment_sets_tls_keys() {
        let sources = Sources {
            id: Some(1),
            hostname: None,
            env: vec![
                ("ZABKEEPER_TLS_GRPC".into(), "true".into()),
                ("ZABKEEPER_TLS_CERT_FILE".into(), "/secret/{id}.pem".into()),
            ],
        };
        let c = ServerConfig::parse_with(PODS, &sources).unwrap();
        let tls = c.tls.expect("[tls]");
        assert!(tls.grpc);
        assert_eq!(tls.cert_file.to_str(), Some("/secret/1.pem"));
    }
}
