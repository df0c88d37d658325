//! One replica as a deterministic state machine: Zab, the data tree, the
//! sessions and every client's request queue, composed.
//!
//! Pure like its parts: [`Input`]s in (client requests, peer messages,
//! ticks carrying the wall clock, storage completions), [`Output`]s out
//! (client replies and watch events, peer messages, storage operations,
//! snapshots to write). The server runtime moves these over gRPC, the wire
//! port and sled; the simulation moves them through a seeded network and an
//! in-memory store. Everything a client can observe is decided here.
//!
//! The life of a request: it joins its connection's FIFO queue. A read is
//! answered from the local tree once everything before it in the queue is
//! answered (so a session never reads behind its own writes). A write is
//! validated locally (syntax, size), then proposed by the leader (directly,
//! or forwarded by a follower); when its transaction commits, every replica
//! applies it, fires watches (events queued before any later reply), and the
//! replica holding the connection answers it. Writes pipeline: many may be
//! in flight per session, and they commit in the order they were sent.

pub mod forward;
pub mod reads;

#[cfg(test)]
mod tests;

use crate::error::{ErrorCode, ZkError};
use crate::ids::{ServerId, SessionId, Zxid};
use crate::op::{MultiItem, Op, OpResult, Reply};
use crate::session::{timeout_ticks, SessionTracker};
use crate::storage::{Recovered, StorageOp};
use crate::tree::acl::{self, Id};
use crate::tree::prepare::{self, Context, Limits, PendingChanges};
use crate::tree::stat::EphemeralType;
use crate::tree::watch::WatchEvent;
use crate::tree::{snapshot, DataTree, TreeState, TxnResult};
use crate::txn::{Entry, Txn, TxnBody};
use crate::zab::{self, Message, Peer, Role, Status};
use bytes::Bytes;
use forward::{ToFollower, ToLeader};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// A client connection on this replica (a gRPC stream or a wire socket).
pub type ConnId = u64;

/// Why a connect is refused when this replica has no established leader.
pub const NOT_SERVING: &str = "this replica is not serving (no quorum or election in progress)";

/// Settings of one replica.
#[derive(Clone, Debug)]
pub struct Config {
    /// Zab's settings (ids, limits in ticks).
    pub zab: zab::Config,
    /// Length of one tick.
    pub tick_ms: u64,
    /// Smallest session timeout granted.
    pub min_session_timeout_ms: i32,
    /// Largest session timeout granted.
    pub max_session_timeout_ms: i32,
    /// Request size limits.
    pub limits: Limits,
    /// Take a snapshot after this many applied transactions (0: never).
    pub snapshot_every: u64,
    /// Check containers and TTL nodes every this many ticks.
    pub reap_interval_ticks: u64,
    /// How long a connect may wait for this replica to serve (an election in
    /// progress) and to catch up with the client's last zxid.
    pub catch_up_ticks: u64,
    /// Snapshot chunk size for SNAP sync.
    pub snapshot_chunk_bytes: usize,
}

impl Config {
    /// Defaults for an ensemble of `voters` with a tick of `tick_ms`.
    pub fn new(id: ServerId, voters: Vec<ServerId>, tick_ms: u64) -> Config {
        Config {
            zab: zab::Config::new(id, voters),
            tick_ms,
            min_session_timeout_ms: (2 * tick_ms) as i32,
            max_session_timeout_ms: (20 * tick_ms) as i32,
            limits: Limits::default(),
            snapshot_every: 100_000,
            reap_interval_ticks: 10,
            catch_up_ticks: 20,
            snapshot_chunk_bytes: 1 << 20,
        }
    }
}

/// A client's connect request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// 0 for a new session.
    pub session_id: i64,
    /// The password of the session to resume.
    pub password: Bytes,
    /// Requested timeout.
    pub timeout_ms: i32,
    /// The highest zxid the client has seen.
    pub last_zxid_seen: i64,
}

/// Something that happened to the replica.
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
        /// Opaque to the replica, echoed (the wire front end keeps its opcode here).
        tag: i32,
        /// The request.
        op: Op,
    },
    /// A request the front end could not decode: it is answered with `error`
    /// in its turn, so the session's replies stay in order.
    BadRequest {
        /// The connection.
        conn: ConnId,
        /// The request's xid, if it could be read.
        xid: i32,
        /// Echoed.
        tag: i32,
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
        /// The request's tag.
        tag: i32,
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

/// Something the runtime must do.
#[derive(Clone, Debug)]
pub enum Output {
    /// Send to another replica.
    Send {
        /// The receiver.
        to: ServerId,
        /// The message.
        msg: Message,
    },
    /// Perform a storage operation; answer with [`Input::Persisted`].
    Persist {
        /// Sequence number.
        seq: u64,
        /// The operation.
        op: StorageOp,
    },
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
}

#[derive(Debug)]
enum Progress {
    /// Waiting to start (behind an earlier request).
    New,
    /// A write or sync with the leader, tagged `cxid`.
    Submitted(i32),
    /// A sync the leader answered: done once the tree reaches this zxid.
    WaitApplied(Zxid),
    /// Answered, waiting its turn to be sent.
    Done(Reply),
}

#[derive(Debug)]
struct Pending {
    xid: i32,
    tag: i32,
    op: Op,
    progress: Progress,
}

#[derive(Debug)]
enum ConnState {
    /// Creating a new session (its createSession is in flight).
    Creating { session: SessionId, cxid: i32 },
    /// Resuming, waiting for this replica to apply the client's last zxid
    /// (and, on a follower, to revalidate the session with the leader).
    CatchingUp { request: ConnectRequest, until_tick: u64, new_password: Bytes, revalidation: Revalidation },
    /// Attached to a session.
    Attached { session: SessionId },
}

/// Where a follower is in revalidating a reattaching session with the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Revalidation {
    /// Not asked yet.
    NotAsked,
    /// A sync tagged with this cxid is on its way to the leader.
    Asked(i32),
    /// The leader's log ended at this zxid when it answered: once the tree
    /// has applied it, the session's fate is known here.
    Until(Zxid),
}

#[derive(Debug)]
struct Conn {
    state: ConnState,
    identities: Vec<Id>,
    queue: VecDeque<Pending>,
}

enum Work {
    Write {
        session: SessionId,
        cxid: i32,
        op: Op,
        identities: Vec<Id>,
    },
    /// A request refused before preparation; the error is committed like any outcome.
    Refuse {
        session: SessionId,
        cxid: i32,
        code: ErrorCode,
    },
    CreateSession {
        session: SessionId,
        cxid: i32,
        timeout_ms: i32,
        password: Bytes,
    },
    Sync {
        origin: Option<ServerId>,
        session: SessionId,
        cxid: i32,
    },
    Expire {
        session: SessionId,
    },
    Reap {
        path: String,
    },
}

/// Counts for status reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests answered.
    pub requests: u64,
    /// Transactions applied.
    pub applied: u64,
    /// Sessions expired by this replica as leader.
    pub expired_sessions: u64,
}

/// One replica.
pub struct Replica {
    config: Config,
    zab: Peer,
    tree: DataTree,
    status: Status,
    now_ms: i64,
    ticks: u64,
    conns: HashMap<ConnId, Conn>,
    by_session: HashMap<SessionId, ConnId>,
    next_session: i64,
    next_cxid: u32,
    tracker: SessionTracker,
    /// As leader: the member each session is attached to. A write forwarded by
    /// any other member is a leftover from before the session moved, and is
    /// refused with SessionMoved (ZooKeeper's session owner).
    owners: BTreeMap<SessionId, ServerId>,
    pending_changes: PendingChanges,
    work: VecDeque<Work>,
    touched: BTreeSet<SessionId>,
    /// Connections with a sync waiting for the tree to reach a zxid.
    waiting_apply: BTreeSet<ConnId>,
    /// Connects whose session revalidation waits for the tree to reach a zxid.
    revalidating: BTreeSet<ConnId>,
    applied_since_snapshot: u64,
    snapshot_in_flight: bool,
    /// A snapshot taken but not yet handed out: the tree it copies is ahead of
    /// the durable log (see `request_snapshot`).
    snapshot_waiting: Option<TreeState>,
    previous_snapshot: Zxid,
    /// The tick at which this replica last stopped serving (0: it started so).
    serving_lost_at: u64,
    counters: Counters,
    outputs: Vec<Output>,
    /// What was applied since the simulation last asked (checked against its oracle).
    #[cfg(any(test, feature = "sim"))]
    applied_log: Vec<AppliedRecord>,
}

/// A change to the tree, as the simulation's oracle sees it.
#[cfg(any(test, feature = "sim"))]
#[derive(Clone, Debug)]
pub enum AppliedRecord {
    /// A committed transaction was applied.
    Entry(Zxid, std::sync::Arc<Txn>),
    /// A leader's snapshot replaced the tree.
    Snapshot(Zxid),
}

impl Replica {
    /// A replica from what storage recovered. `start_ms` seeds session ids
    /// (unique across restarts, as ZooKeeper does with its clock).
    pub fn new(config: Config, recovered: Recovered, start_ms: i64) -> Replica {
        let snapshot_zxid = recovered.snapshot_zxid();
        let tree = match recovered.snapshot {
            Some(state) => DataTree::from_state(state),
            None => DataTree::new(),
        };
        let durable = zab::Durable {
            accepted_epoch: recovered.accepted_epoch,
            current_epoch: recovered.current_epoch,
            snapshot_zxid,
            entries: recovered.log,
        };
        let id = config.zab.id;
        let zab = Peer::new(config.zab.clone(), durable);
        let base = (((start_ms as u64) << 24) >> 8) as i64;
        let mut replica = Replica {
            status: zab.status(),
            config,
            zab,
            tree,
            now_ms: start_ms,
            ticks: 0,
            conns: HashMap::new(),
            by_session: HashMap::new(),
            next_session: base | ((id as i64) << 56),
            next_cxid: 0,
            tracker: SessionTracker::new(),
            owners: BTreeMap::new(),
            pending_changes: PendingChanges::new(),
            work: VecDeque::new(),
            touched: BTreeSet::new(),
            waiting_apply: BTreeSet::new(),
            revalidating: BTreeSet::new(),
            applied_since_snapshot: 0,
            snapshot_in_flight: false,
            snapshot_waiting: None,
            previous_snapshot: snapshot_zxid,
            serving_lost_at: 0,
            counters: Counters::default(),
            outputs: Vec::new(),
            #[cfg(any(test, feature = "sim"))]
            applied_log: Vec::new(),
        };
        replica.drain_zab();
        replica
    }

    /// Feeds one input.
    pub fn handle(&mut self, input: Input) {
        match input {
            Input::Tick { now_ms } => self.on_tick(now_ms),
            Input::Peer { from, msg } => self.zab.handle(zab::Input::Message { from, msg }),
            Input::PeerDisconnected { peer } => self.zab.handle(zab::Input::Disconnected { peer }),
            Input::Persisted { seq } => {
                self.zab.handle(zab::Input::Persisted { seq });
                self.release_waiting_snapshot();
            }
            Input::SnapshotSaved { zxid } => self.on_snapshot_saved(zxid),
            Input::Connect { conn, request, new_password, identities } => {
                self.on_connect(conn, request, new_password, identities)
            }
            Input::Request { conn, xid, tag, op } => self.on_request(conn, xid, tag, op),
            Input::BadRequest { conn, xid, tag, error } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.queue.push_back(Pending { xid, tag, op: Op::Ping, progress: Progress::Done(Err(error)) });
                    self.pump(conn);
                }
            }
            Input::Disconnect { conn } => self.drop_conn(conn),
        }
        self.drain_zab();
    }

    /// What to do, in order.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        self.drain_zab();
        std::mem::take(&mut self.outputs)
    }

    /// The tree (read-only).
    pub fn tree(&self) -> &DataTree {
        &self.tree
    }

    /// The consensus peer (read-only).
    pub fn zab(&self) -> &Peer {
        &self.zab
    }

    /// Role, leader, serving.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Number of client connections.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// Sessions attached here, with their connection and queue depth.
    pub fn connections(&self) -> Vec<(ConnId, Option<SessionId>, usize)> {
        let mut out: Vec<_> = self
            .conns
            .iter()
            .map(|(id, c)| {
                let session = match c.state {
                    ConnState::Attached { session } => Some(session),
                    _ => None,
                };
                (*id, session, c.queue.len())
            })
            .collect();
        out.sort();
        out
    }

    /// What was applied since the last call (simulation oracle).
    #[cfg(any(test, feature = "sim"))]
    pub fn drain_applied(&mut self) -> Vec<AppliedRecord> {
        std::mem::take(&mut self.applied_log)
    }

    /// Activity counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn emit(&mut self, conn: ConnId, msg: ClientMessage) {
        self.outputs.push(Output::Client { conn, msg });
    }

    fn next_cxid(&mut self) -> i32 {
        // Tagged with our id so tags from different replicas never collide
        // for one session (ids are at most 254; 23 bits of counter).
        self.next_cxid = (self.next_cxid + 1) & 0x7f_ffff;
        (((self.config.zab.id & 0xff) as i32) << 23) | self.next_cxid as i32
    }

    // ------------------------------------------------------------ zab glue

    /// Runs Zab's actions until it has nothing more to say; applying commits
    /// can free room for more proposals, which produce more actions.
    fn drain_zab(&mut self) {
        for _ in 0..1_000_000 {
            self.run_work();
            let actions = self.zab.take_actions();
            if actions.is_empty() {
                return;
            }
            for action in actions {
                self.on_zab_action(action);
            }
        }
        unreachable!("zab kept producing actions for a million rounds");
    }

    fn on_zab_action(&mut self, action: zab::Action) {
        match action {
            zab::Action::Send { to, msg } => self.outputs.push(Output::Send { to, msg }),
            zab::Action::Persist { seq, op } => self.outputs.push(Output::Persist { seq, op }),
            zab::Action::Commit { entries } => self.apply_entries(entries),
            zab::Action::InstallSnapshot { zxid, chunks } => self.install_snapshot(zxid, &chunks),
            zab::Action::SendSnapshot { to, epoch, zxid } => {
                // Commits are applied as Zab hands them out, so the tree is exactly at
                // the commit point the snapshot must reflect.
                debug_assert_eq!(self.tree.last_zxid(), zxid, "tree and commit point disagree");
                let (chunks, _) = snapshot::to_chunks(self.tree.state(), self.config.snapshot_chunk_bytes);
                self.outputs.push(Output::Send { to, msg: Message::Snap { epoch, zxid, chunks } });
            }
            zab::Action::RoleChanged(status) => self.on_status(status),
            zab::Action::Forwarded { from, payload } => self.on_forwarded(from, &payload),
            zab::Action::Replied { payload } => self.on_replied(&payload),
        }
    }

    fn install_snapshot(&mut self, zxid: Zxid, chunks: &[Bytes]) {
        match snapshot::from_chunks(chunks.iter().map(|c| c.as_ref())) {
            Ok(state) if state.last_zxid() == zxid => {
                tracing::info!(id = self.config.zab.id, zxid = %zxid, nodes = state.node_count(), "installed leader snapshot");
                self.tree.replace_state(state);
                if self.snapshot_waiting.take().is_some() {
                    // A copy of the replaced tree: no longer worth writing.
                    self.snapshot_in_flight = false;
                }
                #[cfg(any(test, feature = "sim"))]
                self.applied_log.push(AppliedRecord::Snapshot(zxid));
                self.previous_snapshot = zxid;
                self.applied_since_snapshot = 0;
            }
            Ok(state) => {
                let reason = format!("snapshot claims {zxid:?} but holds {:?}", state.last_zxid());
                self.zab.restart_election(&reason);
            }
            Err(e) => {
                let reason = format!("leader snapshot unreadable: {e}");
                self.zab.restart_election(&reason);
            }
        }
    }

    fn on_status(&mut self, status: Status) {
        let was_serving = self.status.serving;
        self.status = status;
        self.outputs.push(Output::Status(status));
        if was_serving && !status.serving {
            self.serving_lost_at = self.ticks;
            self.stop_serving();
        }
        if status.serving && status.role == Role::Leading {
            self.start_leading();
        }
        if status.serving && !was_serving {
            self.retry_waiting_connects();
        }
    }

    /// Leaving the serving state: every client goes elsewhere (or comes back
    /// once this replica serves again), as ZooKeeper closes its connections.
    fn stop_serving(&mut self) {
        // Connects still waiting to be decided keep waiting for the next leader.
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| !matches!(c.state, ConnState::CatchingUp { .. }))
            .map(|(id, _)| *id)
            .collect();
        for conn in conns {
            self.close_conn(conn, ErrorCode::ConnectionLoss, "the replica lost its leader");
        }
        self.tracker.clear();
        self.owners.clear();
        self.pending_changes.clear();
        self.work.clear();
        self.touched.clear();
    }

    fn start_leading(&mut self) {
        self.tracker.clear();
        self.owners.clear();
        self.pending_changes.clear();
        let tick_ms = self.config.tick_ms;
        let sessions: Vec<(SessionId, i32)> = self.tree.state().sessions().map(|(s, r)| (*s, r.timeout_ms)).collect();
        for (session, timeout_ms) in sessions {
            self.tracker.add(session, timeout_ticks(timeout_ms, tick_ms), self.ticks);
        }
    }

    // ------------------------------------------------------------ applying

    fn apply_entries(&mut self, entries: Vec<Entry>) {
        let mut touched_conns: BTreeSet<ConnId> = BTreeSet::new();
        for entry in entries {
            self.apply_entry(&entry, &mut touched_conns);
        }
        touched_conns.extend(self.waiting_apply.iter().copied());
        for conn in touched_conns {
            self.pump(conn);
        }
        // Connects that waited for the tree to catch up with the leader (each
        // is put back if it must still wait).
        for conn in std::mem::take(&mut self.revalidating) {
            self.try_connect(conn);
        }
        self.maybe_snapshot();
    }

    fn apply_entry(&mut self, entry: &Entry, touched_conns: &mut BTreeSet<ConnId>) {
        let txn = &entry.txn;
        let applied = self.tree.apply(entry.zxid, txn);
        #[cfg(any(test, feature = "sim"))]
        self.applied_log.push(AppliedRecord::Entry(entry.zxid, entry.txn.clone()));
        self.counters.applied += 1;
        self.applied_since_snapshot += 1;
        if self.status.role == Role::Leading {
            self.pending_changes.retire(entry.zxid);
        }
        for (session, event) in applied.events {
            if let Some(&conn) = self.by_session.get(&session) {
                self.emit(conn, ClientMessage::Event(event));
            }
        }
        match &txn.body {
            TxnBody::CreateSession { timeout_ms, password } => {
                if self.status.role == Role::Leading && self.status.serving {
                    let ticks = timeout_ticks(*timeout_ms, self.config.tick_ms);
                    if !self.tracker.is_live(txn.session) {
                        self.tracker.add(txn.session, ticks, self.ticks);
                    }
                }
                self.on_session_created(txn.session, txn.cxid, password, *timeout_ms);
                return;
            }
            TxnBody::CloseSession { .. } => {
                self.tracker.remove(txn.session);
                self.owners.remove(&txn.session);
            }
            _ => {}
        }
        let Some(&conn_id) = self.by_session.get(&txn.session) else { return };
        let Some(conn) = self.conns.get_mut(&conn_id) else { return };
        let matched = conn.queue.iter_mut().find(|p| matches!(p.progress, Progress::Submitted(c) if c == txn.cxid));
        match matched {
            Some(pending) => {
                pending.progress = Progress::Done(shape_reply(&pending.op, applied.result));
                touched_conns.insert(conn_id);
            }
            None => {
                if matches!(txn.body, TxnBody::CloseSession { .. }) {
                    // Expired by the leader: the client learns on its next connect.
                    self.close_conn(conn_id, ErrorCode::SessionExpired, "session expired");
                }
            }
        }
    }

    fn on_session_created(&mut self, session: SessionId, cxid: i32, password: &Bytes, timeout_ms: i32) {
        let found = self.conns.iter().find_map(|(id, c)| match &c.state {
            ConnState::Creating { session: s, cxid: x, .. } if *s == session && *x == cxid => Some(*id),
            _ => None,
        });
        let Some(conn) = found else { return };
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Attached { session };
        }
        self.by_session.insert(session, conn);
        let zxid = self.tree.last_zxid();
        self.emit(conn, ClientMessage::Connected { session, password: password.clone(), timeout_ms, zxid });
        self.pump(conn);
    }

    fn maybe_snapshot(&mut self) {
        let every = self.config.snapshot_every;
        if every == 0 || self.snapshot_in_flight || self.applied_since_snapshot < every {
            return;
        }
        self.snapshot_in_flight = true;
        self.applied_since_snapshot = 0;
        self.request_snapshot();
    }

    /// Asks for a snapshot now; false if one is already being written.
    pub fn snapshot_now(&mut self) -> bool {
        if self.snapshot_in_flight {
            return false;
        }
        self.snapshot_in_flight = true;
        self.applied_since_snapshot = 0;
        self.request_snapshot();
        true
    }

    /// Copies the tree for a snapshot, handed out only once the log holds
    /// every entry it reflects durably. A replica applies what the leader
    /// commits as soon as the entries are in its in-memory log, which can be
    /// before its own disk has them (the others made the quorum); a snapshot
    /// written ahead of those appends would make the store refuse them as
    /// going backwards, and on a crash the log would not continue it.
    fn request_snapshot(&mut self) {
        self.snapshot_waiting = Some(self.tree.snapshot());
        self.release_waiting_snapshot();
    }

    fn release_waiting_snapshot(&mut self) {
        let durable = self.zab.durable_zxid();
        if self.snapshot_waiting.as_ref().is_some_and(|state| state.last_zxid() <= durable) {
            if let Some(state) = self.snapshot_waiting.take() {
                self.outputs.push(Output::TakeSnapshot { state });
            }
        }
    }

    fn on_snapshot_saved(&mut self, zxid: Zxid) {
        self.snapshot_in_flight = false;
        // Keep the entries since the snapshot before this one in memory, so
        // a follower a little behind still gets a DIFF rather than a SNAP.
        self.zab.compact(self.previous_snapshot);
        self.previous_snapshot = zxid;
    }

    // ------------------------------------------------------------ ticks

    fn on_tick(&mut self, now_ms: i64) {
        self.now_ms = self.now_ms.max(now_ms);
        self.ticks += 1;
        self.zab.handle(zab::Input::Tick);
        self.drain_zab();
        self.expire_catch_ups();
        if !self.status.serving {
            return;
        }
        match self.status.role {
            Role::Following => {
                if !self.touched.is_empty() {
                    let sessions: Vec<SessionId> = std::mem::take(&mut self.touched).into_iter().collect();
                    self.zab.forward(forward::encode(&ToLeader::Touch { sessions }));
                }
            }
            Role::Leading => {
                for session in self.tracker.expire(self.ticks) {
                    tracing::info!(id = self.config.zab.id, session = %session, "session expired");
                    self.counters.expired_sessions += 1;
                    self.work.push_back(Work::Expire { session });
                }
                if self.config.reap_interval_ticks > 0 && self.ticks.is_multiple_of(self.config.reap_interval_ticks) {
                    self.queue_reaps();
                }
            }
            Role::Looking => {}
        }
    }

    fn queue_reaps(&mut self) {
        let now = self.now_ms;
        let state = self.tree.state();
        let mut candidates = Vec::new();
        for path in state.containers().chain(state.ttl_nodes()) {
            let Some(node) = state.node(path) else { continue };
            if !node.children.is_empty() {
                continue;
            }
            let due = match EphemeralType::of(node.stat.ephemeral_owner) {
                EphemeralType::Container => node.stat.cversion > 0,
                EphemeralType::Ttl(ttl) => now.saturating_sub(node.stat.mtime) > ttl,
                _ => false,
            };
            if due {
                candidates.push(path.to_string());
            }
        }
        for path in candidates {
            self.work.push_back(Work::Reap { path });
        }
    }

    // ------------------------------------------------------------ connections

    fn on_connect(&mut self, conn: ConnId, request: ConnectRequest, new_password: Bytes, identities: Vec<Id>) {
        self.conns.insert(
            conn,
            Conn {
                state: ConnState::CatchingUp {
                    request: request.clone(),
                    until_tick: self.ticks + self.config.catch_up_ticks,
                    new_password,
                    revalidation: Revalidation::NotAsked,
                },
                identities,
                queue: VecDeque::new(),
            },
        );
        self.try_connect(conn);
    }

    fn refuse(&mut self, conn: ConnId, error: ErrorCode, reason: impl Into<String>) {
        self.conns.remove(&conn);
        self.emit(conn, ClientMessage::ConnectFailed { error, reason: reason.into() });
    }

    /// Decides a pending connect once this replica can.
    fn try_connect(&mut self, conn: ConnId) {
        let Some(Conn { state: ConnState::CatchingUp { request, new_password, revalidation, .. }, .. }) =
            self.conns.get(&conn)
        else {
            return;
        };
        let (request, new_password, revalidation) = (request.clone(), new_password.clone(), *revalidation);
        if !self.status.serving {
            if self.ticks.saturating_sub(self.serving_lost_at) >= self.config.catch_up_ticks {
                // Without a leader for that long, a quorum is likely out of
                // reach (a partition): send the client elsewhere at once.
                self.refuse(conn, ErrorCode::ConnectionLoss, NOT_SERVING);
                return;
            }
            // Wait (expire_catch_ups refuses once the time is up): an election
            // usually ends within a few ticks, and a client held here gets its
            // session the moment this replica serves again, rather than after a
            // round of refusals and a reconnect backoff.
            return;
        }
        if Zxid::from_i64(request.last_zxid_seen) > self.tree.last_zxid() {
            // Wait a little for this replica to catch up; expire_catch_ups refuses later.
            return;
        }
        if request.session_id == 0 {
            self.create_session(conn, request.timeout_ms, new_password);
            return;
        }
        let session = SessionId(request.session_id);
        // A follower's tree may lag the leader's: the session's creation (a
        // client that moved before its first request saw no zxid) or its
        // close may be committed but not yet applied here. As ZooKeeper's
        // learners revalidate a reattaching session with the leader, ask the
        // leader where its log ends (a sync) and decide once the tree has
        // applied that far. A leader that never answers: ConnectionLoss at the
        // catch-up deadline, and the client tries another member.
        if self.status.role != Role::Leading {
            match revalidation {
                Revalidation::NotAsked => {
                    let cxid = self.next_cxid();
                    if !self.zab.forward(forward::encode(&ToLeader::Revalidate { session, cxid })) {
                        self.refuse(conn, ErrorCode::ConnectionLoss, "no leader to revalidate the session with");
                        return;
                    }
                    if let Some(Conn { state: ConnState::CatchingUp { revalidation, .. }, .. }) =
                        self.conns.get_mut(&conn)
                    {
                        *revalidation = Revalidation::Asked(cxid);
                    }
                    return;
                }
                Revalidation::Asked(_) => return,
                Revalidation::Until(zxid) if self.tree.last_zxid() < zxid => {
                    self.revalidating.insert(conn);
                    return;
                }
                Revalidation::Until(_) => {}
            }
        } else if self.tree.state().session(session).is_some() && !self.tracker.is_live(session) {
            // The leader is expiring or closing it: its close is proposed, not yet applied.
            self.refuse(conn, ErrorCode::SessionExpired, "session is being closed");
            return;
        }
        let Some(record) = self.tree.state().session(session).cloned() else {
            self.refuse(conn, ErrorCode::SessionExpired, "session expired or unknown");
            return;
        };
        if record.password != request.password {
            self.refuse(conn, ErrorCode::SessionExpired, "wrong session password");
            return;
        }
        if let Some(&old) = self.by_session.get(&session) {
            if old != conn {
                self.close_conn(old, ErrorCode::SessionMoved, "the session reconnected elsewhere");
            }
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Attached { session };
        }
        self.by_session.insert(session, conn);
        if self.status.role == Role::Leading {
            self.owners.insert(session, self.config.zab.id);
        }
        self.touch(session);
        let zxid = self.tree.last_zxid();
        self.emit(
            conn,
            ClientMessage::Connected { session, password: record.password, timeout_ms: record.timeout_ms, zxid },
        );
        self.pump(conn);
    }

    fn expire_catch_ups(&mut self) {
        let now = self.ticks;
        let waiting: Vec<(ConnId, bool)> = self
            .conns
            .iter()
            .filter_map(|(id, c)| match &c.state {
                ConnState::CatchingUp { until_tick, .. } => Some((*id, now >= *until_tick)),
                _ => None,
            })
            .collect();
        for (conn, overdue) in waiting {
            self.try_connect(conn);
            if overdue && matches!(self.conns.get(&conn).map(|c| &c.state), Some(ConnState::CatchingUp { .. })) {
                let reason = if self.status.serving {
                    "this replica is behind the client's last seen zxid"
                } else {
                    NOT_SERVING
                };
                self.refuse(conn, ErrorCode::ConnectionLoss, reason);
            }
        }
    }

    /// Decides every connect that waited for this replica to serve.
    fn retry_waiting_connects(&mut self) {
        let mut waiting: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, ConnState::CatchingUp { .. }))
            .map(|(id, _)| *id)
            .collect();
        // In arrival order (ids grow), so sessions are created in that order.
        waiting.sort_unstable();
        for conn in waiting {
            self.try_connect(conn);
        }
    }

    fn create_session(&mut self, conn: ConnId, requested_ms: i32, password: Bytes) {
        let timeout_ms = requested_ms.clamp(self.config.min_session_timeout_ms, self.config.max_session_timeout_ms);
        let mut id = self.next_session;
        self.next_session += 1;
        if id == i64::MIN || EphemeralType::of(id) != EphemeralType::Normal {
            id = self.next_session;
            self.next_session += 1;
        }
        let session = SessionId(id);
        let cxid = self.next_cxid();
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Creating { session, cxid };
        }
        match self.status.role {
            Role::Leading => {
                self.owners.insert(session, self.config.zab.id);
                self.work.push_back(Work::CreateSession { session, cxid, timeout_ms, password });
            }
            _ => {
                let msg = ToLeader::CreateSession { session, cxid, timeout_ms, password };
                if !self.zab.forward(forward::encode(&msg)) {
                    self.refuse(conn, ErrorCode::ConnectionLoss, "no leader to create the session");
                }
            }
        }
    }

    fn touch(&mut self, session: SessionId) {
        match self.status.role {
            Role::Leading => {
                self.tracker.touch(session, self.ticks);
            }
            _ => {
                self.touched.insert(session);
            }
        }
    }

    fn close_conn(&mut self, conn: ConnId, error: ErrorCode, reason: &str) {
        if self.conns.contains_key(&conn) {
            self.drop_conn(conn);
            self.emit(conn, ClientMessage::Close { error, reason: reason.to_string() });
        }
    }

    /// Forgets a connection; its session lives on (until it expires or resumes).
    fn drop_conn(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else { return };
        self.waiting_apply.remove(&conn);
        if let ConnState::Attached { session } = c.state {
            if self.by_session.get(&session) == Some(&conn) {
                self.by_session.remove(&session);
                self.tree.watches_mut().remove_session(session);
            }
        }
    }

    fn on_request(&mut self, conn: ConnId, xid: i32, tag: i32, op: Op) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        // Malformed writes fail here with a precise reason and no round trip;
        // the reply still waits its turn in the queue.
        let progress = match prepare::validate(&op, &c.identities, self.config.limits) {
            Err(e) if op.is_write() => Progress::Done(Err(e)),
            _ => Progress::New,
        };
        c.queue.push_back(Pending { xid, tag, op, progress });
        // Requests sent before the session is attached wait in the queue.
        let ConnState::Attached { session } = c.state else { return };
        self.touch(session);
        self.pump(conn);
    }

    /// Moves a connection's queue forward: sends finished replies in order,
    /// answers reads that reached the front, and submits writes as long as
    /// only writes precede them.
    fn pump(&mut self, conn_id: ConnId) {
        let Some(conn) = self.conns.get_mut(&conn_id) else { return };
        let ConnState::Attached { session } = conn.state else { return };
        let serving = self.status.serving;
        let applied = self.tree.last_zxid();
        let mut submit: Vec<usize> = Vec::new();
        // Complete syncs whose zxid is applied.
        for p in conn.queue.iter_mut() {
            if let Progress::WaitApplied(z) = p.progress {
                if applied >= z {
                    let path = match &p.op {
                        Op::Sync { path } => path.clone(),
                        _ => String::new(),
                    };
                    p.progress = Progress::Done(Ok(OpResult::Synced(path)));
                }
            }
        }
        if !conn.queue.iter().any(|p| matches!(p.progress, Progress::WaitApplied(_))) {
            self.waiting_apply.remove(&conn_id);
        }
        let Some(conn) = self.conns.get_mut(&conn_id) else { return };
        // Writes (and syncs) may start while only writes are ahead of them.
        for (i, p) in conn.queue.iter().enumerate() {
            let pipelined = matches!(p.op, Op::Sync { .. }) || p.op.is_write();
            if !pipelined {
                if matches!(p.progress, Progress::New) {
                    break;
                }
                continue;
            }
            if matches!(p.progress, Progress::New) {
                submit.push(i);
            }
        }
        for i in submit {
            let cxid = self.next_cxid();
            let Some(conn) = self.conns.get_mut(&conn_id) else { return };
            let p = &mut conn.queue[i];
            p.progress = Progress::Submitted(cxid);
            let op = p.op.clone();
            let identities = conn.identities.clone();
            if !serving {
                conn.queue[i].progress = Progress::Done(Err(ZkError::new(ErrorCode::ConnectionLoss, "")));
                continue;
            }
            match (&op, self.status.role) {
                (Op::Sync { .. }, Role::Leading) => self.work.push_back(Work::Sync { origin: None, session, cxid }),
                (Op::Sync { .. }, _) => {
                    self.zab.forward(forward::encode(&ToLeader::Sync { session, cxid }));
                }
                (_, Role::Leading) => {
                    let work = self.fenced(session, self.config.zab.id, cxid, op, identities);
                    self.work.push_back(work);
                }
                _ => {
                    self.zab.forward(forward::encode(&ToLeader::Write { session, cxid, op, identities }));
                }
            }
        }
        self.flush_front(conn_id);
    }

    /// Sends every finished reply at the front, answering reads as they reach it.
    fn flush_front(&mut self, conn_id: ConnId) {
        loop {
            let Some(conn) = self.conns.get_mut(&conn_id) else { return };
            let ConnState::Attached { session } = conn.state else { return };
            let Some(front) = conn.queue.front_mut() else { break };
            if matches!(front.progress, Progress::New) && !front.op.is_write() && !matches!(front.op, Op::Sync { .. }) {
                let reply = match &front.op {
                    Op::Auth { scheme, auth } => match acl::authenticate(scheme, auth) {
                        Ok(id) => {
                            if !conn.identities.contains(&id) {
                                conn.identities.push(id);
                            }
                            Ok(OpResult::Empty)
                        }
                        Err(e) => Err(ZkError::with_reason(ErrorCode::AuthFailed, "", e.to_string())),
                    },
                    op => {
                        let identities = conn.identities.clone();
                        let op = op.clone();
                        let outcome = reads::execute(&mut self.tree, session, &identities, &op);
                        for event in outcome.events {
                            self.emit(conn_id, ClientMessage::Event(event));
                        }
                        outcome.reply
                    }
                };
                let Some(conn) = self.conns.get_mut(&conn_id) else { return };
                if let Some(front) = conn.queue.front_mut() {
                    front.progress = Progress::Done(reply);
                }
            }
            let Some(conn) = self.conns.get_mut(&conn_id) else { return };
            let Some(front) = conn.queue.front() else { break };
            if !matches!(front.progress, Progress::Done(_)) {
                break;
            }
            let Some(p) = conn.queue.pop_front() else { break };
            let Progress::Done(reply) = p.progress else { break };
            let closes = matches!(p.op, Op::CloseSession) && reply.is_ok();
            self.counters.requests += 1;
            let zxid = self.tree.last_zxid();
            self.emit(conn_id, ClientMessage::Reply { xid: p.xid, tag: p.tag, zxid, reply });
            if closes {
                self.close_conn(conn_id, ErrorCode::Ok, "session closed");
                return;
            }
        }
        // Submit more writes if the front moved past reads.
        let pending_new_write = self.conns.get(&conn_id).is_some_and(|c| {
            c.queue
                .iter()
                .take_while(|p| p.op.is_write() || matches!(p.op, Op::Sync { .. }))
                .any(|p| matches!(p.progress, Progress::New))
        });
        if pending_new_write {
            self.pump(conn_id);
        }
    }

    // ------------------------------------------------------------ leader duties

    fn on_forwarded(&mut self, from: ServerId, payload: &[u8]) {
        let msg: ToLeader = match forward::decode(payload) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(from, error = %e, "dropping malformed forwarded request");
                return;
            }
        };
        match msg {
            ToLeader::Write { session, cxid, op, identities } => {
                self.tracker.touch(session, self.ticks);
                let work = self.fenced(session, from, cxid, op, identities);
                self.work.push_back(work);
            }
            ToLeader::CreateSession { session, cxid, timeout_ms, password } => {
                self.owners.insert(session, from);
                self.work.push_back(Work::CreateSession { session, cxid, timeout_ms, password })
            }
            ToLeader::Sync { session, cxid } => self.work.push_back(Work::Sync { origin: Some(from), session, cxid }),
            ToLeader::Revalidate { session, cxid } => {
                let previous = self.owners.insert(session, from);
                if previous == Some(self.config.zab.id) {
                    // It left a connection here: ZooKeeper closes the old one.
                    if let Some(&old) = self.by_session.get(&session) {
                        self.close_conn(old, ErrorCode::SessionMoved, "the session reconnected elsewhere");
                    }
                }
                self.work.push_back(Work::Sync { origin: Some(from), session, cxid });
            }
            ToLeader::Touch { sessions } => {
                for s in sessions {
                    self.tracker.touch(s, self.ticks);
                }
            }
        }
    }

    /// The work for a write arriving through member `via`: refused with
    /// SessionMoved if the session is attached elsewhere now. A session with
    /// no recorded owner (a new leader knows none) is claimed by the first
    /// member that writes for it, as ZooKeeper's session tracker does.
    fn fenced(&mut self, session: SessionId, via: ServerId, cxid: i32, op: Op, identities: Vec<Id>) -> Work {
        let owner = *self.owners.entry(session).or_insert(via);
        if owner != via {
            tracing::debug!(session = %session, via, owner, "refusing a write from a member the session left");
            return Work::Refuse { session, cxid, code: ErrorCode::SessionMoved };
        }
        Work::Write { session, cxid, op, identities }
    }

    fn on_replied(&mut self, payload: &[u8]) {
        let Ok(ToFollower::SyncDone { session, cxid, zxid }) = forward::decode::<ToFollower>(payload) else {
            tracing::warn!("dropping malformed leader reply");
            return;
        };
        self.sync_reached(session, cxid, zxid);
    }

    fn sync_reached(&mut self, session: SessionId, cxid: i32, zxid: Zxid) {
        // A connect revalidating its session (see try_connect)?
        let revalidating = self.conns.iter_mut().find_map(|(id, c)| match &mut c.state {
            ConnState::CatchingUp { request, revalidation, .. }
                if request.session_id == session.0 && *revalidation == Revalidation::Asked(cxid) =>
            {
                *revalidation = Revalidation::Until(zxid);
                Some(*id)
            }
            _ => None,
        });
        if let Some(conn) = revalidating {
            self.try_connect(conn);
            return;
        }
        let Some(&conn) = self.by_session.get(&session) else { return };
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if let Some(p) = c.queue.iter_mut().find(|p| matches!(p.progress, Progress::Submitted(x) if x == cxid)) {
            p.progress = Progress::WaitApplied(zxid);
            self.waiting_apply.insert(conn);
        }
        self.pump(conn);
    }

    /// Prepares and proposes queued work while Zab has room.
    fn run_work(&mut self) {
        if self.status.role != Role::Leading || !self.status.serving {
            return;
        }
        while !self.work.is_empty() {
            let Ok(zxid) = self.zab.next_zxid() else { return };
            let Some(work) = self.work.pop_front() else { return };
            let now = self.now_ms;
            let txn = match work {
                Work::Write { session, cxid, op, identities } => {
                    let body = if !self.tracker.is_live(session) {
                        TxnBody::Error(ErrorCode::SessionExpired)
                    } else {
                        let ctx = Context {
                            session,
                            identities: &identities,
                            zxid,
                            time_ms: now,
                            limits: self.config.limits,
                        };
                        match self.pending_changes.prepare(self.tree.state(), &ctx, &op) {
                            Ok(body) => {
                                if matches!(op, Op::CloseSession) {
                                    self.tracker.set_closing(session);
                                }
                                body
                            }
                            Err(e) => TxnBody::Error(e.code),
                        }
                    };
                    Txn { session, cxid, time_ms: now, body }
                }
                Work::Refuse { session, cxid, code } => Txn { session, cxid, time_ms: now, body: TxnBody::Error(code) },
                Work::CreateSession { session, cxid, timeout_ms, password } => {
                    let ticks = timeout_ticks(timeout_ms, self.config.tick_ms);
                    self.tracker.add(session, ticks, self.ticks);
                    Txn { session, cxid, time_ms: now, body: TxnBody::CreateSession { timeout_ms, password } }
                }
                Work::Sync { origin, session, cxid } => {
                    let target = self.zab.last_logged();
                    match origin {
                        Some(follower) => {
                            let msg = ToFollower::SyncDone { session, cxid, zxid: target };
                            self.zab.reply(follower, forward::encode(&msg));
                        }
                        None => self.sync_reached(session, cxid, target),
                    }
                    continue;
                }
                Work::Expire { session } => {
                    let body = self.pending_changes.prepare_close_session(self.tree.state(), session, zxid);
                    Txn { session, cxid: 0, time_ms: now, body }
                }
                Work::Reap { path } => match self.pending_changes.prepare_reap(self.tree.state(), &path, zxid, now) {
                    Some(body) => Txn { session: SessionId::NONE, cxid: 0, time_ms: now, body },
                    None => continue,
                },
            };
            if let Err(e) = self.zab.propose(txn) {
                tracing::warn!(error = %e, "proposal refused after next_zxid allowed it");
                return;
            }
        }
    }
}

/// Shapes a transaction's outcome into the reply to the request that caused it.
fn shape_reply(op: &Op, result: TxnResult) -> Reply {
    let path = op.path().unwrap_or("").to_string();
    match result {
        TxnResult::Error(code) => Err(ZkError::new(code, path)),
        TxnResult::Created { path, stat } => Ok(OpResult::Created { path, stat }),
        TxnResult::DataSet(stat) | TxnResult::AclSet(stat) => Ok(OpResult::Stat(stat)),
        TxnResult::Deleted | TxnResult::Checked | TxnResult::SessionCreated | TxnResult::SessionClosed => {
            Ok(OpResult::Empty)
        }
        TxnResult::Multi(items) => Ok(OpResult::Multi(
            items
                .into_iter()
                .map(|item| match item {
                    Ok(TxnResult::Created { path, stat }) => MultiItem::Ok(OpResult::Created { path, stat }),
                    Ok(TxnResult::DataSet(stat)) => MultiItem::Ok(OpResult::Stat(stat)),
                    Ok(_) => MultiItem::Ok(OpResult::Empty),
                    Err(code) => MultiItem::Err(code),
                })
                .collect(),
        )),
    }
}
