//! ZooKeeper's client protocol (jute over TCP), so that ZooKeeper's own
//! clients work unchanged against us.
//!
//! Pure: bytes in, records out, no I/O (the ZooKeeper port itself is
//! `frontend::zookeeper`). Where to start: [`codec`] is the API (handshake,
//! requests in, replies and notifications out); [`frame`] splits the byte
//! stream; [`four_letter`] recognizes admin words on a fresh connection.
//!
//! - [`jute`]: the primitive encoding, a reader that never panics.
//! - [`records`]: the records of `zookeeper.jute`, field for field.
//! - [`opcode`]: opcodes and special xids.
//! - [`client_codec`]: the client's half, for tests and a Rust client.

mod cesu8;
pub mod client_codec;
pub mod codec;
pub mod four_letter;
pub mod frame;
pub mod jute;
pub mod opcode;
pub mod records;
mod reply;
mod request;

#[cfg(test)]
pub(crate) mod tests;

pub use codec::{
    decode_connect, decode_request, encode_connect_response, encode_error_reply, encode_notification,
    encode_notification_into, encode_reply, encode_reply_into, Decoded, ReplyShape, Request,
};
pub use four_letter::{four_letter_word, FourLetterWord};
pub use frame::{check_frame, FrameStatus, DEFAULT_MAX_FRAME};
pub use jute::JuteError;
pub use opcode::OpCode;

/// A property the decoders broke on some input (found by [`fuzz_decode`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FuzzFinding(pub String);

/// Runs every decoder over arbitrary bytes, as a connection would meet them:
/// the four-letter-word check, then frames (the first as a ConnectRequest,
/// the rest as requests), plus the whole input as one payload of each kind.
/// Whatever decodes must survive a round trip through the client encoder
/// unchanged. Used by the cargo-fuzz target and by proptest on stable; a
/// panic in here, or an `Err`, is a bug.
pub fn fuzz_decode(data: &[u8]) -> Result<(), FuzzFinding> {
    if let Some(first4) = data.first_chunk::<4>() {
        let _ = four_letter_word(*first4);
    }
    connect_round_trip(data)?;
    request_round_trip(data)?;
    let mut rest = data;
    let mut first = true;
    while let FrameStatus::Frame { payload, consumed } = check_frame(rest, DEFAULT_MAX_FRAME) {
        if first {
            connect_round_trip(payload)?;
            first = false;
        } else {
            request_round_trip(payload)?;
        }
        rest = rest.get(consumed..).unwrap_or_default();
    }
    Ok(())
}

/// Decode → client encode → decode must give the same ConnectRequest.
fn connect_round_trip(payload: &[u8]) -> Result<(), FuzzFinding> {
    let Ok(request) = decode_connect(payload) else { return Ok(()) };
    let frame = client_codec::encode_connect(&request);
    let again = decode_connect(frame.get(frame::LEN_PREFIX..).unwrap_or_default());
    if again.as_ref() != Ok(&request) {
        return Err(FuzzFinding(format!("ConnectRequest {request:?} re-decoded as {again:?}")));
    }
    Ok(())
}

/// Decode → client encode → decode must give the same request; every
/// decoded request must also have a well-formed error reply.
fn request_round_trip(payload: &[u8]) -> Result<(), FuzzFinding> {
    let Ok(decoded) = decode_request(payload) else { return Ok(()) };
    let reply = encode_error_reply(decoded.xid(), 0, crate::error::ErrorCode::SystemError);
    if reply.len() != frame::LEN_PREFIX + 16 {
        return Err(FuzzFinding(format!("error reply of {} bytes", reply.len())));
    }
    let Decoded::Request(request) = decoded else { return Ok(()) };
    let frame = client_codec::encode_request(request.xid, &request.shape, &request.op)
        .map_err(|e| FuzzFinding(format!("decoded {request:?} cannot be re-encoded: {e}")))?;
    let again = decode_request(frame.get(frame::LEN_PREFIX..).unwrap_or_default());
    if again != Ok(Decoded::Request(request.clone())) {
        return Err(FuzzFinding(format!("request {request:?} re-decoded as {again:?}")));
    }
    Ok(())
}
