//! The console's own client session on the member that serves it. Its reads
//! and writes take the path every client's do (the front ends' [`Connection`]):
//! a write is forwarded to the leader, proposed and replicated like any other,
//! and appears in the log with this session's id. One session is opened
//! lazily, kept alive with pings while it is used, closed after five idle
//! minutes, and opened afresh when needed again (or once it expired).

use crate::ports::{Connection, Outbox};
use crate::runtime::handle::Handle;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use zabkeeper_core::acl::Id;
use zabkeeper_core::error::ZkError;
use zabkeeper_core::ids::SessionId;
use zabkeeper_core::op::{Op, OpResult};
use zabkeeper_core::replica::{ClientMessage, ConnectRequest, Echo};

/// The session timeout the console asks for (the member may bound it).
const TIMEOUT_MS: i32 = 30_000;
/// How long opening the session may take.
const CONNECT_WAIT: Duration = Duration::from_secs(5);
/// How long one request may take before the console gives up on it.
const REPLY_WAIT: Duration = Duration::from_secs(10);
/// An unused session is closed after this long, so a console opened once
/// does not hold a session (and count in every figure) for good.
const IDLE_CLOSE: Duration = Duration::from_secs(300);

/// Why a console request got no answer from the tree.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The replica answered with a ZooKeeper error.
    #[error(transparent)]
    Zk(#[from] ZkError),
    /// No session could be opened, or it ended while the request was out.
    #[error("this member cannot serve the console now: {0}")]
    Unavailable(String),
    /// The request had no answer in time.
    #[error("no answer within {} s", REPLY_WAIT.as_secs())]
    TimedOut,
}

type Pending = Mutex<HashMap<i32, oneshot::Sender<zabkeeper_core::op::Reply>>>;

/// An open session: where requests go, and who waits for which reply.
struct Live {
    session: Connection,
    id: SessionId,
    pending: Pending,
    next_xid: AtomicI32,
    closed: AtomicBool,
    last_used: Mutex<Instant>,
}

impl Live {
    fn xid(&self) -> i32 {
        // Positive xids only: ZooKeeper reserves the negative ones.
        self.next_xid.fetch_add(1, Ordering::Relaxed) & i32::MAX
    }

    fn forget_pending(&self) {
        // Dropping the senders wakes every waiter with an error.
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
    }
}

/// A lazily opened client session with fixed identities.
pub struct ConsoleSession {
    handle: Handle,
    identities: Vec<Id>,
    live: tokio::sync::Mutex<Option<Arc<Live>>>,
}

impl ConsoleSession {
    /// A session on `handle`'s replica that will authenticate as `identities`.
    pub fn new(handle: Handle, identities: Vec<Id>) -> ConsoleSession {
        ConsoleSession { handle, identities, live: tokio::sync::Mutex::new(None) }
    }

    /// The session's id, if it is open.
    pub async fn id(&self) -> Option<SessionId> {
        self.live.lock().await.as_ref().filter(|l| !l.closed.load(Ordering::Relaxed)).map(|l| l.id)
    }

    /// Runs one request.
    pub async fn call(&self, op: Op) -> Result<OpResult, CallError> {
        let live = self.live().await?;
        let rx = send(&live, op).await?;
        receive(rx).await
    }

    /// Runs requests pipelined (sent together, answered in order).
    pub async fn call_many(&self, ops: Vec<Op>) -> Result<Vec<Result<OpResult, CallError>>, CallError> {
        let live = self.live().await?;
        let mut waiting = Vec::with_capacity(ops.len());
        for op in ops {
            waiting.push(send(&live, op).await);
        }
        let mut out = Vec::with_capacity(waiting.len());
        for w in waiting {
            out.push(match w {
                Ok(rx) => receive(rx).await,
                Err(e) => Err(e),
            });
        }
        Ok(out)
    }

    async fn live(&self) -> Result<Arc<Live>, CallError> {
        let mut slot = self.live.lock().await;
        if let Some(live) = slot.as_ref().filter(|l| !l.closed.load(Ordering::Relaxed)) {
            return Ok(live.clone());
        }
        *slot = None;
        let live = self.open().await?;
        *slot = Some(live.clone());
        Ok(live)
    }

    async fn open(&self) -> Result<Arc<Live>, CallError> {
        let request =
            ConnectRequest { session_id: 0, password: Bytes::new(), timeout_ms: TIMEOUT_MS, last_zxid_seen: 0 };
        let opened = Connection::open(&self.handle, request, self.identities.clone(), None).await;
        let (session, mut outbox) = opened.ok_or_else(|| CallError::Unavailable("the replica is stopping".into()))?;
        let first = tokio::time::timeout(CONNECT_WAIT, outbox.recv()).await;
        let (id, timeout_ms) = match first {
            Ok(Some(ClientMessage::Connected { session: id, timeout_ms, .. })) => (id, timeout_ms),
            Ok(Some(ClientMessage::ConnectFailed { error, reason })) => {
                self.handle.conns.close(session.conn());
                return Err(CallError::Unavailable(format!("{}: {reason}", error.name())));
            }
            Ok(_) => {
                session.close().await;
                return Err(CallError::Unavailable("the session was refused".into()));
            }
            Err(_) => {
                session.close().await;
                let why = format!("no session within {} s (is there a quorum?)", CONNECT_WAIT.as_secs());
                return Err(CallError::Unavailable(why));
            }
        };
        let live = Arc::new(Live {
            session,
            id,
            pending: Mutex::new(HashMap::new()),
            next_xid: AtomicI32::new(1),
            closed: AtomicBool::new(false),
            last_used: Mutex::new(Instant::now()),
        });
        tokio::spawn(read_replies(live.clone(), outbox, self.handle.clone(), timeout_ms));
        Ok(live)
    }
}

async fn send(live: &Arc<Live>, op: Op) -> Result<oneshot::Receiver<zabkeeper_core::op::Reply>, CallError> {
    let gone = || CallError::Unavailable("the console's session ended".into());
    if live.closed.load(Ordering::Relaxed) || !live.session.reserve().await {
        return Err(gone());
    }
    if let Ok(mut used) = live.last_used.lock() {
        *used = Instant::now();
    }
    let xid = live.xid();
    let (tx, rx) = oneshot::channel();
    live.pending.lock().map_err(|_| gone())?.insert(xid, tx);
    let echo = Echo { shape: None, arrived: Some(Instant::now()), op: zabkeeper_core::op::OpLabel::default() };
    if !live.session.request(xid, echo, op, false).await {
        return Err(gone());
    }
    Ok(rx)
}

async fn receive(rx: oneshot::Receiver<zabkeeper_core::op::Reply>) -> Result<OpResult, CallError> {
    match tokio::time::timeout(REPLY_WAIT, rx).await {
        Ok(Ok(reply)) => Ok(reply?),
        Ok(Err(_)) => Err(CallError::Unavailable("the console's session ended before the answer".into())),
        Err(_) => Err(CallError::TimedOut),
    }
}

/// Hands each reply to its waiter and pings often enough to keep the
/// session alive, until the replica closes it.
async fn read_replies(live: Arc<Live>, mut outbox: Outbox, handle: Handle, timeout_ms: i32) {
    let every = Duration::from_millis(u64::try_from(timeout_ms / 3).unwrap_or(1_000).max(100));
    let mut ping = tokio::time::interval(every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            msg = outbox.recv() => match msg {
                Some(ClientMessage::Reply { xid, reply, .. }) => {
                    let waiter = live.pending.lock().ok().and_then(|mut p| p.remove(&xid));
                    if let Some(tx) = waiter {
                        let _ = tx.send(reply);
                    }
                }
                Some(ClientMessage::Event(_) | ClientMessage::Connected { .. }) => {}
                Some(ClientMessage::Close { .. } | ClientMessage::ConnectFailed { .. }) | None => break,
            },
            _ = ping.tick() => {
                // Requests in flight keep the session alive by themselves; and
                // waiting here for a slot they hold would stop this task from
                // reading the replies that free it.
                let idle = live.pending.lock().is_ok_and(|p| p.is_empty());
                if !idle || live.closed.load(Ordering::Relaxed) {
                    continue;
                }
                let unused = live.last_used.lock().is_ok_and(|t| t.elapsed() >= IDLE_CLOSE);
                if unused {
                    // New requests open a fresh session; the replica's Close ends this loop.
                    live.closed.store(true, Ordering::Relaxed);
                }
                // A ping's (or the close's) reply has no waiter and is dropped above.
                let op = if unused { Op::CloseSession } else { Op::Ping };
                let echo = Echo { shape: None, arrived: None, op: zabkeeper_core::op::OpLabel::default() };
                if live.session.reserve().await && !live.session.request(live.xid(), echo, op, false).await {
                    break;
                }
            }
        }
    }
    live.closed.store(true, Ordering::Relaxed);
    live.forget_pending();
    handle.conns.close(live.session.conn());
}
