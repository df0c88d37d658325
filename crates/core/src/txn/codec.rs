//! The byte form of a transaction, shared by the log, snapshots-in-flight and
//! the peer transport: a version byte, a CRC32 of the payload, then the
//! payload (postcard). Decoding checks both, so a torn or corrupted record is
//! reported as such and never mistaken for a valid transaction.

use super::Txn;

const VERSION: u8 = 1;
const HEADER_LEN: usize = 5;

/// Why a record could not be decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Fewer bytes than the header.
    #[error("record truncated: {len} bytes, need at least {HEADER_LEN}")]
    Truncated {
        /// The length found.
        len: usize,
    },
    /// A format version this build cannot read.
    #[error("unknown record version {0}, this build reads version {VERSION}")]
    Version(u8),
    /// The payload does not match its checksum.
    #[error("checksum mismatch: stored {stored:08x}, computed {computed:08x}")]
    Checksum {
        /// The checksum in the record.
        stored: u32,
        /// The checksum of the bytes found.
        computed: u32,
    },
    /// The payload is not a valid value.
    #[error("malformed payload: {0}")]
    Payload(String),
}

/// Wraps an already-serialized payload in the versioned, checksummed envelope.
pub fn seal(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.push(VERSION);
    out.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Checks the envelope and returns the payload.
pub fn open(record: &[u8]) -> Result<&[u8], CodecError> {
    if record.len() < HEADER_LEN {
        return Err(CodecError::Truncated { len: record.len() });
    }
    if record[0] != VERSION {
        return Err(CodecError::Version(record[0]));
    }
    let stored = u32::from_be_bytes([record[1], record[2], record[3], record[4]]);
    let payload = &record[HEADER_LEN..];
    let computed = crc32fast::hash(payload);
    if stored != computed {
        return Err(CodecError::Checksum { stored, computed });
    }
    Ok(payload)
}

/// Encodes any serde value into a sealed record.
pub fn encode_value<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // Sized first (a pass that writes nothing), so the record is one
    // allocation, where growing from empty made several per transaction.
    // (Appending to a buffer of the caller's keeps the caller's sizing.)
    let size = postcard::serialize_with_flavor(value, postcard::ser_flavors::Size::default()).unwrap_or(0);
    let mut out = Vec::with_capacity(HEADER_LEN + size);
    encode_value_into(value, &mut out);
    out
}

/// Appends `value` to `out` as a sealed record, serializing in place (no
/// buffer of its own).
pub fn encode_value_into<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[VERSION, 0, 0, 0, 0]);
    // Serializing our own plain data types into a Vec cannot fail: postcard
    // only errors on unsupported types or a failing writer, and extending a
    // Vec never fails. `to_extend` pushes bytes straight into the Vec, where
    // `to_io` made a `write_all` call (a memmove) of every varint.
    *out = postcard::to_extend(value, std::mem::take(out)).expect("postcard serializes plain data into a Vec");
    let crc = crc32fast::hash(&out[start + HEADER_LEN..]);
    out[start + 1..start + HEADER_LEN].copy_from_slice(&crc.to_be_bytes());
}

/// Decodes a sealed record into a serde value.
pub fn decode_value<T: serde::de::DeserializeOwned>(record: &[u8]) -> Result<T, CodecError> {
    let payload = open(record)?;
    postcard::from_bytes(payload).map_err(|e| CodecError::Payload(e.to_string()))
}

/// Encodes a transaction.
pub fn encode(txn: &Txn) -> Vec<u8> {
    encode_value(txn)
}

/// Decodes a transaction.
pub fn decode(record: &[u8]) -> Result<Txn, CodecError> {
    decode_value(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Acl;
    use crate::ids::SessionId;
    use crate::txn::TxnBody;
    use bytes::Bytes;

    fn sample() -> Txn {
        Txn {
            session: SessionId(42),
            cxid: 7,
            time_ms: 1_700_000_000_000,
            body: TxnBody::Multi(vec![
                TxnBody::Create {
                    path: "/a".into(),
                    data: Bytes::from_static(b"hello").into(),
                    acl: Acl::open_unsafe(),
                    ephemeral_owner: 0,
                    parent_cversion: 1,
                },
                TxnBody::SetData { path: "/a".into(), data: Bytes::new().into(), version: 1 },
            ]),
        }
    }

    #[test]
    fn round_trips() {
        let txn = sample();
        assert_eq!(decode(&encode(&txn)).unwrap(), txn);
    }

    #[test]
    fn detects_corruption_and_truncation() {
        let mut bytes = encode(&sample());
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        assert!(matches!(decode(&bytes), Err(CodecError::Checksum { .. })));
        assert_eq!(decode(&bytes[..3]), Err(CodecError::Truncated { len: 3 }));
        let mut wrong_version = encode(&sample());
        wrong_version[0] = 9;
        assert_eq!(decode(&wrong_version), Err(CodecError::Version(9)));
        assert_eq!(CodecError::Version(9).to_string(), "unknown record version 9, this build reads version 1");
    }
}
