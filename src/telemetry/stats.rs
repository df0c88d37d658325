//! Request statistics, as ZooKeeper's `srvr`, `cons` and `stat` print them:
//! for the member ([`ServerStats`]) and per connection ([`ConnStats`]):
//! requests received, messages sent, the last operation, its xid and zxid,
//! when the last reply went out and the reply latencies. Both client ports
//! keep them; the four-letter words, the admin API and the metrics read them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use zabkeeper_core::replica::ConnId;
use zabkeeper_store::clock::now_ms;

/// Request counters and latencies the front ends keep (for `srvr`, `mntr`).
#[derive(Debug)]
pub struct ServerStats {
    received: AtomicU64,
    sent: AtomicU64,
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_min_us: AtomicU64,
    latency_max_us: AtomicU64,
    /// The ZooKeeper port's replies, in bytes (ZooKeeper's `client_response`).
    pub client_response: BufferStats,
    /// The leader's proposals, in bytes (ZooKeeper's `proposal_stats`).
    pub proposals: BufferStats,
}

/// The last, smallest and largest of a run of sizes (ZooKeeper's
/// `BufferStats`: -1 for each before the first).
#[derive(Debug)]
pub struct BufferStats {
    last: AtomicI64,
    min: AtomicI64,
    max: AtomicI64,
}

/// A copy of [`BufferStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// The newest size.
    pub last: i64,
    /// The smallest.
    pub min: i64,
    /// The largest.
    pub max: i64,
}

impl Default for Sizes {
    fn default() -> Sizes {
        Sizes { last: -1, min: -1, max: -1 }
    }
}

impl Default for BufferStats {
    fn default() -> BufferStats {
        BufferStats { last: AtomicI64::new(-1), min: AtomicI64::new(-1), max: AtomicI64::new(-1) }
    }
}

impl BufferStats {
    /// Counts one size.
    pub fn record(&self, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.last.store(bytes, Ordering::Relaxed);
        // -1 (none yet) is smaller than every size: the first one replaces it.
        let _ = self.min.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| (m < 0 || bytes < m).then_some(bytes));
        self.max.fetch_max(bytes, Ordering::Relaxed);
    }

    /// Starts afresh (`srst`).
    pub fn reset(&self) {
        for figure in [&self.last, &self.min, &self.max] {
            figure.store(-1, Ordering::Relaxed);
        }
    }

    /// The figures now.
    pub fn sizes(&self) -> Sizes {
        let load = |a: &AtomicI64| a.load(Ordering::Relaxed);
        Sizes { last: load(&self.last), min: load(&self.min), max: load(&self.max) }
    }
}

/// A copy of [`ServerStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StatsSnapshot {
    /// Requests received.
    pub received: u64,
    /// Replies and events sent.
    pub sent: u64,
    /// Fastest reply, ms.
    pub min_ms: f64,
    /// Mean reply time, ms.
    pub avg_ms: f64,
    /// Slowest reply, ms.
    pub max_ms: f64,
    /// The ZooKeeper port's reply sizes.
    pub client_response: Sizes,
    /// The leader's proposal sizes.
    pub proposals: Sizes,
}

impl Default for ServerStats {
    fn default() -> ServerStats {
        ServerStats {
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            latency_count: AtomicU64::new(0),
            latency_sum_us: AtomicU64::new(0),
            latency_min_us: AtomicU64::new(u64::MAX),
            latency_max_us: AtomicU64::new(0),
            client_response: BufferStats::default(),
            proposals: BufferStats::default(),
        }
    }
}

impl ServerStats {
    /// Counts a request in.
    pub fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a message out.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the time from a request's arrival to its reply.
    pub fn latency(&self, elapsed: Duration) {
        let us = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        self.latency_min_us.fetch_min(us, Ordering::Relaxed);
        self.latency_max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// Starts the counters and latencies afresh (ZooKeeper's `srst`). Each
    /// figure is reset on its own: a request counted meanwhile may land on
    /// either side of the reset, as in ZooKeeper.
    pub fn reset(&self) {
        self.received.store(0, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        self.latency_count.store(0, Ordering::Relaxed);
        self.latency_sum_us.store(0, Ordering::Relaxed);
        self.latency_min_us.store(u64::MAX, Ordering::Relaxed);
        self.latency_max_us.store(0, Ordering::Relaxed);
        self.client_response.reset();
        self.proposals.reset();
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let count = self.latency_count.load(Ordering::Relaxed);
        let min = self.latency_min_us.load(Ordering::Relaxed);
        StatsSnapshot {
            received: self.received.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            min_ms: if count == 0 { 0.0 } else { min as f64 / 1000.0 },
            avg_ms: if count == 0 {
                0.0
            } else {
                self.latency_sum_us.load(Ordering::Relaxed) as f64 / count as f64 / 1000.0
            },
            max_ms: self.latency_max_us.load(Ordering::Relaxed) as f64 / 1000.0,
            client_response: self.client_response.sizes(),
            proposals: self.proposals.sizes(),
        }
    }
}

/// The counters of one connection. Updated with relaxed atomics on the
/// request path; readers see a recent, not necessarily consistent, picture.
#[derive(Debug)]
pub struct ConnStats {
    /// The client's address, when known.
    pub peer: Option<SocketAddr>,
    /// When the connection was established, ms since the Unix epoch.
    pub established_ms: i64,
    /// Packets and latencies, counted as the server's own.
    traffic: ServerStats,
    last_op: Mutex<&'static str>,
    last_xid: AtomicI64,
    last_zxid: AtomicI64,
    last_response_ms: AtomicI64,
    last_latency_us: AtomicU64,
}

/// A copy of one connection's counters.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnFigures {
    /// The client's address.
    pub peer: Option<SocketAddr>,
    /// Established, ms since the epoch.
    pub established_ms: i64,
    /// Requests received.
    pub received: u64,
    /// Replies and events sent.
    pub sent: u64,
    /// ZooKeeper's abbreviation of the last operation answered ("NA" before any).
    pub last_op: &'static str,
    /// The xid of the last request answered.
    pub last_xid: i64,
    /// The zxid of the last reply.
    pub last_zxid: i64,
    /// When the last reply went out, ms since the epoch (0: none yet).
    pub last_response_ms: i64,
    /// The last reply's latency, ms.
    pub last_latency_ms: u64,
    /// Fastest reply, ms.
    pub min_latency_ms: f64,
    /// Mean reply time, ms.
    pub avg_latency_ms: f64,
    /// Slowest reply, ms.
    pub max_latency_ms: f64,
}

impl ConnStats {
    /// Counters of a connection from `peer` established now.
    pub fn new(peer: Option<SocketAddr>) -> ConnStats {
        ConnStats {
            peer,
            established_ms: now_ms(),
            traffic: ServerStats::default(),
            last_op: Mutex::new("NA"),
            last_xid: AtomicI64::new(-1),
            last_zxid: AtomicI64::new(-1),
            last_response_ms: AtomicI64::new(0),
            last_latency_us: AtomicU64::new(0),
        }
    }

    /// A request arrived.
    pub fn received(&self) {
        self.traffic.received();
    }

    /// A message (reply or event) went out.
    pub fn sent(&self) {
        self.traffic.sent();
    }

    /// A reply to request `xid` (operation `op`, abbreviated) carried `zxid` after `elapsed`.
    pub fn replied(&self, op: &'static str, xid: i32, zxid: i64, elapsed: Duration) {
        *self.last_op.lock().unwrap_or_else(PoisonError::into_inner) = op;
        self.last_xid.store(i64::from(xid), Ordering::Relaxed);
        self.last_zxid.store(zxid, Ordering::Relaxed);
        self.last_response_ms.store(now_ms(), Ordering::Relaxed);
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.last_latency_us.store(us, Ordering::Relaxed);
        self.traffic.latency(elapsed);
    }

    /// Starts this connection's figures afresh, as before its first request
    /// (ZooKeeper's `crst`); its address and age stay.
    pub fn reset(&self) {
        self.traffic.reset();
        *self.last_op.lock().unwrap_or_else(PoisonError::into_inner) = "NA";
        self.last_xid.store(-1, Ordering::Relaxed);
        self.last_zxid.store(-1, Ordering::Relaxed);
        self.last_response_ms.store(0, Ordering::Relaxed);
        self.last_latency_us.store(0, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn figures(&self) -> ConnFigures {
        let traffic = self.traffic.snapshot();
        ConnFigures {
            peer: self.peer,
            established_ms: self.established_ms,
            received: traffic.received,
            sent: traffic.sent,
            last_op: *self.last_op.lock().unwrap_or_else(PoisonError::into_inner),
            last_xid: self.last_xid.load(Ordering::Relaxed),
            last_zxid: self.last_zxid.load(Ordering::Relaxed),
            last_response_ms: self.last_response_ms.load(Ordering::Relaxed),
            last_latency_ms: self.last_latency_us.load(Ordering::Relaxed) / 1000,
            min_latency_ms: traffic.min_ms,
            avg_latency_ms: traffic.avg_ms,
            max_latency_ms: traffic.max_ms,
        }
    }
}

/// Every open connection's counters, by connection id.
#[derive(Debug, Default)]
pub struct ConnRegistry {
    conns: Mutex<HashMap<ConnId, Arc<ConnStats>>>,
}

impl ConnRegistry {
    /// Registers a new connection.
    pub fn open(&self, conn: ConnId, peer: Option<SocketAddr>) -> Arc<ConnStats> {
        let stats = Arc::new(ConnStats::new(peer));
        self.conns.lock().unwrap_or_else(PoisonError::into_inner).insert(conn, stats.clone());
        stats
    }

    /// Forgets a closed connection.
    pub fn close(&self, conn: ConnId) {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner).remove(&conn);
    }

    /// One connection's counters.
    pub fn get(&self, conn: ConnId) -> Option<ConnFigures> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner).get(&conn).map(|s| s.figures())
    }

    /// Starts every open connection's figures afresh (ZooKeeper's `crst`).
    pub fn reset_all(&self) {
        for stats in self.conns.lock().unwrap_or_else(PoisonError::into_inner).values() {
            stats.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_keep_the_last_the_smallest_and_the_largest_until_a_reset() {
        let stats = BufferStats::default();
        assert_eq!(stats.sizes(), Sizes { last: -1, min: -1, max: -1 }, "ZooKeeper's figures before the first");
        for bytes in [188, 22, 400, 90] {
            stats.record(bytes);
        }
        assert_eq!(stats.sizes(), Sizes { last: 90, min: 22, max: 400 });
        stats.reset();
        assert_eq!(stats.sizes(), Sizes::default());
        stats.record(0);
        assert_eq!(stats.sizes(), Sizes { last: 0, min: 0, max: 0 });
    }

    #[test]
    fn figures_follow_requests_and_replies() {
        let registry = ConnRegistry::default();
        let stats = registry.open(7, Some(([127, 0, 0, 1], 4000).into()));
        assert_eq!(registry.get(7).map(|f| (f.last_op, f.min_latency_ms)), Some(("NA", 0.0)));
        stats.received();
        stats.received();
        stats.replied("GETD", 3, 0x10, Duration::from_millis(4));
        stats.sent();
        stats.replied("SETD", 4, 0x11, Duration::from_millis(2));
        stats.sent();
        let f = registry.get(7).expect("registered");
        assert_eq!((f.received, f.sent, f.last_op, f.last_xid, f.last_zxid), (2, 2, "SETD", 4, 0x11));
        assert_eq!((f.last_latency_ms, f.min_latency_ms, f.max_latency_ms), (2, 2.0, 4.0));
        assert!((f.avg_latency_ms - 3.0).abs() < 1e-9);
        registry.close(7);
        assert_eq!(registry.get(7), None);
    }

    #[test]
    fn resets_start_the_figures_afresh_and_keep_counting() {
        let registry = ConnRegistry::default();
        let stats = registry.open(1, None);
        let before = registry.get(1).expect("registered");
        stats.received();
        stats.replied("GETD", 9, 0x20, Duration::from_millis(5));
        stats.sent();
        registry.reset_all();
        assert_eq!(registry.get(1), Some(before), "as freshly opened");
        stats.received();
        stats.replied("SETD", 10, 0x21, Duration::from_millis(1));
        let f = registry.get(1).expect("registered");
        assert_eq!((f.received, f.last_op, f.min_latency_ms, f.max_latency_ms), (1, "SETD", 1.0, 1.0));

        let server = ServerStats::default();
        server.received();
        server.sent();
        server.latency(Duration::from_millis(7));
        server.reset();
        assert_eq!(server.snapshot(), StatsSnapshot::default());
        server.latency(Duration::from_millis(3));
        assert_eq!((server.snapshot().min_ms, server.snapshot().max_ms), (3.0, 3.0));
    }
}
