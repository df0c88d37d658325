//! The ensemble configuration: one TOML file describes the whole ensemble and
//! each member picks itself with `--id`, `ZABKEEPER_ID` or its host name's
//! StatefulSet ordinal (ZooKeeper's zoo.cfg plus myid, in one place). Any key
//! can be overridden from the environment (`overrides.rs`). Every key is
//! checked at start; a bad value fails with a message naming the key and the
//! member.
//!
//! This file is the validated configuration and the order its checks run
//! in; the file as written is `file_format`, the ensemble-wide keys
//! `settings`, the `[[server]]` tables `server_tables` (into the
//! [`Member`]s of `member`), and which member this process is `sources`.

pub mod address;
mod file_format;
mod member;
mod overrides;
pub mod rewrite;
mod server_tables;
mod settings;
mod sources;
mod tls_files;

pub use address::HostPort;
pub use member::{Binds, Member, MemberRole};
pub use settings::{ClientLimits, LogFormat, DEFAULT_DISK_RESERVE_BYTES, KNOWN_FOUR_LETTER_WORDS, MAX_WORKER_THREADS};
pub use sources::Sources;
pub use tls_files::TlsConfig;

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

/// The error for a key with a bad value.
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
    /// The subject (RFC 2253, as `x509:` ACLs name it) whose verified client
    /// certificate passes every ACL check (ZooKeeper's
    /// `X509AuthenticationProvider.superUser`).
    pub x509_superuser: Option<String>,
    /// Serve ZooKeeper's `reconfig` (its reconfigEnabled; off by default:
    /// RECONFIGDISABLED). The admin API reconfigures either way.
    pub reconfig_enabled: bool,
    /// Log every change a client of this member makes, one line each
    /// (ZooKeeper's `audit.enable`), under the target `zabkeeper::audit`.
    pub audit_log: bool,
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
        c.audit = self.audit_log;
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

    /// Parses and validates a config text with `sources`: the file as
    /// written, then its ensemble-wide keys and its `[[server]]` tables,
    /// then what only the member this process is must satisfy. The checks
    /// run in this order so the first fault reported is always the same.
    pub fn parse_with(text: &str, sources: &Sources) -> Result<ServerConfig, ConfigError> {
        let mut file = file_format::read(text, &sources.env)?;
        let timing = settings::timing(&file)?;
        let storage = settings::storage(&file)?;
        let four_letter_words = settings::four_letter_words(file.four_letter_words.take())?;
        let admin_token = settings::admin_token(file.admin_token.take(), file.admin_token_file.as_deref())?;
        let worker_threads = settings::worker_threads(&file)?;
        let log_format = settings::logging(&file)?;
        let limits = settings::client_limits(&file)?;
        settings::check_super_digest(file.super_digest.as_deref())?;
        let server_tables::Tables { members, own_only } = server_tables::read(&file)?;
        let id = sources::pick_member(&members, sources)?;
        if let Some((_, e)) = own_only.into_iter().find(|(of, _)| *of == id) {
            return Err(e);
        }
        if members.iter().any(|m| m.id == id && m.data_dir.as_os_str().is_empty()) {
            let key = format!("server[id={id}].data_dir");
            return Err(invalid(key, "no data_dir for this server and no top-level data_dir"));
        }
        let tls = file.tls.as_ref().map(|t| t.resolve(id)).transpose()?;
        if file.x509_superuser.is_some() && !tls.as_ref().is_some_and(|t| t.client_auth) {
            let why = "an x509 identity comes from a verified client certificate: set [tls] client_auth = true";
            return Err(invalid("x509_superuser", why));
        }
        if file.x509_superuser.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(invalid("x509_superuser", "an empty subject names no certificate"));
        }
        if tls.as_ref().is_some_and(|t| t.peer) {
            for m in &members {
                tls_files::check_certificate_name(&format!("server[id={}].peer_name", m.id), m.peer_name())?;
            }
        }
        Ok(ServerConfig {
            id,
            members,
            tick_ms: timing.tick_ms,
            init_limit_ticks: timing.init_limit_ticks,
            sync_limit_ticks: timing.sync_limit_ticks,
            min_session_timeout_ms: timing.min_session_timeout_ms,
            max_session_timeout_ms: timing.max_session_timeout_ms,
            snapshot_every: storage.snapshot_every,
            snapshots_retained: storage.snapshots_retained,
            resident_log_entries: storage.resident_log_entries,
            max_data_bytes: storage.max_data_bytes,
            disk_reserve_bytes: storage.disk_reserve_bytes,
            four_letter_words,
            admin_token,
            log_format,
            log_level: file.log_level,
            limits,
            super_digest: file.super_digest,
            x509_superuser: file.x509_superuser,
            reconfig_enabled: file.reconfig_enabled.unwrap_or(false),
            audit_log: file.audit_log.unwrap_or(false),
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
