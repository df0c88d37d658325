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

#[cfg(test)]
mod tests {
    use super::super::{Config, Recovered};
    use super::*;
    use crate::ids::Zxid;

    fn lone() -> Replica {
        Replica::new(Config::new(1, vec![1], 100), Recovered::fresh(), 1_000_000)
    }

    #[test]
    fn a_fresh_replica_holds_its_invariants() {
        let replica = lone();
        assert_eq!(replica.validate(), Ok(()));
    }

    #[test]
    fn a_status_other_than_zabs_is_caught() {
        let mut replica = lone();
        replica.status.serving = !replica.zab.status().serving;
        assert_eq!(replica.validate().expect_err("caught").what, "the replica reports the status Zab is in");
    }

    #[test]
    fn a_tree_ahead_of_the_commit_point_is_caught() {
        let mut replica = lone();
        let mut state = crate::tree::TreeState::new();
        state.set_last_zxid(Zxid::new(1, 3));
        replica.tree = crate::tree::DataTree::from_state(state);
        assert_eq!(replica.validate().expect_err("caught").what, "the tree holds only committed transactions");
    }
}
