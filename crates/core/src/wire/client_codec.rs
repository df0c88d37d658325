//! The client's half of the codec: encode what a ZooKeeper client sends and
//! decode what it receives. The tests use it to check the server half
//! byte for byte in both directions; a Rust client can build on it.

use super::jute::{Jute, JuteError, Reader, Writer};
use super::opcode::{OpCode, NOTIFICATION_XID};
use super::records::*;
use super::reply::ReplyShape;
use crate::acl::Id;
use crate::error::{ErrorCode, ZkError};
use crate::op::{MultiItem, Op, OpResult, Reply};
use crate::tree::stat::Stat;
use crate::tree::watch::{EventType, WatchEvent};

/// An op that the requested opcode cannot carry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("opcode {opcode:?} cannot carry {op}")]
pub struct EncodeError {
    /// The opcode asked for.
    pub opcode: OpCode,
    /// The op's kind, as [`Op::name`] gives it.
    pub op: &'static str,
}

fn mismatch(opcode: OpCode, op: &Op) -> EncodeError {
    EncodeError { opcode, op: op.name() }
}

/// Encodes a ConnectRequest frame.
pub fn encode_connect(request: &ConnectRequest) -> Vec<u8> {
    let mut w = Writer::frame();
    request.write(&mut w);
    w.into_frame()
}

/// Decodes a ConnectResponse payload.
pub fn decode_connect_response(payload: &[u8]) -> Result<ConnectResponse, JuteError> {
    ConnectResponse::read(&mut Reader::new(payload))
}

/// Encodes a request frame: RequestHeader{xid, opcode}, then the op's record
/// as `shape.opcode` carries it (multi sub-ops as `shape.sub_ops`).
pub fn encode_request(xid: i32, shape: &ReplyShape, op: &Op) -> Result<Vec<u8>, EncodeError> {
    let mut w = Writer::frame();
    RequestHeader { xid, op_type: shape.opcode.code() }.write(&mut w);
    match (shape.opcode, op) {
        (OpCode::Multi | OpCode::MultiRead, Op::Multi(ops) | Op::MultiRead(ops)) => {
            if ops.len() != shape.sub_ops.len() {
                return Err(mismatch(shape.opcode, op));
            }
            for (sub, &opcode) in ops.iter().zip(&shape.sub_ops) {
                MultiHeader { op_type: opcode.code(), done: false, err: -1 }.write(&mut w);
                record(opcode, sub, &mut w)?;
            }
            MultiHeader { op_type: -1, done: true, err: -1 }.write(&mut w);
        }
        (opcode, op) => record(opcode, op, &mut w)?,
    }
    Ok(w.into_frame())
}

/// Writes the request record `opcode` uses for `op`.
fn record(opcode: OpCode, op: &Op, w: &mut Writer) -> Result<(), EncodeError> {
    use OpCode as C;
    match (opcode, op) {
        (C::Create | C::Create2 | C::CreateContainer, Op::Create { path, data, acl, mode, .. }) => {
            w.ustring(path);
            data.write(w);
            acl.write(w);
            w.int(mode.flag());
        }
        (C::CreateTtl, Op::Create { path, data, acl, mode, ttl_ms }) => {
            w.ustring(path);
            data.write(w);
            acl.write(w);
            w.int(mode.flag());
            w.long(*ttl_ms);
        }
        (C::Delete | C::Check, Op::Delete { path, version } | Op::Check { path, version }) => {
            w.ustring(path);
            w.int(*version);
        }
        (C::Exists, Op::Exists { path, watch })
        | (C::GetData, Op::GetData { path, watch })
        | (C::GetChildren | C::GetChildren2, Op::GetChildren { path, watch, .. }) => {
            w.ustring(path);
            w.bool(*watch);
        }
        (C::SetData, Op::SetData { path, data, version }) => {
            w.ustring(path);
            data.write(w);
            w.int(*version);
        }
        (C::GetAcl, Op::GetAcl { path })
        | (C::Sync, Op::Sync { path })
        | (C::GetAllChildrenNumber, Op::GetAllChildrenNumber { path })
        | (C::GetEphemerals, Op::GetEphemerals { prefix: path }) => w.ustring(path),
        (C::SetAcl, Op::SetAcl { path, acl, version }) => {
            w.ustring(path);
            acl.write(w);
            w.int(*version);
        }
        (C::CheckWatches, Op::CheckWatches { path, kind }) | (C::RemoveWatches, Op::RemoveWatches { path, kind }) => {
            w.ustring(path);
            w.int(*kind as i32);
        }
        (C::AddWatch, Op::AddWatch { path, mode }) => {
            w.ustring(path);
            w.int(*mode as i32);
        }
        (C::SetWatches, Op::SetWatches { relative_zxid, data, exist, child, .. }) => {
            w.long(*relative_zxid);
            data.write(w);
            exist.write(w);
            child.write(w);
        }
        (C::SetWatches2, Op::SetWatches { relative_zxid, data, exist, child, persistent, persistent_recursive }) => {
            w.long(*relative_zxid);
            data.write(w);
            exist.write(w);
            child.write(w);
            persistent.write(w);
            persistent_recursive.write(w);
        }
        (C::Auth, Op::Auth { scheme, auth }) => {
            AuthPacket { auth_type: 0, scheme: scheme.clone(), auth: auth.clone() }.write(w);
        }
        (C::Ping, Op::Ping) | (C::WhoAmI, Op::WhoAmI) | (C::CloseSession, Op::CloseSession) => {}
        (opcode, op) => return Err(mismatch(opcode, op)),
    }
    Ok(())
}

/// Decodes a notification payload (xid -1): the event and the keeper state it carries.
pub fn decode_notification(payload: &[u8]) -> Result<(WatchEvent, i32), JuteError> {
    let mut r = Reader::new(payload);
    let header = ReplyHeader::read(&mut r, "ReplyHeader")?;
    if header.xid != NOTIFICATION_XID {
        return Err(JuteError::InvalidValue { field: "ReplyHeader.xid", value: i64::from(header.xid) });
    }
    let event = WatcherEvent::read(&mut r, "WatcherEvent")?;
    let event_type = EventType::from_code(event.event_type)
        .ok_or(JuteError::InvalidValue { field: "WatcherEvent.type", value: i64::from(event.event_type) })?;
    Ok((WatchEvent { event_type, path: event.path, zxid: header.zxid }, event.state))
}

/// An error code number from the wire.
fn error_code(code: i32, field: &'static str) -> Result<ErrorCode, JuteError> {
    ErrorCode::from_code(code).ok_or(JuteError::InvalidValue { field, value: i64::from(code) })
}

/// Decodes a reply payload to the request `shape` describes. What the wire
/// does not carry comes back empty: an error's path, create(1)'s Stat
/// (zeroed), getChildren(8)'s Stat (`None`); whoAmI's ids are the users
/// ZooKeeper reports.
pub fn decode_reply(payload: &[u8], shape: &ReplyShape) -> Result<(ReplyHeader, Reply), JuteError> {
    let mut r = Reader::new(payload);
    let header = ReplyHeader::read(&mut r, "ReplyHeader")?;
    if header.err != 0 {
        let code = error_code(header.err, "ReplyHeader.err")?;
        return Ok((header, Err(ZkError::new(code, ""))));
    }
    let result = result(shape, &mut r)?;
    Ok((header, Ok(result)))
}

/// Reads the response record of a successful request.
fn result(shape: &ReplyShape, r: &mut Reader<'_>) -> Result<OpResult, JuteError> {
    use OpCode as C;
    Ok(match shape.opcode {
        C::Create => OpResult::Created { path: CreateResponse::read(r, "")?.path, stat: Stat::default() },
        C::Create2 | C::CreateContainer | C::CreateTtl => {
            let resp = Create2Response::read(r, "")?;
            OpResult::Created { path: resp.path, stat: resp.stat }
        }
        C::Exists | C::SetData | C::SetAcl | C::Check => OpResult::Stat(Stat::read(r, "")?),
        C::GetData => {
            let resp = GetDataResponse::read(r, "")?;
            OpResult::Data { data: resp.data, stat: resp.stat }
        }
        C::GetAcl => {
            let resp = GetAclResponse::read(r, "")?;
            OpResult::Acl { acl: resp.acl, stat: resp.stat }
        }
        C::GetChildren => OpResult::Children { children: GetChildrenResponse::read(r, "")?.children, stat: None },
        C::GetChildren2 => {
            let resp = GetChildren2Response::read(r, "")?;
            OpResult::Children { children: resp.children, stat: Some(resp.stat) }
        }
        C::Sync => OpResult::Synced(SyncResponse::read(r, "")?.path),
        C::Multi | C::MultiRead => OpResult::Multi(multi(r)?),
        C::GetEphemerals => OpResult::Paths(GetEphemeralsResponse::read(r, "")?.ephemerals),
        C::GetAllChildrenNumber => OpResult::Count(GetAllChildrenNumberResponse::read(r, "")?.total_number),
        C::AddWatch => {
            let err = ErrorResponse::read(r, "")?.err;
            if err != 0 {
                return Err(JuteError::InvalidValue { field: "ErrorResponse.err", value: i64::from(err) });
            }
            OpResult::Empty
        }
        C::WhoAmI => OpResult::Identities(
            WhoAmIResponse::read(r, "")?.client_info.into_iter().map(|c| Id::new(c.auth_scheme, c.user)).collect(),
        ),
        _ => OpResult::Empty,
    })
}

/// Reads a MultiResponse (`MultiResponse.deserialize`).
fn multi(r: &mut Reader<'_>) -> Result<Vec<MultiItem>, JuteError> {
    let mut items = Vec::new();
    loop {
        let header = MultiHeader::read(r, "MultiHeader")?;
        if header.done {
            return Ok(items);
        }
        let kind = OpCode::from_code(header.op_type);
        let item = match kind {
            Some(OpCode::Create) => {
                MultiItem::Ok(OpResult::Created { path: CreateResponse::read(r, "")?.path, stat: Stat::default() })
            }
            Some(OpCode::Create2) => {
                let resp = Create2Response::read(r, "")?;
                MultiItem::Ok(OpResult::Created { path: resp.path, stat: resp.stat })
            }
            Some(OpCode::Delete | OpCode::Check) => MultiItem::Ok(OpResult::Empty),
            Some(OpCode::SetData) => MultiItem::Ok(OpResult::Stat(SetDataResponse::read(r, "")?.stat)),
            Some(OpCode::GetData) => {
                let resp = GetDataResponse::read(r, "")?;
                MultiItem::Ok(OpResult::Data { data: resp.data, stat: resp.stat })
            }
            Some(OpCode::GetChildren) => {
                MultiItem::Ok(OpResult::Children { children: GetChildrenResponse::read(r, "")?.children, stat: None })
            }
            Some(OpCode::Error) => MultiItem::Err(error_code(ErrorResponse::read(r, "")?.err, "ErrorResponse.err")?),
            _ => return Err(JuteError::InvalidValue { field: "MultiHeader.type", value: i64::from(header.op_type) }),
        };
        items.push(item);
    }
}
