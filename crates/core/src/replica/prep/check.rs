//! Turning a client write into a transaction (ZooKeeper's `PrepRequestProcessor`).
//!
//! Runs on the leader only. A write is validated against the committed tree
//! *plus* every transaction proposed but not yet committed ("outstanding
//! changes"), so two pipelined creates of one path cannot both succeed and a
//! sequential name is never handed out twice. The result is a fully resolved
//! [`TxnBody`]; on failure, the error code that will be replicated instead.
//!
//! The stateless checks (path syntax, data size, ACL syntax, TTL range) are
//! also exposed on their own (`stateless`, re-exported here), so the replica
//! a client talks to can reject a malformed request at once with a precise
//! reason, without a round trip.

mod stateless;

use crate::acl::{self, perms, Acl, Id};
use crate::error::{ErrorCode, ZkError};
use crate::ids::{SessionId, Zxid};
use crate::op::Op;
use crate::tree::path;
use crate::tree::stat::{EphemeralType, StatPersisted, CONTAINER_EPHEMERAL_OWNER};
use crate::tree::{is_special_path, TreeState};
use crate::txn::TxnBody;
use rustc_hash::FxHashMap;
use stateless::{bad_path, check_data, check_parent_path, check_ttl, fixup_acl, new_version};
pub use stateless::{validate, Limits};
use std::collections::VecDeque;
use std::sync::Arc;

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
mod tests;
