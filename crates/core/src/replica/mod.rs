//! One replica as a deterministic state machine: Zab, the data tree, the
//! sessions and every client's request queue, composed.
//!
//! Pure like its parts: [`Input`]s in (client requests, peer messages,
//! ticks carrying the wall clock, storage completions), [`Output`]s out
//! (client replies and watch events, Zab's messages and storage operations,
//! snapshots to write). The server runtime moves these over gRPC, the wire
//! port and sled; the simulation moves them through a seeded network and an
//! in-memory store. Everything a client can observe is decided here.
//!
//! The life of a request: it joins its connection's queue
//! ([`session::queue`](crate::session::queue)). A read is answered from the
//! local tree once everything before it in the queue is answered (so a
//! session never reads behind its own writes). A write is validated locally
//! (syntax, size), then prepared by the leader ([`prep`]: directly, or
//! forwarded by a follower, [`forward`]) and proposed through Zab; when its
//! transaction commits, every replica applies it (`commit.rs`), fires watches
//! (events queued before any later reply), and the replica holding the
//! connection answers it. Writes pipeline: many may be in flight per
//! session, and they commit in the order they were sent.
//!
//! The parts: [`io`] (the vocabulary), `requests.rs` (driving a connection's
//! queue), `connect.rs` (admission and revalidation of connects), [`prep`]
//! (the leader's preparation of writes), `commit.rs` (applying what Zab
//! commits), [`snapshots`] (when to snapshot), [`reads`] (answering reads).

pub mod audit;
mod commit;
mod connect;
pub mod forward;
pub mod host;
pub mod io;
pub mod load;
pub mod prep;
pub mod read_index;
pub mod reads;
pub mod reconfig;
mod requests;
pub mod snapshots;
mod validate;

#[cfg(test)]
mod tests;

pub use crate::session::NOT_SERVING;
pub use io::{ClientMessage, ConnId, ConnectRequest, Echo, Input, Output, Recovered};

use crate::ids::{ServerId, SessionId};
use crate::members::{Configuration, Membership};
use crate::replica::prep::check::Limits;
use crate::session::Connections;
use crate::tree::{snapshot, DataTree};
use crate::zab::{self, Message, Role, Status, Zab};
use prep::Prep;
use snapshots::Snapshots;
use std::collections::BTreeSet;

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
    /// The voters take turns to snapshot, `snapshot_every / voters`
    /// transactions apart (see `snapshots`); false: each after
    /// `snapshot_every` applied transactions.
    pub snapshot_turns: bool,
    /// Check containers and TTL nodes every this many ticks.
    pub reap_interval_ticks: u64,
    /// How long a connect may wait for this replica to serve (an election in
    /// progress) and to catch up with the client's last zxid.
    pub catch_up_ticks: u64,
    /// Snapshot chunk size for SNAP sync.
    pub snapshot_chunk_bytes: usize,
    /// The digest id (`user:base64 sha1`) whose holder is the superuser.
    pub super_digest: Option<String>,
    /// The configuration file's members with their addresses, shown in
    /// `/zookeeper/config` until a reconfiguration replaces them; None:
    /// `zab.voters` and `zab.observers`, not shown (a lone member, as
    /// ZooKeeper standalone, and tests).
    pub members: Option<Membership>,
    /// Serve ZooKeeper's `reconfig` (ZooKeeper's `reconfigEnabled`; off:
    /// RECONFIGDISABLED). The admin API reconfigures either way.
    pub reconfig_enabled: bool,
    /// Every read on this member is linearizable (`read_index`), for
    /// clients that cannot ask per request (ClickHouse Keeper's `quorum_reads`).
    pub linearizable_reads: bool,
    /// Record every change applied to the tree for [`Replica::drain_applied`]
    /// (the simulation's oracle checks them) and keep the tree's digest up to
    /// date; off in a server, where nothing would drain them.
    pub record_applied: bool,
    /// Emit an [`Output::Audit`] for every change a client of this member
    /// makes (ZooKeeper's `audit.enable`).
    pub audit: bool,
}

impl Config {
    /// Defaults for an ensemble of `voters` with a tick of `tick_ms`.
    pub fn new(id: ServerId, voters: Vec<ServerId>, tick_ms: u64) -> Config {
        let ms = |ticks: u64| i32::try_from(ticks.saturating_mul(tick_ms)).unwrap_or(i32::MAX);
        Config {
            zab: zab::Config::new(id, voters),
            tick_ms,
            min_session_timeout_ms: ms(2),
            max_session_timeout_ms: ms(20),
            limits: Limits::default(),
            snapshot_every: 100_000,
            snapshot_turns: false,
            reap_interval_ticks: 10,
            catch_up_ticks: 20,
            snapshot_chunk_bytes: 1 << 20,
            super_digest: None,
            members: None,
            reconfig_enabled: false,
            linearizable_reads: false,
            record_applied: false,
            audit: false,
        }
    }
}

/// One connection, for status reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnSummary {
    /// The connection.
    pub conn: ConnId,
    /// Its session, once attached.
    pub session: Option<SessionId>,
    /// Requests queued, not yet answered.
    pub queued: usize,
    /// When it last sent anything (wall clock of the last tick, ms).
    pub last_heard_ms: i64,
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
    /// Linearizable reads of this member's clients cleared by a read-index barrier.
    pub linearizable_reads: u64,
    /// Read-index rounds this member asked: probes as leader, rounds to the leader as follower.
    pub read_index_rounds: u64,
}

/// Time as the replica knows it: ticks counted, and the wall clock the last
/// tick carried.
#[derive(Clone, Copy, Debug)]
struct Clock {
    now_ms: i64,
    ticks: u64,
}

/// Hands out session ids and request tags unique to this replica.
#[derive(Debug)]
struct Ids {
    me: ServerId,
    next_session: i64,
    next_cxid: u32,
}

impl Ids {
    /// Session ids start from the clock (unique across restarts, as
    /// ZooKeeper does) with this replica's id in the top byte.
    fn new(me: ServerId, start_ms: i64) -> Ids {
        let base = (start_ms.unsigned_abs() << 24) >> 8;
        let base = i64::try_from(base).unwrap_or(0);
        let top = i64::try_from(me & 0xff).unwrap_or(0) << 56;
        Ids { me, next_session: base | top, next_cxid: 0 }
    }

    fn session(&mut self) -> SessionId {
        use crate::tree::stat::EphemeralType;
        loop {
            let id = self.next_session;
            self.next_session = self.next_session.wrapping_add(1);
            // Ids that read as special ephemeral owners (container, TTL) are skipped.
            if id != i64::MIN && EphemeralType::of(id) == EphemeralType::Normal {
                return SessionId(id);
            }
        }
    }

    fn cxid(&mut self) -> i32 {
        // Tagged with our id so tags from different replicas never collide
        // for one session (ids are at most 254; 23 bits of counter).
        self.next_cxid = (self.next_cxid + 1) & 0x7f_ffff;
        let id = i32::from(u8::try_from(self.me & 0xff).unwrap_or(0));
        let counter = i32::try_from(self.next_cxid).unwrap_or(0);
        (id << 23) | counter
    }
}

/// One replica.
pub struct Replica {
    config: Config,
    zab: Zab,
    tree: DataTree,
    status: Status,
    clock: Clock,
    ids: Ids,
    conns: Connections<Echo>,
    /// Sessions active here since the last report to the leader (follower).
    touched: BTreeSet<SessionId>,
    /// The leader's preparation of writes.
    prep: Prep,
    /// Linearizable reads waiting for their barrier.
    read_index: read_index::ReadIndex,
    /// The data directory is below its space reserve (see [`Input::DiskSpace`]).
    disk_low: bool,
    snapshots: Snapshots,
    /// The tick at which this replica last stopped serving (0: it started so).
    serving_lost_at: u64,
    counters: Counters,
    outputs: Vec<Output>,
    /// What was applied since the simulation last asked (checked against
    /// its oracle), when `config.record_applied`.
    applied_log: Vec<AppliedRecord>,
    /// A client's `reconfig` (session, xid) whose joint configuration is
    /// applied: answered once the change completes, as ZooKeeper answers
    /// once its one transaction commits, so the client's next reconfig is
    /// not refused as one in progress.
    reconfig_waiting: Option<(SessionId, i32)>,
    /// The newest load applied, and what it gave (see `load`).
    last_load: Option<(crate::ids::Zxid, load::LoadOutcome)>,
    /// What other members said of their endpoints (see [`Input::PeerEndpoints`]).
    peer_endpoints: crate::members::Told,
}

/// A change to the tree, as the simulation's oracle sees it.
#[derive(Clone, Debug)]
pub enum AppliedRecord {
    /// A committed transaction was applied.
    Entry(crate::ids::Zxid, std::sync::Arc<crate::txn::Txn>),
    /// A leader's snapshot replaced the tree.
    Snapshot(crate::ids::Zxid),
}

/// This member's turn to snapshot among the voters (by id order), when
/// turns are taken.
fn snapshot_turn(config: &Config) -> Option<snapshots::Turn> {
    if !config.snapshot_turns {
        return None;
    }
    let mut voters = config.zab.voters.clone();
    voters.sort_unstable();
    let rank = voters.iter().position(|v| *v == config.zab.id)?;
    Some(snapshots::Turn { rank: rank as u64, members: voters.len() as u64 })
}

impl Replica {
    /// A replica from what storage recovered. `start_ms` seeds session ids.
    pub fn new(config: Config, recovered: Recovered, start_ms: i64) -> Replica {
        let snapshot_zxid = recovered.snapshot_zxid();
        let mut tree = match recovered.snapshot {
            Some(state) => DataTree::from_state(state),
            None => DataTree::new(),
        };
        if config.record_applied {
            // The simulation checks every replica's digest often.
            tree.track_digest();
        }
        let shown = config.members.is_some();
        let initial = config.members.clone().unwrap_or_else(|| config.zab.initial_configuration().active);
        tree.set_initial_configuration(Configuration::initial(initial), shown);
        let durable = zab::Durable {
            accepted_epoch: recovered.accepted_epoch,
            current_epoch: recovered.current_epoch,
            snapshot_zxid,
            entries: recovered.log,
            configuration: tree.state().configuration().cloned(),
            epoch_floor: tree.state().highest_epoch(),
        };
        let zab = Zab::new(config.zab.clone(), durable);
        let mut replica = Replica {
            status: zab.status(),
            ids: Ids::new(config.zab.id, start_ms),
            snapshots: Snapshots::new(config.snapshot_every, snapshot_zxid, snapshot_turn(&config)),
            config,
            zab,
            tree,
            clock: Clock { now_ms: start_ms, ticks: 0 },
            conns: Connections::default(),
            touched: BTreeSet::new(),
            prep: Prep::default(),
            read_index: Default::default(),
            disk_low: false,
            serving_lost_at: 0,
            counters: Counters::default(),
            outputs: Vec::new(),
            applied_log: Vec::new(),
            reconfig_waiting: None,
            last_load: None,
            peer_endpoints: Default::default(),
        };
        replica.drain_zab();
        replica
    }

    /// Feeds one input; what follows is in [`Replica::take_outputs`].
    pub fn handle(&mut self, input: Input) {
        let kind = validate::kind(&input);
        match input {
            Input::Tick { now_ms } => self.on_tick(now_ms),
            Input::Peer { from, msg } => self.zab.handle(zab::Input::Message { from, msg }),
            Input::PeerDisconnected { peer, link } => self.zab.handle(zab::Input::Disconnected { peer, link }),
            Input::Persisted { seq } => {
                self.zab.handle(zab::Input::Persisted { seq });
                self.release_snapshot();
            }
            Input::SnapshotSaved { zxid, log_floor } => {
                // Followers a snapshot's worth behind still get a DIFF (read
                // back from storage), as long as storage keeps the log.
                let previous = self.snapshots.saved(zxid);
                self.zab.compact(previous.max(log_floor));
            }
            Input::LogPurged { log_floor } => self.zab.compact(log_floor),
            Input::SnapshotFailed => self.snapshots.failed(),
            Input::DiskSpace { low } => self.disk_low = low,
            Input::PeerEndpoints { from, peer, endpoints } => {
                self.peer_endpoints.insert(from, peer, endpoints);
            }
            Input::Connect { conn, request, new_password, identities } => {
                let until_tick = self.clock.ticks + self.config.catch_up_ticks;
                self.conns.open(conn, request, until_tick, new_password, identities, self.clock.now_ms);
                self.try_connect(conn);
            }
            Input::Request { conn, xid, echo, op, linearizable } => self.on_request(conn, xid, echo, op, linearizable),
            Input::BadRequest { conn, xid, echo, error } => self.on_bad_request(conn, xid, echo, error),
            Input::Disconnect { conn } => self.drop_conn(conn),
        }
        self.drain_zab();
        self.debug_validate(kind);
    }

    /// What to do, in order.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        // The end of the host's turn: the reads that arrived in it share one
        // read-index probe or round.
        self.read_index.flush(&mut self.zab);
        self.drain_zab();
        // Leadership probes and their echoes ride on this turn's messages.
        if !self.zab.probes_due() {
            return std::mem::take(&mut self.outputs);
        }
        let mut sends: Vec<(ServerId, &mut Message)> = self
            .outputs
            .iter_mut()
            .filter_map(|o| match o {
                Output::Zab(zab::Io::Send { to, msg }) => Some((*to, msg)),
                _ => None,
            })
            .collect();
        self.zab.end_turn(&mut sends);
        self.drain_zab();
        std::mem::take(&mut self.outputs)
    }

    /// Hands back a vector [`Replica::take_outputs`] returned, emptied, for
    /// the next turn's outputs: the host takes them every turn, and this
    /// spares each turn growing a new one.
    pub fn recycle_outputs(&mut self, used: Vec<Output>) {
        crate::reuse::hand_back(&mut self.outputs, used);
    }

    /// The tree (read-only).
    pub fn tree(&self) -> &DataTree {
        &self.tree
    }

    /// The consensus peer (read-only).
    pub fn zab(&self) -> &Zab {
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

    /// Syncs not yet answered: queued at the leader behind writes, or
    /// waiting here for the tree to reach the zxid the leader named.
    pub fn pending_syncs(&self) -> usize {
        self.prep.pending_syncs() + self.conns.waiting_apply().count()
    }

    /// Linearizable reads waiting for the leader to confirm their round.
    pub fn pending_linearizable_reads(&self) -> usize {
        self.read_index.pending()
    }

    /// As a follower or observer: its read-index round in flight, and the
    /// rounds the leader has answered since start (the host times rounds by them).
    pub fn read_index_round(&self) -> (Option<u64>, u64) {
        self.read_index.round_progress()
    }

    /// Whether reads wait for a read-index probe or round that the end of
    /// this turn ([`Replica::take_outputs`]) would ask.
    pub fn read_index_due(&self) -> bool {
        self.read_index.due(&self.zab)
    }

    /// On the leader, every session of the ensemble with the ticks left
    /// before it expires unless heard from (ZooKeeper's leader `dump`);
    /// empty on other members, which track no expiry.
    pub fn session_expiries(&self) -> Vec<(SessionId, u64)> {
        if !self.leading() {
            return Vec::new();
        }
        let now = self.clock.ticks;
        self.prep.deadlines().into_iter().map(|(s, at)| (s, at.saturating_sub(now))).collect()
    }

    /// Connections here, with their session (once attached), queue depth
    /// and when each was last heard from.
    pub fn connections(&self) -> Vec<ConnSummary> {
        self.conns
            .ids()
            .into_iter()
            .filter_map(|id| {
                self.conns.get(id).map(|c| ConnSummary {
                    conn: id,
                    session: c.session(),
                    queued: c.queue.len(),
                    last_heard_ms: c.last_heard_ms,
                })
            })
            .collect()
    }

    /// What was applied since the last call (the simulation's oracle; empty
    /// unless `config.record_applied`).
    pub fn drain_applied(&mut self) -> Vec<AppliedRecord> {
        std::mem::take(&mut self.applied_log)
    }

    /// Activity counters.
    pub fn counters(&self) -> Counters {
        let (linearizable_reads, read_index_rounds) = self.read_index.counts();
        Counters { linearizable_reads, read_index_rounds, ..self.counters }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Asks for a snapshot now; false if one is already being written.
    pub fn snapshot_now(&mut self) -> bool {
        if !self.snapshots.start() {
            return false;
        }
        self.take_snapshot();
        true
    }

    /// Hands leadership to `to` (or the most caught-up follower): see
    /// [`Zab::transfer_leadership`]. Writes wait meanwhile; those already
    /// proposed are committed and answered before this member steps down.
    pub fn transfer_leadership(&mut self, to: Option<ServerId>) -> Result<ServerId, zab::TransferError> {
        let target = self.zab.transfer_leadership(to)?;
        self.drain_zab();
        Ok(target)
    }

    fn emit(&mut self, conn: ConnId, msg: ClientMessage) {
        self.outputs.push(Output::Client { conn, msg });
    }

    fn me(&self) -> ServerId {
        self.config.zab.id
    }

    fn leading(&self) -> bool {
        self.status.role == Role::Leading
    }

    // ------------------------------------------------------------ zab glue

    /// Runs Zab's actions until it has nothing more to say; applying commits
    /// can free room for more proposals, which produce more actions.
    fn drain_zab(&mut self) {
        for _ in 0..1_000_000 {
            self.run_prep();
            let mut actions = self.zab.take_actions();
            if actions.is_empty() {
                return;
            }
            for action in actions.drain(..) {
                self.on_zab_action(action);
            }
            self.zab.recycle_actions(actions);
        }
        unreachable!("zab kept producing actions for a million rounds");
    }

    fn on_zab_action(&mut self, action: zab::Action) {
        match action {
            zab::Action::Io(io) => self.outputs.push(Output::Zab(io)),
            zab::Action::Commit { entries } => self.apply_entries(entries),
            zab::Action::InstallSnapshot { zxid, chunks } => self.install_snapshot(zxid, &chunks),
            zab::Action::SendSnapshot { to, epoch, zxid, configuration } => {
                // Commits are applied as Zab hands them out, so the tree is exactly at
                // the commit point the snapshot must reflect.
                assert_eq!(self.tree.last_zxid(), zxid, "the tree and the commit point disagree");
                let (chunks, _) = snapshot::to_chunks(self.tree.state(), self.config.snapshot_chunk_bytes);
                let configuration = Some(configuration);
                let msg = Message::Snap { epoch, zxid, chunks, configuration };
                self.outputs.push(Output::Zab(zab::Io::Send { to, msg }));
            }
            zab::Action::RoleChanged(status) => self.on_status(status),
            zab::Action::ConfigurationAdopted(configuration) => {
                self.tree.adopt_initial_configuration(configuration, self.config.members.is_some());
            }
            zab::Action::Forwarded { from, payload } => self.on_forwarded(from, &payload),
            zab::Action::Replied { payload } => self.on_replied(&payload),
            zab::Action::LeadershipConfirmed { probe } => {
                for s in self.prep.confirmed(&mut self.zab, probe) {
                    self.sync_reached(s.session, s.cxid, s.zxid);
                }
                for c in self.read_index.confirmed(&mut self.zab, probe) {
                    self.sync_reached(c.barrier.session, c.barrier.cxid, c.zxid);
                }
            }
        }
    }

    /// Prepares and proposes the leader's queued work.
    fn run_prep(&mut self) {
        if self.leading() && self.status.serving {
            let env = prep::Env {
                zab: &mut self.zab,
                tree: self.tree.state(),
                now_ms: self.clock.now_ms,
                limits: self.config.limits,
                disk_low: self.disk_low,
                reconfig_enabled: self.config.reconfig_enabled,
                peer_endpoints: &self.peer_endpoints,
            };
            self.prep.run(env, self.config.tick_ms, self.clock.ticks);
        }
    }

    fn on_status(&mut self, status: Status) {
        let was_serving = self.status.serving;
        self.status = status;
        self.outputs.push(Output::Status(status));
        if was_serving && !status.serving {
            self.serving_lost_at = self.clock.ticks;
            self.stop_serving();
        }
        if status.serving && status.role == Role::Leading {
            self.prep.start(self.tree.state(), self.config.tick_ms, self.clock.ticks);
        }
        if status.serving && !was_serving {
            // Decide every connect that waited for this replica to serve, in
            // arrival order, so sessions are created in that order.
            for conn in self.conns.catching_up() {
                self.try_connect(conn);
            }
        }
    }

    /// Leaving the serving state: every client goes elsewhere (or comes back
    /// once this replica serves again), as ZooKeeper closes its connections.
    /// Connects still waiting to be decided keep waiting for the next leader.
    fn stop_serving(&mut self) {
        let waiting: BTreeSet<ConnId> = self.conns.catching_up().into_iter().collect();
        for conn in self.conns.ids() {
            if !waiting.contains(&conn) {
                self.close_conn(conn, crate::error::ErrorCode::ConnectionLoss, "the replica lost its leader");
            }
        }
        self.prep.clear();
        self.read_index.clear();
        self.touched.clear();
    }

    // ------------------------------------------------------------ ticks

    fn on_tick(&mut self, now_ms: i64) {
        self.clock.now_ms = self.clock.now_ms.max(now_ms);
        self.clock.ticks += 1;
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
                    self.zab.forward(forward::encode(&forward::ToLeader::Touch { sessions }));
                }
            }
            Role::Leading => {
                self.record_endpoints();
                let (now_ms, ticks) = (self.clock.now_ms, self.clock.ticks);
                let expired = self.prep.on_tick(self.tree.state(), now_ms, ticks, self.config.reap_interval_ticks);
                for session in expired {
                    tracing::info!(id = self.me(), session = %session, "session expired");
                    self.counters.expired_sessions += 1;
                }
            }
            Role::Looking => {}
        }
    }

    // ------------------------------------------------------------ snapshots

    /// Copies the tree for a snapshot, handed out once the log holds it durably.
    fn take_snapshot(&mut self) {
        self.snapshots.hold(self.tree.snapshot());
        self.release_snapshot();
    }

    fn release_snapshot(&mut self) {
        if let Some(state) = self.snapshots.release(self.zab.durable_zxid()) {
            self.outputs.push(Output::TakeSnapshot { state });
        }
    }
}
