//! Transactions: the deterministic, fully resolved form of a write.
//!
//! The leader turns each client write into a [`Txn`] (see `replica::prep::check`):
//! sequential names are already chosen, versions already checked, ACLs
//! already expanded, the time already stamped. Applying a transaction
//! therefore never fails and yields the same tree on every replica; Zab
//! replicates exactly these values and the log stores them.

pub mod codec;
mod form;

use crate::acl::Acl;
use crate::data::Data;
use crate::error::ErrorCode;
use crate::ids::{Epoch, SessionId, Zxid};
use crate::members::{Change, Membership};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// One transaction: who asked, when, and what changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// The session that asked for it ([`SessionId::NONE`] for server-internal ones).
    pub session: SessionId,
    /// The client's request id within the session (its xid).
    pub cxid: i32,
    /// The leader's clock when it prepared the write, ms since the Unix epoch.
    pub time_ms: i64,
    /// The change.
    pub body: TxnBody,
}

/// What a transaction changes. Its byte form is in `form`, which keeps
/// logs written before null data readable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnBody {
    /// A new session.
    CreateSession {
        /// Negotiated timeout.
        timeout_ms: i32,
        /// The password a client must show to resume the session.
        password: Bytes,
    },
    /// A session ends (closed or expired); its ephemerals go with it.
    CloseSession {
        /// The ephemerals to delete, resolved by the leader, sorted.
        paths: Vec<String>,
    },
    /// A node is created.
    Create {
        /// The final path (sequential suffix included).
        path: String,
        /// The data (null when created null).
        data: Data,
        /// The expanded ACL.
        acl: Vec<Acl>,
        /// 0, the owning session, or the container/TTL marker.
        ephemeral_owner: i64,
        /// The parent's cversion after this create.
        parent_cversion: i32,
    },
    /// A node is deleted.
    Delete {
        /// The node.
        path: String,
    },
    /// A node's data is replaced.
    SetData {
        /// The node.
        path: String,
        /// The new data (null when set null).
        data: Data,
        /// The node's version after this change.
        version: i32,
    },
    /// A node's ACL is replaced.
    SetAcl {
        /// The node.
        path: String,
        /// The new, expanded ACL.
        acl: Vec<Acl>,
        /// The node's aversion after this change.
        version: i32,
    },
    /// A version check inside a multi (changes nothing).
    Check {
        /// The node.
        path: String,
    },
    /// Several changes applied atomically under one zxid.
    Multi(Vec<TxnBody>),
    /// A multi that failed as a whole: one code per op (OK before the
    /// failing op, its code, RuntimeInconsistency after). Changes nothing.
    MultiError(Vec<ErrorCode>),
    /// A write that failed validation. Replicated like any write so that the
    /// session's replies stay in order (as ZooKeeper does). Changes nothing.
    Error(ErrorCode),
    /// A step of a reconfiguration (see [`crate::members`]): entering the
    /// joint configuration, or, proposed by the leader once that is
    /// committed, leaving it for the new members alone.
    Reconfig(Change),
    /// A whole tree loaded into an empty one (an import from Apache
    /// ZooKeeper, or a restore through the admin API): every node with its
    /// Stat as the snapshot holds it, and its open sessions. The loaded
    /// zxids may run ahead of ours, so the ensemble moves to an epoch above
    /// `epoch` before it writes again (see `zab`).
    Load {
        /// The tree, as `tree::snapshot` chunks.
        chunks: Vec<Bytes>,
        /// The highest epoch the loaded history used.
        epoch: Epoch,
    },
}

impl TxnBody {
    /// The epoch a loaded tree's history reached, for a [`TxnBody::Load`].
    pub fn loaded_epoch(&self) -> Option<Epoch> {
        match self {
            TxnBody::Load { epoch, .. } => Some(*epoch),
            _ => None,
        }
    }
}

impl Txn {
    /// About how many bytes the transaction takes encoded: its paths, data
    /// and ACL ids plus a fixed allowance per change (for sizing log runs;
    /// not exact).
    pub fn approximate_size(&self) -> usize {
        32 + self.body.approximate_size()
    }
}

impl TxnBody {
    fn approximate_size(&self) -> usize {
        let data_len = |data: &Data| data.as_option().map_or(0, Bytes::len);
        let acl = |acl: &[Acl]| acl.iter().map(|a| 8 + a.id.scheme.len() + a.id.id.len()).sum::<usize>();
        match self {
            TxnBody::CreateSession { password, .. } => 8 + password.len(),
            TxnBody::CloseSession { paths } => paths.iter().map(|p| 4 + p.len()).sum(),
            TxnBody::Create { path, data, acl: a, .. } => 24 + path.len() + data_len(data) + acl(a),
            TxnBody::Delete { path } | TxnBody::Check { path } => 4 + path.len(),
            TxnBody::SetData { path, data, .. } => 12 + path.len() + data_len(data),
            TxnBody::SetAcl { path, acl: a, .. } => 8 + path.len() + acl(a),
            TxnBody::Multi(ops) => ops.iter().map(|op| 4 + op.approximate_size()).sum(),
            TxnBody::MultiError(codes) => 4 * codes.len(),
            TxnBody::Error(_) => 4,
            TxnBody::Reconfig(change) => {
                let size = |m: &Membership| -> usize {
                    m.members().iter().map(|m| 16 + m.peer_address.len() + m.client_address.len()).sum()
                };
                match change {
                    Change::Enter { active, next } => size(active) + size(next),
                    Change::Complete { members, .. } => 8 + size(members),
                }
            }
            TxnBody::Load { chunks, .. } => 8 + chunks.iter().map(|c| 4 + c.len()).sum::<usize>(),
        }
    }
}

/// One logged transaction with its zxid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The position in the history.
    pub zxid: Zxid,
    /// The transaction, shared cheaply between log, network and apply.
    pub txn: Arc<Txn>,
}

impl Entry {
    /// Builds an entry.
    pub fn new(zxid: Zxid, txn: Txn) -> Entry {
        Entry { zxid, txn: Arc::new(txn) }
    }
}

/// "N bytes", or "null data".
fn size(data: &Data) -> String {
    if data.is_null() {
        "null data".into()
    } else {
        format!("{} bytes", data.len())
    }
}

impl fmt::Display for TxnBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnBody::CreateSession { timeout_ms, .. } => write!(f, "createSession timeout={timeout_ms}ms"),
            TxnBody::CloseSession { paths } => write!(f, "closeSession ephemerals={paths:?}"),
            TxnBody::Create { path, data, ephemeral_owner, parent_cversion, .. } => write!(
                f,
                "create {path} ({}) owner=0x{ephemeral_owner:x} parent_cversion={parent_cversion}",
                size(data)
            ),
            TxnBody::Delete { path } => write!(f, "delete {path}"),
            TxnBody::SetData { path, data, version } => {
                write!(f, "setData {path} ({}) version={version}", size(data))
            }
            TxnBody::SetAcl { path, acl, version } => {
                write!(f, "setACL {path} entries={} aversion={version}", acl.len())
            }
            TxnBody::Check { path } => write!(f, "check {path}"),
            TxnBody::Multi(ops) => {
                write!(f, "multi [")?;
                for (i, op) in ops.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{op}")?;
                }
                write!(f, "]")
            }
            TxnBody::MultiError(codes) => {
                let names: Vec<&str> = codes.iter().map(|c| c.name()).collect();
                write!(f, "failed multi {names:?}")
            }
            TxnBody::Error(code) => write!(f, "error {code}"),
            TxnBody::Reconfig(change) => {
                let step = match change {
                    Change::Enter { .. } => "reconfig",
                    Change::Complete { .. } => "reconfig complete",
                };
                let voters: Vec<_> = change.next().voters().collect();
                let observers: Vec<_> = change.next().observers().collect();
                write!(f, "{step} voters={voters:?} observers={observers:?}")
            }
            TxnBody::Load { chunks, epoch } => {
                let bytes: usize = chunks.iter().map(Bytes::len).sum();
                write!(f, "load tree ({bytes} bytes of snapshot, history up to epoch {epoch})")
            }
        }
    }
}
