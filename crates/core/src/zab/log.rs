//! A replica's transaction log as Zab sees it: everything above its
//! snapshot (the base), in zxid order. The newest entries are held here; the
//! older ones, once committed and durable, are only *stored* (in `storage`),
//! and this keeps just their epoch ranges. Synchronization reads what a
//! follower misses from both: held entries it sends itself, stored ones it
//! asks the runtime to read back ([`super::Io::SendStored`]).

use super::message::{EpochRange, LogSummary};
use crate::ids::Zxid;
use crate::members::Configuration;
use crate::txn::{Entry, TxnBody};
use std::collections::VecDeque;

/// Entries after `base`, ascending, contiguous within each epoch: first the
/// stored ones (ranges only), then the held ones.
#[derive(Clone, Debug, Default)]
pub struct Log {
    base: Zxid,
    /// Durable in storage and no longer held: one range per epoch, ascending.
    stored: Vec<EpochRange>,
    entries: VecDeque<Entry>,
    /// The configuration in force at `base`.
    base_config: Configuration,
    /// The configuration after each reconfiguration entry above `base`, in
    /// zxid order: the last is in force (a member acts on a configuration
    /// its log holds, committed or not; see [`crate::members`]).
    configs: Vec<(Zxid, Configuration)>,
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

/// The zxid after `zxid` in the same epoch.
fn next_in_epoch(zxid: Zxid) -> Zxid {
    Zxid::new(zxid.epoch(), zxid.counter().wrapping_add(1))
}

/// How many zxids of `range` lie above `zxid`.
fn count_above(range: &EpochRange, zxid: Zxid) -> usize {
    if zxid < range.first {
        (range.last.counter() - range.first.counter()) as usize + 1
    } else if zxid >= range.last {
        0
    } else {
        // Between first and last, so in the range's epoch.
        (range.last.counter() - zxid.counter()) as usize
    }
}

/// Adds `zxid` at the end of `ranges` (it follows the last one).
fn push_zxid(ranges: &mut Vec<EpochRange>, zxid: Zxid) {
    match ranges.last_mut() {
        Some(r) if r.epoch == zxid.epoch() => r.last = zxid,
        _ => ranges.push(EpochRange { epoch: zxid.epoch(), first: zxid, last: zxid }),
    }
}

impl Log {
    /// A log holding `entries` above snapshot `base`, whose configuration is `base_config`.
    pub fn new(base: Zxid, base_config: Configuration, entries: Vec<Entry>) -> Log {
        let mut log = Log { base, base_config, ..Log::default() };
        for entry in &entries {
            log.note_configuration(entry);
        }
        log.entries = entries.into();
        log
    }

    /// The configuration in force: the newest this log holds.
    pub fn configuration(&self) -> &Configuration {
        self.configs.last().map_or(&self.base_config, |(_, c)| c)
    }

    /// The configuration in force at `zxid` (at or above the base).
    pub fn configuration_at(&self, zxid: Zxid) -> &Configuration {
        self.configs.iter().rev().find(|(z, _)| *z <= zxid).map_or(&self.base_config, |(_, c)| c)
    }

    /// Whether a reconfiguration entry lies above `zxid`.
    pub fn reconfiguring_after(&self, zxid: Zxid) -> bool {
        self.configs.last().is_some_and(|(z, _)| *z > zxid)
    }

    /// Takes `configuration` as the one in force, from a leader whose log
    /// this one now equals: when no reconfiguration entry here names one,
    /// it is the base's (entries name the whole configuration they lead to,
    /// so with one here, ours already is the leader's).
    /// Returns whether ours changed.
    pub fn adopt_configuration(&mut self, configuration: Configuration) -> bool {
        if !self.configs.is_empty() || self.base_config == configuration {
            return false;
        }
        self.base_config = configuration;
        true
    }

    fn note_configuration(&mut self, entry: &Entry) {
        if let TxnBody::Reconfig(change) = &entry.txn.body {
            self.configs.push((entry.zxid, change.configuration(entry.zxid)));
        }
    }

    /// The snapshot point: entries up to it are not in this log.
    pub fn base(&self) -> Zxid {
        self.base
    }

    /// The last zxid (the base when empty).
    pub fn last_zxid(&self) -> Zxid {
        self.entries.back().map(|e| e.zxid).or(self.stored_last()).unwrap_or(self.base)
    }

    /// The last stored (not held) zxid, if any entry is only stored.
    pub fn stored_last(&self) -> Option<Zxid> {
        self.stored.last().map(|r| r.last)
    }

    /// Number of entries held in memory.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Number of entries only stored.
    pub fn stored_len(&self) -> usize {
        self.stored.iter().map(|r| count_above(r, Zxid::ZERO)).sum()
    }

    /// Whether no entries are held in memory.
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
        self.note_configuration(&entry);
        self.entries.push_back(entry);
        Ok(())
    }

    fn position(&self, zxid: Zxid) -> Result<usize, usize> {
        self.entries.binary_search_by(|e| e.zxid.cmp(&zxid))
    }

    /// The stored range holding `zxid`, by index.
    fn stored_at(&self, zxid: Zxid) -> Option<usize> {
        self.stored.iter().position(|r| r.first <= zxid && zxid <= r.last)
    }

    /// How many entries lie above `zxid` (a follower's lag behind this log).
    pub fn count_after(&self, zxid: Zxid) -> usize {
        let stored: usize = self.stored.iter().map(|r| count_above(r, zxid)).sum();
        stored + self.entries.len() - self.entries.partition_point(|e| e.zxid <= zxid)
    }

    /// The zxid before the entry `zxid` (the base before the first); the
    /// last zxid when `zxid` is not in the log.
    pub fn before(&self, zxid: Zxid) -> Zxid {
        match self.position(zxid) {
            Ok(0) => self.stored_last().unwrap_or(self.base),
            Ok(i) => self.entries[i - 1].zxid,
            Err(_) => match self.stored_at(zxid) {
                Some(i) if self.stored[i].first == zxid => i.checked_sub(1).map_or(self.base, |p| self.stored[p].last),
                Some(_) => Zxid::new(zxid.epoch(), zxid.counter() - 1),
                None => self.last_zxid(),
            },
        }
    }

    /// Whether `zxid` is the base or an entry, held or stored.
    pub fn has(&self, zxid: Zxid) -> bool {
        zxid == self.base || self.position(zxid).is_ok() || self.stored_at(zxid).is_some()
    }

    /// The held entry with this zxid.
    pub fn get(&self, zxid: Zxid) -> Option<&Entry> {
        self.position(zxid).ok().map(|i| &self.entries[i])
    }

    /// Held entries with zxid in `(after, up_to]`, in order. Entries above
    /// `after` that are only stored are not among them: see [`Log::stored_last`].
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
        let mut dropped = self.entries.len().saturating_sub(keep);
        self.entries.truncate(keep);
        self.configs.retain(|(z, _)| *z <= zxid);
        if self.entries.is_empty() {
            // Only committed entries are stored, so no truncation should
            // reach them; a cut there is still kept exact.
            dropped += self.stored.iter().map(|r| count_above(r, zxid)).sum::<usize>();
            self.stored.retain(|r| r.first <= zxid);
            if let Some(r) = self.stored.last_mut() {
                r.last = r.last.min(zxid);
            }
        }
        dropped
    }

    /// Replaces everything with a snapshot at `zxid` whose configuration is `config`.
    pub fn reset(&mut self, zxid: Zxid, config: Configuration) {
        self.base = zxid;
        self.base_config = config;
        self.configs.clear();
        self.stored.clear();
        self.entries.clear();
    }

    /// Forgets entries up to `zxid` (a snapshot covers them and storage may
    /// drop them): the base moves to the last of them.
    pub fn compact(&mut self, zxid: Zxid) {
        if zxid <= self.base {
            return;
        }
        let mut base = self.base;
        while let Some(r) = self.stored.first_mut() {
            if r.last <= zxid {
                base = r.last;
                self.stored.remove(0);
            } else {
                if r.first <= zxid {
                    base = zxid;
                    r.first = next_in_epoch(zxid);
                }
                break;
            }
        }
        let forget = self.entries.partition_point(|e| e.zxid <= zxid);
        if forget > 0 {
            base = self.entries[forget - 1].zxid;
            self.entries.drain(..forget);
            self.release_slots();
        }
        self.base = base;
        let folded = self.configs.partition_point(|(z, _)| *z <= base);
        if let Some((_, config)) = self.configs.drain(..folded).next_back() {
            self.base_config = config;
        }
    }

    /// Stops holding entries up to `zxid` but the newest `keep` of them:
    /// they stay in the log as stored ones. The caller vouches that storage
    /// holds them durably.
    pub fn spill(&mut self, zxid: Zxid, keep: usize) {
        let covered = self.entries.partition_point(|e| e.zxid <= zxid);
        let spill = covered.saturating_sub(keep);
        if spill == 0 {
            return;
        }
        for entry in self.entries.drain(..spill) {
            push_zxid(&mut self.stored, entry.zxid);
        }
        self.release_slots();
    }

    /// The deque would otherwise keep the slots of the largest log it held.
    fn release_slots(&mut self) {
        if self.entries.capacity() > 2 * self.entries.len() + 1024 {
            self.entries.shrink_to_fit();
        }
    }

    /// The epoch ranges of stored entries above `after`.
    pub fn stored_ranges_after(&self, after: Zxid) -> Vec<EpochRange> {
        let above = |r: &EpochRange| {
            let first = if r.first > after { r.first } else { next_in_epoch(after) };
            EpochRange { first, ..*r }
        };
        self.stored.iter().filter(|r| r.last > after).map(above).collect()
    }

    /// The epoch ranges of entries above `after`, stored and held alike.
    pub fn ranges_after(&self, after: Zxid) -> Vec<EpochRange> {
        let mut ranges = self.stored_ranges_after(after);
        let start = match self.position(after) {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        for e in self.entries.iter().skip(start) {
            push_zxid(&mut ranges, e.zxid);
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
        let mut log = Log::new(base, Configuration::default(), vec![]);
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
        let mut mid = Log::new(Zxid::new(3, 7), Configuration::default(), vec![]);
        assert!(mid.append(entry(3, 8)).is_ok(), "continues a snapshot taken mid-epoch");
    }

    #[test]
    fn spilled_entries_stay_in_the_log_as_stored_ranges() {
        let zxids = [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (3, 1)];
        let whole = log_of(Zxid::ZERO, &zxids);
        let mut log = whole.clone();
        log.spill(Zxid::new(2, 3), 2);
        assert_eq!((log.len(), log.stored_len()), (3, 4), "the newest two up to (2,3) stay held");
        assert_eq!(log.stored_last(), Some(Zxid::new(2, 1)));
        assert_eq!(log.last_zxid(), Zxid::new(3, 1));
        // Seen from outside, nothing changed but what is held.
        assert_eq!(log.summary(), whole.summary(), "one range per epoch across the stored/held seam");
        for after in [Zxid::ZERO, Zxid::new(1, 2), Zxid::new(1, 3), Zxid::new(2, 1), Zxid::new(2, 2)] {
            assert_eq!(log.ranges_after(after), whole.ranges_after(after), "ranges after {after}");
            assert_eq!(log.count_after(after), whole.count_after(after), "count after {after}");
        }
        for &(e, c) in &zxids {
            let z = Zxid::new(e, c);
            assert!(log.has(z), "{z} is in the log");
            assert_eq!(log.before(z), whole.before(z), "before {z}");
        }
        assert!(log.get(Zxid::new(1, 3)).is_none() && log.get(Zxid::new(2, 2)).is_some());
        assert_eq!(log.range(Zxid::new(2, 1), Zxid::new(3, 1)).len(), 3, "held entries after the stored ones");
        log.spill(Zxid::new(1, 1), 0);
        assert_eq!(log.stored_len(), 4, "spilling what is already stored changes nothing");
    }

    #[test]
    fn compacting_moves_the_base_through_stored_and_held_entries() {
        let mut log = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]);
        log.spill(Zxid::new(2, 1), 0);
        log.compact(Zxid::new(1, 2));
        assert_eq!((log.base(), log.stored_len(), log.len()), (Zxid::new(1, 2), 2, 1));
        assert!(!log.has(Zxid::new(1, 1)) && log.has(Zxid::new(1, 3)));
        assert_eq!(log.before(Zxid::new(1, 3)), Zxid::new(1, 2), "the first stored entry follows the base");
        log.compact(Zxid::new(2, 2));
        assert_eq!((log.base(), log.stored_len(), log.len()), (Zxid::new(2, 2), 0, 0));
        log.compact(Zxid::new(1, 1));
        assert_eq!(log.base(), Zxid::new(2, 2), "the base never goes back");
    }

    #[test]
    fn a_truncation_into_stored_entries_is_exact() {
        let mut log = log_of(Zxid::ZERO, &[(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]);
        log.spill(Zxid::new(2, 2), 0);
        assert_eq!(log.truncate_after(Zxid::new(1, 2)), 3);
        assert_eq!((log.last_zxid(), log.stored_len()), (Zxid::new(1, 2), 2));
        assert!(log.append(entry(1, 3)).is_ok(), "the log continues where it was cut");
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
