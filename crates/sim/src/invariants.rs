//! The properties checked after every simulation step, named after the
//! invariants of ZooKeeper's Zab TLA+ specification
//! (`zookeeper-specifications/protocol-spec/doc.md`).
//!
//! The oracle keeps the one global history every replica must agree with:
//! each committed zxid with its transaction, in order, and the tree digest
//! after it. Replicas report what they apply; any disagreement is a failure.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use zabkeeper_core::ids::{Epoch, ServerId, Zxid};
use zabkeeper_core::members::Configuration;
use zabkeeper_core::txn::{Txn, TxnBody};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The schedule panicked (a replica's debug-build invariant check, or a bug).
    #[error("panicked: {0}")]
    Panicked(String),
    /// A replica's own invariant (`Replica::validate`) does not hold.
    #[error("replica {node}: {broken}")]
    Broken {
        /// The replica.
        node: ServerId,
        /// What broke.
        broken: zabkeeper_core::zab::Broken,
    },
    /// Leadership: two replicas led the same epoch.
    #[error("Leadership: epoch {epoch} established by both {first} and {second}")]
    TwoLeaders {
        /// The epoch.
        epoch: Epoch,
        /// The first leader seen.
        first: ServerId,
        /// The second.
        second: ServerId,
    },
    /// A member that does not vote in its own configuration (an observer,
    /// or one not or no longer a voter) became leader.
    #[error("replica {node}, which does not vote, leads epoch {epoch}")]
    ObserverLeads {
        /// The observer.
        node: ServerId,
        /// The epoch.
        epoch: Epoch,
    },
    /// A transaction committed after a loaded tree is older than the loaded
    /// history (the ensemble did not move to an epoch past it).
    #[error("{zxid:?} committed after the load at {load:?}, whose history reached epoch {epoch}")]
    BehindLoad {
        /// The transaction.
        zxid: Zxid,
        /// The load's zxid.
        load: Zxid,
        /// The loaded history's epoch.
        epoch: Epoch,
    },
    /// Agreement: one zxid, two transactions.
    #[error("Agreement: replica {node} applied a different transaction at {zxid:?}")]
    Disagreement {
        /// The replica.
        node: ServerId,
        /// The zxid.
        zxid: Zxid,
    },
    /// PrefixConsistency / TotalOrder: a replica skipped or reordered committed transactions.
    #[error("PrefixConsistency: replica {node} applied {zxid:?} after {previous:?}, expected {expected:?}")]
    OutOfOrder {
        /// The replica.
        node: ServerId,
        /// What it applied.
        zxid: Zxid,
        /// What it applied before.
        previous: Zxid,
        /// What the history says comes next.
        expected: Option<Zxid>,
    },
    /// Replicas at the same point hold different trees.
    #[error("state agreement: replica {node} at {zxid:?} has digest {found:x}, history says {expected:x}")]
    Diverged {
        /// The replica.
        node: ServerId,
        /// The point.
        zxid: Zxid,
        /// Its digest.
        found: u64,
        /// The digest others had there.
        expected: u64,
    },
    /// A snapshot installed or recovered at a point the history does not know.
    #[error("replica {node} resumed from unknown point {zxid:?}")]
    UnknownSnapshot {
        /// The replica.
        node: ServerId,
        /// The point.
        zxid: Zxid,
    },
    /// Durability: an acknowledged write is not durable on a quorum.
    #[error("Durability: acknowledged write {what} at {zxid:?} is durable on {durable} replicas, quorum is {quorum}")]
    NotDurable {
        /// The write.
        what: String,
        /// Its zxid.
        zxid: Zxid,
        /// Replicas holding it durably.
        durable: usize,
        /// Quorum size.
        quorum: usize,
    },
    /// An acknowledged write is in no committed transaction.
    #[error("Integrity: acknowledged write {0} was never committed")]
    AckedNotCommitted(String),
    /// A session saw its replies out of order.
    #[error("FIFO client order: client {client} got a reply to xid {got} while waiting for {expected}")]
    ReplyOrder {
        /// The client.
        client: usize,
        /// The xid answered.
        got: i32,
        /// The xid expected first.
        expected: i32,
    },
    /// A session's writes were committed in another order than it sent them.
    #[error("FIFO client order: session {session:x} had write #{seq} committed at {zxid:?}, after its later write #{previous}")]
    SessionOrder {
        /// The session.
        session: i64,
        /// Where the late write was committed.
        zxid: Zxid,
        /// The late write's sequence number in its client.
        seq: u64,
        /// The later write committed before it.
        previous: u64,
    },
    /// A session read behind its own acknowledged write.
    #[error("sequential consistency: client {client} does not see its own acknowledged write {path}")]
    StaleRead {
        /// The client.
        client: usize,
        /// The path.
        path: String,
    },
    /// A sync answered with a tree behind a zxid some replica had already
    /// shown a client before the sync was sent.
    #[error("linearizable sync: client {client}'s sync was answered at {zxid}, but {floor} was applied and shown before it was sent")]
    StaleSync {
        /// The client.
        client: usize,
        /// The zxid the sync was answered at.
        zxid: Zxid,
        /// The highest zxid any client had been shown when the sync was sent.
        floor: Zxid,
    },
    /// A linearizable read answered with a tree behind a zxid some replica
    /// had already shown a client before the read was sent.
    #[error("linearizable read: client {client}'s read was answered at {zxid}, but {floor} was applied and shown before it was sent")]
    StaleLinearizableRead {
        /// The client.
        client: usize,
        /// The zxid the read was answered at.
        zxid: Zxid,
        /// The highest zxid any client had been shown when the read was sent.
        floor: Zxid,
    },
    /// The ensemble did not converge after healing.
    #[error("liveness: {0}")]
    NoProgress(String),
}

#[derive(Default, Clone, Copy)]
struct NodeCursor {
    /// Index in the history of the next transaction this replica must apply.
    next: usize,
    last: Zxid,
}

/// The global history and per-replica cursors.
#[derive(Default)]
pub struct Oracle {
    order: Vec<Zxid>,
    txns: HashMap<Zxid, (usize, Arc<Txn>)>,
    digests: HashMap<Zxid, u64>,
    creates: HashMap<String, Zxid>,
    cursors: BTreeMap<ServerId, NodeCursor>,
    leaders: BTreeMap<Epoch, ServerId>,
    /// Per session, the sequence number of its last committed write.
    session_writes: HashMap<i64, u64>,
    /// The configuration of the configuration files.
    initial: Configuration,
    /// The configuration after each committed reconfiguration step.
    configurations: Vec<(Zxid, Configuration)>,
    /// The newest committed load that needed a new epoch, and that epoch.
    load: Option<(Zxid, Epoch)>,
}

/// The client's sequence number a write carries in its data (`<client>-<n>`,
/// see `workload`), for data-carrying writes at the top level.
fn write_sequence(body: &TxnBody) -> Option<u64> {
    let data = match body {
        TxnBody::Create { data, .. } | TxnBody::SetData { data, .. } => data,
        _ => return None,
    };
    let text = std::str::from_utf8(data).ok()?;
    text.rsplit_once('-')?.1.parse().ok()
}

impl Oracle {
    /// The configuration every peer's file gives.
    pub fn set_initial(&mut self, initial: Configuration) {
        self.initial = initial;
    }

    /// The configuration in force once everything up to `zxid` committed.
    pub fn configuration_at(&self, zxid: Zxid) -> &Configuration {
        let newest = self.configurations.iter().rev().find(|(z, _)| *z <= zxid);
        newest.map_or(&self.initial, |(_, c)| c)
    }

    /// The newest committed configuration.
    pub fn configuration(&self) -> &Configuration {
        self.configurations.last().map_or(&self.initial, |(_, c)| c)
    }

    /// Number of committed transactions seen.
    pub fn committed(&self) -> usize {
        self.order.len()
    }

    /// Number of epochs with an established leader.
    pub fn epochs(&self) -> usize {
        self.leaders.len()
    }

    /// The zxid of the committed transaction that created `path`.
    pub fn created_at(&self, path: &str) -> Option<Zxid> {
        self.creates.get(path).copied()
    }

    /// Leadership: records that `node` serves as established leader of `epoch`.
    pub fn leader(&mut self, epoch: Epoch, node: ServerId) -> Result<(), Violation> {
        match self.leaders.get(&epoch) {
            Some(&first) if first != node => Err(Violation::TwoLeaders { epoch, first, second: node }),
            Some(_) => Ok(()),
            None => {
                self.leaders.insert(epoch, node);
                Ok(())
            }
        }
    }

    /// A replica (re)starts from, or installs, a snapshot at `zxid`.
    pub fn resume(&mut self, node: ServerId, zxid: Zxid) -> Result<(), Violation> {
        let next = if zxid == Zxid::ZERO {
            0
        } else {
            match self.txns.get(&zxid) {
                Some((index, _)) => index + 1,
                None => return Err(Violation::UnknownSnapshot { node, zxid }),
            }
        };
        self.cursors.insert(node, NodeCursor { next, last: zxid });
        Ok(())
    }

    /// PrefixConsistency and Agreement: a replica applied `txn` at `zxid`.
    pub fn applied(&mut self, node: ServerId, zxid: Zxid, txn: &Arc<Txn>) -> Result<(), Violation> {
        let cursor = self.cursors.get(&node).copied().unwrap_or_default();
        match self.txns.get(&zxid) {
            Some((index, known)) => {
                if **known != **txn {
                    return Err(Violation::Disagreement { node, zxid });
                }
                if *index != cursor.next {
                    return Err(Violation::OutOfOrder {
                        node,
                        zxid,
                        previous: cursor.last,
                        expected: self.order.get(cursor.next).copied(),
                    });
                }
            }
            None => {
                if cursor.next != self.order.len() || self.order.last().is_some_and(|last| *last >= zxid) {
                    return Err(Violation::OutOfOrder {
                        node,
                        zxid,
                        previous: cursor.last,
                        expected: self.order.get(cursor.next).copied(),
                    });
                }
                self.check_session_order(zxid, txn)?;
                self.check_after_load(zxid, &txn.body)?;
                self.order.push(zxid);
                self.txns.insert(zxid, (self.order.len() - 1, txn.clone()));
                self.index_creates(zxid, &txn.body);
                if let TxnBody::Reconfig(change) = &txn.body {
                    self.configurations.push((zxid, change.configuration(zxid)));
                }
            }
        }
        let index = self.txns[&zxid].0;
        self.cursors.insert(node, NodeCursor { next: index + 1, last: zxid });
        Ok(())
    }

    /// Past a committed load, every transaction is in a later epoch than
    /// the loaded history's (a load below the epoch in force needs none).
    fn check_after_load(&mut self, zxid: Zxid, body: &TxnBody) -> Result<(), Violation> {
        if let Some(epoch) = body.loaded_epoch() {
            if epoch >= zxid.epoch() {
                self.load = Some((zxid, epoch));
            }
            return Ok(());
        }
        match self.load {
            Some((load, epoch)) if zxid.epoch() <= epoch => Err(Violation::BehindLoad { zxid, load, epoch }),
            _ => Ok(()),
        }
    }

    /// Whether a load that needed a new epoch was committed.
    pub fn loaded(&self) -> bool {
        self.load.is_some()
    }

    /// FIFO client order: each session's writes commit in the order it sent them.
    fn check_session_order(&mut self, zxid: Zxid, txn: &Txn) -> Result<(), Violation> {
        let Some(seq) = write_sequence(&txn.body) else { return Ok(()) };
        let last = self.session_writes.entry(txn.session.0).or_insert(0);
        if seq <= *last {
            return Err(Violation::SessionOrder { session: txn.session.0, zxid, seq, previous: *last });
        }
        *last = seq;
        Ok(())
    }

    fn index_creates(&mut self, zxid: Zxid, body: &TxnBody) {
        match body {
            TxnBody::Create { path, .. } => {
                self.creates.insert(path.clone(), zxid);
            }
            TxnBody::Multi(ops) => {
                for op in ops {
                    self.index_creates(zxid, op);
                }
            }
            _ => {}
        }
    }

    /// State agreement: a replica at `zxid` holds a tree with `digest`.
    pub fn digest(&mut self, node: ServerId, zxid: Zxid, digest: u64) -> Result<(), Violation> {
        match self.digests.get(&zxid) {
            Some(&expected) if expected != digest => Err(Violation::Diverged { node, zxid, found: digest, expected }),
            Some(_) => Ok(()),
            None => {
                self.digests.insert(zxid, digest);
                Ok(())
            }
        }
    }
}
