//! The snapshot directory's tests: databases open only while used, purges
//! that wait for their last reader, and what a crash leaves at each step.

use super::*;
use zabkeeper_core::storage::Storage;

fn chunks(n: usize) -> Vec<Bytes> {
    (0..n).map(|i| Bytes::from(vec![i as u8; 100])).collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_snapshots_database_is_open_only_while_used() {
    // sled keeps what it wrote in memory until closed: a member that
    // left it open held every snapshot it had saved.
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledStorage::open(dir.path().join("store")).expect("open");
    store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
    store.save_snapshot(Zxid(9), &chunks(3)).expect("save");
    assert!(!store.snaps.is_open(Zxid(5)) && !store.snaps.is_open(Zxid(9)), "a save closes it");
    assert_eq!(store.snapshot_chunk(Zxid(5), 0).expect("read").as_deref(), Some(&[0u8; 100][..]));
    assert!(store.snaps.is_open(Zxid(5)), "a reader going chunk by chunk keeps it open");
    {
        let held = store.snaps.lease(Zxid(5)).expect("a second use");
        assert_eq!(store.snapshot_chunk(Zxid(5), 2).expect("read").as_deref(), Some(&[2u8; 100][..]));
        assert!(store.snaps.is_open(Zxid(5)), "not closed under another use");
        assert!(held.chunk(1).expect("read").is_some());
    }
    assert!(!store.snaps.is_open(Zxid(5)), "the last use closes it");
    assert_eq!(store.snapshot_chunk(Zxid(5), 7).expect("read"), None);
    assert!(!store.snaps.is_open(Zxid(5)), "reading past the end opens nothing");
    assert_eq!(store.purge(1).expect("purge").snapshots_removed, 1);
    assert_eq!(store.snapshots().expect("list").iter().map(|s| s.zxid).collect::<Vec<_>>(), [Zxid(9)]);
    assert_eq!(names(&dir.path().join("store").join(SNAPSHOT_DIR)), [snapshot_dir_name(Zxid(9))]);
}

#[test]
fn a_purge_removes_the_snapshots_files_at_once_or_when_its_last_reader_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledStorage::open(dir.path().join("store")).expect("open");
    let snapshots = dir.path().join("store").join(SNAPSHOT_DIR);
    for z in [3, 5, 7] {
        store.save_snapshot(Zxid(z), &chunks(4)).expect("save");
    }
    // A follower's SNAP is half way through the oldest when a purge comes.
    assert!(store.snapshot_chunk(Zxid(3), 0).expect("read").is_some());
    assert_eq!(store.purge(1).expect("purge").snapshots_removed, 2);
    assert_eq!(store.snapshots().expect("list").len(), 1, "both purged ones stop counting at once");
    assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(3)), snapshot_dir_name(Zxid(7))]);
    assert!(store.snapshot_chunk(Zxid(3), 1).expect("read on").is_some(), "its reader goes on");
    assert!(store.snapshot_chunk(Zxid(3), 2).expect("read on").is_some());
    assert!(store.snapshot_chunk(Zxid(3), 3).expect("the last chunk").is_some());
    assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(7))], "gone when its last use ended");
}

#[test]
fn what_a_crash_left_of_a_write_or_a_removal_goes_at_open_and_a_complete_snapshot_stays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store");
    let store = SledStorage::open(&path).expect("open");
    store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
    store.save_snapshot(Zxid(8), &chunks(3)).expect("save");
    drop(store);
    let snapshots = path.join(SNAPSHOT_DIR);
    // A write cut short before its rename, and a removal after its rename.
    let partial = snapshots.join(format!("{}{NEW_SUFFIX}", snapshot_dir_name(Zxid(9))));
    std::fs::create_dir(&partial).expect("mkdir");
    std::fs::write(partial.join("db"), b"half").expect("write");
    std::fs::rename(
        snapshots.join(snapshot_dir_name(Zxid(5))),
        snapshots.join(format!("{}{GONE_SUFFIX}", snapshot_dir_name(Zxid(5)))),
    )
    .expect("rename");
    let store = SledStorage::open(&path).expect("reopen");
    assert_eq!(store.snapshots().expect("list").iter().map(|s| s.zxid).collect::<Vec<_>>(), [Zxid(8)]);
    assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(8))]);
}

#[test]
fn a_replacement_a_crash_cut_short_puts_the_old_snapshot_back_or_finishes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store");
    let store = SledStorage::open(&path).expect("open");
    store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
    store.save_snapshot(Zxid(6), &chunks(2)).expect("save");
    drop(store);
    let snapshots = path.join(SNAPSHOT_DIR);
    let name = |z: u64, suffix: &str| snapshots.join(format!("{}{suffix}", snapshot_dir_name(Zxid(z))));
    // At 5: moved aside, its successor not yet renamed (a `.new` left).
    std::fs::rename(name(5, ""), name(5, OLD_SUFFIX)).expect("rename");
    std::fs::create_dir(name(5, NEW_SUFFIX)).expect("a cut-short write");
    // At 6: the successor took the name, the old one not yet removed.
    std::fs::create_dir(name(6, OLD_SUFFIX)).expect("the replaced one");
    let store = SledStorage::open(&path).expect("reopen");
    let metas = store.snapshots().expect("list");
    assert_eq!(metas.iter().map(|m| (m.zxid, m.chunks)).collect::<Vec<_>>(), [(Zxid(5), 3), (Zxid(6), 2)]);
    assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(5)), snapshot_dir_name(Zxid(6))]);
    assert_eq!(store.snapshot_chunk(Zxid(5), 2).expect("read").as_deref(), Some(&[2u8; 100][..]));
}

#[test]
fn each_chunk_is_written_once_in_a_tree_of_its_own() {
    // In one tree, sled rewrote whole leaves of chunks as new blobs; a
    // chunk alone in its tree is one blob file of its own size.
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledStorage::open(dir.path().join("store")).expect("open");
    let big: Vec<Bytes> = (0..6u8).map(|i| Bytes::from(vec![i; 1 << 20])).collect();
    store.save_snapshot(Zxid(4), &big).expect("save");
    let blobs = dir.path().join("store").join(SNAPSHOT_DIR).join(snapshot_dir_name(Zxid(4))).join("blobs");
    let sizes: Vec<u64> = std::fs::read_dir(&blobs)
        .expect("blob files")
        .map(|e| e.expect("entry").metadata().expect("size").len())
        .collect();
    assert_eq!(sizes.len(), 6, "one blob file per chunk: {sizes:?}");
    assert!(sizes.iter().all(|s| (1 << 20..(1 << 20) + 64).contains(s)), "each holds one chunk: {sizes:?}");
    for i in 0..6u8 {
        assert_eq!(store.snapshot_chunk(Zxid(4), u32::from(i)).expect("read"), Some(Bytes::from(vec![i; 1 << 20])));
    }
}

#[derive(Serialize)]
struct FirstFormat {
    chunks: u32,
    bytes: u64,
}

#[test]
fn markers_of_both_formats_decode() {
    let old = codec::encode_value(&FirstFormat { chunks: 3, bytes: 700 });
    let read = Marker::decode(Zxid(9), &old).expect("first format");
    assert_eq!((read.chunks, read.bytes, read.nodes, read.created_ms), (3, 700, 0, 0));
    let meta = SnapshotMeta { zxid: Zxid(9), bytes: 700, chunks: 3, nodes: 42, created_ms: 1_700_000_000_000 };
    let read = Marker::decode(Zxid(9), &codec::encode_value(&Marker::new(&meta))).expect("new format");
    assert_eq!((read.chunks, read.bytes, read.nodes, read.created_ms), (3, 700, 42, 1_700_000_000_000));
    assert!(Marker::decode(Zxid(9), b"garbage").is_err());
    assert!(Marker::decode(Zxid(9), b"").is_err(), "a missing marker reads as a damaged one");
}

#[test]
fn names_in_the_snapshot_directory_are_told_apart() {
    assert_eq!(classify("000000010000002a"), Entry::Done(Zxid(0x1_0000_002a)));
    assert_eq!(classify("000000010000002a.new"), Entry::New);
    assert_eq!(classify("000000010000002a.gone"), Entry::Gone);
    assert_eq!(classify("000000010000002a.old"), Entry::Old(Zxid(0x1_0000_002a)));
    assert_eq!(classify("snap.00000000000001F0"), Entry::OneDatabase);
    assert_eq!(classify("conf"), Entry::OneDatabase);
    assert_eq!(classify("notes.txt"), Entry::Foreign);
    assert_eq!(classify("10000002a"), Entry::Foreign);
}
