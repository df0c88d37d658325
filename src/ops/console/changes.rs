//! Changes and snapshots for the console, served by the admin API's own
//! code (`ops::admin_grpc`): the live stream of committed transactions (its
//! Follow, as server-sent events), the log by zxid range, one entry with its
//! ops, and the member's snapshots (list; take and download with the token).

use super::tree::to_hex;
use super::{hex, ok, parse_u64, query_params, ApiError, ApiResult, Shared};
use crate::ops::admin_grpc::AdminService;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::HashMap;
use tonic::{Code, Request, Status};
use zabkeeper_proto::admin as pb;
use zabkeeper_proto::admin::admin_server::Admin;

/// Data bytes of an op a listing shows (an opened entry shows them all).
const LISTED_DATA: usize = 256;
/// Entries one page of the log holds unless asked for fewer.
const DEFAULT_ENTRIES: u32 = 100;

/// The admin API's answer as the console's error.
fn from_status(s: &Status) -> ApiError {
    let message = s.message().to_string();
    match s.code() {
        Code::InvalidArgument | Code::OutOfRange => ApiError::BadRequest(message),
        Code::NotFound => ApiError::NotFound(message),
        _ => ApiError::Internal(message),
    }
}

fn acl_json(list: &[pb::Acl]) -> Value {
    list.iter().map(|a| json!({"scheme": a.scheme, "id": a.id, "perms": super::tree::perms_text(a.perms)})).collect()
}

/// How much of the ops' data an entry shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reveal {
    /// None: the log holds every write's data whatever the node's ACL, so
    /// only a caller with the admin token sees it.
    Nothing,
    /// The first bytes of each op's data (a listing).
    Start,
    /// All of it (one entry opened).
    All,
}

/// A log entry as the page shows it, with as much of its data as `reveal` says.
pub fn entry_json(e: &pb::LogEntry, reveal: Reveal) -> Value {
    let ops: Vec<Value> = e
        .ops
        .iter()
        .map(|op| {
            let shown = match reveal {
                Reveal::Nothing => None,
                Reveal::Start => Some(to_hex(&op.data[..op.data.len().min(LISTED_DATA)])),
                Reveal::All => Some(to_hex(&op.data)),
            };
            json!({
                "type": op.r#type,
                "path": op.path,
                "data_hex": shown,
                "data_length": op.data.len(),
                "version": op.version,
                "acl": acl_json(&op.acl),
                "ephemeral_owner": hex(op.ephemeral_owner as u64),
                "paths": op.paths,
                "timeout_ms": op.timeout_ms,
                "error": op.error,
            })
        })
        .collect();
    json!({
        "zxid": hex(e.zxid),
        "session": hex(e.session_id as u64),
        "cxid": e.cxid,
        "time_ms": e.time_ms,
        "type": e.r#type,
        "description": e.description,
        "size_bytes": e.size_bytes,
        "committed": e.committed,
        "ops": ops,
    })
}

/// The filters the stream and the log take: `prefix` and `type`.
fn filters(params: &HashMap<String, String>) -> (String, String) {
    let get = |k: &str| params.get(k).cloned().unwrap_or_default();
    (get("prefix"), get("type"))
}

/// `GET /ui/api/changes?prefix=&type=&from=`: committed transactions as
/// they are applied, one server-sent event (`entry`, JSON) each.
pub async fn stream(State(console): State<Shared>, uri: Uri, headers: HeaderMap) -> Result<Response, ApiError> {
    // The log names every write's path, session and ACL ids: the token, as
    // the admin API's Follow asks for it.
    console.authorized(&headers)?;
    let params = query_params(uri.query());
    let (path_prefix, kind) = filters(&params);
    let from_zxid = params.get("from").map(|z| parse_u64("from", z)).transpose()?.unwrap_or(0);
    let request = pb::FollowRequest { from_zxid, path_prefix, session_id: None, r#type: kind };
    let service = AdminService::new(console.handle.clone());
    let entries = service.follow(Request::new(request)).await.map_err(|s| from_status(&s))?.into_inner();
    let events = entries.map(|item| {
        let event = match item {
            // An EventSource cannot send the token: the stream never carries data.
            Ok(e) => Event::default().event("entry").data(entry_json(&e, Reveal::Nothing).to_string()),
            Err(s) => Event::default().event("failed").data(json!({"message": s.message()}).to_string()),
        };
        Ok::<_, std::convert::Infallible>(event)
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

/// `GET /ui/api/log?from=&to=&last=&prefix=&type=&limit=`: a page of the
/// log (the start of each op's data with the token).
pub async fn log(State(console): State<Shared>, uri: Uri, headers: HeaderMap) -> ApiResult {
    console.authorized(&headers)?;
    let reveal = Reveal::Start;
    let params = query_params(uri.query());
    let (path_prefix, kind) = filters(&params);
    let zxid = |name: &str| params.get(name).filter(|v| !v.is_empty()).map(|z| parse_u64(name, z)).transpose();
    let number = |name: &str, max: u32| -> Result<u32, ApiError> {
        match params.get(name).filter(|v| !v.is_empty()) {
            None => Ok(0),
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| ApiError::BadRequest(format!("{name} must be a number from 0 to {max}, not {v:?}"))),
        }
    };
    let limit = match number("limit", crate::ops::admin_grpc::MAX_LOG_ENTRIES)? {
        0 => DEFAULT_ENTRIES,
        n => n,
    };
    let request = pb::ReadLogRequest {
        from_zxid: zxid("from")?.unwrap_or(0),
        to_zxid: zxid("to")?.unwrap_or(0),
        last: number("last", crate::ops::admin_grpc::MAX_LOG_ENTRIES)?,
        limit,
        path_prefix,
        r#type: kind,
        ..pb::ReadLogRequest::default()
    };
    let service = AdminService::new(console.handle.clone());
    let page = service.read_log(Request::new(request)).await.map_err(|s| from_status(&s))?.into_inner();
    ok(&json!({
        "entries": page.entries.iter().map(|e| entry_json(e, reveal)).collect::<Vec<_>>(),
        "first_zxid": hex(page.first_zxid),
        "last_zxid": hex(page.last_zxid),
        "next_zxid": (page.next_zxid != 0).then(|| hex(page.next_zxid)),
        "last_committed_zxid": hex(page.last_committed_zxid),
    }))
}

/// `GET /ui/api/log/<zxid>`: one entry with all its ops (their data with the token).
pub async fn entry(State(console): State<Shared>, Path(zxid): Path<String>, headers: HeaderMap) -> ApiResult {
    console.authorized(&headers)?;
    let reveal = Reveal::All;
    let zxid = parse_u64("zxid", &zxid)?;
    let service = AdminService::new(console.handle.clone());
    let e = service.get_entry(Request::new(pb::GetEntryRequest { zxid })).await.map_err(|s| from_status(&s))?;
    ok(&entry_json(e.get_ref(), reveal))
}

/// `GET /ui/api/snapshots`: the member's snapshots, oldest first.
pub async fn snapshots(State(console): State<Shared>) -> ApiResult {
    let service = AdminService::new(console.handle.clone());
    let reply = service.list_snapshots(Request::new(pb::ListSnapshotsRequest {})).await;
    let list = reply.map_err(|s| from_status(&s))?.into_inner().snapshots;
    let items: Vec<Value> = list
        .iter()
        .map(|s| json!({"zxid": hex(s.zxid), "size_bytes": s.size_bytes, "node_count": s.node_count, "created_ms": s.created_ms, "chunks": s.chunks}))
        .collect();
    ok(&json!({"snapshots": items}))
}

/// `POST /ui/api/snapshots` (token): takes a snapshot now.
pub async fn take_snapshot(State(console): State<Shared>, headers: HeaderMap) -> ApiResult {
    console.authorized(&headers)?;
    let service = AdminService::new(console.handle.clone());
    let reply = service.take_snapshot(Request::new(pb::TakeSnapshotRequest {})).await;
    let r = reply.map_err(|s| from_status(&s))?.into_inner();
    ok(&json!({"zxid": hex(r.zxid), "size_bytes": r.size_bytes, "node_count": r.node_count}))
}

/// `GET /ui/api/snapshots/<zxid>` (token): the snapshot's bytes, the file
/// `zkctl admin snapshot save` writes and `restore` reads.
pub async fn download(State(console): State<Shared>, Path(zxid): Path<String>, headers: HeaderMap) -> ApiResult {
    console.authorized(&headers)?;
    let zxid = parse_u64("zxid", &zxid)?;
    let service = AdminService::new(console.handle.clone());
    let chunks = service.save_snapshot(Request::new(pb::SaveSnapshotRequest { zxid })).await;
    let chunks = chunks.map_err(|s| from_status(&s))?.into_inner();
    let body = chunks
        .map(|c| c.map(|c| bytes::Bytes::from(c.data)).map_err(|s| std::io::Error::other(s.message().to_string())));
    let name = format!("attachment; filename=\"snapshot-0x{zxid:x}.zsnap\"");
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream".to_string()), (header::CONTENT_DISPOSITION, name)],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_shows_its_ops_with_their_data_only_with_the_token() {
        let op = pb::TxnOp {
            r#type: "setData".into(),
            path: "/a".into(),
            data: vec![7; 1000],
            version: 3,
            ..pb::TxnOp::default()
        };
        let e = pb::LogEntry {
            zxid: 0x1_0000_0005,
            session_id: -1,
            r#type: "setData".into(),
            ops: vec![op],
            ..pb::LogEntry::default()
        };
        let listed = entry_json(&e, Reveal::Start);
        assert_eq!(listed["zxid"], "0x100000005");
        assert_eq!(listed["session"], "0xffffffffffffffff");
        assert_eq!(listed["ops"][0]["data_length"], 1000);
        assert_eq!(listed["ops"][0]["data_hex"].as_str().map(str::len), Some(2 * LISTED_DATA));
        assert_eq!(entry_json(&e, Reveal::All)["ops"][0]["data_hex"].as_str().map(str::len), Some(2000));
        let hidden = entry_json(&e, Reveal::Nothing);
        assert_eq!(
            (hidden["ops"][0]["data_hex"].clone(), hidden["ops"][0]["data_length"].clone()),
            (Value::Null, json!(1000))
        );
    }

    #[test]
    fn admin_api_refusals_become_400_404_or_500() {
        use axum::http::StatusCode;
        let status = |s: Status| from_status(&s).into_response().status();
        assert_eq!(status(Status::invalid_argument("unknown type")), StatusCode::BAD_REQUEST);
        assert_eq!(status(Status::out_of_range("purged")), StatusCode::BAD_REQUEST);
        assert_eq!(status(Status::not_found("no entry")), StatusCode::NOT_FOUND);
        assert_eq!(status(Status::internal("disk")), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
