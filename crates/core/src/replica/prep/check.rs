//! Turning a client write into a transaction (ZooKeeper's `PrepRequestProcessor`).
//!
//! Runs on the leader only. A write is validated against the committed tree
//! *plus* every transaction proposed but not yet committed ("outstanding
//! changes"), so two pipelined creates of one path cannot both succeed and a
//! sequential name is never handed out twice. The result is a fully resolved
//! [`TxnBody`]; on failure, the error code that will be replicated instead.
//!
//! The stateless checks (path syntax, data size, ACL syntax, TTL range) are
//! also exposed on their own, so the replica a client talks to can reject a
//! malformed request at once with a precise reason, without a round trip.

use crate::acl::{self, perms, Acl, Id};
use crate::error::{ErrorCode, ZkError};
use crate::ids::{SessionId, Zxid};
use crate::op::Op;
use crate::tree::path;
use crate::tree::stat::{CreateMode, EphemeralType, StatPersisted, CONTAINER_EPHEMERAL_OWNER, MAX_TTL_MS};
use crate::tree::{is_special_path, TreeState};
use crate::txn::TxnBody;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::Arc;

/// Limits a request is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest node data accepted, in bytes (ZooKeeper's jute.maxbuffer).
    pub max_data_bytes: usize,
    /// Most operations in one multi or multiRead.
    pub max_multi_ops: usize,
    /// Most paths one session may watch.
    pub max_watches_per_session: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_data_bytes: 1024 * 1024, max_multi_ops: 10_000, max_watches_per_session: 100_000 }
    }
}

/// Who is asking, and the zxid and time the transaction will carry.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The calling session.
    pub session: SessionId,
    /// The session's identities (ip, digest, …).
    pub identities: &'a [Id],
    /// The zxid the transaction gets.
    pub zxid: Zxid,
    /// The leader's clock, ms.
    pub time_ms: i64,
    /// Size limits.
    pub limits: Limits,
}

/// A node as the outstanding changes see it.
#[derive(Clone, Debug)]
struct PendingNode {
    stat: StatPersisted,
    num_children: usize,
    acl: Arc<[Acl]>,
}

/// The outstanding changes: every path touched by a proposed, uncommitted transaction.
#[derive(Debug, Default)]
pub struct PendingChanges {
    /// The latest pending view per path (`None`: deleted).
    /// (Each path is one shared allocation for the map, the order and a
    /// multi's journal: every write puts one or two.)
    by_path: FxHashMap<Arc<str>, (Zxid, Option<PendingNode>)>,
    /// Paths in proposal order, to retire them once committed.
    order: VecDeque<(Zxid, Arc<str>)>,
}

fn bad_path(path: &str, err: path::PathError) -> ZkError {
    ZkError::with_reason(ErrorCode::BadArguments, path, format!("invalid path: {err}"))
}

/// The path syntax ZooKeeper checks before it looks up the parent of a
/// create or delete (`validatePathForCreate`, `getParentPathAndValidate`): a
/// '/' somewhere and no NUL. The full rules come after the parent lookup for a
/// create, so a create under a missing parent is NoNode even when its path is
/// malformed too; a delete never checks them (a malformed path names no node:
/// NoNode), as in ZooKeeper.
fn check_parent_path(path: &str) -> Result<(), ZkError> {
    if !path.contains('/') || path.contains('\0') {
        // The full rules name the precise fault (both cases break one of them).
        return Err(match path::validate(path, false) {
            Err(e) => bad_path(path, e),
            Ok(()) => ZkError::with_reason(ErrorCode::BadArguments, path, "invalid path"),
        });
    }
    Ok(())
}

fn check_data(path: &str, data: &[u8], limits: Limits) -> Result<(), ZkError> {
    if data.len() > limits.max_data_bytes {
        return Err(ZkError::with_reason(
            ErrorCode::BadArguments,
            path,
            format!("data is {} bytes, over the limit of {} bytes", data.len(), limits.max_data_bytes),
        ));
    }
    Ok(())
}

fn check_ttl(path: &str, mode: CreateMode, ttl_ms: i64) -> Result<(), ZkError> {
    if mode.is_ttl() {
        if ttl_ms <= 0 || ttl_ms > MAX_TTL_MS {
            return Err(ZkError::with_reason(
                ErrorCode::BadArguments,
                path,
                format!("ttl must be in 1..={MAX_TTL_MS} ms, got {ttl_ms}"),
            ));
        }
    } else if ttl_ms >= 0 {
        return Err(ZkError::with_reason(
            ErrorCode::BadArguments,
            path,
            format!("a ttl is not valid for mode {mode:?}"),
        ));
    }
    Ok(())
}

fn fixup_acl(path: &str, acl: &[Acl], identities: &[Id]) -> Result<Vec<Acl>, ZkError> {
    acl::fixup(acl, identities).ok_or_else(|| {
        let reason = if acl.is_empty() {
            "the ACL is empty".to_string()
        } else if acl.iter().any(|a| a.id.scheme == "auth") && !identities.iter().any(|i| i.scheme == "digest") {
            "the auth scheme needs an authenticated identity (addauth first)".to_string()
        } else {
            "an entry has an unknown scheme or a malformed id".to_string()
        };
        ZkError::with_reason(ErrorCode::InvalidAcl, path, reason)
    })
}

fn new_version(current: i32, expected: i32, path: &str) -> Result<i32, ZkError> {
    if expected != -1 && expected != current {
        return Err(ZkError::with_reason(
            ErrorCode::BadVersion,
            path,
            format!("expected version {expected}, node is at {current}"),
        ));
    }
    // Skip -1 on wrap-around: it means "any" and a client could not name it (ZOOKEEPER-4743).
    let next = current.wrapping_add(1);
    Ok(if next == -1 { 0 } else { next })
}

/// The checks that need no tree: path, data size, TTL, ACL syntax. Run by the
/// replica the client talks to for single writes, and again by the leader.
pub fn validate(op: &Op, identities: &[Id], limits: Limits) -> Result<(), ZkError> {
    match op {
        // Only what ZooKeeper checks before any lookup: the rest needs the tree.
        Op::Create { path, data, acl, mode, ttl_ms } => {
            check_ttl(path, *mode, *ttl_ms)?;
            check_parent_path(path)?;
            check_data(path, data, limits)?;
            fixup_acl(path, acl, identities)?;
        }
        Op::Delete { path, .. } => {
            check_parent_path(path)?;
            if is_special_path(path) {
                return Err(ZkError::with_reason(ErrorCode::BadArguments, path, "this node cannot be deleted"));
            }
        }
        Op::SetData { path, data, .. } => {
            path::validate(path, false).map_err(|e| bad_path(path, e))?;
            check_data(path, data, limits)?;
        }
        Op::SetAcl { path, acl, .. } => {
            path::validate(path, false).map_err(|e| bad_path(path, e))?;
            fixup_acl(path, acl, identities)?;
        }
        Op::Check { path, .. } => {
            path::validate(path, false).map_err(|e| bad_path(path, e))?;
        }
        Op::Multi(ops) | Op::MultiRead(ops) if ops.len() > limits.max_multi_ops => {
            return Err(ZkError::with_reason(
                ErrorCode::BadArguments,
                "",
                format!(
                    "a multi of {} operations; at most {} are allowed (max_multi_ops)",
                    ops.len(),
                    limits.max_multi_ops
                ),
            ));
        }
        Op::Multi(ops) => {
            for op in ops {
                if !matches!(op, Op::Create { .. } | Op::Delete { .. } | Op::SetData { .. } | Op::Check { .. }) {
                    return Err(ZkError::with_reason(
                        ErrorCode::BadArguments,
                        op.path().unwrap_or(""),
                        "multi accepts only create, delete, setData and check",
                    ));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

impl PendingChanges {
    /// No outstanding changes.
    pub fn new() -> PendingChanges {
        PendingChanges::default()
    }

    /// Forgets everything (the leader lost its role).
    pub fn clear(&mut self) {
        self.by_path.clear();
        self.order.clear();
    }

    /// Number of paths with outstanding changes.
    pub fn len(&self) -> usize {
        self.by_path.len()
    }

    /// Whether nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }

    /// Drops the records of transactions up to `committed`: the tree has them now.
    pub fn retire(&mut self, committed: Zxid) {
        while let Some((zxid, _)) = self.order.front() {
            if *zxid > committed {
                break;
            }
            let (zxid, path) = self.order.pop_front().expect("front exists");
            if self.by_path.get(&path).is_some_and(|(z, _)| *z == zxid) {
                self.by_path.remove(&path);
            }
        }
    }

    fn lookup(&self, tree: &TreeState, path: &str) -> Option<PendingNode> {
        if let Some((_, pending)) = self.by_path.get(path) {
            return pending.clone();
        }
        tree.node(path).map(|n| PendingNode {
            stat: n.persisted(),
            num_children: n.num_children(),
            acl: n.acl().clone(),
        })
    }

    fn put(&mut self, zxid: Zxid, path: &str, node: Option<PendingNode>, journal: &mut Vec<JournalEntry>) {
        let path: Arc<str> = Arc::from(path);
        let previous = self.by_path.insert(path.clone(), (zxid, node));
        journal.push((path.clone(), previous));
        self.order.push_back((zxid, path));
    }

    fn rollback(&mut self, journal: Vec<JournalEntry>) {
        for (path, previous) in journal.into_iter().rev() {
            match previous {
                Some(prev) => {
                    self.by_path.insert(path, prev);
                }
                None => {
                    self.by_path.remove(&path);
                }
            }
            self.order.pop_back();
        }
    }

    /// Prepares a client write: the transaction body to propose, or the
    /// error to replicate in its place. A failed multi is not an error: it
    /// becomes [`TxnBody::MultiError`] with a code per op.
    pub fn prepare(&mut self, tree: &TreeState, ctx: &Context, op: &Op) -> Result<TxnBody, ZkError> {
        match op {
            Op::Multi(ops) => Ok(self.prepare_multi(tree, ctx, ops)),
            Op::CloseSession => Ok(self.prepare_close_session(tree, ctx.session, ctx.zxid)),
            single => {
                let mut journal = Vec::new();
                self.prepare_single(tree, ctx, single, &mut journal)
            }
        }
    }

    fn prepare_multi(&mut self, tree: &TreeState, ctx: &Context, ops: &[Op]) -> TxnBody {
        let mut journal = Vec::new();
        let mut bodies = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let outcome = if matches!(op, Op::Create { .. } | Op::Delete { .. } | Op::SetData { .. } | Op::Check { .. })
            {
                self.prepare_single(tree, ctx, op, &mut journal)
            } else {
                Err(ZkError::new(ErrorCode::BadArguments, op.path().unwrap_or("")))
            };
            match outcome {
                Ok(body) => bodies.push(body),
                Err(err) => {
                    self.rollback(journal);
                    let mut codes = vec![ErrorCode::Ok; i];
                    codes.push(err.code);
                    codes.resize(ops.len(), ErrorCode::RuntimeInconsistency);
                    return TxnBody::MultiError(codes);
                }
            }
        }
        TxnBody::Multi(bodies)
    }

    fn node_or_err(&self, tree: &TreeState, path: &str) -> Result<PendingNode, ZkError> {
        self.lookup(tree, path).ok_or_else(|| ZkError::new(ErrorCode::NoNode, path))
    }

    fn require(node: &PendingNode, perm: i32, ctx: &Context, path: &str) -> Result<(), ZkError> {
        if acl::permits(&node.acl, perm, ctx.identities) {
            Ok(())
        } else {
            Err(ZkError::new(ErrorCode::NoAuth, path))
        }
    }

    fn prepare_single(
        &mut self,
        tree: &TreeState,
        ctx: &Context,
        op: &Op,
        journal: &mut Vec<JournalEntry>,
    ) -> Result<TxnBody, ZkError> {
        let zxid = ctx.zxid;
        match op {
            Op::Create { path: requested, data, acl: requested_acl, mode, ttl_ms } => {
                // ZooKeeper's order: TTL, a parent to look up, the ACL, the parent
                // (NoNode, NoAuth), then the full path with its sequential suffix.
                check_ttl(requested, *mode, *ttl_ms)?;
                check_parent_path(requested)?;
                check_data(requested, data, ctx.limits)?;
                let acl = fixup_acl(requested, requested_acl, ctx.identities)?;
                // For a sequential "/a/" the parent is "/a", which `parent` yields too.
                let parent_path = path::parent(requested).to_string();
                let parent = self.node_or_err(tree, &parent_path).map_err(|_| {
                    ZkError::with_reason(
                        ErrorCode::NoNode,
                        requested.as_str(),
                        format!("parent {parent_path} does not exist"),
                    )
                })?;
                Self::require(&parent, perms::CREATE, ctx, requested)?;
                let path = if mode.is_sequential() {
                    format!("{requested}{}", path::sequential_suffix(parent.stat.cversion))
                } else {
                    requested.clone()
                };
                path::validate(&path, false).map_err(|e| bad_path(&path, e))?;
                if self.lookup(tree, &path).is_some() {
                    return Err(ZkError::new(ErrorCode::NodeExists, path));
                }
                if EphemeralType::of(parent.stat.ephemeral_owner) == EphemeralType::Normal {
                    return Err(ZkError::new(ErrorCode::NoChildrenForEphemerals, path));
                }
                let parent_cversion = parent.stat.cversion.wrapping_add(1);
                let ephemeral_owner = if mode.is_container() {
                    CONTAINER_EPHEMERAL_OWNER
                } else if mode.is_ttl() {
                    EphemeralType::ttl_owner(*ttl_ms)
                } else if mode.is_ephemeral() {
                    ctx.session.0
                } else {
                    0
                };
                let mut parent_after = parent;
                parent_after.num_children += 1;
                parent_after.stat.cversion = parent_cversion;
                parent_after.stat.pzxid = zxid.as_i64();
                self.put(zxid, &parent_path, Some(parent_after), journal);
                let node = PendingNode {
                    stat: StatPersisted::created(zxid.as_i64(), ctx.time_ms, ephemeral_owner),
                    num_children: 0,
                    acl: acl.clone().into(),
                };
                self.put(zxid, &path, Some(node), journal);
                Ok(TxnBody::Create { path, data: data.clone(), acl, ephemeral_owner, parent_cversion })
            }
            Op::Delete { path, version } => {
                check_parent_path(path)?;
                if is_special_path(path) {
                    return Err(ZkError::with_reason(ErrorCode::BadArguments, path, "this node cannot be deleted"));
                }
                let parent_path = path::parent(path);
                let parent = self.node_or_err(tree, parent_path)?;
                Self::require(&parent, perms::DELETE, ctx, path)?;
                let node = self.node_or_err(tree, path)?;
                new_version(node.stat.version, *version, path)?;
                if node.num_children > 0 {
                    return Err(ZkError::new(ErrorCode::NotEmpty, path));
                }
                let mut parent_after = parent;
                parent_after.num_children -= 1;
                parent_after.stat.pzxid = zxid.as_i64();
                self.put(zxid, parent_path, Some(parent_after), journal);
                self.put(zxid, path, None, journal);
                Ok(TxnBody::Delete { path: path.clone() })
            }
            Op::SetData { path, data, version } => {
                path::validate(path, false).map_err(|e| bad_path(path, e))?;
                check_data(path, data, ctx.limits)?;
                let mut node = self.node_or_err(tree, path)?;
                Self::require(&node, perms::WRITE, ctx, path)?;
                let version = new_version(node.stat.version, *version, path)?;
                node.stat.version = version;
                node.stat.mtime = ctx.time_ms;
                node.stat.mzxid = zxid.as_i64();
                self.put(zxid, path, Some(node), journal);
                Ok(TxnBody::SetData { path: path.clone(), data: data.clone(), version })
            }
            Op::SetAcl { path, acl, version } => {
                path::validate(path, false).map_err(|e| bad_path(path, e))?;
                let acl = fixup_acl(path, acl, ctx.identities)?;
                let mut node = self.node_or_err(tree, path)?;
                Self::require(&node, perms::ADMIN, ctx, path)?;
                let version = new_version(node.stat.aversion, *version, path)?;
                node.stat.aversion = version;
                node.acl = acl.clone().into();
                self.put(zxid, path, Some(node), journal);
                Ok(TxnBody::SetAcl { path: path.clone(), acl, version })
            }
            Op::Check { path, version } => {
                path::validate(path, false).map_err(|e| bad_path(path, e))?;
                let node = self.node_or_err(tree, path)?;
                Self::require(&node, perms::READ, ctx, path)?;
                new_version(node.stat.version, *version, path)?;
                Ok(TxnBody::Check { path: path.clone() })
            }
            other => {
                Err(ZkError::with_reason(ErrorCode::BadArguments, other.path().unwrap_or(""), "not a write operation"))
            }
        }
    }

    /// Prepares the end of a session: its ephemerals, as the tree plus the
    /// outstanding changes see them, are deleted with it.
    pub fn prepare_close_session(&mut self, tree: &TreeState, session: SessionId, zxid: Zxid) -> TxnBody {
        let mut paths: std::collections::BTreeSet<String> = tree.ephemerals_of(session).into_iter().collect();
        for (path, (_, pending)) in &self.by_path {
            match pending {
                None => {
                    paths.remove(&**path);
                }
                Some(node) if node.stat.ephemeral_owner == session.0 => {
                    paths.insert(path.to_string());
                }
                Some(_) => {}
            }
        }
        let mut journal = Vec::new();
        for path in &paths {
            let parent_path = path::parent(path);
            if let Some(mut parent) = self.lookup(tree, parent_path) {
                parent.num_children = parent.num_children.saturating_sub(1);
                parent.stat.pzxid = zxid.as_i64();
                self.put(zxid, parent_path, Some(parent), &mut journal);
            }
            self.put(zxid, path, None, &mut journal);
        }
        TxnBody::CloseSession { paths: paths.into_iter().collect() }
    }

    /// Prepares the removal of a container or TTL node by the server, if it is
    /// still removable once outstanding changes are counted.
    pub fn prepare_reap(&mut self, tree: &TreeState, path: &str, zxid: Zxid, now_ms: i64) -> Option<TxnBody> {
        let node = self.lookup(tree, path)?;
        if node.num_children > 0 {
            return None;
        }
        let removable = match EphemeralType::of(node.stat.ephemeral_owner) {
            EphemeralType::Container => node.stat.cversion > 0,
            EphemeralType::Ttl(ttl) => now_ms.saturating_sub(node.stat.mtime) > ttl,
            _ => false,
        };
        if !removable {
            return None;
        }
        let parent_path = path::parent(path);
        let mut journal = Vec::new();
        if let Some(mut parent) = self.lookup(tree, parent_path) {
            parent.num_children = parent.num_children.saturating_sub(1);
            parent.stat.pzxid = zxid.as_i64();
            self.put(zxid, parent_path, Some(parent), &mut journal);
        }
        self.put(zxid, path, None, &mut journal);
        Some(TxnBody::Delete { path: path.to_string() })
    }
}

type JournalEntry = (Arc<str>, Option<(Zxid, Option<PendingNode>)>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::DataTree;
    use crate::txn::Txn;
    use bytes::Bytes;

    const S: SessionId = SessionId(0x0100_0000_0000_0001);

    struct Leader {
        tree: DataTree,
        pending: PendingChanges,
        counter: u32,
        identities: Vec<Id>,
    }

    impl Leader {
        fn new() -> Leader {
            Leader { tree: DataTree::new(), pending: PendingChanges::new(), counter: 0, identities: vec![] }
        }

        fn next_ctx(&mut self) -> Zxid {
            self.counter += 1;
            Zxid::new(1, self.counter)
        }

        /// Prepares without committing (pipelined proposals).
        fn propose(&mut self, op: Op) -> (Zxid, TxnBody) {
            let zxid = self.next_ctx();
            let ctx =
                Context { session: S, identities: &self.identities, zxid, time_ms: 1000, limits: Limits::default() };
            let body = match self.pending.prepare(self.tree.state(), &ctx, &op) {
                Ok(body) => body,
                Err(e) => TxnBody::Error(e.code),
            };
            (zxid, body)
        }

        fn commit(&mut self, zxid: Zxid, body: TxnBody) {
            self.tree.apply(zxid, &Txn { session: S, cxid: 0, time_ms: 1000, body });
            self.pending.retire(zxid);
        }

        fn run(&mut self, op: Op) -> TxnBody {
            let (zxid, body) = self.propose(op);
            self.commit(zxid, body.clone());
            body
        }
    }

    fn create(path: &str, mode: CreateMode) -> Op {
        Op::Create { path: path.into(), data: Bytes::new().into(), acl: Acl::open_unsafe(), mode, ttl_ms: -1 }
    }

    #[test]
    fn pipelined_creates_of_one_path_conflict() {
        let mut l = Leader::new();
        let (z1, b1) = l.propose(create("/a", CreateMode::Persistent));
        let (_, b2) = l.propose(create("/a", CreateMode::Persistent));
        assert!(matches!(b1, TxnBody::Create { .. }));
        assert_eq!(b2, TxnBody::Error(ErrorCode::NodeExists));
        l.commit(z1, b1);
        assert!(l.pending.is_empty());
    }

    #[test]
    fn pipelined_sequential_creates_get_distinct_names() {
        let mut l = Leader::new();
        l.run(create("/q", CreateMode::Persistent));
        let (_, a) = l.propose(create("/q/n-", CreateMode::PersistentSequential));
        let (_, b) = l.propose(create("/q/n-", CreateMode::PersistentSequential));
        let name = |b: &TxnBody| match b {
            TxnBody::Create { path, .. } => path.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(name(&a), "/q/n-0000000000");
        assert_eq!(name(&b), "/q/n-0000000001");
    }

    #[test]
    fn create_checks_in_zookeeper_order() {
        let mut l = Leader::new();
        // Missing parent.
        assert_eq!(l.run(create("/x/y", CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoNode));
        // Invalid ACL wins over a missing parent (fixupACL runs first).
        let op = Op::Create {
            path: "/x/y".into(),
            data: Bytes::new().into(),
            acl: vec![],
            mode: CreateMode::Persistent,
            ttl_ms: -1,
        };
        assert_eq!(l.run(op), TxnBody::Error(ErrorCode::InvalidAcl));
        // Children of ephemerals.
        l.run(create("/e", CreateMode::Ephemeral));
        assert_eq!(l.run(create("/e/c", CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoChildrenForEphemerals));
        // TTL rules.
        let ttl = |mode, ttl_ms| Op::Create {
            path: "/t".into(),
            data: Bytes::new().into(),
            acl: Acl::open_unsafe(),
            mode,
            ttl_ms,
        };
        assert_eq!(l.run(ttl(CreateMode::PersistentWithTtl, 0)), TxnBody::Error(ErrorCode::BadArguments));
        assert_eq!(l.run(ttl(CreateMode::Persistent, 100)), TxnBody::Error(ErrorCode::BadArguments));
        assert!(matches!(l.run(ttl(CreateMode::PersistentWithTtl, 100)), TxnBody::Create { .. }));
    }

    #[test]
    fn malformed_paths_answer_as_zookeeper() {
        let mut l = Leader::new();
        l.run(create("/a", CreateMode::Persistent));
        // The parent is looked up before the full path is checked: "/a//x" has
        // the parent "/a/", which does not exist.
        for path in ["/a//x", "/a/./x", "/a/../x", "/nope/./x"] {
            assert_eq!(l.run(create(path, CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoNode), "{path}");
        }
        // With an existing parent, the full rules apply.
        for path in ["/a/", "/a/.", "/a/\u{1}x"] {
            assert_eq!(l.run(create(path, CreateMode::Persistent)), TxnBody::Error(ErrorCode::BadArguments), "{path}");
        }
        // No '/' at all, or a NUL: refused before any lookup, also by the replica.
        for path in ["a", "", "/a/x\0"] {
            assert_eq!(l.run(create(path, CreateMode::Persistent)), TxnBody::Error(ErrorCode::BadArguments), "{path}");
            let err = validate(&create(path, CreateMode::Persistent), &[], Limits::default()).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadArguments);
        }
        assert!(validate(&create("/a//x", CreateMode::Persistent), &[], Limits::default()).is_ok());
        // A delete names no node with a malformed path: NoNode, unless ZooKeeper's
        // own checks (no '/', NUL, special nodes) refuse it first.
        assert_eq!(l.run(Op::Delete { path: "/a/".into(), version: -1 }), TxnBody::Error(ErrorCode::NoNode));
        assert_eq!(l.run(Op::Delete { path: "/a//x".into(), version: -1 }), TxnBody::Error(ErrorCode::NoNode));
        assert_eq!(l.run(Op::Delete { path: "a".into(), version: -1 }), TxnBody::Error(ErrorCode::BadArguments));
        assert!(validate(&Op::Delete { path: "/a/".into(), version: -1 }, &[], Limits::default()).is_ok());
    }

    #[test]
    fn delete_checks_version_children_and_special_nodes() {
        let mut l = Leader::new();
        l.run(create("/a", CreateMode::Persistent));
        l.run(create("/a/b", CreateMode::Persistent));
        assert_eq!(l.run(Op::Delete { path: "/a".into(), version: -1 }), TxnBody::Error(ErrorCode::NotEmpty));
        assert_eq!(l.run(Op::Delete { path: "/a/b".into(), version: 3 }), TxnBody::Error(ErrorCode::BadVersion));
        assert_eq!(
            l.run(Op::Delete { path: "/zookeeper".into(), version: -1 }),
            TxnBody::Error(ErrorCode::BadArguments)
        );
        assert_eq!(l.run(Op::Delete { path: "/nope".into(), version: -1 }), TxnBody::Error(ErrorCode::NoNode));
        assert!(matches!(l.run(Op::Delete { path: "/a/b".into(), version: 0 }), TxnBody::Delete { .. }));
    }

    #[test]
    fn a_multi_over_the_op_limit_is_refused_before_any_lookup() {
        let limits = Limits { max_multi_ops: 3, ..Limits::default() };
        let check = |path: &str| Op::Check { path: path.into(), version: -1 };
        let ops: Vec<Op> = (0..4).map(|i| check(&format!("/n{i}"))).collect();
        let err = validate(&Op::Multi(ops.clone()), &[], limits).unwrap_err();
        assert_eq!(err.code, ErrorCode::BadArguments);
        assert!(err.reason.contains("max_multi_ops"), "{}", err.reason);
        assert!(validate(&Op::MultiRead(ops[..3].to_vec()), &[], limits).is_ok());
        assert!(validate(&Op::MultiRead(ops), &[], limits).is_err());
    }

    #[test]
    fn failed_multi_rolls_back_its_pending_changes() {
        let mut l = Leader::new();
        let multi = Op::Multi(vec![
            create("/m", CreateMode::Persistent),
            Op::SetData { path: "/nope".into(), data: Bytes::new().into(), version: -1 },
            create("/m2", CreateMode::Persistent),
        ]);
        let (_, body) = l.propose(multi);
        assert_eq!(body, TxnBody::MultiError(vec![ErrorCode::Ok, ErrorCode::NoNode, ErrorCode::RuntimeInconsistency]));
        // /m was not really created: a following create must succeed.
        let (_, next) = l.propose(create("/m", CreateMode::Persistent));
        assert!(matches!(next, TxnBody::Create { .. }), "{next:?}");
    }

    #[test]
    fn multi_sees_its_own_earlier_ops() {
        let mut l = Leader::new();
        let multi = Op::Multi(vec![
            create("/m", CreateMode::Persistent),
            create("/m/child", CreateMode::Persistent),
            Op::SetData { path: "/m".into(), data: Bytes::from_static(b"x").into(), version: 0 },
            Op::Check { path: "/m".into(), version: 1 },
        ]);
        assert!(matches!(l.run(multi), TxnBody::Multi(ops) if ops.len() == 4));
        assert_eq!(l.tree.state().node("/m").unwrap().data(), b"x");
    }

    #[test]
    fn close_session_collects_committed_and_pending_ephemerals() {
        let mut l = Leader::new();
        l.run(create("/e1", CreateMode::Ephemeral));
        let _ = l.propose(create("/e2", CreateMode::Ephemeral));
        let _ = l.propose(Op::Delete { path: "/e1".into(), version: -1 });
        let (_, body) = l.propose(Op::CloseSession);
        assert_eq!(body, TxnBody::CloseSession { paths: vec!["/e2".into()] });
    }

    #[test]
    fn version_wraps_past_minus_one() {
        assert_eq!(new_version(-2, -1, "/a"), Ok(0));
        assert_eq!(new_version(i32::MAX, -1, "/a"), Ok(i32::MIN));
        assert_eq!(new_version(3, 3, "/a"), Ok(4));
    }

    #[test]
    fn acl_is_enforced() {
        let mut l = Leader::new();
        let ro = Op::Create {
            path: "/ro".into(),
            data: Bytes::new().into(),
            acl: Acl::read_unsafe(),
            mode: CreateMode::Persistent,
            ttl_ms: -1,
        };
        l.run(ro);
        assert_eq!(l.run(create("/ro/c", CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoAuth));
        assert_eq!(
            l.run(Op::SetData { path: "/ro".into(), data: Bytes::new().into(), version: -1 }),
            TxnBody::Error(ErrorCode::NoAuth)
        );
        // Digest: only the authenticated user passes.
        let alice = Id::new("digest", acl::digest_id("alice:pw").unwrap());
        l.identities = vec![alice];
        let op = Op::Create {
            path: "/mine".into(),
            data: Bytes::new().into(),
            acl: Acl::creator_all(),
            mode: CreateMode::Persistent,
            ttl_ms: -1,
        };
        assert!(matches!(l.run(op), TxnBody::Create { .. }));
        l.identities = vec![];
        assert_eq!(
            l.run(Op::SetData { path: "/mine".into(), data: Bytes::new().into(), version: -1 }),
            TxnBody::Error(ErrorCode::NoAuth)
        );
    }

    #[test]
    fn stateless_validation_gives_reasons() {
        let limits = Limits { max_data_bytes: 4, ..Limits::default() };
        let op = Op::SetData { path: "/a".into(), data: Bytes::from_static(b"12345").into(), version: -1 };
        let err = validate(&op, &[], limits).unwrap_err();
        assert_eq!(err.code, ErrorCode::BadArguments);
        assert!(err.reason.contains("5 bytes"), "{err}");
        let err = validate(&create("a", CreateMode::Persistent), &[], limits).unwrap_err();
        assert!(err.reason.contains("must start with /"), "{err}");
        // Left to the leader, which answers NoNode or BadArguments depending on
        // whether the parent exists, as ZooKeeper does.
        assert!(validate(&create("/a/", CreateMode::Persistent), &[], limits).is_ok());
        assert!(validate(&create("/a/", CreateMode::PersistentSequential), &[], limits).is_ok());
    }

    #[test]
    fn reaper_respects_pending_children() {
        let mut l = Leader::new();
        l.run(create("/c", CreateMode::Container));
        l.run(create("/c/x", CreateMode::Persistent));
        l.run(Op::Delete { path: "/c/x".into(), version: -1 });
        let zxid = l.next_ctx();
        // A pending child create makes the container not removable.
        let (_, _) = l.propose(create("/c/y", CreateMode::Persistent));
        assert_eq!(l.pending.prepare_reap(l.tree.state(), "/c", zxid, 0), None);
    }
}
