//! Dialing another member's admin API: `--join` asks a running member for
//! the membership, and a follower hands an AdminServer `restore` to the
//! leader. Over TLS when the admin ports speak it, with the admin token.

use std::time::Duration;

/// A client of the admin API at `admin_addr`, another member's: over TLS
/// when `tls` says the admin ports speak it (this member's certificate and
/// the ensemble's CA); each call given up after `timeout`.
pub async fn dial(
    admin_addr: &str,
    tls: Option<&zabkeeper_config::TlsConfig>,
    timeout: Duration,
) -> Result<zabkeeper_proto::admin::admin_client::AdminClient<tonic::transport::Channel>, String> {
    let unreachable = |e: &dyn std::fmt::Display| format!("cannot reach the admin API at {admin_addr}: {e}");
    let tls = tls.filter(|t| t.admin);
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{admin_addr}"))
        .map_err(|e| unreachable(&e))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(timeout);
    if let Some(files) = tls {
        let host = admin_addr.rsplit_once(':').map_or(admin_addr, |(host, _)| host);
        let config = crate::security::tls::dialing_config(files).map_err(|e| unreachable(&e))?;
        endpoint =
            endpoint.tls_config(config.domain_name(host.trim_matches(['[', ']']))).map_err(|e| unreachable(&e))?;
    }
    let channel = endpoint.connect().await.map_err(|e| unreachable(&e))?;
    Ok(zabkeeper_proto::admin::admin_client::AdminClient::new(channel))
}

/// `request` with `authorization: Bearer <token>` when there is a token.
pub fn with_token<T>(mut request: tonic::Request<T>, token: Option<&str>) -> Result<tonic::Request<T>, String> {
    if let Some(token) = token {
        let value =
            format!("Bearer {token}").parse().map_err(|_| "the admin token is not a header value".to_string())?;
        request.metadata_mut().insert("authorization", value);
    }
    Ok(request)
}
