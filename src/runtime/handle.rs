//! The narrow handle through which everything outside the owner task
//! reaches the replica: the client ports (ZooKeeper port, gRPC
//! sessions, admin), the peer transport and the storage worker. They send
//! [`Event`]s into one bounded inbox; the owner task (`runtime::owner`) is the only
//! one that touches the replica, and hands each [`Input`] to it as is.

use crate::telemetry::stats::ServerStats;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use zabkeeper_config::ServerConfig;
use zabkeeper_core::ids::{Epoch, ServerId, Zxid};
use zabkeeper_core::members::Configuration;
use zabkeeper_core::replica::load::{LoadError, LoadOutcome};
use zabkeeper_core::replica::reconfig::{MemberChange, ReconfigError};
use zabkeeper_core::replica::{ClientMessage, ConnId, ConnSummary, Counters, Input};
use zabkeeper_core::storage::Storage;
use zabkeeper_core::zab::{FollowerProgress, Status, TransferError};

/// What the owner task hears.
pub enum Event {
    /// Something for the replica, handed to it as is.
    Input(Input),
    /// A client connection opens: where its messages go. Its
    /// [`Input::Connect`] follows on the same inbox.
    Open {
        /// The connection.
        conn: ConnId,
        /// Its outbox.
        tx: mpsc::Sender<ClientMessage>,
        /// Bytes queued in the outbox, not yet taken by the connection's writer.
        queued_bytes: Arc<AtomicUsize>,
    },
    /// A question from the admin API or a four-letter word.
    Query(Query),
    /// The storage worker failed: fatal.
    StorageFailed(String),
    /// Writing a snapshot failed (not fatal: the log still has everything).
    SnapshotFailed(String),
}

/// Questions answered by the owner task.
pub enum Query {
    /// The replica's state.
    Status(oneshot::Sender<StatusReport>),
    /// Take a snapshot now; answered once durable.
    TakeSnapshot(oneshot::Sender<Result<Zxid, String>>),
    /// Details for four-letter words (`cons`, `wchs`, `dump`).
    Details(oneshot::Sender<Details>),
    /// Role, leader and serving, and the member a leader is handing over to:
    /// the cheap question a hand-over asks every few milliseconds.
    Role(oneshot::Sender<(Status, Option<ServerId>)>),
    /// Hand leadership to a member (or the most caught-up one); answered
    /// with the nominee once the hand-over has started.
    TransferLeadership {
        /// The member named, if any.
        to: Option<ServerId>,
        /// The nominee, or why there is none.
        reply: oneshot::Sender<Result<ServerId, TransferError>>,
    },
    /// Change the membership (the leader only); answered with the zxid of
    /// the joint configuration's entry once proposed.
    Reconfigure {
        /// The change.
        change: MemberChange,
        /// The zxid, or why not.
        reply: oneshot::Sender<Result<Zxid, ReconfigError>>,
    },
    /// The committed configuration (the tree's).
    Configuration(oneshot::Sender<Configuration>),
    /// Load a tree into the empty one (the leader only); answered once proposed.
    LoadTree {
        /// The tree, as `tree::snapshot` chunks.
        chunks: Vec<bytes::Bytes>,
        /// The highest epoch of the history it came from.
        epoch: Epoch,
        /// The zxid and the loaded history's epoch, or why not.
        reply: oneshot::Sender<Result<(Zxid, Epoch), LoadError>>,
    },
    /// What applying the load at this zxid gave, once applied here.
    LoadOutcome(Zxid, oneshot::Sender<Option<LoadOutcome>>),
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
    /// On the leader, each follower's progress.
    pub followers: Vec<FollowerProgress>,
    /// Why the last snapshot failed, until one succeeds.
    pub last_snapshot_error: Option<String>,
    /// Syncs not yet answered.
    pub pending_syncs: usize,
    /// Free bytes on the data directory's filesystem (None if unreadable).
    pub disk_free_bytes: Option<u64>,
    /// Below `disk_reserve_bytes`: writes that grow the state are refused while leading.
    pub disk_low: bool,
}

/// Per-connection and per-session details.
#[derive(Clone, Debug, Default)]
pub struct Details {
    /// Every client connection here.
    pub connections: Vec<ConnSummary>,
    /// Every live session and its timeout (ensemble-wide: from the tree).
    pub sessions: Vec<(zabkeeper_core::ids::SessionId, i32)>,
    /// On the leader: every session and when it expires unless heard from,
    /// ms since the epoch (empty elsewhere).
    pub expiries: Vec<(zabkeeper_core::ids::SessionId, i64)>,
    /// Watched paths per session.
    pub watches: Vec<(zabkeeper_core::ids::SessionId, Vec<String>)>,
    /// Ephemerals per session.
    pub ephemerals: Vec<(zabkeeper_core::ids::SessionId, Vec<String>)>,
}

/// What front ends and the transport hold to reach the owner task.
#[derive(Clone)]
pub struct Handle {
    /// The owner's inbox.
    pub events: mpsc::Sender<Event>,
    /// Hands out connection ids.
    next_conn: Arc<AtomicU64>,
    /// The configuration.
    pub config: Arc<ServerConfig>,
    /// The storage (read-only use: log inspection).
    pub storage: Arc<dyn Storage>,
    /// Request counters and latencies.
    pub stats: Arc<ServerStats>,
    /// The highest zxid applied to the tree, published after every turn of
    /// the owner (for the admin API's live log stream).
    pub applied: watch::Receiver<Zxid>,
    /// When the server started.
    pub started: std::time::Instant,
    /// Prometheus metrics.
    pub metrics: Arc<crate::telemetry::metrics::Metrics>,
    /// Every client connection's counters (`cons`, `stat`).
    pub conns: Arc<crate::telemetry::stats::ConnRegistry>,
    /// Which events are traced (`gtmk`, `stmk`).
    pub trace_mask: Arc<crate::telemetry::trace_mask::TraceMask>,
    /// The peer protocol each member that followed this one last agreed on
    /// (what a leader may send it: a load needs `peer_protocol::LOAD`).
    pub peer_versions: Arc<std::sync::Mutex<std::collections::BTreeMap<ServerId, u32>>>,
}

impl Handle {
    /// A handle on the inbox `events` of a replica run with `config` on `storage`.
    pub fn new(
        events: mpsc::Sender<Event>,
        config: Arc<ServerConfig>,
        storage: Arc<dyn Storage>,
        applied: watch::Receiver<Zxid>,
    ) -> Handle {
        Handle {
            events,
            next_conn: Arc::new(AtomicU64::new(1)),
            config,
            storage,
            stats: Arc::default(),
            applied,
            started: std::time::Instant::now(),
            metrics: Arc::default(),
            conns: Arc::default(),
            trace_mask: Arc::default(),
            peer_versions: Arc::default(),
        }
    }

    /// Hands an input to the replica, waiting while the inbox is full; false
    /// once the owner task has stopped.
    pub async fn input(&self, input: Input) -> bool {
        self.events.send(Event::Input(input)).await.is_ok()
    }

    /// A fresh connection id.
    pub fn next_conn(&self) -> ConnId {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// Asks the owner task a question and waits for its answer; None once
    /// the owner task has stopped.
    pub async fn ask<T>(&self, query: impl FnOnce(oneshot::Sender<T>) -> Query) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.events.send(Event::Query(query(reply))).await.ok()?;
        answer.await.ok()
    }

    /// Asks the owner task for its state.
    pub async fn status_report(&self) -> Option<StatusReport> {
        self.ask(Query::Status).await
    }

    /// Asks the owner task for per-connection details.
    pub async fn details(&self) -> Option<Details> {
        self.ask(Query::Details).await
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
