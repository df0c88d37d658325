//! The client operation model shared by both front ends (the gRPC session API
//! and the ZooKeeper wire port) and the replica that serves them.
//!
//! Front ends decode their own formats into [`Op`] and encode [`OpResult`] /
//! [`ZkError`] back; everything in between sees only these types.

use crate::acl::{Acl, Id};
use crate::data::Data;
use crate::error::{ErrorCode, ZkError};
use crate::tree::stat::{CreateMode, Stat};
use crate::tree::watch::{AddWatchMode, WatcherType};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// One client request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Create a node (create, create2, createContainer, createTTL).
    Create {
        /// Path; sequential modes append a counter.
        path: String,
        /// Initial data.
        data: Data,
        /// The ACL (non-empty).
        acl: Vec<Acl>,
        /// The create mode.
        mode: CreateMode,
        /// TTL in ms for the TTL modes, -1 otherwise.
        ttl_ms: i64,
    },
    /// Delete a node whose version matches (-1: any).
    Delete {
        /// The node.
        path: String,
        /// Expected version.
        version: i32,
    },
    /// The node's Stat, optionally leaving a watch.
    Exists {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
    },
    /// The node's data and Stat.
    GetData {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
    },
    /// Replace the data if the version matches (-1: any).
    SetData {
        /// The node.
        path: String,
        /// New data.
        data: Data,
        /// Expected version.
        version: i32,
    },
    /// The node's ACL and Stat.
    GetAcl {
        /// The node.
        path: String,
    },
    /// Replace the ACL if the ACL version matches (-1: any).
    SetAcl {
        /// The node.
        path: String,
        /// New ACL.
        acl: Vec<Acl>,
        /// Expected aversion.
        version: i32,
    },
    /// The node's children (and its Stat with `with_stat`).
    GetChildren {
        /// The node.
        path: String,
        /// Leave a child watch.
        watch: bool,
        /// Also return the Stat (getChildren2).
        with_stat: bool,
    },
    /// The number of descendants of a node.
    GetAllChildrenNumber {
        /// The node.
        path: String,
    },
    /// The calling session's ephemerals under a prefix.
    GetEphemerals {
        /// Path prefix ("/" for all).
        prefix: String,
    },
    /// Succeed only if the node's version matches.
    Check {
        /// The node.
        path: String,
        /// Expected version.
        version: i32,
    },
    /// Atomic writes: create, delete, setData and check ops.
    Multi(Vec<Op>),
    /// Independent reads: getData and getChildren ops.
    MultiRead(Vec<Op>),
    /// Catch up with the leader before the session's next read.
    Sync {
        /// Echoed back.
        path: String,
    },
    /// A persistent (recursive) watch.
    AddWatch {
        /// The node (need not exist).
        path: String,
        /// Persistent or recursive.
        mode: AddWatchMode,
    },
    /// Remove the session's watches of a kind on a path.
    RemoveWatches {
        /// The node.
        path: String,
        /// Which watches.
        kind: WatcherType,
    },
    /// Whether the session has watches of a kind on a path.
    CheckWatches {
        /// The node.
        path: String,
        /// Which watches.
        kind: WatcherType,
    },
    /// Re-register watches after a reconnect.
    SetWatches {
        /// The client's last seen zxid: changes after it fire at once.
        relative_zxid: i64,
        /// getData watches.
        data: Vec<String>,
        /// exists watches.
        exist: Vec<String>,
        /// getChildren watches.
        child: Vec<String>,
        /// Persistent watches.
        persistent: Vec<String>,
        /// Persistent recursive watches.
        persistent_recursive: Vec<String>,
    },
    /// Add an identity to the session.
    Auth {
        /// The scheme (digest).
        scheme: String,
        /// The credentials.
        auth: Bytes,
    },
    /// The session's identities.
    WhoAmI,
    /// Keep the session alive.
    Ping,
    /// End the session.
    CloseSession,
    /// Change the membership (ZooKeeper's reconfig): incremental (`joining`,
    /// `leaving`) or a whole new member list; answered with the new
    /// `/zookeeper/config`.
    Reconfig {
        /// Members to add or change, comma-separated `server.N=...` lines.
        joining: String,
        /// Member ids to remove, comma-separated.
        leaving: String,
        /// The whole new membership, comma-separated lines (instead of the two above).
        new_members: String,
        /// The configuration version it is based on (-1: any).
        expected_version: i64,
    },
}

/// How an operation is named in metrics and in `cons`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpLabel {
    /// [`Op::name`].
    pub name: &'static str,
    /// [`Op::abbreviation`].
    pub abbreviation: &'static str,
}

impl Op {
    /// Both names of the operation.
    pub fn label(&self) -> OpLabel {
        OpLabel { name: self.name(), abbreviation: self.abbreviation() }
    }

    /// ZooKeeper's name of the operation (as its metrics and logs spell it).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Create { .. } => "create",
            Op::Delete { .. } => "delete",
            Op::Exists { .. } => "exists",
            Op::GetData { .. } => "getData",
            Op::SetData { .. } => "setData",
            Op::GetAcl { .. } => "getACL",
            Op::SetAcl { .. } => "setACL",
            Op::GetChildren { .. } => "getChildren",
            Op::GetAllChildrenNumber { .. } => "getAllChildrenNumber",
            Op::GetEphemerals { .. } => "getEphemerals",
            Op::Check { .. } => "check",
            Op::Multi(_) => "multi",
            Op::MultiRead(_) => "multiRead",
            Op::Sync { .. } => "sync",
            Op::AddWatch { .. } => "addWatch",
            Op::RemoveWatches { .. } => "removeWatches",
            Op::CheckWatches { .. } => "checkWatches",
            Op::SetWatches { .. } => "setWatches",
            Op::Auth { .. } => "auth",
            Op::WhoAmI => "whoAmI",
            Op::Ping => "ping",
            Op::CloseSession => "closeSession",
            Op::Reconfig { .. } => "reconfig",
        }
    }

    /// ZooKeeper's four-letter abbreviation of the operation, as `cons`
    /// prints it in `lop=`.
    pub fn abbreviation(&self) -> &'static str {
        match self {
            Op::Create { .. } => "CREA",
            Op::Delete { .. } => "DELE",
            Op::Exists { .. } => "EXIS",
            Op::GetData { .. } => "GETD",
            Op::SetData { .. } => "SETD",
            Op::GetAcl { .. } => "GETA",
            Op::SetAcl { .. } => "SETA",
            Op::GetChildren { .. } => "GETC",
            Op::GetAllChildrenNumber { .. } => "GETACN",
            Op::GetEphemerals { .. } => "GETE",
            Op::Check { .. } => "CHEC",
            Op::Multi(_) => "MULT",
            Op::MultiRead(_) => "MLTR",
            Op::Sync { .. } => "SYNC",
            Op::AddWatch { .. } => "ADDW",
            Op::RemoveWatches { .. } => "REMW",
            Op::CheckWatches { .. } => "CHKW",
            Op::SetWatches { .. } => "STW2",
            Op::Auth { .. } => "AUTH",
            Op::WhoAmI => "HOMI",
            Op::Ping => "PING",
            Op::CloseSession => "CLOS",
            Op::Reconfig { .. } => "RCFG",
        }
    }

    /// How many watches the op may leave (for the per-session cap).
    pub fn watches_left(&self) -> usize {
        match self {
            Op::Exists { watch, .. } | Op::GetData { watch, .. } | Op::GetChildren { watch, .. } => usize::from(*watch),
            Op::AddWatch { .. } => 1,
            Op::SetWatches { data, exist, child, persistent, persistent_recursive, .. } => {
                data.len() + exist.len() + child.len() + persistent.len() + persistent_recursive.len()
            }
            _ => 0,
        }
    }

    /// Whether the op changes replicated state and so goes through the leader.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Create { .. }
                | Op::Delete { .. }
                | Op::SetData { .. }
                | Op::SetAcl { .. }
                | Op::Check { .. }
                | Op::Multi(_)
                | Op::CloseSession
                | Op::Reconfig { .. }
        )
    }

    /// Whether the op reads the tree's replicated state (what a linearizable
    /// read must see up to date); watches and auth are local to the member.
    pub fn reads_tree(&self) -> bool {
        matches!(
            self,
            Op::Exists { .. }
                | Op::GetData { .. }
                | Op::GetAcl { .. }
                | Op::GetChildren { .. }
                | Op::GetAllChildrenNumber { .. }
                | Op::GetEphemerals { .. }
                | Op::MultiRead(_)
        )
    }

    /// Whether the op can make the stored state larger (creates, setData,
    /// setACL, or a multi holding one): what a member short of disk space
    /// refuses, while deletes and session ends still go through.
    pub fn grows_state(&self) -> bool {
        match self {
            Op::Create { .. } | Op::SetData { .. } | Op::SetAcl { .. } => true,
            Op::Multi(ops) => ops.iter().any(Op::grows_state),
            _ => false,
        }
    }

    /// The path the op concerns, if it has one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Op::Create { path, .. }
            | Op::Delete { path, .. }
            | Op::Exists { path, .. }
            | Op::GetData { path, .. }
            | Op::SetData { path, .. }
            | Op::GetAcl { path }
            | Op::SetAcl { path, .. }
            | Op::GetChildren { path, .. }
            | Op::GetAllChildrenNumber { path }
            | Op::Check { path, .. }
            | Op::Sync { path }
            | Op::AddWatch { path, .. }
            | Op::RemoveWatches { path, .. }
            | Op::CheckWatches { path, .. } => Some(path),
            Op::GetEphemerals { prefix } => Some(prefix),
            Op::Reconfig { .. } => Some(crate::tree::CONFIG_PATH),
            _ => None,
        }
    }

    /// The payload size a request carries (data plus paths), for limit checks.
    pub fn approximate_size(&self) -> usize {
        let own = self.path().map_or(0, str::len);
        own + match self {
            Op::Create { data, acl, .. } => data.len() + acl.len() * 32,
            Op::SetData { data, .. } => data.len(),
            Op::SetAcl { acl, .. } => acl.len() * 32,
            Op::Reconfig { joining, leaving, new_members, .. } => joining.len() + leaving.len() + new_members.len(),
            Op::Multi(ops) | Op::MultiRead(ops) => ops.iter().map(Op::approximate_size).sum(),
            Op::SetWatches { data, exist, child, persistent, persistent_recursive, .. } => {
                [data, exist, child, persistent, persistent_recursive]
                    .iter()
                    .flat_map(|v| v.iter())
                    .map(String::len)
                    .sum()
            }
            _ => 0,
        }
    }
}

/// The successful answer to an [`Op`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    /// create: the final path and the new node's Stat.
    Created {
        /// The final path.
        path: String,
        /// The new node's Stat.
        stat: Stat,
    },
    /// exists, setData, setACL, check.
    Stat(Stat),
    /// getData.
    Data {
        /// The data (null when set null).
        data: Data,
        /// The Stat.
        stat: Stat,
    },
    /// getChildren.
    Children {
        /// Child names, sorted.
        children: Vec<String>,
        /// With getChildren2.
        stat: Option<Stat>,
    },
    /// getACL.
    Acl {
        /// The ACL.
        acl: Vec<Acl>,
        /// The Stat.
        stat: Stat,
    },
    /// getAllChildrenNumber.
    Count(i32),
    /// getEphemerals.
    Paths(Vec<String>),
    /// multi / multiRead: a result or an error per op.
    Multi(Vec<MultiItem>),
    /// whoAmI.
    Identities(Vec<Id>),
    /// sync: the path.
    Synced(String),
    /// Ops without a body (delete, ping, addWatch, auth, …).
    Empty,
}

/// One op's outcome inside a multi or multiRead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MultiItem {
    /// The op succeeded (delete and check give [`OpResult::Empty`]).
    Ok(OpResult),
    /// The op failed, or was not applied because another failed.
    Err(ErrorCode),
}

/// What a request gets back.
pub type Reply = Result<OpResult, ZkError>;
