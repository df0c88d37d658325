//! The replicated part of the tree: nodes, sessions and the indexes derived
//! from them, in persistent collections (a snapshot is an O(1) clone), and
//! the changes a committed transaction makes to them.

use super::node::SharedAcl;
use super::*;
use crate::members::Configuration;

/// The replicated state: nodes, sessions and the indexes derived from them.
/// Cloning is O(1) (persistent collections share structure).
#[derive(Clone, Debug)]
pub struct TreeState {
    pub(super) nodes: Table,
    pub(super) sessions: imbl::OrdMap<SessionId, SessionRecord>,
    pub(super) ephemerals: imbl::OrdMap<SessionId, imbl::OrdSet<Arc<str>>>,
    pub(super) containers: imbl::OrdSet<Arc<str>>,
    pub(super) ttls: imbl::OrdSet<Arc<str>>,
    pub(super) last_zxid: Zxid,
    pub(super) data_bytes: u64,
    /// The nodes' part of [`TreeState::digest`], kept up to date change by
    /// change once [`TreeState::track_digest`] turned it on (the
    /// simulation's checks; a server does not pay for it).
    pub(super) nodes_digest: Option<u64>,
    /// The replicated configuration; None until set from the configuration
    /// file or changed by a reconfiguration.
    pub(super) configuration: Option<Configuration>,
    /// The highest epoch the zxids of the nodes read in (from a snapshot,
    /// or ZooKeeper's files) name, noted as they are read: what a member
    /// restarting from a snapshot of a loaded tree needs, at no extra pass
    /// (see [`TreeState::highest_epoch`]). Not kept up by writes.
    pub(super) read_epoch: crate::ids::Epoch,
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
        let open = SharedAcl::new(Acl::open_unsafe().into());
        state.insert_raw("/", &Data::EMPTY, open.clone(), StatPersisted::default());
        state.insert_raw(ZOOKEEPER_PATH, &Data::EMPTY, open.clone(), StatPersisted::default());
        state.insert_raw(QUOTA_PATH, &Data::EMPTY, open, StatPersisted::default());
        // ZooKeeper makes the config node with `setACL(.., READ_ACL_UNSAFE, -1)`,
        // which stores the given version: its aversion reads -1.
        let config = StatPersisted { aversion: -1, ..StatPersisted::default() };
        state.insert_raw(CONFIG_PATH, &Data::EMPTY, SharedAcl::new(Acl::read_unsafe().into()), config);
        state
    }

    /// The replicated configuration, once there is one.
    pub fn configuration(&self) -> Option<&Configuration> {
        self.configuration.as_ref()
    }

    /// Installs `configuration` and shows it in `/zookeeper/config`, its
    /// data replaced as a write at `zxid` would (zero: the configuration
    /// file's, before any write). Returns the node's new data and Stat.
    pub(super) fn set_configuration(
        &mut self,
        zxid: Zxid,
        time_ms: i64,
        configuration: Configuration,
        triggers: &mut Vec<Trigger>,
    ) -> TxnResult {
        let text = Data::from(Bytes::from(configuration.zookeeper_text()));
        let shown = self.configuration.as_ref().map(|c| (c.version, c.current()));
        let changed = shown != Some((configuration.version, configuration.current()));
        self.configuration = Some(configuration);
        let Some(node) = self.nodes.get(CONFIG_PATH) else { return TxnResult::Error(ErrorCode::NoNode) };
        if !changed {
            return TxnResult::DataSet(node.stat());
        }
        if zxid == Zxid::ZERO {
            let persisted = node.persisted();
            let tracked = self.nodes_digest.is_some();
            let Some(node) = self.nodes.get_mut(CONFIG_PATH) else { return TxnResult::Error(ErrorCode::NoNode) };
            let before = tracked.then(|| node_digest(CONFIG_PATH, node));
            let grown = text.len() as u64;
            let shrunk = node.data().len() as u64;
            *node = node.with_data(&text, persisted);
            let (after, stat) = (tracked.then(|| node_digest(CONFIG_PATH, node)), node.stat());
            self.data_bytes = self.data_bytes - shrunk + grown;
            self.digest_change(before, after);
            return TxnResult::DataSet(stat);
        }
        let version = node.stat().version + 1;
        self.set_data(zxid, time_ms, CONFIG_PATH, &text, version, triggers)
    }

    /// A tree with no nodes at all (snapshot loading fills it).
    pub(crate) fn empty() -> TreeState {
        TreeState {
            nodes: Table::default(),
            sessions: imbl::OrdMap::new(),
            ephemerals: imbl::OrdMap::new(),
            containers: imbl::OrdSet::new(),
            ttls: imbl::OrdSet::new(),
            last_zxid: Zxid::ZERO,
            data_bytes: 0,
            nodes_digest: None,
            configuration: None,
            read_epoch: 0,
        }
    }

    /// Inserts a node and counts it in its parent, without other checks;
    /// used when building a tree from a snapshot (parents come first).
    /// Returns false, inserting nothing, when a node other than the root has
    /// no parent.
    pub(crate) fn insert_raw(&mut self, path: &str, data: &Data, acl: SharedAcl, stat: StatPersisted) -> bool {
        if path != "/" && !self.add_children(path::parent(path), 1) {
            return false;
        }
        self.insert_unlinked(path, data, acl, stat);
        true
    }

    /// Inserts a node without counting it in its parent: a snapshot's
    /// reader counts a run of siblings at once ([`TreeState::add_children`]).
    pub(crate) fn insert_unlinked(&mut self, path: &str, data: &Data, acl: SharedAcl, stat: StatPersisted) {
        let epoch = |z: i64| Zxid(z.max(0) as u64).epoch();
        self.read_epoch = self.read_epoch.max(epoch(stat.czxid).max(epoch(stat.mzxid)).max(epoch(stat.pzxid)));
        self.index_owner(path, stat.ephemeral_owner);
        self.data_bytes += data.len() as u64;
        // Parents come first, so no child is in yet.
        let node = Znode::new(data, acl, stat, 0);
        self.digest_add(path, &node);
        self.nodes.insert(path, node);
    }

    /// Counts `count` more children in the node at `parent`; false when there is none.
    pub(crate) fn add_children(&mut self, parent: &str, count: i32) -> bool {
        let tracked = self.nodes_digest.is_some();
        match self.nodes.get_mut(parent) {
            Some(node) => {
                let before = tracked.then(|| node_digest(parent, node));
                node.add_child(count);
                let after = tracked.then(|| node_digest(parent, node));
                self.digest_change(before, after);
                true
            }
            None => false,
        }
    }

    /// Enters a new node in the index its `ephemeralOwner` puts it in:
    /// containers, TTL nodes or a session's ephemerals (most nodes, owned by
    /// none, in no index and with no allocation here).
    fn index_owner(&mut self, path: &str, owner: i64) {
        let key = || Arc::<str>::from(path);
        match EphemeralType::of(owner) {
            EphemeralType::Container => {
                self.containers.insert(key());
            }
            EphemeralType::Ttl(_) => {
                self.ttls.insert(key());
            }
            EphemeralType::Normal => {
                self.ephemerals.entry(SessionId(owner)).or_default().insert(key());
            }
            EphemeralType::Void => {}
        }
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
        self.nodes.get(path)
    }

    /// The children of `path` as full paths, by name.
    pub fn children<'a>(&'a self, path: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.nodes.children(path).map(|(child, _)| child)
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

    /// Every node, each parent before its children: the order snapshots
    /// are written in.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &Znode)> {
        self.nodes.iter()
    }

    /// Number of descendants of `path` (not counting itself).
    pub fn descendant_count(&self, path: &str) -> usize {
        if path == "/" {
            return self.nodes.len() - 1;
        }
        let mut count = 0;
        let mut stack = vec![path];
        while let Some(p) = stack.pop() {
            for child in self.children(p) {
                count += 1;
                stack.push(child);
            }
        }
        count
    }

    /// Whether `other` is this very state, shared rather than rebuilt (a
    /// cheap test that can only say yes to equal states; digests compare
    /// states built apart).
    pub fn same_as(&self, other: &TreeState) -> bool {
        self.last_zxid == other.last_zxid
            && self.nodes.same_as(&other.nodes)
            && self.sessions.ptr_eq(&other.sessions)
            && self.ephemerals.ptr_eq(&other.ephemerals)
    }

    /// A digest of the whole state (nodes and sessions), equal on replicas
    /// that applied the same transactions. Order-independent over nodes (a
    /// sum of one hash per node), so it can be kept up to date change by
    /// change ([`TreeState::track_digest`]); otherwise every node is hashed.
    /// It finds divergence, not attacks: FxHash, several times faster than
    /// SipHash.
    pub fn digest(&self) -> u64 {
        self.nodes_digest.unwrap_or_else(|| self.nodes_digest_in_full()) ^ self.sessions_digest()
    }

    /// [`TreeState::digest`] computed from every node, whether tracked or
    /// not (what a tracked digest is checked against).
    pub fn digest_in_full(&self) -> u64 {
        self.nodes_digest_in_full() ^ self.sessions_digest()
    }

    /// From now on keeps the nodes' digest up to date with each change, so
    /// [`TreeState::digest`] costs nothing: a hash of each node a change
    /// touches (its data included), before and after. Clones carry it on.
    pub fn track_digest(&mut self) {
        if self.nodes_digest.is_none() {
            self.nodes_digest = Some(self.nodes_digest_in_full());
        }
    }

    /// Whether the digest is tracked.
    pub fn digest_tracked(&self) -> bool {
        self.nodes_digest.is_some()
    }

    fn nodes_digest_in_full(&self) -> u64 {
        self.nodes.iter().fold(0u64, |total, (path, node)| total.wrapping_add(node_digest(path, node)))
    }

    fn sessions_digest(&self) -> u64 {
        use std::hash::{Hash, Hasher as _};
        let mut h = rustc_hash::FxHasher::default();
        for (id, record) in self.sessions.iter() {
            id.hash(&mut h);
            record.timeout_ms.hash(&mut h);
            record.password.hash(&mut h);
        }
        h.finish()
    }

    /// A node enters the tree.
    fn digest_add(&mut self, path: &str, node: &Znode) {
        if let Some(total) = self.nodes_digest.as_mut() {
            *total = total.wrapping_add(node_digest(path, node));
        }
    }

    /// A node's hash goes from `before` to `after` (None: absent).
    fn digest_change(&mut self, before: Option<u64>, after: Option<u64>) {
        if let Some(total) = self.nodes_digest.as_mut() {
            *total = total.wrapping_sub(before.unwrap_or(0)).wrapping_add(after.unwrap_or(0));
        }
    }

    pub(super) fn create(
        &mut self,
        zxid: Zxid,
        time_ms: i64,
        body: &TxnBody,
        acl: SharedAcl,
        triggers: &mut Vec<Trigger>,
    ) -> TxnResult {
        let TxnBody::Create { path, data, ephemeral_owner, parent_cversion, .. } = body else {
            unreachable!("create() is only called with a Create body");
        };
        let parent_path = path::parent(path);
        if path == "/" || self.nodes.contains(path) {
            return TxnResult::Error(ErrorCode::NodeExists);
        }
        let tracked = self.nodes_digest.is_some();
        let Some(parent) = self.nodes.get_mut(parent_path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let before = tracked.then(|| node_digest(parent_path, parent));
        parent.add_child(1);
        parent.update_stat(|stat| {
            if *parent_cversion > stat.cversion {
                stat.cversion = *parent_cversion;
            }
            stat.pzxid = zxid.as_i64();
        });
        let after = tracked.then(|| node_digest(parent_path, parent));
        self.digest_change(before, after);
        let stat = StatPersisted::created(zxid.as_i64(), time_ms, *ephemeral_owner);
        self.index_owner(path, *ephemeral_owner);
        self.data_bytes += data.len() as u64;
        let node = Znode::new(data, acl, stat, 0);
        let full = node.stat();
        self.digest_add(path, &node);
        self.nodes.insert(path, node);
        triggers.push(Trigger { path: path.clone(), event_type: EventType::NodeCreated });
        triggers.push(Trigger { path: parent_path.to_string(), event_type: EventType::NodeChildrenChanged });
        TxnResult::Created { path: path.clone(), stat: full }
    }

    pub(super) fn delete(&mut self, zxid: Zxid, path: &str, triggers: &mut Vec<Trigger>) -> TxnResult {
        let Some(node) = self.nodes.get(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        if node.num_children() > 0 {
            return TxnResult::Error(ErrorCode::NotEmpty);
        }
        if is_special_path(path) {
            return TxnResult::Error(ErrorCode::BadArguments);
        }
        let owner = node.persisted().ephemeral_owner;
        let Some(node) = self.nodes.remove(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        self.data_bytes -= node.data().len() as u64;
        let tracked = self.nodes_digest.is_some();
        self.digest_change(tracked.then(|| node_digest(path, &node)), None);
        let parent_path = path::parent(path);
        if let Some(parent) = self.nodes.get_mut(parent_path) {
            let before = tracked.then(|| node_digest(parent_path, parent));
            parent.add_child(-1);
            parent.update_stat(|stat| {
                if zxid.as_i64() > stat.pzxid {
                    stat.pzxid = zxid.as_i64();
                }
            });
            let after = tracked.then(|| node_digest(parent_path, parent));
            self.digest_change(before, after);
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
        data: &Data,
        version: i32,
        triggers: &mut Vec<Trigger>,
    ) -> TxnResult {
        let tracked = self.nodes_digest.is_some();
        let Some(node) = self.nodes.get_mut(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let before = tracked.then(|| node_digest(path, node));
        self.data_bytes = self.data_bytes - node.data().len() as u64 + data.len() as u64;
        let persisted = StatPersisted { version, mtime: time_ms, mzxid: zxid.as_i64(), ..node.persisted() };
        *node = node.with_data(data, persisted);
        let stat = node.stat();
        let after = tracked.then(|| node_digest(path, node));
        self.digest_change(before, after);
        triggers.push(Trigger { path: path.to_string(), event_type: EventType::NodeDataChanged });
        TxnResult::DataSet(stat)
    }

    pub(super) fn set_acl(&mut self, path: &str, acl: SharedAcl, version: i32) -> TxnResult {
        let tracked = self.nodes_digest.is_some();
        let Some(node) = self.nodes.get_mut(path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let before = tracked.then(|| node_digest(path, node));
        node.set_acl(acl, version);
        let stat = node.stat();
        let after = tracked.then(|| node_digest(path, node));
        self.digest_change(before, after);
        TxnResult::AclSet(stat)
    }
}

/// One node's part of the tree's digest: its path, data and every
/// persisted field.
fn node_digest(path: &str, node: &Znode) -> u64 {
    use std::hash::{Hash, Hasher as _};
    let mut h = rustc_hash::FxHasher::default();
    path.hash(&mut h);
    let stat = node.persisted();
    node.data().hash(&mut h);
    // Only null data adds to the hash, so digests of trees without it stay
    // what they were.
    if node.data_is_null() {
        0xdau8.hash(&mut h);
    }
    stat.czxid.hash(&mut h);
    stat.mzxid.hash(&mut h);
    stat.ctime.hash(&mut h);
    stat.mtime.hash(&mut h);
    stat.version.hash(&mut h);
    stat.cversion.hash(&mut h);
    stat.aversion.hash(&mut h);
    stat.ephemeral_owner.hash(&mut h);
    stat.pzxid.hash(&mut h);
    node.acl().hash(&mut h);
    node.num_children().hash(&mut h);
    h.finish()
}
