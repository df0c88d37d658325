//! The preparation's tests: pipelined writes against outstanding changes,
//! ZooKeeper's order of checks, and the stateless validation's reasons.

use super::*;
use crate::tree::stat::CreateMode;
use crate::tree::DataTree;
use crate::txn::Txn;
use bytes::Bytes;

const S: SessionId = SessionId(0x0100_0000_0000_0001);

struct Leader {
    tree: DataTree,
    pending: PendingChanges,
    counter: u32,
    identities: Vec<Id>,
}

impl Leader {
    fn new() -> Leader {
        Leader { tree: DataTree::new(), pending: PendingChanges::new(), counter: 0, identities: vec![] }
    }

    fn next_ctx(&mut self) -> Zxid {
        self.counter += 1;
        Zxid::new(1, self.counter)
    }

    /// Prepares without committing (pipelined proposals).
    fn propose(&mut self, op: Op) -> (Zxid, TxnBody) {
        let zxid = self.next_ctx();
        let ctx = Context { session: S, identities: &self.identities, zxid, time_ms: 1000, limits: Limits::default() };
        let body = match self.pending.prepare(self.tree.state(), &ctx, &op) {
            Ok(body) => body,
            Err(e) => TxnBody::Error(e.code),
        };
        (zxid, body)
    }

    fn commit(&mut self, zxid: Zxid, body: TxnBody) {
        self.tree.apply(zxid, &Txn { session: S, cxid: 0, time_ms: 1000, body });
        self.pending.retire(zxid);
    }

    fn run(&mut self, op: Op) -> TxnBody {
        let (zxid, body) = self.propose(op);
        self.commit(zxid, body.clone());
        body
    }
}

fn create(path: &str, mode: CreateMode) -> Op {
    Op::Create { path: path.into(), data: Bytes::new().into(), acl: Acl::open_unsafe(), mode, ttl_ms: -1 }
}

#[test]
fn pipelined_creates_of_one_path_conflict() {
    let mut l = Leader::new();
    let (z1, b1) = l.propose(create("/a", CreateMode::Persistent));
    let (_, b2) = l.propose(create("/a", CreateMode::Persistent));
    assert!(matches!(b1, TxnBody::Create { .. }));
    assert_eq!(b2, TxnBody::Error(ErrorCode::NodeExists));
    l.commit(z1, b1);
    assert!(l.pending.is_empty());
}

#[test]
fn pipelined_sequential_creates_get_distinct_names() {
    let mut l = Leader::new();
    l.run(create("/q", CreateMode::Persistent));
    let (_, a) = l.propose(create("/q/n-", CreateMode::PersistentSequential));
    let (_, b) = l.propose(create("/q/n-", CreateMode::PersistentSequential));
    let name = |b: &TxnBody| match b {
        TxnBody::Create { path, .. } => path.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(name(&a), "/q/n-0000000000");
    assert_eq!(name(&b), "/q/n-0000000001");
}

#[test]
fn create_checks_in_zookeeper_order() {
    let mut l = Leader::new();
    // Missing parent.
    assert_eq!(l.run(create("/x/y", CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoNode));
    // Invalid ACL wins over a missing parent (fixupACL runs first).
    let op = Op::Create {
        path: "/x/y".into(),
        data: Bytes::new().into(),
        acl: vec![],
        mode: CreateMode::Persistent,
        ttl_ms: -1,
    };
    assert_eq!(l.run(op), TxnBody::Error(ErrorCode::InvalidAcl));
    // Children of ephemerals.
    l.run(create("/e", CreateMode::Ephemeral));
    assert_eq!(l.run(create("/e/c", CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoChildrenForEphemerals));
    // TTL rules.
    let ttl = |mode, ttl_ms| Op::Create {
        path: "/t".into(),
        data: Bytes::new().into(),
        acl: Acl::open_unsafe(),
        mode,
        ttl_ms,
    };
    assert_eq!(l.run(ttl(CreateMode::PersistentWithTtl, 0)), TxnBody::Error(ErrorCode::BadArguments));
    assert_eq!(l.run(ttl(CreateMode::Persistent, 100)), TxnBody::Error(ErrorCode::BadArguments));
    assert!(matches!(l.run(ttl(CreateMode::PersistentWithTtl, 100)), TxnBody::Create { .. }));
}

#[test]
fn malformed_paths_answer_as_zookeeper() {
    let mut l = Leader::new();
    l.run(create("/a", CreateMode::Persistent));
    // The parent is looked up before the full path is checked: "/a//x" has
    // the parent "/a/", which does not exist.
    for path in ["/a//x", "/a/./x", "/a/../x", "/nope/./x"] {
        assert_eq!(l.run(create(path, CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoNode), "{path}");
    }
    // With an existing parent, the full rules apply.
    for path in ["/a/", "/a/.", "/a/\u{1}x"] {
        assert_eq!(l.run(create(path, CreateMode::Persistent)), TxnBody::Error(ErrorCode::BadArguments), "{path}");
    }
    // No '/' at all, or a NUL: refused before any lookup, also by the replica.
    for path in ["a", "", "/a/x\0"] {
        assert_eq!(l.run(create(path, CreateMode::Persistent)), TxnBody::Error(ErrorCode::BadArguments), "{path}");
        let err = validate(&create(path, CreateMode::Persistent), &[], Limits::default()).unwrap_err();
        assert_eq!(err.code, ErrorCode::BadArguments);
    }
    assert!(validate(&create("/a//x", CreateMode::Persistent), &[], Limits::default()).is_ok());
    // A delete names no node with a malformed path: NoNode, unless ZooKeeper's
    // own checks (no '/', NUL, special nodes) refuse it first.
    assert_eq!(l.run(Op::Delete { path: "/a/".into(), version: -1 }), TxnBody::Error(ErrorCode::NoNode));
    assert_eq!(l.run(Op::Delete { path: "/a//x".into(), version: -1 }), TxnBody::Error(ErrorCode::NoNode));
    assert_eq!(l.run(Op::Delete { path: "a".into(), version: -1 }), TxnBody::Error(ErrorCode::BadArguments));
    assert!(validate(&Op::Delete { path: "/a/".into(), version: -1 }, &[], Limits::default()).is_ok());
}

#[test]
fn delete_checks_version_children_and_special_nodes() {
    let mut l = Leader::new();
    l.run(create("/a", CreateMode::Persistent));
    l.run(create("/a/b", CreateMode::Persistent));
    assert_eq!(l.run(Op::Delete { path: "/a".into(), version: -1 }), TxnBody::Error(ErrorCode::NotEmpty));
    assert_eq!(l.run(Op::Delete { path: "/a/b".into(), version: 3 }), TxnBody::Error(ErrorCode::BadVersion));
    assert_eq!(l.run(Op::Delete { path: "/zookeeper".into(), version: -1 }), TxnBody::Error(ErrorCode::BadArguments));
    assert_eq!(l.run(Op::Delete { path: "/nope".into(), version: -1 }), TxnBody::Error(ErrorCode::NoNode));
    assert!(matches!(l.run(Op::Delete { path: "/a/b".into(), version: 0 }), TxnBody::Delete { .. }));
}

#[test]
fn a_multi_over_the_op_limit_is_refused_before_any_lookup() {
    let limits = Limits { max_multi_ops: 3, ..Limits::default() };
    let check = |path: &str| Op::Check { path: path.into(), version: -1 };
    let ops: Vec<Op> = (0..4).map(|i| check(&format!("/n{i}"))).collect();
    let err = validate(&Op::Multi(ops.clone()), &[], limits).unwrap_err();
    assert_eq!(err.code, ErrorCode::BadArguments);
    assert!(err.reason.contains("max_multi_ops"), "{}", err.reason);
    assert!(validate(&Op::MultiRead(ops[..3].to_vec()), &[], limits).is_ok());
    assert!(validate(&Op::MultiRead(ops), &[], limits).is_err());
}

#[test]
fn failed_multi_rolls_back_its_pending_changes() {
    let mut l = Leader::new();
    let multi = Op::Multi(vec![
        create("/m", CreateMode::Persistent),
        Op::SetData { path: "/nope".into(), data: Bytes::new().into(), version: -1 },
        create("/m2", CreateMode::Persistent),
    ]);
    let (_, body) = l.propose(multi);
    assert_eq!(body, TxnBody::MultiError(vec![ErrorCode::Ok, ErrorCode::NoNode, ErrorCode::RuntimeInconsistency]));
    // /m was not really created: a following create must succeed.
    let (_, next) = l.propose(create("/m", CreateMode::Persistent));
    assert!(matches!(next, TxnBody::Create { .. }), "{next:?}");
}

#[test]
fn multi_sees_its_own_earlier_ops() {
    let mut l = Leader::new();
    let multi = Op::Multi(vec![
        create("/m", CreateMode::Persistent),
        create("/m/child", CreateMode::Persistent),
        Op::SetData { path: "/m".into(), data: Bytes::from_static(b"x").into(), version: 0 },
        Op::Check { path: "/m".into(), version: 1 },
    ]);
    assert!(matches!(l.run(multi), TxnBody::Multi(ops) if ops.len() == 4));
    assert_eq!(l.tree.state().node("/m").unwrap().data(), b"x");
}

#[test]
fn close_session_collects_committed_and_pending_ephemerals() {
    let mut l = Leader::new();
    l.run(create("/e1", CreateMode::Ephemeral));
    let _ = l.propose(create("/e2", CreateMode::Ephemeral));
    let _ = l.propose(Op::Delete { path: "/e1".into(), version: -1 });
    let (_, body) = l.propose(Op::CloseSession);
    assert_eq!(body, TxnBody::CloseSession { paths: vec!["/e2".into()] });
}

#[test]
fn version_wraps_past_minus_one() {
    assert_eq!(new_version(-2, -1, "/a"), Ok(0));
    assert_eq!(new_version(i32::MAX, -1, "/a"), Ok(i32::MIN));
    assert_eq!(new_version(3, 3, "/a"), Ok(4));
}

#[test]
fn acl_is_enforced() {
    let mut l = Leader::new();
    let ro = Op::Create {
        path: "/ro".into(),
        data: Bytes::new().into(),
        acl: Acl::read_unsafe(),
        mode: CreateMode::Persistent,
        ttl_ms: -1,
    };
    l.run(ro);
    assert_eq!(l.run(create("/ro/c", CreateMode::Persistent)), TxnBody::Error(ErrorCode::NoAuth));
    assert_eq!(
        l.run(Op::SetData { path: "/ro".into(), data: Bytes::new().into(), version: -1 }),
        TxnBody::Error(ErrorCode::NoAuth)
    );
    // Digest: only the authenticated user passes.
    let alice = Id::new("digest", acl::digest_id("alice:pw").unwrap());
    l.identities = vec![alice];
    let op = Op::Create {
        path: "/mine".into(),
        data: Bytes::new().into(),
        acl: Acl::creator_all(),
        mode: CreateMode::Persistent,
        ttl_ms: -1,
    };
    assert!(matches!(l.run(op), TxnBody::Create { .. }));
    l.identities = vec![];
    assert_eq!(
        l.run(Op::SetData { path: "/mine".into(), data: Bytes::new().into(), version: -1 }),
        TxnBody::Error(ErrorCode::NoAuth)
    );
}

#[test]
fn stateless_validation_gives_reasons() {
    let limits = Limits { max_data_bytes: 4, ..Limits::default() };
    let op = Op::SetData { path: "/a".into(), data: Bytes::from_static(b"12345").into(), version: -1 };
    let err = validate(&op, &[], limits).unwrap_err();
    assert_eq!(err.code, ErrorCode::BadArguments);
    assert!(err.reason.contains("5 bytes"), "{err}");
    let err = validate(&create("a", CreateMode::Persistent), &[], limits).unwrap_err();
    assert!(err.reason.contains("must start with /"), "{err}");
    // Left to the leader, which answers NoNode or BadArguments depending on
    // whether the parent exists, as ZooKeeper does.
    assert!(validate(&create("/a/", CreateMode::Persistent), &[], limits).is_ok());
    assert!(validate(&create("/a/", CreateMode::PersistentSequential), &[], limits).is_ok());
}

#[test]
fn reaper_respects_pending_children() {
    let mut l = Leader::new();
    l.run(create("/c", CreateMode::Container));
    l.run(create("/c/x", CreateMode::Persistent));
    l.run(Op::Delete { path: "/c/x".into(), version: -1 });
    let zxid = l.next_ctx();
    // A pending child create makes the container not removable.
    let (_, _) = l.propose(create("/c/y", CreateMode::Persistent));
    assert_eq!(l.pending.prepare_reap(l.tree.state(), "/c", zxid, 0), None);
}
