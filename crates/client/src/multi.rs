//! `multi` (atomic writes) and `multi_read` (independent reads): the op
//! builders and their results. Their protobuf forms are in `multi_pb`.

use crate::acl::Acl;
use crate::tree::stat::{CreateMode, Stat};
use std::time::Duration;
use zabkeeper_core::error::ErrorCode;

/// One write inside a [`multi`](super::Client::multi); build it with the constructors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiOp {
    /// Create a node.
    Create {
        /// Path (sequential modes append a counter).
        path: String,
        /// Initial data.
        data: Vec<u8>,
        /// ACL (non-empty).
        acl: Vec<Acl>,
        /// Create mode.
        mode: CreateMode,
        /// TTL, for the TTL modes only.
        ttl: Option<Duration>,
    },
    /// Delete a node if its version matches (-1: any).
    Delete {
        /// The node.
        path: String,
        /// Expected version.
        version: i32,
    },
    /// Replace a node's data if its version matches (-1: any).
    SetData {
        /// The node.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version.
        version: i32,
    },
    /// Fail the whole multi unless the node's version matches.
    Check {
        /// The node.
        path: String,
        /// Expected version.
        version: i32,
    },
}

impl MultiOp {
    /// A create op.
    pub fn create(path: &str, data: &[u8], mode: CreateMode, acl: &[Acl]) -> MultiOp {
        MultiOp::Create { path: path.into(), data: data.to_vec(), acl: acl.to_vec(), mode, ttl: None }
    }

    /// A create op for a TTL mode.
    pub fn create_ttl(path: &str, data: &[u8], mode: CreateMode, acl: &[Acl], ttl: Duration) -> MultiOp {
        MultiOp::Create { path: path.into(), data: data.to_vec(), acl: acl.to_vec(), mode, ttl: Some(ttl) }
    }

    /// A delete op.
    pub fn delete(path: &str, version: i32) -> MultiOp {
        MultiOp::Delete { path: path.into(), version }
    }

    /// A setData op.
    pub fn set_data(path: &str, data: &[u8], version: i32) -> MultiOp {
        MultiOp::SetData { path: path.into(), data: data.to_vec(), version }
    }

    /// A version check op.
    pub fn check(path: &str, version: i32) -> MultiOp {
        MultiOp::Check { path: path.into(), version }
    }

    /// The path the op concerns.
    pub fn path(&self) -> &str {
        match self {
            MultiOp::Create { path, .. }
            | MultiOp::Delete { path, .. }
            | MultiOp::SetData { path, .. }
            | MultiOp::Check { path, .. } => path,
        }
    }
}

/// One op's outcome in a multi.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiResult {
    /// The create succeeded.
    Created {
        /// The final path (with the sequence suffix for sequential modes).
        path: String,
        /// The new node's Stat.
        stat: Stat,
    },
    /// The setData succeeded.
    DataSet(Stat),
    /// The delete succeeded.
    Deleted,
    /// The check succeeded.
    Checked,
    /// The multi failed: this op's code, `Ok` for ops before the failing one and
    /// `RuntimeInconsistency` for ops after it (ZooKeeper's `ErrorResult`).
    Error(ErrorCode),
}

/// One read inside a [`multi_read`](super::Client::multi_read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOp {
    /// getData of a path.
    GetData(String),
    /// getChildren of a path.
    GetChildren(String),
}

impl ReadOp {
    /// The path the read concerns.
    pub fn path(&self) -> &str {
        match self {
            ReadOp::GetData(p) | ReadOp::GetChildren(p) => p,
        }
    }
}

/// One read's result in a multi_read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    /// getData's answer.
    Data {
        /// The data.
        data: Vec<u8>,
        /// The Stat.
        stat: Stat,
    },
    /// getChildren's answer.
    Children(Vec<String>),
}
