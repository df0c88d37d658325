//! Connects: deciding each (see [`admission`](crate::session::admission)),
//! creating sessions, attaching and closing connections.

use super::forward::{self, NewSession, ToLeader};
use super::{ClientMessage, ConnId, Replica};
use crate::error::ErrorCode;
use crate::ids::SessionId;
use crate::session::{admission, Admission, Conn, ConnState, Facts, NOT_SERVING};
use bytes::Bytes;

impl Replica {
    /// Decides a pending connect if this replica can now.
    pub(super) fn try_connect(&mut self, conn: ConnId) {
        let Some(Conn { state: ConnState::CatchingUp { request, new_password, revalidation, .. }, .. }) =
            self.conns.get(conn)
        else {
            return;
        };
        let session = SessionId(request.session_id);
        let facts = Facts {
            serving: self.status.serving,
            not_serving_for: self.clock.ticks.saturating_sub(self.serving_lost_at),
            catch_up_ticks: self.config.catch_up_ticks,
            applied: self.tree.last_zxid(),
            leading: self.leading(),
            record: self.tree.state().session(session),
            live: self.prep.is_live(session),
        };
        match admission::decide(request, *revalidation, &facts) {
            Admission::Wait => {}
            Admission::WaitApplied => self.conns.revalidate_after_apply(conn),
            Admission::Refuse(error, reason) => self.refuse(conn, error, reason),
            Admission::CreateSession => {
                let (timeout_ms, password) = (request.timeout_ms, new_password.clone());
                self.create_session(conn, timeout_ms, password);
            }
            Admission::Revalidate => {
                // A leader that never answers: ConnectionLoss at the catch-up
                // deadline, and the client tries another member.
                let cxid = self.ids.cxid();
                if !self.zab.forward(forward::encode(&ToLeader::Revalidate { session, cxid })) {
                    self.refuse(conn, ErrorCode::ConnectionLoss, "no leader to revalidate the session with");
                    return;
                }
                self.conns.revalidation_asked(conn, cxid);
            }
            Admission::Attach { password, timeout_ms } => self.attach(conn, session, password, timeout_ms),
        }
    }

    fn attach(&mut self, conn: ConnId, session: SessionId, password: Bytes, timeout_ms: i32) {
        if let Some(old) = self.conns.of_session(session).filter(|old| *old != conn) {
            self.close_conn(old, ErrorCode::SessionMoved, "the session reconnected elsewhere");
        }
        self.conns.attach(conn, session);
        if self.leading() {
            let me = self.me();
            self.prep.owned_by(session, me);
        }
        self.touch(session);
        let zxid = self.tree.last_zxid();
        self.emit(conn, ClientMessage::Connected { session, password, timeout_ms, zxid });
        self.advance(conn);
    }

    fn create_session(&mut self, conn: ConnId, requested_ms: i32, password: Bytes) {
        let timeout_ms = requested_ms.clamp(self.config.min_session_timeout_ms, self.config.max_session_timeout_ms);
        let session = self.ids.session();
        let cxid = self.ids.cxid();
        self.conns.creating(conn, session, cxid);
        let new = NewSession { session, cxid, timeout_ms, password };
        if self.leading() {
            let me = self.me();
            self.prep.create_session(me, new);
        } else if !self.zab.forward(forward::encode(&ToLeader::CreateSession(new))) {
            self.refuse(conn, ErrorCode::ConnectionLoss, "no leader to create the session");
        }
    }

    /// A session's createSession committed: the connection that asked for it attaches.
    pub(super) fn on_session_created(&mut self, session: SessionId, cxid: i32, password: &Bytes, timeout_ms: i32) {
        let Some(conn) = self.conns.find_creating(session, cxid) else { return };
        self.conns.attach(conn, session);
        let zxid = self.tree.last_zxid();
        self.emit(conn, ClientMessage::Connected { session, password: password.clone(), timeout_ms, zxid });
        self.advance(conn);
    }

    /// Decides the connects still waiting, refusing those past their deadline.
    pub(super) fn expire_catch_ups(&mut self) {
        let now = self.clock.ticks;
        for conn in self.conns.catching_up() {
            let overdue = matches!(
                self.conns.get(conn).map(|c| &c.state),
                Some(ConnState::CatchingUp { until_tick, .. }) if now >= *until_tick
            );
            self.try_connect(conn);
            let still_waiting = matches!(self.conns.get(conn).map(|c| &c.state), Some(ConnState::CatchingUp { .. }));
            if overdue && still_waiting {
                let reason = if self.status.serving {
                    "this replica is behind the client's last seen zxid"
                } else {
                    NOT_SERVING
                };
                self.refuse(conn, ErrorCode::ConnectionLoss, reason);
            }
        }
    }

    fn refuse(&mut self, conn: ConnId, error: ErrorCode, reason: &str) {
        self.conns.remove(conn);
        self.emit(conn, ClientMessage::ConnectFailed { error, reason: reason.to_string() });
    }

    /// Tells a connection it is closed, and forgets it.
    pub(super) fn close_conn(&mut self, conn: ConnId, error: ErrorCode, reason: &str) {
        if self.conns.get(conn).is_some() {
            self.drop_conn(conn);
            self.emit(conn, ClientMessage::Close { error, reason: reason.to_string() });
        }
    }

    /// Forgets a connection; its session lives on (until it expires or resumes).
    pub(super) fn drop_conn(&mut self, conn: ConnId) {
        if let Some(session) = self.conns.remove(conn) {
            self.tree.watches_mut().remove_session(session);
        }
    }
}
