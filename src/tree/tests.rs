//! Tree behaviour checked against what Apache ZooKeeper answers (found by
//! `integration-tests/zk_side_by_side.py`).

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
            data: Bytes::new(),
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
