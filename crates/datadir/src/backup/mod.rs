//! Point-in-time backups: a directory that `zkctl admin backup` keeps, of
//! snapshots and every committed transaction after the first of them, and
//! `zkctl restore`, which makes a data directory holding the state after
//! any transaction it holds (see `docs/src/backup.md`).
//!
//! The directory holds a manifest (`backup.json`, naming the format
//! version), snapshot files `snapshot-<zxid>.zkb` and transaction files
//! `txns-<zxid>.zkb` (the transactions after that zxid), zxids as 16 hex
//! digits so that names sort as zxids do. The files' bytes are [`format`](mod@format)'s;
//! [`writer`] keeps the directory, [`restore`] reads it, [`time`] parses
//! the times a restore may target.

pub mod format;
pub mod restore;
pub mod time;
pub mod writer;

use crate::offline::OfflineError;
use format::{FormatError, Frames, Kind, Next, Record};
use std::path::{Path, PathBuf};
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::tree::snapshot::{Reader, SnapshotError};
use zabkeeper_core::tree::TreeState;
use zabkeeper_core::txn::codec::CodecError;
use zabkeeper_core::txn::{codec, Entry};

/// The manifest's file name.
pub const MANIFEST: &str = "backup.json";
/// The file a writing backup holds locked (see [`lock_for_writing`]).
pub const LOCK: &str = "backup.lock";

/// Takes the backup directory `dir` (made if absent) for one writer, for as
/// long as the returned file stays open: a second `zkctl admin backup` on
/// the same directory would interleave its appends with the first's and
/// prune the first's files.
pub fn lock_for_writing(dir: &Path) -> Result<std::fs::File, BackupError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let path = dir.join(LOCK);
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io_err(&path))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(BackupError::Busy { dir: dir.to_path_buf() }),
        Err(e) => Err(io_err(&path)(e.into())),
    }
}

/// Holds `dir` shared for as long as the returned file stays open: a reader
/// of a backup that is being written (`zkctl restore`, `--list`, `--log`)
/// takes it before listing the files, and the writer prunes only when it
/// can hold the directory alone ([`hold_for_pruning`]), so no file a reader
/// listed goes away under it. None where the filesystem has no `flock`: the
/// reader goes on unheld, as it did before there was a hold.
fn hold_for_reading(dir: &Path) -> Result<Option<std::fs::File>, BackupError> {
    let file = std::fs::File::open(dir).map_err(io_err(dir))?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared) {
            Ok(()) => return Ok(Some(file)),
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Ok(None),
        }
    }
}

/// Holds `dir` alone, if no reader holds it: None while one does (the
/// writer then prunes at a later roll). Where the filesystem has no `flock`,
/// readers hold nothing, and pruning goes ahead.
pub(super) fn hold_for_pruning(dir: &Path) -> Result<Option<std::fs::File>, BackupError> {
    let file = std::fs::File::open(dir).map_err(io_err(dir))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(_) => Ok(Some(file)),
    }
}

/// What went wrong keeping or reading a backup.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// A file is unreadable, torn, corrupt or of another format version.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The directory is not a backup.
    #[error("{dir} is not a backup directory: {reason}")]
    NotBackup {
        /// The directory.
        dir: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The backup holds no snapshot to start from.
    #[error("{dir} holds no snapshot yet: nothing to restore")]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
    /// A snapshot file's chunks do not form a tree.
    #[error("{path}: the snapshot in the frame at offset {offset} is damaged: {source}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// The frame where it went wrong (the file's length when it ended early).
        offset: u64,
        /// What is wrong.
        source: SnapshotError,
    },
    /// A transaction record whose transaction does not decode.
    #[error("{path}: offset {offset}: transaction {zxid} does not decode: {source}")]
    Txn {
        /// The file.
        path: PathBuf,
        /// Where its frame starts.
        offset: u64,
        /// Its zxid.
        zxid: Zxid,
        /// What is wrong.
        source: CodecError,
    },
    /// Transactions are missing between two the backup holds.
    #[error(
        "{path}: offset {offset}: transaction {zxid} follows {prev}, but the transaction before it in the backup \
         is {last}: the transactions after {last} up to {prev} are missing (a backup that lost the log it needed \
         starts over from a fresh snapshot)"
    )]
    Gap {
        /// The file.
        path: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// The record's zxid.
        zxid: Zxid,
        /// The zxid it says it follows.
        prev: Zxid,
        /// The transaction before it in the backup.
        last: Zxid,
    },
    /// A transaction arrived that does not follow the last one held.
    #[error("transaction {zxid} does not follow {last}, the last one the backup holds (the next in its epoch, or the first, counter 1, of a later one)")]
    OutOfOrder {
        /// The zxid that arrived.
        zxid: Zxid,
        /// The last one held.
        last: Zxid,
    },
    /// The restore target is older than everything kept.
    #[error("{target} is before the oldest snapshot the backup keeps ({oldest}): nothing older can be restored")]
    BeforeOldest {
        /// The target.
        target: Zxid,
        /// The oldest snapshot.
        oldest: Zxid,
    },
    /// The restore target is newer than everything held.
    #[error("{target} is after the newest transaction the backup holds ({newest}){torn}")]
    AfterNewest {
        /// The target.
        target: Zxid,
        /// The newest transaction held.
        newest: Zxid,
        /// A note on a torn tail, when the newest file has one.
        torn: String,
    },
    /// The restore target is not the zxid of a transaction in the backup.
    #[error("no transaction {target} in the backup: the one before it is {before} and the next {after}")]
    NotATransaction {
        /// The target.
        target: Zxid,
        /// The transaction held before it.
        before: Zxid,
        /// The transaction held after it.
        after: Zxid,
    },
    /// The restore time is older than everything kept.
    #[error(
        "{time_ms} ms is before the oldest snapshot the backup keeps ({oldest}, whose last transaction was at \
         {oldest_time_ms} ms)"
    )]
    TimeBeforeOldest {
        /// The target time.
        time_ms: i64,
        /// The oldest snapshot.
        oldest: Zxid,
        /// Its time.
        oldest_time_ms: i64,
    },
    /// The transactions from the chosen snapshot end before the target.
    #[error("the transactions after snapshot {snapshot} end at {last}, before {target}")]
    Unreachable {
        /// The snapshot replayed from.
        snapshot: Zxid,
        /// The last transaction reached.
        last: Zxid,
        /// The target.
        target: Zxid,
    },
    /// Writing the data directory failed (or it is not empty).
    #[error(transparent)]
    Offline(#[from] OfflineError),
    /// Another process keeps this backup directory.
    #[error("{dir} is kept by another backup process (it holds {LOCK} locked)")]
    Busy {
        /// The directory.
        dir: PathBuf,
    },
    /// The config file given for the restored ensemble cannot be used.
    #[error("--config {path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Maps an I/O error on `path` to the backup's error.
pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Format(FormatError::Io { path: path.to_path_buf(), source })
}

/// A snapshot file of the backup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    /// The file.
    pub path: PathBuf,
    /// The zxid of the last transaction in it.
    pub zxid: Zxid,
    /// When that transaction was applied (ms since the Unix epoch).
    pub time_ms: i64,
}

/// A transaction file of the backup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnFile {
    /// The file.
    pub path: PathBuf,
    /// The zxid its first transaction follows.
    pub follows: Zxid,
    /// When it was started.
    pub started_ms: i64,
}

/// The name of the snapshot file at `zxid`.
pub fn snapshot_name(zxid: Zxid) -> String {
    format!("snapshot-{:016x}.zkb", zxid.0)
}

/// The name of the transaction file whose first transaction follows `zxid`.
pub fn txns_name(zxid: Zxid) -> String {
    format!("txns-{:016x}.zkb", zxid.0)
}

fn zxid_of(name: &str, prefix: &str) -> Option<Zxid> {
    let hex = name.strip_prefix(prefix)?.strip_suffix(".zkb")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok().map(Zxid)).flatten()
}

/// The manifest's text.
fn manifest_text() -> String {
    let manifest = serde_json::json!({
        "format": "zabkeeper-backup",
        "version": format::FORMAT_VERSION,
        "written_by": concat!("zabkeeper ", env!("CARGO_PKG_VERSION")),
    });
    format!("{manifest:#}\n")
}

/// Checks the manifest of `dir`: a backup of the version this build reads.
fn check_manifest(dir: &Path) -> Result<(), BackupError> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BackupError::NotBackup {
                dir: dir.to_path_buf(),
                reason: format!("no {MANIFEST} (make one with zkctl admin backup --to DIR)"),
            })
        }
        Err(source) => return Err(io_err(&path)(source)),
    };
    let not = |reason: String| BackupError::NotBackup { dir: dir.to_path_buf(), reason };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| not(format!("{MANIFEST}: {e}")))?;
    if value["format"] != "zabkeeper-backup" {
        return Err(not(format!("{MANIFEST} does not name the format zabkeeper-backup")));
    }
    let found = value["version"].as_u64().ok_or_else(|| not(format!("{MANIFEST} names no version")))?;
    if found != u64::from(format::FORMAT_VERSION) {
        return Err(FormatError::Version {
            path,
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: format::FORMAT_VERSION,
        }
        .into());
    }
    Ok(())
}

/// The files of a backup directory, each header checked.
#[derive(Clone, Debug)]
pub struct Catalog {
    /// The directory.
    pub dir: PathBuf,
    /// Its snapshots, oldest first.
    pub snapshots: Vec<SnapshotFile>,
    /// Its transaction files, oldest first.
    pub txn_files: Vec<TxnFile>,
    /// A reader's shared hold on the directory (see [`hold_for_reading`]),
    /// kept while this catalog or a clone of it lives; the writer's has none.
    _hold: Option<std::sync::Arc<std::fs::File>>,
}

impl Catalog {
    /// Reads the backup in `dir`: its manifest and every file's header (a
    /// file of another format version is refused here, before anything is
    /// used). The files listed stay while the catalog lives, even when the
    /// backup is being written: its writer prunes none meanwhile.
    pub fn open(dir: &Path) -> Result<Catalog, BackupError> {
        Catalog::read(dir, true)
    }

    fn read(dir: &Path, held: bool) -> Result<Catalog, BackupError> {
        if !dir.is_dir() {
            return Err(BackupError::NotBackup { dir: dir.to_path_buf(), reason: "no such directory".into() });
        }
        check_manifest(dir)?;
        let hold = if held { hold_for_reading(dir)?.map(std::sync::Arc::new) } else { None };
        let mut catalog = Catalog { dir: dir.to_path_buf(), snapshots: Vec::new(), txn_files: Vec::new(), _hold: hold };
        for item in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let item = item.map_err(io_err(dir))?;
            let name = item.file_name().to_string_lossy().into_owned();
            let path = item.path();
            if let Some(zxid) = zxid_of(&name, "snapshot-") {
                let header = Frames::open(&path, Kind::Snapshot)?.header;
                named_as(&path, zxid, header.zxid)?;
                catalog.snapshots.push(SnapshotFile { path, zxid, time_ms: header.time_ms });
            } else if let Some(zxid) = zxid_of(&name, "txns-") {
                let header = Frames::open(&path, Kind::Txns)?.header;
                named_as(&path, zxid, header.zxid)?;
                catalog.txn_files.push(TxnFile { path, follows: zxid, started_ms: header.time_ms });
            }
        }
        catalog.snapshots.sort_by_key(|s| s.zxid);
        catalog.txn_files.sort_by_key(|t| t.follows);
        Ok(catalog)
    }

    /// Makes `dir` a backup (absent or empty: writes the manifest) or opens
    /// it, for its writer: unlike [`Catalog::open`], it holds nothing, so its
    /// own pruning is not held back.
    pub fn create_or_open(dir: &Path) -> Result<Catalog, BackupError> {
        let empty = match std::fs::read_dir(dir) {
            // The writer's lock may be there already (see `lock_for_writing`).
            Ok(mut items) => items.all(|item| item.is_ok_and(|i| i.file_name() == LOCK)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(source) => return Err(io_err(dir)(source)),
        };
        if empty {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
            let text = manifest_text();
            format::write_whole(&dir.join(MANIFEST), |w| w.write_all(text.as_bytes()))?;
        }
        Catalog::read(dir, false)
    }

    /// The newest snapshot at or before `zxid`.
    pub fn snapshot_at_or_before(&self, zxid: Zxid) -> Option<&SnapshotFile> {
        self.snapshots.iter().rev().find(|s| s.zxid <= zxid)
    }

    /// The newest transaction held (or the newest snapshot's zxid, when
    /// later), and the torn tail of the newest transaction file, if any.
    pub fn newest(&self) -> Result<(Zxid, Option<FormatError>), BackupError> {
        let mut newest = self.snapshots.last().map_or(Zxid::ZERO, |s| s.zxid);
        let Some(file) = self.txn_files.last() else { return Ok((newest, None)) };
        let mut frames = Frames::open(&file.path, Kind::Txns)?;
        newest = newest.max(file.follows);
        loop {
            match frames.next_record() {
                Ok(Some(record)) => newest = newest.max(record.zxid),
                Ok(None) => return Ok((newest, None)),
                Err(torn @ FormatError::Torn { .. }) => return Ok((newest, Some(torn))),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Walks the transactions after `snapshot`, in order, checking that each
    /// follows the one before (from the snapshot's zxid on), and shows each
    /// with its file to `visit` until it returns false. Returns the zxid of
    /// the last transaction shown (the snapshot's when none).
    pub fn replay(
        &self,
        snapshot: Zxid,
        visit: &mut dyn FnMut(&Path, &Record, Entry) -> Result<bool, BackupError>,
    ) -> Result<Zxid, BackupError> {
        let Some(start) = self.txn_files.iter().rposition(|f| f.follows <= snapshot) else {
            // No file holds what follows the snapshot: if any later one
            // exists, its first record shows the gap.
            return self.replay_files(&self.txn_files, snapshot, visit);
        };
        self.replay_files(&self.txn_files[start..], snapshot, visit)
    }

    fn replay_files(
        &self,
        files: &[TxnFile],
        snapshot: Zxid,
        visit: &mut dyn FnMut(&Path, &Record, Entry) -> Result<bool, BackupError>,
    ) -> Result<Zxid, BackupError> {
        let mut last = snapshot;
        for file in files {
            let mut frames = Frames::open(&file.path, Kind::Txns)?;
            while let Some(record) = frames.next_record()? {
                if record.zxid <= snapshot {
                    continue;
                }
                if record.prev != last {
                    return Err(BackupError::Gap {
                        path: file.path.clone(),
                        offset: record.offset,
                        zxid: record.zxid,
                        prev: record.prev,
                        last,
                    });
                }
                let entry = decode(&file.path, &record)?;
                if !visit(&file.path, &record, entry)? {
                    return Ok(record.zxid);
                }
                last = record.zxid;
            }
        }
        Ok(last)
    }
}

fn named_as(path: &Path, named: Zxid, header: Zxid) -> Result<(), BackupError> {
    if named == header {
        return Ok(());
    }
    Err(FormatError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        reason: format!("its name says {named}, its header {header}"),
    }
    .into())
}

/// The transaction in `record` (of the file `path`).
pub fn decode(path: &Path, record: &Record) -> Result<Entry, BackupError> {
    let txn = codec::decode(&record.txn).map_err(|source| BackupError::Txn {
        path: path.to_path_buf(),
        offset: record.offset,
        zxid: record.zxid,
        source,
    })?;
    Ok(Entry::new(record.zxid, txn))
}

/// The tree a backup snapshot file holds, checked whole and at its zxid.
pub fn read_snapshot(file: &SnapshotFile) -> Result<TreeState, BackupError> {
    let path = &file.path;
    let mut frames = Frames::open(path, Kind::Snapshot)?;
    let mut reader = Reader::new();
    let end = loop {
        match frames.next_frame()? {
            Next::Frame { offset, body } => {
                reader.feed(&body).map_err(|source| BackupError::Snapshot { path: path.clone(), offset, source })?
            }
            Next::End { len } => break len,
        }
    };
    let state = reader.finish().map_err(|source| BackupError::Snapshot { path: path.clone(), offset: end, source })?;
    if state.last_zxid() != file.zxid {
        return Err(FormatError::Corrupt {
            path: path.clone(),
            offset: format::HEADER_LEN as u64,
            reason: format!("the snapshot inside is at {}, the header says {}", state.last_zxid(), file.zxid),
        }
        .into());
    }
    Ok(state)
}

#[cfg(test)]
mod tests;
