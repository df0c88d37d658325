//! `zkctl import`: an Apache ZooKeeper data directory to a member's data
//! directory. The files are read here; decoding and ZooKeeper's recovery
//! are the pure core's ([`zabkeeper_core::zookeeper_files`]); the data directory is
//! written by [`offline::write_data_dir`], as `snapshot restore` writes it.

use super::offline::{self, OfflineError};
use std::path::{Path, PathBuf};
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::tree::snapshot;
use zabkeeper_core::zookeeper_files::recover::{Recovery, RecoveryStats};
use zabkeeper_core::zookeeper_files::txnlog::LogEnd;
use zabkeeper_core::zookeeper_files::{self as zk, ZkFileError};

/// What went wrong importing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A ZooKeeper file is damaged, or holds what cannot be imported exactly.
    #[error(transparent)]
    File(#[from] ZkFileError),
    /// No complete snapshot to start from.
    #[error("{dir}: no complete ZooKeeper snapshot (snapshot.<zxid>) to start from{skipped}")]
    NoSnapshot {
        /// The directory searched.
        dir: PathBuf,
        /// Incomplete snapshots passed over, if any.
        skipped: String,
    },
    /// A compressed snapshot (`zookeeper.snapshot.compression.method`).
    #[error("{path}: compressed snapshots are not read; decompress it (gunzip / snappy) to {plain} first")]
    Compressed {
        /// The file.
        path: PathBuf,
        /// The name it should have.
        plain: String,
    },
    /// The logs miss transactions between the snapshot and the end.
    #[error(
        "{file}: offset {offset}: transaction {found:#x} follows {previous:#x}: the logs miss transactions in between"
    )]
    Gap {
        /// The log file.
        file: PathBuf,
        /// The entry's offset.
        offset: u64,
        /// The zxid applied before.
        previous: i64,
        /// The zxid found.
        found: i64,
    },
    /// Writing the data directory failed.
    #[error(transparent)]
    Offline(#[from] OfflineError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io { path: path.to_path_buf(), source }
}

/// What an import did.
#[derive(Clone, Debug)]
pub struct ImportReport {
    /// The snapshot started from.
    pub snapshot: PathBuf,
    /// Its zxid (its name's).
    pub snapshot_zxid: i64,
    /// Incomplete snapshots passed over, as ZooKeeper passes them.
    pub incomplete_snapshots: Vec<PathBuf>,
    /// The log files read.
    pub logs: Vec<PathBuf>,
    /// A log that ended in a record cut short, and where (never acknowledged: ignored, as ZooKeeper does).
    pub torn: Vec<(PathBuf, u64)>,
    /// The zxid the imported tree reflects.
    pub last_zxid: Zxid,
    /// The epoch the member starts with (its next writes are in a later one).
    pub epoch: u32,
    /// Nodes imported.
    pub nodes: usize,
    /// Open sessions imported.
    pub sessions: usize,
    /// What recovery did.
    pub stats: RecoveryStats,
}

/// `DIR/version-2` when it exists (a ZooKeeper `dataDir`), else `DIR` itself.
fn version_dir(dir: &Path) -> PathBuf {
    let inner = dir.join("version-2");
    if inner.is_dir() {
        inner
    } else {
        dir.to_path_buf()
    }
}

/// The files of `dir` named `<prefix>.<hex zxid>[.suffix]`, by zxid.
fn files(dir: &Path, prefix: &str) -> Result<Vec<(i64, PathBuf)>, ImportError> {
    let mut out = Vec::new();
    for item in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let item = item.map_err(io_err(dir))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if let Some(zxid) = zk::zxid_from_name(&name, prefix) {
            out.push((zxid, item.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// A ZooKeeper epoch file (`acceptedEpoch`, `currentEpoch`: a decimal
/// number), when there is one (a standalone server writes none).
fn epoch_file(dir: &Path, name: &str) -> Result<Option<u32>, ImportError> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u32>().map(Some).map_err(|_| {
            ImportError::File(ZkFileError::Invalid {
                file: path.display().to_string(),
                offset: 0,
                reason: format!("{:?} is not an epoch", text.trim()),
            })
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ImportError::Io { path, source }),
    }
}

/// Reads ZooKeeper's data in `zookeeper_dir` (its `dataDir`; the logs in
/// `log_dir` when its `dataLogDir` is another), recovers the tree as
/// ZooKeeper would on restart and writes it as a member's data directory
/// `data_dir` (absent or empty).
pub fn import(zookeeper_dir: &Path, log_dir: Option<&Path>, data_dir: &Path) -> Result<ImportReport, ImportError> {
    offline::ensure_empty(data_dir)?;
    let (chunks, report) = read(zookeeper_dir, log_dir)?;
    offline::write_data_dir(data_dir, report.last_zxid, chunks, report.epoch)?;
    Ok(report)
}

/// One Apache ZooKeeper snapshot, as its AdminServer streams it or as a
/// `snapshot.<zxid>` file holds it, recovered as ZooKeeper would from it
/// alone: the tree as snapshot chunks (`tree::snapshot`) and the epoch of
/// its history. Its zxid is the 3.9+ last processed one when written, else
/// the newest any node names.
pub fn read_snapshot(name: &str, bytes: &[u8]) -> Result<(Vec<bytes::Bytes>, u32), ImportError> {
    let decoded = zk::snapshot::decode(name, bytes)?;
    let newest = decoded.nodes.iter().map(|n| n.stat.mzxid.max(n.stat.czxid).max(n.stat.pzxid)).max().unwrap_or(0);
    let zxid = decoded.last_processed_zxid.unwrap_or(newest).max(newest);
    let recovery = Recovery::from_snapshot(name, &decoded, zxid)?;
    drop(decoded);
    let (state, _) = recovery.finish()?;
    let epoch = state.highest_epoch();
    let (chunks, _) = snapshot::to_chunks(&state, zabkeeper_store::SNAPSHOT_CHUNK_BYTES);
    Ok((chunks, epoch))
}

/// Reads ZooKeeper's data as [`import`] does and answers the tree as
/// snapshot chunks (`tree::snapshot`), to load into a running ensemble.
pub fn read(zookeeper_dir: &Path, log_dir: Option<&Path>) -> Result<(Vec<bytes::Bytes>, ImportReport), ImportError> {
    let snap_dir = version_dir(zookeeper_dir);
    let log_dir = log_dir.map_or_else(|| snap_dir.clone(), version_dir);

    // The newest complete snapshot, as ZooKeeper's FileSnap picks it; a
    // complete-looking one that fails its checksum is an error, not passed over.
    let mut incomplete = Vec::new();
    let mut chosen = None;
    for (zxid, path) in files(&snap_dir, "snapshot")?.into_iter().rev() {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.split('.').count() > 2 {
            return Err(ImportError::Compressed { plain: format!("snapshot.{zxid:x}"), path });
        }
        let bytes = std::fs::read(&path).map_err(io_err(&path))?;
        if !zk::snapshot::looks_complete(&bytes) {
            incomplete.push(path);
            continue;
        }
        let decoded = zk::snapshot::decode(&path.display().to_string(), &bytes)?;
        chosen = Some((zxid, path, decoded));
        break;
    }
    let Some((snapshot_zxid, snapshot_path, decoded)) = chosen else {
        let skipped = if incomplete.is_empty() {
            String::new()
        } else {
            format!(" ({} incomplete passed over)", incomplete.len())
        };
        return Err(ImportError::NoSnapshot { dir: snap_dir, skipped });
    };
    let mut recovery = Recovery::from_snapshot(&snapshot_path.display().to_string(), &decoded, snapshot_zxid)?;
    drop(decoded);

    // The logs from the one the snapshot's zxid falls in (the newest
    // starting at or before it) on, as FileTxnLog.getLogFiles picks them.
    let all_logs = files(&log_dir, "log")?;
    let first = all_logs.iter().rposition(|(start, _)| *start <= snapshot_zxid).unwrap_or(0);
    let mut logs = Vec::new();
    let mut torn = Vec::new();
    for (_, path) in all_logs.into_iter().skip(first) {
        let name = path.display().to_string();
        let bytes = std::fs::read(&path).map_err(io_err(&path))?;
        let log = zk::txnlog::decode(&name, &bytes)?;
        for entry in &log.entries {
            let previous = recovery.last_zxid();
            let (z, p) = (entry.header.zxid, previous);
            // Within an epoch the counter goes up by one; a new epoch starts over.
            if z > p && (z >> 32) == (p >> 32) && z != p + 1 {
                return Err(ImportError::Gap { file: path.clone(), offset: entry.offset, previous: p, found: z });
            }
            recovery.apply(&name, entry)?;
        }
        if let LogEnd::Torn(offset) = log.end {
            torn.push((path.clone(), offset));
        }
        logs.push(path);
    }

    let (state, stats) = recovery.finish()?;
    let last_zxid = state.last_zxid();
    // A quorum member's epoch files may be ahead of its last transaction
    // (an epoch elected without writes): the member starts past both.
    let files_epoch = epoch_file(&snap_dir, "currentEpoch")?.max(epoch_file(&snap_dir, "acceptedEpoch")?);
    let epoch = files_epoch.unwrap_or(0).max(last_zxid.epoch());
    let (nodes, sessions) = (state.node_count(), state.session_count());
    let (chunks, _) = snapshot::to_chunks(&state, zabkeeper_store::SNAPSHOT_CHUNK_BYTES);
    drop(state);
    let report = ImportReport {
        snapshot: snapshot_path,
        snapshot_zxid,
        incomplete_snapshots: incomplete,
        logs,
        torn,
        last_zxid,
        epoch,
        nodes,
        sessions,
        stats,
    };
    Ok((chunks, report))
}

#[cfg(test)]
mod tests;
