//! An acknowledged write is fsync'ed, not only written: the store's flush
//! must reach the disk the way a power cut needs, which `kill -9` tests
//! cannot tell apart from a write that sits in the page cache.
//!
//! sled 0.34's own flush stops at `sync_file_range`, which leaves the
//! drive's cache and a grown file's size unsynced, and it never syncs its
//! blob files. This test runs a writer under `strace` and checks, from the
//! system calls themselves, that before each acknowledgement the log's
//! database file was fdatasync'ed (or fsync'ed), that a value large enough
//! to become a sled blob had its file and directory fsync'ed before sled
//! wrote the record that points at it (so no power cut can keep the record
//! and lose the blob), and that a
//! saved snapshot's database and the directory entry that makes it count
//! were synced before the save returned.
//!
//! Skipped, saying so, without `strace` (CI installs it).

use bytes::Bytes;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::data::Data;
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::storage::Storage;
use zabkeeper_core::tree::{snapshot, DataTree};
use zabkeeper_core::txn::{Entry, Txn, TxnBody};
use zabkeeper_core::zab::StorageOp;
use zabkeeper_store::SledStorage;

/// Set in the writer child: the store's directory.
const WRITER_ENV: &str = "ZK_FSYNC_WRITER_DIR";
/// The writer's test name, passed as an exact filter.
const WRITER_TEST: &str = "storage_fsync::fsync_writer_child";
/// Small writes acknowledged one by one before the large one.
const SMALL_WRITES: u32 = 5;
/// Data of the large write: over the log database's ~512 KiB inline limit
/// (a quarter of its 2 MiB segments), so a blob.
const LARGE_BYTES: usize = 700 * 1024;

fn create(counter: u32, bytes: usize) -> Txn {
    Txn {
        session: SessionId(0x0100_0000_0000_0f5c),
        cxid: counter as i32,
        time_ms: 0,
        body: TxnBody::Create {
            path: format!("/fsync-{counter}"),
            data: Data::from(Bytes::from(vec![b'd'; bytes])),
            acl: Acl::open_unsafe(),
            ephemeral_owner: 0,
            parent_cversion: counter as i32,
        },
    }
}

/// Prints one line as one write(2), so the trace shows it whole.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    out.write_all(format!("{line}\n").as_bytes()).expect("write to stdout");
    out.flush().expect("flush stdout");
}

/// The writer process. Ignored in normal runs; the parent runs it with `--ignored`.
#[test]
#[ignore = "the writer half of storage_fsync; started by every_acknowledged_flush_is_fsynced"]
fn fsync_writer_child() {
    let dir =
        std::env::var(WRITER_ENV).expect("run by every_acknowledged_flush_is_fsynced with ZK_FSYNC_WRITER_DIR set");
    let store = SledStorage::open(&dir).expect("writer: open");
    say("opened");
    let mut tree = DataTree::new();
    let mut append = |counter: u32, bytes: usize| {
        let zxid = Zxid::new(1, counter);
        let txn = create(counter, bytes);
        tree.apply(zxid, &txn);
        store.apply(&[StorageOp::Append(vec![Entry { zxid, txn: Arc::new(txn) }])]).expect("writer: append");
        store.flush().expect("writer: flush");
    };
    for counter in 1..=SMALL_WRITES {
        append(counter, 100);
        say(&format!("ack {counter}"));
    }
    append(SMALL_WRITES + 1, LARGE_BYTES);
    let blobs: Vec<String> = std::fs::read_dir(Path::new(&dir).join("blobs"))
        .map(|listing| listing.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    say(&format!("ack {} blobs {}", SMALL_WRITES + 1, blobs.join(",")));
    let (chunks, _) = snapshot::to_chunks(&tree.snapshot(), 32 * 1024);
    store.save_snapshot(Zxid::new(1, SMALL_WRITES + 1), &chunks).expect("writer: save a snapshot");
    say("snapshot saved");
}

/// One traced system call or acknowledgement, in trace order.
#[derive(Debug, PartialEq)]
enum Event {
    /// fsync or fdatasync of the file at this path.
    Sync(String),
    /// syncfs of the filesystem holding the file at this path.
    SyncFs(String),
    /// pwrite to the file at this path.
    Wrote(String),
    /// A line the writer printed.
    Said(String),
}

/// The syncs and printed lines of an `strace -f -y` trace, in order.
fn events(trace: &str) -> Vec<Event> {
    let mut out = Vec::new();
    for line in trace.lines() {
        for call in ["fdatasync(", "fsync(", "syncfs(", "pwrite64("] {
            // `-y` prints a descriptor as `7</path/to/file>`.
            if let Some(rest) = line.split_once(call).map(|(_, rest)| rest) {
                if let Some(path) = rest.split_once('<').and_then(|(_, p)| p.split_once('>')).map(|(p, _)| p) {
                    let path = path.to_string();
                    out.push(match call {
                        "syncfs(" => Event::SyncFs(path),
                        "pwrite64(" => Event::Wrote(path),
                        _ => Event::Sync(path),
                    });
                }
            }
        }
        if let Some(rest) = line.split_once("write(1<").map(|(_, rest)| rest) {
            if let Some(text) = rest.split_once(", \"").and_then(|(_, t)| t.split_once("\\n\"")).map(|(t, _)| t) {
                out.push(Event::Said(text.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_acknowledged_flush_is_fsynced() {
    if Command::new("strace").arg("-V").stdout(Stdio::null()).status().map_or(true, |s| !s.success()) {
        eprintln!("skipped: strace is not installed (CI installs it; here: apt-get install strace)");
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store_dir = dir.path().join("store");
    let trace_file = dir.path().join("trace");
    let output = Command::new("strace")
        .args([
            "-f",
            "-y",
            "-qq",
            "-s",
            "200",
            "-e",
            "trace=fsync,fdatasync,syncfs,write,pwrite64",
            "-e",
            "signal=none",
            "-o",
        ])
        .arg(&trace_file)
        .arg(std::env::current_exe().expect("own binary"))
        .args([WRITER_TEST, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(WRITER_ENV, &store_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the writer under strace");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the writer failed: {printed}");
    assert!(printed.contains("snapshot saved"), "the writer did not finish: {printed}");
    let trace = std::fs::read_to_string(&trace_file).expect("read the trace");
    let events = events(&trace);

    let canonical = std::fs::canonicalize(&store_dir).expect("the store's directory");
    let log_db = canonical.join("db").display().to_string();
    let snapshot_dir = canonical.join("snapshots");
    let snapshot_name = zabkeeper_store::snapshot_dir_name(Zxid::new(1, SMALL_WRITES + 1));
    // Synced while it is written under its temporary name, then renamed.
    let snap_db = snapshot_dir.join(format!("{snapshot_name}.new")).join("db").display().to_string();
    let snapshot_dir = snapshot_dir.display().to_string();
    let blob_dir = canonical.join("blobs").display().to_string();
    let synced = |span: &[Event], path: &str| span.iter().any(|e| *e == Event::Sync(path.to_string()));

    let mut since = 0;
    let mut acks = 0;
    for (at, event) in events.iter().enumerate() {
        let Event::Said(text) = event else { continue };
        let span = &events[since..at];
        if let Some(ack) = text.strip_prefix("ack ") {
            acks += 1;
            assert!(
                synced(span, &log_db),
                "`{text}` was printed with no fsync of {log_db} since the last one: {span:?}"
            );
            if let Some(blobs) = ack.split_once(" blobs ").map(|(_, b)| b) {
                assert!(!blobs.is_empty(), "a {LARGE_BYTES} B value made no sled blob file; the test needs one");
                let record_written = span.iter().position(|e| *e == Event::Wrote(log_db.clone()));
                assert!(record_written.is_some(), "the large write's record was never written to {log_db}: {span:?}");
                for blob in blobs.split(',') {
                    let path = format!("{blob_dir}/{blob}");
                    let blob_synced = span.iter().position(|e| *e == Event::Sync(path.clone()));
                    assert!(blob_synced.is_some(), "the blob {path} was acknowledged unsynced: {span:?}");
                    assert!(
                        blob_synced < record_written,
                        "sled wrote the record pointing at {path} before the blob was synced: {span:?}"
                    );
                }
                assert!(synced(span, &blob_dir), "the blob directory was not synced: {span:?}");
            }
        } else if text == "opened" {
            // What a crash left unsynced is made durable before the store
            // is used: one filesystem sync.
            assert!(
                span.iter().any(|e| *e == Event::SyncFs(log_db.clone())),
                "the store opened with no syncfs through {log_db}: {span:?}"
            );
        } else if text == "snapshot saved" {
            assert!(synced(span, &snap_db), "a snapshot was saved with no fsync of {snap_db}: {span:?}");
            assert!(synced(span, &snapshot_dir), "a snapshot was saved with no fsync of {snapshot_dir}: {span:?}");
            let at_rename = span.iter().rposition(|e| *e == Event::Sync(snapshot_dir.clone()));
            let db_synced = span.iter().position(|e| *e == Event::Sync(snap_db.clone()));
            assert!(db_synced < at_rename, "the snapshot's directory entry was synced before its files: {span:?}");
        }
        since = at + 1;
    }
    assert_eq!(acks, SMALL_WRITES + 1, "every acknowledgement is in the trace: {events:?}");
}
