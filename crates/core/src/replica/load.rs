//! Loading a whole tree into the ensemble's empty one (see `tree::load`):
//! the leader checks it and proposes it as one transaction; applying it
//! records the outcome for whoever asked. Zab then moves the ensemble to
//! an epoch above the loaded history (see `zab`).

use super::Replica;
use crate::error::ErrorCode;
use crate::ids::{Epoch, ServerId, SessionId, Zxid};
use crate::tree::{check_load, LoadRefusal, TxnResult};
use crate::txn::{Txn, TxnBody};
use crate::zab::{ProposeError, Role};
use bytes::Bytes;

/// The most snapshot bytes one load carries: it travels to every member
/// as one proposal, and a peer message holds at most 64 MiB.
pub const MAX_LOAD_BYTES: usize = 48 * 1024 * 1024;

/// The first peer protocol whose members read the `load` transaction:
/// proposing one to a member that speaks less would leave it unable to
/// follow (the transport states versions, see `rpc::peer_protocol`).
pub const PEER_PROTOCOL: u32 = 3;

/// The highest epoch a loaded history may have reached: the ensemble moves
/// above it, and epochs must stay far from running out (an epoch is 32 bits).
pub const MAX_LOAD_EPOCH: Epoch = 1 << 30;

/// Why a load was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// Only the established leader loads.
    #[error("member {me} does not lead (leader: {leader:?}); ask the leader")]
    NotLeader {
        /// This member.
        me: ServerId,
        /// Who leads, if known.
        leader: Option<ServerId>,
    },
    /// The tree cannot be loaded here.
    #[error(transparent)]
    Refused(#[from] LoadRefusal),
    /// The loaded history's epoch is beyond what an ensemble can move past.
    #[error("the tree to load names epoch {epoch}, above the {MAX_LOAD_EPOCH} a load may reach")]
    EpochTooLarge {
        /// The epoch.
        epoch: Epoch,
    },
    /// The tree is larger than one load carries.
    #[error(
        "the tree to load is {bytes} bytes, above the {MAX_LOAD_BYTES} one load carries: import it into a data \
         directory instead (zkctl import --data-dir, or zkctl admin snapshot restore) and start the ensemble on it"
    )]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// The leader cannot propose now.
    #[error("the leader cannot propose now: {0}")]
    Busy(#[from] ProposeError),
}

/// The size of the pieces [`in_pieces`] cuts.
const PIECE_BYTES: usize = 1024 * 1024;

/// A tree's bytes as the chunks of a load: pieces of 1 MiB sharing one
/// buffer, whatever cut they arrived in (a stream of tiny messages must not
/// become a transaction of as many chunks).
pub fn in_pieces(all: Bytes) -> Vec<Bytes> {
    (0..all.len()).step_by(PIECE_BYTES).map(|at| all.slice(at..(at + PIECE_BYTES).min(all.len()))).collect()
}

/// What applying a load gave: the nodes the tree holds, or why nothing changed.
pub type LoadOutcome = Result<usize, ErrorCode>;

impl Replica {
    /// Leader: checks `chunks` (a `tree::snapshot`) against the tree and
    /// proposes loading it; answers with its zxid and the epoch the ensemble
    /// moves past once it commits: the latest of `epoch` (ZooKeeper's epoch
    /// files, which may be ahead of every zxid), its nodes' and this
    /// leader's. Always past this leader's, so every load is a barrier:
    /// nothing is prepared against the tree it replaces, and the next leader
    /// starts tracking the loaded sessions.
    pub fn load_tree(&mut self, chunks: Vec<Bytes>, epoch: Epoch) -> Result<(Zxid, Epoch), LoadError> {
        let status = self.status();
        if status.role != Role::Leading || !status.serving {
            return Err(LoadError::NotLeader { me: self.me(), leader: status.leader });
        }
        let bytes = chunks.iter().map(Bytes::len).sum();
        if bytes > MAX_LOAD_BYTES {
            return Err(LoadError::TooLarge { bytes });
        }
        let loaded = check_load(self.tree.state(), &chunks)?;
        let epoch = epoch.max(loaded.highest_epoch());
        drop(loaded);
        if epoch > MAX_LOAD_EPOCH {
            return Err(LoadError::EpochTooLarge { epoch });
        }
        let epoch = epoch.max(status.epoch);
        let body = TxnBody::Load { chunks, epoch };
        let zxid = self.zab.propose(Txn { session: SessionId::NONE, cxid: 0, time_ms: self.clock.now_ms, body })?;
        self.drain_zab();
        tracing::info!(id = self.me(), %zxid, bytes, epoch, "proposed loading a tree");
        Ok((zxid, epoch))
    }

    /// The outcome of the load at `zxid`, once this member applied it.
    pub fn load_outcome(&self, zxid: Zxid) -> Option<LoadOutcome> {
        self.last_load.as_ref().filter(|(at, _)| *at == zxid).map(|(_, outcome)| *outcome)
    }

    /// Keeps what applying the load at `zxid` gave.
    pub(super) fn loaded(&mut self, zxid: Zxid, result: &TxnResult) {
        let outcome = match result {
            TxnResult::Loaded { nodes } => Ok(*nodes),
            TxnResult::Error(code) => Err(*code),
            other => unreachable!("a load yields Loaded or Error, not {other:?}"),
        };
        self.last_load = Some((zxid, outcome));
    }
}
