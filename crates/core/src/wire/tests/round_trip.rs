//! Round trips: every record, the handshake, requests (client encode →
//! server decode) and replies (server encode → client decode).

use super::gen::{self, Gen};
use crate::acl::{Acl, Id};
use crate::tree::stat::Stat;
use crate::wire::client_codec::{
    decode_connect_response, decode_notification, decode_reply, encode_connect, encode_request,
};
use crate::wire::codec::{
    decode_connect, decode_request, encode_connect_response, encode_notification, encode_reply, Decoded, Request,
};
use crate::wire::frame::{check_frame, FrameStatus};
use crate::wire::jute::{Jute, Reader};
use crate::wire::opcode::PING_XID;
use crate::wire::records::*;
use crate::wire::OpCode;
use proptest::prelude::*;

/// The payload of a whole frame, checking the prefix on the way.
fn payload(frame: &[u8]) -> &[u8] {
    match check_frame(frame, usize::MAX) {
        FrameStatus::Frame { payload, consumed } => {
            assert_eq!(consumed, frame.len(), "a frame must be exactly its prefix plus payload");
            payload
        }
        other => panic!("not a whole frame: {other:?}"),
    }
}

/// Encodes, checks the encoding is consumed exactly, decodes.
fn round_trip<T: Jute + PartialEq + std::fmt::Debug>(value: &T) -> Result<(), TestCaseError> {
    let bytes = to_bytes(value);
    let mut r = Reader::new(&bytes);
    let back = T::read(&mut r, "test");
    prop_assert_eq!(back.as_ref(), Ok(value));
    prop_assert_eq!(r.remaining(), 0);
    prop_assert!(bytes.len() >= T::MIN_LEN);
    Ok(())
}

macro_rules! record_round_trips {
    ($($test:ident: $ty:ty,)*) => {
        proptest! {
            $(
                #[test]
                fn $test(value in <$ty as Gen>::strategy()) {
                    round_trip(&value)?;
                }
            )*
        }
    };
}

record_round_trips! {
    stat_round_trips: Stat,
    id_round_trips: Id,
    acl_round_trips: Acl,
    request_header_round_trips: RequestHeader,
    reply_header_round_trips: ReplyHeader,
    multi_header_round_trips: MultiHeader,
    auth_packet_round_trips: AuthPacket,
    set_watches_round_trips: SetWatches,
    set_watches2_round_trips: SetWatches2,
    get_data_request_round_trips: GetDataRequest,
    set_data_request_round_trips: SetDataRequest,
    set_data_response_round_trips: SetDataResponse,
    create_request_round_trips: CreateRequest,
    create_ttl_request_round_trips: CreateTtlRequest,
    delete_request_round_trips: DeleteRequest,
    get_children_request_round_trips: GetChildrenRequest,
    get_all_children_number_request_round_trips: GetAllChildrenNumberRequest,
    get_children2_request_round_trips: GetChildren2Request,
    check_version_request_round_trips: CheckVersionRequest,
    sync_request_round_trips: SyncRequest,
    sync_response_round_trips: SyncResponse,
    get_acl_request_round_trips: GetAclRequest,
    set_acl_request_round_trips: SetAclRequest,
    set_acl_response_round_trips: SetAclResponse,
    add_watch_request_round_trips: AddWatchRequest,
    watcher_event_round_trips: WatcherEvent,
    error_response_round_trips: ErrorResponse,
    create_response_round_trips: CreateResponse,
    create2_response_round_trips: Create2Response,
    exists_request_round_trips: ExistsRequest,
    exists_response_round_trips: ExistsResponse,
    get_data_response_round_trips: GetDataResponse,
    get_children_response_round_trips: GetChildrenResponse,
    get_all_children_number_response_round_trips: GetAllChildrenNumberResponse,
    get_children2_response_round_trips: GetChildren2Response,
    get_acl_response_round_trips: GetAclResponse,
    check_watches_request_round_trips: CheckWatchesRequest,
    remove_watches_request_round_trips: RemoveWatchesRequest,
    get_ephemerals_request_round_trips: GetEphemeralsRequest,
    get_ephemerals_response_round_trips: GetEphemeralsResponse,
    client_info_round_trips: ClientInfo,
    who_am_i_response_round_trips: WhoAmIResponse,
}

fn connect_request() -> impl Strategy<Value = ConnectRequest> {
    (any::<i32>(), any::<i64>(), any::<i32>(), any::<i64>(), <bytes::Bytes as Gen>::strategy(), any::<Option<bool>>())
        .prop_map(|(protocol_version, last_zxid_seen, timeout_ms, session_id, passwd, read_only)| ConnectRequest {
            protocol_version,
            last_zxid_seen,
            timeout_ms,
            session_id,
            passwd,
            read_only,
        })
}

proptest! {
    #[test]
    fn stat_is_always_68_bytes(stat in Stat::strategy()) {
        prop_assert_eq!(to_bytes(&stat).len(), 68);
    }

    #[test]
    fn connect_request_round_trips_with_and_without_read_only(request in connect_request()) {
        let frame = encode_connect(&request);
        prop_assert_eq!(decode_connect(payload(&frame)), Ok(request));
    }

    #[test]
    fn connect_response_echoes_read_only_only_if_the_client_sent_it(
        request in connect_request(),
        timeout in any::<i32>(),
        session in any::<i64>(),
        passwd in <bytes::Bytes as Gen>::strategy(),
        read_only_server in any::<bool>(),
    ) {
        let response = ConnectResponse::accept(&request, timeout, session, passwd, read_only_server);
        let decoded = decode_connect_response(payload(&encode_connect_response(&response))).unwrap();
        prop_assert_eq!(decoded.read_only, request.read_only.map(|_| read_only_server));
        prop_assert_eq!(decoded, response);
    }

    #[test]
    fn every_request_round_trips(xid in any::<i32>(), (shape, op) in gen::request()) {
        let frame = encode_request(xid, &shape, &op).unwrap();
        let decoded = decode_request(payload(&frame));
        prop_assert_eq!(decoded, Ok(Decoded::Request(Request { xid, shape, op })));
    }

    #[test]
    fn every_reply_round_trips(xid in 1..i32::MAX, zxid in any::<i64>(), (shape, reply) in gen::reply()) {
        let frame = encode_reply(xid, zxid, &shape, &reply);
        let (header, back) = decode_reply(payload(&frame), &shape).unwrap();
        let want_xid = if shape.opcode == OpCode::Ping { PING_XID } else { xid };
        let want_zxid = if shape.opcode == OpCode::Auth { 0 } else { zxid };
        let want_err = reply.as_ref().err().map_or(0, |e| e.code.code());
        prop_assert_eq!(header, ReplyHeader { xid: want_xid, zxid: want_zxid, err: want_err });
        prop_assert_eq!(back, reply);
    }

    #[test]
    fn every_notification_round_trips(event in gen::watch_event()) {
        let frame = encode_notification(&event);
        prop_assert_eq!(decode_notification(payload(&frame)), Ok((event, STATE_SYNC_CONNECTED)));
    }
}
