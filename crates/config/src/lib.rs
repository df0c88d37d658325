//! The ensemble configuration: one TOML file describes the whole ensemble and
//! each member picks itself with `--id`, `ZABKEEPER_ID` or its host name's
//! StatefulSet ordinal (ZooKeeper's zoo.cfg plus myid, in one place). Any key
//! can be overridden from the environment (`overrides.rs`). Every key is
//! checked at start; a bad value fails with a message naming the key and the
//! member.

pub mod address;
mod overrides;
pub mod rewrite;
mod tls;

pub use address::HostPort;
pub use tls::TlsConfig;

use serde::Deserialize;
use std::path::{Path, PathBuf};
use zabkeeper_core::ids::ServerId;

/// What is wrong with a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed or has an unknown or mistyped key.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (it names the key and line).
        message: String,
    },
    /// A key has an invalid value.
    #[error("config key `{key}`: {reason}")]
    Invalid {
        /// The key, e.g. `server[2].peer_addr`.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), reason: reason.into() }
}

/// `value` when it lies in `range`, else an error naming `key` and both.
fn within<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ConfigError> {
    if range.contains(&value) {
        return Ok(value);
    }
    Err(invalid(key, format!("must be within {}..={}, got {value}", range.start(), range.end())))
}

/// Free space kept on the data directory's filesystem by default: room for
/// the log to go on while an operator is paged, and for sled's own upkeep.
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 64 * 1024 * 1024;

/// The most async worker threads a member may ask for: far more than a
/// replica whose state has one owner task can keep busy.
pub const MAX_WORKER_THREADS: usize = 256;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    tick_ms: Option<u64>,
    init_limit_ticks: Option<u64>,
    sync_limit_ticks: Option<u64>,
    min_session_timeout_ms: Option<i32>,
    max_session_timeout_ms: Option<i32>,
    snapshot_every: Option<u64>,
    snapshots_retained: Option<usize>,
    resident_log_entries: Option<usize>,
    max_data_bytes: Option<usize>,
    disk_reserve_bytes: Option<u64>,
    data_dir: Option<String>,
    four_letter_words: Option<Vec<String>>,
    admin_token: Option<String>,
    admin_token_file: Option<String>,
    admin_allow_remote: Option<bool>,
    log_format: Option<String>,
    log_level: Option<String>,
    max_frame_bytes: Option<usize>,
    max_client_connections: Option<usize>,
    max_client_connections_per_address: Option<usize>,
    connect_timeout_ms: Option<u64>,
    max_outstanding_per_session: Option<usize>,
    max_queued_reply_bytes: Option<usize>,
    max_watches_per_session: Option<usize>,
    max_multi_ops: Option<usize>,
    max_streams_per_grpc_connection: Option<u32>,
    super_digest: Option<String>,
    reconfig_enabled: Option<bool>,
    linearizable_reads: Option<bool>,
    worker_threads: Option<usize>,
    bind_host: Option<String>,
    tls: Option<tls::FileTls>,
    #[serde(default)]
    server: Vec<FileMember>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMember {
    id: ServerId,
    peer_addr: String,
    grpc_addr: String,
    client_addr: Option<String>,
    admin_addr: Option<String>,
    metrics_addr: Option<String>,
    secure_client_addr: Option<String>,
    secure_client_bind: Option<String>,
    peer_name: Option<String>,
    peer_bind: Option<String>,
    grpc_bind: Option<String>,
    client_bind: Option<String>,
    admin_bind: Option<String>,
    metrics_bind: Option<String>,
    data_dir: Option<String>,
    role: Option<String>,
}

/// Whether a member votes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemberRole {
    /// Votes in elections and counts toward every quorum (ZooKeeper's participant).
    #[default]
    Participant,
    /// Takes every commit, serves sessions, reads and watches and forwards
    /// writes, but never votes nor counts toward a quorum (ZooKeeper's
    /// observer, etcd's learner).
    Observer,
}

impl MemberRole {
    /// The name ZooKeeper's dynamic configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            MemberRole::Participant => "participant",
            MemberRole::Observer => "observer",
        }
    }
}

/// One member of the ensemble.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its id (1..=254, as ZooKeeper requires when TTL nodes are enabled).
    pub id: ServerId,
    /// Replica-to-replica gRPC (Zab), as peers reach it.
    pub peer_addr: HostPort,
    /// The gRPC client session API, as clients reach it.
    pub grpc_addr: HostPort,
    /// The ZooKeeper wire protocol port, if served, as clients reach it.
    pub client_addr: Option<HostPort>,
    /// The admin gRPC API, if served, as operators reach it.
    pub admin_addr: Option<HostPort>,
    /// Prometheus metrics over HTTP (`/metrics`), if served.
    pub metrics_addr: Option<HostPort>,
    /// The ZooKeeper wire protocol over TLS (ZooKeeper's secureClientPort), if served.
    pub secure_client_addr: Option<HostPort>,
    /// The name its peer certificate must carry under `[tls] peer = true`,
    /// when not the host of `peer_addr`.
    pub peer_name: Option<String>,
    /// Where each of those listens, when not where it is reached (behind
    /// NAT, in a container, on `0.0.0.0`).
    pub bind: Binds,
    /// Where its log and snapshots live.
    pub data_dir: PathBuf,
    /// Voter or observer.
    pub role: MemberRole,
}

impl Member {
    /// The name this member's peer certificate must carry: `peer_name`,
    /// else the host of `peer_addr`.
    pub fn peer_name(&self) -> &str {
        self.peer_name.as_deref().unwrap_or(self.peer_addr.host())
    }

    /// This member as the replicated configuration holds it, in ZooKeeper's
    /// form (`host:quorumPort:electionPort`: both are our one peer port).
    pub fn member_line(&self) -> zabkeeper_core::members::Member {
        use zabkeeper_core::members::Participation;
        let peer = self.peer_addr.to_string();
        let participation = match self.role {
            MemberRole::Participant => Participation::Participant,
            MemberRole::Observer => Participation::Observer,
        };
        zabkeeper_core::members::Member {
            id: self.id,
            participation,
            peer_address: format!("{peer}:{}", self.peer_addr.port()),
            client_address: self.client_addr.as_ref().map(ToString::to_string).unwrap_or_default(),
            endpoints: self.endpoints(),
        }
    }

    /// Its addresses beyond ZooKeeper's line (`zabkeeper.N=` in `/zookeeper/config`).
    pub fn endpoints(&self) -> zabkeeper_core::members::Endpoints {
        let text = |a: &Option<HostPort>| a.as_ref().map(ToString::to_string).unwrap_or_default();
        zabkeeper_core::members::Endpoints {
            grpc: self.grpc_addr.to_string(),
            admin: text(&self.admin_addr),
            metrics: text(&self.metrics_addr),
            secure_client: text(&self.secure_client_addr),
        }
    }
}

/// The addresses a member's listeners bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binds {
    /// The peer listener.
    pub peer: HostPort,
    /// The gRPC client listener.
    pub grpc: HostPort,
    /// The ZooKeeper-protocol listener.
    pub client: Option<HostPort>,
    /// The admin listener (loopback unless `admin_allow_remote`).
    pub admin: Option<HostPort>,
    /// The metrics listener.
    pub metrics: Option<HostPort>,
    /// The ZooKeeper-protocol TLS listener.
    pub secure_client: Option<HostPort>,
}

/// Where a config's member id and overrides come from besides the file.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// `--id` or `ZABKEEPER_ID`.
    pub id: Option<ServerId>,
    /// This machine's host name, whose StatefulSet ordinal (`zk-2`) names
    /// the member when no id is given.
    pub hostname: Option<String>,
    /// The environment, for `ZABKEEPER_*` overrides.
    pub env: Vec<(String, String)>,
}

impl Sources {
    /// The process's own: its host name and environment, and `id`.
    pub fn of_process(id: Option<ServerId>) -> Sources {
        let hostname = rustix::system::uname().nodename().to_str().ok().map(str::to_string);
        Sources { id, hostname, env: std::env::vars().collect() }
    }
}

/// A validated configuration for one member.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// This member.
    pub id: ServerId,
    /// Every member, sorted by id.
    pub members: Vec<Member>,
    /// One tick, ms (ZooKeeper's tickTime).
    pub tick_ms: u64,
    /// Discovery + sync deadline in ticks (initLimit).
    pub init_limit_ticks: u64,
    /// Heartbeat deadline in ticks (syncLimit).
    pub sync_limit_ticks: u64,
    /// Smallest session timeout granted.
    pub min_session_timeout_ms: i32,
    /// Largest session timeout granted.
    pub max_session_timeout_ms: i32,
    /// Snapshot after this many transactions.
    pub snapshot_every: u64,
    /// Snapshots kept on disk (older ones and the log before them are purged).
    pub snapshots_retained: usize,
    /// Committed entries held decoded in memory; a DIFF reaching further
    /// back reads the rest from the stored log (ZooKeeper's commitLogCount).
    pub resident_log_entries: usize,
    /// Largest node data, bytes (jute.maxbuffer).
    pub max_data_bytes: usize,
    /// Free space the data directory's filesystem keeps: below it, a leader
    /// refuses writes that grow the state (0: never).
    pub disk_reserve_bytes: u64,
    /// Four-letter words answered on the client port.
    pub four_letter_words: Vec<String>,
    /// A token every admin call must present (`authorization: Bearer …`).
    pub admin_token: Option<String>,
    /// How the server logs.
    pub log_format: LogFormat,
    /// The log filter (tracing's EnvFilter syntax), if the file sets one.
    pub log_level: Option<String>,
    /// Resource limits on clients.
    pub limits: ClientLimits,
    /// `super:<base64 sha1>`: whoever authenticates with the matching digest
    /// credentials passes every ACL check (ZooKeeper's superDigest).
    pub super_digest: Option<String>,
    /// Serve ZooKeeper's `reconfig` (its reconfigEnabled; off by default:
    /// RECONFIGDISABLED). The admin API reconfigures either way.
    pub reconfig_enabled: bool,
    /// Every read on this member is linearizable (read index), for clients
    /// that cannot ask per request (ClickHouse Keeper's `quorum_reads`).
    pub linearizable_reads: bool,
    /// Threads of the async runtime (network, gRPC, the replica's task);
    /// None: the CPUs shared out among the members on this machine
    /// ([`ServerConfig::runtime_workers`]).
    pub worker_threads: Option<usize>,
    /// The ensemble's membership as a running member told it (`--join`):
    /// this member starts outside it, following without a vote until it is
    /// added, instead of taking the file's members for the ensemble.
    pub joined: Option<zabkeeper_core::members::Membership>,
    /// TLS, when configured (`[tls]`), with this member's paths.
    pub tls: Option<TlsConfig>,
    /// The file it was read from ([`ServerConfig::load`]): rewritten when
    /// the replicated configuration changes ([`rewrite`]).
    pub file: Option<PathBuf>,
}

/// What one client, one address or one session may hold. Each refusal is a
/// clear error or a logged close, never a stall of other clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// Largest request frame on the ZooKeeper port (jute.maxbuffer); a
    /// bigger one closes that connection, as ZooKeeper does.
    pub max_frame_bytes: usize,
    /// Connections one client port holds at once.
    pub max_connections: usize,
    /// Connections from one address per port (ZooKeeper's maxClientCnxns; 0: no cap).
    pub max_connections_per_address: usize,
    /// How long a new connection may take to send its connect request.
    pub connect_timeout_ms: u64,
    /// Requests one session may have unanswered; beyond it the server stops
    /// reading that connection until replies go out.
    pub max_outstanding_per_session: usize,
    /// Reply bytes queued for a client that is not reading; beyond it the
    /// connection is closed (the session lives on until it expires).
    pub max_queued_reply_bytes: usize,
    /// Watches one session may hold.
    pub max_watches_per_session: usize,
    /// Operations in one multi.
    pub max_multi_ops: usize,
    /// Sessions (HTTP/2 streams) one gRPC connection carries at once.
    pub max_streams_per_grpc_connection: u32,
}

impl Default for ClientLimits {
    fn default() -> ClientLimits {
        ClientLimits {
            max_frame_bytes: 0xf_ffff,
            max_connections: 10_000,
            max_connections_per_address: 60,
            connect_timeout_ms: 10_000,
            max_outstanding_per_session: 1_000,
            max_queued_reply_bytes: 32 << 20,
            max_watches_per_session: 100_000,
            max_multi_ops: 10_000,
            max_streams_per_grpc_connection: 100,
        }
    }
}

/// How the server writes its log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, spans included.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?} is not a log format (text or json)")),
        }
    }
}

/// Every four-letter word the server knows.
pub const KNOWN_FOUR_LETTER_WORDS: [&str; 12] =
    ["ruok", "srvr", "stat", "mntr", "conf", "cons", "envi", "wchs", "wchc", "wchp", "dump", "isro"];

fn parse_addr(key: &str, value: &str) -> Result<HostPort, ConfigError> {
    HostPort::parse(value).map_err(|e| invalid(key, format!("{value:?}: {e}")))
}

/// Members on one machine (the same peer host, or loopback both:
/// [`HostPort::same_machine`]) must not share a port. Members on different
/// machines may: each may keep its admin API on 127.0.0.1:4181.
fn check_distinct_ports(members: &[Member]) -> Result<(), ConfigError> {
    let mut seen: Vec<(&HostPort, &HostPort, ServerId)> = Vec::new();
    for m in members {
        let machine = &m.peer_addr;
        let advertised = [Some(&m.peer_addr), Some(&m.grpc_addr), m.client_addr.as_ref(), m.admin_addr.as_ref()];
        let more = [m.metrics_addr.as_ref(), m.secure_client_addr.as_ref()];
        for addr in advertised.into_iter().chain(more).flatten() {
            if addr.port() == 0 {
                continue;
            }
            let clash = seen.iter().find(|(peer, other, _)| peer.same_machine(machine) && *other == addr);
            if let Some((_, _, other)) = clash {
                return Err(invalid(
                    format!("server[id={}]", m.id),
                    format!("address {addr} is also used by server {other}"),
                ));
            }
            seen.push((machine, addr, m.id));
        }
    }
    Ok(())
}

/// The member this process is: the given id, the only member, or the one its
/// host name's StatefulSet ordinal names.
fn pick_member(members: &[Member], sources: &Sources) -> Result<ServerId, ConfigError> {
    let ids = || members.iter().map(|m| m.id.to_string()).collect::<Vec<_>>().join(", ");
    let (id, source) = match (sources.id, members) {
        (Some(id), _) => (id, "--id"),
        (None, [only]) => (only.id, "the only [[server]]"),
        (None, _) => match sources.hostname.as_deref().and_then(|h| Some((h, address::id_from_hostname(h)?))) {
            Some((host, id)) => {
                if !members.iter().any(|m| m.id == id) {
                    return Err(invalid(
                        "--id",
                        format!("the host name {host:?} names member {id} (its ordinal plus one), but the file's ids are {}; pick one with --id or ZABKEEPER_ID", ids()),
                    ));
                }
                (id, "host name")
            }
            None => {
                return Err(invalid(
                    "--id",
                    format!(
                        "the file describes {} servers: pick one with --id or ZABKEEPER_ID, or run on a host named as a StatefulSet's pods are (zk-0 is member 1)",
                        members.len()
                    ),
                ))
            }
        },
    };
    if !members.iter().any(|m| m.id == id) {
        return Err(invalid(source, format!("no [[server]] with id {id} (ids: {})", ids())));
    }
    Ok(id)
}

impl ServerConfig {
    /// The replica's settings from this config.
    pub fn replica_config(&self) -> zabkeeper_core::replica::Config {
        let mut c = zabkeeper_core::replica::Config::new(self.id, self.voters(), self.tick_ms);
        c.zab.observers = self.observers();
        if let Some(joined) = &self.joined {
            // The ensemble's members, not the file's: outside them, this member
            // never counts itself a voter, so it cannot lead alone.
            c.zab.voters = joined.voters().collect();
            c.zab.observers = joined.observers().collect();
        }
        c.zab.init_limit_ticks = self.init_limit_ticks;
        c.zab.sync_limit_ticks = self.sync_limit_ticks;
        c.min_session_timeout_ms = self.min_session_timeout_ms;
        c.max_session_timeout_ms = self.max_session_timeout_ms;
        c.limits.max_data_bytes = self.max_data_bytes;
        c.limits.max_multi_ops = self.limits.max_multi_ops;
        c.limits.max_watches_per_session = self.limits.max_watches_per_session;
        c.super_digest = self.super_digest.clone();
        c.reconfig_enabled = self.reconfig_enabled;
        c.linearizable_reads = self.linearizable_reads;
        c.snapshot_every = self.snapshot_every;
        c.snapshot_turns = true;
        c.zab.resident_log_entries = self.resident_log_entries;
        if let Some(joined) = &self.joined {
            c.members = Some(joined.clone());
        } else if self.members.len() > 1 {
            c.members =
                zabkeeper_core::members::Membership::new(self.members.iter().map(crate::Member::member_line).collect())
                    .ok();
        }
        c
    }

    /// Reads `path` and selects the member `sources` name, with the
    /// overrides of `sources`' environment.
    pub fn load(path: &Path, sources: &Sources) -> Result<ServerConfig, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let mut config = ServerConfig::parse_with(&text, sources).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse { path: path.to_path_buf(), message },
            other => other,
        })?;
        config.file = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses and validates a config text for member `id` (may be omitted
    /// for a single-member file), without environment overrides.
    pub fn parse(text: &str, id: Option<ServerId>) -> Result<ServerConfig, ConfigError> {
        ServerConfig::parse_with(text, &Sources { id, ..Sources::default() })
    }

    /// Parses and validates a config text with `sources`.
    pub fn parse_with(text: &str, sources: &Sources) -> Result<ServerConfig, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse { path: PathBuf::new(), message };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_error(e.to_string()))?;
        let overridden = overrides::apply(&mut table, &sources.env)?;
        let file = FileConfig::deserialize(table).map_err(|e| {
            let mut message = e.to_string();
            if !overridden.is_empty() {
                message = format!("{message} (with overrides from {})", overridden.join(", "));
            }
            parse_error(message)
        })?;
        let tick_ms = within("tick_ms", file.tick_ms.unwrap_or(50), 1..=60_000)?;
        let init_limit_ticks = file.init_limit_ticks.unwrap_or(20);
        let sync_limit_ticks = file.sync_limit_ticks.unwrap_or(10);
        if init_limit_ticks == 0 {
            return Err(invalid("init_limit_ticks", "must be at least 1"));
        }
        if sync_limit_ticks == 0 {
            return Err(invalid("sync_limit_ticks", "must be at least 1"));
        }
        let ms = |ticks: u64, floor: u64| i32::try_from(ticks.saturating_mul(tick_ms).max(floor)).unwrap_or(i32::MAX);
        let min_session_timeout_ms = file.min_session_timeout_ms.unwrap_or_else(|| ms(2, 1000));
        let max_session_timeout_ms = file.max_session_timeout_ms.unwrap_or_else(|| ms(20, 40_000));
        if min_session_timeout_ms <= 0 {
            return Err(invalid("min_session_timeout_ms", "must be positive"));
        }
        if max_session_timeout_ms < min_session_timeout_ms {
            return Err(invalid(
                "max_session_timeout_ms",
                format!("{max_session_timeout_ms} is below min_session_timeout_ms {min_session_timeout_ms}"),
            ));
        }
        let snapshot_every = file.snapshot_every.unwrap_or(100_000);
        if snapshot_every == 0 {
            return Err(invalid("snapshot_every", "must be at least 1"));
        }
        let resident_log_entries = file.resident_log_entries.unwrap_or(zabkeeper_core::zab::RESIDENT_LOG_ENTRIES);
        if resident_log_entries == 0 {
            return Err(invalid("resident_log_entries", "must be at least 1"));
        }
        let snapshots_retained = file.snapshots_retained.unwrap_or(3);
        if snapshots_retained == 0 {
            return Err(invalid("snapshots_retained", "must be at least 1"));
        }
        let max_data_bytes =
            within("max_data_bytes", file.max_data_bytes.unwrap_or(1024 * 1024), 1..=256 * 1024 * 1024)?;
        let four_letter_words =
            file.four_letter_words.unwrap_or_else(|| vec!["srvr".into(), "ruok".into(), "mntr".into()]);
        for (i, word) in four_letter_words.iter().enumerate() {
            if word != "*" && !KNOWN_FOUR_LETTER_WORDS.contains(&word.as_str()) {
                return Err(invalid(
                    format!("four_letter_words[{i}]"),
                    format!("unknown word {word:?}; known: {} or \"*\"", KNOWN_FOUR_LETTER_WORDS.join(", ")),
                ));
            }
        }
        let admin_token = match (file.admin_token, &file.admin_token_file) {
            (Some(_), Some(_)) => {
                return Err(invalid("admin_token_file", "set admin_token or admin_token_file, not both"))
            }
            (Some(token), None) => Some(token),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| invalid("admin_token_file", format!("cannot read {path}: {e}")))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        if let Some(token) = &admin_token {
            let key = if file.admin_token_file.is_some() { "admin_token_file" } else { "admin_token" };
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(key, "the token must be non-empty printable ASCII without spaces"));
            }
        }
        let admin_allow_remote = file.admin_allow_remote.unwrap_or(false);
        let worker_threads =
            file.worker_threads.map(|n| within("worker_threads", n, 1..=MAX_WORKER_THREADS)).transpose()?;
        let log_format = match &file.log_format {
            Some(f) => f.parse().map_err(|e| invalid("log_format", e))?,
            None => LogFormat::Text,
        };
        if let Some(level) = &file.log_level {
            tracing_subscriber::EnvFilter::try_new(level)
                .map_err(|e| invalid("log_level", format!("{level:?} is not a log filter: {e}")))?;
        }
        let d = ClientLimits::default();
        let at_least = |key: &str, value: Option<usize>, default: usize, min: usize| match value {
            Some(v) if v < min => Err(invalid(key, format!("must be at least {min}, got {v}"))),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        let limits = ClientLimits {
            max_frame_bytes: at_least("max_frame_bytes", file.max_frame_bytes, d.max_frame_bytes, 1024)?,
            max_connections: at_least("max_client_connections", file.max_client_connections, d.max_connections, 1)?,
            max_connections_per_address: file
                .max_client_connections_per_address
                .unwrap_or(d.max_connections_per_address),
            connect_timeout_ms: match file.connect_timeout_ms {
                Some(0) => return Err(invalid("connect_timeout_ms", "must be at least 1")),
                Some(ms) => ms,
                None => d.connect_timeout_ms,
            },
            max_outstanding_per_session: at_least(
                "max_outstanding_per_session",
                file.max_outstanding_per_session,
                d.max_outstanding_per_session,
                1,
            )?,
            max_queued_reply_bytes: at_least(
                "max_queued_reply_bytes",
                file.max_queued_reply_bytes,
                d.max_queued_reply_bytes,
                1 << 20,
            )?,
            max_watches_per_session: at_least(
                "max_watches_per_session",
                file.max_watches_per_session,
                d.max_watches_per_session,
                1,
            )?,
            max_multi_ops: at_least("max_multi_ops", file.max_multi_ops, d.max_multi_ops, 1)?,
            max_streams_per_grpc_connection: match file.max_streams_per_grpc_connection {
                Some(0) => return Err(invalid("max_streams_per_grpc_connection", "must be at least 1")),
                Some(n) => n,
                None => d.max_streams_per_grpc_connection,
            },
        };
        if let Some(digest) = &file.super_digest {
            let well_formed = digest
                .split_once(':')
                .is_some_and(|(user, hash)| !user.is_empty() && hash.len() == 28 && hash.ends_with('='));
            if !well_formed {
                return Err(invalid(
                    "super_digest",
                    "expected USER:BASE64_SHA1 as ZooKeeper's DigestAuthenticationProvider generates it, e.g. super:D/InIHSb7yEEbrWz8b9l71RjZJU=",
                ));
            }
        }
        if file.server.is_empty() {
            return Err(invalid("server", "at least one [[server]] entry is required"));
        }
        let bind_host = match &file.bind_host {
            Some(host) => Some(parse_addr("bind_host", &format!("{host}:0"))?),
            None => None,
        };
        let mut members = Vec::new();
        // What only this member's own table must satisfy (what it listens
        // on): another's is that member's business, and a table a rewrite
        // added after a reconfiguration may not satisfy it here.
        let mut own_only: Vec<(ServerId, ConfigError)> = Vec::new();
        for (i, m) in file.server.iter().enumerate() {
            if !zabkeeper_core::members::is_server_id(m.id) {
                return Err(invalid(format!("server[{i}].id"), format!("must be within 1..=254, got {}", m.id)));
            }
            let key = |field: &str| format!("server[id={}].{field}", m.id);
            let data_dir = match (&m.data_dir, &file.data_dir) {
                (Some(dir), _) => dir.clone(),
                (None, Some(pattern)) => pattern.replace("{id}", &m.id.to_string()),
                // Only this member's own is needed (checked once it is known).
                (None, None) => String::new(),
            };
            let optional =
                |field: &str, value: &Option<String>| value.as_deref().map(|a| parse_addr(&key(field), a)).transpose();
            let peer_addr = parse_addr(&key("peer_addr"), &m.peer_addr)?;
            let grpc_addr = parse_addr(&key("grpc_addr"), &m.grpc_addr)?;
            let client_addr = optional("client_addr", &m.client_addr)?;
            let admin_addr = optional("admin_addr", &m.admin_addr)?;
            let metrics_addr = optional("metrics_addr", &m.metrics_addr)?;
            let secure_client_addr = optional("secure_client_addr", &m.secure_client_addr)?;
            if secure_client_addr.is_some() && file.tls.is_none() {
                let why = "needs a [tls] section with cert_file and key_file";
                own_only.push((m.id, invalid(key("secure_client_addr"), why)));
            }
            // An explicit `*_bind` wins; else `bind_host` at the advertised
            // port (never for the admin API, which stays where it is put);
            // else the advertised address itself.
            let bind = |field: &str, explicit: &Option<String>, advertised: &HostPort, shared: bool| {
                Ok::<_, ConfigError>(match optional(field, explicit)? {
                    Some(addr) => addr,
                    None => match (&bind_host, shared) {
                        (Some(host), true) => host.with_port(advertised.port()),
                        _ => advertised.clone(),
                    },
                })
            };
            let bind_optional =
                |field: &str, explicit: &Option<String>, advertised: &Option<HostPort>, shared| match advertised {
                    Some(advertised) => bind(field, explicit, advertised, shared).map(Some),
                    None if explicit.is_some() => {
                        let addr = field.replace("_bind", "_addr");
                        Err(invalid(key(field), format!("set only with {addr}, the address clients are given")))
                    }
                    None => Ok(None),
                };
            let binds = Binds {
                peer: bind("peer_bind", &m.peer_bind, &peer_addr, true)?,
                grpc: bind("grpc_bind", &m.grpc_bind, &grpc_addr, true)?,
                client: bind_optional("client_bind", &m.client_bind, &client_addr, true)?,
                admin: bind_optional("admin_bind", &m.admin_bind, &admin_addr, false)?,
                metrics: bind_optional("metrics_bind", &m.metrics_bind, &metrics_addr, true)?,
                secure_client: bind_optional("secure_client_bind", &m.secure_client_bind, &secure_client_addr, true)?,
            };
            if let Some(addr) = &binds.admin {
                if !addr.is_loopback() && !admin_allow_remote {
                    let field = if m.admin_bind.is_some() { "admin_bind" } else { "admin_addr" };
                    own_only.push((
                        m.id,
                        invalid(
                            key(field),
                            format!(
                                "{addr} is not a loopback address: the admin API can take snapshots and purge, so \
                                 it stays on loopback unless `admin_allow_remote = true` (set `admin_token` too)"
                            ),
                        ),
                    ));
                }
            }
            let role = match m.role.as_deref() {
                None | Some("participant") => MemberRole::Participant,
                Some("observer") => MemberRole::Observer,
                Some(other) => {
                    return Err(invalid(key("role"), format!("{other:?} is neither \"participant\" nor \"observer\"")))
                }
            };
            members.push(Member {
                id: m.id,
                role,
                peer_addr,
                grpc_addr,
                client_addr,
                admin_addr,
                metrics_addr,
                secure_client_addr,
                peer_name: m.peer_name.clone(),
                bind: binds,
                data_dir: PathBuf::from(data_dir),
            });
        }
        members.sort_by_key(|m| m.id);
        for pair in members.windows(2) {
            if pair[0].id == pair[1].id {
                return Err(invalid("server.id", format!("id {} appears twice", pair[0].id)));
            }
        }
        check_distinct_ports(&members)?;
        if !members.iter().any(|m| m.role == MemberRole::Participant) {
            return Err(invalid("server.role", "every member is an observer: at least one must vote"));
        }
        let id = pick_member(&members, sources)?;
        if let Some((_, e)) = own_only.into_iter().find(|(of, _)| *of == id) {
            return Err(e);
        }
        if members.iter().any(|m| m.id == id && m.data_dir.as_os_str().is_empty()) {
            let key = format!("server[id={id}].data_dir");
            return Err(invalid(key, "no data_dir for this server and no top-level data_dir"));
        }
        let tls = file.tls.as_ref().map(|t| t.resolve(id)).transpose()?;
        if tls.as_ref().is_some_and(|t| t.peer) {
            for m in &members {
                tls::check_certificate_name(&format!("server[id={}].peer_name", m.id), m.peer_name())?;
            }
        }
        Ok(ServerConfig {
            id,
            members,
            tick_ms,
            init_limit_ticks,
            sync_limit_ticks,
            min_session_timeout_ms,
            max_session_timeout_ms,
            snapshot_every,
            snapshots_retained,
            resident_log_entries,
            max_data_bytes,
            disk_reserve_bytes: file.disk_reserve_bytes.unwrap_or(DEFAULT_DISK_RESERVE_BYTES),
            four_letter_words,
            admin_token,
            log_format,
            log_level: file.log_level,
            limits,
            super_digest: file.super_digest,
            reconfig_enabled: file.reconfig_enabled.unwrap_or(false),
            linearizable_reads: file.linearizable_reads.unwrap_or(false),
            worker_threads,
            joined: None,
            tls,
            file: None,
        })
    }

    /// This member.
    pub fn me(&self) -> &Member {
        self.members.iter().find(|m| m.id == self.id).expect("validated: the id is a member")
    }

    /// Whether the ensemble has a single member (one joining an ensemble
    /// is not alone, whatever its file lists).
    pub fn standalone(&self) -> bool {
        self.members.len() == 1 && self.joined.is_none()
    }

    /// The voting members' ids.
    pub fn voters(&self) -> Vec<ServerId> {
        self.members.iter().filter(|m| m.role == MemberRole::Participant).map(|m| m.id).collect()
    }

    /// How many of the file's members run on this member's machine (the
    /// same peer host; any two loopback hosts are one machine), itself included.
    pub fn members_on_this_machine(&self) -> usize {
        let here = &self.me().peer_addr;
        self.members.iter().filter(|m| m.peer_addr.same_machine(here)).count()
    }

    /// Worker threads for the async runtime, given the CPUs this process may
    /// use: `worker_threads` when set, else the CPUs shared out among the
    /// members on this machine, at least one. Why: a member whose workers
    /// outnumber its share of the cores wakes idle workers for work another
    /// already took (benchmarks.md, "Worker threads on a shared host").
    pub fn runtime_workers(&self, cpus: usize) -> usize {
        self.worker_threads.unwrap_or_else(|| (cpus / self.members_on_this_machine()).max(1))
    }

    /// The observers' ids.
    pub fn observers(&self) -> Vec<ServerId> {
        self.members.iter().filter(|m| m.role == MemberRole::Observer).map(|m| m.id).collect()
    }

    /// This member's role name as `srvr` and the admin API print it
    /// ("observer" for an observer that follows).
    pub fn role_name(&self, role: zabkeeper_core::zab::Role) -> &'static str {
        if self.me().role == MemberRole::Observer && role == zabkeeper_core::zab::Role::Following {
            return "observer";
        }
        role.name(self.standalone())
    }

    /// Whether a four-letter word is enabled.
    pub fn four_letter_word_enabled(&self, word: &str) -> bool {
        self.four_letter_words.iter().any(|w| w == word || w == "*")
    }
}

#[cfg(test)]
mod tests;
