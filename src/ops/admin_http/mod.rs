//! ZooKeeper's AdminServer HTTP API (`/commands`, `/commands/<name>`) and
//! the health endpoints Kubernetes probes (`/livez`, `/readyz`), served on
//! the member's HTTP listener beside `/metrics`.
//!
//! The commands answer JSON under ZooKeeper's names ([`commands`]). Two of
//! them touch data wholesale and need the admin token when one is
//! configured: `snapshot` (streams a fresh snapshot, the bytes
//! `zkctl admin snapshot save` writes) and `restore` (loads a snapshot,
//! ours or ZooKeeper's, into the ensemble's empty tree through Zab). Without a token they are served only
//! on a loopback listener, as the admin API is.

pub mod commands;

use crate::ops::facts::Facts;
use crate::ops::tree_load::LoadTreeError;
use crate::runtime::handle::{Event, Handle, Query, StatusReport};
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use commands::{Command, Extras, Method};
use serde_json::{json, Map, Value};
use std::time::Duration;
use tokio::sync::oneshot;
use zabkeeper_config::ServerConfig;
use zabkeeper_core::replica::load::LoadError;
use zabkeeper_core::zab::Role;

/// Where the commands are, as ZooKeeper's `admin.commandURL` default.
pub const COMMAND_URL: &str = "/commands";

/// How long `/livez` waits for the replica's owner task to answer.
const LIVENESS_WAIT: Duration = Duration::from_secs(3);

/// Why a command that needs the token was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header (ZooKeeper's words).
    #[error("Auth info is missing for the command")]
    Missing,
    /// A header that is not the token.
    #[error("Not authenticated")]
    Wrong,
    /// No token is configured and the listener is not on loopback.
    #[error("Not authorized: set admin_token to use this command on a listener that is not loopback")]
    NoTokenRemote,
    /// No token is configured and the request names a host that is not
    /// loopback: a page elsewhere reaching the listener by DNS rebinding.
    #[error("Not authorized: without admin_token only requests to a loopback host name are served")]
    ForeignHost,
}

impl AuthError {
    fn status(&self) -> StatusCode {
        match self {
            AuthError::Missing | AuthError::Wrong => StatusCode::UNAUTHORIZED,
            AuthError::NoTokenRemote | AuthError::ForeignHost => StatusCode::FORBIDDEN,
        }
    }
}

/// Checks `Authorization` against the admin token: `Bearer <token>` (as the
/// admin gRPC API takes it), or ZooKeeper 3.9's digest form
/// `digest <user>:<token>` (any user name; the password is the token).
pub fn authorize(config: &ServerConfig, authorization: Option<&str>) -> Result<(), AuthError> {
    let Some(expected) = config.admin_token.as_deref() else {
        let loopback = config.me().bind.metrics.as_ref().is_some_and(zabkeeper_config::HostPort::is_loopback);
        return if loopback { Ok(()) } else { Err(AuthError::NoTokenRemote) };
    };
    let given = authorization.ok_or(AuthError::Missing)?;
    let secret = match given.split_once(' ') {
        Some(("Bearer", token)) => token,
        Some(("digest", credentials)) => credentials.split_once(':').map_or("", |(_, password)| password),
        _ => "",
    };
    if crate::ops::admin_grpc::equal_in_constant_time(secret.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(AuthError::Wrong)
    }
}

/// Checks a request's headers for what the data-revealing and writing
/// routes need: the token when one is configured ([`authorize`]); without
/// one, a loopback listener and a `Host` that names loopback, so a web page
/// that rebinds its own name to 127.0.0.1 cannot read or write through the
/// operator's browser.
pub fn authorize_request(config: &ServerConfig, headers: &HeaderMap) -> Result<(), AuthError> {
    if config.admin_token.is_none() {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !is_loopback_host(host) {
            return Err(AuthError::ForeignHost);
        }
    }
    authorize(config, authorization(headers))
}

/// Whether a `Host` header names loopback: `localhost`, 127.0.0.0/8 or `[::1]`, with any port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a member is ready for clients: a member of a quorum (leading or
/// following an established leader), synced with it, and applying what is
/// committed. The error says why not.
pub fn readiness(report: Option<&StatusReport>) -> Result<(), String> {
    let Some(r) = report else { return Err("the replica does not answer (starting or stopping)".into()) };
    match (r.status.role, r.status.serving) {
        (Role::Looking, _) => Err("looking for a leader: no quorum".into()),
        (Role::Leading, false) => Err("leading, but not yet established by a quorum".into()),
        (Role::Following, false) => Err("syncing with the leader".into()),
        _ if r.last_applied < r.last_committed => Err(format!(
            "applying committed transactions (applied 0x{:x}, committed 0x{:x})",
            r.last_applied.0, r.last_committed.0
        )),
        _ => Ok(()),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut text = serde_json::to_string_pretty(body).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// The routes this module serves, for the listener's router.
pub fn routes(handle: Handle) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route(COMMAND_URL, get(list))
        .route("/commands/", get(list))
        .route("/commands/{name}", get(run_get).post(run_post))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(handle)
}

type State = axum::extract::State<Handle>;

async fn list(headers: HeaderMap) -> Response {
    // A browser asks for HTML and gets ZooKeeper's page of links; scripts get JSON.
    let html = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    if html {
        let page = commands::listing_html(COMMAND_URL);
        return ([(header::CONTENT_TYPE, "text/html;charset=utf-8")], page).into_response();
    }
    json_response(StatusCode::OK, &commands::listing(COMMAND_URL))
}

/// The `Authorization` header's text, if any.
pub(crate) fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())
}

fn refused(command: &Command, e: &AuthError) -> Response {
    json_response(e.status(), &commands::response(command.primary(), Some(&e.to_string()), Map::new()))
}

async fn run_get(
    axum::extract::State(handle): State,
    axum::extract::Path(name): axum::extract::Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let Some(command) = commands::find(&name) else {
        return json_response(StatusCode::OK, &commands::unknown(&name));
    };
    if command.method == Method::Post {
        let why = format!("{} takes POST", command.primary());
        return json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &commands::response(command.primary(), Some(&why), Map::new()),
        );
    }
    if command.needs_token {
        if let Err(e) = authorize_request(&handle.config, &headers) {
            return refused(command, &e);
        }
    }
    if let Some(refusal) = commands::refused_by_whitelist(command, |w| handle.config.four_letter_word_enabled(w)) {
        return json_response(StatusCode::FORBIDDEN, &refusal);
    }
    if command.primary() == "snapshot" {
        return snapshot(&handle, streaming(uri.query())).await;
    }
    let facts = match Facts::gather(&handle).await {
        Some(facts) if command.primary() == "monitor" => Some(facts.with_disk().await),
        facts => facts,
    };
    let serving = facts.as_ref().is_some_and(Facts::serving);
    if let Err(why) = act(&handle, command, uri.query(), serving) {
        return json_response(StatusCode::OK, &commands::response(command.primary(), Some(&why), Map::new()));
    }
    let extras = extras(&handle, command).await;
    json_response(StatusCode::OK, &commands::answer(command, facts.as_ref(), &extras))
}

async fn run_post(
    axum::extract::State(handle): State,
    axum::extract::Path(name): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(command) = commands::find(&name) else {
        return json_response(StatusCode::OK, &commands::unknown(&name));
    };
    if command.method == Method::Get {
        let why = format!("{} takes GET", command.primary());
        return json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &commands::response(command.primary(), Some(&why), Map::new()),
        );
    }
    if let Err(e) = authorize_request(&handle.config, &headers) {
        return refused(command, &e);
    }
    // Read only once authorized, and no more than a load carries.
    let limit = zabkeeper_core::replica::load::MAX_LOAD_BYTES;
    match axum::body::to_bytes(body, limit).await {
        Ok(body) => restore(&handle, body).await,
        Err(e) => {
            let why = format!("the request body could not be read whole within {limit} bytes (a load's most): {e}");
            json_response(StatusCode::BAD_REQUEST, &commands::response("restore", Some(&why), Map::new()))
        }
    }
}

/// `restore`: loads the snapshot in the body into the ensemble's empty tree
/// through Zab (see `crate::ops::tree_load`), not into this member alone as ZooKeeper
/// does: either the bytes `snapshot` streams, or an Apache ZooKeeper
/// snapshot (its AdminServer's stream, or a `snapshot.<zxid>` file). The
/// leader must serve it; a tree with nodes of its own is refused.
async fn restore(handle: &Handle, body: bytes::Bytes) -> Response {
    let answer = |status: StatusCode, error: Option<&str>, fields: Map<String, Value>| {
        json_response(status, &commands::response("restore", error, fields))
    };
    let (chunks, epoch) = match tokio::task::spawn_blocking(move || read_restore_body(body)).await {
        Ok(Ok(parsed)) => parsed,
        Ok(Err(why)) => return answer(StatusCode::BAD_REQUEST, Some(&why), Map::new()),
        Err(e) => return answer(StatusCode::INTERNAL_SERVER_ERROR, Some(&e.to_string()), Map::new()),
    };
    let loaded = match crate::ops::tree_load::load_tree(handle, chunks.clone(), epoch, RESTORE_WAIT).await {
        Ok(done) => Ok((done.zxid.as_i64(), done.nodes as u64, done.epoch)),
        // As ZooKeeper's, any member takes a restore: a follower hands it to the leader.
        Err(LoadTreeError::Refused(LoadError::NotLeader { leader: Some(leader), .. })) => {
            restore_at_leader(handle, leader, chunks, epoch).await
        }
        Err(e) => Err(crate::ops::admin_grpc::load_status(e)),
    };
    match loaded {
        Ok((zxid, nodes, epoch)) => {
            let mut fields = Map::new();
            fields.insert("last_zxid".into(), json!(zxid));
            fields.insert("nodes".into(), json!(nodes));
            fields.insert("epoch".into(), json!(epoch));
            answer(StatusCode::OK, None, fields)
        }
        Err(status) => {
            let code = match status.code() {
                tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                tonic::Code::FailedPrecondition => StatusCode::CONFLICT,
                tonic::Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            answer(code, Some(status.message()), Map::new())
        }
    }
}

/// The tree a `restore` body holds, as a load's chunks, and its history's
/// epoch: ZooKeeper's snapshot (its magic first) or ours.
fn read_restore_body(body: bytes::Bytes) -> Result<(Vec<bytes::Bytes>, u32), String> {
    use zabkeeper_core::zookeeper_files::snapshot::SNAP_MAGIC;
    if body.starts_with(&SNAP_MAGIC.to_be_bytes()) {
        return zabkeeper_datadir::zookeeper_import::read_snapshot("the request body", &body)
            .map_err(|e| e.to_string());
    }
    let state = zabkeeper_core::tree::snapshot::from_chunks([body.as_ref()])
        .map_err(|e| format!("the request body is neither a snapshot of ours nor ZooKeeper's: {e}"))?;
    Ok((zabkeeper_core::replica::load::in_pieces(body), state.highest_epoch()))
}

/// How long `restore` waits for the load to be applied and the ensemble to serve.
const RESTORE_WAIT: Duration = Duration::from_secs(30);

/// A follower's `restore`, sent on to the admin API of `leader` (its
/// address from the replicated configuration; this member's token and TLS).
/// Answers the load's zxid, node count and epoch, or the leader's refusal.
async fn restore_at_leader(
    handle: &Handle,
    leader: zabkeeper_core::ids::ServerId,
    chunks: Vec<bytes::Bytes>,
    epoch: u32,
) -> Result<(i64, u64, u32), tonic::Status> {
    use zabkeeper_proto::admin as pb;
    let unavailable = |why: String| tonic::Status::unavailable(format!("the leader (member {leader}): {why}"));
    let configuration =
        crate::ops::membership_change::configuration(handle).await.map_err(|e| unavailable(e.to_string()))?;
    let addr = configuration
        .members()
        .find(|m| m.id == leader)
        .map(|m| m.endpoints.admin.clone())
        .filter(|a| !a.is_empty())
        .ok_or_else(|| unavailable("its admin address is not known here; send the restore to it".into()))?;
    let config = &handle.config;
    let wait = RESTORE_WAIT + Duration::from_secs(5);
    let mut admin = crate::ops::dial::dial(&addr, config.tls.as_ref(), wait).await.map_err(unavailable)?;
    let wait_ms = u32::try_from(RESTORE_WAIT.as_millis()).unwrap_or(u32::MAX);
    // Pieces well under a gRPC message's default 4 MiB.
    let messages: Vec<pb::LoadTreeChunk> = chunks
        .into_iter()
        .flat_map(zabkeeper_core::replica::load::in_pieces)
        .map(|piece| pb::LoadTreeChunk { data: piece.to_vec(), epoch, wait_ms })
        .collect();
    let request = crate::ops::dial::with_token(
        tonic::Request::new(futures::stream::iter(messages)),
        config.admin_token.as_deref(),
    )
    .map_err(unavailable)?;
    let reply = admin.load_tree(request).await?.into_inner();
    Ok((reply.zxid as i64, reply.nodes, reply.epoch))
}

/// ZooKeeper's `streaming` parameter: true when absent, else as Java's
/// `Boolean.parseBoolean` reads it (only "true", in any case, is true).
fn streaming(query: Option<&str>) -> bool {
    parameter(query, "streaming").is_none_or(|v| v.eq_ignore_ascii_case("true"))
}

/// The value of parameter `name` in a URI's query.
fn parameter<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query.into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// What a command that changes something does before it answers (a reset
/// only while the member serves, as its answer says); the refusal of a
/// malformed argument, in ZooKeeper's words.
fn act(handle: &Handle, command: &Command, query: Option<&str>, serving: bool) -> Result<(), String> {
    match command.primary() {
        "stat_reset" if serving => handle.stats.reset(),
        "connection_stat_reset" if serving => handle.conns.reset_all(),
        "set_trace_mask" => {
            let Some(value) = parameter(query, "traceMask") else {
                return Err("setTraceMask requires long traceMask argument".into());
            };
            let mask = value
                .parse::<i64>()
                .map_err(|_| format!("setTraceMask requires long traceMask argument, got {value}"))?;
            handle.trace_mask.set(mask);
        }
        _ => {}
    }
    Ok(())
}

/// What a command reads from storage besides the facts.
async fn extras(handle: &Handle, command: &Command) -> Extras {
    let mut extras = Extras::default();
    match command.primary() {
        "server_stats" | "stats" | "dirs" => {
            extras.disk = crate::ops::facts::disk_usage(&handle.config).await;
        }
        "last_snapshot" => {
            let storage = handle.storage.clone();
            let newest = tokio::task::spawn_blocking(move || storage.snapshots().ok().and_then(|s| s.last().copied()));
            extras.last_snapshot = newest.await.ok().flatten();
        }
        "get_trace_mask" | "set_trace_mask" => extras.trace_mask = handle.trace_mask.get(),
        _ => {}
    }
    extras
}

/// Takes a snapshot and, when `stream`, sends its bytes (the format
/// `zkctl admin snapshot save` writes and `restore` reads), with ZooKeeper's
/// `last_zxid` and `snapshot_size` headers.
async fn snapshot(handle: &Handle, stream: bool) -> Response {
    use futures::StreamExt;
    use zabkeeper_proto::admin::{self as pb, admin_server::Admin};
    let failed = |why: String| {
        json_response(StatusCode::INTERNAL_SERVER_ERROR, &commands::response("snapshot", Some(&why), Map::new()))
    };
    let why = |s: tonic::Status| match s.code() {
        tonic::Code::Unavailable => commands::NOT_SERVING.to_string(),
        _ => s.message().to_string(),
    };
    // The admin API's own calls, as `zkctl admin snapshot take` and `save` make them.
    let service = crate::ops::admin_grpc::AdminService::new(handle.clone());
    let taken = match service.take_snapshot(tonic::Request::new(pb::TakeSnapshotRequest {})).await {
        Ok(reply) => reply.into_inner(),
        Err(s) => return failed(why(s)),
    };
    let headers = [("last_zxid", format!("0x{:x}", taken.zxid)), ("snapshot_size", taken.size_bytes.to_string())];
    let mut response = if stream {
        match service.save_snapshot(tonic::Request::new(pb::SaveSnapshotRequest { zxid: taken.zxid })).await {
            Ok(chunks) => {
                let body = chunks.into_inner().map(|c| {
                    c.map(|c| bytes::Bytes::from(c.data)).map_err(|s| std::io::Error::other(s.message().to_string()))
                });
                ([(header::CONTENT_TYPE, "application/octet-stream")], Body::from_stream(body)).into_response()
            }
            Err(s) => return failed(why(s)),
        }
    } else {
        json_response(StatusCode::OK, &commands::response("snapshot", None, Map::new()))
    };
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

async fn livez(axum::extract::State(handle): State) -> Response {
    // The owner task answering the cheapest question: the process serves.
    let (tx, rx) = oneshot::channel();
    let asked = async {
        handle.events.send(Event::Query(Query::Role(tx))).await.ok()?;
        rx.await.ok()
    };
    match tokio::time::timeout(LIVENESS_WAIT, asked).await {
        Ok(Some(_)) => json_response(StatusCode::OK, &json!({"live": true})),
        Ok(None) => json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"live": false, "reason": "stopping"})),
        Err(_) => {
            let why = format!("the replica did not answer within {} s", LIVENESS_WAIT.as_secs());
            json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"live": false, "reason": why}))
        }
    }
}

async fn readyz(axum::extract::State(handle): State) -> Response {
    let report = handle.status_report().await;
    match readiness(report.as_ref()) {
        Ok(()) => {
            let role = report.as_ref().map_or("", |r| handle.config.role_name(r.status.role));
            json_response(StatusCode::OK, &json!({"ready": true, "role": role}))
        }
        Err(reason) => json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"ready": false, "reason": reason})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::facts::tests::leader;
    use zabkeeper_core::ids::Zxid;

    fn config(extra: &str, metrics: &str) -> ServerConfig {
        let text = format!(
            "{extra}\ndata_dir = \"data\"\n[[server]]\nid = 1\npeer_addr = \"127.0.0.1:2888\"\ngrpc_addr = \"127.0.0.1:3181\"\nmetrics_addr = \"{metrics}\"\n"
        );
        ServerConfig::parse(&text, Some(1)).expect("a valid test config")
    }

    #[test]
    fn the_token_is_taken_as_bearer_or_as_a_digest_password() {
        let c = config("admin_token = \"s3cret\"", "127.0.0.1:9181");
        assert_eq!(authorize(&c, Some("Bearer s3cret")), Ok(()));
        assert_eq!(authorize(&c, Some("digest root:s3cret")), Ok(()));
        assert_eq!(authorize(&c, None), Err(AuthError::Missing));
        for wrong in ["Bearer s3cre", "digest root:nope", "digest s3cret", "s3cret", "Basic s3cret", ""] {
            assert_eq!(authorize(&c, Some(wrong)), Err(AuthError::Wrong), "{wrong}");
        }
    }

    #[test]
    fn without_a_token_only_a_loopback_listener_serves_snapshots() {
        assert_eq!(authorize(&config("", "127.0.0.1:9181"), None), Ok(()));
        assert_eq!(authorize(&config("", "10.0.0.1:9181"), None), Err(AuthError::NoTokenRemote));
        let with_host = |host: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(host).expect("a header value"));
            h
        };
        let open = config("", "127.0.0.1:9181");
        for host in ["127.0.0.1:9181", "localhost:9181", "LOCALHOST", "127.0.0.2:1", "[::1]:9181"] {
            assert_eq!(authorize_request(&open, &with_host(host)), Ok(()), "{host}");
        }
        for host in ["evil.example:9181", "10.0.0.1:9181", "127.0.0.1.evil.example", ""] {
            assert_eq!(authorize_request(&open, &with_host(host)), Err(AuthError::ForeignHost), "{host}");
        }
        let guarded = config("admin_token = \"s3cret\"", "127.0.0.1:9181");
        let mut h = with_host("evil.example");
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        assert_eq!(authorize_request(&guarded, &h), Ok(()), "with a token the token decides");
        assert_eq!(AuthError::NoTokenRemote.status(), StatusCode::FORBIDDEN);
        assert_eq!(AuthError::Missing.status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn ready_means_in_a_quorum_synced_and_applied() {
        let mut r = leader().report;
        assert_eq!(readiness(Some(&r)), Ok(()));
        r.last_applied = Zxid(0x1_0000_0004);
        assert!(readiness(Some(&r)).is_err_and(|e| e.contains("applying")));
        r.last_applied = r.last_committed;
        r.status.serving = false;
        assert!(readiness(Some(&r)).is_err_and(|e| e.contains("not yet established")));
        r.status.role = Role::Following;
        assert!(readiness(Some(&r)).is_err_and(|e| e.contains("syncing")));
        r.status.role = Role::Looking;
        assert!(readiness(Some(&r)).is_err_and(|e| e.contains("no quorum")));
        assert!(readiness(None).is_err());
    }

    #[test]
    fn streaming_is_the_default() {
        assert!(streaming(None));
        assert!(streaming(Some("streaming=true")));
        assert!(!streaming(Some("a=1&streaming=false")));
        assert!(!streaming(Some("streaming=yes")), "as Java's parseBoolean");
    }

    #[test]
    fn a_parameter_is_found_by_its_whole_name() {
        assert_eq!(parameter(Some("traceMask=8"), "traceMask"), Some("8"));
        assert_eq!(parameter(Some("a=1&traceMask=-1"), "traceMask"), Some("-1"));
        assert_eq!(parameter(Some("traceMaskX=8"), "traceMask"), None);
        assert_eq!(parameter(None, "traceMask"), None);
    }
}
