//! The on-disk store, over sled 0.34.
//!
//! The store's own directory holds the log's sled database: `log` (a run of
//! entries, one per append, keyed by its first zxid as 8 big-endian bytes;
//! see `runs`) and `meta` (the two epochs as 4 big-endian bytes, a format
//! marker, and the note of an install under way). Its `snapshots` directory
//! holds one small sled database per snapshot (see `snapshots` for why, and
//! how an install spanning the log and a snapshot survives a crash): a tree
//! per chunk and a sealed completion marker (chunk count, bytes, nodes,
//! time). A snapshot counts only once its directory is renamed from
//! `<zxid>.new` to `<zxid>`, after all of it is durable; open removes a
//! write or a removal a crash cut short.
//!
//! Crash safety rests on two properties of sled 0.34: recovery restores a
//! prefix of the write history (it stops at the first torn record), and a
//! batch or multi-tree transaction is recovered whole or not at all. Every
//! operation below is therefore arranged so that each prefix of its writes
//! is a state recovery accepts.
//!
//! What the runtime should know about sled here: `flush` makes the
//! database's one write-ahead log, shared by its trees, durable (sled's own
//! flush writes it, and `durable` fsyncs what sled only wrote); batches and
//! transactions take a database-wide write lock (plain inserts do not); and
//! a dropped handle releases its file lock only shortly after the drop.
//!
//! This file is the layout and the [`Storage`] operations over it; which
//! store a directory holds is checked in `format_check`, what recovery reads
//! is `recovery_source`, and the ways around sled's own faults are in
//! `sled_quirks`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sled::transaction::{TransactionError, Transactional};
use sled::{Batch, IVec};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use zabkeeper_core::ids::{Epoch, Zxid};
use zabkeeper_core::storage::recovery::{self, Source};
use zabkeeper_core::storage::{PurgeReport, Recovered, Scan, SnapshotMeta, Storage, StorageError};
use zabkeeper_core::tree::snapshot::{Reader, SnapshotError};
use zabkeeper_core::tree::TreeState;
use zabkeeper_core::txn::{codec, Entry};
use zabkeeper_core::zab::StorageOp;

mod blob_watch;
#[cfg(test)]
mod bounded;
pub mod clock;
#[cfg(test)]
mod conformance;
mod durable;
mod format_check;
mod recovery_source;
mod runs;
mod sled_quirks;
mod snapshots;
#[cfg(test)]
mod tear;
mod upgrade;
mod usage;

#[cfg(test)]
mod replay_props;

use sled_quirks::{guarded, open_retrying, ordered, reclaim_deferred_frees, stored_segment_size};
pub use snapshots::snapshot_dir_name;
use snapshots::Snapshots;
pub(crate) use snapshots::SNAPSHOT_DIR;
#[cfg(test)]
pub(crate) use snapshots::{chunk_tree, encode_marker, CHUNK_KEY, INSTALLING, MARKER_KEY};
#[cfg(test)]
pub(crate) use upgrade::chunk_key;
pub use usage::{usage, DiskUsage};

/// Name of the log tree.
pub(crate) const LOG_TREE: &str = "log";
/// Name of the metadata tree.
pub(crate) const META_TREE: &str = "meta";
/// Name of the snapshot chunk tree (in the snapshot database; formats 1
/// and 2 kept it in the log's).
pub(crate) const CHUNK_TREE: &str = "snapshots";
/// Name of the snapshot completion-marker tree (as [`CHUNK_TREE`]).
pub(crate) const INDEX_TREE: &str = "snapshot_index";
/// Meta key of acceptedEpoch.
pub(crate) const ACCEPTED_EPOCH: &str = "accepted_epoch";
/// Meta key of currentEpoch.
pub(crate) const CURRENT_EPOCH: &str = "current_epoch";
/// Name of the tree that lists the log's large runs, by key: each is one
/// transaction that sled may keep in a blob file, so each must still be in
/// the log at open (see [`SledStorage::check_large_runs`]).
pub(crate) const LARGE_RUN_TREE: &str = "large_runs";
/// Meta key identifying the store's format.
const FORMAT_KEY: &str = "format";
/// The value of [`FORMAT_KEY`] (and of the sidecar file) this build writes and reads.
pub(crate) const FORMAT: &[u8] = b"zabkeeper-storage/4";
/// The third format (all snapshots in one database), which this build
/// upgrades in place by giving each snapshot a database of its own.
pub(crate) const FORMAT_V3: &[u8] = b"zabkeeper-storage/3";
/// The first format (one log key per entry), which this build reads and
/// upgrades in place: its log values read as runs of one.
const FORMAT_V1: &[u8] = b"zabkeeper-storage/1";
/// The second format (snapshots in the log's database), which this build
/// upgrades in place by moving them out.
pub(crate) const FORMAT_V2: &[u8] = b"zabkeeper-storage/2";
/// The name sled gives its default tree.
const DEFAULT_TREE: &[u8] = b"__sled__default";
/// A file beside sled's own, written once the store exists.
pub(crate) const SIDECAR: &str = "ZABKEEPER";
/// sled's page cache, of each database. The tree and the recent log live in
/// memory anyway, so the store needs little. 8 MiB against 64: ~130 B less RSS per znode at 1 M znodes, the
/// same write throughput (2 MiB saved nothing more).
const CACHE_BYTES: u64 = 8 << 20;
/// The segment size of a new log database. sled fixes it when it creates
/// the database; a store created with sled's default (512 KiB) keeps that.
/// Larger segments let larger leaf pages stay inline (see
/// [`runs::run_bytes`]): runs of up to ~26 KiB here against ~6 KiB.
const LOG_SEGMENT_BYTES: usize = 2 << 20;

/// How large a snapshot chunk is made. Each chunk is stored alone in a tree
/// of its snapshot's database, where sled 0.34 writes a value over about
/// 128 KiB (a quarter of its 512 KiB segment, less headers) once, as a blob
/// file of its own: 1 MiB chunks make a 185 MB snapshot ~180 files written
/// once each. (64 KiB chunks in one tree wrote every byte ~2.8 times, as
/// sled rewrote whole leaves of chunks.) A snapshot's database is closed
/// after each use, so what sled keeps of it in memory goes with it.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// A replica's durable state in a sled database. Cloning is cheap and clones
/// share the database, so a snapshot thread and the log writer can each hold one.
#[derive(Clone)]
pub struct SledStorage {
    db: sled::Db,
    /// Makes what `db` flushes durable.
    durable: Arc<durable::Durable>,
    log: sled::Tree,
    meta: sled::Tree,
    /// The large runs' keys (see [`LARGE_RUN_TREE`]).
    large_runs: sled::Tree,
    /// Large runs appended since the last flush: listed at the flush, after
    /// their blobs are synced, so a listed run's blob was durable once.
    large_pending: Arc<Mutex<Vec<Zxid>>>,
    snaps: Arc<Snapshots>,
    path: Arc<PathBuf>,
    /// Serializes snapshot writes and purges: a background save and a
    /// leader's install at the same zxid must not interleave their chunks.
    snapshot_lock: Arc<Mutex<()>>,
    /// The most transaction bytes one log run gathers (see [`runs::run_bytes`]).
    run_bytes: usize,
}

impl std::fmt::Debug for SledStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStorage").field("path", &self.path).finish_non_exhaustive()
    }
}

fn io(during: &'static str) -> impl FnOnce(sled::Error) -> StorageError {
    move |source| StorageError::Io { during, source: source.into() }
}

/// A filesystem error (outside sled) during `during`.
fn fs_io(during: &'static str) -> impl FnOnce(std::io::Error) -> StorageError {
    move |e| StorageError::Io { during, source: e.into() }
}

fn tx_err(during: &'static str) -> impl FnOnce(TransactionError<std::convert::Infallible>) -> StorageError {
    move |e| match e {
        TransactionError::Abort(never) => match never {},
        TransactionError::Storage(source) => StorageError::Io { during, source: source.into() },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The log key of a zxid.
pub(crate) fn log_key(zxid: Zxid) -> [u8; 8] {
    zxid.0.to_be_bytes()
}

fn zxid_of(tree: &'static str, key: &[u8]) -> Result<Zxid, StorageError> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| StorageError::CorruptKey {
        tree,
        key: hex(key),
        reason: format!("{} bytes, expected 8", key.len()),
    })?;
    Ok(Zxid(u64::from_be_bytes(bytes)))
}

fn after(zxid: Zxid) -> (Bound<[u8; 8]>, Bound<[u8; 8]>) {
    (Bound::Excluded(log_key(zxid)), Bound::Unbounded)
}

impl SledStorage {
    /// Opens (creating if needed) the store in directory `path`.
    ///
    /// Refuses a path that is a file, a non-empty directory without a sled
    /// database, or a sled database that is not a zabkeeper store or has lost
    /// its contents; removes the chunks of snapshot writes a crash interrupted.
    pub fn open(path: impl AsRef<Path>) -> Result<SledStorage, StorageError> {
        let path = path.as_ref();
        let not_a_store =
            |reason: &str| StorageError::NotAStore { path: path.display().to_string(), reason: reason.into() };
        let has_sidecar = path.join(SIDECAR).exists();
        if path.exists() {
            if !path.is_dir() {
                return Err(not_a_store("it is not a directory"));
            }
            let entries = std::fs::read_dir(path).map_err(fs_io("open: listing the directory"))?;
            for entry in entries {
                let entry = entry.map_err(fs_io("open: listing the directory"))?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                // A crash while sled creates its files leaves some of them: not foreign.
                // `.new` files: a marker file or synced mark a crash cut short (see `durable::write_durably`).
                let sleds = matches!(name.as_ref(), "conf" | "db" | "blobs" | SNAPSHOT_DIR)
                    || name.starts_with(SIDECAR)
                    || name.starts_with("snap.")
                    || name.starts_with(durable::SYNCED_MARK);
                if !sleds {
                    return Err(not_a_store(&format!("it holds {name:?}, which is not part of a sled database")));
                }
            }
            if has_sidecar && !(path.join("db").is_file() && path.join("conf").is_file()) {
                return Err(not_a_store("its sled database files are missing"));
            }
        }
        let unsynced = durable::refuse_torn_blobs(path)?;
        guarded("open", || {
            // Durability is the caller's: it flushes once per batch (group
            // commit), so sled's own periodic fsync would only add disk work.
            let segment_size = stored_segment_size(path).unwrap_or(LOG_SEGMENT_BYTES);
            let config = sled::Config::new()
                .path(path)
                .cache_capacity(CACHE_BYTES)
                .flush_every_ms(None)
                .segment_size(segment_size);
            let db = open_retrying(&config)?;
            durable::refuse_kept(&unsynced)?;
            let durable = durable::Durable::open(path).map_err(fs_io("open: syncing the database files"))?;
            let store = SledStorage {
                log: db.open_tree(LOG_TREE).map_err(io("open: log tree"))?,
                meta: db.open_tree(META_TREE).map_err(io("open: meta tree"))?,
                large_runs: db.open_tree(LARGE_RUN_TREE).map_err(io("open: large run tree"))?,
                large_pending: Arc::new(Mutex::new(Vec::new())),
                db,
                durable: Arc::new(durable),
                snaps: Arc::new(Snapshots::new(path)),
                path: Arc::new(path.to_path_buf()),
                snapshot_lock: Arc::new(Mutex::new(())),
                run_bytes: runs::run_bytes(segment_size),
            };
            let snapshots_exist = store.check_format(has_sidecar)?;
            store.open_snapshots(snapshots_exist)?;
            store.check_large_runs()?;
            Ok(store)
        })
    }

    /// Flushes the log's database and makes what it wrote durable: the
    /// blobs written since the last flush first, then the large runs they
    /// hold are listed, then sled's flush, the blobs other threads wrote
    /// meanwhile, and the data file's sync.
    fn flush_durably(&self, during: &'static str) -> Result<(), StorageError> {
        self.durable.before_flush().map_err(fs_io(during))?;
        let pending = std::mem::take(&mut *self.large_pending.lock().unwrap_or_else(PoisonError::into_inner));
        for zxid in pending {
            self.large_runs.insert(log_key(zxid), &[]).map_err(io(during))?;
        }
        self.db.flush().map_err(io(during))?;
        self.durable.after_flush().map_err(fs_io(during))
    }

    /// The directory of the store.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_epoch(&self, key: &'static str) -> Result<Epoch, StorageError> {
        let Some(value) = self.meta.get(key).map_err(io("reading an epoch"))? else {
            return Ok(0);
        };
        let bytes: [u8; 4] = value.as_ref().try_into().map_err(|_| StorageError::CorruptMeta {
            key,
            reason: format!("{} bytes ({}), expected 4", value.len(), hex(&value)),
        })?;
        Ok(Epoch::from_be_bytes(bytes))
    }

    fn append(&self, entries: &[&Entry]) -> Result<(), StorageError> {
        if entries.is_empty() {
            return Ok(());
        }
        let last = self.last_log()?.max(self.newest_snapshot());
        recovery::check_append(last, entries.iter().copied())?;
        self.append_run(entries)
    }

    fn apply_one(&self, op: &StorageOp) -> Result<(), StorageError> {
        match op {
            StorageOp::Append(entries) => self.append(&entries.iter().collect::<Vec<_>>()),
            StorageOp::TruncateAfter(zxid) => self.truncate_after(*zxid),
            StorageOp::SetAcceptedEpoch(epoch) => self.set_epoch(ACCEPTED_EPOCH, *epoch),
            StorageOp::SetCurrentEpoch(epoch) => self.set_epoch(CURRENT_EPOCH, *epoch),
            StorageOp::InstallSnapshot { zxid, chunks } => self.install_snapshot(*zxid, chunks).map(|_| ()),
        }
    }

    fn truncate_after(&self, zxid: Zxid) -> Result<(), StorageError> {
        let snapshot = self.newest_snapshot();
        if zxid < snapshot {
            return Err(StorageError::Invalid(format!(
                "truncating after {zxid:?} would cut below the snapshot at {snapshot:?}, which holds committed state"
            )));
        }
        self.truncate_runs_after(zxid)
    }

    fn set_epoch(&self, key: &'static str, epoch: Epoch) -> Result<(), StorageError> {
        self.meta.insert(key, &epoch.to_be_bytes()).map_err(io("writing an epoch"))?;
        Ok(())
    }
}

/// One write to sled: a run of adjacent appends, or another operation.
enum Step<'a> {
    Append(Vec<&'a Entry>),
    Other(&'a StorageOp),
}

/// `ops` as sled writes, adjacent appends merged into one batch. Each batch
/// costs far more than the entries in it: with one append per client write
/// (what the storage worker gathers for one group commit), a round of ~40
/// appends took ~3 ms and capped a replica near 12 k writes/s; merged, the
/// same load ran ~6x faster.
fn steps(ops: &[StorageOp]) -> Vec<Step<'_>> {
    let mut out: Vec<Step<'_>> = Vec::new();
    for op in ops {
        match (out.last_mut(), op) {
            (Some(Step::Append(run)), StorageOp::Append(more)) => run.extend(more),
            (_, StorageOp::Append(entries)) => out.push(Step::Append(entries.iter().collect())),
            (_, op) => out.push(Step::Other(op)),
        }
    }
    out
}

impl Storage for SledStorage {
    fn recover(&self) -> Result<Recovered, StorageError> {
        guarded("recovery", || recovery::recover(self))
    }

    fn apply(&self, ops: &[StorageOp]) -> Result<(), StorageError> {
        for step in steps(ops) {
            match step {
                Step::Append(entries) => self.append(&entries)?,
                Step::Other(op) => self.apply_one(op)?,
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StorageError> {
        self.flush_durably("flush")
    }

    fn save_snapshot_from(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError> {
        self.store_snapshot(zxid, chunks)
    }

    fn purge(&self, keep: usize) -> Result<PurgeReport, StorageError> {
        if keep == 0 {
            return Err(StorageError::Invalid("purge must keep at least one snapshot".into()));
        }
        let purged = self.purge_snapshots(keep);
        reclaim_deferred_frees();
        purged
    }

    fn scan_log(&self, scan: Scan, visit: &mut dyn FnMut(Entry) -> bool) -> Result<(), StorageError> {
        guarded("reading the log", || self.scan_runs(scan, visit))
    }

    fn snapshot_chunk(&self, zxid: Zxid, index: u32) -> Result<Option<Bytes>, StorageError> {
        self.read_chunk(zxid, index)
    }

    fn log_bounds(&self) -> Result<Option<(Zxid, Zxid)>, StorageError> {
        self.log_span()
    }

    fn snapshots(&self) -> Result<Vec<SnapshotMeta>, StorageError> {
        Ok(self.markers()?.into_iter().map(|(zxid, marker)| marker.meta(zxid)).collect())
    }

    fn idle(&self) {
        reclaim_deferred_frees();
    }
}

#[cfg(test)]
mod tests;
