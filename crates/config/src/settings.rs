//! The ensemble-wide keys (timing, storage, four-letter words, the admin
//! token, logging, client limits, the super digest): their validated types
//! and their checks, one function per group. Each refuses a bad value with
//! the key's name, at start, rather than letting it misbehave later.

use crate::file_format::FileConfig;
use crate::{invalid, within, ConfigError};

/// Free space kept on the data directory's filesystem by default: room for
/// the log to go on while an operator is paged, and for sled's own upkeep.
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 64 * 1024 * 1024;

/// The most async worker threads a member may ask for: far more than a
/// replica whose state has one owner task can keep busy.
pub const MAX_WORKER_THREADS: usize = 256;

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

/// The timing keys, checked.
pub(crate) struct Timing {
    /// One tick, ms.
    pub(crate) tick_ms: u64,
    /// initLimit, in ticks.
    pub(crate) init_limit_ticks: u64,
    /// syncLimit, in ticks.
    pub(crate) sync_limit_ticks: u64,
    /// Smallest session timeout granted.
    pub(crate) min_session_timeout_ms: i32,
    /// Largest session timeout granted.
    pub(crate) max_session_timeout_ms: i32,
}

/// The tick, the Zab limits and the session timeouts (whose defaults follow
/// the tick, as ZooKeeper's do).
pub(crate) fn timing(file: &FileConfig) -> Result<Timing, ConfigError> {
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
    Ok(Timing { tick_ms, init_limit_ticks, sync_limit_ticks, min_session_timeout_ms, max_session_timeout_ms })
}

/// The storage keys, checked.
pub(crate) struct Storage {
    /// Snapshot after this many transactions.
    pub(crate) snapshot_every: u64,
    /// Committed entries held decoded in memory.
    pub(crate) resident_log_entries: usize,
    /// Snapshots kept on disk.
    pub(crate) snapshots_retained: usize,
    /// Largest node data, bytes.
    pub(crate) max_data_bytes: usize,
    /// Free space the data directory's filesystem keeps.
    pub(crate) disk_reserve_bytes: u64,
}

/// How often to snapshot, what to keep in memory and on disk, and how big
/// a node's data may be.
pub(crate) fn storage(file: &FileConfig) -> Result<Storage, ConfigError> {
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
    let max_data_bytes = within("max_data_bytes", file.max_data_bytes.unwrap_or(1024 * 1024), 1..=256 * 1024 * 1024)?;
    let disk_reserve_bytes = file.disk_reserve_bytes.unwrap_or(DEFAULT_DISK_RESERVE_BYTES);
    Ok(Storage { snapshot_every, resident_log_entries, snapshots_retained, max_data_bytes, disk_reserve_bytes })
}

/// The four-letter words enabled: `words` as written (each known, or "*"),
/// else ZooKeeper's default three.
pub(crate) fn four_letter_words(words: Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let four_letter_words = words.unwrap_or_else(|| vec!["srvr".into(), "ruok".into(), "mntr".into()]);
    for (i, word) in four_letter_words.iter().enumerate() {
        if word != "*" && !KNOWN_FOUR_LETTER_WORDS.contains(&word.as_str()) {
            return Err(invalid(
                format!("four_letter_words[{i}]"),
                format!("unknown word {word:?}; known: {} or \"*\"", KNOWN_FOUR_LETTER_WORDS.join(", ")),
            ));
        }
    }
    Ok(four_letter_words)
}

/// The admin token, given inline (`token`) or read from `token_file`, not
/// both; it must be printable ASCII, as it travels in a request header.
pub(crate) fn admin_token(token: Option<String>, token_file: Option<&str>) -> Result<Option<String>, ConfigError> {
    let admin_token = match (token, token_file) {
        (Some(_), Some(_)) => return Err(invalid("admin_token_file", "set admin_token or admin_token_file, not both")),
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
        let key = if token_file.is_some() { "admin_token_file" } else { "admin_token" };
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(key, "the token must be non-empty printable ASCII without spaces"));
        }
    }
    Ok(admin_token)
}

/// The runtime's worker threads, when the file sets them.
pub(crate) fn worker_threads(file: &FileConfig) -> Result<Option<usize>, ConfigError> {
    file.worker_threads.map(|n| within("worker_threads", n, 1..=MAX_WORKER_THREADS)).transpose()
}

/// The log format, with the log filter checked to be one tracing reads, so
/// a typo fails at start instead of when the server sets up its logging.
pub(crate) fn logging(file: &FileConfig) -> Result<LogFormat, ConfigError> {
    let log_format = match &file.log_format {
        Some(f) => f.parse().map_err(|e| invalid("log_format", e))?,
        None => LogFormat::Text,
    };
    if let Some(level) = &file.log_level {
        tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|e| invalid("log_level", format!("{level:?} is not a log filter: {e}")))?;
    }
    Ok(log_format)
}

/// The limits on clients, each at its default unless the file sets it, and
/// none below the least that still works.
pub(crate) fn client_limits(file: &FileConfig) -> Result<ClientLimits, ConfigError> {
    let d = ClientLimits::default();
    let at_least = |key: &str, value: Option<usize>, default: usize, min: usize| match value {
        Some(v) if v < min => Err(invalid(key, format!("must be at least {min}, got {v}"))),
        Some(v) => Ok(v),
        None => Ok(default),
    };
    Ok(ClientLimits {
        max_frame_bytes: at_least("max_frame_bytes", file.max_frame_bytes, d.max_frame_bytes, 1024)?,
        max_connections: at_least("max_client_connections", file.max_client_connections, d.max_connections, 1)?,
        max_connections_per_address: file.max_client_connections_per_address.unwrap_or(d.max_connections_per_address),
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
    })
}

/// Refuses a super digest not in the form ZooKeeper's digest provider
/// generates, which no credentials could ever match.
pub(crate) fn check_super_digest(digest: Option<&str>) -> Result<(), ConfigError> {
    if let Some(digest) = digest {
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
    Ok(())
}
