//! The store's own tests: the snapshot decoder beside its reader, opens
//! refused or mended at sled's torn checkpoints, the deferred frees, and the
//! merging of adjacent appends.

use super::*;
use crate::recovery_source::DECODE_AHEAD;
use zabkeeper_core::ids::SessionId;
use zabkeeper_core::txn::{Txn, TxnBody};

fn entry(counter: u32) -> Entry {
    let txn = Txn {
        session: SessionId(1),
        cxid: counter as i32,
        time_ms: 0,
        body: TxnBody::Error(zabkeeper_core::error::ErrorCode::Ok),
    };
    Entry { zxid: Zxid::new(1, counter), txn: Arc::new(txn) }
}

fn zxids(step: &Step<'_>) -> Vec<Zxid> {
    match step {
        Step::Append(entries) => entries.iter().map(|e| e.zxid).collect(),
        Step::Other(_) => Vec::new(),
    }
}

#[test]
fn a_corrupt_chunk_early_in_a_long_snapshot_is_reported_as_what_the_decoder_found() {
    // The decoder runs beside the reader and stops it at the first bad
    // chunk: the error must be the snapshot's fault (so recovery may
    // fall back on an older one), not the reader's being stopped.
    use zabkeeper_core::tree::snapshot::{self, SnapshotError};
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SledStorage::open(dir.path().join("store")).expect("open a fresh store");
    let mut tree = zabkeeper_core::tree::DataTree::new();
    for i in 1..=400u32 {
        let body = TxnBody::Create {
            path: format!("/node-{i:06}"),
            data: zabkeeper_core::data::Data::from(Bytes::from(vec![7u8; 100])),
            acl: zabkeeper_core::acl::Acl::open_unsafe(),
            ephemeral_owner: 0,
            parent_cversion: i as i32,
        };
        tree.apply(Zxid::new(1, i), &Txn { session: SessionId(1), cxid: i as i32, time_ms: 0, body });
    }
    let zxid = Zxid::new(1, 400);
    let mut chunks = snapshot::Chunks::new(tree.state(), 512);
    let meta = store.save_snapshot_from(zxid, &mut chunks).expect("save the snapshot");
    assert!(meta.chunks as usize > 2 * DECODE_AHEAD, "more chunks than are read ahead: {}", meta.chunks);
    {
        let db = open_retrying(
            &sled::Config::new().path(dir.path().join("store").join(SNAPSHOT_DIR).join(snapshot_dir_name(zxid))),
        )
        .expect("open the snapshot's database");
        let chunk = db.open_tree(chunk_tree(1)).expect("chunk 1's tree");
        let mut bytes = chunk.get(CHUNK_KEY).expect("read").expect("chunk 1 is there").to_vec();
        // A chunk ends with a whole record: its last byte is one the
        // record's checksum covers, so the decoder fails right there.
        let last = bytes.len() - 1;
        bytes[last] ^= 0x5a;
        chunk.insert(CHUNK_KEY, bytes).expect("damage chunk 1");
        db.flush().expect("flush");
    }
    match store.load_snapshot(zxid) {
        Err(e @ StorageError::CorruptSnapshot { source: SnapshotError::Corrupt { .. }, .. }) => {
            assert!(e.is_snapshot_fault())
        }
        other => panic!("expected the decoder's finding, got {:?}", other.map(|s| s.node_count())),
    }
}

#[test]
fn an_open_refused_by_a_live_owner_leaves_the_checkpoint_it_may_be_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = sled::Config::new().path(dir.path());
    let owner = open_retrying(&config).expect("the live owner");
    // The owner, closing, could be writing this one right now.
    let generating = dir.path().join("snap.00000000FFFFFFFF.generating");
    std::fs::write(&generating, b"").expect("a checkpoint being written");
    assert!(open_retrying(&config).is_err(), "the owner holds the lock");
    assert!(generating.exists(), "a live owner's checkpoint is not removed");
    drop(owner);
}

#[test]
fn a_checkpoint_sled_did_not_finish_does_not_stop_the_store_from_opening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledStorage::open(dir.path()).expect("create");
    store.apply(&[StorageOp::Append(vec![entry(1), entry(2)])]).expect("append");
    store.flush().expect("flush");
    let (chunks, _) =
        zabkeeper_core::tree::snapshot::to_chunks(&zabkeeper_core::tree::DataTree::new().snapshot(), 1024);
    store.save_snapshot(Zxid::new(1, 2), &chunks).expect("snapshot");
    drop(store);
    // What a kill -9 leaves while sled writes a checkpoint, in both databases.
    let snapshot_db = dir.path().join(SNAPSHOT_DIR).join(snapshot_dir_name(Zxid::new(1, 2)));
    for db in [dir.path().to_path_buf(), snapshot_db.clone()] {
        std::fs::write(db.join("snap.00000000FFFFFFFF.generating"), b"").expect("a torn checkpoint");
    }
    let store = SledStorage::open(dir.path()).expect("opens past the torn checkpoints");
    assert_eq!(store.recover().expect("recovers").last_zxid(), Zxid::new(1, 2));
    let snapshots: Vec<Zxid> = store.snapshots().expect("snapshots listed").iter().map(|m| m.zxid).collect();
    assert_eq!(snapshots, vec![Zxid::new(1, 2)]);
    store.read_chunk(Zxid::new(1, 2), 0).expect("the snapshot database opens and reads");
    assert!(!dir.path().join("snap.00000000FFFFFFFF.generating").exists());
    assert!(!snapshot_db.join("snap.00000000FFFFFFFF.generating").exists());
}

#[test]
fn a_reclaim_runs_the_frees_deferred_before_it() {
    // What sled defers goes to the same collector as this.
    let freed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let flag = std::sync::Arc::clone(&freed);
        let guard = crossbeam_epoch::pin();
        guard.defer(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    // Other tests' threads may hold the epoch back for a moment.
    for _ in 0..100 {
        reclaim_deferred_frees();
        if freed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("a deferred free still waits after 100 reclaims");
}

#[test]
fn adjacent_appends_merge_and_other_operations_keep_their_place() {
    let ops = vec![
        StorageOp::Append(vec![entry(1)]),
        StorageOp::Append(vec![entry(2), entry(3)]),
        StorageOp::SetCurrentEpoch(1),
        StorageOp::Append(vec![entry(4)]),
        StorageOp::Append(vec![entry(5)]),
    ];
    let merged = steps(&ops);
    assert_eq!(merged.len(), 3);
    assert_eq!(zxids(&merged[0]), (1..=3).map(|c| Zxid::new(1, c)).collect::<Vec<_>>());
    assert!(matches!(merged[1], Step::Other(StorageOp::SetCurrentEpoch(1))));
    assert_eq!(zxids(&merged[2]), (4..=5).map(|c| Zxid::new(1, c)).collect::<Vec<_>>());
}
