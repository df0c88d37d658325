//! The checks of a write that need no tree: path syntax, data size, ACL
//! syntax, TTL range, version arithmetic. They stand apart from the
//! outstanding changes so the replica a client talks to can refuse a
//! malformed request at once, with a precise reason and without a round
//! trip to the leader, and so the leader runs the very same rules again.

use crate::acl::{self, Acl, Id};
use crate::error::{ErrorCode, ZkError};
use crate::op::Op;
use crate::tree::is_special_path;
use crate::tree::path;
use crate::tree::stat::{CreateMode, MAX_TTL_MS};

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
pub(super) fn bad_path(path: &str, err: path::PathError) -> ZkError {
    ZkError::with_reason(ErrorCode::BadArguments, path, format!("invalid path: {err}"))
}

/// The path syntax ZooKeeper checks before it looks up the parent of a
/// create or delete (`validatePathForCreate`, `getParentPathAndValidate`): a
/// '/' somewhere and no NUL. The full rules come after the parent lookup for a
/// create, so a create under a missing parent is NoNode even when its path is
/// malformed too; a delete never checks them (a malformed path names no node:
/// NoNode), as in ZooKeeper.
pub(super) fn check_parent_path(path: &str) -> Result<(), ZkError> {
    if !path.contains('/') || path.contains('\0') {
        // The full rules name the precise fault (both cases break one of them).
        return Err(match path::validate(path, false) {
            Err(e) => bad_path(path, e),
            Ok(()) => ZkError::with_reason(ErrorCode::BadArguments, path, "invalid path"),
        });
    }
    Ok(())
}

pub(super) fn check_data(path: &str, data: &[u8], limits: Limits) -> Result<(), ZkError> {
    if data.len() > limits.max_data_bytes {
        return Err(ZkError::with_reason(
            ErrorCode::BadArguments,
            path,
            format!("data is {} bytes, over the limit of {} bytes", data.len(), limits.max_data_bytes),
        ));
    }
    Ok(())
}

pub(super) fn check_ttl(path: &str, mode: CreateMode, ttl_ms: i64) -> Result<(), ZkError> {
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

pub(super) fn fixup_acl(path: &str, acl: &[Acl], identities: &[Id]) -> Result<Vec<Acl>, ZkError> {
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

pub(super) fn new_version(current: i32, expected: i32, path: &str) -> Result<i32, ZkError> {
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
