//! TLS to the gRPC client port: the CA that signs the servers' certificates,
//! and, where the servers ask for one, this client's own certificate.

use super::error::ClientError;
use std::path::Path;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// What a client trusts and shows over TLS (PEM bytes, read once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA certificates that sign the servers' certificates.
    pub ca_pem: Vec<u8>,
    /// This client's certificate and key, for servers that demand one.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientTls {
    /// Reads the PEM files (`zkctl --cacert --cert --key`); a file that
    /// cannot be read is named.
    pub fn from_files(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientTls, ClientError> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path)
                .map_err(|e| ClientError::InvalidArgument(format!("cannot read the {what} {}: {e}", path.display())))
        };
        let identity = match identity {
            Some((cert, key)) => Some((read("client certificate", cert)?, read("client key", key)?)),
            None => None,
        };
        Ok(ClientTls { ca_pem: read("CA certificate", ca)?, identity })
    }

    /// tonic's form; the server's name is checked against the host the
    /// client dials.
    pub fn tonic_config(&self) -> ClientTlsConfig {
        // tonic builds its rustls config from the process's default crypto
        // provider, which is ambiguous when a program links both ring and
        // aws-lc-rs; choose ring unless the program already chose.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        config
    }
}
