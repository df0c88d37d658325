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
use super::opcode::NOTIFICATION_XID;
use super::records::{ConnectRequest, ConnectResponse, ReplyHeader, STATE_SYNC_CONNECTED};
use super::{reply, request};
use crate::error::ErrorCode;
use crate::op::Reply;
use crate::tree::watch::WatchEvent;

pub use super::reply::ReplyShape;
pub use super::request::{Decoded, Request};

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
