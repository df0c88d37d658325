//! One suite of named checks that every [`Storage`] must pass, run for each
//! store by [`storage_conformance_suite!`](crate::storage_conformance_suite)
//! (the in-memory store here, sled in the server crate), plus the checks only
//! the in-memory store can express: crash loss.

use super::mem_store::MemStorage;
use super::{Recovered, Scan, Storage, StorageError};
use crate::acl::Acl;
use crate::ids::{SessionId, Zxid};
use crate::tree::{snapshot, DataTree, TreeState};
use crate::txn::{Entry, Txn, TxnBody};
use crate::zab::{EpochRange, StorageOp};
use bytes::Bytes;

/// A store under test and what a test can do to it from outside.
pub trait Harness {
    /// The store type.
    type Store: Storage;
    /// The store.
    fn store(&self) -> &Self::Store;
    /// A clean restart: the handle is dropped and the store opened again.
    fn reopen(&mut self);
    /// Damages one chunk of a stored snapshot and reopens.
    fn corrupt_snapshot_chunk(&mut self, zxid: Zxid, chunk: u32);
}

pub struct MemHarness {
    store: MemStorage,
}

impl MemHarness {
    /// A fresh in-memory store.
    pub fn new() -> MemHarness {
        MemHarness { store: MemStorage::new() }
    }
}

impl Default for MemHarness {
    fn default() -> MemHarness {
        MemHarness::new()
    }
}

impl Harness for MemHarness {
    type Store = MemStorage;

    fn store(&self) -> &MemStorage {
        &self.store
    }

    fn reopen(&mut self) {
        let shared = self.store.clone();
        self.store = shared;
    }

    fn corrupt_snapshot_chunk(&mut self, zxid: Zxid, chunk: u32) {
        assert!(self.store.corrupt_snapshot_chunk(zxid, chunk as usize), "no chunk {chunk} at {zxid:?}");
    }
}

/// A history of real transactions, with the tree after each, so recovery can
/// be checked against the state it must rebuild.
pub struct History {
    /// The entries, in order.
    pub entries: Vec<Entry>,
    states: Vec<TreeState>,
}

const SESSION: SessionId = SessionId(0x0100_0000_0000_0001);

impl History {
    /// A history of one transaction per zxid, with the tree after each.
    pub fn new(zxids: impl IntoIterator<Item = Zxid>) -> History {
        let mut tree = DataTree::new();
        let mut entries = Vec::new();
        let mut states = Vec::new();
        for (i, zxid) in zxids.into_iter().enumerate() {
            let body = if i == 0 {
                TxnBody::CreateSession { timeout_ms: 10_000, password: Bytes::from_static(&[9; 16]) }
            } else {
                TxnBody::Create {
                    path: format!("/n{i}"),
                    data: Bytes::from(vec![i as u8; 40]).into(),
                    acl: Acl::open_unsafe(),
                    ephemeral_owner: if i % 3 == 0 { SESSION.0 } else { 0 },
                    parent_cversion: i as i32,
                }
            };
            let txn = Txn { session: SESSION, cxid: i as i32, time_ms: 1_000 + i as i64, body };
            tree.apply(zxid, &txn);
            entries.push(Entry::new(zxid, txn));
            states.push(tree.snapshot());
        }
        History { entries, states }
    }

    /// Counters 1..=n of one epoch.
    pub fn epoch(epoch: u32, n: u32) -> History {
        History::new((1..=n).map(|c| Zxid::new(epoch, c)))
    }

    fn index(&self, zxid: Zxid) -> usize {
        self.entries.iter().position(|e| e.zxid == zxid).expect("zxid is in the history")
    }

    /// Entries with from ≤ zxid ≤ to.
    pub fn slice(&self, from: Zxid, to: Zxid) -> Vec<Entry> {
        self.entries.iter().filter(|e| e.zxid >= from && e.zxid <= to).cloned().collect()
    }

    /// The tree right after `zxid`.
    pub fn state_at(&self, zxid: Zxid) -> &TreeState {
        &self.states[self.index(zxid)]
    }

    /// The snapshot at `zxid`, in small chunks so several are stored.
    pub fn chunks_at(&self, zxid: Zxid) -> Vec<Bytes> {
        let (chunks, _) = snapshot::to_chunks(self.state_at(zxid), 256);
        assert!(chunks.len() > 1, "tests want multi-chunk snapshots");
        chunks
    }
}

/// The zxid of counter `counter` in epoch 1.
pub fn z(counter: u32) -> Zxid {
    Zxid::new(1, counter)
}

/// Appends `entries` as one operation.
pub fn append(store: &impl Storage, entries: Vec<Entry>) {
    store.apply(&[StorageOp::Append(entries)]).expect("append");
}

/// The zxids of `entries`.
pub fn zxids(entries: &[Entry]) -> Vec<Zxid> {
    entries.iter().map(|e| e.zxid).collect()
}

/// The tree a recovered replica rebuilds: snapshot, then every later entry.
pub fn replay(recovered: &Recovered) -> TreeState {
    let mut tree = recovered.snapshot.clone().map_or_else(DataTree::new, DataTree::from_state);
    for entry in &recovered.log {
        tree.apply(entry.zxid, &entry.txn);
    }
    tree.snapshot()
}

/// Checks `recovered` rebuilds the history up to `last`, exactly.
pub fn assert_rebuilds(recovered: &Recovered, history: &History, last: Zxid) {
    assert_eq!(recovered.last_zxid(), last);
    let rebuilt = replay(recovered);
    assert_eq!(rebuilt.digest(), history.state_at(last).digest(), "replayed tree differs at {last:?}");
    assert_eq!(rebuilt.last_zxid(), last);
}

/// Every store: append and recover.
pub fn append_and_recover(h: &mut impl Harness) {
    let fresh = h.store().recover().expect("recover a fresh store");
    assert_eq!((fresh.accepted_epoch, fresh.current_epoch), (0, 0));
    assert!(fresh.snapshot.is_none() && fresh.log.is_empty());
    assert_eq!(h.store().log_bounds().expect("bounds"), None);

    let history = History::epoch(1, 10);
    append(h.store(), history.slice(z(1), z(4)));
    append(h.store(), history.slice(z(5), z(10)));
    h.store().flush().expect("flush");
    let recovered = h.store().recover().expect("recover");
    assert_eq!(recovered.log, history.entries);
    assert!(recovered.snapshot.is_none());
    assert_rebuilds(&recovered, &history, z(10));
    assert_eq!(h.store().log_bounds().expect("bounds"), Some((z(1), z(10))));
    assert_eq!(zxids(&h.store().read_log(z(3), 4).expect("read")), vec![z(3), z(4), z(5), z(6)]);
    assert_eq!(zxids(&h.store().read_log(z(9), 100).expect("read")), vec![z(9), z(10)]);
    assert!(h.store().read_log(z(11), 5).expect("read").is_empty());

    h.reopen();
    let again = h.store().recover().expect("recover after reopen");
    assert_eq!(again.log, history.entries);
}

/// Every store: append rejects non increasing.
pub fn append_rejects_non_increasing(h: &mut impl Harness) {
    let history = History::epoch(1, 8);
    let first_at_two = history.slice(z(2), z(2));
    let err = h.store().apply(&[StorageOp::Append(first_at_two)]).expect_err("an empty log starts at counter 1");
    assert!(matches!(err, StorageError::Invalid(_)), "{err}");

    append(h.store(), history.slice(z(1), z(5)));
    for bad in [vec![z(5)], vec![z(3)], vec![z(7)], vec![z(6), z(6)], vec![z(6), z(8)], vec![Zxid::new(2, 0)]] {
        let entries: Vec<Entry> =
            bad.iter().map(|zxid| Entry { zxid: *zxid, txn: history.entries[0].txn.clone() }).collect();
        let err = h.store().apply(&[StorageOp::Append(entries)]).expect_err("bad append");
        assert!(matches!(err, StorageError::Invalid(_)), "{bad:?}: {err}");
    }
    assert_eq!(h.store().log_bounds().expect("bounds"), Some((z(1), z(5))), "rejected appends change nothing");
    append(h.store(), history.slice(z(6), z(8)));
    h.store().flush().expect("flush");
    assert_eq!(h.store().recover().expect("recover").log, history.entries);
}

/// Every store: truncate.
pub fn truncate(h: &mut impl Harness) {
    let history = History::epoch(1, 10);
    append(h.store(), history.entries.clone());
    h.store().apply(&[StorageOp::TruncateAfter(z(6))]).expect("truncate");
    assert_eq!(h.store().log_bounds().expect("bounds"), Some((z(1), z(6))));
    // A different history continues from the truncation point.
    let other = History::new((1..=6).map(z).chain([Zxid::new(2, 1), Zxid::new(2, 2)]));
    append(h.store(), other.slice(Zxid::new(2, 1), Zxid::new(2, 2)));
    h.store().apply(&[StorageOp::TruncateAfter(Zxid::new(3, 0))]).expect("truncate past the end is a no-op");
    h.store().flush().expect("flush");
    h.reopen();
    let recovered = h.store().recover().expect("recover");
    assert_eq!(recovered.log, other.entries);
    assert_rebuilds(&recovered, &other, Zxid::new(2, 2));

    h.store().apply(&[StorageOp::TruncateAfter(Zxid::ZERO)]).expect("truncate all");
    assert_eq!(h.store().log_bounds().expect("bounds"), None);
    assert!(h.store().recover().expect("recover").log.is_empty());
}

/// Every store: truncate below snapshot rejected.
pub fn truncate_below_snapshot_rejected(h: &mut impl Harness) {
    let history = History::epoch(1, 10);
    append(h.store(), history.entries.clone());
    h.store().save_snapshot(z(8), &history.chunks_at(z(8))).expect("snapshot");
    let err = h.store().apply(&[StorageOp::TruncateAfter(z(5))]).expect_err("below the snapshot");
    assert!(matches!(err, StorageError::Invalid(_)), "{err}");
    h.store().apply(&[StorageOp::TruncateAfter(z(8))]).expect("truncate down to the snapshot");
    assert_eq!(h.store().log_bounds().expect("bounds"), Some((z(1), z(8))));
}

/// Every store: epochs.
pub fn epochs(h: &mut impl Harness) {
    h.store().apply(&[StorageOp::SetAcceptedEpoch(3), StorageOp::SetCurrentEpoch(2)]).expect("epochs");
    // Entries of several epochs; a new epoch may start above counter 1.
    let history = History::new([Zxid::new(1, 1), Zxid::new(1, 2), Zxid::new(2, 1), Zxid::new(3, 5), Zxid::new(3, 6)]);
    append(h.store(), history.entries.clone());
    h.store().flush().expect("flush");
    h.reopen();
    let recovered = h.store().recover().expect("recover");
    assert_eq!((recovered.accepted_epoch, recovered.current_epoch), (3, 2));
    assert_eq!(recovered.log, history.entries);
    h.store().apply(&[StorageOp::SetAcceptedEpoch(4), StorageOp::SetCurrentEpoch(4)]).expect("epochs");
    h.store().flush().expect("flush");
    h.reopen();
    let recovered = h.store().recover().expect("recover");
    assert_eq!((recovered.accepted_epoch, recovered.current_epoch), (4, 4));
}

/// Every store: install snapshot replaces log.
pub fn install_snapshot_replaces_log(h: &mut impl Harness) {
    let local = History::epoch(1, 8);
    append(h.store(), local.entries.clone());
    h.store().save_snapshot(z(4), &local.chunks_at(z(4))).expect("local snapshot");
    // The leader's history diverged after (1,5).
    let leader = History::new((1..=5).map(z).chain((1..=5).map(|c| Zxid::new(2, c))));
    let at = Zxid::new(2, 3);
    h.store().apply(&[StorageOp::InstallSnapshot { zxid: at, chunks: leader.chunks_at(at) }]).expect("install");
    assert_eq!(h.store().log_bounds().expect("bounds"), None, "the whole log is dropped");
    let bad = leader.slice(Zxid::new(2, 5), Zxid::new(2, 5));
    assert!(matches!(h.store().apply(&[StorageOp::Append(bad)]), Err(StorageError::Invalid(_))));
    append(h.store(), leader.slice(Zxid::new(2, 4), Zxid::new(2, 5)));
    h.store().flush().expect("flush");
    h.reopen();
    let recovered = h.store().recover().expect("recover");
    assert_eq!(recovered.snapshot_zxid(), at);
    assert_eq!(zxids(&recovered.log), vec![Zxid::new(2, 4), Zxid::new(2, 5)]);
    assert_rebuilds(&recovered, &leader, Zxid::new(2, 5));
    let stored: Vec<Zxid> = h.store().snapshots().expect("list").iter().map(|s| s.zxid).collect();
    assert_eq!(stored, vec![z(4), at]);
}

/// Every store: install snapshot drops newer snapshots.
pub fn install_snapshot_drops_newer_snapshots(h: &mut impl Harness) {
    let history = History::epoch(1, 12);
    append(h.store(), history.entries.clone());
    h.store().save_snapshot(z(10), &history.chunks_at(z(10))).expect("snapshot");
    h.store().apply(&[StorageOp::InstallSnapshot { zxid: z(6), chunks: history.chunks_at(z(6)) }]).expect("install");
    // Installing again at the same zxid replaces it in place.
    h.store()
        .apply(&[StorageOp::InstallSnapshot { zxid: z(6), chunks: history.chunks_at(z(6)) }])
        .expect("install again");
    append(h.store(), history.slice(z(7), z(9)));
    h.store().flush().expect("flush");
    h.reopen();
    let stored: Vec<Zxid> = h.store().snapshots().expect("list").iter().map(|s| s.zxid).collect();
    assert_eq!(stored, vec![z(6)]);
    let recovered = h.store().recover().expect("recover");
    assert_eq!(recovered.snapshot_zxid(), z(6));
    assert_rebuilds(&recovered, &history, z(9));
}

/// Every store: purge keeps newest.
pub fn purge_keeps_newest(h: &mut impl Harness) {
    let history = History::epoch(1, 30);
    append(h.store(), history.entries.clone());
    assert_eq!(h.store().purge(2).expect("purge with no snapshot"), Default::default());
    for at in [5, 10, 20, 25] {
        let meta = h.store().save_snapshot(z(at), &history.chunks_at(z(at))).expect("snapshot");
        assert_eq!(meta.zxid, z(at));
        assert_eq!(meta.bytes, history.chunks_at(z(at)).iter().map(|c| c.len() as u64).sum::<u64>());
    }
    assert!(matches!(h.store().purge(0), Err(StorageError::Invalid(_))));
    let report = h.store().purge(2).expect("purge");
    assert_eq!((report.snapshots_removed, report.entries_removed), (2, 20));
    let stored: Vec<Zxid> = h.store().snapshots().expect("list").iter().map(|s| s.zxid).collect();
    assert_eq!(stored, vec![z(20), z(25)]);
    assert_eq!(h.store().log_bounds().expect("bounds"), Some((z(21), z(30))));
    // Keeping more than exist removes nothing more.
    assert_eq!(h.store().purge(5).expect("purge"), Default::default());
    h.store().flush().expect("flush");
    h.reopen();
    let recovered = h.store().recover().expect("recover");
    assert_eq!(recovered.snapshot_zxid(), z(25));
    assert_eq!(zxids(&recovered.log), (26..=30).map(z).collect::<Vec<_>>());
    assert_rebuilds(&recovered, &history, z(30));
}

/// Every store: scans both ways and stops when told.
pub fn scans_both_ways_and_stops_when_told(h: &mut impl Harness) {
    let history = History::epoch(1, 12);
    append(h.store(), history.slice(z(1), z(5)));
    append(h.store(), history.slice(z(6), z(12)));
    h.store().flush().expect("flush");
    let scan = |scan: Scan, stop_after: usize| {
        let mut seen = Vec::new();
        h.store()
            .scan_log(scan, &mut |entry| {
                seen.push(entry.zxid);
                seen.len() < stop_after
            })
            .expect("scan");
        seen
    };
    assert_eq!(scan(Scan::From(z(4)), 3), [z(4), z(5), z(6)], "across two runs");
    assert_eq!(scan(Scan::Back(z(7)), 4), [z(7), z(6), z(5), z(4)]);
    assert_eq!(scan(Scan::Back(Zxid(u64::MAX)), 2), [z(12), z(11)]);
    assert_eq!(scan(Scan::Back(z(2)), 100), [z(2), z(1)]);
    assert!(scan(Scan::From(z(13)), 100).is_empty());
    assert!(scan(Scan::Back(Zxid::ZERO), 100).is_empty());
}

/// Every store: reads back exact spans and says where the log starts.
pub fn reads_back_exact_spans_and_says_where_the_log_starts(h: &mut impl Harness) {
    // Epoch 1, then epoch 3: a log missing epoch 3 still "continues" from
    // epoch 1 by the epoch rule, and must not pass for it.
    let log: Vec<Zxid> = (1..=6).map(z).chain((1..=4).map(|c| Zxid::new(3, c))).collect();
    let history = History::new(log.clone());
    append(h.store(), history.entries.clone());
    h.store().flush().expect("flush");
    let span = |first: Zxid, last: Zxid| EpochRange { epoch: first.epoch(), first, last };
    let whole = [span(z(3), z(6)), span(Zxid::new(3, 1), Zxid::new(3, 2))];
    let read = h.store().read_span(&whole).expect("a span the log holds");
    assert_eq!(zxids(&read), log[2..8].to_vec());
    assert_eq!(h.store().read_span(&[]).expect("nothing asked"), vec![]);
    let past_the_end = h.store().read_span(&[span(Zxid::new(3, 3), Zxid::new(3, 6))]);
    assert!(matches!(past_the_end, Err(StorageError::NotHeld { .. })), "{past_the_end:?}");
    assert_eq!(h.store().log_floor().expect("floor"), Zxid::ZERO, "no snapshot: the whole log");
    h.store().save_snapshot(z(6), &history.chunks_at(z(6))).expect("snapshot");
    h.store().purge(1).expect("purge");
    assert_eq!(h.store().log_floor().expect("floor"), z(6));
    let purged = h.store().read_span(&whole);
    assert!(matches!(purged, Err(StorageError::NotHeld { .. })), "epoch 1 is gone: {purged:?}");
    let skipping = h.store().read_span(&[span(z(5), z(6)), span(Zxid::new(3, 1), Zxid::new(3, 1))]);
    assert!(matches!(skipping, Err(StorageError::NotHeld { .. })), "{skipping:?}");
    let after = h.store().read_span(&[span(Zxid::new(3, 2), Zxid::new(3, 4))]).expect("what is left");
    assert_eq!(zxids(&after), log[7..].to_vec());
}

/// Every store: snapshots are listed with counts and read by chunk.
pub fn snapshots_are_listed_with_counts_and_read_by_chunk(h: &mut impl Harness) {
    let history = History::epoch(1, 10);
    append(h.store(), history.entries.clone());
    let chunks = history.chunks_at(z(10));
    let meta = h.store().save_snapshot(z(10), &chunks).expect("snapshot");
    let nodes = history.state_at(z(10)).node_count() as u64;
    assert_eq!(meta.nodes, nodes);
    h.reopen();
    let listed = h.store().snapshots().expect("list");
    assert_eq!(
        listed.iter().map(|s| (s.zxid, s.nodes, s.chunks)).collect::<Vec<_>>(),
        [(z(10), nodes, chunks.len() as u32)]
    );
    for (i, chunk) in chunks.iter().enumerate() {
        assert_eq!(h.store().snapshot_chunk(z(10), i as u32).expect("read").as_ref(), Some(chunk));
    }
    assert_eq!(h.store().snapshot_chunk(z(10), chunks.len() as u32).expect("read"), None);
    assert_eq!(h.store().snapshot_chunk(z(9), 0).expect("read"), None);
}

/// Every store: recover snapshot and later entries.
pub fn recover_snapshot_and_later_entries(h: &mut impl Harness) {
    let history = History::epoch(1, 20);
    append(h.store(), history.slice(z(1), z(12)));
    h.store().save_snapshot(z(12), &history.chunks_at(z(12))).expect("snapshot");
    append(h.store(), history.slice(z(13), z(20)));
    h.store().flush().expect("flush");
    h.reopen();
    let recovered = h.store().recover().expect("recover");
    assert_eq!(recovered.snapshot_zxid(), z(12));
    assert_eq!(
        recovered.snapshot.as_ref().map(TreeState::digest),
        Some(history.state_at(z(12)).digest()),
        "the snapshot itself round-trips"
    );
    assert_eq!(zxids(&recovered.log), (13..=20).map(z).collect::<Vec<_>>());
    assert_rebuilds(&recovered, &history, z(20));
}

/// Every store: snapshot ahead of log.
pub fn snapshot_ahead_of_log(h: &mut impl Harness) {
    let history = History::epoch(1, 16);
    append(h.store(), history.slice(z(1), z(10)));
    h.store().save_snapshot(z(15), &history.chunks_at(z(15))).expect("snapshot");
    h.store().flush().expect("flush");
    let recovered = h.store().recover().expect("recover");
    assert_eq!(recovered.snapshot_zxid(), z(15));
    assert!(recovered.log.is_empty());
    assert!(matches!(
        h.store().apply(&[StorageOp::Append(history.slice(z(11), z(11)))]),
        Err(StorageError::Invalid(_))
    ));
    append(h.store(), history.slice(z(16), z(16)));
    assert_rebuilds(&h.store().recover().expect("recover"), &history, z(16));
}

/// Every store: save snapshot twice replaces.
pub fn save_snapshot_twice_replaces(h: &mut impl Harness) {
    let history = History::epoch(1, 10);
    append(h.store(), history.entries.clone());
    h.store().save_snapshot(z(8), &history.chunks_at(z(8))).expect("snapshot");
    // Same zxid, other chunking (fewer chunks): no stale chunk may survive.
    let (one, _) = snapshot::to_chunks(history.state_at(z(8)), 1 << 20);
    let meta = h.store().save_snapshot(z(8), &one).expect("snapshot again");
    assert_eq!(meta.chunks, 1);
    h.reopen();
    assert_eq!(h.store().snapshots().expect("list"), vec![meta]);
    assert_rebuilds(&h.store().recover().expect("recover"), &history, z(10));
}

/// Every store: corrupt snapshot falls back when log covers.
pub fn corrupt_snapshot_falls_back_when_log_covers(h: &mut impl Harness) {
    let history = History::epoch(1, 20);
    append(h.store(), history.entries.clone());
    h.store().save_snapshot(z(8), &history.chunks_at(z(8))).expect("snapshot");
    h.store().save_snapshot(z(16), &history.chunks_at(z(16))).expect("snapshot");
    h.store().flush().expect("flush");
    h.corrupt_snapshot_chunk(z(16), 1);
    let recovered = h.store().recover().expect("the log covers the damaged snapshot");
    assert_eq!(recovered.snapshot_zxid(), z(8));
    assert_rebuilds(&recovered, &history, z(20));
    // With every snapshot damaged, the full log still rebuilds everything.
    h.corrupt_snapshot_chunk(z(8), 0);
    let recovered = h.store().recover().expect("the log starts at counter 1");
    assert!(recovered.snapshot.is_none());
    assert_rebuilds(&recovered, &history, z(20));
}

/// Every store: corrupt snapshot without cover is an error.
pub fn corrupt_snapshot_without_cover_is_an_error(h: &mut impl Harness) {
    let history = History::epoch(1, 20);
    append(h.store(), history.entries.clone());
    h.store().save_snapshot(z(8), &history.chunks_at(z(8))).expect("snapshot");
    h.store().save_snapshot(z(16), &history.chunks_at(z(16))).expect("snapshot");
    h.store().purge(1).expect("purge: the log now starts after (1,16)");
    h.store().flush().expect("flush");
    h.corrupt_snapshot_chunk(z(16), 1);
    match h.store().recover() {
        Err(StorageError::CorruptSnapshot { zxid, .. }) => assert_eq!(zxid, z(16)),
        other => panic!("expected CorruptSnapshot at (1,16), got {other:?}"),
    }
}

/// Declares one `#[test]` per conformance check, in a module `$store`, each
/// on a fresh `$harness` (an expression making a [`Harness`]).
#[macro_export]
macro_rules! storage_conformance_suite {
    ($store:ident, $harness:expr) => {
        $crate::storage_conformance_suite!(@checks $store, $harness, [
            append_and_recover,
            append_rejects_non_increasing,
            truncate,
            truncate_below_snapshot_rejected,
            epochs,
            install_snapshot_replaces_log,
            install_snapshot_drops_newer_snapshots,
            purge_keeps_newest,
            scans_both_ways_and_stops_when_told,
            reads_back_exact_spans_and_says_where_the_log_starts,
            snapshots_are_listed_with_counts_and_read_by_chunk,
            recover_snapshot_and_later_entries,
            snapshot_ahead_of_log,
            save_snapshot_twice_replaces,
            corrupt_snapshot_falls_back_when_log_covers,
            corrupt_snapshot_without_cover_is_an_error,
        ]);
    };
    (@checks $store:ident, $harness:expr, [$($check:ident),* $(,)?]) => {
        mod $store {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $check() {
                    let mut harness = $harness;
                    $crate::storage::conformance::$check(&mut harness);
                }
            )*
        }
    };
}

#[cfg(test)]
crate::storage_conformance_suite!(mem, MemHarness::new());

/// Checks only the in-memory store can make: it can lose power in-process.
#[cfg(test)]
mod mem_crash {
    use super::*;

    #[test]
    fn crash_before_flush_loses_only_unflushed_ops() {
        let store = MemStorage::new();
        let history = History::epoch(1, 12);
        append(&store, history.slice(z(1), z(5)));
        store.apply(&[StorageOp::SetAcceptedEpoch(1)]).expect("epoch");
        store.flush().expect("flush");
        append(&store, history.slice(z(6), z(9)));
        store.apply(&[StorageOp::SetAcceptedEpoch(2), StorageOp::TruncateAfter(z(7))]).expect("ops");
        store.save_snapshot(z(4), &history.chunks_at(z(4))).expect("a snapshot is durable at once");
        store.purge(1).expect("purge (not flushed)");
        store.crash();
        let recovered = store.recover().expect("recover");
        assert_eq!(recovered.accepted_epoch, 1);
        assert_eq!(recovered.snapshot_zxid(), z(4));
        assert_eq!(zxids(&recovered.log), vec![z(5)]);
        assert_eq!(store.log_bounds().expect("bounds"), Some((z(1), z(5))), "the purge was not flushed");
        assert_rebuilds(&recovered, &history, z(5));
    }

    #[test]
    fn crash_after_flush_keeps_everything_and_clones_share_state() {
        let store = MemStorage::new();
        let history = History::epoch(1, 6);
        append(&store, history.entries.clone());
        store.apply(&[StorageOp::InstallSnapshot { zxid: z(6), chunks: history.chunks_at(z(6)) }]).expect("install");
        store.flush().expect("flush");
        let restarted = store.clone();
        store.crash();
        let recovered = restarted.recover().expect("recover");
        assert_eq!(recovered.snapshot_zxid(), z(6));
        assert!(recovered.log.is_empty());
        assert_rebuilds(&recovered, &history, z(6));
    }
}
