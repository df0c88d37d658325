//! The owner task with a store that fails on purpose, and the storage
//! worker with a store that counts what it is told.

use super::*;
use crate::runtime::handle::{Event, Query};
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use zabkeeper_config::ServerConfig;
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::replica::Input;
use zabkeeper_core::storage::mem_store::MemStorage;
use zabkeeper_core::storage::Storage;
use zabkeeper_core::storage::{PurgeReport, Recovered, Scan, SnapshotMeta, StorageError};
use zabkeeper_core::txn::Entry;
use zabkeeper_core::zab::StorageOp;

/// Links to no one: these tests run a member alone.
struct NoLinks;

impl Links for NoLinks {
    fn send(&mut self, _: ServerId, _: Message) {}
    fn learn(&mut self, _: Vec<(ServerId, zabkeeper_config::HostPort)>) {}
    fn on_status(&mut self, _: Status) {}
    fn shut_down(&mut self) {}
}

/// A memory store whose first `fail` snapshot writes fail, and which counts
/// the times it was told it is idle.
struct FailingSnapshots {
    inner: MemStorage,
    fail: AtomicUsize,
    idles: AtomicUsize,
}

impl FailingSnapshots {
    fn new(fail: usize) -> FailingSnapshots {
        FailingSnapshots { inner: MemStorage::new(), fail: AtomicUsize::new(fail), idles: AtomicUsize::new(0) }
    }
}

impl Storage for FailingSnapshots {
    fn recover(&self) -> Result<Recovered, StorageError> {
        self.inner.recover()
    }
    fn apply(&self, ops: &[StorageOp]) -> Result<(), StorageError> {
        self.inner.apply(ops)
    }
    fn flush(&self) -> Result<(), StorageError> {
        self.inner.flush()
    }
    fn save_snapshot_from(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError> {
        if self.fail.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(StorageError::Invalid("injected: the disk refused the snapshot".into()));
        }
        self.inner.save_snapshot_from(zxid, chunks)
    }
    fn purge(&self, keep: usize) -> Result<PurgeReport, StorageError> {
        self.inner.purge(keep)
    }
    fn scan_log(&self, scan: Scan, visit: &mut dyn FnMut(Entry) -> bool) -> Result<(), StorageError> {
        self.inner.scan_log(scan, visit)
    }
    fn snapshot_chunk(&self, zxid: Zxid, index: u32) -> Result<Option<Bytes>, StorageError> {
        self.inner.snapshot_chunk(zxid, index)
    }
    fn log_bounds(&self) -> Result<Option<(Zxid, Zxid)>, StorageError> {
        self.inner.log_bounds()
    }
    fn snapshots(&self) -> Result<Vec<SnapshotMeta>, StorageError> {
        self.inner.snapshots()
    }
    fn idle(&self) {
        self.idles.fetch_add(1, Ordering::SeqCst);
    }
}

async fn take_snapshot(handle: &Handle) -> Result<Zxid, String> {
    let (tx, rx) = oneshot::channel();
    handle.events.send(Event::Query(Query::TakeSnapshot(tx))).await.expect("owner running");
    tokio::time::timeout(Duration::from_secs(10), rx).await.expect("answered, not left waiting").expect("answered")
}

#[tokio::test]
async fn a_failed_snapshot_is_reported_and_the_next_one_succeeds() {
    let text = "data_dir = \"unused\"\n[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\ngrpc_addr = \"127.0.0.1:2\"\n";
    let config = ServerConfig::parse(text, None).expect("config");
    let storage = Arc::new(FailingSnapshots::new(1));
    let (stop_tx, stop_rx) = watch::channel(false);
    let started = start(config, storage.clone(), stop_rx, |_| Box::new(NoLinks)).expect("start");
    let handle = started.handle.clone();
    let err = take_snapshot(&handle).await.expect_err("the injected failure is reported");
    assert!(err.contains("injected"), "{err}");
    let report = handle.status_report().await.expect("status");
    assert!(report.last_snapshot_error.as_deref().is_some_and(|e| e.contains("injected")));
    // Before the fix the replica still counted the failed one as in flight:
    // this request waited forever and no snapshot was ever taken again.
    let zxid = take_snapshot(&handle).await.expect("the next snapshot is taken");
    assert_eq!(storage.snapshots().expect("list").iter().map(|s| s.zxid).collect::<Vec<_>>(), [zxid]);
    assert_eq!(handle.status_report().await.expect("status").last_snapshot_error, None);
    let _ = stop_tx.send(true);
    started.owner.await.expect("joined").expect("clean stop");
}

/// Waits (up to 10 s) until `done` holds.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_storage_worker_tells_the_store_it_is_idle_once_per_quiet_spell() {
    let store = Arc::new(FailingSnapshots::new(0));
    let (events_tx, mut events_rx) = mpsc::channel(16);
    let (tx, thread) =
        storage_worker::spawn(store.clone(), events_tx, Arc::new(crate::telemetry::metrics::Metrics::new()))
            .expect("spawned");
    let persisted = |events_rx: &mut mpsc::Receiver<Event>, want: u64| match events_rx.blocking_recv() {
        Some(Event::Input(Input::Persisted { seq })) => assert_eq!(seq, want),
        _ => panic!("expected Persisted {{ seq: {want} }}"),
    };
    // The worker starts as if already told (nothing to give back yet).
    tx.send(vec![(1, StorageOp::SetAcceptedEpoch(1))]).expect("worker running");
    persisted(&mut events_rx, 1);
    wait_for("idle after the first batch", || store.idles.load(Ordering::SeqCst) == 1);
    // A longer quiet spell is still one call.
    std::thread::sleep(storage_worker::IDLE_AFTER * 3);
    assert_eq!(store.idles.load(Ordering::SeqCst), 1, "one call per quiet spell");
    tx.send(vec![(2, StorageOp::SetCurrentEpoch(1))]).expect("worker running");
    persisted(&mut events_rx, 2);
    wait_for("idle after the second batch", || store.idles.load(Ordering::SeqCst) == 2);
    drop(tx);
    thread.join().expect("the worker stops when its sender is dropped");
}
