//! ZooKeeper's recovery, replayed: a snapshot's tree and sessions, then the
//! logged transactions after its zxid applied with `DataTree.processTxn`'s
//! rules, then the cleanup `ZooKeeperServer.loadData` does (ephemerals of
//! sessions that no longer exist are deleted). The result is what a
//! ZooKeeper server restarted on the same files would serve, turned into
//! our [`TreeState`].
//!
//! ZooKeeper's snapshots are fuzzy (written while transactions apply), so a
//! replayed transaction can find its effect already there: its rules
//! tolerate that (a create of an existing node, a delete of a missing one
//! are skipped, with the parent's cversion and pzxid repaired), and these
//! are kept exactly here, quirks included, rather than our tree's rules.

use super::snapshot::{Snapshot, OPEN_ACL_INDEX};
use super::txnlog::{op, LogEntry, Owner, Txn, TxnHeader};
use super::{session_password, ZkFileError};
use crate::acl::Acl;
use crate::data::Data;
use crate::ids::{SessionId, Zxid};
use crate::tree::stat::{EphemeralType, StatPersisted, CONTAINER_EPHEMERAL_OWNER, MAX_TTL_MS};
use crate::tree::SharedAcl;
use crate::tree::{SessionRecord, TreeState, QUOTA_PATH};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A node as ZooKeeper's `DataNode` holds it.
#[derive(Clone, Debug)]
struct Node {
    data: Option<Bytes>,
    acl: Arc<[Acl]>,
    stat: StatPersisted,
}

/// ZooKeeper's `DataTree` and session map, during recovery. Paths are
/// ZooKeeper's: the root is `""`.
#[derive(Debug, Default)]
pub struct Recovery {
    nodes: BTreeMap<String, Node>,
    /// `DataTree.ephemerals`: owner to paths.
    ephemerals: BTreeMap<i64, BTreeSet<String>>,
    sessions: BTreeMap<i64, i32>,
    last_zxid: i64,
    /// Counts of what was done, for the report.
    pub stats: RecoveryStats,
}

/// What recovery did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Nodes loaded from the snapshot.
    pub snapshot_nodes: usize,
    /// Transactions replayed after it.
    pub replayed: usize,
    /// Log entries skipped as already in the snapshot.
    pub skipped: usize,
    /// Ephemerals of vanished sessions deleted, as ZooKeeper does on load.
    pub dead_ephemerals: usize,
}

/// The parent's path of a ZooKeeper path (`""` for children of the root).
fn parent_of(path: &str) -> Option<&str> {
    path.rfind('/').map(|slash| &path[..slash])
}

impl Recovery {
    /// Loads `snapshot` as ZooKeeper's `FileSnap` does; `file` names it in
    /// errors, `zxid` is its file name's zxid (where replay resumes).
    pub fn from_snapshot(file: &str, snapshot: &Snapshot, zxid: i64) -> Result<Recovery, ZkFileError> {
        let mut acls: BTreeMap<i64, Arc<[Acl]>> =
            snapshot.acls.iter().map(|(index, list)| (*index, Arc::from(list.as_slice()))).collect();
        acls.entry(OPEN_ACL_INDEX).or_insert_with(|| Arc::from(Acl::open_unsafe()));
        let mut recovery = Recovery { last_zxid: zxid, ..Recovery::default() };
        recovery.sessions = snapshot.sessions.iter().copied().collect();
        for node in &snapshot.nodes {
            let at = node.offset as usize;
            let Some(acl) = acls.get(&node.acl) else {
                return Err(ZkFileError::invalid(
                    file,
                    at,
                    format!("node {:?} uses unknown ACL {}", node.path, node.acl),
                ));
            };
            if recovery.nodes.contains_key(&node.path) {
                return Err(ZkFileError::invalid(file, at, format!("node {:?} appears twice", node.path)));
            }
            match parent_of(&node.path) {
                None if node.path.is_empty() => {}
                None => return Err(ZkFileError::invalid(file, at, format!("path {:?} is not absolute", node.path))),
                Some(parent) if !recovery.nodes.contains_key(parent) => {
                    return Err(ZkFileError::invalid(
                        file,
                        at,
                        format!("node {:?} comes before its parent", node.path),
                    ));
                }
                Some(_) => recovery.index_owner(&node.path, node.stat.ephemeral_owner),
            }
            let data = node.data.clone();
            recovery.nodes.insert(node.path.clone(), Node { data, acl: acl.clone(), stat: node.stat });
        }
        if !recovery.nodes.contains_key("") {
            return Err(ZkFileError::invalid(file, 0, "the snapshot has no root node"));
        }
        recovery.stats.snapshot_nodes = recovery.nodes.len();
        Ok(recovery)
    }

    /// The zxid of the last transaction applied (the snapshot's until one is).
    pub fn last_zxid(&self) -> i64 {
        self.last_zxid
    }

    fn index_owner(&mut self, path: &str, owner: i64) {
        if EphemeralType::of(owner) == EphemeralType::Normal {
            self.ephemerals.entry(owner).or_default().insert(path.to_string());
        }
    }

    /// Applies one logged entry of `file` (`FileTxnSnapLog.processTransaction`).
    /// Entries at or before the last applied zxid are skipped, as
    /// ZooKeeper's reader starts after the snapshot's.
    pub fn apply(&mut self, file: &str, entry: &LogEntry) -> Result<(), ZkFileError> {
        let h = entry.header;
        if h.zxid <= self.last_zxid {
            self.stats.skipped += 1;
            return Ok(());
        }
        match &entry.txn {
            Txn::CreateSession { timeout } => {
                self.sessions.insert(h.client_id, *timeout);
            }
            Txn::CloseSession { paths } => {
                self.sessions.remove(&h.client_id);
                let local = self.ephemerals.remove(&h.client_id).unwrap_or_default();
                // `DataTree.killSession`: the logged paths first, then any
                // other ephemeral of the session.
                let logged = paths.clone().unwrap_or_default();
                for path in &logged {
                    self.delete(path, h.zxid);
                }
                for path in local.iter().filter(|p| !logged.contains(p)) {
                    self.delete(path, h.zxid);
                }
            }
            Txn::Multi(subs) => {
                // A multi that failed is logged with error sub-transactions;
                // then none of its ops applies.
                if !subs.iter().any(|t| matches!(t, Txn::Error { .. })) {
                    for sub in subs {
                        self.apply_op(file, entry, &h, sub)?;
                    }
                }
            }
            other => self.apply_op(file, entry, &h, other)?,
        }
        self.last_zxid = h.zxid;
        self.stats.replayed += 1;
        Ok(())
    }

    /// One change (a transaction or a multi's op) with ZooKeeper's rules:
    /// a missing node or an existing one skips it.
    fn apply_op(&mut self, file: &str, entry: &LogEntry, h: &TxnHeader, txn: &Txn) -> Result<(), ZkFileError> {
        match txn {
            Txn::Create { op: create_op, path, data, acl, owner, parent_cversion } => {
                let owner = match owner {
                    Owner::Persistent => 0,
                    Owner::Session => h.client_id,
                    Owner::Container => CONTAINER_EPHEMERAL_OWNER,
                    Owner::Ttl(ttl) if (1..=MAX_TTL_MS).contains(ttl) => EphemeralType::ttl_owner(*ttl),
                    Owner::Ttl(ttl) => {
                        let at = entry.offset as usize;
                        return Err(ZkFileError::invalid(file, at, format!("TTL {ttl} out of range for {path}")));
                    }
                };
                let exists = self.create(path, data, acl, owner, *parent_cversion, h);
                // `processTxn`: a plain create that met its node (the fuzzy
                // snapshot holds it) still moves the parent's counters.
                if exists && *create_op == op::CREATE {
                    if let Some(parent) = parent_of(path).and_then(|p| self.nodes.get_mut(p)) {
                        let cversion = if *parent_cversion == -1 {
                            parent.stat.cversion.wrapping_add(1)
                        } else {
                            *parent_cversion
                        };
                        if cversion > parent.stat.cversion {
                            parent.stat.cversion = cversion;
                            parent.stat.pzxid = h.zxid;
                        }
                    }
                }
            }
            Txn::Delete { path } => self.delete(path, h.zxid),
            Txn::SetData { path, data, version } => {
                if let Some(node) = self.nodes.get_mut(path) {
                    node.data = data.clone();
                    node.stat.mtime = h.time;
                    node.stat.mzxid = h.zxid;
                    node.stat.version = *version;
                }
            }
            Txn::SetAcl { path, acl, version } => {
                if let Some(node) = self.nodes.get_mut(path) {
                    node.stat.aversion = *version;
                    node.acl = Arc::from(acl.as_slice());
                }
            }
            Txn::Check { .. } | Txn::Error { .. } => {}
            Txn::CreateSession { .. } | Txn::CloseSession { .. } | Txn::Multi(_) => {
                let at = entry.offset as usize;
                return Err(ZkFileError::invalid(file, at, "a session or multi transaction inside a multi"));
            }
        }
        Ok(())
    }

    /// `DataTree.createNode`; true when the node already existed (its ACL
    /// is then replaced, as ZooKeeper does before it notices).
    fn create(
        &mut self,
        path: &str,
        data: &Option<Bytes>,
        acl: &[Acl],
        owner: i64,
        parent_cversion: i32,
        h: &TxnHeader,
    ) -> bool {
        let Some(parent_path) = parent_of(path) else { return false };
        if !self.nodes.contains_key(parent_path) {
            return false;
        }
        if let Some(existing) = self.nodes.get_mut(path) {
            existing.acl = Arc::from(acl);
            return true;
        }
        if let Some(parent) = self.nodes.get_mut(parent_path) {
            let cversion = if parent_cversion == -1 { parent.stat.cversion.wrapping_add(1) } else { parent_cversion };
            if cversion > parent.stat.cversion {
                parent.stat.cversion = cversion;
                parent.stat.pzxid = h.zxid;
            }
        }
        let stat = StatPersisted::created(h.zxid, h.time, owner);
        self.nodes.insert(path.to_string(), Node { data: data.clone(), acl: Arc::from(acl), stat });
        self.index_owner(path, owner);
        false
    }

    /// `DataTree.deleteNode`: the parent's pzxid moves even when the node is
    /// already gone (ZooKeeper updates the parent first).
    fn delete(&mut self, path: &str, zxid: i64) {
        let Some(parent) = parent_of(path).and_then(|p| self.nodes.get_mut(p)) else { return };
        if zxid > parent.stat.pzxid {
            parent.stat.pzxid = zxid;
        }
        let Some(node) = self.nodes.remove(path) else { return };
        let owner = node.stat.ephemeral_owner;
        if EphemeralType::of(owner) == EphemeralType::Normal {
            if let Some(set) = self.ephemerals.get_mut(&owner) {
                set.remove(path);
            }
        }
    }

    /// Ends recovery as `ZooKeeperServer.loadData` does (ephemerals whose
    /// session is gone are deleted at the last zxid) and builds our tree.
    /// Fails when the tree holds what our model cannot hold exactly.
    pub fn finish(mut self) -> Result<(TreeState, RecoveryStats), ZkFileError> {
        let dead: Vec<i64> = self.ephemerals.keys().copied().filter(|s| !self.sessions.contains_key(s)).collect();
        for session in dead {
            let paths = self.ephemerals.remove(&session).unwrap_or_default();
            for path in paths {
                if self.nodes.contains_key(&path) {
                    self.stats.dead_ephemerals += 1;
                }
                self.delete(&path, self.last_zxid);
            }
        }
        let quota_prefix = format!("{QUOTA_PATH}/");
        let quotas: Vec<&str> =
            self.nodes.keys().filter(|p| p.starts_with(&quota_prefix)).map(String::as_str).take(5).collect();
        if !quotas.is_empty() {
            return Err(ZkFileError::Unsupported {
                reason: format!(
                    "ZooKeeper quotas are set ({}): zabkeeper does not keep quota statistics; remove them \
                     (zkCli.sh delquota) before migrating",
                    quotas.join(", ")
                ),
            });
        }
        let mut state = TreeState::empty();
        let mut interned: BTreeMap<Vec<Acl>, SharedAcl> = BTreeMap::new();
        for (path, node) in &self.nodes {
            let ours = if path.is_empty() { "/" } else { path.as_str() };
            let acl = interned.entry(node.acl.to_vec()).or_insert_with(|| SharedAcl::new(node.acl.clone())).clone();
            let data = Data::from(node.data.clone());
            // Sorted paths put every parent before its children.
            if !state.insert_raw(ours, &data, acl, node.stat) {
                return Err(ZkFileError::Unsupported {
                    reason: format!("node {ours} has no parent after replay (ZooKeeper would not serve it either)"),
                });
            }
        }
        if state.node(crate::tree::CONFIG_PATH).is_none() && state.node(crate::tree::ZOOKEEPER_PATH).is_some() {
            // Written before 3.5, which has no config node: add it as ZooKeeper 3.5+ makes it.
            let config = StatPersisted { aversion: -1, ..StatPersisted::default() };
            state.insert_raw(crate::tree::CONFIG_PATH, &Data::EMPTY, SharedAcl::new(Acl::read_unsafe().into()), config);
        }
        for (id, timeout) in &self.sessions {
            let password = Bytes::copy_from_slice(&session_password(*id));
            state.insert_session(SessionId(*id), SessionRecord { timeout_ms: *timeout, password });
        }
        state.set_last_zxid(Zxid(self.last_zxid as u64));
        Ok((state, self.stats))
    }
}

#[cfg(test)]
mod tests;
