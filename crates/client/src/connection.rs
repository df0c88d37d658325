//! The background task that owns the session: one gRPC `Session` stream at a
//! time, the FIFO of requests in flight, watch routing, pings, dead-connection
//! detection, and resuming the session on another server when a stream breaks.
//!
//! Life of the task: `open` connects a new session (trying servers until the
//! connect timeout) and spawns `run`. `serve` moves requests and answers until
//! the stream ends; then every request in flight fails with ConnectionLoss
//! (a write's outcome is unknown, as in ZooKeeper), the application sees
//! `Disconnected`, and `reconnect` resumes the session (id, password, last
//! zxid seen) round robin over the servers. A resumed stream first re-adds
//! auth and re-registers watches (SetWatches relative to the last zxid seen)
//! and only then carries queued application requests. A server saying the
//! session expired, or no server reachable within the session timeout, ends
//! the task with `Expired`; a close ends it with `Closed`.

use super::connect_string::ServerAddr;
use super::control::Control;
use super::dial::{attempt, check_connected, code_name, error_chain, give_up, AttemptError, Link};
use super::error::ClientError;
use super::fifo::Fifo;
use super::reconnect::{ReconnectPlan, Step};
use super::settings::Settings;
use super::state::{ConnectionState, Shared};
use super::watch_pb::{event_from_pb, set_watches_requests, watcher_type_for, SET_WATCHES_MAX_BYTES};
use super::watcher::{OneshotKind, Orphan, Sink, WatchRegistry, WatchedEvent};
use crate::proto::client as pb;
use crate::tree::watch::{AddWatchMode, WatcherType};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep, sleep_until, Instant};
use zabkeeper_core::error::ErrorCode;

/// What a request does to the client's own state once answered.
pub(crate) enum Effect {
    /// Nothing.
    None,
    /// getData / getChildren with a watch: registered if the read succeeded.
    Oneshot { kind: OneshotKind, path: String, tx: oneshot::Sender<WatchedEvent> },
    /// exists with a watch: a data watch if the node exists, an exist watch on NoNode.
    Exists { path: String, tx: oneshot::Sender<WatchedEvent> },
    /// addWatch: the sink is registered when the request is sent (so a watcher
    /// dropped meanwhile is accounted for) and forgotten if the server refuses.
    AddWatch { mode: AddWatchMode, path: String, id: u64, sink: Option<Sink> },
    /// removeWatches: local watchers are told and forgotten once the server agrees.
    RemoveWatches { path: String, kind: WatcherType },
    /// auth: remembered, to be re-added on every reconnect, once accepted.
    Auth { scheme: String, auth: Vec<u8> },
}

/// An application request for the task.
pub(crate) struct Command {
    /// The operation.
    pub op: pb::request::Op,
    /// What its answer changes locally.
    pub effect: Effect,
    /// Where the answer goes.
    pub reply: oneshot::Sender<Result<pb::Response, ClientError>>,
    /// How fresh a read must be.
    pub consistency: pb::Consistency,
}

/// A request in flight.
enum InFlight {
    User { effect: Effect, reply: oneshot::Sender<Result<pb::Response, ClientError>> },
    Ping,
    SetWatches,
    ReAuth { scheme: String },
    RemoveOrphan { reply: Option<oneshot::Sender<Result<(), ClientError>>> },
    Close,
}

/// Why `serve` returned.
enum End {
    /// The stream broke; resume elsewhere.
    Lost(String),
    /// The session is over.
    Terminal(ConnectionState),
}

/// The channels a client handle keeps.
pub(crate) struct Handles {
    pub commands: mpsc::Sender<Command>,
    pub control: mpsc::UnboundedSender<Control>,
    pub shared: Arc<Shared>,
}

/// Connects a new session to one of `hosts` (in the order given) within the
/// connect timeout, and spawns the task that serves it.
pub(crate) async fn open(hosts: Vec<ServerAddr>, settings: Settings) -> Result<Handles, ClientError> {
    let requested_ms = i32::try_from(settings.session_timeout.as_millis()).unwrap_or(i32::MAX);
    let deadline = Instant::now() + settings.connect_timeout;
    let mut plan = ReconnectPlan::new(hosts.len(), 0, deadline.into_std(), settings.connect_timeout, settings.backoff);
    let mut last_error: Option<AttemptError> = None;
    loop {
        let Step::Attempt { host, timeout } = plan.next(Instant::now().into_std()) else {
            return Err(give_up(&hosts, settings.connect_timeout, last_error));
        };
        let connect = pb::Connect { timeout_ms: requested_ms, session_id: 0, password: Vec::new(), last_zxid_seen: 0 };
        let server = hosts[host].clone();
        let result = attempt(server.clone(), connect, timeout, settings.clone())
            .await
            .and_then(|(link, c)| check_connected(&c, 0, &link.server).map(|()| (link, c)));
        match result {
            Ok((link, connected)) => {
                tracing::debug!(server = %server, session = format_args!("{:#x}", connected.session_id), timeout_ms = connected.timeout_ms, "session established");
                let shared = Arc::new(Shared::new(connected.session_id, connected.timeout_ms, link.server.clone()));
                let (commands_tx, commands) = mpsc::channel(settings.max_pending.max(1));
                let (control_tx, control) = mpsc::unbounded_channel();
                let task = Connection {
                    hosts,
                    current: host,
                    settings,
                    requested_ms,
                    shared: shared.clone(),
                    commands,
                    control,
                    control_open: true,
                    registry: WatchRegistry::default(),
                    fifo: Fifo::new(),
                    auths: Vec::new(),
                    password: connected.password,
                    closing: None,
                    last_heard: Instant::now(),
                };
                tokio::spawn(task.run(link));
                return Ok(Handles { commands: commands_tx, control: control_tx, shared });
            }
            Err(e) => {
                tracing::debug!(error = %e, "connect attempt failed");
                last_error = Some(e);
                let wait = plan.failed(Instant::now().into_std(), rand::random::<f64>());
                sleep(wait).await;
            }
        }
    }
}

/// The task's state.
struct Connection {
    hosts: Vec<ServerAddr>,
    current: usize,
    settings: Settings,
    requested_ms: i32,
    shared: Arc<Shared>,
    commands: mpsc::Receiver<Command>,
    control: mpsc::UnboundedReceiver<Control>,
    control_open: bool,
    registry: WatchRegistry,
    fifo: Fifo<InFlight>,
    /// Credentials the server accepted, re-added on every reconnect.
    auths: Vec<(String, Vec<u8>)>,
    password: Vec<u8>,
    /// Set once a close was asked: the callers waiting for it.
    closing: Option<Vec<oneshot::Sender<Result<(), ClientError>>>>,
    /// When a server last sent anything (the session's timeout runs from here).
    last_heard: Instant,
}

impl Connection {
    async fn run(mut self, first: Link) {
        let mut link = first;
        let state = loop {
            match self.serve(&mut link).await {
                End::Terminal(state) => break state,
                End::Lost(reason) => {
                    tracing::info!(server = %link.server, reason = %reason, "connection lost");
                    self.shared.note_failure(&link.server, &reason);
                    self.fail_in_flight(&reason);
                    if self.closing.is_some() {
                        break ConnectionState::Closed;
                    }
                    self.shared.set_state(ConnectionState::Disconnected);
                    // Orphans need no removal: the server forgets a broken connection's watches.
                    let _ = self.registry.connection_changed(ConnectionState::Disconnected);
                    match self.reconnect().await {
                        Ok(next) => link = next,
                        Err(state) => break state,
                    }
                }
            }
        };
        self.finish(state);
    }

    /// Moves requests and answers on one stream until it ends.
    async fn serve(&mut self, link: &mut Link) -> End {
        let timeout = self.shared.timeout();
        let ping_every = timeout / 3;
        let read_timeout = timeout * 2 / 3;
        loop {
            let accept = self.closing.is_none() && self.fifo.len() < self.settings.max_pending;
            let ping_at = link.last_send + ping_every;
            let dead_at = self.last_heard + read_timeout;
            let step = tokio::select! {
                biased;
                msg = link.incoming.message() => match msg {
                    Ok(Some(msg)) => {
                        self.last_heard = Instant::now();
                        self.on_message(msg, link)
                    }
                    Ok(None) => Err(End::Lost(format!("{} ended the stream", link.server))),
                    Err(status) => Err(End::Lost(format!("the stream from {} failed: {}", link.server, error_chain(&status)))),
                },
                ctl = self.control.recv(), if self.control_open => match ctl {
                    Some(ctl) => self.on_control(ctl, link),
                    None => {
                        self.control_open = false;
                        Ok(())
                    }
                },
                cmd = self.commands.recv(), if accept => match cmd {
                    Some(cmd) => self.send_command(cmd, link),
                    // Every client handle is gone: close the session rather than leave it to expire.
                    None => self.start_close(None, link),
                },
                _ = sleep_until(ping_at), if self.closing.is_none() => {
                    let xid = self.fifo.push(InFlight::Ping);
                    send(link, xid, pb::request::Op::Ping(pb::PingRequest {}))
                },
                _ = sleep_until(dead_at) => Err(End::Lost(format!("nothing heard from {} for {:?}", link.server, read_timeout))),
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    fn on_message(&mut self, msg: pb::ServerMessage, link: &mut Link) -> Result<(), End> {
        use pb::server_message::Kind;
        match msg.kind {
            Some(Kind::Response(response)) => {
                let entry = self
                    .fifo
                    .complete(response.xid)
                    .map_err(|e| End::Lost(format!("protocol violation by {}: {e}", link.server)))?;
                self.shared.observe_zxid(response.zxid);
                self.on_response(entry, response, link)
            }
            Some(Kind::Event(event)) => {
                let Some(event) = event_from_pb(event) else {
                    tracing::warn!(server = %link.server, "ignoring a watch event of an unknown type");
                    return Ok(());
                };
                let orphans = self.registry.dispatch(&event);
                self.remove_orphans(orphans, link)
            }
            Some(Kind::Closing(closing)) => Err(match ErrorCode::from_code(closing.error) {
                Some(ErrorCode::Ok) => End::Terminal(ConnectionState::Closed),
                Some(ErrorCode::SessionExpired) => End::Terminal(ConnectionState::Expired),
                _ => End::Lost(format!(
                    "{} closed the stream: {} {}",
                    link.server,
                    code_name(closing.error),
                    closing.message
                )),
            }),
            Some(Kind::Connected(_)) => {
                Err(End::Lost(format!("protocol violation by {}: a second Connected", link.server)))
            }
            None => Err(End::Lost(format!("protocol violation by {}: an empty message", link.server))),
        }
    }

    fn on_response(&mut self, entry: InFlight, response: pb::Response, link: &mut Link) -> Result<(), End> {
        let ok = response.error == 0;
        match entry {
            InFlight::User { effect, reply } => {
                match effect {
                    Effect::Oneshot { kind, path, tx } if ok => self.registry.add_oneshot(kind, &path, tx),
                    Effect::Exists { path, tx } => {
                        if ok {
                            self.registry.add_oneshot(OneshotKind::Data, &path, tx);
                        } else if response.error == ErrorCode::NoNode.code() {
                            self.registry.add_oneshot(OneshotKind::Exist, &path, tx);
                        }
                    }
                    Effect::AddWatch { mode, path, id, .. } if !ok => {
                        // Nothing to undo on the server: it refused the watch.
                        self.registry.remove_persistent(mode, &path, id);
                    }
                    Effect::RemoveWatches { path, kind } if ok => self.registry.removed(&path, kind),
                    Effect::Auth { scheme, auth }
                        if ok && !self.auths.iter().any(|(s, a)| *s == scheme && *a == auth) =>
                    {
                        self.auths.push((scheme, auth));
                    }
                    _ => {}
                }
                // The caller may have stopped waiting (timeout): nothing to do then.
                let _ = reply.send(Ok(response));
            }
            InFlight::Ping | InFlight::Close => {}
            InFlight::SetWatches if !ok => {
                tracing::warn!(server = %link.server, error = %code_name(response.error), reason = %response.error_message, "re-registering watches failed");
            }
            InFlight::ReAuth { scheme } if !ok => {
                tracing::warn!(server = %link.server, scheme = %scheme, error = %code_name(response.error), "re-adding auth failed");
            }
            InFlight::SetWatches | InFlight::ReAuth { .. } => {}
            InFlight::RemoveOrphan { reply } => {
                let result = if ok || response.error == ErrorCode::NoWatcher.code() {
                    Ok(())
                } else {
                    Err(super::response::server_error(&response))
                };
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
        }
        Ok(())
    }

    fn send_command(&mut self, cmd: Command, link: &mut Link) -> Result<(), End> {
        let Command { op, mut effect, reply, consistency } = cmd;
        if reply.is_closed() {
            // The caller gave up (timeout) before the request left: do not send it.
            return Ok(());
        }
        if let Effect::AddWatch { mode, path, sink, .. } = &mut effect {
            if let Some(sink) = sink.take() {
                self.registry.add_persistent(*mode, path, sink);
            }
        }
        let xid = self.fifo.push(InFlight::User { effect, reply });
        send_request(link, pb::Request { xid, op: Some(op), consistency: consistency.into() })
    }

    fn on_control(&mut self, ctl: Control, link: &mut Link) -> Result<(), End> {
        match ctl {
            Control::DropPersistent { mode, path, id, reply } => {
                if self.registry.remove_persistent(mode, &path, id) {
                    let xid = self.fifo.push(InFlight::RemoveOrphan { reply });
                    let op = pb::RemoveWatchesRequest { path, r#type: watcher_type_for(mode) as i32 };
                    send(link, xid, pb::request::Op::RemoveWatches(op))
                } else {
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(()));
                    }
                    Ok(())
                }
            }
            Control::Close { reply } => self.start_close(Some(reply), link),
        }
    }

    /// Sends the Close request (once) and stops taking requests; the answer
    /// and the server's `Closing{OK}` end `serve`.
    fn start_close(
        &mut self,
        reply: Option<oneshot::Sender<Result<(), ClientError>>>,
        link: &mut Link,
    ) -> Result<(), End> {
        let first = self.closing.is_none();
        let waiters = self.closing.get_or_insert_with(Vec::new);
        waiters.extend(reply);
        if !first {
            return Ok(());
        }
        let xid = self.fifo.push(InFlight::Close);
        send(link, xid, pb::request::Op::Close(pb::CloseRequest {}))
    }

    fn remove_orphans(&mut self, orphans: Vec<Orphan>, link: &mut Link) -> Result<(), End> {
        for (mode, path) in orphans {
            let xid = self.fifo.push(InFlight::RemoveOrphan { reply: None });
            let op = pb::RemoveWatchesRequest { path, r#type: watcher_type_for(mode) as i32 };
            send(link, xid, pb::request::Op::RemoveWatches(op))?;
        }
        Ok(())
    }

    /// Fails everything in flight after the stream broke.
    fn fail_in_flight(&mut self, reason: &str) {
        for entry in self.fifo.drain() {
            match entry {
                InFlight::User { reply, .. } => {
                    let _ = reply.send(Err(ClientError::ConnectionLoss(reason.to_string())));
                }
                // Already forgotten locally, and the server dropped the broken connection's watches.
                InFlight::RemoveOrphan { reply: Some(reply) } => {
                    let _ = reply.send(Ok(()));
                }
                _ => {}
            }
        }
    }

    /// Handles a control message while no stream is up. `Some` ends the task.
    fn on_control_disconnected(&mut self, ctl: Option<Control>) -> Option<ConnectionState> {
        match ctl {
            None => {
                self.control_open = false;
                None
            }
            Some(Control::DropPersistent { mode, path, id, reply }) => {
                // Not re-registered on reconnect, so the server never hears of it again.
                self.registry.remove_persistent(mode, &path, id);
                if let Some(reply) = reply {
                    let _ = reply.send(Ok(()));
                }
                None
            }
            Some(Control::Close { reply }) => {
                // No server to tell: the session will expire on its own.
                self.closing.get_or_insert_with(Vec::new).push(reply);
                Some(ConnectionState::Closed)
            }
        }
    }

    /// Resumes the session on some server, or says why the session is over.
    async fn reconnect(&mut self) -> Result<Link, ConnectionState> {
        let session_id = self.shared.session_id();
        let deadline = self.last_heard + self.shared.timeout();
        let start = (self.current + 1) % self.hosts.len().max(1);
        let mut plan = ReconnectPlan::new(
            self.hosts.len(),
            start,
            deadline.into_std(),
            self.settings.connect_timeout,
            self.settings.backoff,
        );
        loop {
            if self.commands.is_closed() && self.commands.is_empty() {
                // No handle left to use the session, and no server to close it on.
                return Err(ConnectionState::Closed);
            }
            let Step::Attempt { host, timeout } = plan.next(Instant::now().into_std()) else {
                tracing::warn!(
                    session = format_args!("{session_id:#x}"),
                    "no server reachable within the session timeout: the session is expired"
                );
                return Err(ConnectionState::Expired);
            };
            let connect = pb::Connect {
                timeout_ms: self.requested_ms,
                session_id,
                password: self.password.clone(),
                last_zxid_seen: self.shared.last_zxid(),
            };
            let server = self.hosts[host].clone();
            let work = attempt(server.clone(), connect, timeout, self.settings.clone());
            tokio::pin!(work);
            let result = loop {
                tokio::select! {
                    result = &mut work => break result,
                    ctl = self.control.recv(), if self.control_open => {
                        if let Some(state) = self.on_control_disconnected(ctl) {
                            return Err(state);
                        }
                    }
                }
            };
            let failure = match result
                .and_then(|(link, c)| check_connected(&c, session_id, &link.server).map(|()| (link, c)))
            {
                Ok((mut link, connected)) => {
                    self.current = host;
                    self.password = connected.password;
                    self.shared.set_timeout_ms(connected.timeout_ms);
                    self.shared.set_server(&link.server);
                    self.last_heard = Instant::now();
                    match self.restore(&mut link) {
                        Ok(()) => {
                            tracing::info!(server = %link.server, session = format_args!("{session_id:#x}"), "session resumed");
                            self.shared.clear_failures();
                            self.shared.set_state(ConnectionState::Connected);
                            let orphans = self.registry.connection_changed(ConnectionState::Connected);
                            match self.remove_orphans(orphans, &mut link) {
                                Ok(()) => return Ok(link),
                                Err(end) => {
                                    // Announced too early: take it back before trying again.
                                    self.shared.set_state(ConnectionState::Disconnected);
                                    let _ = self.registry.connection_changed(ConnectionState::Disconnected);
                                    end_reason(end)
                                }
                            }
                        }
                        Err(end) => end_reason(end),
                    }
                }
                Err(AttemptError::Refused { code: ErrorCode::SessionExpired, server, message }) => {
                    tracing::warn!(server = %server, reason = %message, "the session expired");
                    return Err(ConnectionState::Expired);
                }
                Err(e) => e.to_string(),
            };
            tracing::debug!(server = %server, error = %failure, "reconnect attempt failed");
            self.shared.note_failure(&server.to_string(), &failure);
            self.fail_in_flight(&failure);
            let wait = plan.failed(Instant::now().into_std(), rand::random::<f64>());
            let nap = sleep(wait);
            tokio::pin!(nap);
            loop {
                tokio::select! {
                    _ = &mut nap => break,
                    ctl = self.control.recv(), if self.control_open => {
                        if let Some(state) = self.on_control_disconnected(ctl) {
                            return Err(state);
                        }
                    }
                }
            }
        }
    }

    /// First messages on a resumed stream: auth, then the watches, so both
    /// are in place before any queued application request.
    fn restore(&mut self, link: &mut Link) -> Result<(), End> {
        for (scheme, auth) in self.auths.clone() {
            let xid = self.fifo.push(InFlight::ReAuth { scheme: scheme.clone() });
            send(link, xid, pb::request::Op::Auth(pb::AuthRequest { scheme, auth }))?;
        }
        let relative_zxid = self.shared.last_zxid();
        for request in set_watches_requests(self.registry.lists(), relative_zxid, SET_WATCHES_MAX_BYTES) {
            let xid = self.fifo.push(InFlight::SetWatches);
            send(link, xid, pb::request::Op::SetWatches(request))?;
        }
        Ok(())
    }

    /// The session is over: tell everyone and refuse what is still queued.
    fn finish(mut self, state: ConnectionState) {
        tracing::debug!(
            session = format_args!("{:#x}", self.shared.session_id()),
            state = state.name(),
            "client finished"
        );
        self.shared.set_state(state);
        self.registry.terminate(state);
        let error = self.shared.terminal_error();
        for entry in self.fifo.drain() {
            if let InFlight::User { reply, .. } = entry {
                let _ = reply.send(Err(error.clone()));
            }
        }
        self.commands.close();
        while let Ok(cmd) = self.commands.try_recv() {
            let _ = cmd.reply.send(Err(error.clone()));
        }
        for waiter in self.closing.take().unwrap_or_default() {
            let _ = waiter.send(Ok(()));
        }
        self.control.close();
        while let Ok(ctl) = self.control.try_recv() {
            match ctl {
                Control::DropPersistent { reply: Some(reply), .. } => {
                    let _ = reply.send(Ok(()));
                }
                Control::Close { reply } => {
                    let _ = reply.send(Ok(()));
                }
                Control::DropPersistent { reply: None, .. } => {}
            }
        }
    }
}

fn end_reason(end: End) -> String {
    match end {
        End::Lost(reason) => reason,
        End::Terminal(state) => format!("the session ended ({})", state.name()),
    }
}

/// Queues one request on the stream; a full or closed queue means the stream is unusable.
fn send(link: &mut Link, xid: i32, op: pb::request::Op) -> Result<(), End> {
    send_request(link, pb::Request { xid, op: Some(op), consistency: pb::Consistency::Local.into() })
}

/// Queues one request, as [`send`] does.
fn send_request(link: &mut Link, request: pb::Request) -> Result<(), End> {
    let msg = pb::ClientMessage { kind: Some(pb::client_message::Kind::Request(request)) };
    match link.out.try_send(msg) {
        Ok(()) => {
            link.last_send = Instant::now();
            Ok(())
        }
        Err(mpsc::error::TrySendError::Full(_)) => {
            Err(End::Lost(format!("the outbound queue to {} is full", link.server)))
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {
            Err(End::Lost(format!("the outbound stream to {} is closed", link.server)))
        }
    }
}
