//! The data tree's rules: Stat bookkeeping, create modes, ephemerals,
//! containers and TTL nodes, multi, sessions and the watches each change fires.

use super::*;
use crate::acl::perms;
use crate::data::Data;
use crate::ids::SessionId;
use crate::tree::stat::{EphemeralType, CONTAINER_EPHEMERAL_OWNER};
use crate::tree::watch::{AddWatchMode, EventType};

const S: SessionId = SessionId(0x0100_0000_0000_0001);
const OTHER: SessionId = SessionId(0x0100_0000_0000_0002);

struct T {
    tree: DataTree,
    counter: u32,
}

impl T {
    fn new() -> T {
        T { tree: DataTree::new(), counter: 0 }
    }

    fn apply(&mut self, session: SessionId, body: TxnBody) -> Applied {
        self.counter += 1;
        let zxid = Zxid::new(1, self.counter);
        self.tree.apply(zxid, &Txn { session, cxid: self.counter as i32, time_ms: 1000 + self.counter as i64, body })
    }

    fn create(&mut self, path: &str, owner: i64, parent_cversion: i32) -> Applied {
        self.apply(
            S,
            TxnBody::Create {
                path: path.into(),
                data: Bytes::from_static(b"data").into(),
                acl: Acl::open_unsafe(),
                ephemeral_owner: owner,
                parent_cversion,
            },
        )
    }

    fn stat(&self, path: &str) -> Stat {
        self.tree.state().node(path).expect("node exists").stat()
    }
}

fn events(applied: &Applied) -> Vec<(SessionId, EventType, String)> {
    applied.events.iter().map(|(s, e)| (*s, e.event_type, e.path.clone())).collect()
}

#[test]
fn fresh_tree_has_zookeepers_own_nodes() {
    let t = T::new();
    let (children, _) = t.tree.state().node("/").map(|n| (n.num_children(), ())).unwrap();
    assert_eq!(children, 1, "/zookeeper only");
    for path in ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"] {
        assert!(t.tree.state().node(path).is_some(), "{path}");
    }
    assert_eq!(t.tree.state().node("/zookeeper/config").unwrap().acl().as_ref(), Acl::read_unsafe().as_slice());
}

#[test]
fn create_sets_every_stat_field_and_updates_the_parent() {
    let mut t = T::new();
    let applied = t.create("/a", 0, 1);
    let TxnResult::Created { path, stat } = applied.result else { panic!("{:?}", applied.result) };
    assert_eq!(path, "/a");
    let zxid = Zxid::new(1, 1).as_i64();
    assert_eq!(
        stat,
        Stat {
            czxid: zxid,
            mzxid: zxid,
            ctime: 1001,
            mtime: 1001,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 4,
            num_children: 0,
            pzxid: zxid,
        }
    );
    // Clients see cversion as 2 x creates - children (ZooKeeper's DataNode.copyStat):
    // the root's /zookeeper was never "created" by a transaction.
    let root = t.stat("/");
    assert_eq!((root.cversion, root.pzxid, root.num_children), (0, zxid, 2));
}

#[test]
fn set_data_bumps_version_mzxid_mtime_only() {
    let mut t = T::new();
    t.create("/a", 0, 1);
    let before = t.stat("/a");
    let applied =
        t.apply(S, TxnBody::SetData { path: "/a".into(), data: Bytes::from_static(b"xy").into(), version: 1 });
    let TxnResult::DataSet(after) = applied.result else { panic!() };
    assert_eq!(after.version, 1);
    assert_eq!(after.mzxid, Zxid::new(1, 2).as_i64());
    assert_eq!(after.mtime, 1002);
    assert_eq!(after.data_length, 2);
    assert_eq!(
        (after.czxid, after.ctime, after.cversion, after.pzxid),
        (before.czxid, before.ctime, before.cversion, before.pzxid)
    );
}

#[test]
fn delete_moves_pzxid_and_the_client_visible_cversion() {
    // DataTree.deleteNode changes pzxid only; the stored cversion counts creates
    // (it names sequential nodes), and clients see 2 x creates - children.
    let mut t = T::new();
    t.create("/p", 0, 1);
    t.create("/p/c", 0, 1);
    let cversion = t.stat("/p").cversion;
    t.apply(S, TxnBody::Delete { path: "/p/c".into() });
    let p = t.stat("/p");
    assert_eq!(p.cversion, cversion + 1);
    assert_eq!(t.tree.state().node("/p").unwrap().persisted().cversion, 1, "the stored counter is unchanged");
    assert_eq!(p.pzxid, Zxid::new(1, 3).as_i64());
    assert_eq!(p.num_children, 0);
}

#[test]
fn set_acl_bumps_aversion_and_interns_the_list() {
    let mut t = T::new();
    t.create("/a", 0, 1);
    t.create("/b", 0, 2);
    let acl = vec![Acl::new(perms::READ, "world", "anyone")];
    let applied = t.apply(S, TxnBody::SetAcl { path: "/a".into(), acl: acl.clone(), version: 1 });
    assert!(matches!(applied.result, TxnResult::AclSet(s) if s.aversion == 1));
    t.apply(S, TxnBody::SetAcl { path: "/b".into(), acl, version: 1 });
    let (a, b) = (t.tree.state().node("/a").unwrap(), t.tree.state().node("/b").unwrap());
    assert!(Arc::ptr_eq(a.acl(), b.acl()), "equal lists share one allocation");
}

#[test]
fn ephemerals_are_tracked_per_session_and_go_with_it() {
    let mut t = T::new();
    t.apply(S, TxnBody::CreateSession { timeout_ms: 5000, password: Bytes::from_static(&[1; 16]) });
    t.create("/e1", S.0, 1);
    t.create("/e2", S.0, 2);
    t.create("/keep", 0, 3);
    assert_eq!(t.tree.ephemerals(S, "/"), vec!["/e1".to_string(), "/e2".to_string()]);
    assert_eq!(t.tree.ephemerals(S, "/e2"), vec!["/e2".to_string()]);
    assert_eq!(t.tree.ephemerals(OTHER, "/"), Vec::<String>::new());
    assert!(t.tree.state().session(S).is_some());
    let applied = t.apply(S, TxnBody::CloseSession { paths: vec!["/e1".into(), "/e2".into()] });
    assert_eq!(applied.result, TxnResult::SessionClosed);
    assert!(t.tree.state().node("/e1").is_none() && t.tree.state().node("/e2").is_none());
    assert!(t.tree.state().node("/keep").is_some());
    assert!(t.tree.state().session(S).is_none());
    assert!(t.tree.state().all_ephemerals().is_empty());
}

#[test]
fn containers_and_ttl_nodes_are_indexed() {
    let mut t = T::new();
    t.create("/c", CONTAINER_EPHEMERAL_OWNER, 1);
    t.create("/t", EphemeralType::ttl_owner(500), 2);
    let state = t.tree.state();
    assert_eq!(state.containers().map(|p| p.to_string()).collect::<Vec<_>>(), vec!["/c"]);
    assert_eq!(state.ttl_nodes().map(|p| p.to_string()).collect::<Vec<_>>(), vec!["/t"]);
    t.apply(S, TxnBody::Delete { path: "/c".into() });
    assert_eq!(t.tree.state().containers().count(), 0);
}

#[test]
fn a_transaction_that_does_not_fit_changes_nothing() {
    let mut t = T::new();
    let digest = t.tree.state().digest();
    assert_eq!(t.create("/x/y", 0, 1).result, TxnResult::Error(ErrorCode::NoNode));
    assert_eq!(t.apply(S, TxnBody::Delete { path: "/nope".into() }).result, TxnResult::Error(ErrorCode::NoNode));
    assert_eq!(
        t.apply(S, TxnBody::Delete { path: "/zookeeper/quota".into() }).result,
        TxnResult::Error(ErrorCode::BadArguments)
    );
    assert_eq!(t.tree.state().digest(), digest);
    assert_eq!(t.tree.last_zxid(), Zxid::new(1, 3), "the zxid still advances: the txn was committed");
}

#[test]
fn multi_applies_every_op_under_one_zxid_and_a_failed_one_nothing() {
    let mut t = T::new();
    let ops = vec![
        TxnBody::Create {
            path: "/m".into(),
            data: Bytes::new().into(),
            acl: Acl::open_unsafe(),
            ephemeral_owner: 0,
            parent_cversion: 1,
        },
        TxnBody::SetData { path: "/m".into(), data: Bytes::from_static(b"1").into(), version: 1 },
        TxnBody::Check { path: "/m".into() },
    ];
    let applied = t.apply(S, TxnBody::Multi(ops));
    let TxnResult::Multi(results) = applied.result else { panic!() };
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(Result::is_ok));
    let stat = t.stat("/m");
    assert_eq!(stat.czxid, stat.mzxid, "one zxid for every op");
    let digest = t.tree.state().digest();
    let failed =
        t.apply(S, TxnBody::MultiError(vec![ErrorCode::Ok, ErrorCode::BadVersion, ErrorCode::RuntimeInconsistency]));
    assert_eq!(
        failed.result,
        TxnResult::Multi(vec![Err(ErrorCode::Ok), Err(ErrorCode::BadVersion), Err(ErrorCode::RuntimeInconsistency)])
    );
    assert_eq!(t.tree.state().digest(), digest);
}

#[test]
fn create_and_delete_fire_data_and_child_watches() {
    let mut t = T::new();
    t.tree.exists("/w", Some(S), |_| true).unwrap_err();
    t.tree.get_children("/", Some(OTHER)).unwrap();
    let applied = t.create("/w", 0, 1);
    assert_eq!(
        events(&applied),
        vec![(S, EventType::NodeCreated, "/w".into()), (OTHER, EventType::NodeChildrenChanged, "/".into())]
    );
    t.tree.get_data("/w", Some(S), |_| true).unwrap();
    t.tree.get_children("/w", Some(OTHER)).unwrap();
    let applied = t.apply(S, TxnBody::Delete { path: "/w".into() });
    assert_eq!(
        events(&applied),
        vec![(S, EventType::NodeDeleted, "/w".into()), (OTHER, EventType::NodeDeleted, "/w".into())]
    );
}

#[test]
fn set_data_fires_once_and_set_acl_not_at_all() {
    let mut t = T::new();
    t.create("/w", 0, 1);
    t.tree.get_data("/w", Some(S), |_| true).unwrap();
    let none = t.apply(S, TxnBody::SetAcl { path: "/w".into(), acl: Acl::open_unsafe(), version: 1 });
    assert!(none.events.is_empty());
    let first = t.apply(S, TxnBody::SetData { path: "/w".into(), data: Bytes::new().into(), version: 1 });
    assert_eq!(events(&first), vec![(S, EventType::NodeDataChanged, "/w".into())]);
    let second = t.apply(S, TxnBody::SetData { path: "/w".into(), data: Bytes::new().into(), version: 2 });
    assert!(second.events.is_empty(), "one-shot");
}

#[test]
fn get_data_on_a_missing_node_leaves_no_watch_but_exists_does() {
    let mut t = T::new();
    assert_eq!(t.tree.get_data("/later", Some(S), |_| true), Err(ErrorCode::NoNode));
    assert_eq!(t.tree.watches().count(), 0);
    assert_eq!(t.tree.exists("/later", Some(S), |_| true), Err(ErrorCode::NoNode));
    assert_eq!(t.tree.watches().count(), 1);
}

#[test]
fn a_read_refused_by_its_check_is_noauth_and_leaves_no_watch() {
    let mut t = T::new();
    t.create("/w", 0, 1);
    assert_eq!(t.tree.get_data("/w", Some(S), |_| false), Err(ErrorCode::NoAuth));
    assert_eq!(t.tree.exists("/w", Some(S), |_| false), Err(ErrorCode::NoAuth));
    assert_eq!(t.tree.watches().count(), 0);
    // A missing node is NoNode whatever the check would say: there is no ACL to ask.
    assert_eq!(t.tree.get_data("/none", Some(S), |_| false), Err(ErrorCode::NoNode));
    assert_eq!(t.tree.exists("/none", Some(S), |_| false), Err(ErrorCode::NoNode));
    assert_eq!(t.tree.watches().count(), 1, "only exists' watch on the missing node");
}

#[test]
fn closing_a_session_fires_watches_on_its_ephemerals() {
    let mut t = T::new();
    t.apply(S, TxnBody::CreateSession { timeout_ms: 5000, password: Bytes::new() });
    t.create("/lock", S.0, 1);
    t.tree.exists("/lock", Some(OTHER), |_| true).unwrap();
    let applied = t.apply(S, TxnBody::CloseSession { paths: vec!["/lock".into()] });
    assert_eq!(events(&applied), vec![(OTHER, EventType::NodeDeleted, "/lock".into())]);
}

#[test]
fn persistent_recursive_watch_sees_the_subtree() {
    let mut t = T::new();
    t.tree.watches_mut().add_persistent("/app", AddWatchMode::PersistentRecursive, S);
    t.create("/app", 0, 1);
    t.create("/app/x", 0, 1);
    let applied = t.apply(S, TxnBody::SetData { path: "/app/x".into(), data: Bytes::new().into(), version: 1 });
    assert_eq!(events(&applied), vec![(S, EventType::NodeDataChanged, "/app/x".into())]);
    assert_eq!(t.tree.watches().count(), 1, "still armed");
}

#[test]
fn set_watches_fires_what_changed_since_the_clients_zxid() {
    let mut t = T::new();
    t.create("/same", 0, 1);
    t.create("/changed", 0, 2);
    let seen = t.tree.last_zxid().as_i64();
    t.apply(S, TxnBody::SetData { path: "/changed".into(), data: Bytes::new().into(), version: 1 });
    t.create("/born", 0, 3);
    let fired = t.tree.set_watches(
        S,
        seen,
        &["/same".into(), "/changed".into(), "/gone".into()],
        &["/born".into(), "/absent".into()],
        &["/same".into()],
    );
    let fired: Vec<(EventType, &str)> = fired.iter().map(|e| (e.event_type, e.path.as_str())).collect();
    assert_eq!(
        fired,
        vec![
            (EventType::NodeDataChanged, "/changed"),
            (EventType::NodeDeleted, "/gone"),
            (EventType::NodeCreated, "/born"),
        ]
    );
    // "/same" (data and child) and "/absent" (exists) are re-armed.
    assert_eq!(t.tree.watches().count(), 3);
}

#[test]
fn descendant_count_and_node_order() {
    let mut t = T::new();
    t.create("/a", 0, 1);
    t.create("/a/b", 0, 1);
    t.create("/a/b/c", 0, 1);
    t.create("/a/d", 0, 2);
    assert_eq!(t.tree.state().descendant_count("/a"), 3);
    assert_eq!(t.tree.state().descendant_count("/"), t.tree.state().node_count() - 1);
    let order: Vec<String> = t.tree.state().nodes().map(|(path, _)| path.to_string()).collect();
    let a = order.iter().position(|p| p == "/a").unwrap();
    let abc = order.iter().position(|p| p == "/a/b/c").unwrap();
    let ab = order.iter().position(|p| p == "/a/b").unwrap();
    assert!(a < ab && ab < abc, "parents before children: {order:?}");
}

#[test]
fn a_snapshot_copy_is_unaffected_by_later_writes() {
    let mut t = T::new();
    t.create("/a", 0, 1);
    let frozen = t.tree.snapshot();
    let digest = frozen.digest();
    t.apply(S, TxnBody::SetData { path: "/a".into(), data: Bytes::from_static(b"changed").into(), version: 1 });
    t.create("/b", 0, 2);
    assert_eq!(frozen.digest(), digest);
    assert!(frozen.node("/b").is_none());
    assert_ne!(t.tree.state().digest(), digest);
}

mod zookeeper_answers {
    // Tree behaviour checked against what Apache ZooKeeper answers (found by
    // `integration-tests/zk_side_by_side.py`).

    use super::*;
    use crate::txn::Txn;

    const S: SessionId = SessionId(0x0100_0000_0000_0001);

    fn create(path: &str, ephemeral_owner: i64, parent_cversion: i32) -> Txn {
        Txn {
            session: S,
            cxid: 0,
            time_ms: 1000,
            body: TxnBody::Create {
                path: path.into(),
                data: Bytes::new().into(),
                acl: Acl::open_unsafe(),
                ephemeral_owner,
                parent_cversion,
            },
        }
    }

    #[test]
    fn config_node_aversion_is_minus_one_as_in_zookeeper() {
        let tree = DataTree::new();
        let config = tree.state().node(CONFIG_PATH).expect("/zookeeper/config exists");
        assert_eq!(config.stat().aversion, -1);
        assert_eq!(tree.state().node(ZOOKEEPER_PATH).map(|n| n.stat().aversion), Some(0));
    }

    #[test]
    fn get_ephemerals_blank_prefix_means_all() {
        let mut tree = DataTree::new();
        tree.apply(Zxid::new(1, 1), &create("/a", S.0, 1));
        tree.apply(Zxid::new(1, 2), &create("/b", S.0, 2));
        let all = vec!["/a".to_string(), "/b".to_string()];
        assert_eq!(tree.ephemerals(S, "/"), all);
        assert_eq!(tree.ephemerals(S, ""), all);
        assert_eq!(tree.ephemerals(S, "  / "), all);
        assert_eq!(tree.ephemerals(S, "/a"), vec!["/a".to_string()]);
        assert!(tree.ephemerals(S, "/c").is_empty());
    }
}

#[test]
fn null_data_reads_back_null_and_empty_reads_back_empty() {
    let mut t = T::new();
    let create = |path: &str, data: Data| TxnBody::Create {
        path: path.into(),
        data,
        acl: Acl::open_unsafe(),
        ephemeral_owner: 0,
        parent_cversion: 1,
    };
    t.apply(S, create("/null", Data::NULL));
    t.apply(S, create("/empty", Data::EMPTY));
    assert_eq!(t.tree.get_data("/null", None, |_| true).unwrap().0, Data::NULL);
    assert_eq!(t.tree.get_data("/empty", None, |_| true).unwrap().0, Data::EMPTY);
    assert_eq!(t.stat("/null").data_length, 0);
    t.apply(S, TxnBody::SetData { path: "/empty".into(), data: Data::NULL, version: 1 });
    t.apply(S, TxnBody::SetData { path: "/null".into(), data: Data::from(b"x"), version: 1 });
    assert_eq!(t.tree.get_data("/empty", None, |_| true).unwrap().0, Data::NULL);
    assert_eq!(t.tree.get_data("/null", None, |_| true).unwrap().0, Data::from(b"x"));
    let digest_with = |data: Data| {
        let mut t = T::new();
        t.apply(S, create("/x", data));
        t.tree.state().digest()
    };
    assert_eq!(digest_with(Data::NULL), digest_with(Data::NULL));
    assert_ne!(digest_with(Data::NULL), digest_with(Data::EMPTY), "the digest tells null from empty");
}

#[test]
fn a_tracked_digest_stays_the_digest_of_every_node_through_every_kind_of_change() {
    // The simulation checks the tracked digest every step: it must always be
    // what hashing every node gives, whatever changed.
    let mut t = T::new();
    t.tree.track_digest();
    let check = |t: &T, after: &str| {
        let state = t.tree.state();
        assert_eq!(state.digest(), state.digest_in_full(), "after {after}");
    };
    t.create("/a", 0, 1);
    check(&t, "create");
    t.create("/a/b", 0, 2);
    t.create("/a/e", 0x0100_0000_0000_0001, 3);
    check(&t, "creates under a parent");
    t.apply(S, TxnBody::SetData { path: "/a/b".into(), data: Bytes::from_static(b"v1").into(), version: 1 });
    check(&t, "setData");
    t.apply(S, TxnBody::SetData { path: "/a/b".into(), data: crate::data::Data::NULL, version: 2 });
    check(&t, "setData to null");
    t.apply(S, TxnBody::SetAcl { path: "/a".into(), acl: Acl::read_unsafe(), version: 1 });
    check(&t, "setACL");
    t.apply(S, TxnBody::Delete { path: "/a/b".into() });
    check(&t, "delete");
    t.apply(
        S,
        TxnBody::Multi(vec![
            TxnBody::Create {
                path: "/m".into(),
                data: Bytes::new().into(),
                acl: Acl::open_unsafe(),
                ephemeral_owner: 0,
                parent_cversion: 4,
            },
            TxnBody::Delete { path: "/a/e".into() },
        ]),
    );
    check(&t, "multi");
    let (chunks, _) = crate::tree::snapshot::to_chunks(t.tree.state(), 64);
    let loaded = crate::tree::snapshot::from_chunks(chunks.iter().map(|c| c.as_ref())).expect("load");
    assert!(!loaded.digest_tracked(), "a loaded snapshot is not tracked");
    assert_eq!(loaded.digest(), t.tree.state().digest(), "tracked or not, the same digest");
    t.tree.replace_state(loaded);
    assert!(t.tree.state().digest_tracked(), "a replaced state is tracked as the one before");
    t.create("/after", 0, 5);
    check(&t, "a create after a replaced state");
}

#[test]
fn a_reconfiguration_shows_in_zookeeper_config_and_survives_a_snapshot() {
    use crate::members::{Configuration, Membership};
    let mut t = T::new();
    t.tree.set_initial_configuration(Configuration::initial(Membership::of_ids(&[1, 2, 3], &[])), true);
    let initial = t.tree.state().node(CONFIG_PATH).expect("config node").stat();
    assert_eq!((initial.version, initial.mzxid), (0, 0), "the file's configuration is not a write");
    t.tree.watches_mut().add_data(CONFIG_PATH, S);
    let initial = t.tree.state().configuration().unwrap().clone();
    let next = Membership::of_ids(&[1, 2, 3, 4], &[5]);
    let applied = t.apply(SessionId::NONE, TxnBody::Reconfig(initial.enter(next)));
    let TxnResult::Reconfigured { stat, .. } = applied.result else { panic!("{:?}", applied.result) };
    assert_eq!((stat.version, stat.mzxid), (1, Zxid::new(1, 1).as_i64()));
    assert_eq!(applied.events.len(), 1, "a watch on /zookeeper/config fires");
    let text = t.tree.state().node(CONFIG_PATH).unwrap().data_value();
    let text = std::str::from_utf8(text.as_option().unwrap()).unwrap().to_string();
    assert!(text.contains("server.4=:participant;") && text.contains("server.5=:observer;"), "{text}");
    assert!(text.ends_with("version=100000001"), "{text}");
    assert!(t.tree.state().configuration().unwrap().is_joint());
    let joint = t.tree.state().configuration().unwrap().clone();
    t.apply(SessionId::NONE, TxnBody::Reconfig(joint.complete()));
    let done = t.tree.state().configuration().unwrap().clone();
    assert!(!done.is_joint());
    assert_eq!(t.tree.state().node(CONFIG_PATH).unwrap().stat().version, 1, "completing changes nothing shown");
    let (chunks, _) = crate::tree::snapshot::to_chunks(t.tree.state(), 64);
    let loaded = crate::tree::snapshot::from_chunks(chunks.iter().map(|c| c.as_ref())).expect("load");
    assert_eq!(loaded.configuration(), Some(&done), "the snapshot carries the configuration");
}

#[test]
fn a_reseeded_configuration_replaces_even_a_reconfigured_one() {
    use crate::members::{Configuration, Membership};
    let mut t = T::new();
    t.tree.set_initial_configuration(Configuration::initial(Membership::of_ids(&[1, 2, 3], &[])), true);
    let initial = t.tree.state().configuration().unwrap().clone();
    t.apply(SessionId::NONE, TxnBody::Reconfig(initial.enter(Membership::of_ids(&[1, 2, 3, 4], &[]))));
    let joint = t.tree.state().configuration().unwrap().clone();
    t.apply(SessionId::NONE, TxnBody::Reconfig(joint.complete()));
    let fresh = Configuration::initial(Membership::of_ids(&[7, 8, 9], &[]));
    t.tree.adopt_initial_configuration(fresh.clone(), true);
    assert_ne!(t.tree.state().configuration(), Some(&fresh), "a file never overrides a reconfiguration");
    t.tree.reseed_configuration(fresh.clone(), true);
    assert_eq!(t.tree.state().configuration(), Some(&fresh), "a reseed does");
    let text = t.tree.state().node(CONFIG_PATH).unwrap().data_value();
    let text = std::str::from_utf8(text.as_option().unwrap()).unwrap().to_string();
    assert!(text.contains("server.7=") && !text.contains("server.4="), "{text}");
}
