//! A connection's requests on their way through the replica: queued in
//! order, reads answered here, writes and syncs started toward the leader,
//! replies sent as they become ready.

use super::forward::{self, ToLeader, Write};
use super::prep::check;
use super::{reads, ClientMessage, ConnId, Echo, Replica};
use crate::acl;
use crate::error::{ErrorCode, ZkError};
use crate::ids::{SessionId, Zxid};
use crate::op::{Op, OpResult, Reply};
use crate::session::{Start, Starting};

impl Replica {
    pub(super) fn on_request(&mut self, conn: ConnId, xid: i32, echo: Echo, op: Op, linearizable: bool) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        c.last_heard_ms = self.clock.now_ms;
        // Malformed writes fail here with a precise reason and no round trip;
        // the reply still waits its turn in the queue.
        let refused = match check::validate(&op, &c.identities, self.config.limits) {
            Err(e) if op.is_write() || matches!(op, Op::MultiRead(_)) => Some(e),
            _ => None,
        };
        let linearizable = linearizable || self.config.linearizable_reads;
        c.queue.push(xid, echo, op, refused, linearizable);
        // Requests sent before the session is attached wait in the queue.
        let Some(session) = c.session() else { return };
        self.touch(session);
        self.advance(conn);
    }

    pub(super) fn on_bad_request(&mut self, conn: ConnId, xid: i32, echo: Echo, error: ZkError) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        c.queue.push(xid, echo, Op::Ping, Some(error), false);
        self.advance(conn);
    }

    /// Moves a connection's queue as far as it goes now: completes syncs the
    /// tree has reached, starts writes and syncs that may start, answers the
    /// read at the front, and sends every reply that is ready, in order.
    pub(super) fn advance(&mut self, conn: ConnId) {
        loop {
            let applied = self.tree.last_zxid();
            let Some(c) = self.conns.get_mut(conn) else { return };
            let Some(session) = c.session() else { return };
            let waiting = c.queue.applied(applied);
            let ids = &mut self.ids;
            let started = c.queue.start(|| ids.cxid());
            self.conns.set_waiting_apply(conn, waiting);
            let mut moved = !started.is_empty();
            for start in started {
                self.submit(conn, session, start);
            }
            moved |= self.answer_read(conn, session);
            match self.send_ready(conn) {
                Sent::Closed => return,
                Sent::Some => moved = true,
                Sent::None => {}
            }
            if !moved {
                return;
            }
        }
    }

    /// Sends a started write or sync on its way: to the leader's queue here,
    /// or forwarded to the leader; a linearizable read's barrier to the read
    /// index. Without a leader it fails at once.
    fn submit(&mut self, conn: ConnId, session: SessionId, start: Start) {
        let Start { cxid, what } = start;
        let lost = |c: &mut crate::session::Conn<Echo>| {
            c.queue.complete(cxid, |_| Err(ZkError::new(ErrorCode::ConnectionLoss, "")));
        };
        if !self.status.serving {
            if let Some(c) = self.conns.get_mut(conn) {
                lost(c);
            }
            return;
        }
        let op = match what {
            Starting::Request(op) => op,
            Starting::Barrier => {
                let barrier = super::read_index::Barrier { session, cxid };
                let asked = if self.leading() {
                    self.read_index.lead(&self.zab, barrier)
                } else {
                    self.read_index.follow(&self.zab, barrier)
                };
                if let Some(c) = self.conns.get_mut(conn).filter(|_| !asked) {
                    lost(c);
                }
                return;
            }
        };
        if matches!(op, Op::Sync { .. }) {
            if self.leading() {
                self.prep.sync(session, cxid);
            } else {
                self.zab.forward(forward::encode(&ToLeader::Sync { session, cxid }));
            }
            return;
        }
        // ACLs are checked on the leader, against the session's identities here.
        let identities = self.conns.get(conn).map(|c| c.identities.clone()).unwrap_or_default();
        let write = Write { session, cxid, op, identities };
        if self.leading() {
            let me = self.me();
            self.prep.write(me, write);
        } else {
            self.zab.forward(forward::encode(&ToLeader::Write(write)));
        }
    }

    /// Answers the read at the front of the queue, if there is one; true if it did.
    fn answer_read(&mut self, conn: ConnId, session: SessionId) -> bool {
        let Some(c) = self.conns.get_mut(conn) else { return false };
        let Some(op) = c.queue.read_at_front() else { return false };
        let reply: Reply = match op {
            Op::Auth { scheme, auth } => match acl::authenticate_on(scheme, auth, &c.identities) {
                Ok(id) => {
                    // ZooKeeper's superDigest: these credentials pass every ACL check.
                    let is_super = id.scheme == "digest" && self.config.super_digest.as_deref() == Some(id.id.as_str());
                    for id in std::iter::once(id).chain(is_super.then(|| acl::Id::new("super", ""))) {
                        if !c.identities.contains(&id) {
                            c.identities.push(id);
                        }
                    }
                    Ok(OpResult::Empty)
                }
                Err(e) => Err(ZkError::with_reason(ErrorCode::AuthFailed, "", e.to_string())),
            },
            op if self.tree.watches().paths_of(session) + op.watches_left()
                > self.config.limits.max_watches_per_session =>
            {
                let limit = self.config.limits.max_watches_per_session;
                let reason = format!(
                    "the session watches {} paths, at most {limit} (max_watches_per_session)",
                    self.tree.watches().paths_of(session)
                );
                Err(ZkError::with_reason(ErrorCode::BadArguments, op.path().unwrap_or(""), reason))
            }
            op => {
                let outcome = reads::execute(&mut self.tree, session, &c.identities, op);
                for event in outcome.events {
                    self.outputs.push(super::Output::Client { conn, msg: ClientMessage::Event(event) });
                }
                outcome.reply
            }
        };
        c.queue.answer_front(reply);
        true
    }

    /// Sends the replies at the front that are ready.
    pub(super) fn send_ready(&mut self, conn: ConnId) -> Sent {
        let mut sent = Sent::None;
        loop {
            let Some(c) = self.conns.get_mut(conn) else { return Sent::Closed };
            let Some(answered) = c.queue.pop_answered() else { return sent };
            sent = Sent::Some;
            let closes = matches!(answered.op, Op::CloseSession) && answered.reply.is_ok();
            self.counters.requests += 1;
            let zxid = self.tree.last_zxid();
            let msg = ClientMessage::Reply { xid: answered.xid, echo: answered.echo, zxid, reply: answered.reply };
            self.emit(conn, msg);
            if closes {
                self.close_conn(conn, ErrorCode::Ok, "session closed");
                return Sent::Closed;
            }
        }
    }

    /// The leader answered a sync (or a revalidation) at `zxid`.
    pub(super) fn sync_reached(&mut self, session: SessionId, cxid: i32, zxid: Zxid) {
        // A connect revalidating its session (see connect.rs)?
        if let Some(conn) = self.conns.revalidated(session, cxid, zxid) {
            self.try_connect(conn);
            return;
        }
        let Some(conn) = self.conns.of_session(session) else { return };
        let Some(c) = self.conns.get_mut(conn) else { return };
        if c.queue.sync_answered(cxid, zxid) {
            self.conns.set_waiting_apply(conn, true);
        }
        self.advance(conn);
    }

    /// Records a session's activity: the leader's tracker, or the next
    /// report a follower sends it.
    pub(super) fn touch(&mut self, session: SessionId) {
        if self.leading() {
            self.prep.touch(session, self.clock.ticks);
        } else {
            self.touched.insert(session);
        }
    }
}

/// What [`Replica::send_ready`] did.
pub(super) enum Sent {
    /// Nothing was ready.
    None,
    /// Some replies went out.
    Some,
    /// The connection closed (its session ended).
    Closed,
}

impl Replica {
    /// Leader: a follower forwarded something.
    pub(super) fn on_forwarded(&mut self, from: crate::ids::ServerId, payload: &[u8]) {
        let msg: ToLeader = match forward::decode(payload) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(id = self.me(), from, error = %e, "dropping malformed forwarded request");
                return;
            }
        };
        if let ToLeader::ReadIndex { round } = msg {
            self.read_index.forwarded(&mut self.zab, from, round);
            return;
        }
        let me = self.me();
        if let Some(moved) = self.prep.forwarded(me, from, msg, self.clock.ticks) {
            if let Some(old) = self.conns.of_session(moved) {
                self.close_conn(old, ErrorCode::SessionMoved, "the session reconnected elsewhere");
            }
        }
    }

    /// Follower: the leader answered a sync.
    pub(super) fn on_replied(&mut self, payload: &[u8]) {
        match forward::decode::<forward::ToFollower>(payload) {
            Ok(forward::ToFollower::SyncDone { session, cxid, zxid }) => self.sync_reached(session, cxid, zxid),
            Ok(forward::ToFollower::ReadIndexDone { round, zxid }) => {
                for c in self.read_index.answered(round, zxid) {
                    self.sync_reached(c.barrier.session, c.barrier.cxid, c.zxid);
                }
            }
            Err(e) => tracing::warn!(id = self.me(), error = %e, "dropping malformed leader reply"),
        }
    }
}
