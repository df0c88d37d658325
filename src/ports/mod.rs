//! Where clients connect: the ZooKeeper port ([`zookeeper`], which also
//! answers four-letter words with what the operations surface hands it) and
//! the gRPC session service ([`grpc`]). Each decodes its own format into the
//! replica's vocabulary and encodes replies back; everything else about a
//! connection is the same for both and lives here, in [`Connection`] and
//! [`Outbox`]: opening it (the connection's outbox registered, then the
//! connect), the limit on requests in flight, reply accounting, and closing
//! it. [`limits`] bounds connections per member and per address.

pub mod grpc;
pub mod grpc_convert;
pub mod limits;
pub mod zookeeper;

use crate::runtime::handle::{Event, Handle};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::stats::{ConnStats, ServerStats};
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use zabkeeper_core::acl::Id;
use zabkeeper_core::error::ZkError;
use zabkeeper_core::op::Op;
use zabkeeper_core::replica::{ClientMessage, ConnId, ConnectRequest, Echo, Input};

/// Most messages queued for one client before it is considered stuck and
/// dropped (beside the byte cap, `max_queued_reply_bytes`).
pub const CLIENT_QUEUE: usize = 16_384;

/// The reading side of one client connection: requests into the replica.
pub struct Connection {
    conn: ConnId,
    handle: Handle,
    in_flight: Arc<Semaphore>,
    /// The most requests in flight at once (the semaphore's size).
    max_in_flight: usize,
    stats: Arc<ConnStats>,
}

/// The writing side of one client connection: what the replica tells it, in order.
pub struct Outbox {
    rx: mpsc::Receiver<ClientMessage>,
    in_flight: Arc<Semaphore>,
    stats: Arc<ServerStats>,
    metrics: Arc<Metrics>,
    conn_stats: Arc<ConnStats>,
    queued_bytes: Arc<AtomicUsize>,
}

impl Connection {
    /// Opens a connection from `client_addr` and asks for its session (a new one,
    /// or one to resume). None once the replica has stopped.
    pub async fn open(
        handle: &Handle,
        request: ConnectRequest,
        identities: Vec<Id>,
        client_addr: Option<SocketAddr>,
    ) -> Option<(Connection, Outbox)> {
        let conn = handle.next_conn();
        let conn_stats = handle.conns.open(conn, client_addr);
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let new_password = Bytes::from(rand::random::<[u8; 16]>().to_vec());
        let opened = handle.events.send(Event::Open { conn, tx, queued_bytes: queued_bytes.clone() }).await.is_ok()
            && handle.input(Input::Connect { conn, request, new_password, identities }).await;
        if !opened {
            handle.conns.close(conn);
            return None;
        }
        // Beyond this many unanswered requests the front end stops reading
        // the connection (TCP backpressure) until replies go out.
        let max_in_flight = handle.config.limits.max_outstanding_per_session;
        let in_flight = Arc::new(Semaphore::new(max_in_flight));
        let outbox = Outbox {
            rx,
            in_flight: in_flight.clone(),
            stats: handle.stats.clone(),
            metrics: handle.metrics.clone(),
            conn_stats: conn_stats.clone(),
            queued_bytes,
        };
        Some((Connection { conn, handle: handle.clone(), in_flight, max_in_flight, stats: conn_stats }, outbox))
    }

    /// This connection's id.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// Waits until one more request may be in flight; the reply frees it.
    pub async fn reserve(&self) -> bool {
        match self.in_flight.acquire().await {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Waits until every request sent so far has its reply handed to the
    /// writer (so a connection closed next closes after them).
    pub async fn answered(&self) {
        let all = u32::try_from(self.max_in_flight).unwrap_or(u32::MAX);
        // The slots held by earlier requests come back as their replies go out.
        if let Ok(permits) = self.in_flight.acquire_many(all).await {
            drop(permits);
        }
    }

    /// Hands a request to the replica (after [`reserve`](Self::reserve)); false once it has stopped.
    /// A `linearizable` read waits for a read-index barrier (the member's
    /// `linearizable_reads` makes every read so).
    pub async fn request(&self, xid: i32, mut echo: Echo, op: Op, linearizable: bool) -> bool {
        self.handle.stats.received();
        self.stats.received();
        echo.op = op.label();
        self.handle.input(Input::Request { conn: self.conn, xid, echo, op, linearizable }).await
    }

    /// A request the front end could not decode, answered with `error` in its turn.
    pub async fn bad_request(&self, xid: i32, echo: Echo, error: ZkError) -> bool {
        self.handle.stats.received();
        self.stats.received();
        self.handle.input(Input::BadRequest { conn: self.conn, xid, echo, error }).await
    }

    /// The connection closed; the session lives on until it expires or resumes.
    pub async fn close(self) {
        self.handle.conns.close(self.conn);
        self.handle.input(Input::Disconnect { conn: self.conn }).await;
    }
}

impl Outbox {
    /// The next message, waiting for it; None once the replica dropped this connection.
    pub async fn recv(&mut self) -> Option<ClientMessage> {
        let msg = self.rx.recv().await?;
        self.account(&msg);
        Some(msg)
    }

    /// The next message if one is ready.
    pub fn try_recv(&mut self) -> Option<ClientMessage> {
        let msg = self.rx.try_recv().ok()?;
        self.account(&msg);
        Some(msg)
    }

    /// Counts the encoded size of a reply (`client_response`).
    pub fn replied(&self, bytes: usize) {
        self.stats.client_response.record(bytes);
    }

    /// A reply frees its request's slot and records how long it took.
    fn account(&self, msg: &ClientMessage) {
        self.queued_bytes.fetch_sub(msg.approximate_size(), Ordering::Relaxed);
        self.stats.sent();
        self.conn_stats.sent();
        if let ClientMessage::Reply { xid, echo, zxid, reply } = msg {
            self.in_flight.add_permits(1);
            if let Some(arrived) = echo.arrived {
                let elapsed = arrived.elapsed();
                self.stats.latency(elapsed);
                if !echo.op.name.is_empty() {
                    let result = match reply {
                        Ok(_) => "ok",
                        Err(e) => e.code.name(),
                    };
                    self.metrics.request(echo.op.name, result, elapsed);
                    let zxid = i64::try_from(zxid.0).unwrap_or(i64::MAX);
                    self.conn_stats.replied(echo.op.abbreviation, *xid, zxid, elapsed);
                }
            }
        }
    }
}
