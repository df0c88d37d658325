//! Hostile input: random bytes, every truncation of valid frames, mutated
//! frames and absurd length claims. Decoders must return errors, never
//! panic, and never take a strict prefix of a request for a whole request.

use super::gen;
use crate::error::ErrorCode;
use crate::wire::client_codec::{encode_connect, encode_request};
use crate::wire::codec::{decode_connect, decode_request, Decoded};
use crate::wire::frame::{check_frame, FrameStatus, DEFAULT_MAX_FRAME, LEN_PREFIX};
use crate::wire::records::ConnectRequest;
use crate::wire::{fuzz_decode, OpCode};
use proptest::prelude::*;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// Random bytes behind a plausible RequestHeader, so bodies get exercised.
fn headed_garbage() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<i32>(),
        prop::sample::select(vec![
            1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 14, 15, 17, 18, 19, 21, 22, 100, 101, 103, 104, 105, 106,
        ]),
        bytes(64),
    )
        .prop_map(|(xid, op, body)| {
            let mut out = xid.to_be_bytes().to_vec();
            out.extend_from_slice(&i32::to_be_bytes(op));
            out.extend_from_slice(&body);
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_break_the_decoders(data in bytes(128)) {
        prop_assert_eq!(fuzz_decode(&data), Ok(()));
    }

    #[test]
    fn random_bodies_never_break_the_decoders(data in headed_garbage()) {
        prop_assert_eq!(fuzz_decode(&data), Ok(()));
        let mut framed = crate::wire::frame::frame(&[0; 45]);
        framed.extend_from_slice(&crate::wire::frame::frame(&data));
        prop_assert_eq!(fuzz_decode(&framed), Ok(()));
    }
}

proptest! {
    #[test]
    fn every_truncation_of_a_request_is_refused((shape, op) in gen::request(), xid in any::<i32>()) {
        let frame = encode_request(xid, &shape, &op).unwrap();
        let payload = &frame[LEN_PREFIX..];
        for cut in 0..payload.len() {
            let decoded = decode_request(&payload[..cut]);
            match decoded {
                Err(_) => {}
                Ok(Decoded::Rejected { xid: got, code, .. }) => {
                    prop_assert!(cut >= 8, "a header-less prefix must be a framing error");
                    prop_assert_eq!(got, xid);
                    prop_assert_eq!(code, ErrorCode::MarshallingError);
                }
                other => prop_assert!(false, "prefix of {} bytes of {:?} decoded as {:?}", cut, op, other),
            }
            // The auth packet is read outside the pipeline: a bad one closes the connection.
            if shape.opcode == OpCode::Auth && cut >= 8 {
                prop_assert!(decode_request(&payload[..cut]).is_err());
            }
        }
        for cut in 0..frame.len() {
            let incomplete = matches!(check_frame(&frame[..cut], DEFAULT_MAX_FRAME), FrameStatus::Incomplete { .. });
            prop_assert!(incomplete, "a frame cut at {} must be incomplete", cut);
        }
        prop_assert_eq!(fuzz_decode(&frame), Ok(()));
    }

    #[test]
    fn every_truncation_of_a_connect_request_is_refused_or_loses_only_read_only(
        passwd in proptest::collection::vec(any::<u8>(), 0..20),
        read_only in any::<Option<bool>>(),
    ) {
        let request = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 7,
            timeout_ms: 30_000,
            session_id: 0x1234,
            passwd: passwd.into(),
            read_only,
        };
        let frame = encode_connect(&request);
        let payload = &frame[LEN_PREFIX..];
        let without_read_only = payload.len() - usize::from(read_only.is_some());
        for cut in 0..payload.len() {
            let decoded = decode_connect(&payload[..cut]);
            if cut == without_read_only {
                prop_assert_eq!(decoded, Ok(ConnectRequest { read_only: None, ..request.clone() }));
            } else {
                prop_assert!(decoded.is_err(), "prefix of {} bytes decoded as {:?}", cut, decoded);
            }
        }
    }

    #[test]
    fn mutated_requests_never_break_the_decoders(
        (shape, op) in gen::request(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut frame = encode_request(1, &shape, &op).unwrap();
        let i = at.index(frame.len());
        frame[i] = byte;
        prop_assert_eq!(fuzz_decode(&frame), Ok(()));
    }
}

#[test]
fn absurd_lengths_inside_a_record_are_rejected_not_allocated() {
    // getData whose path claims 2 GiB - 1 bytes, then a multi claiming 2^31-1 ACL entries.
    let mut get = vec![0, 0, 0, 1, 0, 0, 0, 4];
    get.extend_from_slice(&i32::MAX.to_be_bytes());
    assert!(matches!(
        decode_request(&get),
        Ok(Decoded::Rejected { xid: 1, opcode: OpCode::GetData, code: ErrorCode::MarshallingError, .. })
    ));
    let mut create = vec![0, 0, 0, 2, 0, 0, 0, 1];
    create.extend_from_slice(&[0, 0, 0, 2, b'/', b'a', 0, 0, 0, 0]);
    create.extend_from_slice(&0x000f_ffffi32.to_be_bytes());
    create.extend_from_slice(&[0; 12]);
    assert!(matches!(
        decode_request(&create),
        Ok(Decoded::Rejected { xid: 2, opcode: OpCode::Create, code: ErrorCode::MarshallingError, .. })
    ));
    // A frame header claiming 2 GiB is refused before anything is buffered.
    assert_eq!(check_frame(&[0x7f, 0xff, 0xff, 0xff], DEFAULT_MAX_FRAME), FrameStatus::TooLarge(i32::MAX));
}

#[test]
fn a_multi_of_only_headers_ends_with_the_input() {
    // Many sub-op headers without records, and never a terminator: an error, quickly.
    let mut multi = vec![0, 0, 0, 3, 0, 0, 0, 14];
    for _ in 0..10_000 {
        multi.extend_from_slice(&[0, 0, 0, 2, 0, 0xff, 0xff, 0xff, 0xff]);
    }
    assert!(matches!(decode_request(&multi), Ok(Decoded::Rejected { code: ErrorCode::MarshallingError, .. })));
}
