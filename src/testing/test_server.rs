//! A real single-replica server inside the test process, for the client's
//! end-to-end tests until the `zabkeeper` binary runs: the server runtime
//! (`runtime::start`) behind the gRPC session service, on a loopback port, in
//! its own tokio runtime so that `kill` drops every task and socket at once
//! (as `kill -9` would), and with an in-memory disk that survives restarts.

use crate::ports::grpc::{ClientService, MAX_CLIENT_MESSAGE};
use crate::testing::free_port;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use zabkeeper_client::{Client, ClientOptions};
use zabkeeper_config::ServerConfig;
use zabkeeper_core::ids::{Epoch, Zxid};
use zabkeeper_core::storage::{PurgeReport, Recovered, Scan, SnapshotMeta, Storage, StorageError};
use zabkeeper_core::txn::Entry;
use zabkeeper_core::zab::StorageOp;
use zabkeeper_proto::client::zab_keeper_server::ZabKeeperServer;

#[derive(Default)]
struct Disk {
    accepted_epoch: Epoch,
    current_epoch: Epoch,
    log: Vec<Entry>,
}

/// Durable state kept in memory: everything applied is "durable" (no crash
/// loss), and the whole log is replayed on recovery (no snapshots kept).
#[derive(Default)]
pub(crate) struct MemDisk {
    disk: Mutex<Disk>,
}

fn poisoned() -> StorageError {
    StorageError::Invalid("the test disk's lock is poisoned".into())
}

impl Storage for MemDisk {
    fn recover(&self) -> Result<Recovered, StorageError> {
        let disk = self.disk.lock().map_err(|_| poisoned())?;
        Ok(Recovered {
            accepted_epoch: disk.accepted_epoch,
            current_epoch: disk.current_epoch,
            snapshot: None,
            log: disk.log.clone(),
        })
    }

    fn apply(&self, ops: &[StorageOp]) -> Result<(), StorageError> {
        let mut disk = self.disk.lock().map_err(|_| poisoned())?;
        for op in ops {
            match op {
                StorageOp::Append(entries) => disk.log.extend(entries.iter().cloned()),
                StorageOp::TruncateAfter(zxid) => disk.log.retain(|e| e.zxid <= *zxid),
                StorageOp::SetAcceptedEpoch(e) => disk.accepted_epoch = *e,
                StorageOp::SetCurrentEpoch(e) => disk.current_epoch = *e,
                StorageOp::InstallSnapshot { .. } => {
                    return Err(StorageError::Invalid("the test disk cannot install snapshots".into()))
                }
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn save_snapshot_from(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError> {
        // Not kept: recovery replays the whole log instead.
        let chunks: Vec<Bytes> = chunks.collect();
        Ok(SnapshotMeta::of(zxid, &chunks, 0))
    }

    fn purge(&self, _keep: usize) -> Result<PurgeReport, StorageError> {
        Ok(PurgeReport::default())
    }

    fn scan_log(&self, scan: Scan, visit: &mut dyn FnMut(Entry) -> bool) -> Result<(), StorageError> {
        let disk = self.disk.lock().map_err(|_| poisoned())?;
        let entries: Box<dyn Iterator<Item = &Entry>> = match scan {
            Scan::From(from) => Box::new(disk.log.iter().filter(move |e| e.zxid >= from)),
            Scan::Back(to) => Box::new(disk.log.iter().rev().filter(move |e| e.zxid <= to)),
        };
        for entry in entries {
            if !visit(entry.clone()) {
                break;
            }
        }
        Ok(())
    }

    fn snapshot_chunk(&self, _zxid: Zxid, _index: u32) -> Result<Option<Bytes>, StorageError> {
        Ok(None)
    }

    fn log_bounds(&self) -> Result<Option<(Zxid, Zxid)>, StorageError> {
        let disk = self.disk.lock().map_err(|_| poisoned())?;
        Ok(disk.log.first().zip(disk.log.last()).map(|(a, b)| (a.zxid, b.zxid)))
    }

    fn snapshots(&self) -> Result<Vec<SnapshotMeta>, StorageError> {
        Ok(Vec::new())
    }
}

/// Listens on a loopback port, allowing reuse right after an old listener.
fn listen(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(([127, 0, 0, 1], port).into())?;
    socket.listen(1024)
}

/// One running replica.
pub(crate) struct TestServer {
    /// The gRPC port.
    pub port: u16,
    disk: Arc<MemDisk>,
    runtime: Option<tokio::runtime::Runtime>,
    _shutdown: watch::Sender<bool>,
}

impl TestServer {
    /// Starts a replica on `port` with `disk`; returns once it listens.
    /// Session timeouts are granted between 300 ms and 60 s.
    pub(crate) async fn start(port: u16, disk: Arc<MemDisk>) -> TestServer {
        let peer_port = free_port();
        let text = format!(
            "tick_ms = 20\nmin_session_timeout_ms = 300\nmax_session_timeout_ms = 60000\n\
             [[server]]\nid = 1\npeer_addr = \"127.0.0.1:{peer_port}\"\ngrpc_addr = \"127.0.0.1:{port}\"\n\
             data_dir = \"unused\"\n"
        );
        let config = ServerConfig::parse(&text, None).expect("the test config is valid");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a test runtime starts");
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (ready_tx, ready) = oneshot::channel::<Result<(), String>>();
        let storage: Arc<dyn Storage> = disk.clone();
        runtime.spawn(async move {
            // A killed predecessor's sockets close in the background: retry a while.
            let mut attempts = 0;
            let listener = loop {
                attempts += 1;
                match listen(port) {
                    Ok(l) => break l,
                    Err(e) if attempts >= 250 => {
                        return drop(ready_tx.send(Err(format!("bind 127.0.0.1:{port}: {e}"))));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            };
            let links = |handle: &crate::runtime::handle::Handle| -> Box<dyn crate::runtime::Links> {
                let addrs = crate::peer::addresses(&handle.config);
                Box::new(crate::peer::links(handle.config.id, addrs, handle.clone(), None).0)
            };
            let started = match crate::runtime::start(config, storage, shutdown_rx, links) {
                Ok(s) => s,
                Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
            };
            let service = ZabKeeperServer::new(ClientService::new(started.handle))
                .max_decoding_message_size(MAX_CLIENT_MESSAGE)
                .max_encoding_message_size(MAX_CLIENT_MESSAGE);
            let _ = ready_tx.send(Ok(()));
            let incoming = crate::serve::incoming(listener);
            let _ = tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await;
        });
        match tokio::time::timeout(Duration::from_secs(10), ready).await {
            Ok(Ok(Ok(()))) => {}
            other => panic!("test server did not start: {other:?}"),
        }
        TestServer { port, disk, runtime: Some(runtime), _shutdown: shutdown }
    }

    /// Starts a fresh replica on a free port.
    pub(crate) async fn fresh() -> TestServer {
        TestServer::start(free_port(), Arc::new(MemDisk::default())).await
    }

    /// The connect string.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Blocks the replica's only worker thread for `d`: it neither reads nor
    /// answers meanwhile, like a process paused by the OS.
    pub(crate) fn stall(&self, d: Duration) {
        if let Some(runtime) = &self.runtime {
            runtime.spawn(async move { std::thread::sleep(d) });
        }
    }

    /// Drops every task and socket of the replica at once; returns its disk.
    pub(crate) fn kill(mut self) -> Arc<MemDisk> {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        self.disk.clone()
    }

    /// Kills the replica and starts it again on the same port with the same disk.
    pub(crate) async fn restart(self) -> TestServer {
        let port = self.port;
        let disk = self.kill();
        TestServer::start(port, disk).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A TCP proxy in front of a server, to cut a client's connection (and keep
/// it from reconnecting) while the server stays up and other clients use it.
pub(crate) struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    target: u16,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    /// Forwards `127.0.0.1:<free port>` to `127.0.0.1:target`.
    pub(crate) async fn start(target: u16) -> Proxy {
        let mut proxy = Proxy { port: free_port(), target, task: None };
        proxy.resume().await;
        proxy
    }

    /// The connect string.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Drops every proxied connection and stops listening.
    pub(crate) fn cut(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Listens again on the same port.
    pub(crate) async fn resume(&mut self) {
        self.cut();
        let mut attempts = 0;
        let listener = loop {
            attempts += 1;
            match listen(self.port) {
                Ok(l) => break l,
                Err(e) if attempts >= 250 => panic!("cannot listen on proxy port {}: {e}", self.port),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let target = self.target;
        self.task = Some(tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every connection.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut inbound, _)) = accepted else { continue };
                        connections.spawn(async move {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        }));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Client settings for tests against a test server: short session, bounded waits.
pub(crate) fn options() -> ClientOptions {
    ClientOptions::default()
        .with_session_timeout(Duration::from_secs(3))
        .with_connect_timeout(Duration::from_secs(5))
        .with_request_timeout(Duration::from_secs(10))
}

/// A session on `address` with [`options`].
pub(crate) async fn connect(address: &str) -> Client {
    Client::connect(address, options()).await.expect("connect to the test server")
}
