//! The replica's vocabulary with the outside world: what it is told
//! ([`Input`]), what it asks for ([`Output`]), what it tells a client
//! ([`ClientMessage`]) and what it starts from ([`Recovered`]). The server
//! runtime and the simulation speak exactly these types.

use crate::acl::Id;
use crate::error::{ErrorCode, ZkError};
use crate::ids::{Epoch, ServerId, SessionId, Zxid};
use crate::op::{MultiItem, Op, OpResult, Reply};
pub use crate::session::{ConnId, ConnectRequest};
use crate::tree::watch::WatchEvent;
use crate::tree::TreeState;
use crate::txn::Entry;
use crate::wire::ReplyShape;
use crate::zab::{self, Message, Status};
use bytes::Bytes;
use std::time::Instant;

/// What a front end needs back with a reply to encode it. The replica keeps
/// it beside the request and returns it untouched, so a front end needs no
/// queue of its own to pair replies with requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Echo {
    /// How the ZooKeeper port encodes the reply; `None` for a header-only
    /// error reply (a request it could not decode) and for gRPC.
    pub shape: Option<ReplyShape>,
    /// When the request arrived, for latency statistics (the runtime's clock;
    /// the simulation leaves it empty).
    pub arrived: Option<Instant>,
    /// The operation's names, for metrics and `cons` (set when the request
    /// is handed in; empty for a request that could not be decoded).
    pub op: crate::op::OpLabel,
}

/// Something that happened to the replica. The server loop and the
/// simulation both feed these, and only these.
#[derive(Clone, Debug)]
pub enum Input {
    /// Time passed; `now_ms` is the wall clock (stamped into transactions).
    Tick {
        /// Milliseconds since the Unix epoch.
        now_ms: i64,
    },
    /// A message from another replica.
    Peer {
        /// The sender.
        from: ServerId,
        /// The message.
        msg: Message,
    },
    /// The connection to another replica broke.
    PeerDisconnected {
        /// The other side.
        peer: ServerId,
        /// Which of the two streams between us.
        link: crate::zab::Link,
    },
    /// Storage operations up to `seq` are durable.
    Persisted {
        /// Sequence number.
        seq: u64,
    },
    /// A snapshot requested by [`Output::TakeSnapshot`] is durable.
    SnapshotSaved {
        /// Its zxid.
        zxid: Zxid,
        /// The oldest snapshot storage keeps after purging: the stored log
        /// reaches back to it and no further.
        log_floor: Zxid,
    },
    /// Storage dropped its log up to `log_floor` (an operator's purge): a
    /// DIFF can no longer reach below it.
    LogPurged {
        /// The oldest snapshot storage keeps.
        log_floor: Zxid,
    },
    /// Writing the snapshot requested by [`Output::TakeSnapshot`] failed;
    /// the log still holds everything, and the next one is taken when due.
    SnapshotFailed,
    /// Whether the data directory is short of space (below the configured
    /// reserve): a leader that is refuses writes that would grow the state,
    /// with ThrottledOp, until space returns.
    DiskSpace {
        /// Below the reserve.
        low: bool,
    },
    /// Another member said where else it serves (its gRPC, admin, metrics
    /// addresses): filled into its line when a reconfiguration adds it
    /// with a ZooKeeper server line, which has no place for them.
    PeerEndpoints {
        /// The member.
        from: ServerId,
        /// The peer address it said it from (`host:port`).
        peer: String,
        /// What it said.
        endpoints: crate::members::Endpoints,
    },
    /// A client wants a session.
    Connect {
        /// The new connection.
        conn: ConnId,
        /// What it asks.
        request: ConnectRequest,
        /// A fresh random password, used if a new session is created.
        new_password: Bytes,
        /// Implicit identities (the client's address as `ip`).
        identities: Vec<Id>,
    },
    /// A request on an attached connection.
    Request {
        /// The connection.
        conn: ConnId,
        /// Client-chosen id, echoed.
        xid: i32,
        /// Handed back with the reply.
        echo: Echo,
        /// The request.
        op: Op,
        /// A read to answer only once it is linearizable (`read_index`);
        /// ignored for writes, which always are.
        linearizable: bool,
    },
    /// A request the front end could not decode: it is answered with `error`
    /// in its turn, so the session's replies stay in order.
    BadRequest {
        /// The connection.
        conn: ConnId,
        /// The request's xid, if it could be read.
        xid: i32,
        /// Handed back with the reply.
        echo: Echo,
        /// What was wrong.
        error: ZkError,
    },
    /// The client's connection closed (the session lives on until it expires).
    Disconnect {
        /// The connection.
        conn: ConnId,
    },
}

/// What a connection is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    /// The session is attached.
    Connected {
        /// Session id.
        session: SessionId,
        /// Password.
        password: Bytes,
        /// Negotiated timeout.
        timeout_ms: i32,
        /// The replica's last applied zxid.
        zxid: Zxid,
    },
    /// The connect was refused; the connection is closed after this.
    ConnectFailed {
        /// SessionExpired (unknown session or wrong password) or ConnectionLoss (try another replica).
        error: ErrorCode,
        /// Why.
        reason: String,
    },
    /// The answer to a request.
    Reply {
        /// The request's xid.
        xid: i32,
        /// What the front end handed in with the request.
        echo: Echo,
        /// The replica's last applied zxid.
        zxid: Zxid,
        /// The outcome.
        reply: Reply,
    },
    /// A watch fired.
    Event(WatchEvent),
    /// The connection is closed by the server; nothing follows.
    Close {
        /// SessionExpired, ConnectionLoss, SessionMoved, or Ok after a closeSession.
        error: ErrorCode,
        /// Why.
        reason: String,
    },
}

impl ClientMessage {
    /// About how many bytes the message takes once encoded: what a client
    /// that does not read lets pile up (paths, data and names; a fixed
    /// amount for headers and Stats).
    pub fn approximate_size(&self) -> usize {
        MESSAGE_OVERHEAD
            + match self {
                ClientMessage::Reply { reply: Ok(r), .. } => result_size(r),
                ClientMessage::Reply { reply: Err(e), .. } => e.path.len() + e.reason.len(),
                ClientMessage::Event(e) => e.path.len(),
                ClientMessage::Connected { password, .. } => password.len(),
                ClientMessage::ConnectFailed { reason, .. } | ClientMessage::Close { reason, .. } => reason.len(),
            }
    }

    /// Whether nothing follows this message on its connection.
    pub fn is_last(&self) -> bool {
        matches!(self, ClientMessage::Close { .. } | ClientMessage::ConnectFailed { .. })
    }
}

/// What a message costs beside its variable parts (headers, a Stat).
const MESSAGE_OVERHEAD: usize = 96;

/// The variable part of a result's encoded size.
fn result_size(r: &OpResult) -> usize {
    let strings = |v: &[String]| v.iter().map(|s| s.len() + 4).sum::<usize>();
    match r {
        OpResult::Created { path, .. } | OpResult::Synced(path) => path.len(),
        OpResult::Data { data, .. } => data.len(),
        OpResult::Children { children, .. } | OpResult::Paths(children) => strings(children),
        OpResult::Acl { acl, .. } => acl.iter().map(|a| a.id.scheme.len() + a.id.id.len() + 12).sum(),
        OpResult::Identities(ids) => ids.iter().map(|i| i.scheme.len() + i.id.len() + 8).sum(),
        OpResult::Multi(items) => items
            .iter()
            .map(|i| match i {
                MultiItem::Ok(r) => MESSAGE_OVERHEAD + result_size(r),
                MultiItem::Err(_) => 8,
            })
            .sum(),
        OpResult::Stat(_) | OpResult::Count(_) | OpResult::Empty => 0,
    }
}

/// Something the runtime must do.
#[derive(Clone, Debug)]
pub enum Output {
    /// Zab's own I/O, passed through as Zab produced it: a message to send or
    /// a storage operation to perform (answer with [`Input::Persisted`]).
    Zab(zab::Io),
    /// Tell a client connection something.
    Client {
        /// The connection.
        conn: ConnId,
        /// The message.
        msg: ClientMessage,
    },
    /// Write this frozen state as a snapshot in the background; answer with
    /// [`Input::SnapshotSaved`].
    TakeSnapshot {
        /// The state (O(1) copy).
        state: TreeState,
    },
    /// Role, leader or serving state changed.
    Status(Status),
    /// A change a client of this member made, for the audit log (only with
    /// `Config::audit`).
    Audit(super::audit::AuditRecord),
}

/// What a replica finds on disk at start (storage's `recover`).
#[derive(Clone, Debug)]
pub struct Recovered {
    /// acceptedEpoch (0 on a fresh replica).
    pub accepted_epoch: Epoch,
    /// currentEpoch (0 on a fresh replica).
    pub current_epoch: Epoch,
    /// The newest valid snapshot, if any (its zxid is `state.last_zxid()`).
    pub snapshot: Option<TreeState>,
    /// Every log entry after the snapshot's zxid (after zero when none), in order.
    pub log: Vec<Entry>,
}

impl Recovered {
    /// The state of a replica that has never run.
    pub fn fresh() -> Recovered {
        Recovered { accepted_epoch: 0, current_epoch: 0, snapshot: None, log: Vec::new() }
    }

    /// The zxid of the snapshot, zero when none.
    pub fn snapshot_zxid(&self) -> Zxid {
        self.snapshot.as_ref().map_or(Zxid::ZERO, TreeState::last_zxid)
    }

    /// The last zxid on disk (log, else snapshot).
    pub fn last_zxid(&self) -> Zxid {
        self.log.last().map_or(self.snapshot_zxid(), |e| e.zxid)
    }
}
