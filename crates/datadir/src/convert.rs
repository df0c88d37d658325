//! The protobuf form (`proto/admin.proto`) of log entries and snapshot nodes.

use super::log::{kind_of, size_of};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::tree::stat::StatPersisted;
use zabkeeper_core::txn::{codec, Entry, TxnBody};
use zabkeeper_proto::admin as pb;

/// An ACL list.
pub fn acl(list: &[Acl]) -> Vec<pb::Acl> {
    list.iter().map(|a| pb::Acl { perms: a.perms, scheme: a.id.scheme.clone(), id: a.id.id.clone() }).collect()
}

fn op(body: &TxnBody) -> pb::TxnOp {
    let mut out = pb::TxnOp { r#type: kind_of(body).into(), version: -1, ..pb::TxnOp::default() };
    match body {
        TxnBody::CreateSession { timeout_ms, .. } => out.timeout_ms = *timeout_ms,
        TxnBody::CloseSession { paths } => out.paths = paths.clone(),
        TxnBody::Create { path, data, acl: list, ephemeral_owner, parent_cversion } => {
            out.path = path.clone();
            out.data = data.to_vec();
            out.acl = acl(list);
            out.ephemeral_owner = *ephemeral_owner;
            out.parent_cversion = *parent_cversion;
        }
        TxnBody::Delete { path } | TxnBody::Check { path } => out.path = path.clone(),
        TxnBody::SetData { path, data, version } => {
            out.path = path.clone();
            out.data = data.to_vec();
            out.version = *version;
        }
        TxnBody::SetAcl { path, acl: list, version } => {
            out.path = path.clone();
            out.acl = acl(list);
            out.version = *version;
        }
        TxnBody::Error(code) => {
            out.error_code = code.code();
            out.error = code.name().into();
        }
        TxnBody::MultiError(codes) => {
            // The failing op's code: the first that is neither OK nor the
            // RuntimeInconsistency the ops after it get.
            let failing = codes.iter().find(|c| !matches!(c, ErrorCode::Ok | ErrorCode::RuntimeInconsistency));
            if let Some(code) = failing.or(codes.first()) {
                out.error_code = code.code();
                out.error = code.name().into();
            }
        }
        TxnBody::Reconfig(change) => {
            out.path = zabkeeper_core::tree::CONFIG_PATH.into();
            out.data = change.next().to_string().into_bytes();
        }
        TxnBody::Load { chunks, .. } => {
            out.path = "/".into();
            out.data =
                format!("{} bytes of snapshot", chunks.iter().map(bytes::Bytes::len).sum::<usize>()).into_bytes();
        }
        TxnBody::Multi(_) => {}
    }
    out
}

/// A log entry, marked committed when at or below `committed`.
pub fn entry(e: &Entry, committed: Zxid) -> pb::LogEntry {
    readable(e, committed, u32::try_from(size_of(e)).unwrap_or(u32::MAX))
}

/// A log entry with its bytes as the log stores them (`raw`), for a backup
/// that replays exactly what the ensemble applied.
pub fn entry_with_raw(e: &Entry, committed: Zxid) -> pb::LogEntry {
    let raw = codec::encode(&e.txn);
    let mut out = readable(e, committed, u32::try_from(raw.len()).unwrap_or(u32::MAX));
    out.raw = raw;
    out
}

fn readable(e: &Entry, committed: Zxid, size_bytes: u32) -> pb::LogEntry {
    let ops = match &e.txn.body {
        TxnBody::Multi(ops) => ops.iter().map(op).collect(),
        body => vec![op(body)],
    };
    pb::LogEntry {
        zxid: e.zxid.0,
        session_id: e.txn.session.0,
        cxid: e.txn.cxid,
        time_ms: e.txn.time_ms,
        description: e.txn.body.to_string(),
        size_bytes,
        committed: e.zxid <= committed,
        r#type: kind_of(&e.txn.body).into(),
        ops,
        raw: Vec::new(),
    }
}

/// A node as a snapshot stores it.
pub fn snapshot_node(path: String, data_len: usize, list: &[Acl], stat: &StatPersisted) -> pb::SnapshotNode {
    pb::SnapshotNode {
        path,
        stat: Some(pb::SnapshotStat {
            czxid: stat.czxid,
            mzxid: stat.mzxid,
            ctime: stat.ctime,
            mtime: stat.mtime,
            version: stat.version,
            cversion: stat.cversion,
            aversion: stat.aversion,
            ephemeral_owner: stat.ephemeral_owner,
            pzxid: stat.pzxid,
            data_length: i32::try_from(data_len).unwrap_or(i32::MAX),
        }),
        acl: acl(list),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use zabkeeper_core::ids::SessionId;
    use zabkeeper_core::txn::Txn;

    #[test]
    fn a_multi_shows_each_op_with_its_data_acl_and_version() {
        let body = TxnBody::Multi(vec![
            TxnBody::Create {
                path: "/a".into(),
                data: Bytes::from_static(b"x").into(),
                acl: Acl::open_unsafe(),
                ephemeral_owner: 7,
                parent_cversion: 3,
            },
            TxnBody::SetData { path: "/b".into(), data: Bytes::from_static(b"yy").into(), version: 4 },
        ]);
        let e = Entry::new(Zxid::new(2, 5), Txn { session: SessionId(7), cxid: 9, time_ms: 11, body });
        let pb = entry(&e, Zxid::new(2, 4));
        assert_eq!((pb.r#type.as_str(), pb.committed, pb.session_id, pb.cxid), ("multi", false, 7, 9));
        assert_eq!(pb.ops.len(), 2);
        assert_eq!(
            (pb.ops[0].r#type.as_str(), pb.ops[0].path.as_str(), &pb.ops[0].data[..]),
            ("create", "/a", &b"x"[..])
        );
        assert_eq!((pb.ops[0].ephemeral_owner, pb.ops[0].parent_cversion, pb.ops[0].acl.len()), (7, 3, 1));
        assert_eq!((pb.ops[1].r#type.as_str(), pb.ops[1].version), ("setData", 4));
        assert!(entry(&e, Zxid::new(2, 5)).committed);
        assert!(pb.raw.is_empty(), "raw bytes only when asked for");
        let raw = entry_with_raw(&e, Zxid::new(2, 5));
        assert_eq!(codec::decode(&raw.raw).expect("the stored record"), *e.txn);
        assert_eq!((raw.size_bytes as usize, raw.ops.len()), (raw.raw.len(), 2));
    }

    #[test]
    fn a_failed_multi_names_the_failing_code() {
        let body = TxnBody::MultiError(vec![ErrorCode::Ok, ErrorCode::NoNode, ErrorCode::RuntimeInconsistency]);
        let e = Entry::new(Zxid(1), Txn { session: SessionId(1), cxid: 1, time_ms: 0, body });
        let pb = entry(&e, Zxid(1));
        assert_eq!((pb.r#type.as_str(), pb.ops[0].error.as_str()), ("error", "NoNode"));
        assert_eq!(pb.ops[0].error_code, ErrorCode::NoNode.code());
    }
}
