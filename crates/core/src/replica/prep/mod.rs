//! The leader's preparation of writes (the "L.prep" box of the design,
//! ZooKeeper's `PrepRequestProcessor` with its session tracker): requests
//! from every member queue here in arrival order, each is checked against
//! the committed tree plus the changes already proposed, and becomes a
//! transaction (a failure too, so replies stay in order) for Zab to propose.
//! Only the leader prepares; on other members this stays empty. The check of
//! one request against the tree ([`check`], ZooKeeper's per-op preparation)
//! is apart from the queue and the session bookkeeping here.

pub mod check;
pub mod reconfig;

use super::forward::{self, NewSession, ToFollower, ToLeader, Write};
use crate::error::ErrorCode;
use crate::ids::{ServerId, SessionId, Zxid};
use crate::session::{timeout_ticks, SessionTracker};
use crate::tree::stat::EphemeralType;
use crate::tree::TreeState;
use crate::txn::{Txn, TxnBody};
use crate::zab::Zab;
use check::{Context, Limits, PendingChanges};
use std::collections::{BTreeMap, VecDeque};

/// Something the leader turns into a transaction, in arrival order.
#[derive(Debug)]
enum Work {
    /// A client write.
    Write(Write),
    /// A request refused before preparation; the error is committed like any outcome.
    Refuse { session: SessionId, cxid: i32, code: ErrorCode },
    /// A new session.
    CreateSession(NewSession),
    /// A sync: once everything before it is proposed, the last proposed
    /// zxid is its answer, given once a quorum confirms this member leads.
    Sync { origin: Option<ServerId>, session: SessionId, cxid: i32 },
    /// A session whose timeout passed.
    Expire { session: SessionId },
    /// An empty container or an expired TTL node to delete.
    Reap { path: String },
}

/// A sync of a session attached to the leader itself, answered: it is done
/// once the tree has applied `zxid`.
#[derive(Clone, Copy, Debug)]
pub struct LocalSync {
    /// The session.
    pub session: SessionId,
    /// The sync's tag.
    pub cxid: i32,
    /// The last proposed zxid when the sync's turn came.
    pub zxid: Zxid,
}

/// A sync whose answer waits for a quorum to confirm this member leads.
#[derive(Clone, Copy, Debug)]
struct Confirming {
    /// The leadership probe to wait for.
    probe: u64,
    /// The follower that forwarded it; None for the leader's own session.
    origin: Option<ServerId>,
    session: SessionId,
    cxid: i32,
    /// The last proposed zxid when its turn came.
    zxid: Zxid,
}

/// What preparing needs from the rest of the replica.
pub struct Env<'a> {
    /// Zab, to propose and answer followers.
    pub zab: &'a mut Zab,
    /// The committed tree.
    pub tree: &'a TreeState,
    /// The wall clock, stamped into transactions.
    pub now_ms: i64,
    /// Request limits.
    pub limits: Limits,
    /// This member's disk is short of space: writes that grow the state
    /// are refused (ThrottledOp) rather than risk failing the log's fsync.
    pub disk_low: bool,
    /// ZooKeeper's `reconfig` is served (`reconfig_enabled`).
    pub reconfig_enabled: bool,
    /// What other members said of their endpoints, for a reconfiguration's new lines.
    pub peer_endpoints: &'a crate::members::Told,
}

/// The leader's session tracker, session owners and queue of requests.
#[derive(Debug, Default)]
pub struct Prep {
    /// Session liveness (ZooKeeper's session tracker).
    tracker: SessionTracker,
    /// The member each session is attached to. A write forwarded by any
    /// other member is a leftover from before the session moved, and is
    /// refused with SessionMoved (ZooKeeper's session owner).
    owners: BTreeMap<SessionId, ServerId>,
    /// Proposed but uncommitted changes, so two pipelined creates of one
    /// path cannot both succeed.
    pending_changes: PendingChanges,
    work: VecDeque<Work>,
    /// Syncs past their turn, in probe order.
    confirming: VecDeque<Confirming>,
}

impl Prep {
    /// Forgets everything (this member no longer leads a serving ensemble).
    pub fn clear(&mut self) {
        self.tracker.clear();
        self.owners.clear();
        self.pending_changes.clear();
        self.work.clear();
        self.confirming.clear();
    }

    /// Starts leading: every session in the tree gets a full timeout from `now_tick`.
    pub fn start(&mut self, tree: &TreeState, tick_ms: u64, now_tick: u64) {
        self.tracker.clear();
        self.owners.clear();
        self.pending_changes.clear();
        for (session, record) in tree.sessions() {
            self.tracker.add(*session, timeout_ticks(record.timeout_ms, tick_ms), now_tick);
        }
    }

    /// Every session's deadline tick (empty unless this member leads).
    pub fn deadlines(&self) -> Vec<(SessionId, u64)> {
        self.tracker.deadlines()
    }

    /// Whether the session may still make requests (leader's view).
    pub fn is_live(&self, session: SessionId) -> bool {
        self.tracker.is_live(session)
    }

    /// Records activity of a session.
    pub fn touch(&mut self, session: SessionId, now_tick: u64) {
        self.tracker.touch(session, now_tick);
    }

    /// A session attached to `member` (the leader itself for its own clients).
    pub fn owned_by(&mut self, session: SessionId, member: ServerId) {
        self.owners.insert(session, member);
    }

    /// A write of a session attached to `via` (this member or a follower).
    pub fn write(&mut self, via: ServerId, write: Write) {
        let work = self.fenced(via, write);
        self.work.push_back(work);
    }

    /// A new session created through `via`.
    pub fn create_session(&mut self, via: ServerId, new: NewSession) {
        self.owners.insert(new.session, via);
        self.work.push_back(Work::CreateSession(new));
    }

    /// Syncs (local or forwarded) waiting their turn behind queued writes,
    /// or for a quorum to confirm this member leads.
    pub fn pending_syncs(&self) -> usize {
        self.work.iter().filter(|w| matches!(w, Work::Sync { .. })).count() + self.confirming.len()
    }

    /// A quorum confirmed every leadership probe up to `probe`: answers the
    /// syncs that waited for them. Forwarded ones go back to their follower;
    /// those of this member's own sessions are returned, in order.
    pub fn confirmed(&mut self, zab: &mut Zab, probe: u64) -> Vec<LocalSync> {
        let mut synced = Vec::new();
        while let Some(c) = self.confirming.front().filter(|c| c.probe <= probe).copied() {
            self.confirming.pop_front();
            let Confirming { origin, session, cxid, zxid, .. } = c;
            match origin {
                Some(follower) => {
                    zab.reply(follower, forward::encode(&ToFollower::SyncDone { session, cxid, zxid }));
                }
                None => synced.push(LocalSync { session, cxid, zxid }),
            }
        }
        synced
    }

    /// A sync of a session attached to this member.
    pub fn sync(&mut self, session: SessionId, cxid: i32) {
        self.work.push_back(Work::Sync { origin: None, session, cxid });
    }

    /// A request a follower forwarded. Returns a session that reattached at
    /// that follower after leaving this member: its connection here must close.
    pub fn forwarded(&mut self, me: ServerId, from: ServerId, msg: ToLeader, now_tick: u64) -> Option<SessionId> {
        match msg {
            ToLeader::Write(write) => {
                self.tracker.touch(write.session, now_tick);
                self.write(from, write);
            }
            ToLeader::CreateSession(new) => self.create_session(from, new),
            ToLeader::Sync { session, cxid } => self.work.push_back(Work::Sync { origin: Some(from), session, cxid }),
            ToLeader::Revalidate { session, cxid } => {
                let previous = self.owners.insert(session, from);
                self.work.push_back(Work::Sync { origin: Some(from), session, cxid });
                // It left a connection here: ZooKeeper closes the old one.
                return (previous == Some(me)).then_some(session);
            }
            ToLeader::Touch { sessions } => {
                for s in sessions {
                    self.tracker.touch(s, now_tick);
                }
            }
            ToLeader::ReadIndex { .. } => {
                debug_assert!(false, "read-index rounds are the replica's, not prep's");
            }
        }
        None
    }

    /// The work for a write arriving through member `via`: refused with
    /// SessionMoved if the session is attached elsewhere now. A session with
    /// no recorded owner (a new leader knows none) is claimed by the first
    /// member that writes for it, as ZooKeeper's session tracker does.
    fn fenced(&mut self, via: ServerId, write: Write) -> Work {
        let owner = *self.owners.entry(write.session).or_insert(via);
        if owner != via {
            tracing::debug!(session = %write.session, via, owner, "refusing a write from a member the session left");
            return Work::Refuse { session: write.session, cxid: write.cxid, code: ErrorCode::SessionMoved };
        }
        Work::Write(write)
    }

    /// A tick on the serving leader: expires silent sessions, and every
    /// `reap_every` ticks queues the deletion of empty containers and expired
    /// TTL nodes. Returns the sessions expired.
    pub fn on_tick(&mut self, tree: &TreeState, now_ms: i64, now_tick: u64, reap_every: u64) -> Vec<SessionId> {
        let expired = self.tracker.expire(now_tick);
        for &session in &expired {
            self.work.push_back(Work::Expire { session });
        }
        if reap_every > 0 && now_tick.is_multiple_of(reap_every) {
            self.queue_reaps(tree, now_ms);
        }
        expired
    }

    fn queue_reaps(&mut self, tree: &TreeState, now_ms: i64) {
        for path in tree.containers().chain(tree.ttl_nodes()) {
            let Some(node) = tree.node(path) else { continue };
            if node.num_children() > 0 {
                continue;
            }
            let due = match EphemeralType::of(node.persisted().ephemeral_owner) {
                EphemeralType::Container => node.persisted().cversion > 0,
                EphemeralType::Ttl(ttl) => now_ms.saturating_sub(node.persisted().mtime) > ttl,
                _ => false,
            };
            if due {
                self.work.push_back(Work::Reap { path: path.to_string() });
            }
        }
    }

    /// A committed transaction was applied (on any member; only the leader
    /// tracks anything).
    pub fn applied(&mut self, zxid: Zxid, txn: &Txn, leading: bool, serving: bool, tick_ms: u64, now_tick: u64) {
        if leading {
            self.pending_changes.retire(zxid);
        }
        match &txn.body {
            TxnBody::CreateSession { timeout_ms, .. } if leading && serving && !self.tracker.is_live(txn.session) => {
                self.tracker.add(txn.session, timeout_ticks(*timeout_ms, tick_ms), now_tick);
            }
            TxnBody::CloseSession { .. } => {
                self.tracker.remove(txn.session);
                self.owners.remove(&txn.session);
            }
            _ => {}
        }
    }

    /// Prepares and proposes queued work while Zab has room. A sync whose
    /// turn comes waits for [`Prep::confirmed`].
    pub fn run(&mut self, env: Env<'_>, tick_ms: u64, now_tick: u64) {
        let Env { zab, tree, now_ms, limits, disk_low, reconfig_enabled, peer_endpoints } = env;
        while !self.work.is_empty() {
            let Ok(zxid) = zab.next_zxid() else { break };
            let Some(work) = self.work.pop_front() else { break };
            let txn = match work {
                Work::Write(Write { session, cxid, op, identities }) => {
                    let body = if !self.tracker.is_live(session) {
                        TxnBody::Error(ErrorCode::SessionExpired)
                    } else if disk_low && op.grows_state() {
                        TxnBody::Error(ErrorCode::ThrottledOp)
                    } else if let crate::op::Op::Reconfig { .. } = op {
                        reconfig::prepare(zab, tree, &identities, &op, reconfig_enabled, peer_endpoints)
                            .unwrap_or_else(TxnBody::Error)
                    } else {
                        let ctx = Context { session, identities: &identities, zxid, time_ms: now_ms, limits };
                        match self.pending_changes.prepare(tree, &ctx, &op) {
                            Ok(body) => {
                                if matches!(op, crate::op::Op::CloseSession) {
                                    self.tracker.set_closing(session);
                                }
                                body
                            }
                            Err(e) => TxnBody::Error(e.code),
                        }
                    };
                    Txn { session, cxid, time_ms: now_ms, body }
                }
                Work::Refuse { session, cxid, code } => {
                    Txn { session, cxid, time_ms: now_ms, body: TxnBody::Error(code) }
                }
                Work::CreateSession(NewSession { session, cxid, timeout_ms, password }) => {
                    self.tracker.add(session, timeout_ticks(timeout_ms, tick_ms), now_tick);
                    Txn { session, cxid, time_ms: now_ms, body: TxnBody::CreateSession { timeout_ms, password } }
                }
                Work::Sync { origin, session, cxid } => {
                    let zxid = zab.last_logged();
                    // A follower's forwarded sync is its echo, as a read-index
                    // round is (see `read_index`): with three voters it and this
                    // leader confirm the sync without a probe. Not past an
                    // earlier sync of that follower still waiting for one.
                    if let Some(f) = origin.filter(|&f| zab.is_quorum_with(f)) {
                        if !self.confirming.iter().any(|c| c.origin == Some(f)) {
                            zab.reply(f, forward::encode(&ToFollower::SyncDone { session, cxid, zxid }));
                            continue;
                        }
                    }
                    // Only an established leader prepares, so there is a probe.
                    if let Some(probe) = zab.confirm_leadership() {
                        self.confirming.push_back(Confirming { probe, origin, session, cxid, zxid });
                    }
                    continue;
                }
                Work::Expire { session } => {
                    let body = self.pending_changes.prepare_close_session(tree, session, zxid);
                    Txn { session, cxid: 0, time_ms: now_ms, body }
                }
                Work::Reap { path } => match self.pending_changes.prepare_reap(tree, &path, zxid, now_ms) {
                    Some(body) => Txn { session: SessionId::NONE, cxid: 0, time_ms: now_ms, body },
                    None => continue,
                },
            };
            if let Err(e) = zab.propose(txn) {
                tracing::warn!(error = %e, "proposal refused after next_zxid allowed it");
                break;
            }
        }
    }
}
