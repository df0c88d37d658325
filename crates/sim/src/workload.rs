//! Simulated clients: each holds a session on some replica and issues a
//! random mix of writes and reads, reconnecting (resuming its session, with
//! its last seen zxid) whenever its replica crashes or drops it. While doing
//! so it checks what a client can see: replies in request order, reads
//! that never run behind its own acknowledged writes, and linearizable reads
//! and syncs that never run behind anything any client was shown before
//! they were sent. Plain reads may (a paused leader answers them from its
//! old tree): those are counted, not failed.

use super::invariants::Violation;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::VecDeque;
use zabkeeper_core::acl::{Acl, Id};
use zabkeeper_core::data::Data;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::ids::{ServerId, SessionId, Zxid};
use zabkeeper_core::op::Op;
use zabkeeper_core::replica::{ClientMessage, ConnId, ConnectRequest, Echo, Input};
use zabkeeper_core::tree::stat::CreateMode;

/// What a client does next.
pub enum Action {
    /// Open a connection.
    Connect {
        /// The replica.
        node: ServerId,
        /// The new connection.
        conn: ConnId,
        /// New or resumed session.
        request: ConnectRequest,
    },
    /// Send a request.
    Request {
        /// The replica.
        node: ServerId,
        /// The connection.
        conn: ConnId,
        /// Its xid.
        xid: i32,
        /// The op.
        op: Op,
        /// A read that must be linearizable.
        linearizable: bool,
    },
}

impl Action {
    /// The replica and the input for it.
    pub fn into_input(self) -> (ServerId, Input) {
        match self {
            Action::Connect { node, conn, request } => (
                node,
                Input::Connect {
                    conn,
                    request,
                    new_password: Bytes::from(vec![conn as u8; 16]),
                    identities: vec![Id::new("ip", "127.0.0.1")],
                },
            ),
            Action::Request { node, conn, xid, op, linearizable } => {
                (node, Input::Request { conn, xid, echo: Echo::default(), op, linearizable })
            }
        }
    }
}

enum Expect {
    /// A create of a unique persistent path, never deleted: once acknowledged it must stay.
    Create(String),
    /// A read of an acknowledged path: it must be there.
    Present(String, Freshness),
    /// Another read.
    Read(Freshness),
    /// A sync: it must be answered at or above `floor`, the highest zxid
    /// any client had been shown when it was sent.
    Sync {
        /// That zxid.
        floor: Zxid,
    },
    /// Anything else.
    Other,
    /// A close of the session.
    Close,
}

/// How fresh a read must be: `floor` is the highest zxid any client had
/// been shown when it was sent; a linearizable read must be answered at or
/// above it, a plain one may fall behind (counted).
#[derive(Clone, Copy, Debug)]
struct Freshness {
    /// That zxid.
    floor: Zxid,
    /// Asked for as linearizable.
    linearizable: bool,
}

/// Reads a client made, by kind, and the plain ones that were stale.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadCounts {
    /// Linearizable reads answered.
    pub linearizable: usize,
    /// Plain reads answered.
    pub plain: usize,
    /// Plain reads answered behind what some client had been shown before
    /// they were sent (allowed: ZooKeeper's reads are sequentially consistent).
    pub stale_plain: usize,
}

/// One simulated client.
pub struct Client {
    id: usize,
    node: Option<ServerId>,
    conn: Option<ConnId>,
    attached: bool,
    session: Option<(SessionId, Bytes)>,
    last_zxid: Zxid,
    next_xid: i32,
    outstanding: VecDeque<(i32, Expect)>,
    acked: Vec<String>,
    new_acks: Vec<String>,
    /// Creates refused with ThrottledOp (a leader short of disk): never applied.
    refused: Vec<String>,
    counter: u32,
    reads: ReadCounts,
    /// Every other read is linearizable.
    linearizable: bool,
}

impl Client {
    /// Client number `id`; every other read is `linearizable` if so.
    pub fn new(id: usize, linearizable: bool) -> Client {
        Client {
            id,
            node: None,
            conn: None,
            attached: false,
            session: None,
            last_zxid: Zxid::ZERO,
            next_xid: 0,
            outstanding: VecDeque::new(),
            acked: Vec::new(),
            new_acks: Vec::new(),
            refused: Vec::new(),
            counter: 0,
            reads: ReadCounts::default(),
            linearizable,
        }
    }

    /// The current connection.
    pub fn conn(&self) -> Option<ConnId> {
        self.conn
    }

    /// Reads answered so far, by kind.
    pub fn reads(&self) -> ReadCounts {
        self.reads
    }

    /// Writes acknowledged so far.
    pub fn acked_count(&self) -> usize {
        self.acked.len()
    }

    /// Paths whose creation was acknowledged.
    pub fn acked_paths(&self) -> &[String] {
        &self.acked
    }

    /// Creates that were refused for want of disk space.
    pub fn refused_paths(&self) -> &[String] {
        &self.refused
    }

    /// The replica it is connected to.
    pub fn node(&self) -> Option<ServerId> {
        self.node
    }

    /// Whether writes were acknowledged since [`Client::take_new_acks`] last ran.
    pub fn has_new_acks(&self) -> bool {
        !self.new_acks.is_empty()
    }

    /// Acknowledgements since the last call.
    pub fn take_new_acks(&mut self) -> Vec<String> {
        std::mem::take(&mut self.new_acks)
    }

    fn lost_connection(&mut self) {
        self.conn = None;
        self.node = None;
        self.attached = false;
        self.outstanding.clear();
    }

    /// The client's replica crashed: its connection is gone.
    pub fn node_crashed(&mut self, node: ServerId) {
        if self.node == Some(node) {
            self.lost_connection();
        }
    }

    /// A message from the client's replica.
    pub fn receive(&mut self, msg: ClientMessage) -> Result<(), Violation> {
        match msg {
            ClientMessage::Connected { session, password, zxid, .. } => {
                self.attached = true;
                self.session = Some((session, password));
                self.last_zxid = self.last_zxid.max(zxid);
            }
            ClientMessage::ConnectFailed { error, .. } | ClientMessage::Close { error, .. } => {
                if matches!(error, ErrorCode::SessionExpired | ErrorCode::Ok) {
                    self.session = None;
                }
                self.lost_connection();
            }
            ClientMessage::Reply { xid, zxid, reply, .. } => {
                let Some((expected, expect)) = self.outstanding.pop_front() else {
                    return Err(Violation::ReplyOrder { client: self.id, got: xid, expected: -1 });
                };
                if expected != xid {
                    return Err(Violation::ReplyOrder { client: self.id, got: xid, expected });
                }
                self.last_zxid = self.last_zxid.max(zxid);
                // A read's answer, or NoNode (also an answer of the tree's);
                // not a failure such as ConnectionLoss.
                let answered = reply.as_ref().map_or_else(|e| e.code == ErrorCode::NoNode, |_| true);
                if let (Expect::Present(_, fresh) | Expect::Read(fresh), true) = (&expect, answered) {
                    self.check_fresh(*fresh, zxid)?;
                }
                match (expect, reply) {
                    (Expect::Create(path), Ok(_)) => {
                        self.acked.push(path.clone());
                        self.new_acks.push(path);
                    }
                    (Expect::Create(path), Err(e)) if e.code == ErrorCode::ThrottledOp => self.refused.push(path),
                    (Expect::Present(path, _), Err(e)) if e.code == ErrorCode::NoNode => {
                        return Err(Violation::StaleRead { client: self.id, path });
                    }
                    (Expect::Close, Ok(_)) => self.session = None,
                    (Expect::Sync { floor }, Ok(_)) if zxid < floor => {
                        return Err(Violation::StaleSync { client: self.id, zxid, floor });
                    }
                    _ => {}
                }
            }
            ClientMessage::Event(_) => {}
        }
        Ok(())
    }

    /// Counts a read answered at `zxid`; a linearizable one behind its floor fails.
    fn check_fresh(&mut self, fresh: Freshness, zxid: Zxid) -> Result<(), Violation> {
        if fresh.linearizable {
            self.reads.linearizable += 1;
            if zxid < fresh.floor {
                return Err(Violation::StaleLinearizableRead { client: self.id, zxid, floor: fresh.floor });
            }
        } else {
            self.reads.plain += 1;
            self.reads.stale_plain += usize::from(zxid < fresh.floor);
        }
        Ok(())
    }

    /// Decides what to do this step, if anything. `shown` is the highest
    /// zxid any replica has shown any client so far.
    pub fn next_action(
        &mut self,
        rng: &mut StdRng,
        up: &[ServerId],
        next_conn: ConnId,
        healing: bool,
        shown: Zxid,
    ) -> Option<Action> {
        let Some(conn) = self.conn else {
            if up.is_empty() || !rng.random_bool(0.3) {
                return None;
            }
            let node = up[rng.random_range(0..up.len())];
            let (session_id, password) = match &self.session {
                Some((s, p)) => (s.0, p.clone()),
                None => (0, Bytes::new()),
            };
            let request =
                ConnectRequest { session_id, password, timeout_ms: 2000, last_zxid_seen: self.last_zxid.as_i64() };
            self.conn = Some(next_conn);
            self.node = Some(node);
            self.attached = false;
            return Some(Action::Connect { node, conn: next_conn, request });
        };
        let node = self.node?;
        if !self.attached || self.outstanding.len() >= 4 || !rng.random_bool(if healing { 0.2 } else { 0.5 }) {
            return None;
        }
        let (op, expect) = self.pick_op(rng, healing, shown);
        let linearizable = matches!(expect, Expect::Present(_, f) | Expect::Read(f) if f.linearizable);
        self.next_xid += 1;
        let xid = self.next_xid;
        self.outstanding.push_back((xid, expect));
        Some(Action::Request { node, conn, xid, op, linearizable })
    }

    fn pick_op(&mut self, rng: &mut StdRng, healing: bool, shown: Zxid) -> (Op, Expect) {
        self.counter += 1;
        let data = Bytes::from(format!("{}-{}", self.id, self.counter));
        let create = |path: String, mode| Op::Create {
            path,
            data: data.clone().into(),
            acl: Acl::open_unsafe(),
            mode,
            ttl_ms: -1,
        };
        let acked = |rng: &mut StdRng, acked: &[String]| -> Option<String> {
            (!acked.is_empty()).then(|| acked[rng.random_range(0..acked.len())].clone())
        };
        // Every other read is linearizable (decided without a draw, so the
        // schedules of existing seeds stay as they were).
        let fresh = Freshness { floor: shown, linearizable: self.linearizable && self.counter.is_multiple_of(2) };
        let roll = rng.random_range(0..100);
        match roll {
            0..=29 => {
                let path = format!("/c{}-{}", self.id, self.counter);
                (create(path.clone(), CreateMode::Persistent), Expect::Create(path))
            }
            30..=39 => (create(format!("/e{}-{}", self.id, self.counter), CreateMode::Ephemeral), Expect::Other),
            40..=44 => (create("/q".into(), CreateMode::Persistent), Expect::Other),
            45..=54 => (create("/q/s-".into(), CreateMode::PersistentSequential), Expect::Other),
            55..=64 => match acked(rng, &self.acked) {
                Some(path) => (Op::SetData { path, data: data.into(), version: -1 }, Expect::Other),
                None => (Op::GetChildren { path: "/".into(), watch: true, with_stat: false }, Expect::Read(fresh)),
            },
            65..=79 => match acked(rng, &self.acked) {
                Some(path) => {
                    (Op::Exists { path: path.clone(), watch: rng.random_bool(0.3) }, Expect::Present(path, fresh))
                }
                None => (Op::Sync { path: "/".into() }, Expect::Sync { floor: shown }),
            },
            80..=84 => (Op::Sync { path: "/".into() }, Expect::Sync { floor: shown }),
            85..=92 => {
                let path = format!("/m{}-{}", self.id, self.counter);
                let ops = vec![
                    create(path.clone(), CreateMode::Persistent),
                    // Null data, so logs, proposals and snapshots carry it too.
                    Op::SetData { path: path.clone(), data: Data::NULL, version: 0 },
                    Op::Check { path, version: 1 },
                ];
                (Op::Multi(ops), Expect::Other)
            }
            93..=95 if !healing => (Op::CloseSession, Expect::Close),
            _ => (Op::GetData { path: "/q".into(), watch: true }, Expect::Read(fresh)),
        }
    }
}
