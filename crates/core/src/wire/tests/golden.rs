//! Byte-exact frames written by hand from `zookeeper.jute`, so a field-order
//! mistake cannot hide behind an encoder and decoder that share it. Each
//! frame is hex, one field per group, annotated.

use crate::acl::{Acl, Id};
use crate::data::Data;
use crate::error::{ErrorCode, ZkError};
use crate::op::{MultiItem, Op, OpResult};
use crate::tree::stat::{CreateMode, Stat};
use crate::tree::watch::{EventType, WatchEvent};
use crate::wire::codec::{
    decode_connect, decode_request, encode_connect_response, encode_error_reply, encode_notification, encode_reply,
    Decoded, ReplyShape, Request,
};
use crate::wire::records::{ConnectRequest, ConnectResponse};
use crate::wire::OpCode;
use bytes::Bytes;

/// Bytes from hex; spaces, newlines and `|` separate fields for the reader.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    assert_eq!(digits.len() % 2, 0, "odd number of hex digits");
    digits
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).unwrap();
            u8::from_str_radix(text, 16).unwrap()
        })
        .collect()
}

/// The Stat with fields 1, 2, …, 11 in wire order.
const STAT_1_TO_11: &str = "0000000000000001 0000000000000002 0000000000000003 0000000000000004
    00000005 00000006 00000007 0000000000000008 00000009 0000000a 000000000000000b";

fn stat_1_to_11() -> Stat {
    Stat {
        czxid: 1,
        mzxid: 2,
        ctime: 3,
        mtime: 4,
        version: 5,
        cversion: 6,
        aversion: 7,
        ephemeral_owner: 8,
        data_length: 9,
        num_children: 10,
        pzxid: 11,
    }
}

fn request(payload: &str) -> Decoded {
    decode_request(&hex(payload)).unwrap()
}

const PASSWD_1_TO_16: &str = "00000010 0102030405060708090a0b0c0d0e0f10";

#[test]
fn connect_request_with_read_only() {
    let payload = hex(&format!("00000000 | 0000000100000005 | 00007530 | 0123456789abcdef | {PASSWD_1_TO_16} | 01"));
    assert_eq!(payload.len(), 45);
    let request = decode_connect(&payload).unwrap();
    assert_eq!(
        request,
        ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0x1_0000_0005,
            timeout_ms: 30_000,
            session_id: 0x0123_4567_89ab_cdef,
            passwd: Bytes::from((1..=16).collect::<Vec<u8>>()),
            read_only: Some(true),
        }
    );
    // The answer echoes readOnly.
    let response = ConnectResponse::accept(&request, 10_000, request.session_id, request.passwd.clone(), false);
    assert_eq!(
        encode_connect_response(&response),
        hex(&format!("00000025 | 00000000 | 00002710 | 0123456789abcdef | {PASSWD_1_TO_16} | 00"))
    );
}

#[test]
fn connect_request_without_read_only() {
    // A 3.3-era client: no readOnly byte; the answer must not carry one either.
    let payload = hex(&format!("00000000 | 0000000000000000 | 00001388 | 0000000000000000 | {PASSWD_1_TO_16}"));
    let request = decode_connect(&payload).unwrap();
    assert_eq!(request.read_only, None);
    assert_eq!(request.timeout_ms, 5000);
    let response = ConnectResponse::expired(&request, true);
    assert_eq!(
        encode_connect_response(&response),
        hex("00000024 | 00000000 | 00000000 | 0000000000000000 | 00000010 00000000000000000000000000000000")
    );
}

#[test]
fn create2_request() {
    // xid 1, create2, "/a", data "hi", [ACL(31, world:anyone)], EPHEMERAL_SEQUENTIAL.
    let decoded = request(
        "00000001 0000000f | 00000002 2f61 | 00000002 6869 |
         00000001 | 0000001f 00000005 776f726c64 00000006 616e796f6e65 | 00000003",
    );
    assert_eq!(
        decoded,
        Decoded::Request(Request {
            xid: 1,
            shape: OpCode::Create2.into(),
            op: Op::Create {
                path: "/a".into(),
                data: Bytes::from_static(b"hi").into(),
                acl: Acl::open_unsafe(),
                mode: CreateMode::EphemeralSequential,
                ttl_ms: -1,
            },
        })
    );
}

#[test]
fn create_ttl_request_and_null_data() {
    // xid 2, createTTL, "/t", data null (-1), no ACL, flags 5, ttl 5000:
    // the null is kept, to read back as null as in ZooKeeper.
    let decoded = request("00000002 00000015 | 00000002 2f74 | ffffffff | 00000000 | 00000005 | 0000000000001388");
    assert_eq!(
        decoded,
        Decoded::Request(Request {
            xid: 2,
            shape: OpCode::CreateTtl.into(),
            op: Op::Create {
                path: "/t".into(),
                data: Data::NULL,
                acl: vec![],
                mode: CreateMode::PersistentWithTtl,
                ttl_ms: 5000,
            },
        })
    );
}

#[test]
fn create_container_opcode_makes_a_container_whatever_the_flag() {
    let decoded = request("00000003 00000013 | 00000002 2f63 | 00000000 | 00000000 | 00000000");
    let Decoded::Request(Request { op: Op::Create { mode, ttl_ms, .. }, shape, .. }) = decoded else {
        panic!("not a create: {decoded:?}")
    };
    assert_eq!((mode, ttl_ms, shape.opcode), (CreateMode::Container, -1, OpCode::CreateContainer));
}

#[test]
fn create_flag_outside_0_to_6_is_bad_arguments_alone_and_marshalling_in_multi() {
    let alone = request("00000004 00000001 | 00000002 2f61 | 00000000 | 00000000 | 00000007");
    assert!(matches!(alone, Decoded::Rejected { xid: 4, opcode: OpCode::Create, code: ErrorCode::BadArguments, .. }));
    // multi: MultiHeader(create, false, -1) + the same create, then the terminator.
    let in_multi = request(
        "00000005 0000000e | 00000001 00 ffffffff | 00000002 2f61 | 00000000 | 00000000 | 00000007 |
         ffffffff 01 ffffffff",
    );
    assert!(matches!(
        in_multi,
        Decoded::Rejected { xid: 5, opcode: OpCode::Multi, code: ErrorCode::MarshallingError, .. }
    ));
}

#[test]
fn multi_request_with_effective_sub_opcodes() {
    // create(1) with the container flag counts as createContainer; delete; check.
    let decoded = request(
        "00000006 0000000e |
         00000001 00 ffffffff | 00000002 2f63 | 00000000 | 00000000 | 00000004 |
         00000002 00 ffffffff | 00000002 2f64 | ffffffff |
         0000000d 00 ffffffff | 00000002 2f65 | 00000003 |
         ffffffff 01 ffffffff",
    );
    assert_eq!(
        decoded,
        Decoded::Request(Request {
            xid: 6,
            shape: ReplyShape {
                opcode: OpCode::Multi,
                sub_ops: vec![OpCode::CreateContainer, OpCode::Delete, OpCode::Check]
            },
            op: Op::Multi(vec![
                Op::Create {
                    path: "/c".into(),
                    data: Bytes::new().into(),
                    acl: vec![],
                    mode: CreateMode::Container,
                    ttl_ms: -1
                },
                Op::Delete { path: "/d".into(), version: -1 },
                Op::Check { path: "/e".into(), version: 3 },
            ]),
        })
    );
}

#[test]
fn multi_refuses_reads_and_multi_read_refuses_writes() {
    let reads_in_multi =
        request("00000007 0000000e | 00000004 00 ffffffff | 00000002 2f61 | 01 | ffffffff 01 ffffffff");
    assert!(matches!(reads_in_multi, Decoded::Rejected { code: ErrorCode::MarshallingError, .. }));
    let writes_in_read =
        request("00000008 00000016 | 00000002 00 ffffffff | 00000002 2f61 | ffffffff | ffffffff 01 ffffffff");
    assert!(matches!(writes_in_read, Decoded::Rejected { code: ErrorCode::MarshallingError, .. }));
}

#[test]
fn multi_read_drops_watch_flags() {
    // getData "/a" watch=true, getChildren "/b" watch=true: multiRead never leaves watches.
    let decoded = request(
        "00000009 00000016 | 00000004 00 ffffffff | 00000002 2f61 01 | 00000008 00 ffffffff | 00000002 2f62 01 |
         ffffffff 01 ffffffff",
    );
    let Decoded::Request(Request { op: Op::MultiRead(ops), .. }) = decoded else { panic!("{decoded:?}") };
    assert_eq!(
        ops,
        vec![
            Op::GetData { path: "/a".into(), watch: false },
            Op::GetChildren { path: "/b".into(), watch: false, with_stat: false }
        ]
    );
}

#[test]
fn reconfig_request() {
    // joining "server.4=h:1:2", leaving "3", no new member list, curConfigId -1.
    let decoded = request(
        "0000000b 00000010 | 0000000e 7365727665722e343d683a313a32 | 00000001 33 | ffffffff | ffffffffffffffff",
    );
    let Decoded::Request(Request { op, .. }) = decoded else { panic!("{decoded:?}") };
    assert_eq!(
        op,
        Op::Reconfig {
            joining: "server.4=h:1:2".into(),
            leaving: "3".into(),
            new_members: String::new(),
            expected_version: -1
        }
    );
}

#[test]
fn opcodes_we_do_not_serve() {
    let unsupported = |payload: &str| match request(payload) {
        Decoded::Unsupported { xid, opcode, code } => (xid, opcode, code),
        other => panic!("served: {other:?}"),
    };
    // Standalone check: ZooKeeper 3.9 answers UNIMPLEMENTED.
    assert_eq!(unsupported("0000000a 0000000d 00000002 2f61 ffffffff"), (10, 13, ErrorCode::Unimplemented));
    // sasl, deleteContainer and unknown numbers: UNIMPLEMENTED.
    assert_eq!(unsupported("0000000c 00000066 00000000"), (12, 102, ErrorCode::Unimplemented));
    assert_eq!(unsupported("0000000d 00000014"), (13, 20, ErrorCode::Unimplemented));
    assert_eq!(unsupported("0000000e 000003e7"), (14, 999, ErrorCode::Unimplemented));
}

#[test]
fn special_xids_and_bodyless_requests() {
    // Ping (xid -2), whoAmI, closeSession (-11).
    assert_eq!(
        request("fffffffe 0000000b"),
        Decoded::Request(Request { xid: -2, shape: OpCode::Ping.into(), op: Op::Ping })
    );
    assert_eq!(
        request("00000010 0000006b"),
        Decoded::Request(Request { xid: 16, shape: OpCode::WhoAmI.into(), op: Op::WhoAmI })
    );
    assert_eq!(
        request("00000011 fffffff5"),
        Decoded::Request(Request { xid: 17, shape: OpCode::CloseSession.into(), op: Op::CloseSession })
    );
    // auth (xid -4): AuthPacket{type 0, "digest", "a:b"}.
    assert_eq!(
        request("fffffffc 00000064 | 00000000 | 00000006 646967657374 | 00000003 613a62"),
        Decoded::Request(Request {
            xid: -4,
            shape: OpCode::Auth.into(),
            op: Op::Auth { scheme: "digest".into(), auth: Bytes::from_static(b"a:b") }
        })
    );
    // A truncated auth packet is a framing error: ZooKeeper closes the connection.
    assert!(decode_request(&hex("fffffffc 00000064 | 00000000 | 00000006 6469")).is_err());
    // setWatches with xid -8: relativeZxid 0x10, data ["/a"], exist [], child null.
    assert_eq!(
        request("fffffff8 00000065 | 0000000000000010 | 00000001 00000002 2f61 | 00000000 | ffffffff"),
        Decoded::Request(Request {
            xid: -8,
            shape: OpCode::SetWatches.into(),
            op: Op::SetWatches {
                relative_zxid: 0x10,
                data: vec!["/a".into()],
                exist: vec![],
                child: vec![],
                persistent: vec![],
                persistent_recursive: vec![],
            }
        })
    );
    // A header cut short is a framing error.
    assert!(decode_request(&hex("00000001 000000")).is_err());
}

#[test]
fn java_cesu8_paths_and_trailing_bytes() {
    // getData of "/😀" as Java writes it (two 3-byte surrogates), watch=true, then 3 stray bytes.
    let decoded = request("00000012 00000004 | 00000007 2f eda0bd edb880 | 01 | 0a0b0c");
    assert_eq!(
        decoded,
        Decoded::Request(Request {
            xid: 18,
            shape: OpCode::GetData.into(),
            op: Op::GetData { path: "/😀".into(), watch: true }
        })
    );
    // Invalid UTF-8 in a path: MARSHALLINGERROR for that request only.
    assert!(matches!(
        request("00000013 00000004 | 00000002 2fff | 00"),
        Decoded::Rejected { xid: 19, code: ErrorCode::MarshallingError, .. }
    ));
}

#[test]
fn bad_watch_kinds_are_marshalling_errors() {
    assert!(matches!(
        request("00000014 00000012 | 00000002 2f61 | 00000009"),
        Decoded::Rejected { xid: 20, opcode: OpCode::RemoveWatches, code: ErrorCode::MarshallingError, .. }
    ));
    assert!(matches!(
        request("00000015 0000006a | 00000002 2f61 | 00000002"),
        Decoded::Rejected { xid: 21, opcode: OpCode::AddWatch, code: ErrorCode::MarshallingError, .. }
    ));
}

#[test]
fn get_children2_reply() {
    let reply = Ok(OpResult::Children { children: vec!["a".into(), "bc".into()], stat: Some(stat_1_to_11()) });
    assert_eq!(
        encode_reply(7, 0x20, &OpCode::GetChildren2.into(), &reply),
        hex(&format!(
            "00000063 | 00000007 0000000000000020 00000000 | 00000002 00000001 61 00000002 6263 | {STAT_1_TO_11}"
        ))
    );
    // getChildren(8) shapes the same result without the Stat.
    assert_eq!(
        encode_reply(7, 0x20, &OpCode::GetChildren.into(), &reply),
        hex("0000001f | 00000007 0000000000000020 00000000 | 00000002 00000001 61 00000002 6263")
    );
}

#[test]
fn get_data_replies_keep_null_apart_from_empty() {
    let reply = |data| Ok(OpResult::Data { data, stat: stat_1_to_11() });
    // Null data is a buffer of length -1, as ZooKeeper's GetDataResponse writes it.
    assert_eq!(
        encode_reply(3, 0x10, &OpCode::GetData.into(), &reply(Data::NULL)),
        hex(&format!("00000058 | 00000003 0000000000000010 00000000 | ffffffff | {STAT_1_TO_11}"))
    );
    assert_eq!(
        encode_reply(3, 0x10, &OpCode::GetData.into(), &reply(Data::EMPTY)),
        hex(&format!("00000058 | 00000003 0000000000000010 00000000 | 00000000 | {STAT_1_TO_11}"))
    );
}

#[test]
fn error_replies_are_header_only() {
    let expected = hex("00000010 | 00000009 0000000000000030 ffffff9b");
    assert_eq!(encode_reply(9, 0x30, &OpCode::GetData.into(), &Err(ZkError::new(ErrorCode::NoNode, "/x"))), expected);
    assert_eq!(encode_error_reply(9, 0x30, ErrorCode::NoNode), expected);
}

#[test]
fn multi_reply_with_a_failure() {
    // create rolled back (0), setData failed BADVERSION (-103), delete not tried (-2).
    let shape = ReplyShape { opcode: OpCode::Multi, sub_ops: vec![OpCode::Create, OpCode::SetData, OpCode::Delete] };
    let reply = Ok(OpResult::Multi(vec![
        MultiItem::Err(ErrorCode::Ok),
        MultiItem::Err(ErrorCode::BadVersion),
        MultiItem::Err(ErrorCode::RuntimeInconsistency),
    ]));
    assert_eq!(
        encode_reply(5, 0x10, &shape, &reply),
        hex("00000040 | 00000005 0000000000000010 00000000 |
             ffffffff 00 00000000 | 00000000 |
             ffffffff 00 ffffff99 | ffffff99 |
             ffffffff 00 fffffffe | fffffffe |
             ffffffff 01 ffffffff")
    );
}

#[test]
fn multi_reply_success_uses_create2_for_every_create_with_a_stat() {
    let shape = ReplyShape {
        opcode: OpCode::Multi,
        sub_ops: vec![OpCode::Create, OpCode::CreateTtl, OpCode::Delete, OpCode::Check, OpCode::SetData],
    };
    let reply = Ok(OpResult::Multi(vec![
        MultiItem::Ok(OpResult::Created { path: "/a".into(), stat: stat_1_to_11() }),
        MultiItem::Ok(OpResult::Created { path: "/b".into(), stat: stat_1_to_11() }),
        MultiItem::Ok(OpResult::Empty),
        MultiItem::Ok(OpResult::Empty),
        MultiItem::Ok(OpResult::Stat(stat_1_to_11())),
    ]));
    // Length: 16 + (9+6) + (9+6+68) + 9 + 9 + (9+68) + 9 = 218 = 0xda.
    let expected = hex(&format!(
        "000000da | 00000006 0000000000000011 00000000 |
         00000001 00 00000000 | 00000002 2f61 |
         0000000f 00 00000000 | 00000002 2f62 | {STAT_1_TO_11} |
         00000002 00 00000000 |
         0000000d 00 00000000 |
         00000005 00 00000000 | {STAT_1_TO_11} |
         ffffffff 01 ffffffff"
    ));
    assert_eq!(expected.len(), 4 + 218);
    assert_eq!(encode_reply(6, 0x11, &shape, &reply), expected);
}

#[test]
fn watch_notification() {
    let event = WatchEvent { event_type: EventType::NodeDataChanged, path: "/a".into(), zxid: 0x1_0000_0005 };
    assert_eq!(
        encode_notification(&event),
        [
            0x00, 0x00, 0x00, 0x1e, // length 30
            0xff, 0xff, 0xff, 0xff, // xid -1
            0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, // zxid of the event
            0x00, 0x00, 0x00, 0x00, // err 0
            0x00, 0x00, 0x00, 0x03, // NodeDataChanged
            0x00, 0x00, 0x00, 0x03, // SyncConnected
            0x00, 0x00, 0x00, 0x02, b'/', b'a', // path
        ]
    );
}

#[test]
fn ping_auth_add_watch_and_who_am_i_replies() {
    // Ping replies carry xid -2 whatever came; auth replies zxid 0.
    assert_eq!(
        encode_reply(77, 0x40, &OpCode::Ping.into(), &Ok(OpResult::Empty)),
        hex("00000010 | fffffffe 0000000000000040 00000000")
    );
    assert_eq!(
        encode_reply(-4, 0x40, &OpCode::Auth.into(), &Err(ZkError::new(ErrorCode::AuthFailed, ""))),
        hex("00000010 | fffffffc 0000000000000000 ffffff8d")
    );
    // addWatch: ErrorResponse(0) after the header.
    assert_eq!(
        encode_reply(3, 0x40, &OpCode::AddWatch.into(), &Ok(OpResult::Empty)),
        hex("00000014 | 00000003 0000000000000040 00000000 | 00000000")
    );
    // whoAmI: digest ids report the user name only.
    let ids = vec![Id::new("digest", "alice:X/NSthOkEe8vcl/Pb1hZLWW8PXE="), Id::new("ip", "127.0.0.1")];
    assert_eq!(
        encode_reply(4, 0x40, &OpCode::WhoAmI.into(), &Ok(OpResult::Identities(ids))),
        hex("0000003a | 00000004 0000000000000040 00000000 | 00000002 |
             00000006 646967657374 00000005 616c696365 |
             00000002 6970 00000009 3132372e302e302e31")
    );
}

#[test]
fn a_result_that_does_not_fit_the_request_is_answered_marshalling_error() {
    let wrong = encode_reply(8, 0x50, &OpCode::GetData.into(), &Ok(OpResult::Empty));
    assert_eq!(wrong, hex("00000010 | 00000008 0000000000000050 fffffffb"));
    let short_multi = ReplyShape { opcode: OpCode::Multi, sub_ops: vec![OpCode::Delete] };
    let wrong = encode_reply(8, 0x50, &short_multi, &Ok(OpResult::Multi(vec![])));
    assert_eq!(wrong, hex("00000010 | 00000008 0000000000000050 fffffffb"));
    let ok_error = encode_reply(8, 0x50, &OpCode::Delete.into(), &Err(ZkError::new(ErrorCode::Ok, "")));
    assert_eq!(ok_error, hex("00000010 | 00000008 0000000000000050 fffffffb"));
}

#[test]
fn replies_batch_into_one_buffer() {
    use crate::wire::codec::{encode_notification_into, encode_reply_into};
    let mut out = Vec::new();
    encode_reply_into(&mut out, 1, 0x60, &OpCode::Sync.into(), &Ok(OpResult::Synced("/a".into())));
    // A mismatched result in the middle must not leave partial bytes behind.
    encode_reply_into(&mut out, 2, 0x60, &OpCode::GetData.into(), &Ok(OpResult::Synced("/zzzz".into())));
    let event = WatchEvent { event_type: EventType::NodeCreated, path: "/b".into(), zxid: 0x61 };
    encode_notification_into(&mut out, &event);
    assert_eq!(
        out,
        hex("00000016 | 00000001 0000000000000060 00000000 | 00000002 2f61 |
             00000010 | 00000002 0000000000000060 fffffffb |
             0000001e | ffffffff 0000000000000061 00000000 | 00000001 00000003 00000002 2f62")
    );
}
