//! What Zab asks storage to make durable, and what it recovers from it. The
//! core owns this vocabulary; `storage` implements it on sled and in memory.

use crate::ids::{Epoch, Zxid};
use crate::txn::Entry;
use bytes::Bytes;

/// One change to durable state, in the order the consensus core asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageOp {
    /// Append entries after the current last one (zxids strictly increase).
    Append(Vec<Entry>),
    /// Drop every log entry with a zxid greater than this.
    TruncateAfter(Zxid),
    /// Record the epoch this replica last promised (Zab's acceptedEpoch).
    SetAcceptedEpoch(Epoch),
    /// Record the epoch whose NEWLEADER this replica acknowledged (currentEpoch).
    SetCurrentEpoch(Epoch),
    /// Replace all state with a leader's snapshot at `zxid` (SNAP sync): the
    /// snapshot is stored and every log entry is dropped.
    InstallSnapshot {
        /// The zxid the snapshot reflects.
        zxid: Zxid,
        /// The serialized tree (`tree::snapshot` chunks).
        chunks: Vec<Bytes>,
    },
}

/// What a peer recovered from storage.
#[derive(Clone, Debug, Default)]
pub struct Durable {
    /// acceptedEpoch.
    pub accepted_epoch: Epoch,
    /// currentEpoch.
    pub current_epoch: Epoch,
    /// The snapshot's zxid: the tree already reflects everything up to it.
    pub snapshot_zxid: Zxid,
    /// Log entries after the snapshot.
    pub entries: Vec<Entry>,
}
