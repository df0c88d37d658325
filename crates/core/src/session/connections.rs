//! The connections of one replica and the sessions attached to them.

use super::admission::{ConnectRequest, Revalidation};
use super::queue::RequestQueue;
use super::ConnId;
use crate::acl::Id;
use crate::ids::{SessionId, Zxid};
use bytes::Bytes;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// Where a connection is on its way to a session.
#[derive(Debug)]
pub enum ConnState {
    /// Creating a new session (its createSession is in flight).
    Creating {
        /// The id chosen for it.
        session: SessionId,
        /// The tag of its createSession.
        cxid: i32,
    },
    /// Waiting to be decided (see [`admission`](super::admission)).
    CatchingUp {
        /// What the client asked.
        request: ConnectRequest,
        /// The tick by which it must be decided.
        until_tick: u64,
        /// The password a new session gets.
        new_password: Bytes,
        /// Where revalidation with the leader is.
        revalidation: Revalidation,
    },
    /// Attached to a session.
    Attached {
        /// The session.
        session: SessionId,
    },
}

/// One client connection.
#[derive(Debug)]
pub struct Conn<E> {
    /// Where it is.
    pub state: ConnState,
    /// Who the client is (its address, then what it authenticated as).
    pub identities: Vec<Id>,
    /// Its requests, in order.
    pub queue: RequestQueue<E>,
    /// The wall clock (as the last tick carried it) when it last sent
    /// anything, pings included.
    pub last_heard_ms: i64,
}

impl<E> Conn<E> {
    /// The session it is attached to.
    pub fn session(&self) -> Option<SessionId> {
        match self.state {
            ConnState::Attached { session } => Some(session),
            _ => None,
        }
    }
}

/// Every connection of this replica, and which one each session is attached to.
#[derive(Debug)]
pub struct Connections<E> {
    conns: FxHashMap<ConnId, Conn<E>>,
    by_session: FxHashMap<SessionId, ConnId>,
    /// Connections with a sync waiting for the tree to reach a zxid.
    waiting_apply: BTreeSet<ConnId>,
    /// Connects whose revalidation waits for the tree to reach a zxid.
    revalidating: BTreeSet<ConnId>,
}

impl<E> Default for Connections<E> {
    fn default() -> Self {
        Connections {
            conns: FxHashMap::default(),
            by_session: FxHashMap::default(),
            waiting_apply: BTreeSet::new(),
            revalidating: BTreeSet::new(),
        }
    }
}

impl<E> Connections<E> {
    /// A new connection waiting to be decided until `until_tick`.
    pub fn open(
        &mut self,
        conn: ConnId,
        request: ConnectRequest,
        until_tick: u64,
        new_password: Bytes,
        identities: Vec<Id>,
        now_ms: i64,
    ) {
        let state = ConnState::CatchingUp { request, until_tick, new_password, revalidation: Revalidation::NotAsked };
        self.conns.insert(conn, Conn { state, identities, queue: RequestQueue::default(), last_heard_ms: now_ms });
    }

    /// A connection.
    pub fn get(&self, conn: ConnId) -> Option<&Conn<E>> {
        self.conns.get(&conn)
    }

    /// A connection, to change.
    pub fn get_mut(&mut self, conn: ConnId) -> Option<&mut Conn<E>> {
        self.conns.get_mut(&conn)
    }

    /// The connection a session is attached to here.
    pub fn of_session(&self, session: SessionId) -> Option<ConnId> {
        self.by_session.get(&session).copied()
    }

    /// Number of connections.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Every connection id, in arrival order.
    pub fn ids(&self) -> Vec<ConnId> {
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Connections still waiting to be decided, in arrival order.
    pub fn catching_up(&self) -> Vec<ConnId> {
        let mut ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, ConnState::CatchingUp { .. }))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Attaches `conn` to `session` (close the session's previous connection first).
    pub fn attach(&mut self, conn: ConnId, session: SessionId) {
        // Session ownership: a session is attached to one connection here at
        // a time. A second one would take the first one's replies and events
        // while the first still reads as attached.
        if let Some(old) = self.by_session.get(&session).filter(|old| **old != conn) {
            debug_assert!(
                !self.conns.contains_key(old),
                "session {session:?} attached to connection {conn:?} while connection {old:?} still holds it"
            );
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Attached { session };
        }
        self.by_session.insert(session, conn);
    }

    /// Marks `conn` as creating `session` with the createSession tagged `cxid`.
    pub fn creating(&mut self, conn: ConnId, session: SessionId, cxid: i32) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Creating { session, cxid };
        }
    }

    /// The connection creating `session` with the createSession tagged `cxid`.
    pub fn find_creating(&self, session: SessionId, cxid: i32) -> Option<ConnId> {
        self.conns.iter().find_map(|(id, c)| match c.state {
            ConnState::Creating { session: s, cxid: x } if s == session && x == cxid => Some(*id),
            _ => None,
        })
    }

    /// Records the leader's answer to the revalidation tagged `cxid` of a
    /// connect resuming `session`; returns that connection.
    pub fn revalidated(&mut self, session: SessionId, cxid: i32, zxid: Zxid) -> Option<ConnId> {
        self.conns.iter_mut().find_map(|(id, c)| match &mut c.state {
            ConnState::CatchingUp { request, revalidation, .. }
                if request.session_id == session.0 && *revalidation == Revalidation::Asked(cxid) =>
            {
                *revalidation = Revalidation::Until(zxid);
                Some(*id)
            }
            _ => None,
        })
    }

    /// Records that the revalidation of `conn` went to the leader tagged `cxid`.
    pub fn revalidation_asked(&mut self, conn: ConnId, cxid: i32) {
        if let Some(Conn { state: ConnState::CatchingUp { revalidation, .. }, .. }) = self.conns.get_mut(&conn) {
            *revalidation = Revalidation::Asked(cxid);
        }
    }

    /// Remembers a connect to decide again after the next commit.
    pub fn revalidate_after_apply(&mut self, conn: ConnId) {
        self.revalidating.insert(conn);
    }

    /// The connects waiting for a commit, forgotten here.
    pub fn take_revalidating(&mut self) -> BTreeSet<ConnId> {
        std::mem::take(&mut self.revalidating)
    }

    /// Remembers (or forgets) that `conn` has a sync waiting for a commit.
    pub fn set_waiting_apply(&mut self, conn: ConnId, waiting: bool) {
        if waiting {
            self.waiting_apply.insert(conn);
        } else {
            self.waiting_apply.remove(&conn);
        }
    }

    /// The connections with a sync waiting for a commit.
    pub fn waiting_apply(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.waiting_apply.iter().copied()
    }

    /// Forgets a connection. Returns the session it was the connection of,
    /// which is now attached nowhere here (its session lives on).
    pub fn remove(&mut self, conn: ConnId) -> Option<SessionId> {
        let c = self.conns.remove(&conn)?;
        self.waiting_apply.remove(&conn);
        let session = c.session()?;
        if self.by_session.get(&session) == Some(&conn) {
            self.by_session.remove(&session);
            return Some(session);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::admission::ConnectRequest;

    fn with_two_connections() -> Connections<()> {
        let mut conns = Connections::default();
        for id in [1, 2] {
            let request =
                ConnectRequest { session_id: 0, password: Bytes::new(), timeout_ms: 10_000, last_zxid_seen: 0 };
            conns.open(id, request, 10, Bytes::new(), Vec::new(), 0);
        }
        conns
    }

    #[test]
    fn a_session_moves_to_a_new_connection_once_the_old_one_is_gone() {
        let mut conns = with_two_connections();
        conns.attach(1, SessionId(7));
        assert_eq!(conns.remove(1), Some(SessionId(7)));
        conns.attach(2, SessionId(7));
        assert_eq!(conns.of_session(SessionId(7)), Some(2));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "still holds it")]
    fn a_session_attached_to_two_connections_at_once_is_caught() {
        let mut conns = with_two_connections();
        conns.attach(1, SessionId(7));
        conns.attach(2, SessionId(7));
    }
}
