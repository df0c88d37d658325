//! Starting a whole replica: storage, the owner task, and every listener,
//! until a shutdown signal; then a clean stop (clients told, log flushed).

use super::{start, ServerError};
use crate::config::{HostPort, ServerConfig};
use crate::frontend::limits::{limited_incoming, ConnectionLimits};
use crate::proto::{
    admin::admin_server::AdminServer, client::zab_keeper_server::ZabKeeperServer, peer::peer_server::PeerServer,
};
use crate::rpc::admin::{authenticate, AdminService};
use crate::rpc::client::{ClientService, MAX_CLIENT_MESSAGE};
use crate::rpc::peer::MAX_PEER_MESSAGE;
use crate::storage::Storage;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

/// Binds `addr`; a host name binds the first address it resolves to.
async fn bind(addr: &HostPort, what: &'static str) -> Result<TcpListener, ServerError> {
    let error = |source| ServerError::Bind { addr: addr.clone(), what, source };
    TcpListener::bind((addr.host(), addr.port())).await.map_err(error)
}

/// The connections a listener accepts, with `TCP_NODELAY` set on each.
/// tonic applies its own `tcp_nodelay` only to listeners it binds itself, not
/// to a stream passed to `serve_with_incoming`; without it, Nagle's algorithm
/// holds a small message back until the previous one is acknowledged, and
/// with the receiver's delayed ACK that costs ~40 ms (it showed as a NEWLEADER
/// arriving a tick after its DIFF, and in every write's round trip).
pub fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// The addresses a running replica listens on (ports resolved when 0 was asked).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// Replica traffic.
    pub peer: SocketAddr,
    /// gRPC client sessions.
    pub grpc: SocketAddr,
    /// Admin API.
    pub admin: Option<SocketAddr>,
    /// ZooKeeper wire protocol.
    pub client: Option<SocketAddr>,
    /// Prometheus metrics.
    pub metrics: Option<SocketAddr>,
}

/// Runs one replica until `shutdown` resolves or its storage fails.
/// `on_bound` is told the listening addresses once every port is open.
pub async fn serve(
    config: ServerConfig,
    storage: Arc<dyn Storage>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(Bound),
) -> Result<(), ServerError> {
    let me = config.me().clone();
    // Bind everything first so a busy port fails fast with a clear message.
    let peer_listener = bind(&me.bind.peer, "peer_addr").await?;
    let grpc_listener = bind(&me.bind.grpc, "grpc_addr").await?;
    let admin_listener = match &me.bind.admin {
        Some(addr) => Some(bind(addr, "admin_addr").await?),
        None => None,
    };
    let client_listener = match &me.bind.client {
        Some(addr) => Some(bind(addr, "client_addr").await?),
        None => None,
    };
    let metrics_listener = match &me.bind.metrics {
        Some(addr) => Some(bind(addr, "metrics_addr").await?),
        None => None,
    };
    let bound = Bound {
        peer: peer_listener.local_addr().map_err(|source| ServerError::Bind {
            addr: me.bind.peer.clone(),
            what: "peer_addr",
            source,
        })?,
        grpc: grpc_listener.local_addr().map_err(|source| ServerError::Bind {
            addr: me.bind.grpc.clone(),
            what: "grpc_addr",
            source,
        })?,
        admin: admin_listener.as_ref().and_then(|l| l.local_addr().ok()),
        client: client_listener.as_ref().and_then(|l| l.local_addr().ok()),
        metrics: metrics_listener.as_ref().and_then(|l| l.local_addr().ok()),
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let started = start(config, storage, stop_rx.clone())?;
    let handle = started.handle.clone();

    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let peer_server = tonic::transport::Server::builder()
        .add_service(
            PeerServer::new(started.peer_service)
                .max_decoding_message_size(MAX_PEER_MESSAGE)
                .max_encoding_message_size(MAX_PEER_MESSAGE),
        )
        .serve_with_incoming_shutdown(incoming(peer_listener), stopped(stop_rx.clone()));
    let client = ClientService::new(handle.clone());
    let limits = handle.config.limits;
    let grpc_slots = ConnectionLimits::new(limits.max_connections, limits.max_connections_per_address);
    // Twice the largest node data, plus room for paths and ACLs: a value
    // over the data limit still decodes and is refused with that limit's
    // own error; only an absurd message is cut off by the transport.
    let max_message =
        (2 * handle.config.max_data_bytes.max(limits.max_frame_bytes) + (1 << 20)).min(MAX_CLIENT_MESSAGE);
    let client_server = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(limits.max_streams_per_grpc_connection))
        .add_service(ZabKeeperServer::new(client).max_decoding_message_size(max_message))
        .serve_with_incoming_shutdown(limited_incoming(grpc_listener, grpc_slots), stopped(stop_rx.clone()));
    let mut tasks = vec![tokio::spawn(async move { peer_server.await.map_err(|e| e.to_string()) })];
    tasks.push(tokio::spawn(async move { client_server.await.map_err(|e| e.to_string()) }));
    if let Some(listener) = admin_listener {
        let admin = AdminService::new(handle.clone());
        let token = handle.config.admin_token.as_deref().map(Arc::from);
        let admin_server = tonic::transport::Server::builder()
            .add_service(AdminServer::with_interceptor(admin, authenticate(token)))
            .serve_with_incoming_shutdown(incoming(listener), stopped(stop_rx.clone()));
        tasks.push(tokio::spawn(async move { admin_server.await.map_err(|e| e.to_string()) }));
    }
    if let Some(listener) = metrics_listener {
        tasks.push(tokio::spawn(crate::metrics::serve(listener, handle.clone(), stop_rx.clone())));
    }
    if let Some(listener) = client_listener {
        tasks.push(tokio::spawn(crate::frontend::zookeeper::run(listener, handle.clone(), stop_rx.clone())));
    }
    on_bound(bound);

    let mut owner = started.owner;
    let result = tokio::select! {
        _ = shutdown => {
            let _ = stop_tx.send(true);
            owner.await.unwrap_or(Ok(()))
        }
        result = &mut owner => {
            let _ = stop_tx.send(true);
            result.unwrap_or(Ok(()))
        }
    };
    // Listeners stop accepting at once; a connection that does not finish
    // within a few seconds does not hold the process up.
    for task in tasks {
        if tokio::time::timeout(std::time::Duration::from_secs(5), task).await.is_err() {
            tracing::warn!("a listener did not stop within 5 s; exiting anyway");
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn accepted_connections_have_nodelay_set() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let mut accepted = incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let stream = accepted.next().await.expect("a connection").expect("accepted");
        assert!(stream.nodelay().expect("read TCP_NODELAY"), "Nagle would delay small peer messages");
    }
}
