//! The file handling around recovery: which snapshot and logs are read,
//! gaps, and the data directory written (the formats and the replay rules
//! are tested in the core, beside their decoders).

use super::*;
use zabkeeper_core::storage::Storage;
use zabkeeper_store::SledStorage;

fn adler(bytes: &[u8]) -> u64 {
    zk::adler32(bytes)
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A ZooKeeper snapshot: one open session (timeout 4000), the root and /zookeeper.
fn snapshot_file() -> Vec<u8> {
    let mut out = b"ZKSN".to_vec();
    out.extend_from_slice(&2i32.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&0x0100_0000_0000_0001i64.to_be_bytes());
    out.extend_from_slice(&4000i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes()); // no ACL lists: -1 is the open ACL
    for (path, cversion) in [("", 1), ("/zookeeper", 0)] {
        string(&mut out, path);
        out.extend_from_slice(&0i32.to_be_bytes()); // empty data
        out.extend_from_slice(&(-1i64).to_be_bytes());
        for v in [0i64; 4] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        for v in [0i32, cversion, 0] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&[0; 16]); // ephemeralOwner, pzxid
    }
    string(&mut out, "/");
    let sum = adler(&out);
    out.extend_from_slice(&sum.to_be_bytes());
    string(&mut out, "/");
    out
}

/// A log of persistent creates of `/n<zxid>` at these zxids, each with the parent's cversion given.
fn log_file(creates: &[(i64, i32)]) -> Vec<u8> {
    let mut out = b"ZKLG".to_vec();
    out.extend_from_slice(&2i32.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes());
    for (zxid, cversion) in creates {
        let mut e = Vec::new();
        e.extend_from_slice(&7i64.to_be_bytes());
        e.extend_from_slice(&1i32.to_be_bytes());
        e.extend_from_slice(&zxid.to_be_bytes());
        e.extend_from_slice(&1000i64.to_be_bytes());
        e.extend_from_slice(&15i32.to_be_bytes()); // create2
        string(&mut e, &format!("/n{zxid}"));
        string(&mut e, "d");
        e.extend_from_slice(&1i32.to_be_bytes());
        e.extend_from_slice(&31i32.to_be_bytes());
        string(&mut e, "world");
        string(&mut e, "anyone");
        e.push(0);
        e.extend_from_slice(&cversion.to_be_bytes());
        out.extend_from_slice(&adler(&e).to_be_bytes());
        out.extend_from_slice(&(e.len() as i32).to_be_bytes());
        out.extend_from_slice(&e);
        out.push(0x42);
    }
    out.extend_from_slice(&[0; 64]); // preallocated
    out
}

#[test]
fn a_snapshot_and_the_logs_after_it_make_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("zk/version-2");
    std::fs::create_dir_all(&v2).unwrap();
    std::fs::write(v2.join("snapshot.100000002"), snapshot_file()).unwrap();
    // An incomplete newer snapshot is passed over, as ZooKeeper passes it.
    std::fs::write(v2.join("snapshot.100000004"), &snapshot_file()[..40]).unwrap();
    std::fs::write(v2.join("log.100000001"), log_file(&[(0x1_0000_0001, 1), (0x1_0000_0002, 2), (0x1_0000_0003, 3)]))
        .unwrap();
    std::fs::write(v2.join("log.100000004"), log_file(&[(0x1_0000_0004, 4), (0x2_0000_0001, 5)])).unwrap();
    std::fs::write(v2.join("currentEpoch"), "3\n").unwrap();
    let data = dir.path().join("member");
    let report = import(&dir.path().join("zk"), None, &data).expect("imports");
    assert_eq!(report.snapshot_zxid, 0x1_0000_0002);
    assert_eq!(report.incomplete_snapshots.len(), 1);
    assert_eq!(report.logs.len(), 2);
    assert_eq!((report.stats.replayed, report.stats.skipped), (3, 2));
    assert_eq!((report.last_zxid, report.epoch, report.sessions), (Zxid(0x2_0000_0001), 3, 1));
    let recovered = SledStorage::open(&data).unwrap().recover().unwrap();
    assert_eq!((recovered.accepted_epoch, recovered.current_epoch), (3, 3));
    let state = recovered.snapshot.expect("a snapshot");
    // Replay starts after the snapshot's zxid: /n100000001 and /n100000002 are not created.
    let names: Vec<&str> = state.children("/").collect();
    assert_eq!(names, ["/n4294967299", "/n4294967300", "/n8589934593", "/zookeeper"]);
    assert_eq!(state.node("/").map(|n| n.persisted().cversion), Some(5));
    // The data directory is written once: a second import refuses it.
    assert!(matches!(import(&dir.path().join("zk"), None, &data), Err(ImportError::Offline(_))));
}

#[test]
fn missing_transactions_and_missing_snapshots_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let zk_dir = dir.path().join("zk");
    std::fs::create_dir_all(&zk_dir).unwrap();
    let err = import(&zk_dir, None, &dir.path().join("m0")).unwrap_err();
    assert!(matches!(err, ImportError::NoSnapshot { .. }), "{err}");
    std::fs::write(zk_dir.join("snapshot.2"), snapshot_file()).unwrap();
    std::fs::write(zk_dir.join("log.3"), log_file(&[(3, 2), (5, 3)])).unwrap();
    let err = import(&zk_dir, None, &dir.path().join("m1")).unwrap_err();
    assert!(matches!(err, ImportError::Gap { previous: 3, found: 5, .. }), "{err}");
    assert!(!dir.path().join("m1").exists(), "nothing written on failure");
    std::fs::write(zk_dir.join("snapshot.9.gz"), b"").unwrap();
    let err = import(&zk_dir, None, &dir.path().join("m2")).unwrap_err();
    assert!(matches!(err, ImportError::Compressed { .. }), "{err}");
}

#[test]
fn a_damaged_log_names_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("snapshot.0"), snapshot_file()).unwrap();
    let mut log = log_file(&[(1, 2), (2, 3)]);
    log[16 + 40] ^= 1; // inside the first entry
    std::fs::write(dir.path().join("log.1"), log).unwrap();
    let err = import(dir.path(), None, &dir.path().join("m")).unwrap_err();
    assert!(err.to_string().contains("log.1: offset 16: Adler32 checksum mismatch"), "{err}");
}
