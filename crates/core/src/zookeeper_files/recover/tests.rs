//! Recovery: a snapshot plus a log replayed with ZooKeeper's rules.

use super::*;
use crate::zookeeper_files::snapshot::{SnapNode, Snapshot};
use crate::zookeeper_files::txnlog::tests::create;
use crate::zookeeper_files::txnlog::LogEntry;

const S: i64 = 0x0100_0000_0000_0007;

fn node(path: &str, stat: StatPersisted) -> SnapNode {
    SnapNode { path: path.into(), data: Some(Bytes::from_static(b"x")), acl: -1, stat, offset: 0 }
}

/// A snapshot at zxid 10: the root, /zookeeper, /zookeeper/quota, /a with
/// one child (cversion 1), and an ephemeral of session S.
fn base() -> Snapshot {
    let st = |z| StatPersisted::created(z, 100, 0);
    Snapshot {
        dbid: 0,
        sessions: vec![(S, 30_000)],
        acls: BTreeMap::new(),
        nodes: vec![
            node("", StatPersisted { cversion: 2, pzxid: 5, ..st(0) }),
            node("/zookeeper", StatPersisted { cversion: 1, ..st(0) }),
            node("/zookeeper/quota", st(0)),
            node("/a", StatPersisted { cversion: 1, pzxid: 6, ..st(5) }),
            node("/a/b", st(6)),
            node("/e", StatPersisted::created(10, 100, S)),
        ],
        digest: None,
        last_processed_zxid: None,
    }
}

fn entry(zxid: i64, session: i64, txn: Txn) -> LogEntry {
    LogEntry { offset: 16, header: TxnHeader { client_id: session, cxid: 1, zxid, time: 1000 + zxid, op: 0 }, txn }
}

fn replay(entries: &[LogEntry]) -> (TreeState, RecoveryStats) {
    let mut r = Recovery::from_snapshot("snapshot.a", &base(), 10).expect("loads");
    for e in entries {
        r.apply("log.1", e).expect("applies");
    }
    r.finish().expect("finishes")
}

#[test]
fn a_snapshot_alone_becomes_our_tree_with_every_field() {
    let (state, stats) = replay(&[]);
    assert_eq!(stats.snapshot_nodes, 6);
    assert_eq!(state.last_zxid(), Zxid(10));
    let a = state.node("/a").expect("/a");
    assert_eq!((a.persisted().cversion, a.persisted().pzxid, a.num_children()), (1, 6, 1));
    assert_eq!(a.data(), b"x");
    assert_eq!(state.ephemerals_of(SessionId(S)), vec!["/e".to_string()]);
    let session = state.session(SessionId(S)).expect("session");
    assert_eq!((session.timeout_ms, session.password.as_ref()), (30_000, &session_password(S)[..]));
    // A 3.4 snapshot has no config node: it is added as 3.5+ has it.
    assert_eq!(state.node("/zookeeper/config").map(|n| n.persisted().aversion), Some(-1));
}

#[test]
fn replay_applies_creates_sets_deletes_multis_and_sessions() {
    let (state, stats) = replay(&[
        entry(9, S, create("/old", 1, Owner::Persistent)), // before the snapshot: skipped
        entry(11, S, create("/a/s0000000001", 2, Owner::Persistent)),
        entry(12, S, Txn::SetData { path: "/a".into(), data: None, version: 3 }),
        entry(13, S, Txn::SetAcl { path: "/a".into(), acl: Acl::read_unsafe(), version: 2 }),
        entry(14, S, Txn::Delete { path: "/a/b".into() }),
        entry(15, 99, Txn::CreateSession { timeout: 4000 }),
        entry(16, 99, create("/a/eph", 3, Owner::Session)),
        entry(17, S, Txn::Multi(vec![create("/m", 3, Owner::Container), Txn::Error { err: -110 }])),
        entry(18, S, Txn::Multi(vec![create("/t", 3, Owner::Ttl(5000)), Txn::Check { path: "/t".into() }])),
        entry(19, S, Txn::CloseSession { paths: Some(vec!["/e".into()]) }),
    ]);
    assert_eq!((stats.replayed, stats.skipped), (9, 1));
    assert!(state.node("/old").is_none() && state.node("/m").is_none() && state.node("/e").is_none());
    let a = state.node("/a").expect("/a").persisted();
    assert_eq!((a.version, a.mzxid, a.mtime, a.aversion, a.cversion, a.pzxid), (3, 12, 1012, 2, 3, 16));
    assert!(state.node("/a").expect("/a").data_is_null());
    assert_eq!(state.node("/t").map(|n| n.persisted().ephemeral_owner), Some(EphemeralType::ttl_owner(5000)));
    assert_eq!(state.node("/a/eph").map(|n| n.persisted().ephemeral_owner), Some(99));
    assert_eq!(state.session_count(), 1, "S closed, 99 open");
    assert_eq!(state.last_zxid(), Zxid(19));
    let root = state.node("/").expect("root").persisted();
    assert_eq!((root.cversion, root.pzxid), (3, 19));
}

#[test]
fn fuzzy_snapshot_rules_are_zookeepers() {
    // The snapshot already holds /a/b (created at 6) and the log replays
    // its create at 11 with a higher parent cversion: the parent's counters
    // move, the node stays, its ACL is replaced.
    let mut with_acl = create("/a/b", 4, Owner::Persistent);
    if let Txn::Create { op: o, acl, .. } = &mut with_acl {
        *o = op::CREATE;
        *acl = Acl::read_unsafe();
    }
    let (state, _) = replay(&[entry(11, S, with_acl), entry(12, S, Txn::Delete { path: "/a/zz".into() })]);
    let a = state.node("/a").expect("/a").persisted();
    assert_eq!((a.cversion, a.pzxid), (4, 12), "a delete of a missing child still moves pzxid");
    let b = state.node("/a/b").expect("/a/b");
    assert_eq!((b.persisted().czxid, b.acl().as_ref()), (6, Acl::read_unsafe().as_slice()));
}

#[test]
fn ephemerals_of_vanished_sessions_go_at_the_last_zxid() {
    let mut snapshot = base();
    snapshot.sessions.clear();
    let mut r = Recovery::from_snapshot("s", &snapshot, 10).expect("loads");
    r.apply("l", &entry(11, S, create("/x", 3, Owner::Persistent))).expect("applies");
    let (state, stats) = r.finish().expect("finishes");
    assert!(state.node("/e").is_none());
    assert_eq!(stats.dead_ephemerals, 1);
    assert_eq!(state.node("/").map(|n| n.persisted().pzxid), Some(11));
}

#[test]
fn what_we_cannot_hold_exactly_is_refused() {
    let mut snapshot = base();
    snapshot.nodes.push(node("/zookeeper/quota/a", StatPersisted::created(3, 1, 0)));
    let err = Recovery::from_snapshot("s", &snapshot, 10).and_then(Recovery::finish).unwrap_err();
    assert!(matches!(&err, ZkFileError::Unsupported { reason } if reason.contains("/zookeeper/quota/a")), "{err}");
    let mut orphan = base();
    orphan.nodes.push(node("/nope/x", StatPersisted::default()));
    assert!(matches!(Recovery::from_snapshot("s", &orphan, 10), Err(ZkFileError::Invalid { .. })));
    let mut unknown_acl = base();
    unknown_acl.nodes[3].acl = 42;
    assert!(matches!(Recovery::from_snapshot("s", &unknown_acl, 10), Err(ZkFileError::Invalid { .. })));
    let mut r = Recovery::from_snapshot("s", &base(), 10).expect("loads");
    assert!(r.apply("l", &entry(11, S, create("/t", 3, Owner::Ttl(-1)))).is_err());
}
