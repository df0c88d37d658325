//! The tree for the console: a node's children (paged), its data, Stat and
//! ACL, a search by path prefix, and the edits (create, set data, delete,
//! set ACL) that need the admin token.

use super::{hex, ok, query_params, ApiError, ApiResult, Shared};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use zabkeeper_core::acl::{perms, Acl};
use zabkeeper_core::data::Data;
use zabkeeper_core::op::{Op, OpResult};
use zabkeeper_core::tree::path;
use zabkeeper_core::tree::stat::{CreateMode, EphemeralType, Stat};

/// Children one page holds unless asked for fewer.
pub const DEFAULT_PAGE: usize = 100;
/// The most children one page holds.
pub const MAX_PAGE: usize = 1_000;
/// Matches a search returns unless asked for fewer.
const DEFAULT_MATCHES: usize = 50;
/// The most matches a search returns.
const MAX_MATCHES: usize = 500;
/// The most nodes a search lists children of: a bound on its work however
/// large the tree.
const SEARCH_VISITS: usize = 2_000;

/// The `path` parameter, checked by ZooKeeper's rules.
pub fn path_param(params: &HashMap<String, String>) -> Result<String, ApiError> {
    let p = params.get("path").ok_or_else(|| ApiError::BadRequest("the path parameter is required".into()))?;
    checked_path(p)
}

/// `p` if it is a valid ZooKeeper path, else a 400 saying why.
pub fn checked_path(p: &str) -> Result<String, ApiError> {
    path::validate(p, false).map_err(|e| ApiError::BadRequest(format!("invalid path {p:?}: {e}")))?;
    Ok(p.to_string())
}

/// A page of sorted `names`: those after `after` (exclusive), at most
/// `limit`, and the name to ask the next page after, if more follow.
pub fn page<'a>(names: &'a [String], after: Option<&str>, limit: usize) -> (&'a [String], Option<&'a str>) {
    let start = after.map_or(0, |a| names.partition_point(|n| n.as_str() <= a));
    let end = start.saturating_add(limit).min(names.len());
    let slice = names.get(start..end).unwrap_or(&[]);
    let next = if end < names.len() { slice.last().map(String::as_str) } else { None };
    (slice, next)
}

fn limit_param(params: &HashMap<String, String>, default: usize, max: usize) -> Result<usize, ApiError> {
    match params.get("limit") {
        None => Ok(default),
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::BadRequest(format!("limit must be a number from 1 to {max}, not {l:?}"))),
        },
    }
}

/// What kind of node an `ephemeralOwner` denotes, and the TTL of a TTL node.
fn kind(owner: i64) -> &'static str {
    match EphemeralType::of(owner) {
        EphemeralType::Void => "persistent",
        EphemeralType::Normal => "ephemeral",
        EphemeralType::Container => "container",
        EphemeralType::Ttl(_) => "ttl",
    }
}

/// A Stat in the page's words: zxids and the owner as hex, times in ms.
pub fn stat_json(s: &Stat) -> Value {
    let zx = |z: i64| hex(z as u64);
    json!({
        "czxid": zx(s.czxid), "mzxid": zx(s.mzxid), "pzxid": zx(s.pzxid),
        "ctime": s.ctime, "mtime": s.mtime,
        "version": s.version, "cversion": s.cversion, "aversion": s.aversion,
        "ephemeral_owner": zx(s.ephemeral_owner),
        "data_length": s.data_length, "num_children": s.num_children,
        "kind": kind(s.ephemeral_owner),
        "ttl_ms": match EphemeralType::of(s.ephemeral_owner) { EphemeralType::Ttl(ms) => Some(ms), _ => None },
    })
}

/// Permissions as ZooKeeper's CLI spells them (`cdrwa`).
pub fn perms_text(p: i32) -> String {
    [(perms::CREATE, 'c'), (perms::DELETE, 'd'), (perms::READ, 'r'), (perms::WRITE, 'w'), (perms::ADMIN, 'a')]
        .iter()
        .filter(|(bit, _)| p & bit != 0)
        .map(|(_, c)| *c)
        .collect()
}

fn acl_json(list: &[Acl]) -> Value {
    list.iter().map(|a| json!({"scheme": a.id.scheme, "id": a.id.id, "perms": perms_text(a.perms)})).collect()
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Result<Vec<u8>, ApiError> {
    let clean: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let bad = || ApiError::BadRequest("data_hex must be pairs of hex digits".into());
    if !clean.len().is_multiple_of(2) {
        return Err(bad());
    }
    clean
        .chunks(2)
        .map(|pair| std::str::from_utf8(pair).ok().and_then(|p| u8::from_str_radix(p, 16).ok()).ok_or_else(bad))
        .collect()
}

/// The ACL in an edit's body: `[{"scheme", "id", "perms": "cdrwa"}]`.
fn acl_of(value: &Value) -> Result<Vec<Acl>, ApiError> {
    let bad = |why: &str| ApiError::BadRequest(format!("acl: {why}"));
    let items = value.as_array().ok_or_else(|| bad("a list of {scheme, id, perms} is expected"))?;
    if items.is_empty() {
        return Err(bad("an ACL needs at least one entry"));
    }
    items
        .iter()
        .map(|item| {
            let field =
                |name: &str| item.get(name).and_then(Value::as_str).ok_or_else(|| bad(&format!("{name} is missing")));
            let mut bits = 0;
            for c in field("perms")?.chars() {
                bits |= match c {
                    'c' => perms::CREATE,
                    'd' => perms::DELETE,
                    'r' => perms::READ,
                    'w' => perms::WRITE,
                    'a' => perms::ADMIN,
                    other => return Err(bad(&format!("unknown permission {other:?} (use c, d, r, w, a)"))),
                };
            }
            Ok(Acl::new(bits, field("scheme")?, field("id")?))
        })
        .collect()
}

/// An edit's JSON body.
fn body_of(bytes: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ApiError::BadRequest(format!("body: {e}")))?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(ApiError::BadRequest("body: a JSON object is expected".into()))
    }
}

fn data_of(body: &Value) -> Result<Data, ApiError> {
    match (body.get("data").and_then(Value::as_str), body.get("data_hex").and_then(Value::as_str)) {
        (Some(_), Some(_)) => Err(ApiError::BadRequest("give data or data_hex, not both".into())),
        (Some(text), None) => Ok(Data::from(text.as_bytes().to_vec())),
        (None, Some(h)) => Ok(Data::from(from_hex(h)?)),
        (None, None) => Ok(Data::from(Vec::new())),
    }
}

fn version_of(value: Option<&Value>) -> Result<i32, ApiError> {
    let v = value.ok_or_else(|| ApiError::BadRequest("the expected version is required (-1: any)".into()))?;
    let n = v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok()));
    n.and_then(|n| i32::try_from(n).ok())
        .filter(|n| *n >= -1)
        .ok_or_else(|| ApiError::BadRequest(format!("version must be a number, -1 or more, not {v}")))
}

fn body_path(body: &Value) -> Result<String, ApiError> {
    let p = body.get("path").and_then(Value::as_str);
    checked_path(p.ok_or_else(|| ApiError::BadRequest("path is required".into()))?)
}

fn unexpected(what: &str) -> ApiError {
    ApiError::Internal(format!("the replica answered {what} with an unexpected result"))
}

/// `GET /ui/api/children?path=&after=&limit=`: a page of a node's children,
/// each with its child count and whether it is ephemeral.
pub async fn children(State(console): State<Shared>, uri: Uri, headers: HeaderMap) -> ApiResult {
    let params = query_params(uri.query());
    let path = path_param(&params)?;
    let limit = limit_param(&params, DEFAULT_PAGE, MAX_PAGE)?;
    let session = console.session_for(&headers);
    let op = Op::GetChildren { path: path.clone(), watch: false, with_stat: false };
    let OpResult::Children { mut children, .. } = session.call(op).await? else {
        return Err(unexpected("getChildren"));
    };
    children.sort();
    let (shown, next) = page(&children, params.get("after").map(String::as_str), limit);
    let ops = shown.iter().map(|c| Op::Exists { path: path::join(&path, c), watch: false }).collect();
    let stats = session.call_many(ops).await?;
    let items: Vec<Value> = shown
        .iter()
        .zip(stats)
        .map(|(name, stat)| match stat {
            Ok(OpResult::Stat(s)) => {
                json!({"name": name, "num_children": s.num_children, "kind": kind(s.ephemeral_owner), "data_length": s.data_length})
            }
            // Deleted between the two reads: still listed, without figures.
            _ => json!({"name": name}),
        })
        .collect();
    ok(&json!({"path": path, "total": children.len(), "children": items, "next": next}))
}

/// `GET /ui/api/node?path=`: a node's data (hex), Stat and ACL.
pub async fn node(State(console): State<Shared>, uri: Uri, headers: HeaderMap) -> ApiResult {
    let path = path_param(&query_params(uri.query()))?;
    let ops = vec![Op::GetData { path: path.clone(), watch: false }, Op::GetAcl { path: path.clone() }];
    let mut replies = console.session_for(&headers).call_many(ops).await?.into_iter();
    let (Some(data), Some(acl)) = (replies.next(), replies.next()) else { return Err(unexpected("getData")) };
    let OpResult::Data { data, stat } = data? else { return Err(unexpected("getData")) };
    // The ACL may be unreadable where the data is not (no ADMIN... or READ
    // on it); the data is still shown.
    let acl = match acl {
        Ok(OpResult::Acl { acl, .. }) => acl_json(&acl),
        _ => Value::Null,
    };
    let bytes = data.as_option().map(|b| b.to_vec());
    ok(&json!({
        "path": path,
        "data_hex": bytes.as_deref().map(to_hex),
        "stat": stat_json(&stat),
        "acl": acl,
    }))
}

/// `GET /ui/api/search?prefix=&limit=`: paths starting with `prefix`,
/// breadth first, bounded in matches and in nodes visited.
pub async fn search(State(console): State<Shared>, uri: Uri, headers: HeaderMap) -> ApiResult {
    let params = query_params(uri.query());
    let prefix = params.get("prefix").cloned().unwrap_or_else(|| "/".into());
    let limit = limit_param(&params, DEFAULT_MATCHES, MAX_MATCHES)?;
    let (parent, stem) = match prefix.rsplit_once('/') {
        Some(("", stem)) => ("/".to_string(), stem.to_string()),
        Some((parent, stem)) => (checked_path(parent)?, stem.to_string()),
        None => return Err(ApiError::BadRequest(format!("prefix {prefix:?} must start with /"))),
    };
    let session = console.session_for(&headers);
    let mut matches: Vec<String> = Vec::new();
    let mut queue: VecDeque<(String, bool)> = VecDeque::from([(parent, false)]);
    let mut visits = 0;
    let mut truncated = false;
    while let Some((dir, inside)) = queue.pop_front() {
        if visits >= SEARCH_VISITS || matches.len() >= limit {
            truncated = true;
            break;
        }
        visits += 1;
        let op = Op::GetChildren { path: dir.clone(), watch: false, with_stat: false };
        let mut names = match session.call(op).await {
            Ok(OpResult::Children { children, .. }) => children,
            // Gone meanwhile, or not readable: skipped.
            Ok(_) | Err(super::session::CallError::Zk(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        names.sort();
        for name in names.iter().filter(|n| inside || n.starts_with(&stem)) {
            let child = path::join(&dir, name);
            if matches.len() < limit {
                matches.push(child.clone());
            } else {
                truncated = true;
            }
            queue.push_back((child, true));
        }
    }
    ok(&json!({"prefix": prefix, "matches": matches, "truncated": truncated}))
}

/// `POST /ui/api/node` `{path, data | data_hex, mode, acl}` (token).
pub async fn create(State(console): State<Shared>, headers: HeaderMap, bytes: Bytes) -> ApiResult {
    console.authorized(&headers)?;
    let body = body_of(&bytes)?;
    let mode = match body.get("mode").and_then(Value::as_str).unwrap_or("persistent") {
        "persistent" => CreateMode::Persistent,
        "persistent_sequential" => CreateMode::PersistentSequential,
        "container" => CreateMode::Container,
        other => {
            let why = format!("mode {other:?}: the console creates persistent, persistent_sequential or container nodes (an ephemeral would belong to the console's session)");
            return Err(ApiError::BadRequest(why));
        }
    };
    let p = body.get("path").and_then(Value::as_str).ok_or_else(|| ApiError::BadRequest("path is required".into()))?;
    path::validate(p, mode == CreateMode::PersistentSequential)
        .map_err(|e| ApiError::BadRequest(format!("invalid path {p:?}: {e}")))?;
    let acl = match body.get("acl") {
        Some(a) if !a.is_null() => acl_of(a)?,
        _ => Acl::open_unsafe(),
    };
    let op = Op::Create { path: p.to_string(), data: data_of(&body)?, acl, mode, ttl_ms: -1 };
    let OpResult::Created { path, stat } = console.admin.call(op).await? else { return Err(unexpected("create")) };
    ok(&json!({"path": path, "stat": stat_json(&stat)}))
}

/// `PUT /ui/api/node` `{path, data | data_hex, version}` (token).
pub async fn set_data(State(console): State<Shared>, headers: HeaderMap, bytes: Bytes) -> ApiResult {
    console.authorized(&headers)?;
    let body = body_of(&bytes)?;
    let op = Op::SetData { path: body_path(&body)?, data: data_of(&body)?, version: version_of(body.get("version"))? };
    let OpResult::Stat(stat) = console.admin.call(op).await? else { return Err(unexpected("setData")) };
    ok(&json!({"stat": stat_json(&stat)}))
}

/// `DELETE /ui/api/node?path=&version=` (token).
pub async fn delete(State(console): State<Shared>, uri: Uri, headers: HeaderMap) -> ApiResult {
    console.authorized(&headers)?;
    let params = query_params(uri.query());
    let path = path_param(&params)?;
    let version = version_of(params.get("version").map(|v| Value::String(v.clone())).as_ref())?;
    console.admin.call(Op::Delete { path: path.clone(), version }).await?;
    ok(&json!({"deleted": path}))
}

/// `PUT /ui/api/acl` `{path, acl, version}` (token).
pub async fn set_acl(State(console): State<Shared>, headers: HeaderMap, bytes: Bytes) -> ApiResult {
    console.authorized(&headers)?;
    let body = body_of(&bytes)?;
    let acl = acl_of(body.get("acl").unwrap_or(&Value::Null))?;
    let op = Op::SetAcl { path: body_path(&body)?, acl, version: version_of(body.get("version"))? };
    let OpResult::Stat(stat) = console.admin.call(op).await? else { return Err(unexpected("setACL")) };
    ok(&json!({"stat": stat_json(&stat)}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i:03}")).collect()
    }

    #[test]
    fn children_are_paged_after_a_name() {
        let all = names(250);
        let (first, next) = page(&all, None, 100);
        assert_eq!((first.len(), first[0].as_str(), next), (100, "c000", Some("c099")));
        let (second, next) = page(&all, next, 100);
        assert_eq!((second[0].as_str(), next), ("c100", Some("c199")));
        let (last, next) = page(&all, next, 100);
        assert_eq!((last.len(), next), (50, None));
        let (none, next) = page(&all, Some("zzz"), 100);
        assert_eq!((none.len(), next), (0, None));
        let hundred = names(100);
        let (exact, next) = page(&hundred, None, 100);
        assert_eq!((exact.len(), next), (100, None), "no next page when all fit");
    }

    #[test]
    fn bad_paths_are_a_400_naming_bad_arguments() {
        for bad in ["", "app", "/app/", "//a", "/a/../b", "/a\u{1}"] {
            let mut params = HashMap::new();
            params.insert("path".to_string(), bad.to_string());
            let e = path_param(&params).err();
            let response = e.map(IntoResponse::into_response);
            assert_eq!(response.map(|r| r.status()), Some(axum::http::StatusCode::BAD_REQUEST), "{bad:?}");
        }
        assert!(path_param(&HashMap::new()).is_err(), "a missing path");
        assert!(checked_path("/app/config").is_ok());
    }

    #[test]
    fn limits_and_versions_are_checked() {
        let with = |v: &str| HashMap::from([("limit".to_string(), v.to_string())]);
        assert_eq!(limit_param(&with("5"), 100, 1000).ok(), Some(5));
        for bad in ["0", "1001", "-1", "x"] {
            assert!(limit_param(&with(bad), 100, 1000).is_err(), "{bad}");
        }
        assert_eq!(version_of(Some(&json!(3))).ok(), Some(3));
        assert_eq!(version_of(Some(&json!("-1"))).ok(), Some(-1));
        assert!(version_of(None).is_err());
        assert!(version_of(Some(&json!(-2))).is_err());
        assert!(version_of(Some(&json!(1u64 << 40))).is_err());
    }

    #[test]
    fn acls_and_data_are_read_from_the_body() {
        let acl = acl_of(&json!([{"scheme": "world", "id": "anyone", "perms": "rw"}])).ok();
        assert_eq!(acl, Some(vec![Acl::new(perms::READ | perms::WRITE, "world", "anyone")]));
        assert!(acl_of(&json!([])).is_err());
        assert!(acl_of(&json!([{"scheme": "world", "id": "anyone", "perms": "rx"}])).is_err());
        assert!(acl_of(&json!("world:anyone")).is_err());
        assert_eq!(perms_text(perms::ALL), "cdrwa");
        assert_eq!(data_of(&json!({"data_hex": "6869"})).ok().map(|d| d.to_vec()), Some(b"hi".to_vec()));
        assert!(data_of(&json!({"data_hex": "6"})).is_err());
        assert!(data_of(&json!({"data_hex": "zz"})).is_err());
        assert!(data_of(&json!({"data": "a", "data_hex": "61"})).is_err());
        assert!(body_of(b"[1]").is_err());
        assert!(body_of(b"{").is_err());
        assert_eq!(to_hex(&[0, 255, 16]), "00ff10");
    }

    #[test]
    fn a_stat_shows_ids_in_hex() {
        let s = Stat { czxid: 0x1_0000_0002, ephemeral_owner: 0x100_0000_0000_0001, ..Stat::default() };
        let j = stat_json(&s);
        assert_eq!(j["czxid"], "0x100000002");
        assert_eq!(j["ephemeral_owner"], "0x100000000000001");
    }
}
