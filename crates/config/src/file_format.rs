//! The config file as written: its keys, typed but not yet checked, with
//! the environment's overrides applied first. Kept apart from the checks so
//! the file's vocabulary (and serde's refusal of an unknown or mistyped key)
//! reads in one place, and the checks work on typed values, not TOML.

use crate::{overrides, tls_files, ConfigError};
use serde::Deserialize;
use std::path::PathBuf;
use zabkeeper_core::ids::ServerId;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    pub(crate) tick_ms: Option<u64>,
    pub(crate) init_limit_ticks: Option<u64>,
    pub(crate) sync_limit_ticks: Option<u64>,
    pub(crate) min_session_timeout_ms: Option<i32>,
    pub(crate) max_session_timeout_ms: Option<i32>,
    pub(crate) snapshot_every: Option<u64>,
    pub(crate) snapshots_retained: Option<usize>,
    pub(crate) resident_log_entries: Option<usize>,
    pub(crate) max_data_bytes: Option<usize>,
    pub(crate) disk_reserve_bytes: Option<u64>,
    pub(crate) data_dir: Option<String>,
    pub(crate) four_letter_words: Option<Vec<String>>,
    pub(crate) admin_token: Option<String>,
    pub(crate) admin_token_file: Option<String>,
    pub(crate) admin_allow_remote: Option<bool>,
    pub(crate) log_format: Option<String>,
    pub(crate) log_level: Option<String>,
    pub(crate) max_frame_bytes: Option<usize>,
    pub(crate) max_client_connections: Option<usize>,
    pub(crate) max_client_connections_per_address: Option<usize>,
    pub(crate) connect_timeout_ms: Option<u64>,
    pub(crate) max_outstanding_per_session: Option<usize>,
    pub(crate) max_queued_reply_bytes: Option<usize>,
    pub(crate) max_watches_per_session: Option<usize>,
    pub(crate) max_multi_ops: Option<usize>,
    pub(crate) max_streams_per_grpc_connection: Option<u32>,
    pub(crate) super_digest: Option<String>,
    pub(crate) x509_superuser: Option<String>,
    pub(crate) reconfig_enabled: Option<bool>,
    pub(crate) audit_log: Option<bool>,
    pub(crate) linearizable_reads: Option<bool>,
    pub(crate) worker_threads: Option<usize>,
    pub(crate) bind_host: Option<String>,
    pub(crate) tls: Option<tls_files::FileTls>,
    #[serde(default)]
    pub(crate) server: Vec<FileMember>,
}

/// One `[[server]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileMember {
    pub(crate) id: ServerId,
    pub(crate) peer_addr: String,
    pub(crate) grpc_addr: String,
    pub(crate) client_addr: Option<String>,
    pub(crate) admin_addr: Option<String>,
    pub(crate) metrics_addr: Option<String>,
    pub(crate) secure_client_addr: Option<String>,
    pub(crate) secure_client_bind: Option<String>,
    pub(crate) peer_name: Option<String>,
    pub(crate) peer_bind: Option<String>,
    pub(crate) grpc_bind: Option<String>,
    pub(crate) client_bind: Option<String>,
    pub(crate) admin_bind: Option<String>,
    pub(crate) metrics_bind: Option<String>,
    pub(crate) data_dir: Option<String>,
    pub(crate) role: Option<String>,
}

/// The file of `text` with the overrides found in `env` applied, typed. A
/// parse error names the overrides, as one of them may be at fault.
pub(crate) fn read(text: &str, env: &[(String, String)]) -> Result<FileConfig, ConfigError> {
    let parse_error = |message: String| ConfigError::Parse { path: PathBuf::new(), message };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_error(e.to_string()))?;
    let overridden = overrides::apply(&mut table, env)?;
    FileConfig::deserialize(table).map_err(|e| {
        let mut message = e.to_string();
        if !overridden.is_empty() {
            message = format!("{message} (with overrides from {})", overridden.join(", "));
        }
        parse_error(message)
    })
}
