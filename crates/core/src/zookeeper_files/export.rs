//! Our tree as Apache ZooKeeper's snapshot (`zkctl export`): the way back.
//! ZooKeeper started on the file serves every node with its data, ACL and
//! Stat as we served them, and its open sessions until they expire.
//!
//! What cannot go back exactly: session passwords. ZooKeeper derives a
//! session's password from its id and its own secret on every reconnect,
//! and ours were made by our members, so a client's session does not
//! survive the move; its ephemerals live until the session's timeout after
//! ZooKeeper starts, as after any ZooKeeper restart whose clients left.

use super::snapshot::{SnapNode, Snapshot, OPEN_ACL_INDEX};
use crate::acl::Acl;
use crate::tree::TreeState;
use std::collections::BTreeMap;

/// ZooKeeper's `FileSnap` writes its header's dbid as -1.
const DBID: i64 = -1;

/// `state` as ZooKeeper's snapshot: sessions, the ACL cache (the open ACL
/// as ZooKeeper's own index -1, every other distinct list numbered from 1
/// as `ReferenceCountedACLCache` numbers them), and every node parents
/// first, the root under ZooKeeper's path `""`.
pub fn from_tree(state: &TreeState) -> Snapshot {
    let open = Acl::open_unsafe();
    let mut acls: BTreeMap<i64, Vec<Acl>> = BTreeMap::new();
    let mut index_of: BTreeMap<Vec<Acl>, i64> = BTreeMap::new();
    let mut nodes = Vec::with_capacity(state.node_count());
    for (path, node) in state.nodes() {
        let list = node.acl().to_vec();
        let acl = if list == open {
            OPEN_ACL_INDEX
        } else {
            let next = i64::try_from(index_of.len()).unwrap_or(i64::MAX - 1) + 1;
            *index_of.entry(list.clone()).or_insert_with(|| {
                acls.insert(next, list);
                next
            })
        };
        nodes.push(SnapNode {
            path: if path == "/" { String::new() } else { path.to_string() },
            data: (!node.data_is_null()).then(|| bytes::Bytes::copy_from_slice(node.data())),
            acl,
            stat: node.persisted(),
            offset: 0,
        });
    }
    let sessions = state.sessions().map(|(id, record)| (id.0, record.timeout_ms)).collect();
    Snapshot { dbid: DBID, sessions, acls, nodes, digest: None, last_processed_zxid: None }
}

/// The file name ZooKeeper must find the snapshot under, in its
/// `version-2` directory: it takes the snapshot's zxid from the name.
pub fn file_name(state: &TreeState) -> String {
    format!("snapshot.{:x}", state.last_zxid().0)
}

#[cfg(test)]
mod tests {
    use super::super::recover::Recovery;
    use super::super::snapshot::{decode, encode};
    use super::*;
    use crate::data::Data;
    use crate::ids::{SessionId, Zxid};
    use crate::tree::stat::StatPersisted;
    use crate::tree::SessionRecord;

    fn sample() -> TreeState {
        let mut state = TreeState::empty();
        let open = crate::tree::SharedAcl::new(Acl::open_unsafe().into());
        let digest = crate::tree::SharedAcl::new(vec![Acl::new(31, "digest", "u:hash=")].into());
        let stat = |czxid: i64, owner: i64| StatPersisted {
            czxid,
            mzxid: czxid + 1,
            pzxid: czxid,
            ctime: 1_700_000_000_000,
            mtime: 1_700_000_000_500,
            version: 2,
            cversion: 3,
            aversion: 1,
            ephemeral_owner: owner,
        };
        assert!(state.insert_raw("/", &Data::EMPTY, open.clone(), stat(0, 0)));
        assert!(state.insert_raw(
            "/a",
            &Data::from(Some(bytes::Bytes::from_static(b"x\0y"))),
            digest.clone(),
            stat(5, 0)
        ));
        assert!(state.insert_raw("/a/null", &Data::from(None), open.clone(), stat(6, 0)));
        assert!(state.insert_raw("/a/e", &Data::EMPTY, digest, stat(7, 0x77)));
        state.insert_session(SessionId(0x77), SessionRecord { timeout_ms: 6_000, password: bytes::Bytes::new() });
        state.set_last_zxid(Zxid(9));
        state
    }

    #[test]
    fn an_exported_tree_reads_back_node_for_node_through_zookeepers_recovery() {
        let state = sample();
        let snapshot = from_tree(&state);
        assert_eq!(snapshot.acls.len(), 1, "the open ACL is ZooKeeper's -1, the digest one is cached once");
        assert_eq!(snapshot.nodes[0].path, "", "the root under ZooKeeper's path");
        let bytes = encode(&snapshot);
        let decoded = decode("snapshot.9", &bytes).expect("ZooKeeper's reader takes it");
        let (back, _) =
            Recovery::from_snapshot("snapshot.9", &decoded, 9).and_then(Recovery::finish).expect("recovers");
        assert_eq!(back.node_count(), state.node_count());
        for (path, node) in state.nodes() {
            let other = back.node(path).unwrap_or_else(|| panic!("{path} is missing"));
            assert_eq!(other.persisted(), node.persisted(), "{path}");
            assert_eq!(other.data(), node.data(), "{path}");
            assert_eq!(other.data_is_null(), node.data_is_null(), "{path}");
            assert_eq!(other.acl(), node.acl(), "{path}");
        }
        assert_eq!(back.session(SessionId(0x77)).map(|r| r.timeout_ms), Some(6_000));
        assert_eq!(file_name(&state), "snapshot.9");
    }
}
