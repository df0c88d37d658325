//! One suite of named checks that every [`Storage`] must pass, run against
//! both stores, plus the checks only one store can express: crash loss for
//! the in-memory store, damaged bytes on disk for sled.

use super::mem_store::MemStorage;
use super::sled_store::{self, SledStorage};
use super::{Recovered, Scan, Storage, StorageError};
use crate::acl::Acl;
use crate::ids::{SessionId, Zxid};
use crate::tree::{snapshot, DataTree, TreeState};
use crate::txn::{Entry, Txn, TxnBody};
use crate::zab::{EpochRange, StorageOp};
use bytes::Bytes;

/// A store under test and what a test can do to it from outside.
trait Harness {
    /// The store type.
    type Store: Storage;
    /// The store.
    fn store(&self) -> &Self::Store;
    /// A clean restart: the handle is dropped and the store opened again.
    fn reopen(&mut self);
    /// Damages one chunk of a stored snapshot and reopens.
    fn corrupt_snapshot_chunk(&mut self, zxid: Zxid, chunk: u32);
}

struct MemHarness {
    store: MemStorage,
}

impl MemHarness {
    fn new() -> MemHarness {
        MemHarness { store: MemStorage::new() }
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

struct SledHarness {
    dir: tempfile::TempDir,
    store: Option<SledStorage>,
}

impl SledHarness {
    fn new() -> SledHarness {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStorage::open(dir.path().join("store")).expect("open a fresh store");
        SledHarness { dir, store: Some(store) }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("store")
    }

    /// Closes the store, edits its trees through a raw sled handle, and
    /// opens it again, returning what opening says.
    fn edit_raw(&mut self, edit: impl FnOnce(&::sled::Db)) -> Result<(), StorageError> {
        self.store = None;
        let db = raw_open(&self.path());
        edit(&db);
        db.flush().expect("raw flush");
        drop(db);
        self.store = Some(SledStorage::open(self.path())?);
        Ok(())
    }

    /// The directory of the store's snapshots.
    fn snapshot_dir(&self) -> std::path::PathBuf {
        self.path().join(sled_store::SNAPSHOT_DIR)
    }

    /// As [`SledHarness::edit_raw`], on the database of the snapshot at `zxid`.
    fn edit_snapshot(&mut self, zxid: Zxid, edit: impl FnOnce(&::sled::Db)) -> Result<(), StorageError> {
        self.store = None;
        let db = raw_open(&self.snapshot_dir().join(sled_store::snapshot_dir_name(zxid)));
        edit(&db);
        db.flush().expect("raw flush");
        drop(db);
        self.store = Some(SledStorage::open(self.path())?);
        Ok(())
    }

    /// The names in the snapshot directory, sorted.
    fn snapshot_dir_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.snapshot_dir())
            .expect("list the snapshots")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn tree(db: &::sled::Db, name: &str) -> ::sled::Tree {
        db.open_tree(name).expect("raw tree")
    }
}

impl Harness for SledHarness {
    type Store = SledStorage;

    fn store(&self) -> &SledStorage {
        self.store.as_ref().expect("store is open")
    }

    fn reopen(&mut self) {
        self.store = None;
        self.store = Some(SledStorage::open(self.path()).expect("reopen"));
    }

    fn corrupt_snapshot_chunk(&mut self, zxid: Zxid, chunk: u32) {
        self.edit_snapshot(zxid, |db| {
            let tree = SledHarness::tree(db, &sled_store::chunk_tree(chunk));
            let mut bytes = tree.get(sled_store::CHUNK_KEY).expect("read").expect("chunk exists").to_vec();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x5a;
            tree.insert(sled_store::CHUNK_KEY, bytes).expect("write");
        })
        .expect("reopen after damaging a chunk");
    }
}

/// A raw sled handle on a store's directory (waiting for a dropped handle's lock).
fn raw_open(path: &std::path::Path) -> ::sled::Db {
    let mut config = ::sled::Config::new().path(path);
    if let Some(segment_size) = sled_store::stored_segment_size(path) {
        config = config.segment_size(segment_size);
    }
    sled_store::open_retrying(&config).expect("raw open")
}

/// A history of real transactions, with the tree after each, so recovery can
/// be checked against the state it must rebuild.
struct History {
    entries: Vec<Entry>,
    states: Vec<TreeState>,
}

const SESSION: SessionId = SessionId(0x0100_0000_0000_0001);

impl History {
    fn new(zxids: impl IntoIterator<Item = Zxid>) -> History {
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
    fn epoch(epoch: u32, n: u32) -> History {
        History::new((1..=n).map(|c| Zxid::new(epoch, c)))
    }

    fn index(&self, zxid: Zxid) -> usize {
        self.entries.iter().position(|e| e.zxid == zxid).expect("zxid is in the history")
    }

    /// Entries with from ≤ zxid ≤ to.
    fn slice(&self, from: Zxid, to: Zxid) -> Vec<Entry> {
        self.entries.iter().filter(|e| e.zxid >= from && e.zxid <= to).cloned().collect()
    }

    fn state_at(&self, zxid: Zxid) -> &TreeState {
        &self.states[self.index(zxid)]
    }

    /// The snapshot at `zxid`, in small chunks so several are stored.
    fn chunks_at(&self, zxid: Zxid) -> Vec<Bytes> {
        let (chunks, _) = snapshot::to_chunks(self.state_at(zxid), 256);
        assert!(chunks.len() > 1, "tests want multi-chunk snapshots");
        chunks
    }
}

fn z(counter: u32) -> Zxid {
    Zxid::new(1, counter)
}

fn append(store: &impl Storage, entries: Vec<Entry>) {
    store.apply(&[StorageOp::Append(entries)]).expect("append");
}

fn zxids(entries: &[Entry]) -> Vec<Zxid> {
    entries.iter().map(|e| e.zxid).collect()
}

/// The tree a recovered replica rebuilds: snapshot, then every later entry.
fn replay(recovered: &Recovered) -> TreeState {
    let mut tree = recovered.snapshot.clone().map_or_else(DataTree::new, DataTree::from_state);
    for entry in &recovered.log {
        tree.apply(entry.zxid, &entry.txn);
    }
    tree.snapshot()
}

fn assert_rebuilds(recovered: &Recovered, history: &History, last: Zxid) {
    assert_eq!(recovered.last_zxid(), last);
    let rebuilt = replay(recovered);
    assert_eq!(rebuilt.digest(), history.state_at(last).digest(), "replayed tree differs at {last:?}");
    assert_eq!(rebuilt.last_zxid(), last);
}

fn append_and_recover(h: &mut impl Harness) {
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

fn append_rejects_non_increasing(h: &mut impl Harness) {
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

fn truncate(h: &mut impl Harness) {
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

fn truncate_below_snapshot_rejected(h: &mut impl Harness) {
    let history = History::epoch(1, 10);
    append(h.store(), history.entries.clone());
    h.store().save_snapshot(z(8), &history.chunks_at(z(8))).expect("snapshot");
    let err = h.store().apply(&[StorageOp::TruncateAfter(z(5))]).expect_err("below the snapshot");
    assert!(matches!(err, StorageError::Invalid(_)), "{err}");
    h.store().apply(&[StorageOp::TruncateAfter(z(8))]).expect("truncate down to the snapshot");
    assert_eq!(h.store().log_bounds().expect("bounds"), Some((z(1), z(8))));
}

fn epochs(h: &mut impl Harness) {
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

fn install_snapshot_replaces_log(h: &mut impl Harness) {
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

fn install_snapshot_drops_newer_snapshots(h: &mut impl Harness) {
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

fn purge_keeps_newest(h: &mut impl Harness) {
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

fn scans_both_ways_and_stops_when_told(h: &mut impl Harness) {
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

fn reads_back_exact_spans_and_says_where_the_log_starts(h: &mut impl Harness) {
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

fn snapshots_are_listed_with_counts_and_read_by_chunk(h: &mut impl Harness) {
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

fn recover_snapshot_and_later_entries(h: &mut impl Harness) {
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

fn snapshot_ahead_of_log(h: &mut impl Harness) {
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

fn save_snapshot_twice_replaces(h: &mut impl Harness) {
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

fn corrupt_snapshot_falls_back_when_log_covers(h: &mut impl Harness) {
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

fn corrupt_snapshot_without_cover_is_an_error(h: &mut impl Harness) {
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

/// Declares one test per check for a store.
macro_rules! suite {
    ($store:ident, $harness:expr, [$($check:ident),* $(,)?]) => {
        mod $store {
            use super::*;
            $(
                #[test]
                fn $check() {
                    let mut harness = $harness;
                    super::$check(&mut harness);
                }
            )*
        }
    };
}

macro_rules! both {
    ($($store:ident => $harness:expr),*) => {
        $(suite!($store, $harness, [
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
        ]);)*
    };
}

both!(mem => MemHarness::new(), sled => SledHarness::new());

/// Checks only the in-memory store can make: it can lose power in-process.
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

/// Damaged bytes written straight into sled's trees.
mod sled_damage {
    use super::*;

    /// A store with `n` entries, each appended on its own, so each is its
    /// own run (key) in the log tree and the tests below can damage one.
    fn filled(n: u32) -> (SledHarness, History) {
        let h = SledHarness::new();
        let history = History::epoch(1, n);
        for entry in &history.entries {
            append(h.store(), vec![entry.clone()]);
        }
        h.store().flush().expect("flush");
        (h, history)
    }

    #[test]
    fn corrupt_log_value_names_its_key() {
        let (mut h, _) = filled(6);
        h.edit_raw(|db| {
            let log = SledHarness::tree(db, sled_store::LOG_TREE);
            let key = sled_store::log_key(z(4));
            let mut value = log.get(key).expect("read").expect("entry").to_vec();
            let last = value.len() - 1;
            value[last] ^= 1;
            log.insert(key, value).expect("write");
        })
        .expect("reopen");
        match h.store().recover() {
            Err(StorageError::CorruptEntry { key, .. }) => assert_eq!(key, "0000000100000004"),
            other => panic!("expected CorruptEntry, got {other:?}"),
        }
        assert!(matches!(h.store().read_log(z(1), 10), Err(StorageError::CorruptEntry { .. })));
    }

    #[test]
    fn corrupt_meta_is_reported() {
        let (mut h, _) = filled(2);
        h.edit_raw(|db| {
            SledHarness::tree(db, sled_store::META_TREE).insert(sled_store::ACCEPTED_EPOCH, &[0, 1, 2]).expect("write");
        })
        .expect("reopen");
        match h.store().recover() {
            Err(StorageError::CorruptMeta { key, reason }) => {
                assert_eq!(key, sled_store::ACCEPTED_EPOCH);
                assert!(reason.contains("3 bytes"), "{reason}");
            }
            other => panic!("expected CorruptMeta, got {other:?}"),
        }
    }

    #[test]
    fn hole_in_log_is_discontiguous() {
        let (mut h, _) = filled(6);
        h.edit_raw(|db| {
            SledHarness::tree(db, sled_store::LOG_TREE).remove(sled_store::log_key(z(3))).expect("remove");
        })
        .expect("reopen");
        match h.store().recover() {
            Err(StorageError::Discontiguous { previous, found }) => assert_eq!((previous, found), (z(2), z(4))),
            other => panic!("expected Discontiguous, got {other:?}"),
        }
    }

    #[test]
    fn log_without_its_start_is_a_gap() {
        let (mut h, _) = filled(6);
        h.edit_raw(|db| {
            let log = SledHarness::tree(db, sled_store::LOG_TREE);
            log.remove(sled_store::log_key(z(1))).expect("remove");
            log.remove(sled_store::log_key(z(2))).expect("remove");
        })
        .expect("reopen");
        match h.store().recover() {
            Err(StorageError::Gap { snapshot, first_log }) => assert_eq!((snapshot, first_log), (Zxid::ZERO, z(3))),
            other => panic!("expected Gap, got {other:?}"),
        }
    }

    #[test]
    fn malformed_log_key_is_reported() {
        let (mut h, _) = filled(3);
        h.edit_raw(|db| {
            SledHarness::tree(db, sled_store::LOG_TREE).insert([0xff; 9], &b"x"[..]).expect("write");
        })
        .expect("reopen");
        assert!(matches!(h.store().recover(), Err(StorageError::CorruptKey { tree: "log", .. })));
    }

    #[test]
    fn missing_chunk_or_bad_marker_is_incomplete() {
        let (mut h, history) = filled(10);
        h.store().save_snapshot(z(9), &history.chunks_at(z(9))).expect("snapshot");
        h.store().purge(1).expect("purge");
        h.edit_snapshot(z(9), |db| {
            assert!(db.drop_tree(sled_store::chunk_tree(1)).expect("drop chunk 1"), "chunk 1 was there");
        })
        .expect("reopen");
        assert!(matches!(h.store().recover(), Err(StorageError::IncompleteSnapshot { zxid, .. }) if zxid == z(9)));
        h.edit_snapshot(z(9), |db| {
            db.insert(sled_store::MARKER_KEY, &b"junk"[..]).expect("write");
        })
        .expect("reopen");
        assert!(matches!(h.store().recover(), Err(StorageError::IncompleteSnapshot { zxid, .. }) if zxid == z(9)));
        assert!(h.store().purge(1).is_err(), "purge refuses to run over a damaged marker");
        h.edit_snapshot(z(9), |db| {
            db.remove(sled_store::MARKER_KEY).expect("remove");
        })
        .expect("reopen");
        assert!(
            matches!(h.store().recover(), Err(StorageError::IncompleteSnapshot { zxid, .. }) if zxid == z(9)),
            "a complete snapshot's directory without its marker is damage, reported"
        );
    }

    #[test]
    fn unfinished_snapshot_is_ignored_and_removed() {
        let (mut h, history) = filled(10);
        let complete = h.store().save_snapshot(z(5), &history.chunks_at(z(5))).expect("snapshot");
        h.store = None;
        // Writes cut short before their rename, below and above the complete one.
        for at in [z(3), z(7)] {
            let dir = h.snapshot_dir().join(format!("{}.new", sled_store::snapshot_dir_name(at)));
            let db = raw_open(&dir);
            for (i, chunk) in history.chunks_at(at).iter().enumerate().take(2) {
                SledHarness::tree(&db, &sled_store::chunk_tree(i as u32))
                    .insert(sled_store::CHUNK_KEY, chunk.as_ref())
                    .expect("write");
            }
            db.flush().expect("flush");
        }
        h.reopen();
        assert_eq!(h.store().snapshots().expect("list"), vec![complete]);
        let recovered = h.store().recover().expect("recover");
        assert_eq!(recovered.snapshot_zxid(), z(5));
        assert_rebuilds(&recovered, &history, z(10));
        assert_eq!(
            h.snapshot_dir_names(),
            [sled_store::snapshot_dir_name(z(5))],
            "open removed exactly the unfinished writes"
        );
    }

    /// Leaves the note an install at `zxid` writes first, as a crash after it would, and reopens.
    fn note_install(h: &mut SledHarness, zxid: Zxid) {
        h.edit_raw(|db| {
            SledHarness::tree(db, sled_store::META_TREE)
                .insert(sled_store::INSTALLING, &sled_store::log_key(zxid))
                .expect("write");
        })
        .expect("reopen");
    }

    /// Closes the store and says whether the install note is still there.
    fn install_noted(h: &mut SledHarness) -> bool {
        h.store = None;
        let db = raw_open(&h.path());
        SledHarness::tree(&db, sled_store::META_TREE).get(sled_store::INSTALLING).expect("read").is_some()
    }

    #[test]
    fn an_install_a_crash_interrupted_is_finished_at_open() {
        // The leader's snapshot and its marker were stored, then the crash
        // came before the log and the newer snapshot went.
        let (mut h, history) = filled(10);
        h.store().save_snapshot(z(6), &history.chunks_at(z(6))).expect("snapshot");
        h.store().save_snapshot(z(8), &history.chunks_at(z(8))).expect("snapshot");
        note_install(&mut h, z(6));
        assert_eq!(h.store().log_bounds().expect("bounds"), None, "the log went");
        let stored: Vec<Zxid> = h.store().snapshots().expect("list").iter().map(|s| s.zxid).collect();
        assert_eq!(stored, vec![z(6)], "the snapshot above the installed one went");
        let recovered = h.store().recover().expect("recover");
        assert_eq!(recovered.snapshot_zxid(), z(6));
        assert_rebuilds(&recovered, &history, z(6));
        assert!(!install_noted(&mut h), "the note went with the log");
    }

    #[test]
    fn an_install_cut_short_before_its_marker_is_undone_at_open() {
        let (mut h, history) = filled(10);
        h.store().save_snapshot(z(8), &history.chunks_at(z(8))).expect("snapshot");
        note_install(&mut h, z(6));
        assert_eq!(h.store().log_bounds().expect("bounds"), Some((z(1), z(10))), "the log is untouched");
        let recovered = h.store().recover().expect("recover");
        assert_eq!(recovered.snapshot_zxid(), z(8));
        assert_rebuilds(&recovered, &history, z(10));
        assert!(!install_noted(&mut h), "the note went");
    }

    /// Rewrites the store's snapshots as one database kept them (formats 1
    /// to 3): zxid ‖ chunk index → chunk, and zxid → marker, into `db`.
    fn write_one_database_layout(h: &SledHarness, db: &::sled::Db, metas: &[crate::storage::SnapshotMeta]) {
        let (chunks, index) =
            (SledHarness::tree(db, sled_store::CHUNK_TREE), SledHarness::tree(db, sled_store::INDEX_TREE));
        for meta in metas {
            for i in 0..meta.chunks {
                let chunk = h.store().snapshot_chunk(meta.zxid, i).expect("read").expect("chunk");
                chunks.insert(sled_store::chunk_key(meta.zxid, i), chunk.as_ref()).expect("write");
            }
            index.insert(sled_store::log_key(meta.zxid), sled_store::encode_marker(meta)).expect("write");
        }
        db.flush().expect("flush");
    }

    /// Checks a store upgraded from `before` (its snapshots as listed then).
    fn assert_upgraded(h: &mut SledHarness, history: &History, before: &[crate::storage::SnapshotMeta]) {
        assert_eq!(h.store().snapshots().expect("list"), before, "every snapshot, with its marker's figures");
        let recovered = h.store().recover().expect("recover");
        assert_eq!(recovered.snapshot_zxid(), z(7));
        assert_rebuilds(&recovered, history, z(10));
        let dirs: Vec<String> = before.iter().map(|m| sled_store::snapshot_dir_name(m.zxid)).collect();
        assert_eq!(h.snapshot_dir_names(), dirs, "a database per snapshot and nothing else");
        assert_eq!(std::fs::read(h.path().join(sled_store::SIDECAR)).expect("sidecar"), sled_store::FORMAT);
    }

    #[test]
    fn a_second_format_store_moves_its_snapshots_out() {
        let (mut h, history) = filled(10);
        h.store().save_snapshot(z(4), &history.chunks_at(z(4))).expect("snapshot");
        h.store().save_snapshot(z(7), &history.chunks_at(z(7))).expect("snapshot");
        let before = h.store().snapshots().expect("list");
        // Rewrite it as format 2 wrote it: the snapshot trees in the log's database.
        {
            let db = raw_open(&h.dir.path().join("format-2-staging"));
            write_one_database_layout(&h, &db, &before);
            h.store = None;
            let log_db = raw_open(&h.path());
            for name in [sled_store::CHUNK_TREE, sled_store::INDEX_TREE] {
                let (from, to) = (SledHarness::tree(&db, name), SledHarness::tree(&log_db, name));
                for item in from.iter() {
                    let (key, value) = item.expect("read");
                    to.insert(key, value).expect("write");
                }
            }
            SledHarness::tree(&log_db, sled_store::META_TREE).insert("format", sled_store::FORMAT_V2).expect("write");
            log_db.flush().expect("flush");
        }
        std::fs::remove_dir_all(h.snapshot_dir()).expect("remove the snapshot databases");
        std::fs::write(h.path().join(sled_store::SIDECAR), sled_store::FORMAT_V2).expect("sidecar");
        h.reopen();
        assert_upgraded(&mut h, &history, &before);
        h.store = None;
        {
            let db = raw_open(&h.path());
            let names = db.tree_names();
            assert!(!names.iter().any(|n| n.as_ref() == sled_store::CHUNK_TREE.as_bytes()), "the old tree went");
            assert!(!names.iter().any(|n| n.as_ref() == sled_store::INDEX_TREE.as_bytes()), "the old tree went");
        }
        // Once upgraded, a lost snapshot directory is damage, not an empty one.
        std::fs::remove_dir_all(h.snapshot_dir()).expect("remove the snapshot databases");
        let err = SledStorage::open(h.path()).expect_err("snapshots lost");
        assert!(matches!(err, StorageError::Damaged { .. }), "{err}");
    }

    #[test]
    fn a_third_format_store_gives_each_snapshot_a_database_and_drops_the_old_one() {
        // Format 3 kept every snapshot in one database, `snapshots` itself,
        // which never gave purged snapshots' blob files back.
        let (mut h, history) = filled(10);
        h.store().save_snapshot(z(4), &history.chunks_at(z(4))).expect("snapshot");
        h.store().save_snapshot(z(7), &history.chunks_at(z(7))).expect("snapshot");
        let before = h.store().snapshots().expect("list");
        let staging = h.dir.path().join("format-3-staging");
        {
            let db = raw_open(&staging);
            write_one_database_layout(&h, &db, &before);
            db.insert("format", sled_store::FORMAT_V3).expect("write");
            db.flush().expect("flush");
        }
        h.store = None;
        std::fs::remove_dir_all(h.snapshot_dir()).expect("remove the snapshot databases");
        std::fs::rename(&staging, h.snapshot_dir()).expect("the one database in place");
        // A blob file a purge left behind, as format 3 leaked them.
        std::fs::create_dir_all(h.snapshot_dir().join("blobs")).expect("blobs");
        std::fs::write(h.snapshot_dir().join("blobs").join("4242"), vec![0u8; 4096]).expect("a leaked blob");
        {
            let log_db = raw_open(&h.path());
            SledHarness::tree(&log_db, sled_store::META_TREE).insert("format", sled_store::FORMAT_V3).expect("write");
            log_db.flush().expect("flush");
        }
        std::fs::write(h.path().join(sled_store::SIDECAR), sled_store::FORMAT_V3).expect("sidecar");
        h.reopen();
        assert_upgraded(&mut h, &history, &before);
        // Reopening an upgraded store changes nothing.
        h.reopen();
        assert_upgraded(&mut h, &history, &before);
    }

    #[test]
    fn a_store_of_a_newer_format_is_refused_naming_both_formats() {
        let (mut h, _) = filled(3);
        h.store = None;
        std::fs::write(h.path().join(sled_store::SIDECAR), b"zabkeeper-storage/9").expect("sidecar");
        let err = SledStorage::open(h.path()).expect_err("a format from the future");
        let text = err.to_string();
        assert!(
            text.contains("zabkeeper-storage/9")
                && text.contains(std::str::from_utf8(sled_store::FORMAT).expect("utf-8")),
            "{text}"
        );
    }

    #[test]
    fn open_refuses_what_is_not_a_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("file");
        std::fs::write(&file, b"hello").expect("write");
        assert!(matches!(SledStorage::open(&file), Err(StorageError::NotAStore { .. })));
        let foreign = dir.path().join("foreign");
        std::fs::create_dir(&foreign).expect("mkdir");
        std::fs::write(foreign.join("notes.txt"), b"hello").expect("write");
        assert!(matches!(SledStorage::open(&foreign), Err(StorageError::NotAStore { .. })));
        // A sled database of someone else's.
        let other = dir.path().join("other");
        {
            let db = raw_open(&other);
            db.insert(b"k", b"v").expect("write");
            db.flush().expect("flush");
        }
        let err = SledStorage::open(&other).expect_err("not ours");
        assert!(matches!(err, StorageError::NotAStore { .. }), "{err}");
    }

    #[test]
    fn open_reports_garbage_files() {
        let (mut h, history) = filled(50);
        let path = h.path();
        h.store = None;
        // Whatever sled makes of a damaged config, no history may vanish silently.
        let conf = std::fs::read(path.join("conf")).expect("conf");
        for garbage in [&b"garbage"[..], b"garbage garbage garbage", b""] {
            std::fs::write(path.join("conf"), garbage).expect("write");
            match SledStorage::open(&path) {
                Ok(store) => assert_eq!(store.recover().expect("recover").log, history.entries),
                Err(err) => assert!(matches!(err, StorageError::Io { .. } | StorageError::Damaged { .. }), "{err}"),
            }
            std::fs::write(path.join("conf"), &conf).expect("write");
        }
        // sled reads an unreadable log as an empty one; the marker file catches it.
        let len = std::fs::metadata(path.join("db")).expect("db").len() as usize;
        std::fs::write(path.join("db"), vec![0xab; len]).expect("write");
        let err = SledStorage::open(&path).expect_err("garbage db");
        assert!(matches!(err, StorageError::Damaged { .. } | StorageError::Io { .. }), "{err}");
        std::fs::remove_file(path.join("db")).expect("remove");
        let err = SledStorage::open(&path).expect_err("db missing");
        assert!(matches!(err, StorageError::NotAStore { .. }), "{err}");
    }
}
