//! When to snapshot the tree, and when a snapshot may be handed out.
//!
//! A snapshot is taken every `every` applied transactions (or on request),
//! one at a time. Spread, as a served member's schedule is, the members take
//! turns instead: the one of rank `r` among `n` voters snapshots when a zxid
//! whose counter is `r * every / n` short of a multiple of `every` is applied.
//! Every member applies the same zxids, so their snapshots fall `every / n`
//! transactions apart, and each still takes one every `every`. A snapshot
//! stalls its member's log flushes (its writes and fsyncs share the disk)
//! and takes a core for a while (~1.7 s at 1 M znodes); taken by all at
//! once, that stalled every quorum (a p99 of 49-74 ms in the pipelined
//! benchmark, against 12-16 ms otherwise). ZooKeeper draws each interval at random
//! between half of snapCount and all of it for the same reason; the fixed
//! turns keep the members apart for certain and add no snapshots (the
//! random draw averages three quarters of the interval: +15% CPU per write
//! while loading 1 M znodes). A turn that comes under half an interval after
//! the last snapshot (a restart, a new epoch's counters) is skipped, and two
//! intervals without one take one anyway.
//!
//! A snapshot is handed out only once the local log holds durably
//! every entry it reflects: a replica applies what the leader commits as soon
//! as the entries are in its in-memory log, which can be before its own disk
//! has them (the others made the quorum); a snapshot written ahead of those
//! appends would make the store refuse them as going backwards, and after a
//! crash the log would not continue it.

use crate::ids::Zxid;
use crate::tree::TreeState;

/// A member's turn among the voters, for spreading snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// This member's position among the voters, from 0.
    pub rank: u64,
    /// How many voters take turns.
    pub members: u64,
}

/// The snapshot schedule of one replica.
#[derive(Debug)]
pub struct Snapshots {
    every: u64,
    /// With turns: the remainder, modulo `every`, of the zxid counters at
    /// which this member's turn comes (`offset` short of a multiple of
    /// `every`).
    turn_at: Option<u64>,
    /// A zxid at this member's turn was applied since `due` last looked.
    at_turn: bool,
    applied_since: u64,
    in_flight: bool,
    /// A copy taken but not yet handed out: its tree is ahead of the durable log.
    waiting: Option<TreeState>,
    /// The zxid of the last durable snapshot.
    previous: Zxid,
}

impl Snapshots {
    /// A schedule taking a snapshot every `every` transactions (0: only on
    /// request), the newest durable one at `previous`; with a `turn`, at
    /// this member's turn among the voters.
    pub fn new(every: u64, previous: Zxid, turn: Option<Turn>) -> Snapshots {
        // In u128: `every` may be as large as the configuration allows.
        let turn_at = turn.filter(|t| t.members > 0 && every > 0).map(|t| {
            let offset = u128::from(every) * u128::from(t.rank % t.members) / u128::from(t.members);
            let offset = u64::try_from(offset).expect("a share of `every` fits where `every` does");
            (every - offset) % every
        });
        Snapshots { every, turn_at, at_turn: false, applied_since: 0, in_flight: false, waiting: None, previous }
    }

    /// Counts one applied transaction, `zxid`.
    pub fn applied(&mut self, zxid: Zxid) {
        self.applied_since += 1;
        if let Some(turn_at) = self.turn_at {
            // `every` is not 0 when there are turns.
            self.at_turn |= u64::from(zxid.counter()) % self.every == turn_at;
        }
    }

    /// Whether a snapshot is due now; if so it counts as started.
    pub fn due(&mut self) -> bool {
        let at_turn = std::mem::take(&mut self.at_turn);
        if self.every == 0 || self.in_flight {
            return false;
        }
        let due = match self.turn_at {
            None => self.applied_since >= self.every,
            Some(_) => {
                (at_turn && self.applied_since >= self.every / 2) || self.applied_since >= self.every.saturating_mul(2)
            }
        };
        if due {
            self.start();
        }
        due
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
        let mut s = Snapshots::new(2, Zxid::ZERO, None);
        s.applied(Zxid(1));
        assert!(!s.due());
        s.applied(Zxid(2));
        assert!(s.due());
        s.applied(Zxid(3));
        s.applied(Zxid(4));
        assert!(!s.due(), "one is already being written");
        assert!(!s.start());
        assert_eq!(s.saved(Zxid(4)), Zxid::ZERO, "compact up to the previous snapshot");
        assert!(s.due(), "the count went on while the first was written");
    }

    #[test]
    fn a_failed_snapshot_does_not_block_the_next() {
        let mut s = Snapshots::new(2, Zxid::ZERO, None);
        s.applied(Zxid(1));
        s.applied(Zxid(2));
        assert!(s.due());
        s.failed();
        assert!(s.start(), "one may be requested at once");
        s.failed();
        s.applied(Zxid(3));
        s.applied(Zxid(4));
        assert!(s.due(), "and one is taken when due again");
    }

    /// The zxids (counters) at which a member with `turn` snapshots while
    /// `zxids` are applied one by one, each snapshot saved at once.
    fn snapshot_points(every: u64, turn: Option<Turn>, zxids: impl Iterator<Item = Zxid>) -> Vec<u32> {
        let mut s = Snapshots::new(every, Zxid::ZERO, turn);
        let mut points = Vec::new();
        for zxid in zxids {
            s.applied(zxid);
            if s.due() {
                points.push(zxid.counter());
                s.saved(zxid);
            }
        }
        points
    }

    #[test]
    fn members_take_turns_every_interval_apart_by_a_share_of_it() {
        let epoch_one = || (1..=1000).map(|c| Zxid::new(1, c));
        let turn = |rank| Some(Turn { rank, members: 3 });
        assert_eq!(snapshot_points(300, turn(0), epoch_one()), vec![300, 600, 900]);
        assert_eq!(snapshot_points(300, turn(1), epoch_one()), vec![200, 500, 800]);
        assert_eq!(
            snapshot_points(300, turn(2), epoch_one()),
            vec![400, 700, 1000],
            "the first turn under half an interval in is skipped"
        );
        assert_eq!(snapshot_points(300, None, epoch_one()), vec![300, 600, 900], "without turns, every `every`");
    }

    #[test]
    fn turns_go_on_across_a_new_epoch_and_a_missed_turn_is_made_up() {
        // A new epoch restarts the counters, and the turns with them.
        let zxids = (1..=250).map(|c| Zxid::new(1, c)).chain((1..=700).map(|c| Zxid::new(2, c)));
        assert_eq!(snapshot_points(300, Some(Turn { rank: 0, members: 3 }), zxids), vec![300, 600]);
        // Rank 2's turns fall at counters 100, 400, ...: the new epoch's
        // first comes 100 transactions after the last snapshot, and waits.
        let zxids = (1..=400).map(|c| Zxid::new(1, c)).chain((1..=400).map(|c| Zxid::new(2, c)));
        assert_eq!(snapshot_points(300, Some(Turn { rank: 2, members: 3 }), zxids), vec![400, 400]);
        // No turn in sight (counters that never reach it): two intervals
        // without a snapshot take one anyway.
        let mut s = Snapshots::new(300, Zxid::ZERO, Some(Turn { rank: 1, members: 3 }));
        for c in 1..=599 {
            s.applied(Zxid::new(u32::try_from(c).unwrap(), 1));
            assert!(!s.due(), "due after {c} with no turn");
        }
        s.applied(Zxid::new(600, 1));
        assert!(s.due(), "due after two intervals");
    }

    #[test]
    fn turns_of_the_largest_interval_the_configuration_allows_do_not_overflow() {
        let mut s = Snapshots::new(u64::MAX, Zxid::ZERO, Some(Turn { rank: 2, members: 3 }));
        s.applied(Zxid::new(1, u32::MAX));
        assert!(!s.due());
    }

    #[test]
    fn held_until_the_log_is_durable() {
        let mut s = Snapshots::new(0, Zxid::ZERO, None);
        assert!(s.start());
        let tree = DataTree::new();
        s.hold(tree.snapshot());
        assert_eq!(s.release(tree.last_zxid()).map(|t| t.last_zxid()), Some(tree.last_zxid()));
        assert!(s.release(Zxid(100)).is_none(), "handed out once");
    }
}
