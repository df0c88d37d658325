//! Loading a whole tree into an empty one ([`TxnBody::Load`]): an import
//! from Apache ZooKeeper, or a restore, into a running ensemble. The
//! loaded nodes keep every Stat field and the loaded sessions come along;
//! the ensemble keeps its own membership and sessions. The leader checks a
//! load before it proposes one ([`check_load`]); applying checks again, so
//! a load that no longer fits changes nothing, identically everywhere.

use super::*;
use crate::ids::Epoch;
use std::fmt;

/// Why a tree cannot be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadRefusal {
    /// The snapshot does not decode.
    #[error("the tree to load is unreadable: {0}")]
    Unreadable(String),
    /// The tree loaded into already holds nodes of its own.
    #[error("the ensemble's tree is not empty ({0}); a tree loads only into an empty one")]
    NotEmpty(Sample),
    /// A loaded session has the id of one open here.
    #[error("session {0:#x} of the tree to load is open on this ensemble too")]
    SessionClash(i64),
}

impl LoadRefusal {
    /// The ZooKeeper code a client or the log shows for it.
    pub fn code(&self) -> ErrorCode {
        match self {
            LoadRefusal::Unreadable(_) | LoadRefusal::SessionClash(_) => ErrorCode::BadArguments,
            LoadRefusal::NotEmpty(_) => ErrorCode::NotEmpty,
        }
    }
}

/// How many nodes beyond ZooKeeper's own a tree holds, and the first of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Nodes other than `/`, `/zookeeper` and its special children.
    pub count: usize,
    /// The first of them, in snapshot order.
    pub first: String,
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} node(s) such as {}", self.count, self.first)
    }
}

impl TreeState {
    /// The nodes a load would find in its way: any but the root and
    /// ZooKeeper's special nodes. None when the tree is empty.
    pub fn own_nodes(&self) -> Option<Sample> {
        let first = self.nodes().map(|(path, _)| path).find(|path| !is_special_path(path))?.to_string();
        let special = super::SPECIAL_PATHS.iter().filter(|p| self.node(p).is_some()).count();
        Some(Sample { count: self.node_count() - special, first })
    }

    /// The highest epoch that the zxids of the nodes read in (from a
    /// snapshot, or ZooKeeper's files) and the last zxid name: a loaded
    /// tree's history may run ahead of the ensemble's epoch. Nodes written
    /// since are not looked at (their zxids are the ensemble's own).
    pub fn highest_epoch(&self) -> Epoch {
        self.read_epoch.max(self.last_zxid.epoch())
    }
}

/// Whether `loaded` may be loaded into `current`: it is empty, and no
/// session of `loaded` is open in it. Returns the decoded tree.
pub fn check_load(current: &TreeState, chunks: &[Bytes]) -> Result<TreeState, LoadRefusal> {
    if let Some(sample) = current.own_nodes() {
        return Err(LoadRefusal::NotEmpty(sample));
    }
    let loaded =
        snapshot::from_chunks(chunks.iter().map(|c| c.as_ref())).map_err(|e| LoadRefusal::Unreadable(e.to_string()))?;
    if let Some((id, _)) = loaded.sessions().find(|(id, _)| current.session(**id).is_some()) {
        return Err(LoadRefusal::SessionClash(id.0));
    }
    Ok(loaded)
}

impl DataTree {
    /// Applies a load at `zxid`: the loaded nodes replace the empty tree,
    /// with this tree's configuration node and sessions kept; every watch
    /// the new nodes concern fires.
    pub(super) fn load(&mut self, zxid: Zxid, chunks: &[Bytes], triggers: &mut Vec<Trigger>) -> TxnResult {
        let mut loaded = match check_load(&self.state, chunks) {
            Ok(loaded) => loaded,
            Err(refusal) => {
                tracing::warn!(%zxid, %refusal, "load refused");
                return TxnResult::Error(refusal.code());
            }
        };
        // The membership is this ensemble's, not the one the tree came from.
        loaded.configuration = self.state.configuration.clone();
        if let Some(config) = self.state.node(CONFIG_PATH) {
            let (data, acl, stat) = (config.data_value(), config.shared_acl().clone(), config.persisted());
            match loaded.nodes.get_mut(CONFIG_PATH) {
                Some(node) => {
                    loaded.data_bytes = loaded.data_bytes - node.data().len() as u64 + data.len() as u64;
                    *node = Znode::new(&data, acl, stat, 0);
                }
                None => {
                    if !loaded.nodes.contains(ZOOKEEPER_PATH) {
                        let open = SharedAcl::new(Acl::open_unsafe().into());
                        loaded.insert_raw(ZOOKEEPER_PATH, &Data::EMPTY, open, StatPersisted::default());
                    }
                    loaded.insert_raw(CONFIG_PATH, &data, acl, stat);
                }
            }
        }
        for (id, record) in self.state.sessions() {
            loaded.insert_session(*id, record.clone());
        }
        loaded.last_zxid = zxid;
        self.fire_for_load(&loaded, triggers);
        let count = loaded.node_count();
        self.replace_state(loaded);
        tracing::info!(%zxid, nodes = count, "tree loaded");
        TxnResult::Loaded { nodes: count }
    }

    /// The watches the load fires: a watched node that appears, a watched
    /// child list that grows, and under a recursive watch every new node.
    fn fire_for_load(&self, loaded: &TreeState, triggers: &mut Vec<Trigger>) {
        let recursive = self.watches.recursive_paths();
        for path in self.watches.watched_paths() {
            let (before, after) = (self.state.node(&path), loaded.node(&path));
            match (before, after) {
                (None, Some(_)) => triggers.push(Trigger { path, event_type: EventType::NodeCreated }),
                (Some(b), Some(a)) if a.num_children() != b.num_children() => {
                    triggers.push(Trigger { path, event_type: EventType::NodeChildrenChanged })
                }
                _ => {}
            }
        }
        if recursive.is_empty() {
            return;
        }
        let under = |path: &str| {
            recursive.iter().any(|r| {
                r == "/" || path == r || path.strip_prefix(r.as_str()).is_some_and(|rest| rest.starts_with('/'))
            })
        };
        let fired: BTreeSet<String> = triggers.iter().map(|t| t.path.clone()).collect();
        for (path, _) in loaded.nodes() {
            if self.state.node(path).is_none() && under(path) && !fired.contains(path) {
                triggers.push(Trigger { path: path.to_string(), event_type: EventType::NodeCreated });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::watch::AddWatchMode;
    use crate::txn::Txn;

    const MINE: SessionId = SessionId(0x0100_0000_0000_0001);
    const THEIRS: SessionId = SessionId(0x0900_0000_0000_0002);

    fn txn(body: TxnBody) -> Txn {
        Txn { session: SessionId::NONE, cxid: 0, time_ms: 5, body }
    }

    fn create(path: &str, owner: i64) -> TxnBody {
        TxnBody::Create {
            path: path.into(),
            data: Data::from(b"v"),
            acl: Acl::open_unsafe(),
            ephemeral_owner: owner,
            parent_cversion: 1,
        }
    }

    /// A tree as another ensemble wrote it, in epoch 7, as snapshot chunks.
    fn other_tree() -> Vec<Bytes> {
        let mut t = DataTree::new();
        let session = TxnBody::CreateSession { timeout_ms: 6000, password: Bytes::from_static(b"pw") };
        t.apply(Zxid::new(7, 1), &Txn { session: THEIRS, ..txn(session) });
        t.apply(Zxid::new(7, 2), &txn(create("/app", 0)));
        t.apply(Zxid::new(7, 3), &txn(create("/app/config", 0)));
        t.apply(Zxid::new(7, 4), &txn(create("/app/lock", THEIRS.0)));
        snapshot::to_chunks(t.state(), 64).0
    }

    /// An ensemble's fresh tree, in epoch 2, with a session of its own.
    fn ours() -> DataTree {
        let mut t = DataTree::new();
        let session = TxnBody::CreateSession { timeout_ms: 4000, password: Bytes::from_static(b"me") };
        t.apply(Zxid::new(2, 1), &Txn { session: MINE, ..txn(session) });
        t
    }

    #[test]
    fn a_load_brings_every_node_with_its_stat_and_keeps_our_sessions_and_configuration() {
        let chunks = other_tree();
        let source = snapshot::from_chunks(chunks.iter().map(|c| c.as_ref())).unwrap();
        let mut t = ours();
        let config_before = t.state().node(CONFIG_PATH).map(|n| (n.data_value(), n.stat()));
        let applied = t.apply(Zxid::new(2, 2), &txn(TxnBody::Load { chunks, epoch: 7 }));
        assert_eq!(applied.result, TxnResult::Loaded { nodes: source.node_count() });
        for path in ["/app", "/app/config", "/app/lock"] {
            let (a, b) = (t.state().node(path).unwrap(), source.node(path).unwrap());
            assert_eq!((a.stat(), a.data_value()), (b.stat(), b.data_value()), "{path}");
        }
        assert_eq!(t.state().ephemerals_of(THEIRS), vec!["/app/lock".to_string()]);
        assert!(t.state().session(THEIRS).is_some() && t.state().session(MINE).is_some());
        assert_eq!(t.state().node(CONFIG_PATH).map(|n| (n.data_value(), n.stat())), config_before);
        assert_eq!(t.last_zxid(), Zxid::new(2, 2));
        assert_eq!(t.state().highest_epoch(), 7, "the loaded history's epoch shows");
    }

    #[test]
    fn a_load_into_a_tree_with_nodes_changes_nothing() {
        let mut t = ours();
        t.apply(Zxid::new(2, 2), &txn(create("/mine", 0)));
        let before = t.state().digest_in_full();
        let applied = t.apply(Zxid::new(2, 3), &txn(TxnBody::Load { chunks: other_tree(), epoch: 7 }));
        assert_eq!(applied.result, TxnResult::Error(ErrorCode::NotEmpty));
        assert_eq!(t.state().digest_in_full(), before);
        let refusal = check_load(t.state(), &other_tree()).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "the ensemble's tree is not empty (1 node(s) such as /mine); a tree loads only into an empty one"
        );
    }

    #[test]
    fn a_load_is_refused_for_a_clashing_session_or_unreadable_bytes() {
        let mut t = DataTree::new();
        let session = TxnBody::CreateSession { timeout_ms: 4000, password: Bytes::from_static(b"x") };
        t.apply(Zxid::new(2, 1), &Txn { session: THEIRS, ..txn(session) });
        assert_eq!(check_load(t.state(), &other_tree()).unwrap_err(), LoadRefusal::SessionClash(THEIRS.0));
        let garbage = vec![Bytes::from_static(b"\0\0\0\x03abc")];
        assert!(matches!(check_load(t.state(), &garbage), Err(LoadRefusal::Unreadable(_))));
        let applied = t.apply(Zxid::new(2, 2), &txn(TxnBody::Load { chunks: garbage, epoch: 0 }));
        assert_eq!(applied.result, TxnResult::Error(ErrorCode::BadArguments));
    }

    #[test]
    fn a_load_fires_the_watches_its_nodes_concern() {
        let mut t = ours();
        t.watches_mut().add_exists("/app/config", MINE);
        t.watches_mut().add_exists("/nowhere", MINE);
        t.watches_mut().add_child("/", MINE);
        t.watches_mut().add_persistent("/app", AddWatchMode::PersistentRecursive, SessionId(3));
        let applied = t.apply(Zxid::new(2, 2), &txn(TxnBody::Load { chunks: other_tree(), epoch: 7 }));
        let mut seen: Vec<(SessionId, i32, String)> =
            applied.events.iter().map(|(s, e)| (*s, e.event_type.code(), e.path.clone())).collect();
        seen.sort();
        let (created, children) = (EventType::NodeCreated.code(), EventType::NodeChildrenChanged.code());
        let mut want = vec![
            (MINE, children, "/".to_string()),
            (MINE, created, "/app/config".to_string()),
            (SessionId(3), created, "/app".to_string()),
            (SessionId(3), created, "/app/config".to_string()),
            (SessionId(3), created, "/app/lock".to_string()),
        ];
        want.sort();
        assert_eq!(seen, want);
        assert!(t.watches().contains("/nowhere", crate::tree::watch::WatcherType::Data, MINE), "still armed");
    }
}
