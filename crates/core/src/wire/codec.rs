//! The codec the server's connection loop calls: the handshake, requests in,
//! replies and notifications out.
//!
//! `decode_*` take a frame's payload (the bytes after the length prefix, see
//! [`check_frame`](super::frame::check_frame)); `encode_*` return whole frames,
//! length prefix included, ready to write to the socket.
//!
//! Errors come in two kinds, as in ZooKeeper:
//! - `Err(JuteError)` from [`decode_request`] / [`decode_connect`]: the frame
//!   itself is unusable (no readable header, or a bad auth packet). ZooKeeper
//!   closes the connection; so should we.
//! - [`Decoded::Rejected`] / [`Decoded::Unsupported`]: the xid is known, so the
//!   server answers that one request with an error code (header only) and
//!   carries on with the connection.

use super::jute::{Jute, JuteError, Reader, Writer};
use super::opcode::{OpCode, NOTIFICATION_XID};
use super::records::{ConnectRequest, ConnectResponse, ReplyHeader, STATE_SYNC_CONNECTED};
use super::{reply, request};
use crate::error::ErrorCode;
use crate::op::{Op, Reply};
use crate::tree::watch::WatchEvent;

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

/// A request the server serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Echoed in the reply (ping replies always carry -2).
    pub xid: i32,
    /// How to shape the reply; pass it to [`encode_reply`].
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
    /// [`encode_error_reply`]) and keep the connection: MARSHALLINGERROR for a
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

/// Decodes the first frame of a connection.
pub fn decode_connect(payload: &[u8]) -> Result<ConnectRequest, JuteError> {
    ConnectRequest::read(&mut Reader::new(payload))
}

/// Encodes the answer to a ConnectRequest (no ReplyHeader).
pub fn encode_connect_response(response: &ConnectResponse) -> Vec<u8> {
    let mut w = Writer::frame();
    response.write(&mut w);
    w.into_frame()
}

/// Decodes a request frame (RequestHeader then the op's record).
pub fn decode_request(payload: &[u8]) -> Result<Decoded, JuteError> {
    request::decode(payload)
}

/// Encodes the reply to a request: ReplyHeader{xid, zxid, err}, then the
/// op's response record only when err is 0. `zxid` is the server's last
/// processed zxid; ping replies always carry xid -2 and auth replies zxid 0,
/// as ZooKeeper sends them. A result that does not fit the shape is a server
/// bug: it is logged and answered MARSHALLINGERROR, as ZooKeeper answers an
/// unexpected server-side exception.
pub fn encode_reply(xid: i32, zxid: i64, shape: &ReplyShape, reply: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    encode_reply_into(&mut out, xid, zxid, shape, reply);
    out
}

/// [`encode_reply`], appending the frame to `out` (to batch replies in one buffer).
pub fn encode_reply_into(out: &mut Vec<u8>, xid: i32, zxid: i64, shape: &ReplyShape, reply: &Reply) {
    reply::encode(out, xid, zxid, shape, reply);
}

/// Encodes a header-only error reply (for [`Decoded::Rejected`] and
/// [`Decoded::Unsupported`]).
pub fn encode_error_reply(xid: i32, zxid: i64, code: ErrorCode) -> Vec<u8> {
    let mut w = Writer::frame();
    ReplyHeader { xid, zxid, err: code.code() }.write(&mut w);
    w.into_frame()
}

/// Encodes a watch notification: ReplyHeader(-1, zxid of the event, 0) then
/// WatcherEvent{type, SyncConnected, path}.
pub fn encode_notification(event: &WatchEvent) -> Vec<u8> {
    let mut out = Vec::new();
    encode_notification_into(&mut out, event);
    out
}

/// [`encode_notification`], appending the frame to `out`.
pub fn encode_notification_into(out: &mut Vec<u8>, event: &WatchEvent) {
    let mut w = Writer::frame_after(std::mem::take(out));
    ReplyHeader { xid: NOTIFICATION_XID, zxid: event.zxid, err: 0 }.write(&mut w);
    // WatcherEvent{type, state, path}, written field by field to spare a copy of the path.
    w.int(event.event_type.code());
    w.int(STATE_SYNC_CONNECTED);
    w.ustring(&event.path);
    *out = w.into_frame();
}
