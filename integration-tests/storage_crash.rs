//! kill -9 of a process writing through `SledStorage`: every acknowledged
//! zxid survives, and what is recovered is exactly a prefix of what was
//! written, snapshot included.
//!
//! The test re-runs its own binary as the writer (selected by test name, with
//! the store's directory in an environment variable). The writer appends
//! batches of real transactions, flushes, and only then prints `ack <zxid>`;
//! a background thread saves snapshots and purges meanwhile, as the server
//! will, and now and then the writer installs a snapshot over its log, as a
//! follower does when a leader syncs it with SNAP. The parent kills it at several points, each round reopening the same
//! store, so later rounds also cover resuming after a crash. The workload is
//! deterministic, so the parent can regenerate exactly what was written.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::op::Op;
use zabkeeper_core::replica::prep::check::{Context, Limits, PendingChanges};
use zabkeeper_core::storage::{Recovered, Storage};
use zabkeeper_core::tree::snapshot;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_core::tree::{DataTree, TreeState};
use zabkeeper_core::txn::{Entry, Txn, TxnBody};
use zabkeeper_core::zab::StorageOp;
use zabkeeper_store::SledStorage;

/// Set in the writer child: the store's directory.
const WRITER_ENV: &str = "ZK_CRASH_WRITER_DIR";
/// The writer's test name, passed as an exact filter.
const WRITER_TEST: &str = "storage_crash::crash_writer_child";
const SESSION: SessionId = SessionId(0x0100_0000_0000_0c0c);
/// How long one round may take before the parent kills the writer anyway.
const ROUND_LIMIT: Duration = Duration::from_secs(30);
/// How long the writer runs if nobody kills it.
const WRITER_LIMIT: Duration = Duration::from_secs(90);

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The deterministic stream of transactions: entry n depends only on n and
/// the tree before it, so a resumed writer continues exactly where it was.
struct Workload {
    tree: DataTree,
    pending: PendingChanges,
    next: u32,
}

impl Workload {
    fn new() -> Workload {
        Workload { tree: DataTree::new(), pending: PendingChanges::new(), next: 1 }
    }

    /// Continues after what a store recovered.
    fn resume(recovered: &Recovered) -> Workload {
        let mut tree = recovered.snapshot.clone().map_or_else(DataTree::new, DataTree::from_state);
        for entry in &recovered.log {
            tree.apply(entry.zxid, &entry.txn);
        }
        Workload { tree, pending: PendingChanges::new(), next: recovered.last_zxid().counter() + 1 }
    }

    fn next_entry(&mut self) -> Entry {
        let n = self.next;
        self.next += 1;
        let zxid = Zxid::new(1, n);
        let time_ms = 1_700_000_000_000 + i64::from(n);
        let body = if n == 1 {
            TxnBody::CreateSession { timeout_ms: 30_000, password: bytes::Bytes::from_static(&[3; 16]) }
        } else {
            let r = splitmix(u64::from(n));
            let data = bytes::Bytes::from((0..100).map(|i| (r >> (i % 8)) as u8).collect::<Vec<u8>>());
            let other = format!("/k{}", 2 + (r >> 16) % u64::from(n - 1));
            let op = match r % 100 {
                0..=4 => Op::Create {
                    path: format!("/k{n}"),
                    data: data.into(),
                    acl: Acl::open_unsafe(),
                    mode: CreateMode::Ephemeral,
                    ttl_ms: -1,
                },
                5..=59 => Op::Create {
                    path: format!("/k{n}"),
                    data: data.into(),
                    acl: Acl::open_unsafe(),
                    mode: CreateMode::Persistent,
                    ttl_ms: -1,
                },
                60..=89 => Op::SetData { path: other, data: data.into(), version: -1 },
                _ => Op::Delete { path: other, version: -1 },
            };
            let ctx = Context { session: SESSION, identities: &[], zxid, time_ms, limits: Limits::default() };
            self.pending.prepare(self.tree.state(), &ctx, &op).unwrap_or_else(|e| TxnBody::Error(e.code))
        };
        let txn = Txn { session: SESSION, cxid: n as i32, time_ms, body };
        self.tree.apply(zxid, &txn);
        self.pending.retire(zxid);
        Entry::new(zxid, txn)
    }
}

/// The writer process. Ignored in normal runs; the parent runs it with `--ignored`.
#[test]
#[ignore = "the writer half of storage_crash; started by acknowledged_writes_survive_kill_9"]
fn crash_writer_child() {
    let dir =
        std::env::var(WRITER_ENV).expect("run by acknowledged_writes_survive_kill_9 with ZK_CRASH_WRITER_DIR set");
    let store = SledStorage::open(&dir).expect("writer: open");
    let recovered = store.recover().expect("writer: recover");
    let mut workload = Workload::resume(&recovered);
    let (snapshots, pending_snapshots) = mpsc::sync_channel::<TreeState>(1);
    let snapshot_store = store.clone();
    let snapshotter = std::thread::spawn(move || {
        for state in pending_snapshots {
            let (chunks, _) = snapshot::to_chunks(&state, 16 * 1024);
            snapshot_store.save_snapshot(state.last_zxid(), &chunks).expect("writer: save snapshot");
            snapshot_store.purge(2).expect("writer: purge");
        }
    });
    let started = Instant::now();
    let mut batch = 0u64;
    while started.elapsed() < WRITER_LIMIT && batch < 1_000_000 {
        batch += 1;
        let size = 1 + splitmix(batch ^ 0xb47c) % 40;
        let entries: Vec<Entry> = (0..size).map(|_| workload.next_entry()).collect();
        let last = entries[entries.len() - 1].zxid;
        store.apply(&[StorageOp::Append(entries)]).expect("writer: append");
        store.flush().expect("writer: flush");
        // Only now is the batch durable, so only now may it be acknowledged.
        println!("ack {}", last.0);
        if batch.is_multiple_of(60) {
            // As a follower's SNAP sync does: the store is replaced by a
            // snapshot at the last zxid and the log is dropped, atomically.
            let (chunks, _) = snapshot::to_chunks(&workload.tree.snapshot(), 32 * 1024);
            store.apply(&[StorageOp::InstallSnapshot { zxid: last, chunks }]).expect("writer: install");
            store.flush().expect("writer: flush the install");
        }
        if batch.is_multiple_of(25) {
            // The tree after a flush is committed state; skip if the last one is still being written.
            let _ = snapshots.try_send(workload.tree.snapshot());
        }
    }
    drop(snapshots);
    snapshotter.join().expect("snapshot thread");
}

/// Starts a writer, kills it `delay` after its `kill_after`-th ack (or at
/// once, or when the round's time is up), and returns the highest
/// acknowledged zxid.
fn run_writer_and_kill(dir: &std::path::Path, kill_after: usize, delay: Duration) -> Zxid {
    let mut child = Command::new(std::env::current_exe().expect("own binary"))
        .args([WRITER_TEST, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(WRITER_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines, received) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let parse = |line: &str| line.strip_prefix("ack ").and_then(|z| z.trim().parse::<u64>().ok()).map(Zxid);
    let deadline = Instant::now() + ROUND_LIMIT;
    let mut acked = Zxid::ZERO;
    let mut acks = 0;
    while acks < kill_after {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
        match received.recv_timeout(left) {
            Ok(line) => {
                if let Some(zxid) = parse(&line) {
                    acked = acked.max(zxid);
                    acks += 1;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the writer stopped on its own after {acks} acks"),
        }
    }
    // The writer goes on meanwhile, so the kill lands mid-batch or mid-snapshot.
    std::thread::sleep(delay);
    assert!(child.try_wait().expect("poll the writer").is_none(), "the writer exited before it was killed");
    // Child::kill sends SIGKILL on Unix: no destructor, no flush, like a power cut for the process.
    child.kill().expect("kill the writer");
    child.wait().expect("reap the writer");
    reader.join().expect("reader thread");
    // Acks already in the pipe were printed after their flush: they count too.
    for line in received.try_iter() {
        if let Some(zxid) = parse(&line) {
            acked = acked.max(zxid);
        }
    }
    acked
}

/// Reopens the store and checks it against the regenerated workload.
fn verify(dir: &std::path::Path, acked: Zxid) -> Recovered {
    let store = SledStorage::open(dir).expect("reopen after kill -9");
    let recovered = store.recover().expect("recover after kill -9");
    let last = recovered.last_zxid();
    assert!(last >= acked, "acknowledged {acked:?} but only {last:?} survived");
    let base = recovered.snapshot_zxid();
    let found: Vec<Zxid> = recovered.log.iter().map(|e| e.zxid).collect();
    let expected: Vec<Zxid> = (base.counter() + 1..=last.counter()).map(|c| Zxid::new(1, c)).collect();
    assert_eq!(found, expected, "the recovered log is not the contiguous run after the snapshot");
    let mut workload = Workload::new();
    let mut log = recovered.log.iter();
    for _ in 1..=last.counter() {
        let entry = workload.next_entry();
        if entry.zxid == base {
            let snapshot = recovered.snapshot.as_ref().map(TreeState::digest);
            assert_eq!(snapshot, Some(workload.tree.state().digest()), "snapshot at {base:?} is not the tree there");
        }
        if entry.zxid > base {
            assert_eq!(log.next(), Some(&entry), "recovered entry differs from what was written");
        }
    }
    let mut tree = recovered.snapshot.clone().map_or_else(DataTree::new, DataTree::from_state);
    for entry in &recovered.log {
        tree.apply(entry.zxid, &entry.txn);
    }
    assert_eq!(tree.state().digest(), workload.tree.state().digest(), "replayed tree differs");
    recovered
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let mut highest = Zxid::ZERO;
    // 0: killed while starting (possibly while sled creates its files).
    let rounds = [(0usize, 0u64), (3, 0), (40, 7), (400, 0), (1, 3), (1500, 13), (200, 29)];
    for (round, (kill_after, delay_ms)) in rounds.into_iter().enumerate() {
        let acked = run_writer_and_kill(&store, kill_after, Duration::from_millis(delay_ms));
        highest = highest.max(acked);
        let recovered = verify(&store, highest);
        eprintln!(
            "round {round}: killed {delay_ms} ms after {kill_after} acks; acked up to {highest:?}, recovered snapshot {:?} + {} entries up to {:?}",
            recovered.snapshot_zxid(),
            recovered.log.len(),
            recovered.last_zxid()
        );
    }
    assert!(highest.counter() > 1000, "the rounds wrote too little to mean much: {highest:?}");
}
