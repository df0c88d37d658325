//! The in-memory view of a replica's transaction log: everything above its
//! snapshot (the base), in zxid order. Durable copies live in `storage`; this
//! is what synchronization reads to send a follower what it misses.

use super::message::{EpochRange, LogSummary};
use crate::ids::Zxid;
use crate::txn::Entry;
use std::collections::VecDeque;

/// Entries after `base`, ascending, contiguous within each epoch.
#[derive(Clone, Debug, Default)]
pub struct Log {
    base: Zxid,
    entries: VecDeque<Entry>,
}

/// Why an entry cannot follow the log's current end.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The entry does not follow the last one (a hole, or a new epoch not starting at 1).
    #[error("entry {found:?} does not follow {last:?}")]
    Discontinuous {
        /// The current last zxid.
        last: Zxid,
        /// The entry offered.
        found: Zxid,
    },
}

impl Log {
    /// A log holding `entries` above snapshot `base`.
    pub fn new(base: Zxid, entries: Vec<Entry>) -> Log {
        Log { base, entries: entries.into() }
    }

    /// The snapshot point: entries up to it are not held here.
    pub fn base(&self) -> Zxid {
        self.base
    }

    /// The last zxid (the base when empty).
    pub fn last_zxid(&self) -> Zxid {
        self.entries.back().map_or(self.base, |e| e.zxid)
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entries are held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `next` may follow `last` in a log: same epoch and the next
    /// counter, or a later epoch starting at counter 1 (ZOOKEEPER-4925:
    /// never accept a discontinuous history).
    pub fn follows(last: Zxid, next: Zxid) -> bool {
        if next.epoch() == last.epoch() {
            next.counter() == last.counter().wrapping_add(1) && next.counter() != 0
        } else {
            next.epoch() > last.epoch() && next.counter() == 1
        }
    }

    /// Appends an entry that follows the current end.
    pub fn append(&mut self, entry: Entry) -> Result<(), LogError> {
        let last = self.last_zxid();
        // An empty log above a snapshot taken mid-epoch accepts the next counter;
        // a fresh log (base 0) accepts the first entry of any epoch.
        let fits = Log::follows(last, entry.zxid) || (last == Zxid::ZERO && entry.zxid.counter() == 1);
        if !fits {
            return Err(LogError::Discontinuous { last, found: entry.zxid });
        }
        self.entries.push_back(entry);
        Ok(())
    }

    fn position(&self, zxid: Zxid) -> Result<usize, usize> {
        self.entries.binary_search_by(|e| e.zxid.cmp(&zxid))
    }

    /// How many entries lie above `zxid` (a follower's lag behind this log).
    pub fn count_after(&self, zxid: Zxid) -> usize {
        self.entries.len() - self.entries.partition_point(|e| e.zxid <= zxid)
    }

    /// The zxid before the entry `zxid` (the base before the first); the
    /// last zxid when `zxid` is not held.
    pub fn before(&self, zxid: Zxid) -> Zxid {
        match self.position(zxid) {
            Ok(0) => self.base,
            Ok(i) => self.entries[i - 1].zxid,
            Err(_) => self.last_zxid(),
        }
    }

    /// Whether `zxid` is the base or an entry.
    pub fn has(&self, zxid: Zxid) -> bool {
        zxid == self.base || self.position(zxid).is_ok()
    }

    /// The entry with this zxid, if held.
    pub fn get(&self, zxid: Zxid) -> Option<&Entry> {
        self.position(zxid).ok().map(|i| &self.entries[i])
    }

    /// Entries with zxid in `(after, up_to]`, in order.
    pub fn range(&self, after: Zxid, up_to: Zxid) -> Vec<Entry> {
        let start = match self.position(after) {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        self.entries.iter().skip(start).take_while(|e| e.zxid <= up_to).cloned().collect()
    }

    /// Drops every entry above `zxid`; returns how many.
    pub fn truncate_after(&mut self, zxid: Zxid) -> usize {
        let keep = match self.position(zxid) {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        let dropped = self.entries.len().saturating_sub(keep);
        self.entries.truncate(keep);
        dropped
    }

    /// Replaces everything with a snapshot at `zxid`.
    pub fn reset(&mut self, zxid: Zxid) {
        self.base = zxid;
        self.entries.clear();
    }

    /// Forgets entries up to `zxid` (they are in a snapshot now).
    pub fn compact(&mut self, zxid: Zxid) {
        self.compact_keeping(zxid, 0);
    }

    /// Forgets entries up to `zxid` but the newest `keep` of them.
    pub fn compact_keeping(&mut self, zxid: Zxid, keep: usize) {
        let covered = self.entries.partition_point(|e| e.zxid <= zxid);
        let forget = covered.saturating_sub(keep);
        if forget == 0 {
            return;
        }
        self.base = self.entries[forget - 1].zxid;
        self.entries.drain(..forget);
        // The deque would otherwise keep the slots of the largest log it held.
        if self.entries.capacity() > 2 * self.entries.len() + 1024 {
            self.entries.shrink_to_fit();
        }
    }

    /// The epoch ranges of entries above `after`.
    pub fn ranges_after(&self, after: Zxid) -> Vec<EpochRange> {
        let mut ranges: Vec<EpochRange> = Vec::new();
        let start = match self.position(after) {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        for e in self.entries.iter().skip(start) {
            match ranges.last_mut() {
                Some(r) if r.epoch == e.zxid.epoch() => r.last = e.zxid,
                _ => ranges.push(EpochRange { epoch: e.zxid.epoch(), first: e.zxid, last: e.zxid }),
            }
        }
        ranges
    }

    /// The summary a follower sends in ACKEPOCH.
    pub fn summary(&self) -> LogSummary {
        LogSummary { base: self.base, epochs: self.ranges_after(self.base) }
    }
}

/// How a leader brings one follower to its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPlan {
    /// Send the entries after `from`; first cut the follower's log back to
    /// `from` when `truncate` (TRUNC + DIFF).
    Diff {
        /// The last zxid both histories share.
        from: Zxid,
        /// Whether the follower holds entries past `from` that must go.
        truncate: bool,
    },
    /// The follower is too far behind (or its history cannot be checked):
    /// send the whole tree.
    Snap,
}

/// Finds where a follower's history parts from the leader's.
///
/// Both logs are contiguous within each epoch and a zxid names the same
/// transaction everywhere it exists (one leader per epoch), so the follower's
/// log is a prefix of the leader's up to the last point where their epoch
/// ranges agree. Anything the leader cannot check from what it holds in
/// memory means SNAP.
pub fn plan_sync(leader: &Log, follower: &LogSummary, follower_last: Zxid) -> SyncPlan {
    let Some(follower) = rebase(follower, leader.base()) else { return SyncPlan::Snap };
    if !leader.has(follower.base) {
        return SyncPlan::Snap;
    }
    let ours = leader.ranges_after(follower.base);
    let mut common = follower.base;
    for (i, theirs) in follower.epochs.iter().enumerate() {
        let Some(mine) = ours.get(i) else { break };
        if mine.epoch != theirs.epoch || mine.first != theirs.first {
            break;
        }
        if theirs.last <= mine.last {
            common = theirs.last;
            if theirs.last < mine.last {
                break;
            }
        } else {
            common = mine.last;
            break;
        }
    }
    SyncPlan::Diff { from: common, truncate: follower_last > common }
}

/// The follower's summary seen from the leader's snapshot point `base`: as
/// is when the follower's own snapshot is not older, else only what lies
/// above `base`, provided the follower holds `base` itself. Holding it means
/// its history up to `base` is the committed one (a zxid names one
/// transaction, and logs that share an entry share everything before it), so
/// a DIFF from there is enough, as in ZooKeeper when a follower's last zxid
/// lies between the leader's oldest and newest logged proposals. `None`:
/// the follower parted from the leader below `base` or never reached it,
/// and only a snapshot can bring it over.
fn rebase(follower: &LogSummary, base: Zxid) -> Option<LogSummary> {
    if follower.base >= base {
        return Some(follower.clone());
    }
    let at = follower.epochs.iter().position(|r| r.epoch == base.epoch() && r.first <= base && base <= r.last)?;
    let holding = follower.epochs[at];
    let mut epochs = Vec::with_capacity(follower.epochs.len() - at);
    if base < holding.last {
        epochs.push(EpochRange { first: Zxid::new(base.epoch(), base.counter() + 1), ..holding });
    }
    epochs.extend_from_slice(&follower.epochs[at + 1..]);
    Some(LogSummary { base, epochs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;
    use crate::txn::{Txn, TxnBody};

    fn entry(epoch: u32, counter: u32) -> Entry {
        Entry::new(
            Zxid::new(epoch, counter),
            Txn { session: SessionId(1), cxid: 0, time_ms: 0, body: TxnBody::Error(crate::error::ErrorCode::Ok) },
        )
    }

    fn log_of(base: Zxid, zxids: &[(u32, u32)]) -> Log {
        let mut log = Log::new(base, vec![]);
        for &(e, c) in zxids {
            log.append(entry(e, c)).unwrap();
        }
        log
    }

    #[test]
    fn append_enforces_continuity() {
        let mut log = log_of(Zxid::ZERO, &[(1, 1), (1, 2)]);
        assert!(log.append(entry(1, 4)).is_err(), "hole");
        assert!(log.append(entry(2, 2)).is_err(), "new epoch must start at 1");
        assert!(log.append(entry(2, 1)).is_ok());
        let mut mid = Log::new(Zxid::new(3, 7), vec![]);
        assert!(mid.append(entry(3, 8)).is_ok(), "continues a snapshot taken mid-epoch");
    }

    #[test]
    fn compact_keeping_leaves_the_newest_entries_below_the_point() {
        let mut log = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3), (1, 4), (2, 1)]);
        log.compact_keeping(Zxid::new(1, 4), 2);
        assert_eq!(log.base(), Zxid::new(1, 2));
        assert_eq!(log.len(), 3);
        assert!(log.has(Zxid::new(1, 2)) && log.get(Zxid::new(1, 3)).is_some());
        log.compact_keeping(Zxid::new(1, 4), 5);
        assert_eq!(log.len(), 3, "keeping more than it holds forgets nothing");
        log.compact_keeping(Zxid::new(2, 1), 0);
        assert_eq!((log.base(), log.len()), (Zxid::new(2, 1), 0));
    }

    #[test]
    fn truncate_range_and_compact() {
        let mut log = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3), (2, 1)]);
        assert_eq!(log.range(Zxid::new(1, 1), Zxid::new(2, 1)).len(), 3);
        assert_eq!(log.truncate_after(Zxid::new(1, 2)), 2);
        assert_eq!(log.last_zxid(), Zxid::new(1, 2));
        log.compact(Zxid::new(1, 1));
        assert_eq!(log.base(), Zxid::new(1, 1));
        assert!(log.has(Zxid::new(1, 1)) && log.has(Zxid::new(1, 2)));
        assert!(!log.has(Zxid::new(1, 3)));
    }

    #[test]
    fn follower_that_is_a_prefix_gets_a_plain_diff() {
        let leader = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (2, 1), (2, 2)]);
        let follower = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (2, 1)]);
        let plan = plan_sync(&leader, &follower.summary(), follower.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(2, 1), truncate: false });
    }

    #[test]
    fn follower_with_uncommitted_tail_is_truncated() {
        // The follower logged (2,2),(2,3) under a leader that died; the new
        // leader only has (2,1) of epoch 2 and then its own epoch 3.
        let leader = log_of(Zxid::ZERO, &[(1, 1), (2, 1), (3, 1)]);
        let follower = log_of(Zxid::ZERO, &[(1, 1), (2, 1), (2, 2), (2, 3)]);
        let plan = plan_sync(&leader, &follower.summary(), follower.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(2, 1), truncate: true });
    }

    #[test]
    fn follower_missing_a_whole_epoch_parts_before_it() {
        // The ZOOKEEPER-1156 shape: comparing last zxids alone would truncate
        // to (1,3) and leave the follower without epoch 2's entries.
        let leader = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3), (2, 1), (3, 1)]);
        let follower = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (3, 1)]);
        let plan = plan_sync(&leader, &follower.summary(), follower.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(1, 2), truncate: true });
    }

    #[test]
    fn follower_with_a_divergent_epoch_is_cut_at_the_epoch_start() {
        let leader = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3)]);
        let follower = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (2, 1)]);
        let plan = plan_sync(&leader, &follower.summary(), follower.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(1, 2), truncate: true });
    }

    #[test]
    fn follower_behind_the_leaders_memory_gets_a_snapshot() {
        let leader = log_of(Zxid::new(1, 10), &[(1, 11), (1, 12)]);
        let follower = log_of(Zxid::ZERO, &[(1, 1), (1, 2)]);
        assert_eq!(plan_sync(&leader, &follower.summary(), follower.last_zxid()), SyncPlan::Snap);
        let fresh = Log::default();
        assert_eq!(plan_sync(&leader, &fresh.summary(), fresh.last_zxid()), SyncPlan::Snap);
    }

    #[test]
    fn follower_holding_the_leaders_snapshot_point_gets_a_diff() {
        // The leader snapshotted at (2,5) and dropped what lies below; the
        // follower restarted from an older snapshot but logged past (2,5).
        let leader = log_of(Zxid::new(2, 5), &[(2, 6), (2, 7), (3, 1)]);
        let behind = log_of(Zxid::ZERO, &[(1, 1), (2, 1), (2, 2), (2, 3), (2, 4), (2, 5), (2, 6)]);
        let plan = plan_sync(&leader, &behind.summary(), behind.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(2, 6), truncate: false });
        let at_base = log_of(Zxid::ZERO, &[(1, 1), (2, 1), (2, 2), (2, 3), (2, 4), (2, 5)]);
        let plan = plan_sync(&leader, &at_base.summary(), at_base.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(2, 5), truncate: false });
    }

    #[test]
    fn follower_past_the_leaders_snapshot_point_with_a_dead_tail_is_truncated() {
        // (2,8) and (2,9) were never committed: the leader went on in epoch 3.
        let leader = log_of(Zxid::new(2, 5), &[(2, 6), (2, 7), (3, 1)]);
        let follower =
            log_of(Zxid::new(1, 1), &[(2, 1), (2, 2), (2, 3), (2, 4), (2, 5), (2, 6), (2, 7), (2, 8), (2, 9)]);
        let plan = plan_sync(&leader, &follower.summary(), follower.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(2, 7), truncate: true });
    }

    #[test]
    fn follower_that_parted_below_the_leaders_snapshot_point_gets_a_snapshot() {
        let leader = log_of(Zxid::new(2, 5), &[(2, 6)]);
        // Never saw epoch 2: its (1,x) tail beyond the last committed epoch-1
        // entry cannot be checked against anything the leader holds.
        let other_epoch = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 6), (1, 7)]);
        assert_eq!(plan_sync(&leader, &other_epoch.summary(), other_epoch.last_zxid()), SyncPlan::Snap);
        // Saw epoch 2 but not as far as (2,5).
        let short = log_of(Zxid::ZERO, &[(1, 1), (2, 1), (2, 2)]);
        assert_eq!(plan_sync(&leader, &short.summary(), short.last_zxid()), SyncPlan::Snap);
    }

    #[test]
    fn follower_in_sync_gets_an_empty_diff() {
        let leader = log_of(Zxid::ZERO, &[(1, 1), (1, 2)]);
        let plan = plan_sync(&leader, &leader.summary(), leader.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(1, 2), truncate: false });
    }

    #[test]
    fn follower_with_snapshot_inside_the_leaders_log() {
        let leader = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3), (1, 4)]);
        let follower = log_of(Zxid::new(1, 2), &[(1, 3)]);
        let plan = plan_sync(&leader, &follower.summary(), follower.last_zxid());
        assert_eq!(plan, SyncPlan::Diff { from: Zxid::new(1, 3), truncate: false });
    }
}
