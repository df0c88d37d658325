//! Starting a whole replica: storage, the owner task, and every listener,
//! until a shutdown signal; then a clean stop (clients told, log flushed).

use crate::ops::admin_grpc::{authenticate, AdminService};
use crate::ops::four_letter;
use crate::peer::{self, MAX_PEER_MESSAGE};
use crate::ports::grpc::{ClientService, MAX_CLIENT_MESSAGE};
use crate::ports::limits::{limited_incoming, ConnectionLimits};
use crate::runtime::{start, ServerError};
use crate::security::tls::{tls_incoming, PeerTls, ServerTls};
use futures::{Stream, StreamExt};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::{Connected, Router, TcpIncoming};
use zabkeeper_config::{HostPort, LogFormat, ServerConfig};
use zabkeeper_core::storage::Storage;
use zabkeeper_proto::{
    admin::admin_server::AdminServer, client::zab_keeper_server::ZabKeeperServer, peer::peer_server::PeerServer,
};

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
    /// ZooKeeper wire protocol over TLS.
    pub secure_client: Option<SocketAddr>,
}

/// Runs one replica until `shutdown` resolves or its storage fails.
/// `on_bound` is told the listening addresses once every port is open.
pub async fn serve(
    config: ServerConfig,
    storage: Arc<dyn Storage>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(Bound) + Send,
) -> Result<(), ServerError> {
    // The body is one non-generic function, compiled in this crate. While
    // it was generic, each binary that called it compiled all of the
    // server's listeners again (30-33 s of CPU each, per build; now 2-4 s,
    // for 17-27 s more in this crate).
    serve_boxed(config, storage, Box::pin(shutdown), Box::new(on_bound)).await
}

/// The body of [`serve`], behind boxes: callers in other crates see only
/// the boxed future, so they compile none of it.
#[inline(never)]
fn serve_boxed<'a>(
    config: ServerConfig,
    storage: Arc<dyn Storage>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
    on_bound: Box<dyn FnOnce(Bound) + Send + 'a>,
) -> Pin<Box<dyn Future<Output = Result<(), ServerError>> + Send + 'a>> {
    Box::pin(async move {
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
        let secure_client_listener = match &me.bind.secure_client {
            Some(addr) => Some(bind(addr, "secure_client_addr").await?),
            None => None,
        };
        // Certificates are read before anything serves, so a bad file stops the
        // start with its name rather than failing the first client.
        let (zookeeper_tls, grpc_tls, admin_tls) = match &config.tls {
            Some(files) => {
                let zookeeper = match secure_client_listener {
                    Some(_) => Some(ServerTls::load(files, &[])?),
                    None => None,
                };
                let grpc = if files.grpc { Some(ServerTls::load(files, &[b"h2"])?) } else { None };
                let admin = if files.admin { Some(ServerTls::load(files, &[b"h2"])?) } else { None };
                (zookeeper, grpc, admin)
            }
            None => (None, None, None),
        };
        let peer_tls = match &config.tls {
            Some(files) if files.peer => Some(PeerTls::load(files, &config.members)?),
            _ => None,
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
            secure_client: secure_client_listener.as_ref().and_then(|l| l.local_addr().ok()),
        };

        let (stop_tx, stop_rx) = watch::channel(false);
        let mut peer_service = None;
        let started = start(config, storage, stop_rx.clone(), |handle| {
            let addrs = peer::addresses(&handle.config);
            let (transport, service) = peer::links(handle.config.id, addrs, handle.clone(), peer_tls.clone());
            peer_service = Some(service);
            Box::new(transport)
        })?;
        let peer_service = peer_service.expect("start made the links before it returned");
        let handle = started.handle.clone();

        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };

        let limits = handle.config.limits;
        let handshake_deadline = Duration::from_millis(limits.connect_timeout_ms);
        let peer_router = tonic::transport::Server::builder().add_service(
            PeerServer::new(peer_service)
                .max_decoding_message_size(MAX_PEER_MESSAGE)
                .max_encoding_message_size(MAX_PEER_MESSAGE),
        );
        let peer_listener_tls = peer_tls.as_ref().map(|tls| tls.server.clone());
        let stop = || stopped(stop_rx.clone());
        let mut tasks =
            vec![spawn_grpc(peer_router, incoming(peer_listener), peer_listener_tls, handshake_deadline, stop())];
        let client = ClientService::new(handle.clone());
        let grpc_slots = ConnectionLimits::new(limits.max_connections, limits.max_connections_per_address);
        // Twice the largest node data, plus room for paths and ACLs: a value
        // over the data limit still decodes and is refused with that limit's
        // own error; only an absurd message is cut off by the transport.
        let max_message =
            (2 * handle.config.max_data_bytes.max(limits.max_frame_bytes) + (1 << 20)).min(MAX_CLIENT_MESSAGE);
        let client_router = tonic::transport::Server::builder()
            .max_concurrent_streams(Some(limits.max_streams_per_grpc_connection))
            .add_service(ZabKeeperServer::new(client).max_decoding_message_size(max_message));
        let grpc_incoming = limited_incoming(grpc_listener, grpc_slots);
        tasks.push(spawn_grpc(client_router, grpc_incoming, grpc_tls.clone(), handshake_deadline, stop()));
        if let Some(listener) = admin_listener {
            let admin = AdminService::new(handle.clone());
            let token = handle.config.admin_token.as_deref().map(Arc::from);
            let admin_router = tonic::transport::Server::builder()
                .add_service(AdminServer::with_interceptor(admin, authenticate(token)));
            tasks.push(spawn_grpc(admin_router, incoming(listener), admin_tls.clone(), handshake_deadline, stop()));
        }
        if let Some(listener) = metrics_listener {
            tasks.push(tokio::spawn(crate::ops::http::serve(listener, handle.clone(), stop_rx.clone())));
        }
        if let Some(listener) = client_listener {
            tasks.push(tokio::spawn(crate::ports::zookeeper::run(
                listener,
                handle.clone(),
                stop_rx.clone(),
                None,
                four_letter::answer_boxed,
            )));
        }
        if let (Some(listener), Some(tls)) = (secure_client_listener, &zookeeper_tls) {
            let run = crate::ports::zookeeper::run(
                listener,
                handle.clone(),
                stop_rx.clone(),
                Some(tls.clone()),
                four_letter::answer_boxed,
            );
            tasks.push(tokio::spawn(run));
        }
        let mut reloadable: Vec<Reloadable> =
            zookeeper_tls.into_iter().chain(grpc_tls).chain(admin_tls).map(Reloadable::Listener).collect();
        reloadable.extend(peer_tls.map(Reloadable::Peers));
        if !reloadable.is_empty() {
            tokio::spawn(reload_on_hangup(reloadable, stop_rx.clone()));
        }
        on_bound(bound);

        let mut owner = started.owner;
        let result = tokio::select! {
            _ = shutdown => {
                hand_over_before_stopping(&handle).await;
                let _ = stop_tx.send(true);
                ServerError::joined("owner task", owner.await)
            }
            result = &mut owner => {
                let _ = stop_tx.send(true);
                ServerError::joined("owner task", result)
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
    })
}

/// Longest a stopping leader waits for its successor to be established.
const SHUTDOWN_HANDOVER: Duration = Duration::from_secs(3);

/// A leader that is asked to stop hands leadership to its most caught-up
/// follower first, so a rolling restart (or any planned stop) costs the
/// ensemble a hand-over of a few milliseconds instead of an election
/// timeout. Followers, lone members and leaders without a synced follower
/// stop at once.
async fn hand_over_before_stopping(handle: &crate::runtime::handle::Handle) {
    use crate::ops::handover::{hand_over, HandoverError};
    if handle.config.members.len() < 2 {
        return;
    }
    match hand_over(handle, None, SHUTDOWN_HANDOVER).await {
        Ok(h) => {
            let ms = u64::try_from(h.took.as_millis()).unwrap_or(u64::MAX);
            tracing::info!(to = h.to, ms, "handed leadership over before stopping");
        }
        Err(HandoverError::NotLeader { .. } | HandoverError::Stopped) => {}
        Err(e) => tracing::warn!(error = %e, "stopping without handing leadership over"),
    }
}

/// Serves `router` on `incoming` (over TLS with `tls`, each handshake due
/// within `deadline`) until `stop`.
fn spawn_grpc<IO, E>(
    router: Router,
    incoming: impl Stream<Item = Result<IO, E>> + Send + 'static,
    tls: Option<Arc<ServerTls>>,
    deadline: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<Result<(), String>>
where
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
    E: Into<std::io::Error> + Send + 'static,
{
    let incoming = incoming.map(|accepted| accepted.map_err(Into::into));
    match tls {
        Some(tls) => {
            let server = router.serve_with_incoming_shutdown(tls_incoming(incoming, tls, deadline), stop);
            tokio::spawn(async move { server.await.map_err(|e| e.to_string()) })
        }
        None => {
            let server = router.serve_with_incoming_shutdown(incoming, stop);
            tokio::spawn(async move { server.await.map_err(|e| e.to_string()) })
        }
    }
}

/// What SIGHUP re-reads the certificates of.
enum Reloadable {
    /// A client or admin listener.
    Listener(Arc<ServerTls>),
    /// The peer port, both as listener and as dialer.
    Peers(Arc<PeerTls>),
}

/// Re-reads every TLS certificate on SIGHUP, until `stop`; open connections
/// keep the certificate they began with.
async fn reload_on_hangup(listeners: Vec<Reloadable>, mut stop: watch::Receiver<bool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler: certificates are read at start only");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            got = hangups.recv() => {
                if got.is_none() {
                    return;
                }
                for tls in &listeners {
                    let reloaded = match tls {
                        Reloadable::Listener(tls) => tls.reload(),
                        Reloadable::Peers(tls) => tls.reload(),
                    };
                    match reloaded {
                        Ok(()) => tracing::info!("SIGHUP: TLS certificate re-read"),
                        Err(e) => tracing::error!(error = %e, "SIGHUP: TLS certificate not re-read; the old one stays"),
                    }
                }
            }
        }
    }
}

impl Bound {
    /// The line a server process prints (stdout and log) once it serves:
    /// its id and the addresses scripts connect to.
    pub fn ready_line(&self, id: impl std::fmt::Display) -> String {
        let mut line = format!("zabkeeper {id} ready: grpc {} peer {}", self.grpc, self.peer);
        if let Some(a) = self.admin {
            line.push_str(&format!(" admin {a}"));
        }
        if let Some(c) = self.client {
            line.push_str(&format!(" zookeeper {c}"));
        }
        if let Some(m) = self.metrics {
            line.push_str(&format!(" metrics {m}"));
        }
        line
    }
}

/// The log filter a server process runs with: `given` (its command line),
/// else RUST_LOG, else the config's `log_level`, else `info`.
pub fn log_filter(given: Option<String>, config: &ServerConfig) -> String {
    given
        .or_else(|| std::env::var("RUST_LOG").ok())
        .or_else(|| config.log_level.clone())
        .unwrap_or_else(|| "info".into())
}

/// Starts a server process's logging, to stderr: stdout carries only the
/// "ready" line (and the connect strings), which scripts and the test
/// harness read.
pub fn init_logs(filter: &str, format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).init(),
    }
}

/// Resolves at SIGINT or SIGTERM: what a server process stops on.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn the_ready_line_names_each_address_bound_and_only_those() {
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let mut bound =
            Bound { peer: addr(1), grpc: addr(2), admin: None, client: None, metrics: None, secure_client: None };
        assert_eq!(bound.ready_line(3), "zabkeeper 3 ready: grpc 127.0.0.1:2 peer 127.0.0.1:1");
        bound.admin = Some(addr(4));
        bound.client = Some(addr(5));
        bound.metrics = Some(addr(6));
        assert_eq!(
            bound.ready_line(3),
            "zabkeeper 3 ready: grpc 127.0.0.1:2 peer 127.0.0.1:1 admin 127.0.0.1:4 zookeeper 127.0.0.1:5 metrics 127.0.0.1:6"
        );
    }

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
