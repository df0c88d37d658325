//! The data tree: ZooKeeper's hierarchical namespace of znodes, held whole in
//! memory, changed only by applying committed transactions in zxid order.
//!
//! Pure: no I/O, no clock, no randomness. The replicated part ([`TreeState`])
//! is built from persistent collections, so a snapshot is an O(1) clone that
//! a background task can serialize while writes go on. Watches
//! ([`watch::WatchManager`]) live beside it: they are local to this replica.

mod load;
mod node;
pub mod path;
pub mod snapshot;
pub mod stat;
mod state;
mod table;
pub mod watch;

pub use load::{check_load, LoadRefusal};
pub(crate) use node::SharedAcl;
pub use node::Znode;
pub use state::TreeState;
use table::Table;

use crate::acl::{Acl, AclList};
use crate::data::Data;
use crate::error::ErrorCode;
use crate::ids::{SessionId, Zxid};
use crate::members::Configuration;
use crate::txn::{Txn, TxnBody};
use bytes::Bytes;
use rustc_hash::FxHashMap;
use stat::{EphemeralType, Stat, StatPersisted};
use std::collections::BTreeSet;
use std::sync::Arc;
use watch::{EventType, Trigger, WatchEvent, WatchManager};

/// A live session as replicated state: what any replica needs to accept its resumption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// Negotiated timeout.
    pub timeout_ms: i32,
    /// The password the client must show.
    pub password: Bytes,
}

/// The result of applying one transaction, before it is shaped into a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnResult {
    /// A session was created.
    SessionCreated,
    /// A session was closed.
    SessionClosed,
    /// A node was created.
    Created {
        /// The final path.
        path: String,
        /// Its Stat.
        stat: Stat,
    },
    /// A node was deleted.
    Deleted,
    /// Data set; the new Stat.
    DataSet(Stat),
    /// ACL set; the new Stat.
    AclSet(Stat),
    /// A check inside a multi passed.
    Checked,
    /// A multi: one result per op; on failure every entry is an error code
    /// (OK for ops before the failing one).
    Multi(Vec<Result<TxnResult, ErrorCode>>),
    /// The write failed with this code.
    Error(ErrorCode),
    /// A tree was loaded.
    Loaded {
        /// The nodes the tree now holds.
        nodes: usize,
    },
    /// A reconfiguration step applied: `/zookeeper/config` now.
    Reconfigured {
        /// Its data.
        data: Data,
        /// Its Stat.
        stat: Stat,
    },
}

/// What applying a transaction produced.
#[derive(Debug)]
pub struct Applied {
    /// The outcome for the client that asked.
    pub result: TxnResult,
    /// Watch events for sessions connected to this replica, in firing order.
    pub events: Vec<(SessionId, WatchEvent)>,
}

/// Paths that ZooKeeper creates at start and clients may not delete.
pub const ZOOKEEPER_PATH: &str = "/zookeeper";
/// ZooKeeper's quota subtree.
pub const QUOTA_PATH: &str = "/zookeeper/quota";
/// ZooKeeper's dynamic configuration node.
pub const CONFIG_PATH: &str = "/zookeeper/config";

/// Whether a path is one of ZooKeeper's special nodes (not deletable).
pub fn is_special_path(path: &str) -> bool {
    SPECIAL_PATHS.contains(&path)
}

/// The root and ZooKeeper's own nodes: every tree may hold them.
pub const SPECIAL_PATHS: [&str; 4] = ["/", ZOOKEEPER_PATH, QUOTA_PATH, CONFIG_PATH];

/// The data tree of one replica: the replicated state plus its local watches.
#[derive(Debug, Default)]
pub struct DataTree {
    state: TreeState,
    watches: WatchManager,
    /// Interned ACL lists, so equal lists share one allocation.
    acl_cache: FxHashMap<Vec<Acl>, SharedAcl>,
}

impl DataTree {
    /// A fresh tree.
    pub fn new() -> DataTree {
        DataTree::default()
    }

    /// A tree from a snapshot's state.
    pub fn from_state(state: TreeState) -> DataTree {
        // Lists are interned, so a handful of distinct pointers stand for a
        // million nodes: each list is copied into the cache once, not per node.
        let mut seen = rustc_hash::FxHashSet::default();
        let mut acl_cache = FxHashMap::default();
        for (_, node) in state.nodes.iter() {
            let list = node.shared_acl();
            if seen.insert(triomphe::Arc::as_ptr(list)) {
                acl_cache.entry(list.to_vec()).or_insert_with(|| list.clone());
            }
        }
        DataTree { state, watches: WatchManager::default(), acl_cache }
    }

    /// The replicated state (read-only).
    pub fn state(&self) -> &TreeState {
        &self.state
    }

    /// An O(1) frozen copy of the replicated state, for a snapshot.
    pub fn snapshot(&self) -> TreeState {
        self.state.clone()
    }

    /// Replaces the replicated state (installing a leader's snapshot). Every
    /// local watch stays registered; the caller fires what it must.
    pub fn replace_state(&mut self, state: TreeState) {
        let tracked = self.state.digest_tracked();
        *self = DataTree { watches: std::mem::take(&mut self.watches), ..DataTree::from_state(state) };
        if tracked {
            self.state.track_digest();
        }
    }

    /// Keeps the state's digest up to date change by change from now on
    /// (see [`TreeState::track_digest`]), across replaced states too.
    pub fn track_digest(&mut self) {
        self.state.track_digest();
    }

    /// The watches.
    pub fn watches(&self) -> &WatchManager {
        &self.watches
    }

    /// The watches, mutably.
    pub fn watches_mut(&mut self) -> &mut WatchManager {
        &mut self.watches
    }

    /// The zxid of the last applied transaction.
    pub fn last_zxid(&self) -> Zxid {
        self.state.last_zxid
    }

    fn intern(&mut self, acl: &[Acl]) -> SharedAcl {
        if let Some(list) = self.acl_cache.get(acl) {
            return list.clone();
        }
        // Drop lists nobody uses any more before the cache grows.
        if self.acl_cache.len() > 1024 {
            self.acl_cache.retain(|_, list| !list.is_unique());
        }
        let list = SharedAcl::new(acl.to_vec().into());
        self.acl_cache.insert(acl.to_vec(), list.clone());
        list
    }

    /// Applies a committed transaction. Never fails: a transaction that does
    /// not fit the tree (which correct preparation rules out) yields an error
    /// result and changes nothing, identically on every replica.
    pub fn apply(&mut self, zxid: Zxid, txn: &Txn) -> Applied {
        let mut triggers = Vec::new();
        let result = self.apply_body(zxid, txn, &txn.body, &mut triggers);
        if zxid > self.state.last_zxid {
            self.state.last_zxid = zxid;
        }
        let events = self.watches.fire(&triggers, zxid.as_i64());
        Applied { result, events }
    }

    fn apply_body(&mut self, zxid: Zxid, txn: &Txn, body: &TxnBody, triggers: &mut Vec<Trigger>) -> TxnResult {
        match body {
            TxnBody::CreateSession { timeout_ms, password } => {
                self.state
                    .sessions
                    .insert(txn.session, SessionRecord { timeout_ms: *timeout_ms, password: password.clone() });
                TxnResult::SessionCreated
            }
            TxnBody::CloseSession { paths } => {
                self.state.sessions.remove(&txn.session);
                let mut all: BTreeSet<String> = paths.iter().cloned().collect();
                all.extend(self.state.ephemerals_of(txn.session));
                for path in all {
                    self.state.delete(zxid, &path, triggers);
                }
                self.state.ephemerals.remove(&txn.session);
                TxnResult::SessionClosed
            }
            TxnBody::Create { acl, .. } => {
                let acl = self.intern(acl);
                self.state.create(zxid, txn.time_ms, body, acl, triggers)
            }
            TxnBody::Delete { path } => self.state.delete(zxid, path, triggers),
            TxnBody::SetData { path, data, version } => {
                self.state.set_data(zxid, txn.time_ms, path, data, *version, triggers)
            }
            TxnBody::SetAcl { path, acl, version } => {
                let acl = self.intern(acl);
                self.state.set_acl(path, acl, *version)
            }
            TxnBody::Check { path } => {
                if self.state.nodes.contains(path) {
                    TxnResult::Checked
                } else {
                    TxnResult::Error(ErrorCode::NoNode)
                }
            }
            TxnBody::Multi(ops) => {
                let results = ops.iter().map(|op| self.apply_body(zxid, txn, op, triggers)).map(into_item).collect();
                TxnResult::Multi(results)
            }
            TxnBody::MultiError(codes) => TxnResult::Multi(codes.iter().map(|c| Err(*c)).collect()),
            TxnBody::Error(code) => TxnResult::Error(*code),
            TxnBody::Reconfig(change) => {
                match self.state.set_configuration(zxid, txn.time_ms, change.configuration(zxid), triggers) {
                    TxnResult::DataSet(stat) => {
                        let data = self.state.node(CONFIG_PATH).map_or(Data::EMPTY, |n| n.data_value());
                        TxnResult::Reconfigured { data, stat }
                    }
                    other => other,
                }
            }
            TxnBody::Load { chunks, .. } => self.load(zxid, chunks, triggers),
        }
    }

    /// Replaces a configuration file's membership by the leader's (a
    /// follower whose file differed: a member joining), as if its own file
    /// had given it; a replicated configuration is left alone.
    pub fn adopt_initial_configuration(&mut self, configuration: Configuration, shown: bool) {
        if self.state.configuration.as_ref().is_some_and(|c| c.version != Zxid::ZERO) {
            return;
        }
        self.state.configuration = None;
        self.set_initial_configuration(configuration, shown);
    }

    /// Forgets the membership this tree holds, replicated by a
    /// reconfiguration or not, and takes `configuration` as a configuration
    /// file's: for a tree restored from a backup to seed a new ensemble, whose
    /// members are its own file's, not those of the ensemble backed up.
    pub fn reseed_configuration(&mut self, configuration: Configuration, shown: bool) {
        self.state.configuration = None;
        self.set_initial_configuration(configuration, shown);
    }

    /// Takes the configuration file's membership until the ensemble is
    /// reconfigured (a tree that holds a replicated configuration keeps it:
    /// it wins over the file), and shows it in `/zookeeper/config` when
    /// `shown` (ZooKeeper shows it in quorum mode, not standalone).
    pub fn set_initial_configuration(&mut self, configuration: Configuration, shown: bool) {
        if self.state.configuration.is_some() {
            return;
        }
        if shown {
            self.state.set_configuration(Zxid::ZERO, 0, configuration, &mut Vec::new());
        } else {
            self.state.configuration = Some(configuration);
        }
    }

    /// getData: data and Stat, optionally leaving a data watch; NoAuth, and
    /// no watch, when `may_read` refuses the node. One lookup of the path
    /// serves the check and the answer.
    pub fn get_data(
        &mut self,
        path: &str,
        watcher: Option<SessionId>,
        may_read: impl FnOnce(&Znode) -> bool,
    ) -> Result<(Data, Stat), ErrorCode> {
        let node = self.state.node(path).ok_or(ErrorCode::NoNode)?;
        if !may_read(node) {
            return Err(ErrorCode::NoAuth);
        }
        let out = (node.data_value(), node.stat());
        if let Some(session) = watcher {
            self.watches.add_data(path, session);
        }
        Ok(out)
    }

    /// exists: the Stat; the watch is left even when the node is missing (it
    /// is for the create), but not when `may_read` refuses the node (NoAuth).
    pub fn exists(
        &mut self,
        path: &str,
        watcher: Option<SessionId>,
        may_read: impl FnOnce(&Znode) -> bool,
    ) -> Result<Stat, ErrorCode> {
        let stat = match self.state.node(path) {
            Some(node) if !may_read(node) => return Err(ErrorCode::NoAuth),
            Some(node) => Ok(node.stat()),
            None => Err(ErrorCode::NoNode),
        };
        if let Some(session) = watcher {
            self.watches.add_exists(path, session);
        }
        stat
    }

    /// getChildren: sorted names and the Stat, optionally leaving a child watch.
    pub fn get_children(&mut self, path: &str, watcher: Option<SessionId>) -> Result<(Vec<String>, Stat), ErrorCode> {
        let node = self.state.node(path).ok_or(ErrorCode::NoNode)?;
        let out = (self.state.children(path).map(|c| path::name(c).to_string()).collect(), node.stat());
        if let Some(session) = watcher {
            self.watches.add_child(path, session);
        }
        Ok(out)
    }

    /// getACL: the ACL and Stat.
    pub fn get_acl(&self, path: &str) -> Result<(AclList, Stat), ErrorCode> {
        let node = self.state.node(path).ok_or(ErrorCode::NoNode)?;
        Ok((node.acl().clone(), node.stat()))
    }

    /// The ephemerals of `session` whose path starts with `prefix` (a plain
    /// string prefix, as ZooKeeper's getEphemerals; a blank prefix or "/",
    /// spaces around it ignored, means all), sorted.
    pub fn ephemerals(&self, session: SessionId, prefix: &str) -> Vec<String> {
        let all = matches!(prefix.trim(), "" | "/");
        self.state.ephemerals_of(session).into_iter().filter(|p| all || p.starts_with(prefix)).collect()
    }

    /// SetWatches after a reconnect (ZooKeeper's `DataTree.setWatches`):
    /// watches whose node changed after `relative_zxid` fire now, others are re-armed.
    pub fn set_watches(
        &mut self,
        session: SessionId,
        relative_zxid: i64,
        data: &[String],
        exist: &[String],
        child: &[String],
    ) -> Vec<WatchEvent> {
        let mut fired = Vec::new();
        let event = |event_type, path: &String| WatchEvent { event_type, path: path.clone(), zxid: -1 };
        for path in data {
            match self.state.node(path) {
                None => fired.push(event(EventType::NodeDeleted, path)),
                Some(node) if node.persisted().mzxid > relative_zxid => {
                    fired.push(event(EventType::NodeDataChanged, path))
                }
                Some(_) => self.watches.add_data(path, session),
            }
        }
        for path in exist {
            if self.state.node(path).is_some() {
                fired.push(event(EventType::NodeCreated, path));
            } else {
                self.watches.add_exists(path, session);
            }
        }
        for path in child {
            match self.state.node(path) {
                None => fired.push(event(EventType::NodeDeleted, path)),
                Some(node) if node.persisted().pzxid > relative_zxid => {
                    fired.push(event(EventType::NodeChildrenChanged, path))
                }
                Some(_) => self.watches.add_child(path, session),
            }
        }
        fired
    }
}

fn into_item(result: TxnResult) -> Result<TxnResult, ErrorCode> {
    match result {
        TxnResult::Error(code) => Err(code),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests;
