//! The replicated part of the tree: nodes, sessions and the indexes derived
//! from them, in persistent collections (a snapshot is an O(1) clone), and
//! the changes a committed transaction makes to them.

use super::*;

/// The replicated state: nodes, sessions and the indexes derived from them.
/// Cloning is O(1) (persistent collections share structure).
#[derive(Clone, Debug)]
pub struct TreeState {
    pub(super) nodes: imbl::GenericHashMap<Arc<str>, Arc<Znode>, Hasher, imbl::shared_ptr::DefaultSharedPtr>,
    pub(super) sessions: imbl::OrdMap<SessionId, SessionRecord>,
    pub(super) ephemerals: imbl::OrdMap<SessionId, imbl::OrdSet<Arc<str>>>,
    pub(super) containers: imbl::OrdSet<Arc<str>>,
    pub(super) ttls: imbl::OrdSet<Arc<str>>,
    pub(super) last_zxid: Zxid,
    pub(super) data_bytes: u64,
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

    pub(super) fn stat_of(&self, path: &str) -> Option<Stat> {
        self.node(path).map(Znode::stat)
    }

    pub(super) fn create(
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

    pub(super) fn delete(&mut self, zxid: Zxid, path: &str, triggers: &mut Vec<Trigger>) -> TxnResult {
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

    pub(super) fn set_data(
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

    pub(super) fn set_acl(&mut self, path: &str, acl: AclList, version: i32) -> TxnResult {
        let Some(node) = self.nodes.get_mut(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let node = Arc::make_mut(node);
        node.acl = acl;
        node.stat.aversion = version;
        TxnResult::AclSet(node.stat())
    }
}
