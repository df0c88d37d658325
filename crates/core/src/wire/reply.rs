//! [`Reply`] → reply frames, shaped per opcode as ZooKeeper's
//! `FinalRequestProcessor` and `MultiResponse` shape them.

use super::jute::{Jute, Writer};
use super::opcode::{OpCode, PING_XID};
use super::records::*;
use crate::acl::Id;
use crate::error::ErrorCode;
use crate::op::{MultiItem, OpResult, Reply};

/// What a reply must look like: the request's opcode and, for multi and
/// multiRead, each sub-op's opcode as ZooKeeper's `MultiOperationRecord`
/// reports it (a create whose flags say container or TTL counts as
/// createContainer / createTTL), which decides each result's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyShape {
    /// The request's opcode.
    pub opcode: OpCode,
    /// The sub-ops' opcodes for multi and multiRead; empty otherwise.
    pub sub_ops: Vec<OpCode>,
}

impl From<OpCode> for ReplyShape {
    fn from(opcode: OpCode) -> ReplyShape {
        ReplyShape { opcode, sub_ops: Vec::new() }
    }
}

/// A result that does not fit the reply shape: a server bug.
#[derive(Debug)]
struct Mismatch {
    opcode: OpCode,
    result: &'static str,
}

/// Appends one reply frame to `out`.
pub(super) fn encode(out: &mut Vec<u8>, xid: i32, zxid: i64, shape: &ReplyShape, reply: &Reply) {
    // ZooKeeper answers pings with PING_XID whatever the request carried, and
    // auth packets with zxid 0 (`FinalRequestProcessor`, `processPacket`).
    let xid = if shape.opcode == OpCode::Ping { PING_XID } else { xid };
    let zxid = if shape.opcode == OpCode::Auth { 0 } else { zxid };
    let mut w = Writer::frame_after(std::mem::take(out));
    let err = match reply {
        Err(e) if e.code != ErrorCode::Ok => e.code,
        Err(_) => mismatch(Mismatch { opcode: shape.opcode, result: "an error with code OK" }),
        Ok(result) => {
            ReplyHeader { xid, zxid, err: 0 }.write(&mut w);
            match body(shape, result, &mut w) {
                Ok(()) => {
                    *out = w.into_frame();
                    return;
                }
                Err(m) => {
                    w.clear_frame();
                    mismatch(m)
                }
            }
        }
    };
    ReplyHeader { xid, zxid, err: err.code() }.write(&mut w);
    *out = w.into_frame();
}

/// Logs a server bug and picks the code that answers it.
fn mismatch(m: Mismatch) -> ErrorCode {
    tracing::error!(opcode = ?m.opcode, result = m.result, "reply does not fit its request; answering MARSHALLINGERROR");
    ErrorCode::MarshallingError
}

/// A short name of a result, for the log.
fn name(result: &OpResult) -> &'static str {
    match result {
        OpResult::Created { .. } => "Created",
        OpResult::Stat(_) => "Stat",
        OpResult::Data { .. } => "Data",
        OpResult::Children { .. } => "Children",
        OpResult::Acl { .. } => "Acl",
        OpResult::Count(_) => "Count",
        OpResult::Paths(_) => "Paths",
        OpResult::Multi(_) => "Multi",
        OpResult::Identities(_) => "Identities",
        OpResult::Synced(_) => "Synced",
        OpResult::Empty => "Empty",
    }
}

/// Writes the response record of a successful standalone request.
fn body(shape: &ReplyShape, result: &OpResult, w: &mut Writer) -> Result<(), Mismatch> {
    use OpCode::*;
    match (shape.opcode, result) {
        (Create, OpResult::Created { path, .. }) => w.ustring(path),
        (Create2 | CreateContainer | CreateTtl, OpResult::Created { path, stat }) => {
            w.ustring(path);
            stat.write(w);
        }
        // check is not served standalone (UNIMPLEMENTED, see request.rs); were it,
        // ZooKeeper would shape it as a SetDataResponse.
        (Exists | SetData | SetAcl | Check, OpResult::Stat(stat)) => stat.write(w),
        (GetData | Reconfig, OpResult::Data { data, stat }) => {
            data.write(w);
            stat.write(w);
        }
        (GetAcl, OpResult::Acl { acl, stat }) => {
            acl.write(w);
            stat.write(w);
        }
        (GetChildren, OpResult::Children { children, .. }) => children.write(w),
        (GetChildren2, OpResult::Children { children, stat: Some(stat) }) => {
            children.write(w);
            stat.write(w);
        }
        (Sync, OpResult::Synced(path)) => w.ustring(path),
        (Multi | MultiRead, OpResult::Multi(items)) => multi(shape, items, w)?,
        (GetEphemerals, OpResult::Paths(paths)) => paths.write(w),
        (GetAllChildrenNumber, OpResult::Count(n)) => w.int(*n),
        // FinalRequestProcessor answers addWatch with ErrorResponse(0).
        (AddWatch, OpResult::Empty) => w.int(0),
        (WhoAmI, OpResult::Identities(ids)) => {
            w.vector_len(ids.len());
            for id in ids {
                client_info(id).write(w);
            }
        }
        (
            Delete | Ping | Auth | SetWatches | SetWatches2 | CheckWatches | RemoveWatches | CloseSession,
            OpResult::Empty,
        ) => {}
        (opcode, result) => return Err(Mismatch { opcode, result: name(result) }),
    }
    Ok(())
}

/// What whoAmI reports for an identity (`AuthUtil.getClientInfos`): the
/// provider's user name, which for digest is the part before ':' and for the
/// other schemes the id itself.
pub(super) fn client_info(id: &Id) -> ClientInfo {
    let user = match id.scheme.as_str() {
        "digest" => id.id.split_once(':').map_or(id.id.as_str(), |(user, _)| user),
        _ => id.id.as_str(),
    };
    ClientInfo { auth_scheme: id.scheme.clone(), user: user.to_string() }
}

/// Writes a MultiResponse (`MultiResponse.serialize`): per op a
/// MultiHeader(type, false, err) and its result record, then
/// MultiHeader(-1, true, -1). An error result is type -1 with its code in
/// both the header and an ErrorResponse; ops rolled back because another
/// failed carry code 0.
fn multi(shape: &ReplyShape, items: &[MultiItem], w: &mut Writer) -> Result<(), Mismatch> {
    if items.len() != shape.sub_ops.len() {
        return Err(Mismatch { opcode: shape.opcode, result: "Multi with a result count unlike the request's" });
    }
    for (item, &opcode) in items.iter().zip(&shape.sub_ops) {
        let result = match item {
            MultiItem::Err(code) => {
                MultiHeader { op_type: OpCode::Error.code(), done: false, err: code.code() }.write(w);
                w.int(code.code());
                continue;
            }
            MultiItem::Ok(result) => result,
        };
        // `OpResult.CreateResult(path, stat)` reports create2 for every create
        // that returns a Stat (create2, createContainer, createTTL).
        let header_type = match opcode {
            OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => OpCode::Create2,
            other => other,
        };
        MultiHeader { op_type: header_type.code(), done: false, err: 0 }.write(w);
        match (opcode, result) {
            (OpCode::Create, OpResult::Created { path, .. }) => w.ustring(path),
            (OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl, OpResult::Created { path, stat }) => {
                w.ustring(path);
                stat.write(w);
            }
            (OpCode::Delete | OpCode::Check, OpResult::Empty) => {}
            (OpCode::SetData, OpResult::Stat(stat)) => stat.write(w),
            (OpCode::GetData, OpResult::Data { data, stat }) => {
                data.write(w);
                stat.write(w);
            }
            (OpCode::GetChildren, OpResult::Children { children, .. }) => children.write(w),
            (opcode, result) => return Err(Mismatch { opcode, result: name(result) }),
        }
    }
    MultiHeader { op_type: -1, done: true, err: -1 }.write(w);
    Ok(())
}
