//! Reads and session-local operations, answered from this replica's tree.
//!
//! Permission checks and their order follow ZooKeeper's `FinalRequestProcessor`
//! (e.g. exists checks READ only when the node exists, and leaves its watch
//! even when the answer is NoNode; getData does not).
//!
//! Paths are not validated here, as ZooKeeper does not validate them for
//! reads: a malformed path names no node, so the answer is NoNode (NoWatcher
//! for checkWatches/removeWatches), and addWatch/SetWatches register what they
//! are given. Only exists refuses a NUL character (BADARGUMENTS), as there.
//! The empty path reads the root, as in ZooKeeper (whose tree keys the root
//! under "" too).

use crate::acl::{self, perms, Id};
use crate::error::{ErrorCode, ZkError};
use crate::ids::SessionId;
use crate::op::{MultiItem, Op, OpResult, Reply};
use crate::tree::watch::WatchEvent;
use crate::tree::DataTree;

/// A read's answer plus the watch events it fired at once (SetWatches).
pub struct ReadOutcome {
    /// The reply.
    pub reply: Reply,
    /// Events to deliver before the reply.
    pub events: Vec<WatchEvent>,
}

fn err(code: ErrorCode, path: &str) -> ZkError {
    ZkError::new(code, path)
}

/// The only path check of a ZooKeeper read (exists): no NUL character.
fn check_no_nul(p: &str) -> Result<(), ZkError> {
    if p.contains('\0') {
        return Err(ZkError::with_reason(ErrorCode::BadArguments, p, "invalid path: NUL character"));
    }
    Ok(())
}

/// Whether `identities` may `perm` a node, as the tree's reads ask it.
fn may(perm: i32, identities: &[Id]) -> impl FnOnce(&crate::tree::Znode) -> bool + '_ {
    move |node| acl::permits(node.acl(), perm, identities)
}

fn require(tree: &DataTree, p: &str, perm: i32, identities: &[Id]) -> Result<(), ZkError> {
    let node = tree.state().node(p).ok_or_else(|| err(ErrorCode::NoNode, p))?;
    if may(perm, identities)(node) {
        Ok(())
    } else {
        Err(err(ErrorCode::NoAuth, p))
    }
}

/// ZooKeeper's DataTree keys the root under "" as well as "/", and reads
/// do not validate paths: a read of the empty path reads the root.
fn root_alias(path: &str) -> &str {
    if path.is_empty() {
        "/"
    } else {
        path
    }
}

/// Answers a read or session-local op for `session` with `identities`.
/// `Auth` and writes are not handled here.
pub fn execute(tree: &mut DataTree, session: SessionId, identities: &[Id], op: &Op) -> ReadOutcome {
    let mut events = Vec::new();
    let reply = answer(tree, session, identities, op, &mut events);
    ReadOutcome { reply, events }
}

fn answer(tree: &mut DataTree, session: SessionId, identities: &[Id], op: &Op, events: &mut Vec<WatchEvent>) -> Reply {
    let watcher = |watch: bool| watch.then_some(session);
    match op {
        Op::Exists { path, watch } => {
            let path = root_alias(path);
            check_no_nul(path)?;
            tree.exists(path, watcher(*watch), may(perms::READ, identities))
                .map(OpResult::Stat)
                .map_err(|c| err(c, path))
        }
        Op::GetData { path, watch } => {
            let path = root_alias(path);
            let (data, stat) =
                tree.get_data(path, watcher(*watch), may(perms::READ, identities)).map_err(|c| err(c, path))?;
            Ok(OpResult::Data { data, stat })
        }
        Op::GetChildren { path, watch, with_stat } => {
            let path = root_alias(path);
            require(tree, path, perms::READ, identities)?;
            let (children, stat) = tree.get_children(path, watcher(*watch)).map_err(|c| err(c, path))?;
            Ok(OpResult::Children { children, stat: with_stat.then_some(stat) })
        }
        Op::GetAcl { path } => {
            let path = root_alias(path);
            require(tree, path, perms::READ | perms::ADMIN, identities)?;
            let (list, stat) = tree.get_acl(path).map_err(|c| err(c, path))?;
            let acl = if acl::permits(&list, perms::ADMIN, identities) { list.to_vec() } else { acl::redacted(&list) };
            Ok(OpResult::Acl { acl, stat })
        }
        Op::GetAllChildrenNumber { path } => {
            let path = root_alias(path);
            require(tree, path, perms::READ, identities)?;
            Ok(OpResult::Count(i32::try_from(tree.state().descendant_count(path)).unwrap_or(i32::MAX)))
        }
        Op::GetEphemerals { prefix } => Ok(OpResult::Paths(tree.ephemerals(session, prefix))),
        Op::MultiRead(ops) => {
            let items = ops
                .iter()
                .map(|op| match op {
                    Op::GetData { .. } | Op::GetChildren { .. } => {
                        match answer(tree, session, identities, op, events) {
                            Ok(result) => MultiItem::Ok(result),
                            Err(e) => MultiItem::Err(e.code),
                        }
                    }
                    _ => MultiItem::Err(ErrorCode::BadArguments),
                })
                .collect();
            Ok(OpResult::Multi(items))
        }
        Op::AddWatch { path, mode } => {
            tree.watches_mut().add_persistent(path, *mode, session);
            Ok(OpResult::Empty)
        }
        Op::RemoveWatches { path, kind } => {
            if tree.watches_mut().remove(path, *kind, session) {
                Ok(OpResult::Empty)
            } else {
                Err(err(ErrorCode::NoWatcher, path))
            }
        }
        Op::CheckWatches { path, kind } => {
            if tree.watches().contains(path, *kind, session) {
                Ok(OpResult::Empty)
            } else {
                Err(err(ErrorCode::NoWatcher, path))
            }
        }
        Op::SetWatches { relative_zxid, data, exist, child, persistent, persistent_recursive } => {
            events.extend(tree.set_watches(session, *relative_zxid, data, exist, child));
            for p in persistent {
                tree.watches_mut().add_persistent(p, crate::tree::watch::AddWatchMode::Persistent, session);
            }
            for p in persistent_recursive {
                tree.watches_mut().add_persistent(p, crate::tree::watch::AddWatchMode::PersistentRecursive, session);
            }
            Ok(OpResult::Empty)
        }
        Op::WhoAmI => {
            // ZooKeeper keeps a session's identities in a hash set; sorted
            // here, so the answer is the same on every member.
            let mut ids = identities.to_vec();
            ids.sort_by(|a, b| (&a.scheme, &a.id).cmp(&(&b.scheme, &b.id)));
            Ok(OpResult::Identities(ids))
        }
        Op::Ping => Ok(OpResult::Empty),
        other => {
            Err(ZkError::with_reason(ErrorCode::Unimplemented, other.path().unwrap_or(""), "not a read operation"))
        }
    }
}
