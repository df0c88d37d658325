//! The session's connection state and the facts the background task shares
//! with every handle (session id, negotiated timeout, last zxid seen).

use futures::Stream;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio_stream::wrappers::BroadcastStream;

/// Where the session stands, as ZooKeeper's `KeeperState` tells watchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectionState {
    /// Attached to a server; requests flow.
    Connected,
    /// The connection broke; the client is resuming the session elsewhere.
    /// Requests wait (or time out); in-flight ones failed with ConnectionLoss.
    Disconnected,
    /// The session expired (told by a server, or unreachable for longer than
    /// its timeout): ephemerals and watches are gone; the client is unusable.
    Expired,
    /// The client was closed.
    Closed,
}

impl ConnectionState {
    /// Whether the client can never be used again.
    pub fn is_terminal(self) -> bool {
        matches!(self, ConnectionState::Expired | ConnectionState::Closed)
    }

    /// ZooKeeper's name for the state (`KeeperState`).
    pub fn name(self) -> &'static str {
        match self {
            ConnectionState::Connected => "SyncConnected",
            ConnectionState::Disconnected => "Disconnected",
            ConnectionState::Expired => "Expired",
            ConnectionState::Closed => "Closed",
        }
    }
}

/// How many state transitions a [`StateStream`] buffers before it skips old ones.
const TRANSITIONS_BUFFERED: usize = 64;

/// What the background task publishes and every handle reads.
pub(crate) struct Shared {
    session_id: AtomicI64,
    timeout_ms: AtomicI32,
    last_zxid: AtomicI64,
    server: Mutex<String>,
    /// While disconnected: why, as (server, what its latest attempt ended
    /// with), one entry per server, the newest last. Empty while connected.
    disconnected: Mutex<Vec<(String, String)>>,
    state_tx: watch::Sender<ConnectionState>,
    transitions: broadcast::Sender<ConnectionState>,
}

impl Shared {
    /// Starts in `Connected`: a client exists only once its first connect succeeded.
    pub(crate) fn new(session_id: i64, timeout_ms: i32, server: String) -> Shared {
        let (state_tx, _) = watch::channel(ConnectionState::Connected);
        let (transitions, _) = broadcast::channel(TRANSITIONS_BUFFERED);
        Shared {
            session_id: AtomicI64::new(session_id),
            timeout_ms: AtomicI32::new(timeout_ms),
            last_zxid: AtomicI64::new(0),
            server: Mutex::new(server),
            disconnected: Mutex::new(Vec::new()),
            state_tx,
            transitions,
        }
    }

    pub(crate) fn session_id(&self) -> i64 {
        self.session_id.load(Ordering::Acquire)
    }

    pub(crate) fn timeout_ms(&self) -> i32 {
        self.timeout_ms.load(Ordering::Acquire)
    }

    pub(crate) fn set_timeout_ms(&self, ms: i32) {
        self.timeout_ms.store(ms, Ordering::Release);
    }

    /// The negotiated session timeout.
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.timeout_ms()).unwrap_or(0))
    }

    /// The server of the current (or last) connection.
    pub(crate) fn server(&self) -> String {
        // A poisoned lock only means a panic elsewhere; the name is still readable.
        match self.server.lock() {
            Ok(name) => name.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn set_server(&self, server: &str) {
        let mut name = match self.server.lock() {
            Ok(name) => name,
            Err(poisoned) => poisoned.into_inner(),
        };
        server.clone_into(&mut name);
    }

    /// Records why the connection to `server` broke or an attempt on it failed
    /// (replacing that server's earlier entry).
    pub(crate) fn note_failure(&self, server: &str, reason: &str) {
        let mut failures = match self.disconnected.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        failures.retain(|(s, _)| s != server);
        failures.push((server.to_string(), reason.to_string()));
    }

    /// Forgets the failures (a connection is up again).
    pub(crate) fn clear_failures(&self) {
        match self.disconnected.lock() {
            Ok(mut f) => f.clear(),
            Err(poisoned) => poisoned.into_inner().clear(),
        }
    }

    /// Why no server holds the session now: each server's latest failure.
    pub(crate) fn disconnect_reason(&self) -> String {
        let failures = match self.disconnected.lock() {
            Ok(f) => f.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        if failures.is_empty() {
            return "the client is reconnecting".to_string();
        }
        failures.into_iter().map(|(_, reason)| reason).collect::<Vec<_>>().join("; ")
    }

    pub(crate) fn last_zxid(&self) -> i64 {
        self.last_zxid.load(Ordering::Acquire)
    }

    /// Raises the last zxid seen (it never goes back).
    pub(crate) fn observe_zxid(&self, zxid: i64) {
        self.last_zxid.fetch_max(zxid, Ordering::AcqRel);
    }

    pub(crate) fn state(&self) -> ConnectionState {
        *self.state_tx.borrow()
    }

    pub(crate) fn state_watch(&self) -> watch::Receiver<ConnectionState> {
        self.state_tx.subscribe()
    }

    pub(crate) fn transitions(&self) -> StateStream {
        StateStream { inner: BroadcastStream::new(self.transitions.subscribe()), ended: self.state().is_terminal() }
    }

    /// Publishes a state; repeated states and changes after a terminal one are ignored.
    pub(crate) fn set_state(&self, state: ConnectionState) {
        let current = self.state();
        if current == state || current.is_terminal() {
            return;
        }
        self.state_tx.send_replace(state);
        // No subscribers is fine: transitions are only for those who asked.
        let _ = self.transitions.send(state);
    }

    /// The error a call gets once the client is terminal.
    pub(crate) fn terminal_error(&self) -> super::ClientError {
        match self.state() {
            ConnectionState::Expired => super::ClientError::SessionExpired,
            _ => super::ClientError::Closed,
        }
    }
}

/// Every state transition after the stream was created, in order; it ends
/// after a terminal state. A consumer more than 64 transitions behind skips
/// the oldest ones.
pub struct StateStream {
    inner: BroadcastStream<ConnectionState>,
    ended: bool,
}

impl Stream for StateStream {
    type Item = ConnectionState;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConnectionState>> {
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            return match Pin::new(&mut self.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(state))) => {
                    self.ended = state.is_terminal();
                    Poll::Ready(Some(state))
                }
                // Lagged: skip what was lost, keep going.
                Poll::Ready(Some(Err(_))) => continue,
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn transitions_are_streamed_in_order_and_stop_at_a_terminal_state() {
        let shared = Shared::new(7, 3000, "h:1".into());
        let mut stream = shared.transitions();
        shared.set_state(ConnectionState::Disconnected);
        shared.set_state(ConnectionState::Disconnected);
        shared.set_state(ConnectionState::Connected);
        shared.set_state(ConnectionState::Expired);
        shared.set_state(ConnectionState::Connected);
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(stream.next().await.unwrap());
        }
        assert_eq!(seen, vec![ConnectionState::Disconnected, ConnectionState::Connected, ConnectionState::Expired]);
        assert_eq!(stream.next().await, None);
        assert_eq!(shared.transitions().next().await, None);
        assert_eq!(shared.state(), ConnectionState::Expired);
        assert!(matches!(shared.terminal_error(), super::super::ClientError::SessionExpired));
    }

    #[test]
    fn last_zxid_only_moves_forward_and_the_server_is_recorded() {
        let shared = Shared::new(1, 1000, "h:1".into());
        shared.set_server("h:2");
        assert_eq!(shared.server(), "h:2");
        shared.observe_zxid(10);
        shared.observe_zxid(4);
        assert_eq!(shared.last_zxid(), 10);
        assert_eq!(shared.timeout(), Duration::from_secs(1));
    }

    #[test]
    fn the_disconnect_reason_keeps_each_servers_latest_failure() {
        let shared = Shared::new(1, 1000, "h:1".into());
        assert_eq!(shared.disconnect_reason(), "the client is reconnecting");
        shared.note_failure("h:1", "h:1 ended the stream");
        shared.note_failure("h:2", "cannot reach h:2: refused");
        shared.note_failure("h:1", "h:1 refused the session: not serving");
        assert_eq!(shared.disconnect_reason(), "cannot reach h:2: refused; h:1 refused the session: not serving");
        shared.clear_failures();
        assert_eq!(shared.disconnect_reason(), "the client is reconnecting");
    }
}
