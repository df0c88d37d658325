//! The data tree: ZooKeeper's hierarchical namespace of znodes, held whole in
//! memory, changed only by applying committed transactions in zxid order.
//!
//! Pure: no I/O, no clock, no randomness. The replicated part ([`TreeState`])
//! is built from persistent collections, so a snapshot is an O(1) clone that
//! a background task can serialize while writes go on. Watches
//! ([`watch::WatchManager`]) live beside it: they are local to this replica.

pub mod acl;
pub mod path;
pub mod prepare;
pub mod snapshot;
pub mod stat;
pub mod watch;

use crate::error::ErrorCode;
use crate::ids::{SessionId, Zxid};
use crate::txn::{Txn, TxnBody};
use acl::{Acl, AclList};
use bytes::Bytes;
use stat::{EphemeralType, Stat, StatPersisted};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use watch::{EventType, Trigger, WatchEvent, WatchManager};

/// The hasher of the node table: fixed seed, so a simulation replays exactly.
type Hasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// One znode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Znode {
    /// The data.
    pub data: Bytes,
    /// The ACL, shared with every node that has the same list.
    pub acl: AclList,
    /// The persisted metadata.
    pub stat: StatPersisted,
    /// Child names.
    pub children: BTreeSet<Arc<str>>,
}

impl Znode {
    /// The full Stat.
    pub fn stat(&self) -> Stat {
        self.stat.to_stat(self.data.len(), self.children.len())
    }
}

/// A live session as replicated state: what any replica needs to accept its resumption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// Negotiated timeout.
    pub timeout_ms: i32,
    /// The password the client must show.
    pub password: Bytes,
}

/// The replicated state: nodes, sessions and the indexes derived from them.
/// Cloning is O(1) (persistent collections share structure).
#[derive(Clone, Debug)]
pub struct TreeState {
    nodes: imbl::GenericHashMap<Arc<str>, Arc<Znode>, Hasher, imbl::shared_ptr::DefaultSharedPtr>,
    sessions: imbl::OrdMap<SessionId, SessionRecord>,
    ephemerals: imbl::OrdMap<SessionId, imbl::OrdSet<Arc<str>>>,
    containers: imbl::OrdSet<Arc<str>>,
    ttls: imbl::OrdSet<Arc<str>>,
    last_zxid: Zxid,
    data_bytes: u64,
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
    matches!(path, "/" | ZOOKEEPER_PATH | QUOTA_PATH | CONFIG_PATH)
}

impl Default for TreeState {
    fn default() -> Self {
        TreeState::new()
    }
}

impl TreeState {
    /// A fresh tree: the root and ZooKeeper's `/zookeeper` subtree.
    pub fn new() -> TreeState {
        let mut state = TreeState::empty();
        let open: AclList = Acl::open_unsafe().into();
        state.insert_raw("/", Bytes::new(), open.clone(), StatPersisted::default());
        state.insert_raw(ZOOKEEPER_PATH, Bytes::new(), open.clone(), StatPersisted::default());
        state.insert_raw(QUOTA_PATH, Bytes::new(), open, StatPersisted::default());
        // ZooKeeper makes the config node with `setACL(.., READ_ACL_UNSAFE, -1)`,
        // which stores the given version: its aversion reads -1.
        let config = StatPersisted { aversion: -1, ..StatPersisted::default() };
        state.insert_raw(CONFIG_PATH, Bytes::new(), Acl::read_unsafe().into(), config);
        state
    }

    /// A tree with no nodes at all (snapshot loading fills it).
    pub(crate) fn empty() -> TreeState {
        TreeState {
            nodes: imbl::GenericHashMap::with_hasher(Hasher::default()),
            sessions: imbl::OrdMap::new(),
            ephemerals: imbl::OrdMap::new(),
            containers: imbl::OrdSet::new(),
            ttls: imbl::OrdSet::new(),
            last_zxid: Zxid::ZERO,
            data_bytes: 0,
        }
    }

    /// Inserts a node and links it to its parent, without any checks; used
    /// when building a tree from a snapshot (parents come first).
    pub(crate) fn insert_raw(&mut self, path: &str, data: Bytes, acl: AclList, stat: StatPersisted) {
        let key: Arc<str> = Arc::from(path);
        if path != "/" {
            let parent = path::parent(path);
            if let Some(node) = self.nodes.get_mut(parent) {
                Arc::make_mut(node).children.insert(Arc::from(path::name(path)));
            }
        }
        match EphemeralType::of(stat.ephemeral_owner) {
            EphemeralType::Container => {
                self.containers.insert(key.clone());
            }
            EphemeralType::Ttl(_) => {
                self.ttls.insert(key.clone());
            }
            EphemeralType::Normal => {
                self.ephemerals.entry(SessionId(stat.ephemeral_owner)).or_default().insert(key.clone());
            }
            EphemeralType::Void => {}
        }
        self.data_bytes += data.len() as u64;
        let children = self.nodes.get(path).map(|n| n.children.clone()).unwrap_or_default();
        self.nodes.insert(key, Arc::new(Znode { data, acl, stat, children }));
    }

    /// Records a session (snapshot loading).
    pub(crate) fn insert_session(&mut self, id: SessionId, record: SessionRecord) {
        self.sessions.insert(id, record);
    }

    /// Sets the zxid the state reflects (snapshot loading).
    pub(crate) fn set_last_zxid(&mut self, zxid: Zxid) {
        self.last_zxid = zxid;
    }

    /// The zxid of the last applied transaction.
    pub fn last_zxid(&self) -> Zxid {
        self.last_zxid
    }

    /// A node by path.
    pub fn node(&self, path: &str) -> Option<&Znode> {
        self.nodes.get(path).map(|n| &**n)
    }

    /// Number of nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Total bytes of node data.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Live sessions.
    pub fn sessions(&self) -> impl Iterator<Item = (&SessionId, &SessionRecord)> {
        self.sessions.iter()
    }

    /// One session.
    pub fn session(&self, id: SessionId) -> Option<&SessionRecord> {
        self.sessions.get(&id)
    }

    /// Number of live sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// A session's ephemerals, sorted.
    pub fn ephemerals_of(&self, session: SessionId) -> Vec<String> {
        self.ephemerals.get(&session).map(|s| s.iter().map(|p| p.to_string()).collect()).unwrap_or_default()
    }

    /// Every session's ephemerals, sorted (for `dump`).
    pub fn all_ephemerals(&self) -> Vec<(SessionId, Vec<String>)> {
        self.ephemerals.iter().map(|(s, paths)| (*s, paths.iter().map(|p| p.to_string()).collect())).collect()
    }

    /// Container nodes.
    pub fn containers(&self) -> impl Iterator<Item = &Arc<str>> {
        self.containers.iter()
    }

    /// TTL nodes.
    pub fn ttl_nodes(&self) -> impl Iterator<Item = &Arc<str>> {
        self.ttls.iter()
    }

    /// Visits every node in pre-order (a parent before its children,
    /// children by name): the order snapshots are written in.
    pub fn walk(&self, mut visit: impl FnMut(&str, &Znode)) {
        let mut stack: Vec<String> = vec!["/".to_string()];
        while let Some(path) = stack.pop() {
            let Some(node) = self.nodes.get(path.as_str()) else { continue };
            visit(&path, node);
            for child in node.children.iter().rev() {
                stack.push(path::join(&path, child));
            }
        }
    }

    /// Number of descendants of `path` (not counting itself).
    pub fn descendant_count(&self, path: &str) -> usize {
        if path == "/" {
            return self.nodes.len() - 1;
        }
        let mut count = 0;
        let mut stack = vec![path.to_string()];
        while let Some(p) = stack.pop() {
            if let Some(node) = self.nodes.get(p.as_str()) {
                for child in &node.children {
                    count += 1;
                    stack.push(path::join(&p, child));
                }
            }
        }
        count
    }

    /// A digest of the whole state (nodes and sessions), equal on replicas
    /// that applied the same transactions. Order-independent over nodes.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher as _};
        let mut total: u64 = 0;
        for (path, node) in self.nodes.iter() {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            path.hash(&mut h);
            node.data.hash(&mut h);
            node.stat.czxid.hash(&mut h);
            node.stat.mzxid.hash(&mut h);
            node.stat.ctime.hash(&mut h);
            node.stat.mtime.hash(&mut h);
            node.stat.version.hash(&mut h);
            node.stat.cversion.hash(&mut h);
            node.stat.aversion.hash(&mut h);
            node.stat.ephemeral_owner.hash(&mut h);
            node.stat.pzxid.hash(&mut h);
            node.acl.hash(&mut h);
            node.children.len().hash(&mut h);
            total = total.wrapping_add(h.finish());
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (id, record) in self.sessions.iter() {
            id.hash(&mut h);
            record.timeout_ms.hash(&mut h);
            record.password.hash(&mut h);
        }
        total ^ h.finish()
    }

    fn stat_of(&self, path: &str) -> Option<Stat> {
        self.node(path).map(Znode::stat)
    }

    fn create(
        &mut self,
        zxid: Zxid,
        time_ms: i64,
        body: &TxnBody,
        acl: AclList,
        triggers: &mut Vec<Trigger>,
    ) -> TxnResult {
        let TxnBody::Create { path, data, ephemeral_owner, parent_cversion, .. } = body else {
            unreachable!("create() is only called with a Create body");
        };
        let parent_path = path::parent(path);
        if path == "/" || self.nodes.contains_key(path.as_str()) {
            return TxnResult::Error(ErrorCode::NodeExists);
        }
        let Some(parent) = self.nodes.get_mut(parent_path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let parent = Arc::make_mut(parent);
        parent.children.insert(Arc::from(path::name(path)));
        if *parent_cversion > parent.stat.cversion {
            parent.stat.cversion = *parent_cversion;
        }
        parent.stat.pzxid = zxid.as_i64();
        let stat = StatPersisted::created(zxid.as_i64(), time_ms, *ephemeral_owner);
        let key: Arc<str> = Arc::from(path.as_str());
        match EphemeralType::of(*ephemeral_owner) {
            EphemeralType::Container => {
                self.containers.insert(key.clone());
            }
            EphemeralType::Ttl(_) => {
                self.ttls.insert(key.clone());
            }
            EphemeralType::Normal => {
                self.ephemerals.entry(SessionId(*ephemeral_owner)).or_default().insert(key.clone());
            }
            EphemeralType::Void => {}
        }
        self.data_bytes += data.len() as u64;
        let node = Znode { data: data.clone(), acl, stat, children: BTreeSet::new() };
        let full = node.stat();
        self.nodes.insert(key, Arc::new(node));
        triggers.push(Trigger { path: path.clone(), event_type: EventType::NodeCreated });
        triggers.push(Trigger { path: parent_path.to_string(), event_type: EventType::NodeChildrenChanged });
        TxnResult::Created { path: path.clone(), stat: full }
    }

    fn delete(&mut self, zxid: Zxid, path: &str, triggers: &mut Vec<Trigger>) -> TxnResult {
        let Some(node) = self.nodes.get(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        if !node.children.is_empty() {
            return TxnResult::Error(ErrorCode::NotEmpty);
        }
        if is_special_path(path) {
            return TxnResult::Error(ErrorCode::BadArguments);
        }
        let owner = node.stat.ephemeral_owner;
        let Some(node) = self.nodes.remove(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        self.data_bytes -= node.data.len() as u64;
        let parent_path = path::parent(path);
        if let Some(parent) = self.nodes.get_mut(parent_path) {
            let parent = Arc::make_mut(parent);
            parent.children.remove(path::name(path));
            if zxid.as_i64() > parent.stat.pzxid {
                parent.stat.pzxid = zxid.as_i64();
            }
        }
        match EphemeralType::of(owner) {
            EphemeralType::Container => {
                self.containers.remove(path);
            }
            EphemeralType::Ttl(_) => {
                self.ttls.remove(path);
            }
            EphemeralType::Normal => {
                let session = SessionId(owner);
                let now_empty = match self.ephemerals.get_mut(&session) {
                    Some(set) => {
                        set.remove(path);
                        set.is_empty()
                    }
                    None => false,
                };
                if now_empty {
                    self.ephemerals.remove(&session);
                }
            }
            EphemeralType::Void => {}
        }
        triggers.push(Trigger { path: path.to_string(), event_type: EventType::NodeDeleted });
        triggers.push(Trigger { path: parent_path.to_string(), event_type: EventType::NodeChildrenChanged });
        TxnResult::Deleted
    }

    fn set_data(
        &mut self,
        zxid: Zxid,
        time_ms: i64,
        path: &str,
        data: &Bytes,
        version: i32,
        triggers: &mut Vec<Trigger>,
    ) -> TxnResult {
        let Some(node) = self.nodes.get_mut(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let node = Arc::make_mut(node);
        self.data_bytes = self.data_bytes - node.data.len() as u64 + data.len() as u64;
        node.data = data.clone();
        node.stat.version = version;
        node.stat.mtime = time_ms;
        node.stat.mzxid = zxid.as_i64();
        let stat = node.stat();
        triggers.push(Trigger { path: path.to_string(), event_type: EventType::NodeDataChanged });
        TxnResult::DataSet(stat)
    }

    fn set_acl(&mut self, path: &str, acl: AclList, version: i32) -> TxnResult {
        let Some(node) = self.nodes.get_mut(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let node = Arc::make_mut(node);
        node.acl = acl;
        node.stat.aversion = version;
        TxnResult::AclSet(node.stat())
    }
}

/// The data tree of one replica: the replicated state plus its local watches.
#[derive(Debug, Default)]
pub struct DataTree {
    state: TreeState,
    watches: WatchManager,
    /// Interned ACL lists, so equal lists share one allocation.
    acl_cache: HashMap<Vec<Acl>, AclList>,
}

impl DataTree {
    /// A fresh tree.
    pub fn new() -> DataTree {
        DataTree::default()
    }

    /// A tree from a snapshot's state.
    pub fn from_state(state: TreeState) -> DataTree {
        let mut tree = DataTree { state, watches: WatchManager::default(), acl_cache: HashMap::new() };
        let lists: Vec<AclList> = {
            let mut seen = Vec::new();
            for (_, node) in tree.state.nodes.iter() {
                seen.push(node.acl.clone());
            }
            seen
        };
        for list in lists {
            tree.acl_cache.entry(list.to_vec()).or_insert(list);
        }
        tree
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
        *self = DataTree { watches: std::mem::take(&mut self.watches), ..DataTree::from_state(state) };
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

    fn intern(&mut self, acl: &[Acl]) -> AclList {
        if let Some(list) = self.acl_cache.get(acl) {
            return list.clone();
        }
        // Drop lists nobody uses any more before the cache grows.
        if self.acl_cache.len() > 1024 {
            self.acl_cache.retain(|_, list| Arc::strong_count(list) > 1);
        }
        let list: AclList = acl.to_vec().into();
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
                if self.state.nodes.contains_key(path.as_str()) {
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
        }
    }

    /// getData: data and Stat, optionally leaving a data watch.
    pub fn get_data(&mut self, path: &str, watcher: Option<SessionId>) -> Result<(Bytes, Stat), ErrorCode> {
        let node = self.state.node(path).ok_or(ErrorCode::NoNode)?;
        let out = (node.data.clone(), node.stat());
        if let Some(session) = watcher {
            self.watches.add_data(path, session);
        }
        Ok(out)
    }

    /// exists: the Stat; the watch is left even when the node is missing.
    pub fn exists(&mut self, path: &str, watcher: Option<SessionId>) -> Result<Stat, ErrorCode> {
        if let Some(session) = watcher {
            self.watches.add_exists(path, session);
        }
        self.state.stat_of(path).ok_or(ErrorCode::NoNode)
    }

    /// getChildren: sorted names and the Stat, optionally leaving a child watch.
    pub fn get_children(&mut self, path: &str, watcher: Option<SessionId>) -> Result<(Vec<String>, Stat), ErrorCode> {
        let node = self.state.node(path).ok_or(ErrorCode::NoNode)?;
        let out = (node.children.iter().map(|c| c.to_string()).collect(), node.stat());
        if let Some(session) = watcher {
            self.watches.add_child(path, session);
        }
        Ok(out)
    }

    /// getACL: the ACL and Stat.
    pub fn get_acl(&self, path: &str) -> Result<(AclList, Stat), ErrorCode> {
        let node = self.state.node(path).ok_or(ErrorCode::NoNode)?;
        Ok((node.acl.clone(), node.stat()))
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
                Some(node) if node.stat.mzxid > relative_zxid => fired.push(event(EventType::NodeDataChanged, path)),
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
                Some(node) if node.stat.pzxid > relative_zxid => {
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
