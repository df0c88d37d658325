//! When to snapshot the tree, and when a snapshot may be handed out.
//!
//! A snapshot is taken every `every` applied transactions (or on request),
//! one at a time. It is handed out only once the local log holds durably
//! every entry it reflects: a replica applies what the leader commits as soon
//! as the entries are in its in-memory log, which can be before its own disk
//! has them (the others made the quorum); a snapshot written ahead of those
//! appends would make the store refuse them as going backwards, and after a
//! crash the log would not continue it.

use crate::ids::Zxid;
use crate::tree::TreeState;

/// The snapshot schedule of one replica.
#[derive(Debug)]
pub struct Snapshots {
    every: u64,
    applied_since: u64,
    in_flight: bool,
    /// A copy taken but not yet handed out: its tree is ahead of the durable log.
    waiting: Option<TreeState>,
    /// The zxid of the last durable snapshot.
    previous: Zxid,
}

impl Snapshots {
    /// A schedule taking a snapshot every `every` transactions (0: only on
    /// request), the newest durable one at `previous`.
    pub fn new(every: u64, previous: Zxid) -> Snapshots {
        Snapshots { every, applied_since: 0, in_flight: false, waiting: None, previous }
    }

    /// Counts one applied transaction.
    pub fn applied(&mut self) {
        self.applied_since += 1;
    }

    /// Whether a snapshot is due now; if so it counts as started.
    pub fn due(&mut self) -> bool {
        if self.every == 0 || self.in_flight || self.applied_since < self.every {
            return false;
        }
        self.start();
        true
    }

    /// Starts a snapshot on request; false if one is already being written.
    pub fn start(&mut self) -> bool {
        if self.in_flight {
            return false;
        }
        self.in_flight = true;
        self.applied_since = 0;
        true
    }

    /// Holds a copy of the tree until the log is durable up to its zxid.
    pub fn hold(&mut self, state: TreeState) {
        self.waiting = Some(state);
    }

    /// The held copy, once the log is durable up to `durable`.
    pub fn release(&mut self, durable: Zxid) -> Option<TreeState> {
        if self.waiting.as_ref().is_some_and(|state| state.last_zxid() <= durable) {
            return self.waiting.take();
        }
        None
    }

    /// A snapshot is durable. Returns the zxid up to which the in-memory log
    /// may be compacted: the snapshot before this one, so a follower a little
    /// behind still gets a DIFF rather than a SNAP.
    pub fn saved(&mut self, zxid: Zxid) -> Zxid {
        self.in_flight = false;
        std::mem::replace(&mut self.previous, zxid)
    }

    /// Writing the snapshot failed: the next one may start (when due, or on
    /// request) instead of waiting forever for this one.
    pub fn failed(&mut self) {
        self.in_flight = false;
        self.waiting = None;
    }

    /// The tree was replaced by a leader's snapshot at `zxid`: a held copy of
    /// the old tree is no longer worth writing.
    pub fn installed(&mut self, zxid: Zxid) {
        if self.waiting.take().is_some() {
            self.in_flight = false;
        }
        self.previous = zxid;
        self.applied_since = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::DataTree;

    #[test]
    fn due_every_n_and_one_at_a_time() {
        let mut s = Snapshots::new(2, Zxid::ZERO);
        s.applied();
        assert!(!s.due());
        s.applied();
        assert!(s.due());
        s.applied();
        s.applied();
        assert!(!s.due(), "one is already being written");
        assert!(!s.start());
        assert_eq!(s.saved(Zxid(4)), Zxid::ZERO, "compact up to the previous snapshot");
        assert!(s.due(), "the count went on while the first was written");
    }

    #[test]
    fn a_failed_snapshot_does_not_block_the_next() {
        let mut s = Snapshots::new(2, Zxid::ZERO);
        s.applied();
        s.applied();
        assert!(s.due());
        s.failed();
        assert!(s.start(), "one may be requested at once");
        s.failed();
        s.applied();
        s.applied();
        assert!(s.due(), "and one is taken when due again");
    }

    #[test]
    fn held_until_the_log_is_durable() {
        let mut s = Snapshots::new(0, Zxid::ZERO);
        assert!(s.start());
        let tree = DataTree::new();
        s.hold(tree.snapshot());
        assert_eq!(s.release(tree.last_zxid()).map(|t| t.last_zxid()), Some(tree.last_zxid()));
        assert!(s.release(Zxid(100)).is_none(), "handed out once");
    }
}
