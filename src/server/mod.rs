//! The runtime of one replica: wires the pure [`Replica`] to tokio, gRPC and sled.
//!
//! One owner task holds the replica and is the only one that touches it.
//! Everything else talks to it through one bounded event channel: the client
//! front ends (gRPC sessions, the ZooKeeper wire port), the peer transport,
//! the storage worker (group commit on its own thread) and the snapshot
//! writer. Each turn of the owner takes every event already waiting, then
//! carries out the replica's outputs in order: one storage batch per turn,
//! one flush for many transactions.

pub mod clock;
pub mod config;
pub mod serve;
pub mod storage_worker;
pub mod transport;

use crate::error::ErrorCode;
use crate::ids::{Epoch, ServerId, Zxid};
use crate::op::Op;
use crate::replica::{self, ClientMessage, ConnId, ConnectRequest, Counters, Echo, Input, Output, Replica};
use crate::storage::Storage;
use crate::tree::acl::Id;
use crate::tree::snapshot;
use crate::zab::{Io, Message, Role, Status};
use bytes::Bytes;
use config::ServerConfig;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Capacity of the owner's inbox; senders wait when it is full (backpressure).
const INBOX: usize = 65_536;
/// Most replies queued for one client before it is considered stuck and dropped.
pub const CLIENT_QUEUE: usize = 16_384;
/// Most requests one connection may have in flight; beyond it the front end
/// stops reading that connection (TCP backpressure) until replies go out.
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 1024;
/// Most events taken in one turn before outputs are carried out.
const EVENTS_PER_TURN: usize = 1024;

/// What the owner task hears.
pub enum Event {
    /// A message from another replica.
    Peer {
        /// The sender.
        from: ServerId,
        /// The message.
        msg: Message,
    },
    /// A peer stream broke.
    PeerDisconnected {
        /// The other side.
        peer: ServerId,
    },
    /// Storage operations up to `seq` are durable.
    Persisted {
        /// Sequence number.
        seq: u64,
    },
    /// The storage worker failed: fatal.
    StorageFailed(String),
    /// A snapshot is durable.
    SnapshotSaved {
        /// Its zxid.
        zxid: Zxid,
    },
    /// Writing a snapshot failed (not fatal: the log still has everything).
    SnapshotFailed(String),
    /// A client connection asks for a session.
    Connect {
        /// Its id.
        conn: ConnId,
        /// What it asks.
        request: ConnectRequest,
        /// Its address as an identity.
        identities: Vec<Id>,
        /// Where its messages go.
        tx: mpsc::Sender<ClientMessage>,
    },
    /// A client request.
    Request {
        /// Connection.
        conn: ConnId,
        /// Client xid.
        xid: i32,
        /// Handed back with the reply.
        echo: Echo,
        /// The op.
        op: Op,
    },
    /// A request the front end could not decode.
    BadRequest {
        /// Connection.
        conn: ConnId,
        /// Client xid.
        xid: i32,
        /// Handed back with the reply.
        echo: Echo,
        /// The error to answer.
        error: crate::error::ZkError,
    },
    /// A client connection closed.
    Disconnect {
        /// Connection.
        conn: ConnId,
    },
    /// A question from the admin API or a four-letter word.
    Query(Query),
}

/// Questions answered by the owner task.
pub enum Query {
    /// The replica's state.
    Status(oneshot::Sender<StatusReport>),
    /// Take a snapshot now; answered once durable.
    TakeSnapshot(oneshot::Sender<Result<Zxid, String>>),
    /// Details for four-letter words (`cons`, `wchs`, `dump`).
    Details(oneshot::Sender<Details>),
}

/// A replica's state, for the admin API and four-letter words.
#[derive(Clone, Debug)]
pub struct StatusReport {
    /// This replica.
    pub id: ServerId,
    /// Role, leader, serving.
    pub status: Status,
    /// acceptedEpoch.
    pub accepted_epoch: Epoch,
    /// currentEpoch.
    pub current_epoch: Epoch,
    /// Last logged zxid.
    pub last_logged: Zxid,
    /// Last committed zxid.
    pub last_committed: Zxid,
    /// Last applied zxid.
    pub last_applied: Zxid,
    /// Nodes in the tree.
    pub nodes: usize,
    /// Bytes of node data.
    pub data_bytes: u64,
    /// Live sessions.
    pub sessions: usize,
    /// Client connections here.
    pub connections: usize,
    /// Watches here.
    pub watches: usize,
    /// Synced followers (leader only).
    pub synced_followers: Vec<ServerId>,
    /// Ensemble size.
    pub ensemble_size: usize,
    /// Activity counters.
    pub counters: Counters,
    /// Ephemeral nodes.
    pub ephemerals: usize,
}

/// Per-connection and per-session details.
#[derive(Clone, Debug, Default)]
pub struct Details {
    /// (connection, session, queued requests).
    pub connections: Vec<(ConnId, Option<crate::ids::SessionId>, usize)>,
    /// Watched paths per session.
    pub watches: Vec<(crate::ids::SessionId, Vec<String>)>,
    /// Ephemerals per session.
    pub ephemerals: Vec<(crate::ids::SessionId, Vec<String>)>,
}

/// Request counters and latencies the front ends keep (for `srvr`, `mntr`).
#[derive(Debug)]
pub struct ServerStats {
    received: AtomicU64,
    sent: AtomicU64,
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_min_us: AtomicU64,
    latency_max_us: AtomicU64,
}

/// A copy of [`ServerStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StatsSnapshot {
    /// Requests received.
    pub received: u64,
    /// Replies and events sent.
    pub sent: u64,
    /// Fastest reply, ms.
    pub min_ms: f64,
    /// Mean reply time, ms.
    pub avg_ms: f64,
    /// Slowest reply, ms.
    pub max_ms: f64,
}

impl Default for ServerStats {
    fn default() -> ServerStats {
        ServerStats {
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            latency_count: AtomicU64::new(0),
            latency_sum_us: AtomicU64::new(0),
            latency_min_us: AtomicU64::new(u64::MAX),
            latency_max_us: AtomicU64::new(0),
        }
    }
}

impl ServerStats {
    /// Counts a request in.
    pub fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a message out.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the time from a request's arrival to its reply.
    pub fn latency(&self, elapsed: Duration) {
        let us = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        self.latency_min_us.fetch_min(us, Ordering::Relaxed);
        self.latency_max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let count = self.latency_count.load(Ordering::Relaxed);
        let min = self.latency_min_us.load(Ordering::Relaxed);
        StatsSnapshot {
            received: self.received.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            min_ms: if count == 0 { 0.0 } else { min as f64 / 1000.0 },
            avg_ms: if count == 0 {
                0.0
            } else {
                self.latency_sum_us.load(Ordering::Relaxed) as f64 / count as f64 / 1000.0
            },
            max_ms: self.latency_max_us.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}

/// What the front ends need to reach the owner task.
#[derive(Clone)]
pub struct ServerHandle {
    /// The owner's inbox.
    pub events: mpsc::Sender<Event>,
    /// Hands out connection ids.
    next_conn: Arc<AtomicU64>,
    /// The configuration.
    pub config: Arc<ServerConfig>,
    /// The storage (read-only use: log inspection).
    pub storage: Arc<dyn Storage>,
    /// The latest role, leader, serving state.
    pub status: watch::Receiver<Status>,
    /// Request counters and latencies.
    pub stats: Arc<ServerStats>,
}

impl ServerHandle {
    /// A fresh connection id.
    pub fn next_conn(&self) -> ConnId {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// Asks the owner task for its state.
    pub async fn status_report(&self) -> Option<StatusReport> {
        let (tx, rx) = oneshot::channel();
        self.events.send(Event::Query(Query::Status(tx))).await.ok()?;
        rx.await.ok()
    }

    /// Asks the owner task for per-connection details.
    pub async fn details(&self) -> Option<Details> {
        let (tx, rx) = oneshot::channel();
        self.events.send(Event::Query(Query::Details(tx))).await.ok()?;
        rx.await.ok()
    }
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Storage failed at start or while running.
    #[error("storage: {0}")]
    Storage(String),
    /// A listener could not bind.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Which port.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A thread could not start.
    #[error("cannot start the storage thread: {0}")]
    Thread(std::io::Error),
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The replica's settings from the server config.
pub fn replica_config(config: &ServerConfig) -> replica::Config {
    let voters = config.members.iter().map(|m| m.id).collect();
    let mut c = replica::Config::new(config.id, voters, config.tick_ms);
    c.zab.init_limit_ticks = config.init_limit_ticks;
    c.zab.sync_limit_ticks = config.sync_limit_ticks;
    c.min_session_timeout_ms = config.min_session_timeout_ms;
    c.max_session_timeout_ms = config.max_session_timeout_ms;
    c.limits.max_data_bytes = config.max_data_bytes;
    c.snapshot_every = config.snapshot_every;
    c
}

/// A started replica: the handle front ends use and the owner's join handle.
pub struct Started {
    /// For the front ends.
    pub handle: ServerHandle,
    /// Finishes when the owner task stops (after `shutdown` fires).
    pub owner: tokio::task::JoinHandle<Result<(), ServerError>>,
    /// The followers' streams (for the peer service).
    pub inbound: transport::InboundRegistry,
}

/// Recovers from storage and starts the owner task.
pub fn start(
    config: ServerConfig,
    storage: Arc<dyn Storage>,
    shutdown: watch::Receiver<bool>,
) -> Result<Started, ServerError> {
    let recovered = storage.recover().map_err(|e| ServerError::Storage(e.to_string()))?;
    tracing::info!(
        id = config.id,
        snapshot = %recovered.snapshot_zxid(),
        last_zxid = %recovered.last_zxid(),
        entries = recovered.log.len(),
        accepted_epoch = recovered.accepted_epoch,
        current_epoch = recovered.current_epoch,
        "recovered from disk"
    );
    let replica = Replica::new(replica_config(&config), recovered, clock::now_ms());
    let (events_tx, events_rx) = mpsc::channel(INBOX);
    let (status_tx, status_rx) = watch::channel(replica.status());
    let (storage_tx, storage_thread) =
        storage_worker::spawn(storage.clone(), events_tx.clone()).map_err(ServerError::Thread)?;
    let inbound: transport::InboundRegistry = Default::default();
    let addrs = config.members.iter().map(|m| (m.id, m.peer_addr)).collect();
    let transport = transport::Transport::new(config.id, addrs, events_tx.clone(), inbound.clone());
    let config = Arc::new(config);
    let handle = ServerHandle {
        events: events_tx.clone(),
        next_conn: Arc::new(AtomicU64::new(1)),
        config: config.clone(),
        storage: storage.clone(),
        status: status_rx,
        stats: Arc::new(ServerStats::default()),
    };
    let owner = Owner {
        replica,
        config,
        storage,
        storage_tx: Some(storage_tx),
        transport,
        conns: HashMap::new(),
        leaving: Vec::new(),
        status_tx,
        events_tx,
        snapshot_waiters: Vec::new(),
    };
    let task = tokio::spawn(async move {
        let result = owner.run(events_rx, shutdown).await;
        // Dropping the batch sender stopped the worker after a final flush.
        let _ = tokio::task::spawn_blocking(move || storage_thread.join()).await;
        result
    });
    Ok(Started { handle, owner: task, inbound })
}

struct Owner {
    replica: Replica,
    config: Arc<ServerConfig>,
    storage: Arc<dyn Storage>,
    storage_tx: Option<mpsc::UnboundedSender<storage_worker::Batch>>,
    transport: transport::Transport,
    conns: HashMap<ConnId, mpsc::Sender<ClientMessage>>,
    /// Connections that went away this turn.
    leaving: Vec<ConnId>,
    status_tx: watch::Sender<Status>,
    events_tx: mpsc::Sender<Event>,
    snapshot_waiters: Vec<oneshot::Sender<Result<Zxid, String>>>,
}

impl Owner {
    async fn run(
        mut self,
        mut events: mpsc::Receiver<Event>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), ServerError> {
        let span = tracing::info_span!("replica", id = self.config.id);
        let _enter = span.enter();
        let mut ticker = tokio::time::interval(Duration::from_millis(self.config.tick_ms));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut result = Ok(());
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                _ = ticker.tick() => self.replica.handle(Input::Tick { now_ms: clock::now_ms() }),
                event = events.recv() => {
                    let Some(event) = event else { break };
                    if let Err(e) = self.on_event(event) {
                        result = Err(e);
                        break;
                    }
                }
            }
            for _ in 0..EVENTS_PER_TURN {
                match events.try_recv() {
                    Ok(event) => {
                        if let Err(e) = self.on_event(event) {
                            result = Err(e);
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            if result.is_err() {
                break;
            }
            self.carry_out();
        }
        self.shut_down();
        result
    }

    fn on_event(&mut self, event: Event) -> Result<(), ServerError> {
        let input = match event {
            Event::Peer { from, msg } => Input::Peer { from, msg },
            Event::PeerDisconnected { peer } => Input::PeerDisconnected { peer },
            Event::Persisted { seq } => Input::Persisted { seq },
            Event::StorageFailed(e) => {
                tracing::error!(error = %e, "storage failed; stopping this replica");
                return Err(ServerError::Storage(e));
            }
            Event::SnapshotSaved { zxid } => {
                tracing::info!(zxid = %zxid, "snapshot saved");
                for w in self.snapshot_waiters.drain(..) {
                    let _ = w.send(Ok(zxid));
                }
                Input::SnapshotSaved { zxid }
            }
            Event::SnapshotFailed(e) => {
                tracing::error!(error = %e, "snapshot failed");
                for w in self.snapshot_waiters.drain(..) {
                    let _ = w.send(Err(e.clone()));
                }
                return Ok(());
            }
            Event::Connect { conn, request, identities, tx } => {
                self.conns.insert(conn, tx);
                let new_password = Bytes::from(rand::random::<[u8; 16]>().to_vec());
                Input::Connect { conn, request, new_password, identities }
            }
            Event::Request { conn, xid, echo, op } => Input::Request { conn, xid, echo, op },
            Event::BadRequest { conn, xid, echo, error } => Input::BadRequest { conn, xid, echo, error },
            Event::Disconnect { conn } => {
                // Messages produced earlier in this turn still go out; the
                // sender is dropped once the turn's outputs are carried out.
                self.leaving.push(conn);
                Input::Disconnect { conn }
            }
            Event::Query(q) => {
                self.on_query(q);
                return Ok(());
            }
        };
        self.replica.handle(input);
        Ok(())
    }

    fn on_query(&mut self, query: Query) {
        match query {
            Query::Status(reply) => {
                let _ = reply.send(self.report());
            }
            Query::TakeSnapshot(reply) => {
                // If one is already being written, its completion answers.
                self.snapshot_waiters.push(reply);
                self.replica.snapshot_now();
            }
            Query::Details(reply) => {
                let tree = self.replica.tree();
                let _ = reply.send(Details {
                    connections: self.replica.connections(),
                    watches: tree.watches().by_session(),
                    ephemerals: tree.state().all_ephemerals(),
                });
            }
        }
    }

    fn report(&self) -> StatusReport {
        let r = &self.replica;
        let tree = r.tree();
        StatusReport {
            id: self.config.id,
            status: r.status(),
            accepted_epoch: r.zab().accepted_epoch(),
            current_epoch: r.zab().current_epoch(),
            last_logged: r.zab().last_logged(),
            last_committed: r.zab().last_committed(),
            last_applied: tree.last_zxid(),
            nodes: tree.state().node_count(),
            data_bytes: tree.state().data_bytes(),
            sessions: tree.state().session_count(),
            connections: r.connection_count(),
            watches: tree.watches().count(),
            synced_followers: r.zab().synced_followers(),
            ensemble_size: self.config.members.len(),
            counters: r.counters(),
            ephemerals: tree.state().all_ephemerals().iter().map(|(_, p)| p.len()).sum(),
        }
    }

    /// Carries out the replica's outputs, in order.
    fn carry_out(&mut self) {
        let mut batch: storage_worker::Batch = Vec::new();
        // Dropping a stuck client feeds the replica again; bounded by the connection count.
        for _ in 0..64 {
            let outputs = self.replica.take_outputs();
            if outputs.is_empty() {
                break;
            }
            let mut stuck = Vec::new();
            for output in outputs {
                match output {
                    Output::Zab(Io::Send { to, msg }) => self.transport.send(to, msg),
                    Output::Zab(Io::Persist { seq, op }) => batch.push((seq, op)),
                    Output::Client { conn, msg } => {
                        if !self.deliver(conn, msg) {
                            stuck.push(conn);
                        }
                    }
                    Output::TakeSnapshot { state } => self.write_snapshot(state),
                    Output::Status(status) => self.on_status(status),
                }
            }
            for conn in stuck {
                self.conns.remove(&conn);
                self.replica.handle(Input::Disconnect { conn });
            }
        }
        if !batch.is_empty() {
            if let Some(tx) = &self.storage_tx {
                let _ = tx.send(batch);
            }
        }
        for conn in self.leaving.drain(..) {
            self.conns.remove(&conn);
        }
    }

    /// Delivers a client message; false when the client cannot keep up.
    fn deliver(&mut self, conn: ConnId, msg: ClientMessage) -> bool {
        let last = matches!(msg, ClientMessage::Close { .. } | ClientMessage::ConnectFailed { .. });
        let Some(tx) = self.conns.get(&conn) else { return true };
        let ok = match tx.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(conn, "client is not reading its replies; dropping the connection");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        };
        if last {
            self.conns.remove(&conn);
            return true;
        }
        ok
    }

    fn on_status(&mut self, status: Status) {
        let role = match status.role {
            Role::Looking => "looking",
            Role::Following => "following",
            Role::Leading => "leading",
        };
        tracing::info!(role, epoch = status.epoch, leader = ?status.leader, serving = status.serving, "role changed");
        self.transport.on_status(status);
        let _ = self.status_tx.send(status);
    }

    fn write_snapshot(&mut self, state: crate::tree::TreeState) {
        let storage = self.storage.clone();
        let events = self.events_tx.clone();
        let retained = self.config.snapshots_retained;
        tokio::task::spawn_blocking(move || {
            let zxid = state.last_zxid();
            let (chunks, info) = snapshot::to_chunks(&state, 1 << 20);
            let event = match storage.save_snapshot(zxid, &chunks).and_then(|_| storage.purge(retained)) {
                Ok(purged) => {
                    tracing::info!(zxid = %zxid, nodes = info.nodes, bytes = info.bytes, purged_snapshots = purged.snapshots_removed, purged_entries = purged.entries_removed, "snapshot written");
                    Event::SnapshotSaved { zxid }
                }
                Err(e) => Event::SnapshotFailed(e.to_string()),
            };
            let _ = events.blocking_send(event);
        });
    }

    /// Clean stop: every client is told, pending storage is flushed.
    fn shut_down(&mut self) {
        tracing::info!("shutting down: closing client connections and flushing the log");
        // Ends followers' streams so the peer server's graceful stop need not wait for them.
        self.transport.shut_down();
        for (_, tx) in self.conns.drain() {
            let _ = tx.try_send(ClientMessage::Close {
                error: ErrorCode::ConnectionLoss,
                reason: "the server is shutting down".into(),
            });
        }
        let mut batch = Vec::new();
        for output in self.replica.take_outputs() {
            if let Output::Zab(Io::Persist { seq, op }) = output {
                batch.push((seq, op));
            }
        }
        if let Some(tx) = self.storage_tx.take() {
            if !batch.is_empty() {
                let _ = tx.send(batch);
            }
        }
    }
}
