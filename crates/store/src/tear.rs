//! Each kind of file the store keeps, torn or lost on disk: the store
//! either recovers a prefix of what it wrote (a torn tail, as a crash
//! leaves) or refuses to open with an error that names what is wrong. It
//! never opens on less than it acknowledged without saying so, and never
//! panics.
//!
//! The kinds: the log database's data file (`db`), its configuration
//! (`conf`), its blob files (`blobs/<lsn>`, a run over sled's inline
//! limit), a snapshot database's data file and blob files (a chunk over the
//! limit), and the store's marker file.

use super::{durable, SledStorage, SIDECAR, SNAPSHOT_DIR};
use std::path::{Path, PathBuf};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::storage::conformance::replay;
use zabkeeper_core::storage::{Recovered, Storage, StorageError};
use zabkeeper_core::tree::{snapshot, DataTree, TreeState};
use zabkeeper_core::txn::{Entry, Txn, TxnBody};

const SESSION: SessionId = SessionId(0x0100_0000_0000_0007);
/// The large node's data: over the log database's blob limit (a quarter of
/// its 2 MiB segments) and a snapshot database's (a quarter of 512 KiB).
const LARGE: usize = 600 << 10;
/// The counter of the large node's create.
const LARGE_AT: u32 = 7;

fn z(counter: u32) -> Zxid {
    Zxid::new(1, counter)
}

/// A session, then `n - 1` creates; the one at [`LARGE_AT`] is large. With
/// the tree after each.
fn history(n: u32) -> (Vec<Entry>, Vec<TreeState>) {
    let mut tree = DataTree::new();
    let (mut entries, mut states) = (Vec::new(), Vec::new());
    for counter in 1..=n {
        let body = if counter == 1 {
            TxnBody::CreateSession { timeout_ms: 10_000, password: bytes::Bytes::from_static(&[7; 16]) }
        } else {
            let size = if counter == LARGE_AT { LARGE } else { 64 };
            TxnBody::Create {
                path: format!("/n{counter}"),
                data: bytes::Bytes::from(vec![counter as u8; size]).into(),
                acl: Acl::open_unsafe(),
                ephemeral_owner: 0,
                parent_cversion: counter as i32 - 1,
            }
        };
        let txn = Txn { session: SESSION, cxid: counter as i32, time_ms: 1_000 + i64::from(counter), body };
        tree.apply(z(counter), &txn);
        entries.push(Entry::new(z(counter), txn));
        states.push(tree.snapshot());
    }
    (entries, states)
}

/// A store in `dir` holding `entries`, each appended and flushed alone, as
/// group commit writes them; closed on return.
fn write_store(dir: &Path, entries: &[Entry], snapshot_at: Option<(Zxid, &TreeState)>) {
    let store = SledStorage::open(dir).expect("open a fresh store");
    for entry in entries {
        store.apply(&[zabkeeper_core::zab::StorageOp::Append(vec![entry.clone()])]).expect("append");
        store.flush().expect("flush");
        if let Some((zxid, state)) = snapshot_at.filter(|(zxid, _)| *zxid == entry.zxid) {
            let (chunks, _) = snapshot::to_chunks(state, super::SNAPSHOT_CHUNK_BYTES);
            store.save_snapshot(zxid, &chunks).expect("save the snapshot");
        }
    }
    close(store, dir);
}

fn close(store: SledStorage, dir: &Path) {
    drop(store);
    durable::wait_closed(dir).expect("sled lets go of its files");
}

/// The blob files of the sled database in `dir`, largest first.
fn blobs(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(u64, PathBuf)> = match std::fs::read_dir(dir.join(durable::BLOB_DIR)) {
        Ok(listing) => listing
            .map(|e| e.expect("a blob entry").path())
            .map(|p| (std::fs::metadata(&p).expect("a blob's size").len(), p))
            .collect(),
        Err(_) => Vec::new(),
    };
    found.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
    found.into_iter().map(|(_, path)| path).collect()
}

/// Cuts `cut` bytes off the end of `file`.
fn tear(file: &Path, cut: u64) {
    let handle = std::fs::OpenOptions::new().write(true).open(file).expect("open the file to tear");
    let len = handle.metadata().expect("its size").len();
    handle.set_len(len.saturating_sub(cut)).expect("truncate");
}

fn recover(dir: &Path) -> Result<Recovered, StorageError> {
    let store = SledStorage::open(dir)?;
    let recovered = store.recover();
    close(store, dir);
    recovered
}

fn snapshot_db(dir: &Path, zxid: Zxid) -> PathBuf {
    dir.join(SNAPSHOT_DIR).join(super::snapshot_dir_name(zxid))
}

#[test]
fn a_torn_blob_of_the_log_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (entries, _) = history(10);
    write_store(dir.path(), &entries, None);
    let large = blobs(dir.path());
    assert!(!large.is_empty(), "the large run is a blob file");
    tear(&large[0], 100);
    match SledStorage::open(dir.path()) {
        Err(StorageError::TornFile { path, reason }) => {
            assert_eq!(path, large[0].display().to_string());
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected TornFile naming {}, got {other:?}", large[0].display()),
    }
}

#[test]
fn a_lost_blob_of_the_log_is_an_error_never_a_shorter_log() {
    // The large run last: without its file the log would just end earlier.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (entries, _) = history(LARGE_AT);
    write_store(dir.path(), &entries, None);
    let files = blobs(dir.path());
    assert!(!files.is_empty(), "the large run is a blob file");
    for file in &files {
        std::fs::remove_file(file).expect("lose the blob");
    }
    match SledStorage::open(dir.path()).and_then(|store| store.recover()) {
        Err(StorageError::TornFile { path, reason }) => {
            assert!(path.ends_with("blobs"), "{path}");
            assert!(reason.contains(&z(LARGE_AT).to_string()), "{reason}");
        }
        other => panic!("expected TornFile for the lost large run, got {other:?}"),
    }

    // Entries after it: the hole is found where the log is read.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (entries, _) = history(10);
    write_store(dir.path(), &entries, None);
    for file in blobs(dir.path()) {
        std::fs::remove_file(file).expect("lose the blob");
    }
    match recover(dir.path()) {
        Err(StorageError::Discontiguous { previous, found }) => {
            assert_eq!((previous, found), (z(LARGE_AT - 1), z(LARGE_AT + 1)));
        }
        Err(StorageError::TornFile { .. }) => {}
        other => panic!("expected the hole to be refused, got {other:?}"),
    }
}

#[test]
fn a_lost_blob_at_the_end_of_an_epoch_is_an_error_too() {
    // The log's own checks accept any step into a new epoch: only the list
    // of large runs sees the hole.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut entries, _) = history(LARGE_AT);
    for counter in 1..=2 {
        let body = TxnBody::Delete { path: format!("/n{counter}") };
        let txn = Txn { session: SESSION, cxid: 100 + counter as i32, time_ms: 5_000, body };
        entries.push(Entry::new(Zxid::new(2, counter), txn));
    }
    write_store(dir.path(), &entries, None);
    for file in blobs(dir.path()) {
        std::fs::remove_file(file).expect("lose the blob");
    }
    match recover(dir.path()) {
        Err(StorageError::TornFile { reason, .. }) => assert!(reason.contains(&z(LARGE_AT).to_string()), "{reason}"),
        other => panic!("expected TornFile for the large run that ended epoch 1, got {other:?}"),
    }
}

#[test]
fn a_blob_a_crash_cut_short_before_its_flush_is_dropped_not_refused() {
    // Written by sled after the last flush synced anything, then torn by a
    // power cut (delayed allocation leaves it empty): nothing acknowledged
    // points at it, and sled drops it at recovery.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (entries, states) = history(10);
    write_store(dir.path(), &entries, None);
    let mark = durable::read_mark(dir.path()).expect("the mark").expect("a large run's blob was synced");
    let leftover = dir.path().join(durable::BLOB_DIR).join((mark + 1_000_000).to_string());
    std::fs::write(&leftover, b"").expect("a torn, unsynced blob");
    let recovered = recover(dir.path()).expect("a crash's leftover does not stop the store");
    assert_eq!(replay(&recovered).digest(), states[9].digest(), "everything acknowledged is there");
    assert!(!leftover.exists(), "sled dropped the leftover at recovery");
    // Torn at or below the mark it was durable once: damage, refused by name.
    let synced = blobs(dir.path());
    tear(&synced[0], 10);
    assert!(matches!(SledStorage::open(dir.path()), Err(StorageError::TornFile { .. })));
}

#[test]
fn a_truncated_log_before_the_large_run_is_not_mistaken_for_a_lost_blob() {
    // A new leader's truncation below the large run, then a restart.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (entries, _) = history(10);
    write_store(dir.path(), &entries, None);
    let store = SledStorage::open(dir.path()).expect("open");
    store.apply(&[zabkeeper_core::zab::StorageOp::TruncateAfter(z(3))]).expect("truncate");
    store.flush().expect("flush");
    close(store, dir.path());
    let recovered = recover(dir.path()).expect("a truncated log opens");
    assert_eq!(recovered.last_zxid(), z(3));
}

#[test]
fn a_torn_snapshot_blob_is_named_and_recovery_falls_back_only_where_the_log_covers_it() {
    let (entries, states) = history(10);
    let at = z(LARGE_AT);
    let state = &states[LARGE_AT as usize - 1];

    // The whole log is kept: recovery replays it and says why.
    let dir = tempfile::tempdir().expect("a temporary directory");
    write_store(dir.path(), &entries, Some((at, state)));
    let chunk = blobs(&snapshot_db(dir.path(), at));
    assert!(!chunk.is_empty(), "the large chunk is a blob file");
    tear(&chunk[0], 1000);
    let recovered = recover(dir.path()).expect("the log covers the torn snapshot");
    assert!(recovered.snapshot.is_none(), "the torn snapshot is not used");
    assert_eq!(replay(&recovered).digest(), states[9].digest());

    // The log after the snapshot only: the torn snapshot is an error naming its file.
    let dir = tempfile::tempdir().expect("a temporary directory");
    write_store(dir.path(), &entries, Some((at, state)));
    let store = SledStorage::open(dir.path()).expect("open");
    store.purge(1).expect("purge the log the snapshot covers");
    store.flush().expect("flush");
    close(store, dir.path());
    let chunk = blobs(&snapshot_db(dir.path(), at));
    tear(&chunk[0], 1000);
    match recover(dir.path()) {
        Err(e @ StorageError::IncompleteSnapshot { .. }) | Err(e @ StorageError::CorruptSnapshot { .. }) => {
            let text = e.to_string();
            let name = chunk[0].display().to_string();
            assert!(text.contains(&name), "the error names {name}: {text}");
        }
        other => panic!("expected the torn snapshot to be refused, got {other:?}"),
    }
}

#[test]
fn a_torn_snapshot_data_file_falls_back_on_the_log_or_is_refused() {
    let (entries, states) = history(10);
    let at = z(LARGE_AT);
    let dir = tempfile::tempdir().expect("a temporary directory");
    write_store(dir.path(), &entries, Some((at, &states[LARGE_AT as usize - 1])));
    let data = snapshot_db(dir.path(), at).join("db");
    let len = std::fs::metadata(&data).expect("its size").len();
    tear(&data, len / 2);
    match recover(dir.path()) {
        Ok(recovered) => assert_eq!(replay(&recovered).digest(), states[9].digest(), "all of it, from the log"),
        Err(e) => assert!(e.is_snapshot_fault() || matches!(e, StorageError::Damaged { .. }), "{e}"),
    }
}

#[test]
fn a_torn_log_data_file_recovers_a_prefix_or_is_refused() {
    let (entries, states) = history(30);
    let dir = tempfile::tempdir().expect("a temporary directory");
    write_store(dir.path(), &entries, None);
    let len = std::fs::metadata(dir.path().join("db")).expect("its size").len();
    let mut shorter = 0;
    for step in 1..=12u64 {
        let copy = tempfile::tempdir().expect("a temporary directory");
        copy_dir(dir.path(), copy.path());
        tear(&copy.path().join("db"), len * step / 13);
        match recover(copy.path()) {
            Ok(recovered) => {
                let last = recovered.last_zxid();
                assert!(last <= z(30), "{last:?}");
                if last < z(30) {
                    shorter += 1;
                }
                if last > Zxid::ZERO {
                    let index = last.counter() as usize - 1;
                    assert_eq!(replay(&recovered).digest(), states[index].digest(), "a prefix, up to {last:?}");
                }
            }
            // Refused with a reason, never a panic.
            Err(e) => {
                assert!(!e.to_string().is_empty());
                shorter += 1;
            }
        }
    }
    assert!(shorter > 0, "the tears reached what was written");
}

#[test]
fn a_torn_configuration_or_marker_file_is_refused() {
    let (entries, _) = history(5);
    let dir = tempfile::tempdir().expect("a temporary directory");
    write_store(dir.path(), &entries, None);

    let copy = tempfile::tempdir().expect("a temporary directory");
    copy_dir(dir.path(), copy.path());
    tear(&copy.path().join("conf"), 4);
    assert!(SledStorage::open(copy.path()).is_err(), "a torn sled configuration is refused");

    let copy = tempfile::tempdir().expect("a temporary directory");
    copy_dir(dir.path(), copy.path());
    tear(&copy.path().join(SIDECAR), 3);
    match SledStorage::open(copy.path()) {
        Err(StorageError::NotAStore { reason, .. }) => assert!(reason.contains("marker"), "{reason}"),
        other => panic!("expected the torn marker file to be refused, got {other:?}"),
    }
}

/// Copies the files of `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}
