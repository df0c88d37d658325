//! Conversions between the client protobufs and the operation model. A
//! request that does not convert gets a typed error for its xid (BadArguments
//! naming the field); it never takes the session down.

use bytes::Bytes;
use zabkeeper_core::acl::{Acl, Id};
use zabkeeper_core::error::{ErrorCode, ZkError};
use zabkeeper_core::op::{MultiItem, Op, OpResult, Reply};
use zabkeeper_core::replica::ClientMessage;
use zabkeeper_core::tree::stat::{CreateMode, Stat};
use zabkeeper_core::tree::watch::{AddWatchMode, EventType, WatchEvent, WatcherType};
use zabkeeper_proto::client as pb;

fn bad(field: &str, reason: impl Into<String>) -> ZkError {
    ZkError::with_reason(ErrorCode::BadArguments, "", format!("{field}: {}", reason.into()))
}

/// Stat to protobuf.
pub fn stat_to_pb(s: &Stat) -> pb::Stat {
    pb::Stat {
        czxid: s.czxid,
        mzxid: s.mzxid,
        ctime: s.ctime,
        mtime: s.mtime,
        version: s.version,
        cversion: s.cversion,
        aversion: s.aversion,
        ephemeral_owner: s.ephemeral_owner,
        data_length: s.data_length,
        num_children: s.num_children,
        pzxid: s.pzxid,
    }
}

/// ACL to protobuf.
pub fn acl_to_pb(acl: &[Acl]) -> Vec<pb::Acl> {
    acl.iter().map(|a| pb::Acl { perms: a.perms, scheme: a.id.scheme.clone(), id: a.id.id.clone() }).collect()
}

/// ACL from protobuf.
pub fn acl_from_pb(acl: &[pb::Acl]) -> Vec<Acl> {
    acl.iter().map(|a| Acl { perms: a.perms, id: Id::new(a.scheme.clone(), a.id.clone()) }).collect()
}

fn create_from_pb(c: pb::CreateRequest) -> Result<Op, ZkError> {
    let mode = pb::CreateMode::try_from(c.mode).map_err(|_| bad("create.mode", format!("unknown mode {}", c.mode)))?;
    let mode = CreateMode::from_flag(mode as i32).ok_or_else(|| bad("create.mode", "unknown mode"))?;
    // 0 means "not given" for modes without a TTL (protobuf has no null).
    let ttl_ms = if mode.is_ttl() || c.ttl_ms != 0 { c.ttl_ms } else { -1 };
    Ok(Op::Create { path: c.path, data: Bytes::from(c.data).into(), acl: acl_from_pb(&c.acl), mode, ttl_ms })
}

fn watcher_type(code: i32, field: &str) -> Result<WatcherType, ZkError> {
    WatcherType::from_code(code).ok_or_else(|| bad(field, format!("unknown watcher type {code}")))
}

/// A request from protobuf.
pub fn op_from_pb(op: Option<pb::request::Op>) -> Result<Op, ZkError> {
    use pb::request::Op as P;
    let op = op.ok_or_else(|| bad("request.op", "missing"))?;
    Ok(match op {
        P::Create(c) => create_from_pb(c)?,
        P::Delete(d) => Op::Delete { path: d.path, version: d.version },
        P::Exists(e) => Op::Exists { path: e.path, watch: e.watch },
        P::GetData(g) => Op::GetData { path: g.path, watch: g.watch },
        P::SetData(s) => Op::SetData { path: s.path, data: Bytes::from(s.data).into(), version: s.version },
        P::GetChildren(g) => Op::GetChildren { path: g.path, watch: g.watch, with_stat: g.with_stat },
        P::GetAllChildrenNumber(g) => Op::GetAllChildrenNumber { path: g.path },
        P::GetEphemerals(g) => Op::GetEphemerals { prefix: if g.prefix.is_empty() { "/".into() } else { g.prefix } },
        P::Check(c) => Op::Check { path: c.path, version: c.version },
        P::Multi(m) => {
            let mut ops = Vec::with_capacity(m.ops.len());
            for (i, op) in m.ops.into_iter().enumerate() {
                use pb::multi_op::Op as M;
                ops.push(match op.op.ok_or_else(|| bad(&format!("multi.ops[{i}]"), "missing"))? {
                    M::Create(c) => create_from_pb(c)?,
                    M::Delete(d) => Op::Delete { path: d.path, version: d.version },
                    M::SetData(s) => Op::SetData { path: s.path, data: Bytes::from(s.data).into(), version: s.version },
                    M::Check(c) => Op::Check { path: c.path, version: c.version },
                });
            }
            Op::Multi(ops)
        }
        P::MultiRead(m) => {
            let mut ops = Vec::with_capacity(m.ops.len());
            for (i, op) in m.ops.into_iter().enumerate() {
                use pb::multi_read_op::Op as M;
                ops.push(match op.op.ok_or_else(|| bad(&format!("multi_read.ops[{i}]"), "missing"))? {
                    M::GetData(g) => Op::GetData { path: g.path, watch: g.watch },
                    M::GetChildren(g) => Op::GetChildren { path: g.path, watch: g.watch, with_stat: g.with_stat },
                });
            }
            Op::MultiRead(ops)
        }
        P::Sync(s) => Op::Sync { path: s.path },
        P::GetAcl(g) => Op::GetAcl { path: g.path },
        P::SetAcl(s) => Op::SetAcl { path: s.path, acl: acl_from_pb(&s.acl), version: s.version },
        P::AddWatch(a) => Op::AddWatch {
            path: a.path,
            mode: AddWatchMode::from_code(a.mode)
                .ok_or_else(|| bad("add_watch.mode", format!("unknown mode {}", a.mode)))?,
        },
        P::RemoveWatches(r) => Op::RemoveWatches { path: r.path, kind: watcher_type(r.r#type, "remove_watches.type")? },
        P::CheckWatches(c) => Op::CheckWatches { path: c.path, kind: watcher_type(c.r#type, "check_watches.type")? },
        P::Auth(a) => Op::Auth { scheme: a.scheme, auth: Bytes::from(a.auth) },
        P::WhoAmI(_) => Op::WhoAmI,
        P::Ping(_) => Op::Ping,
        P::Close(_) => Op::CloseSession,
        P::SetWatches(s) => Op::SetWatches {
            relative_zxid: s.relative_zxid,
            data: s.data_watches,
            exist: s.exist_watches,
            child: s.child_watches,
            persistent: s.persistent_watches,
            persistent_recursive: s.persistent_recursive_watches,
        },
    })
}

fn code_to_pb(code: ErrorCode) -> i32 {
    code.code()
}

fn result_to_pb(result: OpResult) -> pb::response::Result {
    use pb::response::Result as R;
    match result {
        OpResult::Created { path, stat } => R::Create(pb::CreateResponse { path, stat: Some(stat_to_pb(&stat)) }),
        OpResult::Stat(stat) => R::Stat(pb::StatResponse { stat: Some(stat_to_pb(&stat)) }),
        OpResult::Data { data, stat } => {
            R::GetData(pb::GetDataResponse { data: data.to_vec(), stat: Some(stat_to_pb(&stat)) })
        }
        OpResult::Children { children, stat } => {
            R::GetChildren(pb::GetChildrenResponse { children, stat: stat.as_ref().map(stat_to_pb) })
        }
        OpResult::Acl { acl, stat } => {
            R::GetAcl(pb::GetAclResponse { acl: acl_to_pb(&acl), stat: Some(stat_to_pb(&stat)) })
        }
        OpResult::Count(count) => R::Count(pb::CountResponse { count }),
        OpResult::Paths(paths) => R::Paths(pb::PathsResponse { paths }),
        OpResult::Multi(items) => {
            let reads =
                items.iter().any(|i| matches!(i, MultiItem::Ok(OpResult::Data { .. } | OpResult::Children { .. })));
            if reads {
                R::MultiRead(pb::MultiReadResponse { results: items.into_iter().map(multi_read_item).collect() })
            } else {
                R::Multi(pb::MultiResponse { results: items.into_iter().map(multi_item).collect() })
            }
        }
        OpResult::Identities(ids) => R::WhoAmI(pb::WhoAmIResponse {
            identities: ids.into_iter().map(|i| pb::ClientIdentity { scheme: i.scheme, id: i.id }).collect(),
        }),
        OpResult::Synced(path) => R::Paths(pb::PathsResponse { paths: vec![path] }),
        OpResult::Empty => R::Empty(pb::Empty {}),
    }
}

fn multi_item(item: MultiItem) -> pb::MultiResult {
    use pb::multi_result::Result as R;
    match item {
        MultiItem::Ok(OpResult::Created { path, stat }) => pb::MultiResult {
            error: 0,
            result: Some(R::Create(pb::CreateResponse { path, stat: Some(stat_to_pb(&stat)) })),
        },
        MultiItem::Ok(OpResult::Stat(stat)) => {
            pb::MultiResult { error: 0, result: Some(R::Stat(pb::StatResponse { stat: Some(stat_to_pb(&stat)) })) }
        }
        MultiItem::Ok(_) => pb::MultiResult { error: 0, result: Some(R::Empty(pb::Empty {})) },
        MultiItem::Err(code) => pb::MultiResult { error: code_to_pb(code), result: None },
    }
}

fn multi_read_item(item: MultiItem) -> pb::MultiReadResult {
    use pb::multi_read_result::Result as R;
    match item {
        MultiItem::Ok(OpResult::Data { data, stat }) => pb::MultiReadResult {
            error: 0,
            result: Some(R::GetData(pb::GetDataResponse { data: data.to_vec(), stat: Some(stat_to_pb(&stat)) })),
        },
        MultiItem::Ok(OpResult::Children { children, stat }) => pb::MultiReadResult {
            error: 0,
            result: Some(R::GetChildren(pb::GetChildrenResponse { children, stat: stat.as_ref().map(stat_to_pb) })),
        },
        MultiItem::Ok(_) => pb::MultiReadResult { error: 0, result: None },
        MultiItem::Err(code) => pb::MultiReadResult { error: code_to_pb(code), result: None },
    }
}

/// A reply to protobuf.
pub fn reply_to_pb(xid: i32, zxid: i64, reply: Reply) -> pb::Response {
    match reply {
        Ok(result) => pb::Response {
            xid,
            zxid,
            error: 0,
            error_path: String::new(),
            error_message: String::new(),
            result: Some(result_to_pb(result)),
        },
        Err(e) => pb::Response {
            xid,
            zxid,
            error: code_to_pb(e.code),
            error_path: e.path,
            error_message: e.reason,
            result: None,
        },
    }
}

fn event_type_to_pb(t: EventType) -> i32 {
    match t {
        EventType::None => pb::EventType::None as i32,
        other => other.code(),
    }
}

/// A watch event to protobuf.
pub fn event_to_pb(e: &WatchEvent) -> pb::WatchEvent {
    pb::WatchEvent { r#type: event_type_to_pb(e.event_type), path: e.path.clone(), zxid: e.zxid }
}

/// A replica's message to a gRPC client message (`None`: nothing to send).
pub fn client_message_to_pb(server_id: u64, msg: ClientMessage) -> pb::ServerMessage {
    use pb::server_message::Kind;
    let kind = match msg {
        ClientMessage::Connected { session, password, timeout_ms, zxid } => Kind::Connected(pb::Connected {
            session_id: session.0,
            password: password.to_vec(),
            timeout_ms,
            server_id,
            zxid: zxid.as_i64(),
        }),
        ClientMessage::ConnectFailed { error, reason } | ClientMessage::Close { error, reason } => {
            Kind::Closing(pb::Closing { error: code_to_pb(error), message: reason })
        }
        ClientMessage::Reply { xid, zxid, reply, .. } => Kind::Response(reply_to_pb(xid, zxid.as_i64(), reply)),
        ClientMessage::Event(e) => Kind::Event(event_to_pb(&e)),
    };
    pb::ServerMessage { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_fields_and_bad_enums_are_bad_arguments() {
        assert_eq!(op_from_pb(None).unwrap_err().code, ErrorCode::BadArguments);
        let create = pb::CreateRequest { path: "/a".into(), mode: 42, ..Default::default() };
        let err = op_from_pb(Some(pb::request::Op::Create(create))).unwrap_err();
        assert!(err.reason.contains("create.mode"), "{err}");
        let rw = pb::RemoveWatchesRequest { path: "/a".into(), r#type: 0 };
        assert!(op_from_pb(Some(pb::request::Op::RemoveWatches(rw))).is_err());
    }

    #[test]
    fn ttl_zero_means_absent_for_plain_modes() {
        let create =
            pb::CreateRequest { path: "/a".into(), mode: pb::CreateMode::Persistent as i32, ..Default::default() };
        let Op::Create { ttl_ms, .. } = op_from_pb(Some(pb::request::Op::Create(create))).unwrap() else { panic!() };
        assert_eq!(ttl_ms, -1);
    }

    #[test]
    fn event_types_keep_zookeeper_numbers() {
        let e = WatchEvent { event_type: EventType::NodeChildrenChanged, path: "/p".into(), zxid: 3 };
        assert_eq!(event_to_pb(&e).r#type, 4);
    }
}
