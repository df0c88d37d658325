//! When to snapshot the tree, and when a snapshot may be handed out.
//!
//! A snapshot is taken every `every` applied transactions (or on request),
//! one at a time. With a jitter seed, as a served member has, each interval
//! is drawn between half of `every` and `every`, afresh after each snapshot,
//! as ZooKeeper rolls its snapCount: every member applies the same
//! transactions, so fixed intervals would have them all writing (and
//! syncing) a snapshot at the same moment, each stalling its own log's
//! flushes, while staggered ones leave a quorum that is not.
//!
//! A snapshot is handed out only once the local log holds durably
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
    /// Transactions to apply before the next snapshot is due.
    interval: u64,
    /// Draws the intervals (None: every interval is `every`).
    jitter: Option<Jitter>,
    applied_since: u64,
    in_flight: bool,
    /// A copy taken but not yet handed out: its tree is ahead of the durable log.
    waiting: Option<TreeState>,
    /// The zxid of the last durable snapshot.
    previous: Zxid,
}

impl Snapshots {
    /// A schedule taking a snapshot every `every` transactions (0: only on
    /// request), the newest durable one at `previous`; with `jitter_seed`,
    /// each interval is drawn from `every / 2 ..= every` instead.
    pub fn new(every: u64, previous: Zxid, jitter_seed: Option<u64>) -> Snapshots {
        let mut s = Snapshots {
            every,
            interval: every,
            jitter: jitter_seed.map(Jitter),
            applied_since: 0,
            in_flight: false,
            waiting: None,
            previous,
        };
        s.roll();
        s
    }

    /// Draws the next interval.
    fn roll(&mut self) {
        self.interval = match &mut self.jitter {
            Some(jitter) => self.every - jitter.next() % (self.every / 2 + 1),
            None => self.every,
        };
        debug_assert!(self.every == 0 || (self.every.div_ceil(2)..=self.every).contains(&self.interval));
    }

    /// Counts one applied transaction.
    pub fn applied(&mut self) {
        self.applied_since += 1;
    }

    /// Whether a snapshot is due now; if so it counts as started.
    pub fn due(&mut self) -> bool {
        if self.every == 0 || self.in_flight || self.applied_since < self.interval {
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
        self.roll();
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
        self.roll();
    }
}

/// A small deterministic generator (splitmix64) for the intervals: the
/// replica takes no randomness but what its configuration passes in, so a
/// seeded simulation replays the same snapshots.
#[derive(Debug)]
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::DataTree;

    #[test]
    fn due_every_n_and_one_at_a_time() {
        let mut s = Snapshots::new(2, Zxid::ZERO, None);
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
        let mut s = Snapshots::new(2, Zxid::ZERO, None);
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

    /// Applies transactions until a snapshot is due; returns how many.
    fn until_due(s: &mut Snapshots) -> u64 {
        let mut n = 0;
        while !s.due() {
            s.applied();
            n += 1;
            assert!(n <= 1_000_000, "never due");
        }
        s.saved(Zxid(n));
        n
    }

    #[test]
    fn jittered_intervals_fall_between_half_and_all_of_every_and_differ_between_members() {
        let intervals = |seed| {
            let mut s = Snapshots::new(1000, Zxid::ZERO, Some(seed));
            (0..50).map(|_| until_due(&mut s)).collect::<Vec<u64>>()
        };
        let (one, two) = (intervals(1), intervals(2));
        for n in one.iter().chain(&two) {
            assert!((500..=1000).contains(n), "interval {n} outside 500..=1000");
        }
        assert_ne!(one, two, "two members (seeds) snapshot at different points");
        assert!(one.windows(2).any(|w| w[0] != w[1]), "rolled afresh after each snapshot: {one:?}");
        assert_eq!(one, intervals(1), "the same seed draws the same intervals");
        let spread = one.iter().chain(&two).max().unwrap() - one.iter().chain(&two).min().unwrap();
        assert!(spread > 250, "the draws cover the range, not one corner of it: {spread}");
    }

    #[test]
    fn without_a_seed_the_interval_is_every_and_tiny_intervals_still_work() {
        let mut s = Snapshots::new(7, Zxid::ZERO, None);
        assert_eq!((0..5).map(|_| until_due(&mut s)).collect::<Vec<_>>(), vec![7; 5]);
        let mut one = Snapshots::new(1, Zxid::ZERO, Some(9));
        assert_eq!((0..5).map(|_| until_due(&mut one)).collect::<Vec<_>>(), vec![1; 5]);
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
