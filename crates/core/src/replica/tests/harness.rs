//! The harness the replica stories run on: whole replicas over a FIFO
//! network, storage that is durable at once (or held back, as a slow disk),
//! and scripted clients.

use super::super::*;
use crate::acl::Acl;
use crate::acl::Id;
use crate::ids::Zxid;
use crate::op::{Op, OpResult, Reply};
use crate::tree::stat::CreateMode;
use crate::zab::{Io, StorageOp};
use bytes::Bytes;
use std::collections::VecDeque;
use std::collections::{BTreeMap, BTreeSet};

pub(super) struct Node {
    pub(super) replica: Replica,
    pub(super) durable: Recovered,
    pub(super) up: bool,
    /// Storage operations held back (a slow disk) until `release`.
    pub(super) hold: bool,
    pub(super) held: Vec<(u64, StorageOp)>,
    /// Every snapshot asked for: (its zxid, the durable log's end at that moment).
    pub(super) snapshots: Vec<(Zxid, Zxid)>,
}

pub(super) struct Ensemble {
    pub(super) nodes: BTreeMap<ServerId, Node>,
    pub(super) queue: VecDeque<(ServerId, ServerId, Message)>,
    /// Replicas whose incoming peer messages are held back (they lag), and those messages.
    pub(super) held: BTreeSet<ServerId>,
    pub(super) held_msgs: VecDeque<(ServerId, ServerId, Message)>,
    /// Links (from, to) whose messages are held back, as a slow connection would.
    pub(super) held_links: BTreeSet<(ServerId, ServerId)>,
    /// Replicas paused as by SIGSTOP: no ticks, and their messages held.
    pub(super) paused: BTreeSet<ServerId>,
    pub(super) inbox: BTreeMap<ConnId, Vec<ClientMessage>>,
    /// The audit records each member emitted, in order.
    pub(super) audits: Vec<(ServerId, crate::replica::audit::AuditRecord)>,
    pub(super) conn_node: BTreeMap<ConnId, ServerId>,
    pub(super) next_conn: ConnId,
    pub(super) now_ms: i64,
    pub(super) xid: i32,
}

pub(super) fn config(id: ServerId, n: u64) -> Config {
    let mut c = Config::new(id, (1..=n).collect(), 100);
    c.snapshot_every = 0;
    c
}

impl Ensemble {
    pub(super) fn new(n: u64) -> Ensemble {
        Ensemble::new_with(n, |_| {})
    }

    pub(super) fn new_with(n: u64, adjust: impl Fn(&mut Config)) -> Ensemble {
        let mut nodes = BTreeMap::new();
        for id in 1..=n {
            let mut config = config(id, n);
            adjust(&mut config);
            let replica = Replica::new(config, Recovered::fresh(), 1_000_000);
            let node = Node {
                replica,
                durable: Recovered::fresh(),
                up: true,
                hold: false,
                held: Vec::new(),
                snapshots: Vec::new(),
            };
            nodes.insert(id, node);
        }
        let mut e = Ensemble {
            nodes,
            queue: VecDeque::new(),
            held: BTreeSet::new(),
            held_msgs: VecDeque::new(),
            held_links: BTreeSet::new(),
            paused: BTreeSet::new(),
            inbox: BTreeMap::new(),
            audits: Vec::new(),
            conn_node: BTreeMap::new(),
            next_conn: 1,
            now_ms: 1_000_000,
            xid: 0,
        };
        e.settle(5);
        e
    }

    pub(super) fn drain(&mut self, id: ServerId) {
        loop {
            let mut outputs = self.nodes.get_mut(&id).unwrap().replica.take_outputs();
            if outputs.is_empty() {
                return;
            }
            let mut max_seq = 0;
            // Drained and handed back, as the server does.
            for out in outputs.drain(..) {
                match out {
                    Output::Zab(Io::Send { to, msg }) => self.queue.push_back((id, to, msg)),
                    Output::Zab(io @ Io::SendStored { .. }) => {
                        let (to, msgs) = zab::stored_proposals(&self.nodes[&id].durable.log, &io);
                        for msg in msgs {
                            self.queue.push_back((id, to, msg));
                        }
                    }
                    Output::Zab(Io::Persist { seq, op }) => {
                        let node = self.nodes.get_mut(&id).unwrap();
                        if node.hold {
                            node.held.push((seq, op));
                            continue;
                        }
                        max_seq = seq;
                        apply_durably(&mut node.durable, op);
                    }
                    Output::Client { conn, msg } => self.inbox.entry(conn).or_default().push(msg),
                    Output::TakeSnapshot { state } => {
                        let node = self.nodes.get_mut(&id).unwrap();
                        let durable_end = node.durable.log.last().map_or(Zxid::ZERO, |e| e.zxid);
                        node.snapshots.push((state.last_zxid(), durable_end));
                    }
                    Output::Status(_) => {}
                    Output::Audit(record) => self.audits.push((id, record)),
                }
            }
            self.nodes.get_mut(&id).unwrap().replica.recycle_outputs(outputs);
            if max_seq > 0 {
                self.nodes.get_mut(&id).unwrap().replica.handle(Input::Persisted { seq: max_seq });
            }
        }
    }

    /// The held storage operations become durable.
    pub(super) fn release_disk(&mut self, id: ServerId) {
        let node = self.nodes.get_mut(&id).unwrap();
        node.hold = false;
        let held = std::mem::take(&mut node.held);
        let Some(max_seq) = held.iter().map(|(seq, _)| *seq).max() else { return };
        for (_, op) in held {
            apply_durably(&mut node.durable, op);
        }
        node.replica.handle(Input::Persisted { seq: max_seq });
        self.drain(id);
        self.deliver();
    }

    pub(super) fn deliver(&mut self) {
        let mut budget = 200_000;
        while let Some((from, to, msg)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "message storm");
            if !self.nodes[&from].up || !self.nodes[&to].up {
                continue;
            }
            if self.held.contains(&to) || self.held_links.contains(&(from, to)) {
                self.held_msgs.push_back((from, to, msg));
                continue;
            }
            self.nodes.get_mut(&to).unwrap().replica.handle(Input::Peer { from, msg });
            self.drain(to);
        }
    }

    pub(super) fn tick(&mut self) {
        self.now_ms += 100;
        let ids: Vec<ServerId> = self.nodes.keys().copied().collect();
        for id in ids {
            if self.nodes[&id].up && !self.paused.contains(&id) {
                let now_ms = self.now_ms;
                self.nodes.get_mut(&id).unwrap().replica.handle(Input::Tick { now_ms });
                self.drain(id);
            }
        }
        self.deliver();
    }

    pub(super) fn settle(&mut self, ticks: usize) {
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.drain(id);
        }
        self.deliver();
        for _ in 0..ticks {
            self.tick();
        }
    }

    pub(super) fn leader(&self) -> ServerId {
        *self
            .nodes
            .iter()
            .find(|(_, n)| n.up && n.replica.status().role == Role::Leading && n.replica.status().serving)
            .expect("a serving leader")
            .0
    }

    pub(super) fn connect_with(&mut self, node: ServerId, request: ConnectRequest) -> ConnId {
        let conn = self.next_conn;
        self.next_conn += 1;
        self.conn_node.insert(conn, node);
        let input = Input::Connect {
            conn,
            request,
            new_password: Bytes::from_static(&[9; 16]),
            identities: vec![Id::new("ip", "127.0.0.1")],
        };
        self.nodes.get_mut(&node).unwrap().replica.handle(input);
        self.drain(node);
        self.deliver();
        conn
    }

    pub(super) fn connect(&mut self, node: ServerId) -> (ConnId, SessionId, Bytes) {
        let request = ConnectRequest { session_id: 0, password: Bytes::new(), timeout_ms: 1000, last_zxid_seen: 0 };
        let conn = self.connect_with(node, request);
        match self.take(conn).first() {
            Some(ClientMessage::Connected { session, password, .. }) => (conn, *session, password.clone()),
            other => panic!("no session: {other:?}"),
        }
    }

    pub(super) fn take(&mut self, conn: ConnId) -> Vec<ClientMessage> {
        self.inbox.remove(&conn).unwrap_or_default()
    }

    pub(super) fn send(&mut self, conn: ConnId, op: Op) -> i32 {
        self.send_with(conn, op, false)
    }

    /// Sends a request, `linearizable` if a read must be.
    pub(super) fn send_with(&mut self, conn: ConnId, op: Op, linearizable: bool) -> i32 {
        self.xid += 1;
        let node = self.conn_node[&conn];
        let xid = self.xid;
        let input = Input::Request { conn, xid, echo: Echo::default(), op, linearizable };
        self.nodes.get_mut(&node).unwrap().replica.handle(input);
        self.drain(node);
        xid
    }

    /// Sends linearizable reads to one member in one turn (handled before its
    /// outputs are taken, as a host's turn does); their xids.
    pub(super) fn send_together(&mut self, reads: Vec<(ConnId, Op)>) -> Vec<i32> {
        let mut xids = Vec::new();
        let mut node = None;
        for (conn, op) in reads {
            self.xid += 1;
            let at = self.conn_node[&conn];
            assert!(node.is_none_or(|n| n == at), "one turn is one member's");
            node = Some(at);
            let input = Input::Request { conn, xid: self.xid, echo: Echo::default(), op, linearizable: true };
            self.nodes.get_mut(&at).unwrap().replica.handle(input);
            xids.push(self.xid);
        }
        if let Some(at) = node {
            self.drain(at);
        }
        xids
    }

    /// Sends and waits for the reply (other messages stay in the inbox, in order).
    pub(super) fn call(&mut self, conn: ConnId, op: Op) -> Reply {
        let xid = self.send(conn, op);
        for _ in 0..20 {
            self.deliver();
            let msgs = self.inbox.entry(conn).or_default();
            if let Some(i) = msgs.iter().position(|m| matches!(m, ClientMessage::Reply { xid: x, .. } if *x == xid)) {
                let ClientMessage::Reply { reply, .. } = msgs.remove(i) else { unreachable!() };
                return reply;
            }
            self.tick();
        }
        panic!("no reply to xid {xid}");
    }

    /// Lets `ticks` pass while `conn` keeps its session alive with pings.
    pub(super) fn idle(&mut self, conn: ConnId, ticks: usize) {
        for _ in 0..ticks {
            self.send(conn, Op::Ping);
            self.tick();
        }
        self.take(conn);
    }

    /// Holds back every peer message to `id` from now on: it lags behind.
    pub(super) fn hold(&mut self, id: ServerId) {
        self.held.insert(id);
    }

    /// Delivers what was held back for `id`, in order, and lets it catch up.
    pub(super) fn release(&mut self, id: ServerId) {
        self.held.remove(&id);
        let (mine, others): (Vec<_>, Vec<_>) = self.held_msgs.drain(..).partition(|(_, to, _)| *to == id);
        self.held_msgs.extend(others);
        for m in mine.into_iter().rev() {
            self.queue.push_front(m);
        }
        self.deliver();
    }

    /// Pauses `id` as SIGSTOP would: it gets no ticks and no messages.
    pub(super) fn pause(&mut self, id: ServerId) {
        self.paused.insert(id);
        self.hold(id);
    }

    /// Resumes a paused replica. Its held messages are not delivered yet,
    /// so a caller can act on it first, as a client whose request was
    /// queued in the socket would.
    pub(super) fn resume(&mut self, id: ServerId) {
        self.paused.remove(&id);
    }

    /// Pauses the leader (SIGSTOP) with a client connected to it, lets the
    /// others elect a leader and create `path` through it, and resumes the
    /// old one (its held messages not yet delivered). Returns the old
    /// leader and its client's connection.
    pub(super) fn depose_paused_leader(&mut self, path: &str) -> (ServerId, ConnId) {
        let old = self.leader();
        let (f1, f2) = followers_of(old);
        let (on_old, _, _) = self.connect(old);
        self.pause(old);
        self.settle(30);
        let new = [f1, f2]
            .into_iter()
            .find(|id| self.nodes[id].replica.status().role == Role::Leading && self.nodes[id].replica.status().serving)
            .expect("the others elect a leader");
        let (on_new, _, _) = self.connect(new);
        self.call(on_new, create(path, CreateMode::Persistent)).unwrap();
        self.resume(old);
        (old, on_old)
    }

    /// Holds back every message from `from` to `to` from now on.
    pub(super) fn hold_link(&mut self, from: ServerId, to: ServerId) {
        self.held_links.insert((from, to));
    }

    /// Delivers what was held back on the link `from` → `to`, in order.
    pub(super) fn release_link(&mut self, from: ServerId, to: ServerId) {
        self.held_links.remove(&(from, to));
        let (link, others): (Vec<_>, Vec<_>) = self.held_msgs.drain(..).partition(|(f, t, _)| (*f, *t) == (from, to));
        self.held_msgs.extend(others);
        for m in link.into_iter().rev() {
            self.queue.push_front(m);
        }
        self.deliver();
    }

    pub(super) fn crash(&mut self, id: ServerId) {
        self.nodes.get_mut(&id).unwrap().up = false;
        for p in self.nodes.keys().copied().collect::<Vec<_>>() {
            if p != id && self.nodes[&p].up {
                for link in [crate::zab::Link::ToLeader, crate::zab::Link::FromFollower] {
                    self.nodes.get_mut(&p).unwrap().replica.handle(Input::PeerDisconnected { peer: id, link });
                }
                self.drain(p);
            }
        }
        let conns: Vec<ConnId> = self.conn_node.iter().filter(|(_, n)| **n == id).map(|(c, _)| *c).collect();
        for c in conns {
            self.conn_node.remove(&c);
        }
    }
}

pub(super) fn apply_durably(d: &mut Recovered, op: StorageOp) {
    match op {
        StorageOp::Append(entries) => d.log.extend(entries),
        StorageOp::TruncateAfter(z) => d.log.retain(|e| e.zxid <= z),
        StorageOp::SetAcceptedEpoch(e) => d.accepted_epoch = e,
        StorageOp::SetCurrentEpoch(e) => d.current_epoch = e,
        StorageOp::InstallSnapshot { chunks, .. } => {
            d.log.clear();
            d.snapshot = Some(snapshot::from_chunks(chunks.iter().map(|c| c.as_ref())).unwrap());
        }
    }
}

/// The two followers of a 3-member ensemble led by `leader`.
pub(super) fn followers_of(leader: ServerId) -> (ServerId, ServerId) {
    match leader {
        1 => (2, 3),
        2 => (1, 3),
        _ => (1, 2),
    }
}

pub(super) fn create(path: &str, mode: CreateMode) -> Op {
    Op::Create { path: path.into(), data: Bytes::from_static(b"v").into(), acl: Acl::open_unsafe(), mode, ttl_ms: -1 }
}

pub(super) fn get(path: &str, watch: bool) -> Op {
    Op::GetData { path: path.into(), watch }
}

impl Ensemble {
    /// Restarts a crashed replica from what its storage holds, as a new
    /// process would: its request tags start again from the first. Messages
    /// to and from its previous life are dropped, as the peer transport
    /// guarantees (a follower's older stream delivers nothing once its newer
    /// one opens). It takes the plain `config`, not `new_with`'s adjustments.
    pub(super) fn restart(&mut self, id: ServerId) {
        let n = self.nodes.len() as u64;
        let now_ms = self.now_ms;
        // The old process's connections are gone, and whatever they carried.
        self.queue.retain(|(from, to, _)| *from != id && *to != id);
        self.held_msgs.retain(|(from, to, _)| *from != id && *to != id);
        let node = self.nodes.get_mut(&id).unwrap();
        node.hold = false;
        node.held.clear();
        node.replica = Replica::new(config(id, n), node.durable.clone(), now_ms);
        node.up = true;
        self.drain(id);
        self.deliver();
    }
}

/// The reply a create of `path` gets, from the node `member` holds.
pub(super) fn created(e: &Ensemble, member: ServerId, path: &str) -> OpResult {
    let stat = e.nodes[&member].replica.tree().state().node(path).expect("the node was created").stat();
    OpResult::Created { path: path.into(), stat }
}
