//! The ensemble configuration: one TOML file describes the whole ensemble and
//! each member picks itself with `--id` (ZooKeeper's zoo.cfg plus myid, in one
//! place). Every key is checked at start; a bad value fails with a message
//! naming the key.

use crate::ids::ServerId;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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

/// Free space kept on the data directory's filesystem by default: room for
/// the log to go on while an operator is paged, and for sled's own upkeep.
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 64 * 1024 * 1024;

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
    data_dir: Option<String>,
}

/// One member of the ensemble.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its id (1..=254, as ZooKeeper requires when TTL nodes are enabled).
    pub id: ServerId,
    /// Replica-to-replica gRPC (Zab).
    pub peer_addr: SocketAddr,
    /// The gRPC client session API.
    pub grpc_addr: SocketAddr,
    /// The ZooKeeper wire protocol port, if served.
    pub client_addr: Option<SocketAddr>,
    /// The admin gRPC API, if served.
    pub admin_addr: Option<SocketAddr>,
    /// Prometheus metrics over HTTP (`/metrics`), if served.
    pub metrics_addr: Option<SocketAddr>,
    /// Where its log and snapshots live.
    pub data_dir: PathBuf,
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
pub const KNOWN_FOUR_LETTER_WORDS: [&str; 10] =
    ["ruok", "srvr", "stat", "mntr", "conf", "cons", "envi", "wchs", "dump", "isro"];

fn parse_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|e| invalid(key, format!("{value:?} is not an ip:port address ({e})")))
}

impl ServerConfig {
    /// Reads `path` and selects member `id` (may be omitted for a single-member file).
    pub fn load(path: &Path, id: Option<ServerId>) -> Result<ServerConfig, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        ServerConfig::parse(&text, id).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse { path: path.to_path_buf(), message },
            other => other,
        })
    }

    /// Parses and validates a config text.
    pub fn parse(text: &str, id: Option<ServerId>) -> Result<ServerConfig, ConfigError> {
        let file: FileConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: PathBuf::new(), message: e.to_string() })?;
        let tick_ms = file.tick_ms.unwrap_or(50);
        if !(1..=60_000).contains(&tick_ms) {
            return Err(invalid("tick_ms", format!("must be within 1..=60000, got {tick_ms}")));
        }
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
        let snapshots_retained = file.snapshots_retained.unwrap_or(3);
        if snapshots_retained == 0 {
            return Err(invalid("snapshots_retained", "must be at least 1"));
        }
        let max_data_bytes = file.max_data_bytes.unwrap_or(1024 * 1024);
        if !(1..=256 * 1024 * 1024).contains(&max_data_bytes) {
            return Err(invalid("max_data_bytes", format!("must be within 1..=268435456, got {max_data_bytes}")));
        }
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
        let mut members = Vec::new();
        for (i, m) in file.server.iter().enumerate() {
            let key = |field: &str| format!("server[{i}].{field}");
            if !(1..=254).contains(&m.id) {
                return Err(invalid(key("id"), format!("must be within 1..=254, got {}", m.id)));
            }
            let data_dir = match (&m.data_dir, &file.data_dir) {
                (Some(dir), _) => dir.clone(),
                (None, Some(pattern)) => pattern.replace("{id}", &m.id.to_string()),
                (None, None) => {
                    return Err(invalid(key("data_dir"), "no data_dir for this server and no top-level data_dir"))
                }
            };
            members.push(Member {
                id: m.id,
                peer_addr: parse_addr(&key("peer_addr"), &m.peer_addr)?,
                grpc_addr: parse_addr(&key("grpc_addr"), &m.grpc_addr)?,
                client_addr: m.client_addr.as_deref().map(|a| parse_addr(&key("client_addr"), a)).transpose()?,
                admin_addr: m.admin_addr.as_deref().map(|a| parse_addr(&key("admin_addr"), a)).transpose()?,
                metrics_addr: m.metrics_addr.as_deref().map(|a| parse_addr(&key("metrics_addr"), a)).transpose()?,
                data_dir: PathBuf::from(data_dir),
            });
            if let Some(addr) = members.last().and_then(|m| m.admin_addr) {
                if !addr.ip().is_loopback() && !admin_allow_remote {
                    return Err(invalid(
                        key("admin_addr"),
                        format!(
                            "{addr} is not a loopback address: the admin API can take snapshots and purge, so it \
                             stays on loopback unless `admin_allow_remote = true` (set `admin_token` too)"
                        ),
                    ));
                }
            }
        }
        members.sort_by_key(|m| m.id);
        for pair in members.windows(2) {
            if pair[0].id == pair[1].id {
                return Err(invalid("server.id", format!("id {} appears twice", pair[0].id)));
            }
        }
        let mut addrs: Vec<(SocketAddr, ServerId)> = Vec::new();
        for m in &members {
            for addr in [Some(m.peer_addr), Some(m.grpc_addr), m.client_addr, m.admin_addr, m.metrics_addr]
                .into_iter()
                .flatten()
            {
                if let Some((_, other)) = addrs.iter().find(|(a, _)| *a == addr && addr.port() != 0) {
                    return Err(invalid(
                        format!("server[id={}]", m.id),
                        format!("address {addr} is also used by server {other}"),
                    ));
                }
                addrs.push((addr, m.id));
            }
        }
        let id = match id {
            Some(id) => id,
            None if members.len() == 1 => members[0].id,
            None => {
                return Err(invalid(
                    "--id",
                    format!("the file describes {} servers: pick one with --id", members.len()),
                ))
            }
        };
        if !members.iter().any(|m| m.id == id) {
            let ids: Vec<String> = members.iter().map(|m| m.id.to_string()).collect();
            return Err(invalid("--id", format!("no [[server]] with id {id} (ids: {})", ids.join(", "))));
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
            max_data_bytes,
            disk_reserve_bytes: file.disk_reserve_bytes.unwrap_or(DEFAULT_DISK_RESERVE_BYTES),
            four_letter_words,
            admin_token,
            log_format,
            log_level: file.log_level,
            limits,
            super_digest: file.super_digest,
        })
    }

    /// This member.
    pub fn me(&self) -> &Member {
        self.members.iter().find(|m| m.id == self.id).expect("validated: the id is a member")
    }

    /// Whether the ensemble has a single member.
    pub fn standalone(&self) -> bool {
        self.members.len() == 1
    }

    /// Whether a four-letter word is enabled.
    pub fn four_letter_word_enabled(&self, word: &str) -> bool {
        self.four_letter_words.iter().any(|w| w == word || w == "*")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = r#"
tick_ms = 50
data_dir = "run/zk{id}"
[[server]]
id = 1
peer_addr = "127.0.0.1:2881"
grpc_addr = "127.0.0.1:3181"
client_addr = "127.0.0.1:2181"
[[server]]
id = 2
peer_addr = "127.0.0.1:2882"
grpc_addr = "127.0.0.1:3182"
[[server]]
id = 3
peer_addr = "127.0.0.1:2883"
grpc_addr = "127.0.0.1:3183"
"#;

    fn err(text: &str, id: Option<ServerId>) -> String {
        ServerConfig::parse(text, id).unwrap_err().to_string()
    }

    #[test]
    fn parses_an_ensemble_and_picks_the_member() {
        let c = ServerConfig::parse(THREE, Some(2)).unwrap();
        assert_eq!(c.members.len(), 3);
        assert_eq!(c.me().data_dir, PathBuf::from("run/zk2"));
        assert_eq!(c.me().client_addr, None);
        assert_eq!(c.min_session_timeout_ms, 1000);
    }

    #[test]
    fn errors_name_the_key() {
        assert!(err(THREE, None).contains("--id"));
        assert!(err(THREE, Some(9)).contains("no [[server]] with id 9"));
        assert!(err(&THREE.replace("127.0.0.1:2882", "nowhere"), Some(1)).contains("server[1].peer_addr"));
        assert!(err(&THREE.replace("tick_ms = 50", "tick_ms = 0"), Some(1)).contains("`tick_ms`"));
        assert!(err(&THREE.replace("tick_ms = 50", "tick_ms = \"fast\""), Some(1)).contains("tick_ms"));
        assert!(err(&THREE.replace("tick_ms = 50", "tik_ms = 50"), Some(1)).contains("tik_ms"));
        assert!(err(&THREE.replace("id = 3", "id = 2"), Some(1)).contains("appears twice"));
        assert!(err(&THREE.replace("id = 3", "id = 300"), Some(1)).contains("server[2].id"));
        assert!(err(&THREE.replace("127.0.0.1:3183", "127.0.0.1:3182"), Some(1)).contains("also used"));
        let minmax = THREE.replace("tick_ms = 50", "min_session_timeout_ms = 5000\nmax_session_timeout_ms = 4000");
        assert!(err(&minmax, Some(1)).contains("max_session_timeout_ms"));
        let words = THREE.replace("tick_ms = 50", "four_letter_words = [\"kill\"]");
        assert!(err(&words, Some(1)).contains("four_letter_words[0]"));
    }

    #[test]
    fn the_admin_port_stays_on_loopback_and_takes_a_token() {
        let remote = THREE.replace("client_addr = \"127.0.0.1:2181\"", "admin_addr = \"0.0.0.0:4181\"");
        assert!(err(&remote, Some(1)).contains("server[0].admin_addr"));
        let allowed = format!("admin_allow_remote = true\nadmin_token = \"s3cret\"\n{remote}");
        let c = ServerConfig::parse(&allowed, Some(1)).unwrap();
        assert_eq!(c.admin_token.as_deref(), Some("s3cret"));
        assert!(err(&format!("admin_token = \"two words\"\n{THREE}"), Some(1)).contains("`admin_token`"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-a-file\n").unwrap();
        let text = format!("admin_token_file = {:?}\n{THREE}", file.display().to_string());
        assert_eq!(ServerConfig::parse(&text, Some(1)).unwrap().admin_token.as_deref(), Some("from-a-file"));
        let missing = format!("admin_token_file = \"/nonexistent/token\"\n{THREE}");
        assert!(err(&missing, Some(1)).contains("`admin_token_file`"));
        assert!(err(&format!("log_format = \"xml\"\n{THREE}"), Some(1)).contains("`log_format`"));
        let json = ServerConfig::parse(&format!("log_format = \"json\"\n{THREE}"), Some(1)).unwrap();
        assert_eq!(json.log_format, LogFormat::Json);
    }

    #[test]
    fn client_limits_have_zookeepers_defaults_and_are_checked() {
        let c = ServerConfig::parse(THREE, Some(1)).unwrap();
        assert_eq!((c.limits.max_frame_bytes, c.limits.max_connections_per_address), (1_048_575, 60));
        assert!(err(&format!("max_frame_bytes = 10\n{THREE}"), Some(1)).contains("`max_frame_bytes`"));
        assert!(err(&format!("connect_timeout_ms = 0\n{THREE}"), Some(1)).contains("`connect_timeout_ms`"));
        assert!(err(&format!("super_digest = \"nocolon\"\n{THREE}"), Some(1)).contains("`super_digest`"));
        let text = format!(
            "super_digest = \"super:D/InIHSb7yEEbrWz8b9l71RjZJU=\"\nmax_client_connections_per_address = 0\n{THREE}"
        );
        let c = ServerConfig::parse(&text, Some(1)).unwrap();
        assert_eq!(c.limits.max_connections_per_address, 0);
        assert!(c.super_digest.is_some());
    }

    #[test]
    fn single_member_needs_no_id() {
        let single = "data_dir = \"d\"\n[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\ngrpc_addr = \"127.0.0.1:2\"\n";
        let c = ServerConfig::parse(single, None).unwrap();
        assert!(c.standalone());
    }
}
