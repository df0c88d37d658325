//! An async client for zabkeeper's gRPC session API, with ZooKeeper's
//! semantics: one session over one stream at a time, FIFO answers, one-shot
//! and persistent watches, and transparent session resumption on another
//! server when a connection breaks.
//!
//! ```no_run
//! # async fn example() -> Result<(), zabkeeper_client::ClientError> {
//! use zabkeeper_client::{Acl, Client, ClientOptions, CreateMode};
//! let client = Client::connect("127.0.0.1:3181", ClientOptions::default()).await?;
//! client.create("/app", b"v1", CreateMode::Persistent, &Acl::open_unsafe()).await?;
//! let (data, stat, watcher) = client.get_data_and_watch("/app").await?;
//! client.set_data("/app", b"v2", stat.version).await?;
//! println!("{:?} then {:?}", data, watcher.await);
//! client.close().await
//! # }
//! ```
//!
//! Errors follow ZooKeeper: a request in flight when a connection breaks fails
//! with `ConnectionLoss` (a write may or may not have been applied); requests
//! made while the client is reconnecting wait for it, and if no server takes
//! the session within the request timeout they fail with `ConnectionLoss`
//! naming each server's answer (unreachable, or "not serving" while the
//! ensemble has no quorum); once the session expires every call fails with
//! `SessionExpired` and the client must be replaced.
//!
//! Layout: `connection` is the background task that owns the stream;
//! [`watcher`] the watch futures/streams and their routing; `fifo` and
//! `reconnect` the pure parts of the task; [`multi`] and `response` the
//! request and answer shapes; [`acl_spec`] the zkCli ACL syntax; [`recipes`]
//! the classic recipes built on the client.
//!
//! This crate depends on the core's types and the generated protocol only,
//! never on the server: `cargo tree -p zabkeeper-client` has no sled, axum,
//! jemalloc or rustyline.

// The core's modules and the protocol, by the names the client has always used.
use zabkeeper_core::{acl, tree};
use zabkeeper_proto as proto;

/// The core's types a client's calls take and return.
pub use zabkeeper_core::acl::{perms, Acl, Id};
pub use zabkeeper_core::error::ErrorCode;
pub use zabkeeper_core::tree::stat::{CreateMode, Stat};
pub use zabkeeper_core::tree::watch::{AddWatchMode, EventType, WatchEvent, WatcherType};

pub mod acl_spec;
pub mod connect_string;
mod connection;
mod control;
mod convert;
mod dial;
pub mod error;
mod fifo;
pub mod multi;
mod multi_pb;
pub mod recipes;
mod reconnect;
mod response;
mod settings;
pub mod state;
pub mod tls;
mod watch_pb;
pub mod watcher;

pub use connect_string::ServerAddr;
pub use error::ClientError;
pub use multi::{MultiOp, MultiResult, ReadOp, ReadResult};
pub use state::{ConnectionState, StateStream};
pub use tls::ClientTls;
pub use watcher::{OneshotWatcher, PersistentWatcher, WatchedEvent};

use crate::proto::client as pb;
use connection::{Command, Effect};
use control::Control;
use rand::seq::SliceRandom;
use settings::Settings;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use watcher::OneshotKind;
use zabkeeper_core::error::ZkError;

/// The version argument that matches any version.
pub const ANY_VERSION: i32 = -1;

/// Settings of a client.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Session timeout to ask for; the server clamps it to its own bounds.
    pub session_timeout: Duration,
    /// Time allowed to establish the first session, and for each reconnect attempt.
    pub connect_timeout: Duration,
    /// Time allowed for each request (queueing included); `None` waits as long as the session lives.
    /// A request that runs out of time while no server holds the session fails with
    /// `ConnectionLoss` (saying why), otherwise with `Timeout`.
    pub request_timeout: Option<Duration>,
    /// Credentials added right after connecting and again after every reconnect (scheme, auth).
    pub auth: Vec<(String, Vec<u8>)>,
    /// Most requests in flight; callers wait beyond it (backpressure).
    pub max_pending: usize,
    /// Events a persistent watcher buffers before it is cut off as overflowed.
    pub watcher_queue: usize,
    /// Largest message sent or received.
    pub max_message_bytes: usize,
    /// Wait after the first round of failed reconnect attempts (doubles per round).
    pub backoff_min: Duration,
    /// Largest wait between rounds of reconnect attempts.
    pub backoff_max: Duration,
    /// TLS to servers whose gRPC port speaks it (`[tls] grpc = true`); `None`: plain.
    pub tls: Option<ClientTls>,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            request_timeout: None,
            auth: Vec::new(),
            max_pending: 10_000,
            watcher_queue: 1024,
            max_message_bytes: 64 * 1024 * 1024,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            tls: None,
        }
    }
}

impl ClientOptions {
    /// Sets the session timeout asked for.
    pub fn with_session_timeout(mut self, timeout: Duration) -> ClientOptions {
        self.session_timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> ClientOptions {
        self.connect_timeout = timeout;
        self
    }

    /// Sets a per-request time limit.
    pub fn with_request_timeout(mut self, timeout: Duration) -> ClientOptions {
        self.request_timeout = Some(timeout);
        self
    }

    /// Adds credentials of any scheme.
    pub fn with_auth(mut self, scheme: &str, auth: &[u8]) -> ClientOptions {
        self.auth.push((scheme.to_string(), auth.to_vec()));
        self
    }

    /// Speaks TLS to the servers' gRPC port.
    pub fn with_tls(mut self, tls: ClientTls) -> ClientOptions {
        self.tls = Some(tls);
        self
    }

    /// Adds `digest` credentials `user:password`.
    pub fn with_digest_auth(self, user: &str, password: &str) -> ClientOptions {
        self.with_auth("digest", format!("{user}:{password}").as_bytes())
    }

    fn validate(&self) -> Result<(), ClientError> {
        let bad = |what: &str| Err(ClientError::InvalidArgument(what.to_string()));
        let ms = self.session_timeout.as_millis();
        if ms == 0 || ms > i32::MAX as u128 {
            return bad("session_timeout must be between 1 ms and i32::MAX ms");
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout must be positive");
        }
        if self.request_timeout.is_some_and(|t| t.is_zero()) {
            return bad("request_timeout must be positive");
        }
        if !(1..=1_000_000).contains(&self.max_pending) {
            return bad("max_pending must be within 1..=1000000");
        }
        if !(1..=1_000_000).contains(&self.watcher_queue) {
            return bad("watcher_queue must be within 1..=1000000");
        }
        if self.max_message_bytes < 1024 {
            return bad("max_message_bytes must be at least 1024");
        }
        if self.backoff_min.is_zero() || self.backoff_max < self.backoff_min {
            return bad("backoff_min must be positive and at most backoff_max");
        }
        Ok(())
    }
}

/// A client session. Cheap to clone: clones share the session. When the last
/// clone is dropped the session is closed (best effort); use [`Client::close`]
/// to wait for it.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// How fresh this handle's reads are ([`Client::linearizable`]).
    consistency: pb::Consistency,
}

struct Inner {
    commands: mpsc::Sender<Command>,
    control: mpsc::UnboundedSender<Control>,
    shared: Arc<state::Shared>,
    request_timeout: Option<Duration>,
    watcher_queue: usize,
    next_watcher: AtomicU64,
}

fn op_name(op: &pb::request::Op) -> &'static str {
    use pb::request::Op as P;
    match op {
        P::Create(_) => "create",
        P::Delete(_) => "delete",
        P::Exists(_) => "exists",
        P::GetData(_) => "get_data",
        P::SetData(_) => "set_data",
        P::GetChildren(_) => "get_children",
        P::GetAllChildrenNumber(_) => "get_all_children_number",
        P::GetEphemerals(_) => "get_ephemerals",
        P::Check(_) => "check",
        P::Multi(_) => "multi",
        P::MultiRead(_) => "multi_read",
        P::Sync(_) => "sync",
        P::GetAcl(_) => "get_acl",
        P::SetAcl(_) => "set_acl",
        P::AddWatch(_) => "add_watch",
        P::RemoveWatches(_) => "remove_watches",
        P::CheckWatches(_) => "check_watches",
        P::Auth(_) => "add_auth",
        P::WhoAmI(_) => "who_am_i",
        P::Ping(_) => "ping",
        P::Close(_) => "close",
        P::SetWatches(_) => "set_watches",
    }
}

impl Client {
    /// Connects to one of the servers of `connect_string` (`host:port,...`, tried in random order) and starts a session.
    pub async fn connect(connect_string: &str, options: ClientOptions) -> Result<Client, ClientError> {
        options.validate()?;
        let mut hosts = connect_string::parse(connect_string)?;
        hosts.shuffle(&mut rand::rng());
        let settings = Settings {
            session_timeout: options.session_timeout,
            connect_timeout: options.connect_timeout,
            max_pending: options.max_pending,
            max_message_bytes: options.max_message_bytes,
            backoff: reconnect::Backoff { min: options.backoff_min, max: options.backoff_max },
            tls: options.tls.clone(),
        };
        let handles = connection::open(hosts, settings).await?;
        let client = Client {
            inner: Arc::new(Inner {
                commands: handles.commands,
                control: handles.control,
                shared: handles.shared,
                request_timeout: options.request_timeout,
                watcher_queue: options.watcher_queue,
                next_watcher: AtomicU64::new(1),
            }),
            consistency: pb::Consistency::Local,
        };
        for (scheme, auth) in &options.auth {
            if let Err(e) = client.add_auth(scheme, auth).await {
                // Closing is best effort: the auth error is what the caller needs.
                let _ = client.close().await;
                return Err(e);
            }
        }
        Ok(client)
    }

    /// A handle on the same session whose reads are linearizable: each is
    /// answered once the leader has confirmed, after the read reached it,
    /// that it still leads and the member has applied its commit point, so
    /// it sees every write acknowledged to anyone before it was sent (one
    /// quorum round trip, shared by the reads waiting together). Requests
    /// of both handles keep one order: they share the session.
    pub fn linearizable(&self) -> Client {
        Client { inner: self.inner.clone(), consistency: pb::Consistency::Linearizable }
    }

    /// Sends one request and waits for its answer (or an error).
    async fn call(
        &self,
        op: pb::request::Op,
        effect: Effect,
        path: &str,
    ) -> Result<Option<pb::response::Result>, ClientError> {
        let shared = &self.inner.shared;
        if shared.state().is_terminal() {
            return Err(shared.terminal_error());
        }
        let name = op_name(&op);
        let (reply, answer) = oneshot::channel();
        let work = async {
            let command = Command { op, effect, reply, consistency: self.consistency };
            self.inner.commands.send(command).await.map_err(|_| shared.terminal_error())?;
            answer.await.map_err(|_| shared.terminal_error())?
        };
        let response = match self.inner.request_timeout {
            Some(limit) => tokio::time::timeout(limit, work).await.map_err(|_| {
                if shared.state() == ConnectionState::Disconnected {
                    // No server took the session meanwhile (the request waited
                    // for one): say so, and why, rather than only "too slow".
                    ClientError::ConnectionLoss(format!(
                        "{name} {path}: no server accepted the session within {limit:?}: {}",
                        shared.disconnect_reason()
                    ))
                } else {
                    ClientError::Timeout { what: format!("{name} {path}"), after: limit }
                }
            })??,
            None => work.await?,
        };
        response::result(response, path)
    }

    async fn simple(&self, op: pb::request::Op, path: &str) -> Result<Option<pb::response::Result>, ClientError> {
        self.call(op, Effect::None, path).await
    }

    /// Creates a node and returns its final path (sequential modes append a counter).
    pub async fn create(&self, path: &str, data: &[u8], mode: CreateMode, acl: &[Acl]) -> Result<String, ClientError> {
        Ok(self.create_with_stat(path, data, mode, acl).await?.0)
    }

    /// Creates a node and returns its final path and Stat.
    pub async fn create_with_stat(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
    ) -> Result<(String, Stat), ClientError> {
        let op = pb::request::Op::Create(convert::create_request(path, data, mode, acl, None));
        response::created(self.simple(op, path).await?)
    }

    /// Creates a node with a TTL (`mode` must be a TTL mode) and returns its final path.
    pub async fn create_ttl(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
        ttl: Duration,
    ) -> Result<String, ClientError> {
        Ok(self.create_ttl_with_stat(path, data, mode, acl, ttl).await?.0)
    }

    /// Creates a node with a TTL (`mode` must be a TTL mode) and returns its final path and Stat.
    pub async fn create_ttl_with_stat(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
        ttl: Duration,
    ) -> Result<(String, Stat), ClientError> {
        if !mode.is_ttl() {
            return Err(ClientError::InvalidArgument(format!("create_ttl needs a TTL mode, not {mode:?}")));
        }
        let op = pb::request::Op::Create(convert::create_request(path, data, mode, acl, Some(ttl)));
        response::created(self.simple(op, path).await?)
    }

    /// Returns a node's data and Stat.
    pub async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ClientError> {
        let op = pb::request::Op::GetData(pb::GetDataRequest { path: path.into(), watch: false });
        response::data(self.simple(op, path).await?)
    }

    /// Returns a node's data and Stat, and a watch for its next change or deletion.
    pub async fn get_data_and_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, OneshotWatcher), ClientError> {
        let (tx, watcher) = OneshotWatcher::new();
        let op = pb::request::Op::GetData(pb::GetDataRequest { path: path.into(), watch: true });
        let effect = Effect::Oneshot { kind: OneshotKind::Data, path: path.into(), tx };
        let (data, stat) = response::data(self.call(op, effect, path).await?)?;
        Ok((data, stat, watcher))
    }

    /// Replaces a node's data if its version matches (`ANY_VERSION` for any) and returns the new Stat.
    pub async fn set_data(&self, path: &str, data: &[u8], version: i32) -> Result<Stat, ClientError> {
        let op = pb::request::Op::SetData(pb::SetDataRequest { path: path.into(), data: data.to_vec(), version });
        response::stat(self.simple(op, path).await?)
    }

    /// Deletes a node if its version matches (`ANY_VERSION` for any).
    pub async fn delete(&self, path: &str, version: i32) -> Result<(), ClientError> {
        let op = pb::request::Op::Delete(pb::DeleteRequest { path: path.into(), version });
        response::empty(self.simple(op, path).await?)
    }

    /// Returns a node's Stat, or `None` if it does not exist.
    pub async fn exists(&self, path: &str) -> Result<Option<Stat>, ClientError> {
        let op = pb::request::Op::Exists(pb::ExistsRequest { path: path.into(), watch: false });
        match self.simple(op, path).await {
            Ok(result) => response::stat(result).map(Some),
            Err(e) if e.is_server_code(zabkeeper_core::error::ErrorCode::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Returns a node's Stat (or `None`) and a watch for its creation, change or deletion.
    pub async fn exists_and_watch(&self, path: &str) -> Result<(Option<Stat>, OneshotWatcher), ClientError> {
        let (tx, watcher) = OneshotWatcher::new();
        let op = pb::request::Op::Exists(pb::ExistsRequest { path: path.into(), watch: true });
        let effect = Effect::Exists { path: path.into(), tx };
        match self.call(op, effect, path).await {
            Ok(result) => Ok((Some(response::stat(result)?), watcher)),
            Err(e) if e.is_server_code(zabkeeper_core::error::ErrorCode::NoNode) => Ok((None, watcher)),
            Err(e) => Err(e),
        }
    }

    /// Returns the names of a node's children, sorted.
    pub async fn get_children(&self, path: &str) -> Result<Vec<String>, ClientError> {
        let op =
            pb::request::Op::GetChildren(pb::GetChildrenRequest { path: path.into(), watch: false, with_stat: false });
        Ok(response::children(self.simple(op, path).await?)?.0)
    }

    /// Returns the names of a node's children and the node's Stat.
    pub async fn get_children_with_stat(&self, path: &str) -> Result<(Vec<String>, Stat), ClientError> {
        let op =
            pb::request::Op::GetChildren(pb::GetChildrenRequest { path: path.into(), watch: false, with_stat: true });
        let (children, stat) = response::children(self.simple(op, path).await?)?;
        let stat =
            stat.ok_or_else(|| ClientError::Protocol("get_children with stat answered without a Stat".into()))?;
        Ok((children, stat))
    }

    /// Returns the names of a node's children and a watch for its child list changing or the node's deletion.
    pub async fn get_children_and_watch(&self, path: &str) -> Result<(Vec<String>, OneshotWatcher), ClientError> {
        let (tx, watcher) = OneshotWatcher::new();
        let op =
            pb::request::Op::GetChildren(pb::GetChildrenRequest { path: path.into(), watch: true, with_stat: false });
        let effect = Effect::Oneshot { kind: OneshotKind::Child, path: path.into(), tx };
        Ok((response::children(self.call(op, effect, path).await?)?.0, watcher))
    }

    /// Returns the number of descendants of a node (not counting itself).
    pub async fn get_all_children_number(&self, path: &str) -> Result<i32, ClientError> {
        let op = pb::request::Op::GetAllChildrenNumber(pb::GetAllChildrenNumberRequest { path: path.into() });
        response::count(self.simple(op, path).await?)
    }

    /// Returns this session's ephemeral nodes whose paths start with `prefix` ("/" for all).
    pub async fn get_ephemerals(&self, prefix: &str) -> Result<Vec<String>, ClientError> {
        let op = pb::request::Op::GetEphemerals(pb::GetEphemeralsRequest { prefix: prefix.into() });
        response::paths(self.simple(op, prefix).await?)
    }

    /// Succeeds only if the node exists with this version (`ANY_VERSION` for any).
    pub async fn check(&self, path: &str, version: i32) -> Result<(), ClientError> {
        let op = pb::request::Op::Check(pb::CheckRequest { path: path.into(), version });
        match self.simple(op, path).await? {
            // A standalone check may carry the Stat (as ZooKeeper's does) or nothing.
            Some(pb::response::Result::Stat(_)) => Ok(()),
            other => response::empty(other),
        }
    }

    /// Applies all ops atomically; on failure returns `MultiFailed` with the first failing op's error and every op's outcome.
    pub async fn multi(&self, ops: &[MultiOp]) -> Result<Vec<MultiResult>, ClientError> {
        if ops.is_empty() {
            // As ZooKeeper's client: nothing to apply, nothing to ask.
            return Ok(Vec::new());
        }
        let results = response::multi(self.simple(multi_pb::multi_request(ops), "").await?)?;
        multi_pb::decode_multi(ops, results)
    }

    /// Runs independent reads together; each gets its own result or error.
    pub async fn multi_read(&self, ops: &[ReadOp]) -> Result<Vec<Result<ReadResult, ZkError>>, ClientError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        multi_pb::decode_multi_read(ops, self.simple(multi_pb::multi_read_request(ops), "").await?)
    }

    /// Waits until the server this session uses has caught up with the leader (as of the call); returns the path.
    pub async fn sync(&self, path: &str) -> Result<String, ClientError> {
        let op = pb::request::Op::Sync(pb::SyncRequest { path: path.into() });
        let mut paths = response::paths(self.simple(op, path).await?)?;
        Ok(paths.pop().unwrap_or_else(|| path.to_string()))
    }

    /// Returns a node's ACL and Stat.
    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat), ClientError> {
        let op = pb::request::Op::GetAcl(pb::GetAclRequest { path: path.into() });
        response::acl(self.simple(op, path).await?)
    }

    /// Replaces a node's ACL if its ACL version matches (`ANY_VERSION` for any) and returns the new Stat.
    pub async fn set_acl(&self, path: &str, acl: &[Acl], version: i32) -> Result<Stat, ClientError> {
        let acl = convert::acl_to_pb(acl);
        let op = pb::request::Op::SetAcl(pb::SetAclRequest { path: path.into(), acl, version });
        response::stat(self.simple(op, path).await?)
    }

    /// Adds an identity to the session (e.g. scheme "digest", auth "user:password"); it is re-added after reconnects.
    pub async fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), ClientError> {
        let op = pb::request::Op::Auth(pb::AuthRequest { scheme: scheme.into(), auth: auth.to_vec() });
        let effect = Effect::Auth { scheme: scheme.into(), auth: auth.to_vec() };
        response::empty(self.call(op, effect, "").await?)
    }

    /// Returns the identities the session is authenticated as.
    pub async fn who_am_i(&self) -> Result<Vec<Id>, ClientError> {
        response::identities(self.simple(pb::request::Op::WhoAmI(pb::WhoAmIRequest {}), "").await?)
    }

    /// Adds a persistent (or persistent recursive) watch and returns the stream of its events.
    pub async fn add_watch(&self, path: &str, mode: AddWatchMode) -> Result<PersistentWatcher, ClientError> {
        let id = self.inner.next_watcher.fetch_add(1, Ordering::Relaxed);
        let (sink, watcher) =
            PersistentWatcher::new(path, mode, id, self.inner.watcher_queue, self.inner.control.clone());
        let op = pb::request::Op::AddWatch(pb::AddWatchRequest { path: path.into(), mode: mode as i32 });
        let effect = Effect::AddWatch { mode, path: path.into(), id, sink: Some(sink) };
        // On failure the watcher is dropped here, which unregisters it.
        response::empty(self.call(op, effect, path).await?)?;
        Ok(watcher)
    }

    /// Removes this session's watches of a kind on a path; local watchers are told with a `*WatchRemoved` event.
    pub async fn remove_watches(&self, path: &str, kind: WatcherType) -> Result<(), ClientError> {
        let op = pb::request::Op::RemoveWatches(pb::RemoveWatchesRequest { path: path.into(), r#type: kind as i32 });
        let effect = Effect::RemoveWatches { path: path.into(), kind };
        response::empty(self.call(op, effect, path).await?)
    }

    /// Succeeds if the session has a watch of this kind on the path (`NoWatcher` otherwise).
    pub async fn check_watches(&self, path: &str, kind: WatcherType) -> Result<(), ClientError> {
        let op = pb::request::Op::CheckWatches(pb::CheckWatchesRequest { path: path.into(), r#type: kind as i32 });
        response::empty(self.simple(op, path).await?)
    }

    /// Closes the session (its ephemerals go at once) and waits for the server to confirm; idempotent.
    pub async fn close(&self) -> Result<(), ClientError> {
        if self.state().is_terminal() {
            return Ok(());
        }
        let (reply, done) = oneshot::channel();
        if self.inner.control.send(Control::Close { reply }).is_err() {
            return Ok(());
        }
        done.await.unwrap_or(Ok(()))
    }

    /// The session id (as servers and `Stat::ephemeral_owner` show it).
    pub fn session_id(&self) -> i64 {
        self.inner.shared.session_id()
    }

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.inner.shared.timeout()
    }

    /// The server (`host:port`) of the current connection, or of the last one while disconnected.
    pub fn server(&self) -> String {
        self.inner.shared.server()
    }

    /// The highest zxid this client has seen in an answer.
    pub fn last_zxid(&self) -> i64 {
        self.inner.shared.last_zxid()
    }

    /// The current connection state.
    pub fn state(&self) -> ConnectionState {
        self.inner.shared.state()
    }

    /// Every state change from now on, in order (ends after `Expired` or `Closed`).
    pub fn state_stream(&self) -> StateStream {
        self.inner.shared.transitions()
    }

    /// The latest state as a `watch` channel (for `wait_for` and `changed`).
    pub fn state_watch(&self) -> watch::Receiver<ConnectionState> {
        self.inner.shared.state_watch()
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session_id", &format_args!("{:#x}", self.session_id()))
            .field("state", &self.state())
            .field("server", &self.server())
            .field("last_zxid", &format_args!("{:#x}", self.last_zxid()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated_before_connecting() {
        assert!(ClientOptions::default().validate().is_ok());
        let zero = ClientOptions::default().with_session_timeout(Duration::ZERO);
        assert!(zero.validate().unwrap_err().to_string().contains("session_timeout"));
        let huge = ClientOptions::default().with_session_timeout(Duration::from_secs(u64::MAX / 4));
        assert!(huge.validate().is_err());
        let pending = ClientOptions { max_pending: 0, ..ClientOptions::default() };
        assert!(pending.validate().unwrap_err().to_string().contains("max_pending"));
        let backoff = ClientOptions { backoff_max: Duration::ZERO, ..ClientOptions::default() };
        assert!(backoff.validate().is_err());
        let auth = ClientOptions::default().with_digest_auth("u", "p");
        assert_eq!(auth.auth, vec![("digest".to_string(), b"u:p".to_vec())]);
    }

    #[tokio::test]
    async fn connecting_to_nothing_fails_with_a_transport_error_within_the_connect_timeout() {
        // Port 1 on loopback: nothing listens there (privileged, never bound in tests).
        let options = ClientOptions::default().with_connect_timeout(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let err = Client::connect("127.0.0.1:1", options).await.unwrap_err();
        assert!(matches!(err, ClientError::Transport { .. }), "{err}");
        assert!(err.is_connection_problem());
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn a_bad_connect_string_is_refused_before_any_connection() {
        let err = Client::connect("nohost", ClientOptions::default()).await.unwrap_err();
        assert!(matches!(err, ClientError::InvalidConnectString { .. }), "{err}");
    }
}
