//! Applying what Zab commits: the tree changes, watches fire, and the
//! replica holding the request's connection answers it.

use super::{ClientMessage, ConnId, Output, Replica};
use crate::error::{ErrorCode, ZkError};
use crate::ids::{SessionId, Zxid};
use crate::members::Change;
use crate::op::{MultiItem, Op, OpResult, Reply};
use crate::tree::{snapshot, TxnResult};
use crate::txn::{Entry, TxnBody};
use crate::zab::Role;
use bytes::Bytes;
use std::collections::BTreeSet;

impl Replica {
    pub(super) fn apply_entries(&mut self, entries: Vec<Entry>) {
        let mut touched: BTreeSet<ConnId> = BTreeSet::new();
        for entry in entries {
            self.apply_entry(&entry, &mut touched);
        }
        touched.extend(self.conns.waiting_apply());
        for conn in touched {
            self.advance(conn);
        }
        // Connects that waited for the tree to catch up with the leader (each
        // is put back if it must still wait).
        for conn in self.conns.take_revalidating() {
            self.try_connect(conn);
        }
        if self.snapshots.due() {
            self.take_snapshot();
        }
    }

    fn apply_entry(&mut self, entry: &Entry, touched: &mut BTreeSet<ConnId>) {
        let (zxid, txn) = (entry.zxid, &entry.txn);
        let before = self.tree.last_zxid();
        assert!(zxid > before, "applying {zxid} after {before}: zxids only grow");
        assert!(
            zxid <= self.zab.last_committed(),
            "applying {zxid} past the commit point {}",
            self.zab.last_committed()
        );
        let applied = self.tree.apply(zxid, txn);
        if self.config.record_applied {
            self.applied_log.push(super::AppliedRecord::Entry(zxid, entry.txn.clone()));
        }
        self.counters.applied += 1;
        self.snapshots.applied(zxid);
        let (leading, serving) = (self.status.role == Role::Leading, self.status.serving);
        self.prep.applied(zxid, txn, leading, serving, self.config.tick_ms, self.clock.ticks);
        for (session, event) in applied.events {
            if let Some(conn) = self.conns.of_session(session) {
                self.emit(conn, ClientMessage::Event(event));
            }
        }
        if let TxnBody::Load { .. } = &txn.body {
            self.loaded(zxid, &applied.result);
            return;
        }
        if let TxnBody::CreateSession { timeout_ms, password } = &txn.body {
            self.on_session_created(txn.session, txn.cxid, password, *timeout_ms);
            return;
        }
        let (session, cxid) = match &txn.body {
            TxnBody::Reconfig(Change::Enter { .. }) => {
                if txn.session != SessionId::NONE {
                    self.reconfig_waiting = Some((txn.session, txn.cxid));
                }
                return;
            }
            TxnBody::Reconfig(Change::Complete { .. }) => match self.reconfig_waiting.take() {
                Some(waiting) => waiting,
                None => return,
            },
            _ => (txn.session, txn.cxid),
        };
        let Some(conn) = self.conns.of_session(session) else { return };
        let Some(c) = self.conns.get_mut(conn) else { return };
        let mut audited = Vec::new();
        let audit = self.config.audit;
        let identities = &c.identities;
        let completed = c.queue.complete(cxid, |op| {
            if audit {
                audited = super::audit::records(zxid, session, identities, op, &applied.result);
            }
            shape_reply(op, applied.result)
        });
        self.outputs.extend(audited.into_iter().map(Output::Audit));
        if completed {
            if matches!(txn.body, TxnBody::Error(ErrorCode::SessionMoved)) {
                // The leader holds the session as attached to another member
                // (a connect given up on was revalidated there late), so
                // every later write here would be refused too. Answer (the
                // write was not applied), then close, as ZooKeeper closes
                // (ZOOKEEPER-710, without the answer): the client's
                // reconnect moves the session to the member it reaches.
                self.send_ready(conn);
                self.close_conn(conn, ErrorCode::SessionMoved, "the leader holds the session as attached elsewhere");
                return;
            }
            touched.insert(conn);
        } else if matches!(txn.body, TxnBody::CloseSession { .. }) {
            // Expired by the leader: the client learns on its next connect.
            self.close_conn(conn, ErrorCode::SessionExpired, "session expired");
        }
    }

    /// Follower: the leader's snapshot replaces the tree (SNAP sync).
    pub(super) fn install_snapshot(&mut self, zxid: Zxid, chunks: &[Bytes]) {
        match snapshot::from_chunks(chunks.iter().map(|c| c.as_ref())) {
            Ok(state) if state.last_zxid() == zxid => {
                tracing::info!(id = self.me(), zxid = %zxid, nodes = state.node_count(), "installed leader snapshot");
                self.tree.replace_state(state);
                self.snapshots.installed(zxid);
                self.answer_reconfig_in_snapshot();
                if self.config.record_applied {
                    self.applied_log.push(super::AppliedRecord::Snapshot(zxid));
                }
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
}

impl Replica {
    /// A snapshot that holds the completion of a client's reconfig (a SNAP
    /// sync past it) answers it, as applying the completion would have.
    fn answer_reconfig_in_snapshot(&mut self) {
        let Some((session, cxid)) = self.reconfig_waiting else { return };
        if self.tree.state().configuration().is_none_or(|c| c.is_joint()) {
            return;
        }
        self.reconfig_waiting = None;
        let result = match self.tree.state().node(crate::tree::CONFIG_PATH) {
            Some(node) => TxnResult::Reconfigured { data: node.data_value(), stat: node.stat() },
            None => TxnResult::Error(ErrorCode::NoNode),
        };
        let Some(conn) = self.conns.of_session(session) else { return };
        let Some(c) = self.conns.get_mut(conn) else { return };
        if c.queue.complete(cxid, |op| shape_reply(op, result)) {
            self.advance(conn);
        }
    }
}

/// Shapes a transaction's outcome into the reply to the request that caused it.
fn shape_reply(op: &Op, result: TxnResult) -> Reply {
    let path = op.path().unwrap_or("").to_string();
    match result {
        // The only write the leader throttles is one it has no disk space for.
        TxnResult::Error(ErrorCode::ThrottledOp) => Err(ZkError::with_reason(
            ErrorCode::ThrottledOp,
            path,
            "the leader's data directory is below its free-space reserve (disk_reserve_bytes); \
             writes that grow the state are refused until space returns, deletes still go through",
        )),
        TxnResult::Error(code) => Err(ZkError::new(code, path)),
        TxnResult::Created { path, stat } => Ok(OpResult::Created { path, stat }),
        TxnResult::DataSet(stat) | TxnResult::AclSet(stat) => Ok(OpResult::Stat(stat)),
        TxnResult::Reconfigured { data, stat } => Ok(OpResult::Data { data, stat }),
        TxnResult::Deleted
        | TxnResult::Checked
        | TxnResult::SessionCreated
        | TxnResult::SessionClosed
        | TxnResult::Loaded { .. } => Ok(OpResult::Empty),
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
