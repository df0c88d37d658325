//! The ensemble as the console shows it: every member of the configuration
//! with its figures, asked of each member over its own HTTP listener
//! (`/ui/api/member`, at the `metrics` address the configuration lists), so
//! a member that does not answer within a short wait is shown as down. The
//! sessions view gathers each member's connections the same way.

use super::{hex, ok, ApiResult, Shared};
use crate::ops::facts::{Facts, VERSION};
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zabkeeper_config::HostPort;
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::zab::Role;

/// How long a member has to answer before it is shown as down.
const PEER_WAIT: Duration = Duration::from_millis(1_500);
/// The largest answer read from a member.
const PEER_MAX_BYTES: u64 = 8 << 20;

/// Why a member's answer could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The configuration lists no HTTP address for it.
    #[error("no metrics_addr is known for this member")]
    NoAddress,
    /// Nothing within the wait.
    #[error("no answer within {} ms", PEER_WAIT.as_millis())]
    TimedOut,
    /// Connecting or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It answered, but not with JSON and 200.
    #[error("unexpected answer: {0}")]
    Answer(String),
}

/// One member's answer: its id, whether it votes, where it was asked, and
/// what it said (or why it said nothing).
pub type Answer<E> = (ServerId, &'static str, Option<HostPort>, Result<Value, E>);

/// GETs `path` from `addr` (HTTP/1.1, one request per connection) as JSON.
pub async fn get_json(addr: &HostPort, path: &str, authorization: Option<&str>) -> Result<Value, PeerError> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect((addr.host(), addr.port())).await?;
        // The caller's token, passed on: the peer checks it as it would the caller's.
        let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Accept: application/json\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.take(PEER_MAX_BYTES).read_to_end(&mut answer).await?;
        Ok::<_, PeerError>(answer)
    };
    let answer = tokio::time::timeout(PEER_WAIT, ask).await.map_err(|_| PeerError::TimedOut)??;
    parse_answer(&answer)
}

/// The JSON body of a `200` HTTP answer with a length-delimited body.
fn parse_answer(answer: &[u8]) -> Result<Value, PeerError> {
    let split =
        answer.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| PeerError::Answer("no headers".into()))?;
    let (head, body) = answer.split_at(split);
    let head = String::from_utf8_lossy(head);
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(PeerError::Answer(status.to_string()));
    }
    serde_json::from_slice(body.get(4..).unwrap_or(&[])).map_err(|e| PeerError::Answer(e.to_string()))
}

/// This member's figures, as `/ui/api/member` answers them.
pub async fn summary(console: &Shared) -> Value {
    let handle = &console.handle;
    let Some(r) = handle.status_report().await else {
        return json!({"id": handle.config.id, "up": false, "error": "the replica is stopping"});
    };
    let state = match super::super::admin_http::readiness(Some(&r)) {
        Ok(()) => "serving".to_string(),
        Err(why) => why,
    };
    let followers: Vec<Value> = r
        .followers
        .iter()
        .map(|f| json!({"id": f.id, "synced": f.synced, "acked_zxid": hex(f.acked.0), "lag": f.lag}))
        .collect();
    json!({
        "id": r.id,
        "up": true,
        "role": handle.config.role_name(r.status.role),
        "leading": r.status.role == Role::Leading,
        "serving": r.status.serving,
        "state": state,
        "leader": r.status.leader,
        "accepted_epoch": r.accepted_epoch,
        "current_epoch": r.current_epoch,
        "last_zxid": hex(r.last_applied.0),
        "last_committed": hex(r.last_committed.0),
        "last_logged": hex(r.last_logged.0),
        "sessions": r.sessions,
        "znodes": r.nodes,
        "connections": r.connections,
        "watches": r.watches,
        "ephemerals": r.ephemerals,
        "data_bytes": r.data_bytes,
        "version": VERSION,
        "uptime_ms": u64::try_from(handle.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "followers": followers,
    })
}

/// `GET /ui/api/member`: this member's figures.
pub async fn member(State(console): State<Shared>) -> ApiResult {
    ok(&summary(&console).await)
}

/// Every member of the configuration: its id, whether it votes, and where
/// its HTTP listener is (the replicated configuration's, else this file's).
async fn members(console: &Shared) -> Vec<(ServerId, &'static str, Option<HostPort>)> {
    let config = &console.handle.config;
    let from_file = |id: ServerId| config.members.iter().find(|m| m.id == id).and_then(|m| m.metrics_addr.clone());
    match crate::ops::membership_change::configuration(&console.handle).await {
        Ok(c) => c
            .members()
            .map(|m| {
                let listed = HostPort::parse(&m.endpoints.metrics).ok();
                (m.id, m.participation.name(), listed.or_else(|| from_file(m.id)))
            })
            .collect(),
        Err(_) => config
            .members
            .iter()
            .map(|m| {
                let role = if m.role == zabkeeper_config::MemberRole::Observer { "observer" } else { "participant" };
                (m.id, role, m.metrics_addr.clone())
            })
            .collect(),
    }
}

/// Asks every member for `path` (this one through `local`), at once, with
/// the caller's `Authorization` header.
async fn ask_all<F>(console: &Shared, path: &str, authorization: Option<&str>, local: F) -> Vec<Answer<PeerError>>
where
    F: std::future::Future<Output = Value>,
{
    let me = console.handle.config.id;
    let listed = members(console).await;
    let mut local = Some(local);
    let asks = listed.into_iter().map(|(id, participation, addr)| {
        let own = if id == me { local.take() } else { None };
        async move {
            let answer = match (own, &addr) {
                (Some(local), _) => Ok(local.await),
                (None, Some(a)) => get_json(a, path, authorization).await,
                (None, None) => Err(PeerError::NoAddress),
            };
            (id, participation, addr, answer)
        }
    });
    futures::future::join_all(asks).await
}

/// Each member's lag behind the leader: the leader's count of its log
/// entries a follower has not acknowledged (0 for the leader itself).
fn lags(members: &[Value]) -> BTreeMap<u64, u64> {
    let Some(leader) = members.iter().find(|m| m["leading"] == true && m["up"] == true) else { return BTreeMap::new() };
    let mut out = BTreeMap::new();
    if let Some(id) = leader["id"].as_u64() {
        out.insert(id, 0);
    }
    for f in leader["followers"].as_array().into_iter().flatten() {
        if let (Some(id), Some(lag)) = (f["id"].as_u64(), f["lag"].as_u64()) {
            out.insert(id, lag);
        }
    }
    out
}

/// The ensemble view from the members' answers: each with its lag, a member
/// that did not answer marked down with why.
pub fn ensemble_view(me: ServerId, answers: Vec<Answer<String>>) -> Value {
    let mut members: Vec<Value> = answers
        .into_iter()
        .map(|(id, participation, addr, answer)| {
            let mut m = match answer {
                Ok(Value::Object(m)) => m,
                Ok(other) => Map::from_iter([("error".to_string(), json!(format!("unexpected answer {other}")))]),
                Err(why) => Map::from_iter([("error".to_string(), json!(why))]),
            };
            if !m.contains_key("up") {
                m.insert("up".into(), json!(false));
            }
            m.insert("id".into(), json!(id));
            m.insert("participation".into(), json!(participation));
            m.insert("http_addr".into(), json!(addr.map(|a| a.to_string())));
            m.insert("is_self".into(), json!(id == me));
            Value::Object(m)
        })
        .collect();
    let lags = lags(&members);
    let leader = members.iter().find(|m| m["leading"] == true && m["up"] == true).and_then(|m| m["id"].as_u64());
    for m in &mut members {
        let lag = m["id"].as_u64().and_then(|id| lags.get(&id)).copied();
        m["lag"] = json!(lag);
    }
    json!({"served_by": me, "leader": leader, "members": members})
}

/// `GET /ui/api/ensemble`: every member, asked now.
pub async fn ensemble(State(console): State<Shared>) -> ApiResult {
    let answers = ask_all(&console, "/ui/api/member", None, summary(&console)).await;
    let answers = answers.into_iter().map(|(id, p, a, r)| (id, p, a, r.map_err(|e| e.to_string()))).collect();
    ok(&ensemble_view(console.handle.config.id, answers))
}

/// This member's client connections, with each session's watches here.
async fn local_connections(console: &Shared) -> Value {
    let Some(facts) = Facts::gather(&console.handle).await else { return json!({"connections": []}) };
    let now = zabkeeper_store::clock::now_ms();
    let own = console.own_sessions().await;
    let watches_of: std::collections::HashMap<_, _> = facts.details.watches.iter().map(|(s, p)| (*s, p)).collect();
    let connections: Vec<Value> = facts
        .connections
        .iter()
        .map(|c| {
            let watches = c.session.and_then(|s| watches_of.get(&s));
            let console = c.session.is_some_and(|s| own.contains(&s));
            json!({
                "session": c.session.map(|s| hex(s.0 as u64)),
                "remote": if console { "this console (in process)" } else { c.remote.as_str() },
                "queued": c.queued,
                "last_heard_ms_ago": (now - c.last_heard_ms).max(0),
                "watches": watches.map_or(&[][..], |p| p.as_slice()),
                "console": console,
            })
        })
        .collect();
    json!({"connections": connections})
}

/// `GET /ui/api/connections`: this member's client connections (with the
/// token: they name every session and client address, as `cons` does).
pub async fn connections(State(console): State<Shared>, headers: HeaderMap) -> ApiResult {
    console.authorized(&headers)?;
    ok(&local_connections(&console).await)
}

/// `GET /ui/api/sessions`: every live session (the tree's), with the member
/// and address it is connected from, its ephemerals and its watches.
pub async fn sessions(State(console): State<Shared>, headers: HeaderMap) -> ApiResult {
    console.authorized(&headers)?;
    let details = console.handle.details().await.unwrap_or_default();
    let authorization = super::super::admin_http::authorization(&headers);
    let answers = ask_all(&console, "/ui/api/connections", authorization, local_connections(&console)).await;
    let mut connected: BTreeMap<String, Value> = BTreeMap::new();
    let mut down = Vec::new();
    for (id, _, _, answer) in answers {
        let Ok(answer) = answer else {
            down.push(id);
            continue;
        };
        for c in answer["connections"].as_array().into_iter().flatten() {
            if let Some(s) = c["session"].as_str() {
                let mut c = c.clone();
                c["member"] = json!(id);
                connected.insert(s.to_string(), c);
            }
        }
    }
    let ephemerals_of: std::collections::HashMap<_, _> = details.ephemerals.iter().map(|(s, p)| (*s, p)).collect();
    let sessions: Vec<Value> = details
        .sessions
        .iter()
        .map(|(id, timeout_ms)| {
            let key = hex(id.0 as u64);
            let ephemerals = ephemerals_of.get(id).map_or(&[][..], |p| p.as_slice());
            let conn = connected.get(&key);
            json!({
                "id": key,
                "timeout_ms": timeout_ms,
                "member": conn.map(|c| c["member"].clone()),
                "remote": conn.map(|c| c["remote"].clone()),
                "last_heard_ms_ago": conn.map(|c| c["last_heard_ms_ago"].clone()),
                "console": conn.is_some_and(|c| c["console"] == true),
                "ephemerals": ephemerals,
                "watches": conn.map_or(json!([]), |c| c["watches"].clone()),
            })
        })
        .collect();
    ok(&json!({"sessions": sessions, "members_not_answering": down}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: u64, leading: bool, followers: Value) -> Result<Value, String> {
        Ok(
            json!({"id": id, "up": true, "leading": leading, "role": if leading {"leader"} else {"follower"}, "followers": followers}),
        )
    }

    #[test]
    fn a_member_that_does_not_answer_is_down_and_lag_comes_from_the_leader() {
        let addr = HostPort::parse("127.0.0.1:9").ok();
        let view = ensemble_view(
            2,
            vec![
                (1, "participant", addr.clone(), up(1, true, json!([{"id": 2, "lag": 0}, {"id": 3, "lag": 7}]))),
                (2, "participant", addr.clone(), up(2, false, json!([]))),
                (3, "participant", addr, Err("no answer within 1500 ms".into())),
            ],
        );
        assert_eq!(view["leader"], 1);
        assert_eq!(view["served_by"], 2);
        let m = &view["members"];
        assert_eq!((m[0]["lag"].clone(), m[1]["lag"].clone()), (json!(0), json!(0)));
        assert_eq!((m[2]["up"].clone(), m[2]["lag"].clone()), (json!(false), json!(7)));
        assert_eq!(m[2]["error"], "no answer within 1500 ms");
        assert_eq!(m[1]["is_self"], true);
    }

    #[test]
    fn no_leader_no_lag() {
        let view = ensemble_view(1, vec![(1, "participant", None, up(1, false, json!([])))]);
        assert_eq!((view["leader"].clone(), view["members"][0]["lag"].clone()), (Value::Null, Value::Null));
    }

    #[test]
    fn only_a_200_with_json_is_an_answer() {
        let good = b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n{\"a\": 1}";
        assert_eq!(parse_answer(good).ok(), Some(json!({"a": 1})));
        assert!(parse_answer(b"HTTP/1.1 404 Not Found\r\n\r\n{}").is_err());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\n\r\nnot json").is_err());
        assert!(parse_answer(b"garbage").is_err());
    }
}
