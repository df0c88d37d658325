//! Core throughput: transactions applied to the tree per second, getData
//! answered from the tree per second, and acknowledged writes per second
//! through `SledStorage` with one flush per write versus group commit. Kept
//! short: the machine is small and shared.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::op::Op;
use zabkeeper_core::replica::prep::check::{Context, Limits, PendingChanges};
use zabkeeper_core::storage::Storage;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_core::tree::{snapshot, DataTree};
use zabkeeper_core::txn::{Entry, Txn, TxnBody};
use zabkeeper_core::zab::StorageOp;
use zabkeeper_store::SledStorage;

const SESSION: SessionId = SessionId(0x0100_0000_0000_0001);
/// Transactions per tree-apply iteration: half creates, half setData.
const TXNS: u32 = 10_000;

fn payload(i: u32) -> Bytes {
    Bytes::from(vec![(i % 251) as u8; 100])
}

/// Prepares `TXNS` transactions as the leader would: creates of 100-byte
/// nodes, then setData of 100 bytes on each.
fn prepared() -> Vec<(Zxid, Txn)> {
    let mut tree = DataTree::new();
    let mut pending = PendingChanges::new();
    let mut out = Vec::with_capacity(TXNS as usize);
    let half = TXNS / 2;
    for n in 1..=TXNS {
        let zxid = Zxid::new(1, n);
        let i = (n - 1) % half;
        let op = if n <= half {
            Op::Create {
                path: format!("/node-{i}"),
                data: payload(n).into(),
                acl: Acl::open_unsafe(),
                mode: CreateMode::Persistent,
                ttl_ms: -1,
            }
        } else {
            Op::SetData { path: format!("/node-{i}"), data: payload(n).into(), version: -1 }
        };
        let ctx = Context { session: SESSION, identities: &[], zxid, time_ms: 1_000, limits: Limits::default() };
        let body = pending.prepare(tree.state(), &ctx, &op).expect("benchmark writes are valid");
        let txn = Txn { session: SESSION, cxid: n as i32, time_ms: 1_000, body };
        tree.apply(zxid, &txn);
        pending.retire(zxid);
        out.push((zxid, txn));
    }
    out
}

fn tree_apply(c: &mut Criterion) {
    let txns = prepared();
    let mut group = c.benchmark_group("tree_apply");
    group.throughput(Throughput::Elements(u64::from(TXNS)));
    group.bench_function("create_then_set_data_100B", |b| {
        b.iter_batched(
            DataTree::new,
            |mut tree| {
                for (zxid, txn) in &txns {
                    black_box(tree.apply(*zxid, txn));
                }
                tree
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn sled_acked_writes(c: &mut Criterion) {
    let template = Arc::new(Txn {
        session: SESSION,
        cxid: 1,
        time_ms: 1_000,
        body: TxnBody::SetData { path: "/node-1".into(), data: payload(1).into(), version: 3 },
    });
    let mut group = c.benchmark_group("sled_acked_writes");
    for batch in [1u32, 10, 100] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        let store = SledStorage::open(dir.path().join("store")).expect("open");
        let mut next = 1u32;
        group.throughput(Throughput::Elements(u64::from(batch)));
        group.bench_function(format!("flush_per_{batch}"), |b| {
            b.iter(|| {
                let entries: Vec<Entry> =
                    (0..batch).map(|i| Entry { zxid: Zxid::new(1, next + i), txn: template.clone() }).collect();
                next += batch;
                // An ack is allowed only once the flush covering the write returned.
                store.apply(&[StorageOp::Append(entries)]).expect("append");
                store.flush().expect("flush");
            })
        });
    }

    // The same group commit while another thread keeps saving snapshots:
    // sled has one write-ahead log, so a flush also writes the chunks
    // inserted since the last one.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let store = SledStorage::open(dir.path().join("store")).expect("open");
    let mut tree = DataTree::new();
    for (zxid, txn) in prepared() {
        tree.apply(zxid, &txn);
    }
    let (chunks, info) = snapshot::to_chunks(tree.state(), 64 * 1024);
    let stop = Arc::new(AtomicBool::new(false));
    let snapshotter = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            // Epoch 0 keeps these snapshots below every appended zxid.
            let mut counter = 0;
            while !stop.load(Ordering::Relaxed) {
                counter += 1;
                store.save_snapshot(Zxid::new(0, counter), &chunks).expect("snapshot");
                store.purge(1).expect("purge");
            }
            counter
        })
    };
    let mut next = 1u32;
    group.throughput(Throughput::Elements(100));
    group.bench_function(format!("flush_per_100_during_{}KiB_snapshots", info.bytes / 1024), |b| {
        b.iter(|| {
            let entries: Vec<Entry> =
                (0..100).map(|i| Entry { zxid: Zxid::new(1, next + i), txn: template.clone() }).collect();
            next += 100;
            store.apply(&[StorageOp::Append(entries)]).expect("append");
            store.flush().expect("flush");
        })
    });
    stop.store(true, Ordering::Relaxed);
    let saved = snapshotter.join().expect("snapshot thread");
    eprintln!("snapshots saved meanwhile: {saved}");
    group.finish();
}

/// getData as a replica answers it (ACL check, data and Stat), on a tree of
/// `TXNS / 2` nodes, every node in turn.
fn tree_reads(c: &mut Criterion) {
    let mut tree = DataTree::new();
    for (zxid, txn) in prepared() {
        tree.apply(zxid, &txn);
    }
    let reads: Vec<Op> = (0..TXNS / 2).map(|i| Op::GetData { path: format!("/node-{i}"), watch: false }).collect();
    let mut group = c.benchmark_group("tree_reads");
    group.throughput(Throughput::Elements(reads.len() as u64));
    group.bench_function("get_data_100B", |b| {
        b.iter(|| {
            for op in &reads {
                black_box(zabkeeper_core::replica::reads::execute(&mut tree, SESSION, &[], op));
            }
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .without_plots()
}

criterion_group! {
    name = core;
    config = config();
    targets = tree_apply, tree_reads, sled_acked_writes
}
criterion_main!(core);
