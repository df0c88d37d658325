//! The storage conformance suite (`zabkeeper_core::storage::conformance`)
//! run against the sled store, plus the checks only it can express: damaged
//! bytes on disk.

use super::{self as sled_store, SledStorage};
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::storage::conformance::*;
use zabkeeper_core::storage::{Storage, StorageError};

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

zabkeeper_core::storage_conformance_suite!(sled, SledHarness::new());

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
    fn write_one_database_layout(h: &SledHarness, db: &::sled::Db, metas: &[zabkeeper_core::storage::SnapshotMeta]) {
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
    fn assert_upgraded(h: &mut SledHarness, history: &History, before: &[zabkeeper_core::storage::SnapshotMeta]) {
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
