//! Prometheus metrics of one replica, served as text on `/metrics`.
//!
//! Events are counted where they happen (the front ends count requests, the
//! storage worker times fsyncs, the owner task times commits, elections and
//! snapshots); levels (sessions, znodes, watches, lag) are read from the
//! replica when scraped, so they are never stale. Names follow Prometheus
//! conventions: the unit in the name, `_total` on counters.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// The levels a scrape reads from the replica (see [`Metrics::render`]).
#[derive(Clone, Debug, Default)]
pub struct Levels {
    /// Client connections to this member.
    pub connections: u64,
    /// Live sessions in the ensemble.
    pub sessions: u64,
    /// Nodes in the tree.
    pub znodes: u64,
    /// Bytes of node data in the tree.
    pub data_bytes: u64,
    /// Watches this member's clients hold.
    pub watches: u64,
    /// Ephemeral nodes.
    pub ephemerals: u64,
    /// Whether this member leads.
    pub leader: bool,
    /// Whether it serves clients.
    pub serving: bool,
    /// The highest committed zxid it knows.
    pub last_committed_zxid: u64,
    /// Free bytes on the data directory's filesystem, when known.
    pub disk_free_bytes: Option<u64>,
    /// Whether that is below the reserve.
    pub disk_low: bool,
    /// On the leader: each follower and the transactions it has not acknowledged.
    pub follower_lag: Vec<(u64, u64)>,
    /// Client requests queued, not yet answered (when the replica said).
    pub outstanding: Option<u64>,
    /// Bytes on disk in the data directory.
    pub data_dir_bytes: u64,
    /// The same bytes by what they hold (`log`, `snapshots`, `sled`, `other`).
    pub disk_usage: Vec<(&'static str, u64)>,
    /// Linearizable reads of this member's clients cleared by their barrier since start.
    pub linearizable_reads: u64,
    /// Read-index rounds this member asked since start.
    pub read_index_rounds: u64,
}

/// A request's operation and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// ZooKeeper's name of the operation, e.g. `getData`.
    pub op: &'static str,
    /// `ok`, or the error code's name, e.g. `NoNode`.
    pub result: &'static str,
}

/// An operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// ZooKeeper's name of the operation.
    pub op: &'static str,
}

/// A follower of this leader.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FollowerLabels {
    /// Its id.
    pub follower: u64,
}

/// What a share of the data directory holds.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DiskLabels {
    /// `log`, `snapshots`, `sled` (its own bookkeeping) or `other`.
    pub kind: &'static str,
}

/// What the memory allocator reports about the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes handed out to the program and not yet given back.
    pub allocated: u64,
    /// Bytes of the allocator's pages resident in memory (what it costs in
    /// RSS, fragmentation and pages not yet returned included).
    pub resident: u64,
}

/// Where heap figures come from; set once by the binary, which chooses the allocator.
static HEAP_STATS: OnceLock<fn() -> Option<HeapStats>> = OnceLock::new();

/// Makes `/metrics` report the heap as `source` reads it (the library does
/// not know which allocator the program runs). Only the first call counts,
/// and only metrics made after it ([`Metrics::new`]) carry the heap gauges.
pub fn set_heap_stats(source: fn() -> Option<HeapStats>) {
    let _ = HEAP_STATS.set(source);
}

/// The heap as the registered source reads it now.
pub fn heap_stats() -> Option<HeapStats> {
    HEAP_STATS.get().and_then(|source| source())
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    // 50 µs to ~26 s.
    exponential_buckets(0.000_05, 2.0, 20)
}

/// Every metric of one replica.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<OpLabels, Histogram>,
    commit_seconds: Histogram,
    fsync_seconds: Histogram,
    flush_batch_ops: Histogram,
    elections: Counter,
    election_seconds: Histogram,
    snapshot_seconds: Histogram,
    read_index_round_seconds: Histogram,
    snapshot_bytes: Gauge,
    snapshot_failures: Counter,
    follower_lag: Family<FollowerLabels, Gauge>,
    disk_usage: Family<DiskLabels, Gauge>,
    outstanding: Gauge,
    connections: Gauge,
    sessions: Gauge,
    znodes: Gauge,
    data_bytes: Gauge,
    watches: Gauge,
    ephemerals: Gauge,
    leader: Gauge,
    serving: Gauge,
    last_committed_zxid: Gauge<u64, AtomicU64>,
    data_dir_bytes: Gauge,
    disk_free_bytes: Gauge,
    disk_low: Gauge,
    heap_allocated_bytes: Gauge<u64, AtomicU64>,
    heap_resident_bytes: Gauge<u64, AtomicU64>,
    runtime_workers: Gauge,
    linearizable_reads: Counter,
    read_index_rounds: Counter,
    /// Scrapes are rare; one at a time keeps the level gauges consistent.
    scrape: Mutex<()>,
    /// Since when this member has led a serving ensemble (`zk_leader_uptime`).
    leading_since: Mutex<Option<Instant>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("zabkeeper");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "Client requests answered, by operation and result", requests.clone());
        let request_seconds = Family::<OpLabels, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register_with_unit(
            "request_duration",
            "Time from a request's arrival to its reply, by operation",
            Unit::Seconds,
            request_seconds.clone(),
        );
        let histogram = |registry: &mut Registry, name: &str, help: &str| {
            let h = Histogram::new(seconds_buckets());
            registry.register_with_unit(name, help, Unit::Seconds, h.clone());
            h
        };
        let commit_seconds = histogram(
            &mut registry,
            "proposal_commit_duration",
            "On the leader: time from proposing a transaction to its commit",
        );
        let fsync_seconds = histogram(&mut registry, "fsync_duration", "Time to make one group-commit batch durable");
        let flush_batch_ops = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        registry.register(
            "flush_batch_operations",
            "Storage operations made durable by one fsync (group commit)",
            flush_batch_ops.clone(),
        );
        let elections = Counter::default();
        registry.register("elections", "Elections this member took part in", elections.clone());
        let election_seconds =
            histogram(&mut registry, "election_duration", "Time from looking for a leader to serving again");
        let snapshot_seconds = histogram(&mut registry, "snapshot_duration", "Time to write a snapshot");
        let read_index_round_seconds = histogram(
            &mut registry,
            "read_index_round_duration",
            "On a follower or observer: time from asking the leader for a read-index round to its answer, timed at the ends of the member's turns",
        );
        let snapshot_bytes = Gauge::default();
        registry.register_with_unit(
            "snapshot_size",
            "Size of the last snapshot written",
            Unit::Bytes,
            snapshot_bytes.clone(),
        );
        let snapshot_failures = Counter::default();
        registry.register("snapshot_failures", "Snapshot writes that failed", snapshot_failures.clone());
        let follower_lag = Family::<FollowerLabels, Gauge>::default();
        registry.register(
            "follower_lag_transactions",
            "On the leader: transactions each follower has not acknowledged",
            follower_lag.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let outstanding = gauge(&mut registry, "outstanding_requests", "Client requests queued, not yet answered");
        let connections = gauge(&mut registry, "connections", "Client connections to this member");
        let sessions = gauge(&mut registry, "sessions", "Live sessions in the ensemble");
        let znodes = gauge(&mut registry, "znodes", "Nodes in the tree");
        let data_bytes = Gauge::default();
        registry.register_with_unit("znode_data", "Bytes of node data in the tree", Unit::Bytes, data_bytes.clone());
        let watches = gauge(&mut registry, "watches", "Watches held by this member's clients");
        let ephemerals = gauge(&mut registry, "ephemerals", "Ephemeral nodes in the tree");
        let leader = gauge(&mut registry, "is_leader", "1 when this member leads");
        let serving = gauge(&mut registry, "serving", "1 when this member serves clients");
        let last_committed_zxid = Gauge::<u64, AtomicU64>::default();
        registry.register(
            "last_committed_zxid",
            "The highest committed zxid this member knows",
            last_committed_zxid.clone(),
        );
        let data_dir_bytes = Gauge::default();
        registry.register_with_unit(
            "data_dir_size",
            "Bytes on disk in the data directory (log and snapshots)",
            Unit::Bytes,
            data_dir_bytes.clone(),
        );
        let disk_usage = Family::<DiskLabels, Gauge>::default();
        registry.register_with_unit(
            "disk_usage",
            "Bytes on disk in the data directory by what they hold: the log, the snapshots, sled's own bookkeeping",
            Unit::Bytes,
            disk_usage.clone(),
        );
        let disk_free_bytes = Gauge::default();
        registry.register_with_unit(
            "disk_free",
            "Bytes free on the data directory's filesystem",
            Unit::Bytes,
            disk_free_bytes.clone(),
        );
        let disk_low = gauge(&mut registry, "disk_low", "1 when free space is below disk_reserve_bytes");
        let runtime_workers =
            gauge(&mut registry, "runtime_workers", "Worker threads of the async runtime serving this member");
        let linearizable_reads = Counter::default();
        registry.register(
            "linearizable_reads",
            "Linearizable reads of this member's clients cleared by their read-index barrier",
            linearizable_reads.clone(),
        );
        let read_index_rounds = Counter::default();
        registry.register(
            "read_index_rounds",
            "Read-index rounds this member asked: probes as leader (for its reads and followers' rounds), rounds to the leader as follower",
            read_index_rounds.clone(),
        );
        let heap_allocated_bytes = Gauge::<u64, AtomicU64>::default();
        let heap_resident_bytes = Gauge::<u64, AtomicU64>::default();
        if HEAP_STATS.get().is_some() {
            registry.register_with_unit(
                "heap_allocated",
                "Bytes of heap in use: what the allocator handed out and has not had back",
                Unit::Bytes,
                heap_allocated_bytes.clone(),
            );
            registry.register_with_unit(
                "heap_resident",
                "Bytes of the allocator's pages resident in memory (fragmentation and pages not yet returned included)",
                Unit::Bytes,
                heap_resident_bytes.clone(),
            );
        }
        Metrics {
            registry,
            linearizable_reads,
            read_index_rounds,
            disk_free_bytes,
            disk_low,
            requests,
            request_seconds,
            commit_seconds,
            fsync_seconds,
            flush_batch_ops,
            elections,
            election_seconds,
            snapshot_seconds,
            read_index_round_seconds,
            snapshot_bytes,
            snapshot_failures,
            follower_lag,
            disk_usage,
            outstanding,
            connections,
            sessions,
            znodes,
            data_bytes,
            watches,
            ephemerals,
            leader,
            serving,
            last_committed_zxid,
            data_dir_bytes,
            heap_allocated_bytes,
            heap_resident_bytes,
            runtime_workers,
            scrape: Mutex::new(()),
            leading_since: Mutex::new(None),
        }
    }

    /// A request answered.
    pub fn request(&self, op: &'static str, result: &'static str, elapsed: Duration) {
        self.requests.get_or_create(&RequestLabels { op, result }).inc();
        self.request_seconds.get_or_create(&OpLabels { op }).observe(elapsed.as_secs_f64());
    }

    /// A proposal committed after `elapsed` (leader only).
    pub fn committed(&self, elapsed: Duration) {
        self.commit_seconds.observe(elapsed.as_secs_f64());
    }

    /// A group-commit flush of `ops` operations took `elapsed`.
    pub fn flushed(&self, ops: usize, elapsed: Duration) {
        self.fsync_seconds.observe(elapsed.as_secs_f64());
        self.flush_batch_ops.observe(ops as f64);
    }

    /// This member leads a serving ensemble (`true`), or no longer does.
    pub fn leading(&self, leads: bool) {
        let mut since = self.leading_since.lock().unwrap_or_else(PoisonError::into_inner);
        match (leads, *since) {
            (true, None) => *since = Some(Instant::now()),
            (false, Some(_)) => *since = None,
            _ => {}
        }
    }

    /// How long this member has led, if it leads.
    pub fn leader_uptime(&self) -> Option<Duration> {
        self.leading_since.lock().unwrap_or_else(PoisonError::into_inner).map(|since| since.elapsed())
    }

    /// An election started.
    pub fn election_started(&self) {
        self.elections.inc();
    }

    /// An election ended with this member serving after `elapsed`.
    pub fn election_ended(&self, elapsed: Duration) {
        self.election_seconds.observe(elapsed.as_secs_f64());
    }

    /// A follower's (or observer's) read-index round answered `elapsed` after it was asked.
    pub fn read_index_round(&self, elapsed: Duration) {
        self.read_index_round_seconds.observe(elapsed.as_secs_f64());
    }

    /// A snapshot of `bytes` was written in `elapsed`.
    pub fn snapshot_written(&self, bytes: u64, elapsed: Duration) {
        self.snapshot_seconds.observe(elapsed.as_secs_f64());
        self.snapshot_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A snapshot write failed.
    pub fn snapshot_failed(&self) {
        self.snapshot_failures.inc();
    }

    /// The text exposition, with `levels` (read from the replica now, when
    /// it answered) set first.
    pub fn render(&self, levels: Option<&Levels>) -> String {
        let _one_scrape = self.scrape.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let level = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(l) = levels {
            self.connections.set(level(l.connections));
            self.sessions.set(level(l.sessions));
            self.znodes.set(level(l.znodes));
            self.data_bytes.set(level(l.data_bytes));
            self.watches.set(level(l.watches));
            self.ephemerals.set(level(l.ephemerals));
            self.leader.set(i64::from(l.leader));
            self.serving.set(i64::from(l.serving));
            self.last_committed_zxid.set(l.last_committed_zxid);
            self.disk_free_bytes.set(l.disk_free_bytes.map_or(0, level));
            self.disk_low.set(i64::from(l.disk_low));
            self.follower_lag.clear();
            for (follower, lag) in &l.follower_lag {
                self.follower_lag.get_or_create(&FollowerLabels { follower: *follower }).set(level(*lag));
            }
            if let Some(outstanding) = l.outstanding {
                self.outstanding.set(level(outstanding));
            }
            self.data_dir_bytes.set(level(l.data_dir_bytes));
            for (kind, bytes) in &l.disk_usage {
                self.disk_usage.get_or_create(&DiskLabels { kind }).set(level(*bytes));
            }
            // Counted by the replica; the counters catch up at each scrape.
            self.linearizable_reads.inc_by(l.linearizable_reads.saturating_sub(self.linearizable_reads.get()));
            self.read_index_rounds.inc_by(l.read_index_rounds.saturating_sub(self.read_index_rounds.get()));
        }
        self.read_heap();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.runtime_workers.set(i64::try_from(runtime.metrics().num_workers()).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Sets the heap gauges from the allocator's figures, when it gives them.
    fn read_heap(&self) {
        if let Some(heap) = heap_stats() {
            self.heap_allocated_bytes.set(heap.allocated);
            self.heap_resident_bytes.set(heap.resident);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histograms_are_named_by_convention() {
        let m = Metrics::new();
        m.request("getData", "ok", Duration::from_millis(2));
        m.request("getData", "NoNode", Duration::from_millis(1));
        m.flushed(12, Duration::from_micros(300));
        m.read_index_round(Duration::from_micros(150));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry).unwrap();
        assert!(out.contains("zabkeeper_requests_total{op=\"getData\",result=\"ok\"} 1"), "{out}");
        assert!(out.contains("zabkeeper_requests_total{op=\"getData\",result=\"NoNode\"} 1"), "{out}");
        assert!(out.contains("zabkeeper_request_duration_seconds_count{op=\"getData\"} 2"), "{out}");
        assert!(out.contains("zabkeeper_fsync_duration_seconds_count 1"), "{out}");
        assert!(out.contains("zabkeeper_flush_batch_operations_sum 12.0"), "{out}");
        assert!(out.contains("zabkeeper_read_index_round_duration_seconds_count 1"), "{out}");
        assert!(out.contains("# TYPE zabkeeper_elections counter"), "{out}");
        assert!(out.ends_with("# EOF\n"), "{out}");
    }

    #[test]
    fn the_replicas_read_index_counts_become_counters_that_catch_up_at_each_scrape() {
        let m = Metrics::new();
        let levels =
            |reads, rounds| Levels { linearizable_reads: reads, read_index_rounds: rounds, ..Levels::default() };
        let out = m.render(Some(&levels(7, 3)));
        assert!(out.contains("zabkeeper_linearizable_reads_total 7"), "{out}");
        assert!(out.contains("zabkeeper_read_index_rounds_total 3"), "{out}");
        assert!(out.contains("# TYPE zabkeeper_read_index_rounds counter"), "{out}");
        let out = m.render(Some(&levels(12, 4)));
        assert!(out.contains("zabkeeper_linearizable_reads_total 12"), "{out}");
        assert!(out.contains("zabkeeper_read_index_rounds_total 4"), "{out}");
    }

    #[test]
    fn the_heap_is_reported_as_its_source_reads_it() {
        set_heap_stats(|| Some(HeapStats { allocated: 1234, resident: 5678 }));
        let m = Metrics::new();
        m.read_heap();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry).unwrap();
        assert!(out.contains("zabkeeper_heap_allocated_bytes 1234"), "{out}");
        assert!(out.contains("zabkeeper_heap_resident_bytes 5678"), "{out}");
        assert!(out.contains("# UNIT zabkeeper_heap_allocated_bytes bytes"), "{out}");
    }
}
