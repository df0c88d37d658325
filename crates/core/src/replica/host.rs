//! What a host does with a replica's outputs, said once for every host.
//!
//! A [`Replica`] only decides; its host carries out what it decided. The
//! server's owner task and the simulation are both hosts: each supplies the
//! effects ([`Host`]) and [`carry_out`] drives them, so the contract (every
//! kind of output, what must be answered, what the replica hears back at
//! once) lives here and nowhere else. A new kind of output is a new method,
//! and every host is told by the compiler.

use super::audit::AuditRecord;
use super::{ClientMessage, ConnId, Input, Output, Replica};
use crate::ids::{Epoch, ServerId, Zxid};
use crate::tree::TreeState;
use crate::zab::message::EpochRange;
use crate::zab::{Io, Message, Status, StorageOp};

/// What the replica hears back at once from an effect, if anything; or why
/// the host stops carrying out (the simulation's violations).
pub type Back<E> = Result<Option<Input>, E>;

/// The effects of a replica's outputs. Each sees the replica as it stands
/// (outputs taken, not yet handed anything back) and returns at once; what
/// it returns is handed to the replica before the next output.
pub trait Host {
    /// Why carrying out stops: a host that cannot fail says [`std::convert::Infallible`].
    type Error;

    /// Called once a pass, before its outputs: the simulation's oracle reads
    /// what the replica applied here.
    fn observe(&mut self, replica: &mut Replica) -> Result<(), Self::Error> {
        let _ = replica;
        Ok(())
    }

    /// Sends a Zab message to member `to`: lossy, never blocking (Zab
    /// retransmits what matters).
    fn send(&mut self, replica: &Replica, to: ServerId, msg: Message) -> Back<Self::Error>;

    /// Sends follower `to` a DIFF's entries (`ranges`, after `after`, in
    /// messages of `batch`) read back from storage, in the order of the
    /// messages around it. Storage that lost some (an operator's purge)
    /// sends nothing and answers [`Input::LogPurged`] with where the log
    /// now starts.
    fn send_stored(&mut self, replica: &Replica, to: ServerId, stored: StoredDiff) -> Back<Self::Error>;

    /// Performs a storage operation durably (in a batch if the host likes),
    /// answering [`Input::Persisted`] with `seq` once it is on disk. Never
    /// answered before it is durable: that is what an acknowledgement means.
    fn persist(&mut self, replica: &Replica, seq: u64, op: StorageOp) -> Back<Self::Error>;

    /// Hands a message to client connection `conn`. A connection that cannot
    /// take it (its outbox full) is dropped: answer [`Input::Disconnect`].
    fn deliver(&mut self, replica: &Replica, conn: ConnId, msg: ClientMessage) -> Back<Self::Error>;

    /// Writes `state` as a snapshot (in the background if the host likes),
    /// answering [`Input::SnapshotSaved`] or [`Input::SnapshotFailed`].
    fn take_snapshot(&mut self, replica: &Replica, state: TreeState) -> Back<Self::Error>;

    /// The replica's role, leader or serving state changed.
    fn status(&mut self, replica: &Replica, status: Status) -> Back<Self::Error>;

    /// Writes an audit record (a host without an audit log drops it).
    fn audit(&mut self, replica: &Replica, record: AuditRecord) -> Back<Self::Error> {
        let _ = (replica, record);
        Ok(None)
    }
}

/// A DIFF to send from storage (Zab's `Io::SendStored`).
#[derive(Clone, Debug)]
pub struct StoredDiff {
    /// The leader's epoch the proposals are sent in.
    pub epoch: Epoch,
    /// The entries after this zxid.
    pub after: Zxid,
    /// Up to the end of these ranges, each of one epoch.
    pub ranges: Vec<EpochRange>,
    /// At most this many entries a message.
    pub batch: usize,
}

/// Carries out `replica`'s outputs through `host`, pass after pass, until
/// the replica has none (`Ok(true)`) or `max_passes` are done (`Ok(false)`:
/// what is left waits for the host's next turn). What an effect hands back
/// is handled at once, so its outputs join the next pass.
pub fn carry_out<H: Host>(replica: &mut Replica, host: &mut H, max_passes: usize) -> Result<bool, H::Error> {
    for _ in 0..max_passes {
        let mut outputs = replica.take_outputs();
        host.observe(replica)?;
        if outputs.is_empty() {
            replica.recycle_outputs(outputs);
            return Ok(true);
        }
        for output in outputs.drain(..) {
            let back = match output {
                Output::Zab(Io::Send { to, msg }) => host.send(replica, to, msg)?,
                Output::Zab(Io::SendStored { to, epoch, after, ranges, batch }) => {
                    host.send_stored(replica, to, StoredDiff { epoch, after, ranges, batch })?
                }
                Output::Zab(Io::Persist { seq, op }) => host.persist(replica, seq, op)?,
                Output::Client { conn, msg } => host.deliver(replica, conn, msg)?,
                Output::TakeSnapshot { state } => host.take_snapshot(replica, state)?,
                Output::Status(status) => host.status(replica, status)?,
                Output::Audit(record) => host.audit(replica, record)?,
            };
            if let Some(input) = back {
                replica.handle(input);
            }
        }
        replica.recycle_outputs(outputs);
    }
    Ok(false)
}
