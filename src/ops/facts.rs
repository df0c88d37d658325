//! What a member reports about itself, gathered once per question and shaped
//! for rendering: the four-letter words ([`super::four_letter`], text) and
//! ZooKeeper's AdminServer commands (`ops::admin_http`, JSON) both render
//! from these views, so a figure is computed in one place and the two
//! answers cannot drift apart.

use crate::runtime::handle::{Details, Handle, StatusReport};
use crate::telemetry::stats::{ConnFigures, StatsSnapshot};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use zabkeeper_config::ServerConfig;
use zabkeeper_core::ids::SessionId;
use zabkeeper_core::members::{Configuration, Participation};
use zabkeeper_core::zab::Role;
use zabkeeper_store::DiskUsage;

/// The version string tools see (ZooKeeper's 3.9 line, then ours).
pub const VERSION: &str = concat!("3.9.0-zabkeeper-", env!("CARGO_PKG_VERSION"));

/// The version with its build line, as ZooKeeper's `Version.getFullVersion`.
pub fn full_version() -> String {
    format!("{VERSION}, built on unknown")
}

/// One reported figure, typed as ZooKeeper's JSON types it.
#[derive(Clone, Debug, PartialEq)]
pub enum Figure {
    /// A whole number (Java int or long).
    Int(i64),
    /// A fraction (Java double).
    Float(f64),
    /// Text.
    Text(String),
}

impl Figure {
    /// A count as a figure (saturating: a count never exceeds i64 in practice).
    pub fn count(n: impl TryInto<i64>) -> Figure {
        Figure::Int(n.try_into().unwrap_or(i64::MAX))
    }

    /// The figure as the text of a four-letter word (fractions with 4 decimals, as `mntr`).
    pub fn text(&self) -> String {
        match self {
            Figure::Int(n) => n.to_string(),
            Figure::Float(x) => format!("{x:.4}"),
            Figure::Text(s) => s.clone(),
        }
    }
}

/// One client connection here, with its counters.
#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    /// The client's `ip:port` ("unknown" when not known).
    pub remote: String,
    /// Requests queued, not yet answered.
    pub queued: usize,
    /// Its session, once attached.
    pub session: Option<SessionId>,
    /// The session's negotiated timeout, ms (0 without a session).
    pub timeout_ms: i32,
    /// When the client was last heard from, ms since the epoch.
    pub last_heard_ms: i64,
    /// Its counters (None if it closed while the question was asked).
    pub figures: Option<ConnFigures>,
}

impl Connection {
    /// When its session expires unless the client is heard from again, ms since the epoch.
    pub fn expires_at_ms(&self) -> i64 {
        self.last_heard_ms.saturating_add(i64::from(self.timeout_ms))
    }
}

/// The body `srvr` and `stat` share (ZooKeeper's `ServerStats`).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerStatsView {
    /// Requests received.
    pub packets_received: u64,
    /// Replies and notifications sent.
    pub packets_sent: u64,
    /// Requests queued, not yet answered.
    pub outstanding: usize,
    /// Fastest reply, ms (rounded, as ZooKeeper's long).
    pub min_latency: i64,
    /// Mean reply time, ms.
    pub avg_latency: f64,
    /// Slowest reply, ms (rounded).
    pub max_latency: i64,
    /// Client connections here.
    pub connections: usize,
    /// The last zxid applied to the tree.
    pub last_processed_zxid: u64,
    /// `srvr`'s Mode: leader, follower, observer or standalone.
    pub server_state: &'static str,
    /// Znodes in the tree.
    pub node_count: usize,
    /// Since the process started, ms.
    pub uptime_ms: u64,
}

/// What ZooKeeper answers while it does not serve (the words' text adds a newline).
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

/// Everything the four-letter words and AdminServer commands report, read
/// from the replica in one pass.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The replica's state.
    pub report: StatusReport,
    /// Connections, sessions, watches, ephemerals.
    pub details: Details,
    /// Request counters and latencies.
    pub stats: StatsSnapshot,
    /// The replicated membership (None if the replica did not answer).
    pub configuration: Option<Configuration>,
    /// The configuration this member runs on.
    pub config: Arc<ServerConfig>,
    /// Every client connection here.
    pub connections: Vec<Connection>,
    /// Since the process started, ms.
    pub uptime_ms: u64,
    /// Since this member began to lead a serving ensemble, ms (None: it does not).
    pub leader_uptime_ms: Option<u64>,
    /// The data directory's disk usage, for the words that show it (read
    /// only for them: [`Facts::with_disk`]).
    pub disk: Option<DiskUsage>,
}

impl Facts {
    /// Asks the replica (None once it has stopped).
    pub async fn gather(handle: &Handle) -> Option<Facts> {
        let report = handle.status_report().await?;
        let details = handle.details().await.unwrap_or_default();
        let configuration = crate::ops::membership_change::configuration(handle).await.ok();
        // One lookup per connection: a member may hold tens of thousands of both.
        let timeouts: std::collections::HashMap<SessionId, i32> = details.sessions.iter().copied().collect();
        let connections = details
            .connections
            .iter()
            .map(|c| {
                let figures = handle.conns.get(c.conn);
                let timeout_ms = c.session.and_then(|s| timeouts.get(&s).copied()).unwrap_or(0);
                Connection {
                    remote: figures.as_ref().and_then(|f| f.peer).map_or_else(|| "unknown".into(), |p| p.to_string()),
                    queued: c.queued,
                    session: c.session,
                    timeout_ms,
                    last_heard_ms: c.last_heard_ms,
                    figures,
                }
            })
            .collect();
        Some(Facts {
            report,
            details,
            stats: handle.stats.snapshot(),
            configuration,
            config: handle.config.clone(),
            connections,
            uptime_ms: u64::try_from(handle.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            leader_uptime_ms: handle.metrics.leader_uptime().map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            disk: None,
        })
    }

    /// These facts with the data directory's disk usage read.
    pub async fn with_disk(mut self) -> Facts {
        self.disk = Some(disk_usage(&self.config).await);
        self
    }

    /// Whether this member leads others (a lone member has no learners,
    /// proposals or followers to show).
    pub fn leads_an_ensemble(&self) -> bool {
        self.report.status.role == Role::Leading && !self.config.standalone()
    }

    /// Whether the replica serves clients now.
    pub fn serving(&self) -> bool {
        self.report.status.serving
    }

    /// `srvr`'s Mode: leader, follower, observer or standalone.
    pub fn mode(&self) -> &'static str {
        self.config.role_name(self.report.status.role)
    }

    /// `mntr`'s server_state: the mode once serving, "looking" before.
    pub fn server_state(&self) -> &'static str {
        if self.serving() {
            self.mode()
        } else {
            "looking"
        }
    }

    /// The Zab phase as ZooKeeper names it (`zabstate`). Discovery and
    /// synchronization are one step here, shown as synchronization.
    pub fn zab_state(&self) -> &'static str {
        match (self.report.status.role, self.serving()) {
            (Role::Looking, _) => "election",
            (_, false) => "synchronization",
            (_, true) => "broadcast",
        }
    }

    /// ZooKeeper's detailed peer state ("following - broadcast", "looking").
    pub fn peer_state(&self) -> String {
        let state = match self.report.status.role {
            Role::Looking => return "looking".into(),
            Role::Leading => "leading",
            Role::Following if self.mode() == "observer" => "observing",
            Role::Following => "following",
        };
        format!("{state} - {}", self.zab_state())
    }

    /// Requests queued on every connection, not yet answered.
    pub fn outstanding(&self) -> usize {
        self.details.connections.iter().map(|c| c.queued).sum()
    }

    /// The `srvr`/`stat` body.
    pub fn server_stats(&self) -> ServerStatsView {
        ServerStatsView {
            packets_received: self.stats.received,
            packets_sent: self.stats.sent,
            outstanding: self.outstanding(),
            min_latency: self.stats.min_ms.round() as i64,
            avg_latency: self.stats.avg_ms,
            max_latency: self.stats.max_ms.round() as i64,
            connections: self.report.connections,
            last_processed_zxid: self.report.last_applied.0,
            server_state: self.mode(),
            node_count: self.report.nodes,
            uptime_ms: self.uptime_ms,
        }
    }

    /// Whether member `id` is an observer (the replicated membership's word,
    /// else this member's file's).
    pub fn is_observer(&self, id: zabkeeper_core::ids::ServerId) -> bool {
        match &self.configuration {
            Some(c) => c.members().any(|m| m.id == id && m.participation == Participation::Observer),
            None => self.config.observers().contains(&id),
        }
    }

    /// The voting members' count (ZooKeeper's quorum_size).
    pub fn quorum_size(&self) -> usize {
        match &self.configuration {
            Some(c) => c.voters().len(),
            None => self.config.voters().len(),
        }
    }

    /// Observers synced with this leader, with the zxid each acknowledged
    /// (empty on a member that does not lead).
    pub fn synced_observers(&self) -> Vec<(zabkeeper_core::ids::ServerId, u64)> {
        if self.report.status.role != Role::Leading {
            return Vec::new();
        }
        self.report.followers.iter().filter(|f| f.synced && self.is_observer(f.id)).map(|f| (f.id, f.acked.0)).collect()
    }

    /// `mntr`'s figures under ZooKeeper 3.8's names (the text word prefixes `zk_`).
    pub fn monitor(&self) -> Vec<(&'static str, Figure)> {
        let r = &self.report;
        let s = self.server_stats();
        let mut lines = vec![
            ("version", Figure::Text(full_version())),
            ("server_state", Figure::Text(self.server_state().into())),
            ("peer_state", Figure::Text(self.peer_state())),
            ("avg_latency", Figure::Float(s.avg_latency)),
            ("max_latency", Figure::Int(s.max_latency)),
            ("min_latency", Figure::Int(s.min_latency)),
            ("packets_received", Figure::count(s.packets_received)),
            ("packets_sent", Figure::count(s.packets_sent)),
            ("num_alive_connections", Figure::count(r.connections)),
            ("outstanding_requests", Figure::count(s.outstanding)),
            ("znode_count", Figure::count(r.nodes)),
            ("watch_count", Figure::count(r.watches)),
            ("ephemerals_count", Figure::count(r.ephemerals)),
            ("approximate_data_size", Figure::count(r.data_bytes)),
            ("global_sessions", Figure::count(r.sessions)),
            // Every session is global here: ZooKeeper's local sessions are not served.
            ("local_sessions", Figure::Int(0)),
            ("stale_sessions_expired", Figure::count(r.counters.expired_sessions)),
            ("uptime", Figure::count(self.uptime_ms)),
            ("quorum_size", Figure::count(self.quorum_size())),
            ("last_client_response_size", Figure::Int(self.stats.client_response.last)),
            ("max_client_response_size", Figure::Int(self.stats.client_response.max)),
            ("min_client_response_size", Figure::Int(self.stats.client_response.min)),
        ];
        if let Some(d) = self.disk {
            lines.push(("disk_log_bytes", Figure::count(d.log)));
            lines.push(("disk_snapshots_bytes", Figure::count(d.snapshots)));
            lines.push(("disk_sled_bytes", Figure::count(d.sled)));
            lines.push(("disk_other_bytes", Figure::count(d.other)));
        }
        if let Some((open, max)) = file_descriptors() {
            lines.push(("open_file_descriptor_count", Figure::count(open)));
            lines.push(("max_file_descriptor_count", Figure::count(max)));
        }
        if self.leads_an_ensemble() {
            // As the leader sees them: learners connected (syncing or synced), then synced ones by kind.
            let synced_observers = self.synced_observers().len();
            let synced = r.followers.iter().filter(|f| f.synced).count();
            lines.push(("learners", Figure::count(r.followers.len())));
            lines.push(("synced_followers", Figure::count(synced.saturating_sub(synced_observers))));
            lines.push(("synced_non_voting_followers", Figure::Int(0)));
            lines.push(("synced_observers", Figure::count(synced_observers)));
            lines.push(("pending_syncs", Figure::count(r.pending_syncs)));
            let proposals = self.stats.proposals;
            lines.push(("last_proposal_size", Figure::Int(proposals.last)));
            lines.push(("max_proposal_size", Figure::Int(proposals.max)));
            lines.push(("min_proposal_size", Figure::Int(proposals.min)));
            lines.push(("leader_uptime", Figure::count(self.leader_uptime_ms.unwrap_or(0))));
        }
        lines
    }

    /// `wchs`: sessions with watches, distinct watched paths, watches.
    pub fn watch_summary(&self) -> (usize, usize, usize) {
        let paths: BTreeSet<&String> = self.details.watches.iter().flat_map(|(_, p)| p.iter()).collect();
        (self.details.watches.len(), paths.len(), self.report.watches)
    }

    /// `wchp`: each watched path and the sessions watching it.
    pub fn watches_by_path(&self) -> BTreeMap<&str, Vec<SessionId>> {
        let mut by_path: BTreeMap<&str, Vec<SessionId>> = BTreeMap::new();
        for (session, paths) in &self.details.watches {
            for p in paths {
                by_path.entry(p.as_str()).or_default().push(*session);
            }
        }
        by_path
    }

    /// `dump`'s expiry times: when each session expires if not heard from
    /// again (ms since the epoch, rounded up to a tick as ZooKeeper's expiry
    /// buckets are), and its sessions: every session on the leader, which
    /// tracks them; elsewhere those connected here (the others' expiry is
    /// not known there).
    pub fn expiry_buckets(&self) -> BTreeMap<i64, Vec<SessionId>> {
        let mut buckets: BTreeMap<i64, Vec<SessionId>> = BTreeMap::new();
        // The leader tracks every session's expiry, as ZooKeeper's does.
        if !self.details.expiries.is_empty() {
            for (session, at) in &self.details.expiries {
                buckets.entry(self.expiry_bucket(*at)).or_default().push(*session);
            }
            return buckets;
        }
        for c in &self.connections {
            if let Some(session) = c.session {
                buckets.entry(self.expiry_bucket(c.expires_at_ms())).or_default().push(session);
            }
        }
        buckets
    }

    /// The expiry bucket `at_ms` falls in: rounded up to the next tick, as
    /// ZooKeeper's expiry queues round.
    pub fn expiry_bucket(&self, at_ms: i64) -> i64 {
        let tick = i64::try_from(self.config.tick_ms.max(1)).unwrap_or(i64::MAX);
        (at_ms / tick).saturating_add(1).saturating_mul(tick)
    }

    /// The leader's peer host (`lead`'s leader_ip), when known.
    pub fn leader_host(&self) -> Option<String> {
        let leader = self.report.status.leader?;
        let from_configuration = self
            .configuration
            .as_ref()
            .and_then(|c| c.members().find(|m| m.id == leader).and_then(|m| m.peer_host_port()));
        let host_port = from_configuration
            .or_else(|| self.config.members.iter().find(|m| m.id == leader).map(|m| m.peer_addr.to_string()))?;
        Some(split_host(&host_port).to_string())
    }
}

/// The host of `host:port` (brackets of an IPv6 address kept off).
pub fn split_host(host_port: &str) -> &str {
    let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Open file descriptors and the soft limit on them (Linux: /proc).
fn file_descriptors() -> Option<(usize, u64)> {
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let max = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())?;
    Some((open, max))
}

/// `conf`: one setting, under its four-letter word name and its AdminServer
/// JSON name (a setting only one of them shows has None for the other).
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    /// The name in `conf`'s text (ZooKeeper's zoo.cfg key).
    pub text: Option<&'static str>,
    /// The name in the JSON (ZooKeeper's `ZooKeeperServerConf`).
    pub json: Option<&'static str>,
    /// The value.
    pub value: Figure,
}

/// This member's settings, as `conf` shows them.
pub fn settings(c: &ServerConfig) -> Vec<Setting> {
    let me = c.me();
    let both = |text, json, value| Setting { text: Some(text), json: Some(json), value };
    let text = |text, value| Setting { text: Some(text), json: None, value };
    let json = |json, value| Setting { text: None, json: Some(json), value };
    let mut out = Vec::new();
    match &me.client_addr {
        Some(client) => {
            out.push(both("clientPort", "client_port", Figure::Int(i64::from(client.port()))));
            out.push(text("clientPortAddress", Figure::Text(client.host().to_string())));
        }
        None => out.push(json("client_port", Figure::Int(-1))),
    }
    let secure = me.secure_client_addr.as_ref().map_or(-1, |a| i64::from(a.port()));
    out.push(text("secureClientPort", Figure::Int(secure)));
    let dir = Figure::Text(me.data_dir.display().to_string());
    out.push(both("dataDir", "data_dir", dir.clone()));
    out.push(both("dataLogDir", "data_log_dir", dir));
    out.push(both("tickTime", "tick_time", Figure::count(c.tick_ms)));
    // ZooKeeper's maxClientCnxns is the per-address limit (0: none).
    out.push(both("maxClientCnxns", "max_client_cnxns", Figure::count(c.limits.max_connections_per_address)));
    out.push(both("minSessionTimeout", "min_session_timeout", Figure::Int(i64::from(c.min_session_timeout_ms))));
    out.push(both("maxSessionTimeout", "max_session_timeout", Figure::Int(i64::from(c.max_session_timeout_ms))));
    out.push(both("serverId", "server_id", Figure::count(c.id)));
    // The OS default backlog is used, which ZooKeeper shows as -1.
    out.push(json("client_port_listen_backlog", Figure::Int(-1)));
    out.push(text("initLimit", Figure::count(c.init_limit_ticks)));
    out.push(text("syncLimit", Figure::count(c.sync_limit_ticks)));
    out.push(text("snapCount", Figure::count(c.snapshot_every)));
    out.push(text("autopurge.snapRetainCount", Figure::count(c.snapshots_retained)));
    out.push(text("jute.maxbuffer", Figure::count(c.max_data_bytes)));
    out
}

/// `envi`: the process's environment, under ZooKeeper's keys where one
/// applies (there is no Java here, so no `java.*`).
pub fn environment() -> Vec<(&'static str, String)> {
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default();
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let mut out = vec![
        ("zookeeper.version", full_version()),
        ("host.name", read("/etc/hostname")),
        ("os.name", std::env::consts::OS.to_string()),
        ("os.arch", std::env::consts::ARCH.to_string()),
        ("os.version", read("/proc/sys/kernel/osrelease")),
        ("user.name", var("USER")),
        ("user.home", var("HOME")),
    ];
    if let Ok(dir) = std::env::current_dir() {
        out.push(("user.dir", dir.display().to_string()));
    }
    out.push(("process.id", std::process::id().to_string()));
    out
}

/// The disk usage of this member's data directory, read off the runtime's
/// threads (a walk of its files' metadata).
pub async fn disk_usage(config: &ServerConfig) -> DiskUsage {
    let dir = config.me().data_dir.clone();
    tokio::task::spawn_blocking(move || zabkeeper_store::usage(&dir)).await.unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::telemetry::stats::Sizes;
    use zabkeeper_core::ids::Zxid;
    use zabkeeper_core::replica::{ConnSummary, Counters};
    use zabkeeper_core::zab::{FollowerProgress, Status};

    const THREE: &str = r#"
tick_ms = 100
[[server]]
id = 1
peer_addr = "127.0.0.1:2888"
grpc_addr = "127.0.0.1:3181"
client_addr = "127.0.0.1:2181"
data_dir = "/var/lib/zk1"
[[server]]
id = 2
peer_addr = "127.0.0.2:2888"
grpc_addr = "127.0.0.2:3181"
[[server]]
id = 3
peer_addr = "127.0.0.3:2888"
grpc_addr = "127.0.0.3:3181"
role = "observer"
"#;

    /// Facts of member 1 of a 2-voter, 1-observer ensemble, leading, with one
    /// client connection (session 0x10) watching two paths.
    pub(crate) fn leader() -> Facts {
        let config = Arc::new(ServerConfig::parse(THREE, Some(1)).expect("a valid test config"));
        let followers = [(2, true), (3, true)]
            .map(|(id, synced)| FollowerProgress { id, synced, acked: Zxid(0x1_0000_0005), lag: 0 })
            .to_vec();
        let report = StatusReport {
            id: 1,
            status: Status { role: Role::Leading, epoch: 1, leader: Some(1), serving: true },
            accepted_epoch: 1,
            current_epoch: 1,
            last_logged: Zxid(0x1_0000_0005),
            last_committed: Zxid(0x1_0000_0005),
            last_applied: Zxid(0x1_0000_0005),
            nodes: 7,
            data_bytes: 120,
            sessions: 1,
            connections: 1,
            watches: 2,
            synced_followers: vec![2, 3],
            ensemble_size: 3,
            counters: Counters { requests: 9, applied: 5, expired_sessions: 1, ..Default::default() },
            ephemerals: 1,
            followers,
            last_snapshot_error: None,
            pending_syncs: 0,
            disk_free_bytes: Some(1 << 30),
            disk_low: false,
        };
        let session = SessionId(0x10);
        let details = Details {
            connections: vec![ConnSummary { conn: 4, session: Some(session), queued: 0, last_heard_ms: 1_000 }],
            sessions: vec![(session, 4000)],
            // The leader's tracker: the connection's last word plus its timeout.
            expiries: vec![(session, 5_000)],
            watches: vec![(session, vec!["/a".into(), "/b".into()])],
            ephemerals: vec![(session, vec!["/e".into()])],
        };
        let figures = ConnFigures {
            peer: Some("127.0.0.1:5000".parse().expect("an address")),
            established_ms: 500,
            received: 3,
            sent: 4,
            last_op: "GETD",
            last_xid: 2,
            last_zxid: 0x1_0000_0005,
            last_response_ms: 900,
            last_latency_ms: 1,
            min_latency_ms: 0.4,
            avg_latency_ms: 1.0,
            max_latency_ms: 2.6,
        };
        let connections = vec![Connection {
            remote: "127.0.0.1:5000".into(),
            queued: 0,
            session: Some(session),
            timeout_ms: 4000,
            last_heard_ms: 1_000,
            figures: Some(figures),
        }];
        let configuration = Configuration::initial(
            zabkeeper_core::members::Membership::new(
                config.members.iter().map(zabkeeper_config::Member::member_line).collect(),
            )
            .expect("a valid membership"),
        );
        Facts {
            report,
            details,
            stats: StatsSnapshot {
                received: 3,
                sent: 4,
                min_ms: 0.4,
                avg_ms: 1.0,
                max_ms: 2.6,
                client_response: Sizes { last: 188, min: 22, max: 400 },
                proposals: Sizes { last: 186, min: 48, max: 186 },
            },
            configuration: Some(configuration),
            config,
            connections,
            uptime_ms: 5_000,
            leader_uptime_ms: Some(4_000),
            disk: Some(DiskUsage { log: 1 << 20, snapshots: 3 << 20, sled: 4096, other: 19 }),
        }
    }

    #[test]
    fn the_leader_counts_voters_and_observers_apart() {
        let f = leader();
        let m: BTreeMap<_, _> = f.monitor().into_iter().collect();
        assert_eq!(m["learners"], Figure::Int(2));
        assert_eq!(m["synced_followers"], Figure::Int(1), "member 3 is an observer");
        assert_eq!(m["synced_observers"], Figure::Int(1));
        assert_eq!(m["quorum_size"], Figure::Int(2));
        assert_eq!(m["disk_log_bytes"], Figure::Int(1 << 20));
        assert_eq!(m["disk_snapshots_bytes"], Figure::Int(3 << 20));
        assert_eq!(m["disk_sled_bytes"], Figure::Int(4096));
        assert_eq!(m["peer_state"], Figure::Text("leading - broadcast".into()));
        assert_eq!(f.synced_observers(), vec![(3, 0x1_0000_0005)]);
    }

    #[test]
    fn phases_follow_role_and_serving() {
        let mut f = leader();
        assert_eq!((f.zab_state(), f.server_state()), ("broadcast", "leader"));
        f.report.status.serving = false;
        assert_eq!((f.zab_state(), f.server_state()), ("synchronization", "looking"));
        f.report.status.role = Role::Looking;
        assert_eq!((f.zab_state(), f.peer_state().as_str()), ("election", "looking"));
    }

    #[test]
    fn sessions_expire_in_tick_buckets_and_watches_invert_by_path() {
        let f = leader();
        // Heard at 1000 ms with a 4000 ms timeout: expires by 5000, bucketed up to the next 100 ms tick.
        assert_eq!(f.expiry_buckets().into_iter().collect::<Vec<_>>(), vec![(5_100, vec![SessionId(0x10)])]);
        let by_path = f.watches_by_path();
        assert_eq!(by_path.keys().copied().collect::<Vec<_>>(), ["/a", "/b"]);
        assert_eq!(f.watch_summary(), (1, 2, 2));
        assert_eq!(f.leader_host().as_deref(), Some("127.0.0.1"));
        assert_eq!(split_host("[::1]:2888"), "::1");
    }
}
