//! The web console at `/ui/` on the member's HTTP listener: one page (plain
//! HTML, CSS and JavaScript, embedded in the binary) that routes by its own
//! URL, and the JSON API under `/ui/api/` it reads.
//!
//! Reads and edits of the tree go through the console's own client session
//! ([`session`]), so an edit is replicated like any client's write. Edits,
//! snapshot taking and downloading need the admin token, checked as the
//! AdminServer commands check it ([`super::admin_http::authorize`]); requests
//! that carry it use a session with the `super` identity (ACLs do not stop
//! an operator), the others one with no identity (what `world` may see).

pub mod changes;
pub mod ensemble;
pub mod session;
pub mod tree;

use super::admin_http::{authorize_request, AuthError};
use crate::runtime::handle::Handle;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use session::{CallError, ConsoleSession};
use std::collections::HashMap;
use std::sync::Arc;
use zabkeeper_core::acl::Id;
use zabkeeper_core::error::{ErrorCode, ZkError};

/// The page every `/ui/*` URL answers; its script routes by `location.pathname`.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// The console's script.
const CONSOLE_JS: &str = include_str!("assets/console.js");
/// The console's style sheet.
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// What every console handler shares.
pub struct Console {
    /// The replica.
    pub handle: Handle,
    /// Reads for callers without the token.
    plain: ConsoleSession,
    /// Reads and edits for callers with the token.
    admin: ConsoleSession,
}

/// The shared console state, as handlers receive it.
pub type Shared = Arc<Console>;

impl Console {
    /// The console of `handle`'s replica.
    pub fn new(handle: Handle) -> Console {
        Console {
            plain: ConsoleSession::new(handle.clone(), Vec::new()),
            admin: ConsoleSession::new(handle.clone(), vec![Id::new("super", "zabkeeper-console")]),
            handle,
        }
    }

    /// Whether `headers` carry the admin token (or none is needed here).
    pub fn authorized(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        authorize_request(&self.handle.config, headers).map_err(ApiError::Auth)
    }

    /// The session a request with `headers` reads through.
    pub fn session_for(&self, headers: &HeaderMap) -> &ConsoleSession {
        if self.authorized(headers).is_ok() {
            &self.admin
        } else {
            &self.plain
        }
    }

    /// The console's session ids (so the sessions view can name them).
    pub async fn own_sessions(&self) -> Vec<zabkeeper_core::ids::SessionId> {
        self.plain.id().await.into_iter().chain(self.admin.id().await).collect()
    }
}

/// Why a console API request failed; the JSON names ZooKeeper's error.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request itself is wrong (a bad path, parameter or body).
    #[error("{0}")]
    BadRequest(String),
    /// The token is missing or wrong.
    #[error(transparent)]
    Auth(AuthError),
    /// The replica answered with an error, or could not answer.
    #[error(transparent)]
    Call(#[from] CallError),
    /// Refused before any check of the token (a write not from the page).
    #[error("{0}")]
    Forbidden(String),
    /// Nothing there (a log entry or snapshot).
    #[error("{0}")]
    NotFound(String),
    /// Storage, or the replica stopping.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status and ZooKeeper's error name.
    fn status_and_name(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, ErrorCode::BadArguments.name()),
            ApiError::Auth(AuthError::NoTokenRemote | AuthError::ForeignHost) | ApiError::Forbidden(_) => {
                (StatusCode::FORBIDDEN, ErrorCode::NoAuth.name())
            }
            ApiError::Auth(_) => (StatusCode::UNAUTHORIZED, ErrorCode::NoAuth.name()),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::SystemError.name()),
            ApiError::Call(CallError::Zk(e)) => (status_of(e.code), e.code.name()),
            ApiError::Call(CallError::Unavailable(_)) => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ConnectionLoss.name())
            }
            ApiError::Call(CallError::TimedOut) => (StatusCode::GATEWAY_TIMEOUT, ErrorCode::OperationTimeout.name()),
        }
    }
}

/// The HTTP status that says what a ZooKeeper error code says.
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::NoNode => StatusCode::NOT_FOUND,
        ErrorCode::NodeExists | ErrorCode::BadVersion | ErrorCode::NotEmpty | ErrorCode::NoChildrenForEphemerals => {
            StatusCode::CONFLICT
        }
        ErrorCode::NoAuth | ErrorCode::AuthFailed => StatusCode::FORBIDDEN,
        ErrorCode::BadArguments | ErrorCode::InvalidAcl => StatusCode::BAD_REQUEST,
        ErrorCode::ConnectionLoss | ErrorCode::SessionExpired | ErrorCode::NotReadOnly => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ErrorCode::OperationTimeout | ErrorCode::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<ZkError> for ApiError {
    fn from(e: ZkError) -> ApiError {
        ApiError::Call(CallError::Zk(e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, name) = self.status_and_name();
        let path = match &self {
            ApiError::Call(CallError::Zk(e)) if !e.path.is_empty() => Some(e.path.clone()),
            _ => None,
        };
        json_response(status, &json!({"error": name, "message": self.to_string(), "path": path}))
    }
}

/// A JSON answer (compact: the page reads it, not a person).
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let text = serde_json::to_string(body).unwrap_or_else(|_| "{}".into());
    (status, [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], text).into_response()
}

/// The answer of a handler: JSON, or an error as JSON.
pub type ApiResult = Result<Response, ApiError>;

/// A JSON 200.
pub fn ok(body: &Value) -> ApiResult {
    Ok(json_response(StatusCode::OK, body))
}

/// A zxid or session id as the page shows it (hex: JavaScript numbers lose
/// the low bits of a 64-bit id).
pub fn hex(n: u64) -> String {
    format!("0x{n:x}")
}

/// Parses a zxid as the page sends it: `0x`-prefixed hex or decimal.
pub fn parse_u64(name: &str, text: &str) -> Result<u64, ApiError> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| ApiError::BadRequest(format!("{name}: {text:?} is not a number (decimal or 0x-hex)")))
}

/// A query string's parameters, percent-decoded (`+` is a space, as forms send it).
pub fn query_params(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Decodes `%XX` escapes; a malformed escape is kept as written, and bytes
/// that are not UTF-8 become U+FFFD (a path with them is refused later).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escaped = (b == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, escaped) {
            (_, Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                i += 1;
            }
            (_, None) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The routes of the console and its API, for the listener's router.
pub fn routes(handle: Handle) -> axum::Router {
    use axum::routing::get;
    let console: Shared = Arc::new(Console::new(handle));
    let api = axum::Router::new()
        .route("/ui/api/member", get(ensemble::member))
        .route("/ui/api/ensemble", get(ensemble::ensemble))
        .route("/ui/api/connections", get(ensemble::connections))
        .route("/ui/api/sessions", get(ensemble::sessions))
        .route("/ui/api/children", get(tree::children))
        .route("/ui/api/node", get(tree::node).post(tree::create).put(tree::set_data).delete(tree::delete))
        .route("/ui/api/acl", axum::routing::put(tree::set_acl))
        .route("/ui/api/search", get(tree::search))
        .route("/ui/api/changes", get(changes::stream))
        .route("/ui/api/log", get(changes::log))
        .route("/ui/api/log/{zxid}", get(changes::entry))
        .route("/ui/api/snapshots", get(changes::snapshots).post(changes::take_snapshot))
        .route("/ui/api/snapshots/{zxid}", get(changes::download))
        .route("/ui/api/{*rest}", get(unknown_api))
        .layer(axum::middleware::from_fn(only_the_page_writes))
        .with_state(console);
    axum::Router::new()
        .route("/ui", get(|| async { axum::response::Redirect::permanent("/ui/") }))
        .route("/ui/", get(page))
        .route("/ui/{*rest}", get(page))
        .route("/ui/assets/console.js", get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }))
        .route("/ui/assets/console.css", get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }))
        .merge(api)
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// The header the console's page sends with every request that changes
/// something. A form or a cross-origin `fetch` from another site cannot send
/// it without the browser asking this server first (a CORS preflight, which
/// it never grants), so without a token a page elsewhere cannot write
/// through the operator's browser.
pub const PAGE_HEADER: &str = "x-zabkeeper-console";

async fn only_the_page_writes(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let reads = matches!(*request.method(), axum::http::Method::GET | axum::http::Method::HEAD);
    if !reads && !request.headers().contains_key(PAGE_HEADER) {
        return ApiError::Forbidden(format!("a request that changes something needs the {PAGE_HEADER} header"))
            .into_response();
    }
    next.run(request).await
}

async fn unknown_api(axum::extract::Path(rest): axum::extract::Path<String>) -> Response {
    ApiError::NotFound(format!("no console API /ui/api/{rest}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::State;
    use axum::http::{HeaderValue, Uri};
    use zabkeeper_config::ServerConfig;
    use zabkeeper_core::ids::Zxid;
    use zabkeeper_core::storage::mem_store::MemStorage;

    /// A console whose replica has stopped (its inbox is closed): whatever
    /// reaches the replica fails, so a 401 or 400 proves it was not reached.
    fn stopped_console() -> Shared {
        let text = "admin_token = \"s3cret\"\ndata_dir = \"unused\"\n[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\n\
                    grpc_addr = \"127.0.0.1:2\"\nmetrics_addr = \"127.0.0.1:3\"\n";
        let config = Arc::new(ServerConfig::parse(text, Some(1)).expect("a valid test config"));
        let (events, _) = tokio::sync::mpsc::channel(1);
        let (_, applied) = tokio::sync::watch::channel(Zxid::ZERO);
        Arc::new(Console::new(Handle::new(events, config, Arc::new(MemStorage::new()), applied)))
    }

    fn with_token(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(token).expect("ascii"));
        h
    }

    async fn error_of(r: ApiResult) -> (StatusCode, Value) {
        let response = match r {
            Ok(r) => r,
            Err(e) => e.into_response(),
        };
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("a body");
        (status, serde_json::from_slice(&body).expect("JSON"))
    }

    #[tokio::test]
    async fn edits_without_the_token_are_refused_before_the_replica() {
        let c = stopped_console();
        let body = axum::body::Bytes::from_static(br#"{"path": "/a", "data": "x", "version": 0}"#);
        for headers in [HeaderMap::new(), with_token("Bearer wrong"), with_token("s3cret")] {
            let (status, json) = error_of(tree::create(State(c.clone()), headers.clone(), body.clone()).await).await;
            assert_eq!((status, json["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("NoAuth")));
            let (status, _) = error_of(tree::set_data(State(c.clone()), headers.clone(), body.clone()).await).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let uri: Uri = "/ui/api/node?path=/a&version=0".parse().expect("a uri");
            let (status, _) = error_of(tree::delete(State(c.clone()), uri, headers.clone()).await).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let (status, _) = error_of(tree::set_acl(State(c.clone()), headers.clone(), body.clone()).await).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let (status, _) = error_of(changes::take_snapshot(State(c.clone()), headers.clone()).await).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let zxid = axum::extract::Path("0x1".to_string());
            let (status, _) = error_of(changes::download(State(c.clone()), zxid, headers).await).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
        }
    }

    #[tokio::test]
    async fn bad_input_is_a_400_and_a_stopped_replica_a_503_never_a_panic() {
        let c = stopped_console();
        let ask = |q: &str| q.parse::<Uri>().expect("a uri");
        for bad in
            ["/ui/api/children", "/ui/api/children?path=app", "/ui/api/children?path=/a/", "/ui/api/children?path=%00"]
        {
            let (status, json) = error_of(tree::children(State(c.clone()), ask(bad), HeaderMap::new()).await).await;
            assert_eq!((status, json["error"].as_str()), (StatusCode::BAD_REQUEST, Some("BadArguments")), "{bad}");
        }
        let (status, _) =
            error_of(tree::children(State(c.clone()), ask("/x?path=/&limit=0"), HeaderMap::new()).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _) = error_of(tree::search(State(c.clone()), ask("/x?prefix=nope"), HeaderMap::new()).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let token = with_token("Bearer s3cret");
        let garbage = axum::body::Bytes::from_static(b"{not json");
        let (status, _) = error_of(tree::create(State(c.clone()), token.clone(), garbage).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let ephemeral = axum::body::Bytes::from_static(br#"{"path": "/e", "mode": "ephemeral"}"#);
        let (status, _) = error_of(tree::create(State(c.clone()), token, ephemeral).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "the console's own session would own it");
        let (status, json) = error_of(tree::node(State(c.clone()), ask("/x?path=/a"), HeaderMap::new()).await).await;
        assert_eq!((status, json["error"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("ConnectionLoss")));
        let token = with_token("Bearer s3cret");
        let (status, _) = error_of(changes::log(State(c.clone()), ask("/x?from=zz"), HeaderMap::new()).await).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "the log needs the token");
        let (status, _) = error_of(changes::log(State(c.clone()), ask("/x?from=zz"), token.clone()).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let zxid = axum::extract::Path("0xzz".to_string());
        let (status, _) = error_of(changes::entry(State(c), zxid, token).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn the_routes_fit_together() {
        let c = stopped_console();
        // axum refuses conflicting routes when they are added: building them is the check.
        let _ = routes(c.handle.clone());
    }

    #[test]
    fn query_strings_are_percent_decoded() {
        let q = query_params(Some("path=%2Fapp%2Fconfig&after=a+b&limit=5&x"));
        assert_eq!(q.get("path").map(String::as_str), Some("/app/config"));
        assert_eq!(q.get("after").map(String::as_str), Some("a b"));
        assert_eq!(q.get("x").map(String::as_str), Some(""));
        assert_eq!(percent_decode("%zz%4"), "%zz%4", "malformed escapes are kept");
        assert_eq!(percent_decode("%C3%A9"), "é");
        assert!(query_params(None).is_empty());
    }

    #[test]
    fn zxids_are_read_as_hex_or_decimal() {
        assert_eq!(parse_u64("from", "0x10").ok(), Some(16));
        assert_eq!(parse_u64("from", "16").ok(), Some(16));
        let e = parse_u64("from", "zz").err().map(|e| e.into_response().status());
        assert_eq!(e, Some(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn errors_carry_zookeepers_names_and_fitting_statuses() {
        let cases = [
            (ApiError::from(ZkError::new(ErrorCode::NoNode, "/a")), StatusCode::NOT_FOUND, "NoNode"),
            (ApiError::from(ZkError::new(ErrorCode::BadVersion, "/a")), StatusCode::CONFLICT, "BadVersion"),
            (ApiError::BadRequest("bad".into()), StatusCode::BAD_REQUEST, "BadArguments"),
            (ApiError::Auth(AuthError::Missing), StatusCode::UNAUTHORIZED, "NoAuth"),
            (ApiError::Call(CallError::TimedOut), StatusCode::GATEWAY_TIMEOUT, "OperationTimeout"),
        ];
        for (e, status, name) in cases {
            assert_eq!(e.status_and_name(), (status, name));
        }
    }
}
