//! Durability's tests: each new blob synced once after its close (watched or
//! listed), the synced mark, and blob files checked as sled reads them.

use super::torn_blobs::BlobCheck;
use super::*;

#[test]
fn new_blob_files_are_synced_once_and_removed_ones_forgotten() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join(DATA_FILE), b"pages").expect("a data file");
    let durable = Durable::open(dir.path()).expect("open");
    durable.after_flush().expect("sync without a blob directory");
    assert_eq!(durable.synced_blob_count(), 0);
    let blobs = dir.path().join(BLOB_DIR);
    std::fs::create_dir(&blobs).expect("the blob directory");
    std::fs::write(blobs.join("17"), b"a large value").expect("a blob");
    std::fs::write(blobs.join("42"), b"another").expect("a blob");
    durable.before_flush().expect("sync two new blobs");
    assert_eq!(durable.synced_blob_count(), 2);
    std::fs::remove_file(blobs.join("17")).expect("remove a blob");
    durable.before_flush().expect("sync after a removal");
    assert_eq!(durable.synced_blob_count(), 1, "a removed blob is forgotten");
}

#[test]
fn blob_files_present_at_open_are_covered_by_its_sync() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join(DATA_FILE), b"pages").expect("a data file");
    let blobs = dir.path().join(BLOB_DIR);
    std::fs::create_dir(&blobs).expect("the blob directory");
    for name in ["3", "5", "8"] {
        std::fs::write(blobs.join(name), b"left by an earlier run").expect("a blob");
    }
    let durable = Durable::open(dir.path()).expect("open");
    assert_eq!(durable.synced_blob_count(), 3, "the filesystem sync at open covers them");
    std::fs::write(blobs.join("13"), b"written since").expect("a new blob");
    durable.before_flush().expect("sync");
    assert_eq!(durable.synced_blob_count(), 4);
}

/// A temporary database directory with sled's blob directory in it.
fn with_blob_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let blob_dir = dir.path().join(BLOB_DIR);
    std::fs::create_dir(&blob_dir).expect("the blob directory");
    (dir, blob_dir)
}

/// The durable half of a database in `dir` whose data file is written.
fn opened(dir: &Path) -> Durable {
    std::fs::write(dir.join(DATA_FILE), b"pages").expect("a data file");
    Durable::open(dir).expect("open")
}

/// Blob files in `dir`'s blob directory: each written whole is synced by
/// the next look, once; one still open for writing waits for the look
/// after its close; a removed one is forgotten.
fn looks_sync_each_closed_blob_once(dir: &Path, blobs: &mut NewBlobs) {
    let blob_dir = dir.join(BLOB_DIR);
    std::fs::write(blob_dir.join("17"), b"a large value").expect("a blob");
    assert_eq!(blobs.sync_new().expect("look"), Some(17));
    assert_eq!(blobs.sync_new().expect("look"), None, "synced once");
    let mut open = File::create(blob_dir.join("42")).expect("a blob being written");
    std::io::Write::write_all(&mut open, b"half of it").expect("write");
    std::fs::write(blob_dir.join("23"), b"whole").expect("a blob");
    let first = blobs.sync_new().expect("look");
    drop(open);
    let second = blobs.sync_new().expect("look");
    std::fs::remove_file(blob_dir.join("17")).expect("remove a blob");
    assert_eq!(blobs.sync_new().expect("look"), None);
    assert_eq!(blobs.synced.len(), 2, "a removed blob is forgotten: {:?}", blobs.synced);
    if blobs.watch.is_some() {
        assert_eq!((first, second), (Some(23), Some(42)), "the watch waits for the close");
    } else {
        // A listing cannot tell an open file: it syncs what is there.
        assert_eq!((first, second), (Some(42), None));
    }
}

#[test]
fn a_watched_blob_directory_syncs_each_blob_once_after_its_close() {
    let (dir, _) = with_blob_dir();
    let mut blobs = NewBlobs::new(dir.path());
    assert!(blobs.watch.is_some(), "Linux watches the directory");
    assert_eq!(blobs.sync_new().expect("the first look lists"), None);
    looks_sync_each_closed_blob_once(dir.path(), &mut blobs);
}

#[test]
fn without_a_watch_every_look_lists_the_blob_directory() {
    let (dir, _) = with_blob_dir();
    let mut blobs = NewBlobs { watch: None, ..NewBlobs::new(dir.path()) };
    looks_sync_each_closed_blob_once(dir.path(), &mut blobs);
}

#[test]
fn a_blob_written_before_the_first_look_is_synced_by_it() {
    let (dir, blob_dir) = with_blob_dir();
    std::fs::write(blob_dir.join("5"), b"before the watch").expect("a blob");
    let mut blobs = NewBlobs::new(dir.path());
    std::fs::write(blob_dir.join("9"), b"after it").expect("a blob");
    assert_eq!(blobs.sync_new().expect("look"), Some(9));
    assert_eq!(blobs.synced.len(), 2);
    assert_eq!(blobs.sync_new().expect("look"), None, "the listing's look took in the watch's event too");
}

#[test]
fn a_blob_listed_while_still_open_is_synced_again_once_closed() {
    let (dir, blob_dir) = with_blob_dir();
    let mut blobs = NewBlobs::new(dir.path());
    let mut open = File::create(blob_dir.join("11")).expect("a blob being written");
    std::io::Write::write_all(&mut open, b"the first half").expect("write");
    assert_eq!(blobs.sync_new().expect("the first look lists"), Some(11), "synced as far as written");
    std::io::Write::write_all(&mut open, b", the second").expect("write");
    drop(open);
    assert_eq!(blobs.sync_new().expect("look"), Some(11), "its close makes the next look sync it again");
    assert_eq!(blobs.sync_new().expect("look"), None);
}

#[test]
fn a_removed_name_written_again_is_synced_again() {
    let (dir, blob_dir) = with_blob_dir();
    let mut blobs = NewBlobs::new(dir.path());
    assert_eq!(blobs.sync_new().expect("look"), None);
    std::fs::write(blob_dir.join("8"), b"first").expect("a blob");
    assert_eq!(blobs.sync_new().expect("look"), Some(8));
    std::fs::remove_file(blob_dir.join("8")).expect("remove");
    std::fs::write(blob_dir.join("8"), b"second").expect("the same name again");
    assert_eq!(blobs.sync_new().expect("look"), Some(8));
}

#[test]
fn lost_events_make_the_look_list_the_directory() {
    let (dir, blob_dir) = with_blob_dir();
    let mut blobs = NewBlobs::new(dir.path());
    assert_eq!(blobs.sync_new().expect("look"), None);
    std::fs::write(blob_dir.join("6"), b"told").expect("a blob");
    std::fs::write(blob_dir.join("3"), b"its event dropped").expect("a blob");
    // What a watch whose queue overflowed tells: some names, and that it lost others.
    let seen = Changes { written: ["6".into()].into(), lost: true, ..Changes::default() };
    assert_eq!(blobs.sync_seen(Some(Ok(seen))).expect("look"), Some(6));
    assert_eq!(blobs.synced.len(), 2, "the listing found 3 too: {:?}", blobs.synced);
    assert!(blobs.watch.is_some(), "an overflow keeps the watch");
    let seen = Changes { written: ["6".into()].into(), ..Changes::default() };
    assert_eq!(blobs.sync_seen(Some(Ok(seen))).expect("look"), Some(6), "told again: synced again");
    assert!(!blobs.relist, "one listing per loss");
}

#[test]
fn a_blob_closed_during_sled_s_flush_is_synced_before_the_data_file() {
    let (dir, blob_dir) = with_blob_dir();
    let durable = opened(dir.path());
    durable.before_flush().expect("before");
    // Written by another thread while sled's flush ran.
    std::fs::write(blob_dir.join("21"), b"a rewritten page").expect("a blob");
    durable.after_flush().expect("after");
    assert_eq!(durable.synced_blob_count(), 1);
    assert_eq!(read_mark(dir.path()).expect("the mark"), Some(21));
}

#[test]
fn the_synced_mark_never_moves_down() {
    let (dir, blob_dir) = with_blob_dir();
    let durable = opened(dir.path());
    std::fs::write(blob_dir.join("100"), b"a higher blob").expect("a blob");
    durable.before_flush().expect("sync");
    assert_eq!(read_mark(dir.path()).expect("the mark"), Some(100));
    std::fs::write(blob_dir.join("90"), b"a lower one, closed later").expect("a blob");
    durable.before_flush().expect("sync");
    assert_eq!(durable.synced_blob_count(), 2);
    assert_eq!(read_mark(dir.path()).expect("the mark"), Some(100));
}

#[test]
fn a_watch_that_ends_leaves_every_later_look_to_a_listing() {
    let (dir, blob_dir) = with_blob_dir();
    let mut blobs = NewBlobs::new(dir.path());
    assert_eq!(blobs.sync_new().expect("look"), None);
    // The watched directory replaced: its watch ends, with events unseen.
    std::fs::remove_dir(&blob_dir).expect("remove it");
    std::fs::create_dir(&blob_dir).expect("a new one");
    std::fs::write(blob_dir.join("3"), b"in the new directory").expect("a blob");
    assert_eq!(blobs.sync_new().expect("look"), Some(3), "a listing finds it");
    assert!(blobs.watch.is_none());
    std::fs::write(blob_dir.join("4"), b"later").expect("a blob");
    assert_eq!(blobs.sync_new().expect("look"), Some(4));
}

/// A blob file as sled 0.34 writes one.
fn blob(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[kind]);
    hasher.update(body);
    let mut out = hasher.finalize().to_le_bytes().to_vec();
    out.push(kind);
    out.extend_from_slice(body);
    out
}

#[test]
fn blob_files_are_checked_as_sled_reads_them_and_a_torn_one_is_named() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    assert_eq!(check_blobs(dir.path()).expect("no blob directory"), Ok(BlobCheck::default()));
    let blobs = dir.path().join(BLOB_DIR);
    std::fs::create_dir(&blobs).expect("the blob directory");
    std::fs::write(blobs.join("1200"), blob(3, b"a whole value")).expect("a blob");
    std::fs::write(blobs.join("900"), blob(4, &[])).expect("a blob with an empty body");
    assert_eq!(check_blobs(dir.path()).expect("check").map(|c| c.whole), Ok(2));

    let mut torn = blob(3, b"a value cut short by a crash");
    torn.truncate(torn.len() - 4);
    std::fs::write(blobs.join("77000"), &torn).expect("a torn blob");
    std::fs::write(blobs.join("88000"), &torn[..3]).expect("a blob cut inside its header");
    let found = check_blobs(dir.path()).expect("check").expect_err("two torn blobs");
    assert_eq!(found.path, blobs.join("77000"), "the lowest torn name is reported");
    assert!(found.reason.contains("checksum"), "{}", found.reason);
    std::fs::remove_file(blobs.join("77000")).expect("remove");
    let found = check_blobs(dir.path()).expect("check").expect_err("one torn blob");
    assert_eq!(found.path, blobs.join("88000"));
    assert!(found.reason.contains("3 bytes, shorter than a blob header"), "{}", found.reason);
}

#[test]
fn a_torn_blob_above_the_synced_mark_is_a_crash_leftover_and_at_or_below_it_damage() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join(DATA_FILE), b"pages").expect("a data file");
    let blobs = dir.path().join(BLOB_DIR);
    std::fs::create_dir(&blobs).expect("the blob directory");
    std::fs::write(blobs.join("500"), blob(3, b"synced before its flush")).expect("a blob");
    let durable = Durable::open(dir.path()).expect("open");
    assert_eq!(read_mark(dir.path()).expect("mark"), Some(500), "what open found is synced");
    std::fs::write(blobs.join("900"), blob(3, b"written since")).expect("a new blob");
    durable.before_flush().expect("sync");
    assert_eq!(read_mark(dir.path()).expect("mark"), Some(900), "the mark moves past what a flush synced");

    // A crash cuts a blob written after the last flush: no acknowledged record points at it.
    std::fs::write(blobs.join("1300"), b"").expect("an empty blob, as delayed allocation leaves one");
    let found = check_blobs(dir.path()).expect("check").expect("a leftover, not damage");
    assert_eq!((found.whole, found.unsynced), (2, vec![blobs.join("1300")]));
    // A blob at or below the mark was durable once: torn now, it is damage.
    std::fs::write(blobs.join("900"), &blob(3, b"written since")[..6]).expect("tear a synced blob");
    let torn = check_blobs(dir.path()).expect("check").expect_err("damage");
    assert_eq!(torn.path, blobs.join("900"));
}

#[test]
fn a_missing_data_file_is_an_error_not_a_silent_no_op() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let err = Durable::open(dir.path()).expect_err("no data file");
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
}
