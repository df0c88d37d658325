//! The replica's invariants beside Zab's: what it applied, what it reports
//! and what it holds for its connections agree with Zab's state. Checked
//! after every input in debug builds (a broken one panics there, which
//! stops the member: crash-stop), and in every simulated schedule.

use super::{Input, Replica};
use crate::zab::validate_check as check;
use crate::zab::Broken;

impl Replica {
    /// Checks the replica's invariants, Zab's first.
    pub fn validate(&self) -> Result<(), Broken> {
        self.zab.validate()?;
        let (applied, committed) = (self.tree.last_zxid(), self.zab.last_committed());
        check(applied <= committed, "the tree holds only committed transactions", || {
            format!("applied {applied}, committed {committed}")
        })?;
        let (mine, zab) = (self.status, self.zab.status());
        check(mine == zab, "the replica reports the status Zab is in", || format!("replica {mine:?}, zab {zab:?}"))?;
        Ok(())
    }

    /// In debug builds, panics naming the input after which an invariant
    /// broke: the first place it can be seen.
    #[inline]
    pub(super) fn debug_validate(&self, after: &'static str) {
        // One check per input, on every input: the simulation and the tests
        // run debug builds, so every schedule checks every step.
        #[cfg(debug_assertions)]
        if let Err(broken) = self.validate() {
            panic!("replica {}: after {after}: {broken}", self.config.zab.id);
        }
        #[cfg(not(debug_assertions))]
        let _ = after;
    }
}

/// The kind of an input, for the message of a broken invariant.
pub(super) fn kind(input: &Input) -> &'static str {
    match input {
        Input::Tick { .. } => "a tick",
        Input::Peer { .. } => "a peer's message",
        Input::PeerDisconnected { .. } => "a peer's disconnection",
        Input::Persisted { .. } => "a durable notice",
        Input::SnapshotSaved { .. } => "a saved snapshot",
        Input::LogPurged { .. } => "a purged log",
        Input::SnapshotFailed => "a failed snapshot",
        Input::DiskSpace { .. } => "a disk-space notice",
        Input::PeerEndpoints { .. } => "a peer's endpoints",
        Input::Connect { .. } => "a connect",
        Input::Request { .. } => "a request",
        Input::BadRequest { .. } => "a bad request",
        Input::Disconnect { .. } => "a disconnect",
    }
}
