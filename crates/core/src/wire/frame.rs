//! Framing: every message, both ways, is a 4-byte big-endian signed length
//! then that many bytes of payload.
//!
//! Check-then-parse, as mini-redis does: [`check_frame`] looks at the bytes
//! buffered so far and says whether a whole frame is there, without copying
//! or allocating; the connection reads more on [`FrameStatus::Incomplete`] and
//! closes on [`FrameStatus::TooLarge`] or [`FrameStatus::Negative`], as
//! ZooKeeper does (`NIOServerCnxn.readLength`: "Len error").
//!
//! On a connection that has not yet sent its ConnectRequest, check the first
//! four bytes with [`four_letter_word`](super::four_letter::four_letter_word)
//! before treating them as a length: every four-letter word, read as a
//! length, is far above the limit.

/// Bytes in the length prefix.
pub const LEN_PREFIX: usize = 4;

/// ZooKeeper's `jute.maxbuffer` default: 0xfffff = 1,048,575 bytes.
pub const JUTE_MAX_BUFFER: usize = 0xfffff;

/// The default largest payload accepted. ZooKeeper's server refuses
/// `len > jute.maxbuffer` exactly, with no slack (`NIOServerCnxn.readLength`,
/// `NettyServerCnxn`); the extra size it allows applies only to single fields
/// inside records. Matching it keeps us from accepting a write whose read-back
/// reply would exceed the clients' own 0xfffff limit.
pub const DEFAULT_MAX_FRAME: usize = JUTE_MAX_BUFFER;

/// What the buffered bytes hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameStatus<'a> {
    /// Not yet a whole frame: read more.
    Incomplete {
        /// Total bytes (prefix included) needed before the frame is whole;
        /// `LEN_PREFIX` while the prefix itself is incomplete.
        needed: usize,
    },
    /// A whole frame.
    Frame {
        /// The payload, without the prefix.
        payload: &'a [u8],
        /// Bytes to consume from the buffer (prefix plus payload).
        consumed: usize,
    },
    /// The length exceeds the maximum: close the connection.
    TooLarge(i32),
    /// The length is negative: close the connection.
    Negative(i32),
}

/// Checks whether `buf` starts with a whole frame of at most `max_len` payload bytes.
pub fn check_frame(buf: &[u8], max_len: usize) -> FrameStatus<'_> {
    let Some(prefix) = buf.first_chunk::<LEN_PREFIX>() else {
        return FrameStatus::Incomplete { needed: LEN_PREFIX };
    };
    let len = i32::from_be_bytes(*prefix);
    let Ok(payload_len) = usize::try_from(len) else {
        return FrameStatus::Negative(len);
    };
    if payload_len > max_len {
        return FrameStatus::TooLarge(len);
    }
    let total = LEN_PREFIX + payload_len;
    match buf.get(LEN_PREFIX..total) {
        Some(payload) => FrameStatus::Frame { payload, consumed: total },
        None => FrameStatus::Incomplete { needed: total },
    }
}

/// Prefixes `payload` with its length.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(LEN_PREFIX + payload.len());
    // A payload longer than i32::MAX cannot come from our encoders (frames are MiB-sized).
    out.extend_from_slice(&i32::try_from(payload.len()).unwrap_or(i32::MAX).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_needs_its_prefix_and_its_payload() {
        assert_eq!(check_frame(&[], DEFAULT_MAX_FRAME), FrameStatus::Incomplete { needed: 4 });
        assert_eq!(check_frame(&[0, 0, 0], DEFAULT_MAX_FRAME), FrameStatus::Incomplete { needed: 4 });
        assert_eq!(check_frame(&[0, 0, 0, 3, 1, 2], DEFAULT_MAX_FRAME), FrameStatus::Incomplete { needed: 7 });
        assert_eq!(
            check_frame(&[0, 0, 0, 3, 1, 2, 3, 9], DEFAULT_MAX_FRAME),
            FrameStatus::Frame { payload: &[1, 2, 3], consumed: 7 }
        );
        assert_eq!(check_frame(&[0, 0, 0, 0], DEFAULT_MAX_FRAME), FrameStatus::Frame { payload: &[], consumed: 4 });
    }

    #[test]
    fn limits_are_exactly_zookeepers() {
        let at_limit = (JUTE_MAX_BUFFER as i32).to_be_bytes();
        assert_eq!(check_frame(&at_limit, DEFAULT_MAX_FRAME), FrameStatus::Incomplete { needed: 4 + JUTE_MAX_BUFFER });
        let over = (JUTE_MAX_BUFFER as i32 + 1).to_be_bytes();
        assert_eq!(check_frame(&over, DEFAULT_MAX_FRAME), FrameStatus::TooLarge(0x10_0000));
        assert_eq!(check_frame(&[0xff, 0xff, 0xff, 0xff], DEFAULT_MAX_FRAME), FrameStatus::Negative(-1));
        assert_eq!(check_frame(&[0x80, 0, 0, 0], usize::MAX), FrameStatus::Negative(i32::MIN));
        assert_eq!(check_frame(&[0, 0, 0, 9], 8), FrameStatus::TooLarge(9));
    }

    #[test]
    fn frame_and_check_agree() {
        let framed = frame(b"abc");
        assert_eq!(framed, [0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(check_frame(&framed, 3), FrameStatus::Frame { payload: b"abc", consumed: 7 });
    }
}
