//! Request frames → [`Op`]: the RequestHeader, then each opcode's record,
//! with ZooKeeper's answers for what does not parse.
//!
//! Bytes after a complete record are ignored, as ZooKeeper ignores them (it
//! deserializes the record from the frame and never checks the rest).

use super::jute::{Jute, JuteError, Reader};
use super::opcode::OpCode;
use super::records::*;
use super::reply::ReplyShape;
use crate::error::ErrorCode;
use crate::op::Op;
use crate::tree::stat::CreateMode;
use crate::tree::watch::{AddWatchMode, WatcherType};

/// A request the server serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Echoed in the reply (ping replies always carry -2).
    pub xid: i32,
    /// How to shape the reply; pass it to [`encode_reply`](super::codec::encode_reply).
    pub shape: ReplyShape,
    /// The operation.
    pub op: Op,
}

/// One decoded request frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A request to serve.
    Request(Request),
    /// A served opcode whose body is invalid. Answer `code` (header only,
    /// [`encode_error_reply`](super::codec::encode_error_reply)) and keep the connection: MARSHALLINGERROR for a
    /// body that does not parse (what ZooKeeper answers), BADARGUMENTS for a
    /// create flag outside 0..=6 (`CreateMode.fromFlag`).
    Rejected {
        /// The request's xid.
        xid: i32,
        /// The request's opcode.
        opcode: OpCode,
        /// The code to answer.
        code: ErrorCode,
        /// What was wrong, for the log.
        error: JuteError,
    },
    /// An opcode we do not serve: sasl (102), standalone check (13, refused
    /// by ZooKeeper 3.9 too), internal or unknown numbers. Answer `code`
    /// (header only): UNIMPLEMENTED. After it (but for SASL) the connection is
    /// closed, as ZooKeeper's UnimplementedRequestProcessor closes it.
    Unsupported {
        /// The request's xid.
        xid: i32,
        /// The raw opcode.
        opcode: i32,
        /// The code to answer.
        code: ErrorCode,
    },
}

impl Decoded {
    /// The request's xid.
    pub fn xid(&self) -> i32 {
        match self {
            Decoded::Request(r) => r.xid,
            Decoded::Rejected { xid, .. } | Decoded::Unsupported { xid, .. } => *xid,
        }
    }
}

/// Why a request body is refused, and the code that answers it.
struct Reject {
    code: ErrorCode,
    error: JuteError,
}

impl From<JuteError> for Reject {
    /// A body that does not parse: ZooKeeper answers MARSHALLINGERROR.
    fn from(error: JuteError) -> Reject {
        Reject { code: ErrorCode::MarshallingError, error }
    }
}

/// What a body decodes to.
enum Body {
    /// An op to serve, with its multi sub-op opcodes.
    Op(Op, Vec<OpCode>),
    /// An opcode we do not serve, and the code to answer.
    Unsupported(ErrorCode),
}

/// Decodes one request frame's payload.
pub(super) fn decode(payload: &[u8]) -> Result<Decoded, JuteError> {
    let mut r = Reader::new(payload);
    let header = RequestHeader::read(&mut r, "RequestHeader")?;
    let xid = header.xid;
    let Some(opcode) = OpCode::from_code(header.op_type) else {
        return Ok(Decoded::Unsupported { xid, opcode: header.op_type, code: ErrorCode::Unimplemented });
    };
    match body(opcode, &mut r) {
        Ok(Body::Op(op, sub_ops)) => Ok(Decoded::Request(Request { xid, shape: ReplyShape { opcode, sub_ops }, op })),
        Ok(Body::Unsupported(code)) => Ok(Decoded::Unsupported { xid, opcode: opcode.code(), code }),
        // ZooKeeper reads the auth packet outside the request pipeline and
        // closes the connection when it does not parse.
        Err(reject) if opcode == OpCode::Auth => Err(reject.error),
        Err(Reject { code, error }) => Ok(Decoded::Rejected { xid, opcode, code, error }),
    }
}

/// Reads one record.
fn read<T: Jute>(r: &mut Reader<'_>) -> Result<T, Reject> {
    Ok(T::read(r, "record")?)
}

/// The body of a standalone request.
fn body(opcode: OpCode, r: &mut Reader<'_>) -> Result<Body, Reject> {
    let op = |op: Op| Ok(Body::Op(op, Vec::new()));
    match opcode {
        OpCode::Create | OpCode::Create2 | OpCode::CreateContainer => {
            let req: CreateRequest = read(r)?;
            let mode = create_mode(req.flags, "CreateRequest.flags")?;
            let mode = if opcode == OpCode::CreateContainer { CreateMode::Container } else { mode };
            op(Op::Create { path: req.path, data: req.data, acl: req.acl, mode, ttl_ms: -1 })
        }
        OpCode::CreateTtl => {
            let req: CreateTtlRequest = read(r)?;
            let mode = create_mode(req.flags, "CreateTtlRequest.flags")?;
            op(Op::Create { path: req.path, data: req.data, acl: req.acl, mode, ttl_ms: req.ttl })
        }
        OpCode::Delete => {
            let req: DeleteRequest = read(r)?;
            op(Op::Delete { path: req.path, version: req.version })
        }
        OpCode::Exists => {
            let req: ExistsRequest = read(r)?;
            op(Op::Exists { path: req.path, watch: req.watch })
        }
        OpCode::GetData => {
            let req: GetDataRequest = read(r)?;
            op(Op::GetData { path: req.path, watch: req.watch })
        }
        OpCode::SetData => {
            let req: SetDataRequest = read(r)?;
            op(Op::SetData { path: req.path, data: req.data, version: req.version })
        }
        OpCode::GetAcl => {
            let req: GetAclRequest = read(r)?;
            op(Op::GetAcl { path: req.path })
        }
        OpCode::SetAcl => {
            let req: SetAclRequest = read(r)?;
            op(Op::SetAcl { path: req.path, acl: req.acl, version: req.version })
        }
        OpCode::GetChildren => {
            let req: GetChildrenRequest = read(r)?;
            op(Op::GetChildren { path: req.path, watch: req.watch, with_stat: false })
        }
        OpCode::GetChildren2 => {
            let req: GetChildren2Request = read(r)?;
            op(Op::GetChildren { path: req.path, watch: req.watch, with_stat: true })
        }
        OpCode::Sync => {
            let req: SyncRequest = read(r)?;
            op(Op::Sync { path: req.path })
        }
        OpCode::Multi | OpCode::MultiRead => {
            let (ops, sub_ops) = multi(r, opcode == OpCode::MultiRead)?;
            let op = if opcode == OpCode::MultiRead { Op::MultiRead(ops) } else { Op::Multi(ops) };
            Ok(Body::Op(op, sub_ops))
        }
        OpCode::CheckWatches => {
            let req: CheckWatchesRequest = read(r)?;
            op(Op::CheckWatches { path: req.path, kind: watcher_type(req.watcher_type, "CheckWatchesRequest.type")? })
        }
        OpCode::RemoveWatches => {
            let req: RemoveWatchesRequest = read(r)?;
            op(Op::RemoveWatches { path: req.path, kind: watcher_type(req.watcher_type, "RemoveWatchesRequest.type")? })
        }
        OpCode::SetWatches => {
            let req: SetWatches = read(r)?;
            op(Op::SetWatches {
                relative_zxid: req.relative_zxid,
                data: req.data_watches,
                exist: req.exist_watches,
                child: req.child_watches,
                persistent: Vec::new(),
                persistent_recursive: Vec::new(),
            })
        }
        OpCode::SetWatches2 => {
            let req: SetWatches2 = read(r)?;
            op(Op::SetWatches {
                relative_zxid: req.relative_zxid,
                data: req.data_watches,
                exist: req.exist_watches,
                child: req.child_watches,
                persistent: req.persistent_watches,
                persistent_recursive: req.persistent_recursive_watches,
            })
        }
        OpCode::AddWatch => {
            let req: AddWatchRequest = read(r)?;
            // ZooKeeper's WatcherMode.fromZooDef throws, which it answers MARSHALLINGERROR.
            let mode = AddWatchMode::from_code(req.mode).ok_or_else(|| invalid("AddWatchRequest.mode", req.mode))?;
            op(Op::AddWatch { path: req.path, mode })
        }
        OpCode::GetEphemerals => {
            let req: GetEphemeralsRequest = read(r)?;
            op(Op::GetEphemerals { prefix: req.prefix_path })
        }
        OpCode::GetAllChildrenNumber => {
            let req: GetAllChildrenNumberRequest = read(r)?;
            op(Op::GetAllChildrenNumber { path: req.path })
        }
        OpCode::Auth => {
            let req: AuthPacket = read(r)?;
            op(Op::Auth { scheme: req.scheme, auth: req.auth })
        }
        // No body: anything after the header is ignored, as ZooKeeper does.
        OpCode::Ping => op(Op::Ping),
        OpCode::WhoAmI => op(Op::WhoAmI),
        OpCode::CloseSession => op(Op::CloseSession),
        OpCode::Reconfig => {
            let req: ReconfigRequest = read(r)?;
            op(Op::Reconfig {
                joining: req.joining_servers,
                leaving: req.leaving_servers,
                new_members: req.new_members,
                expected_version: req.cur_config_id,
            })
        }
        // Since 3.9 (ZOOKEEPER-2623 addendum) `Request.isValid(check)` is false:
        // a check outside multi gets UNIMPLEMENTED.
        OpCode::Check
        | OpCode::Sasl
        | OpCode::DeleteContainer
        | OpCode::Notification
        | OpCode::Error
        | OpCode::CreateSession => Ok(Body::Unsupported(ErrorCode::Unimplemented)),
    }
}

/// A value outside its field's range, answered MARSHALLINGERROR.
fn invalid(field: &'static str, value: i32) -> Reject {
    JuteError::InvalidValue { field, value: i64::from(value) }.into()
}

/// The create mode of a standalone create; BADARGUMENTS for unknown flags,
/// as `CreateMode.fromFlag` throws.
fn create_mode(flags: i32, field: &'static str) -> Result<CreateMode, Reject> {
    CreateMode::from_flag(flags).ok_or(Reject {
        code: ErrorCode::BadArguments,
        error: JuteError::InvalidValue { field, value: i64::from(flags) },
    })
}

/// The WatcherType of checkWatches/removeWatches; ZooKeeper's
/// `WatcherType.fromInt` throws, which it answers MARSHALLINGERROR.
fn watcher_type(code: i32, field: &'static str) -> Result<WatcherType, Reject> {
    WatcherType::from_code(code).ok_or_else(|| invalid(field, code))
}

/// The ops of a multi (`reads` false) or multiRead (`reads` true): each
/// preceded by a MultiHeader, ended by one with `done` set. Anything
/// `MultiOperationRecord` would refuse (an unknown op type, a create flag
/// outside 0..=6, reads and writes mixed) refuses the whole request with
/// MARSHALLINGERROR, as ZooKeeper does.
fn multi(r: &mut Reader<'_>, reads: bool) -> Result<(Vec<Op>, Vec<OpCode>), Reject> {
    let mut ops = Vec::new();
    let mut sub_ops = Vec::new();
    // Each pass consumes a 9-byte header or fails, so the loop ends with the input.
    loop {
        let header: MultiHeader = read(r)?;
        if header.done {
            return Ok((ops, sub_ops));
        }
        let kind = OpCode::from_code(header.op_type).ok_or_else(|| invalid("MultiHeader.type", header.op_type))?;
        let (op, opcode) = match (kind, reads) {
            (OpCode::Create | OpCode::Create2 | OpCode::CreateContainer, false) => {
                let req: CreateRequest = read(r)?;
                let mode = multi_create_mode(req.flags, "CreateRequest.flags")?;
                // `Op.create(path, data, options, type)`: the flags may turn the op
                // into createTTL or createContainer; a createContainer header makes
                // a container whatever its flags say (DataTree applies a
                // CreateContainerTxn).
                let (mode, opcode) = match kind {
                    OpCode::CreateContainer if !mode.is_ttl() => (CreateMode::Container, OpCode::CreateContainer),
                    _ => (mode, create_opcode(mode, kind)),
                };
                (Op::Create { path: req.path, data: req.data, acl: req.acl, mode, ttl_ms: -1 }, opcode)
            }
            (OpCode::CreateTtl, false) => {
                let req: CreateTtlRequest = read(r)?;
                let mode = multi_create_mode(req.flags, "CreateTtlRequest.flags")?;
                // `Op.create(path, data, acl, flags, ttl)` keeps the ttl only for a
                // TTL mode; otherwise the op becomes a plain create.
                let ttl_ms = if mode.is_ttl() { req.ttl } else { -1 };
                (
                    Op::Create { path: req.path, data: req.data, acl: req.acl, mode, ttl_ms },
                    create_opcode(mode, OpCode::Create),
                )
            }
            (OpCode::Delete, false) => {
                let req: DeleteRequest = read(r)?;
                (Op::Delete { path: req.path, version: req.version }, kind)
            }
            (OpCode::SetData, false) => {
                let req: SetDataRequest = read(r)?;
                (Op::SetData { path: req.path, data: req.data, version: req.version }, kind)
            }
            (OpCode::Check, false) => {
                let req: CheckVersionRequest = read(r)?;
                (Op::Check { path: req.path, version: req.version }, kind)
            }
            // `Op.getData(path)` / `Op.getChildren(path)`: multiRead never leaves watches.
            (OpCode::GetData, true) => {
                let req: GetDataRequest = read(r)?;
                (Op::GetData { path: req.path, watch: false }, kind)
            }
            (OpCode::GetChildren, true) => {
                let req: GetChildrenRequest = read(r)?;
                (Op::GetChildren { path: req.path, watch: false, with_stat: false }, kind)
            }
            _ => return Err(invalid("MultiHeader.type", header.op_type)),
        };
        ops.push(op);
        sub_ops.push(opcode);
    }
}

/// A create flag inside multi; `MultiOperationRecord` throws an IOException
/// for unknown flags, which ZooKeeper answers MARSHALLINGERROR.
fn multi_create_mode(flags: i32, field: &'static str) -> Result<CreateMode, Reject> {
    CreateMode::from_flag(flags).ok_or_else(|| invalid(field, flags))
}

/// The opcode ZooKeeper's `Op.Create.getOpcode` gives a create sub-op.
fn create_opcode(mode: CreateMode, default: OpCode) -> OpCode {
    if mode.is_ttl() {
        OpCode::CreateTtl
    } else if mode.is_container() {
        OpCode::CreateContainer
    } else {
        default
    }
}
