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
mod runs;
mod snapshots;
#[cfg(test)]
mod tear;
mod upgrade;
mod usage;

#[cfg(test)]
mod replay_props;

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
/// Snapshot chunks read ahead of their decoding at recovery (64 KiB each).
const DECODE_AHEAD: usize = 16;
/// How long open waits for a just-dropped handle to release the file lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
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
/// sled's default segment size, which every store before format 4 has.
const SLED_DEFAULT_SEGMENT_BYTES: usize = 512 << 10;

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

    /// Checks the format marker, and that a store known to exist (its
    /// sidecar file says so) still has its contents: sled 0.34 treats an
    /// unreadable log as the end of the log, so a destroyed database would
    /// otherwise open as an empty one. Upgrades a store of an older format.
    /// Returns whether the store's snapshot database must already exist.
    fn check_format(&self, has_sidecar: bool) -> Result<bool, StorageError> {
        let sidecar = self.path.join(SIDECAR);
        let mut sidecar_current = false;
        if has_sidecar {
            let found = std::fs::read(&sidecar).map_err(fs_io("open: reading the marker file"))?;
            if ![FORMAT, FORMAT_V1, FORMAT_V2, FORMAT_V3].contains(&found.as_slice()) {
                return Err(StorageError::NotAStore {
                    path: self.path.display().to_string(),
                    reason: format!(
                        "unknown marker file content {:?}: this build writes {:?} and upgrades formats 1 to 3",
                        String::from_utf8_lossy(&found),
                        String::from_utf8_lossy(FORMAT)
                    ),
                });
            }
            sidecar_current = found == FORMAT;
        }
        let snapshots_exist = match self.meta.get(FORMAT_KEY).map_err(io("open: reading the format"))? {
            Some(found) if found.as_ref() == FORMAT => true,
            Some(found) if found.as_ref() == FORMAT_V3 => {
                // As below: the snapshots move before the store says format 4.
                if self.path.join(SNAPSHOT_DIR).join("conf").is_file() {
                    self.split_one_database()?;
                }
                self.meta.insert(FORMAT_KEY, FORMAT).map_err(io("open: upgrading the format"))?;
                self.flush_durably("open: flushing the format")?;
                tracing::info!(path = %self.path.display(), "storage upgraded to format 4 (a database per snapshot)");
                true
            }
            Some(found) if found.as_ref() == FORMAT_V1 || found.as_ref() == FORMAT_V2 => {
                // Snapshots move first; then the store is marked as the new
                // format before anything else is written in it, so an older
                // build refuses it instead of misreading runs or missing
                // snapshots.
                self.move_snapshots_out()?;
                self.meta.insert(FORMAT_KEY, FORMAT).map_err(io("open: upgrading the format"))?;
                self.flush_durably("open: flushing the format")?;
                tracing::info!(path = %self.path.display(), "storage upgraded to format 4 (a database per snapshot)");
                false
            }
            Some(found) => {
                return Err(StorageError::NotAStore {
                    path: self.path.display().to_string(),
                    reason: format!(
                        "unknown format marker {:?}: this build writes {:?} and upgrades formats 1 to 3",
                        String::from_utf8_lossy(&found),
                        String::from_utf8_lossy(FORMAT)
                    ),
                })
            }
            None if has_sidecar => {
                return Err(StorageError::Damaged {
                    during: "open",
                    reason: "the database has lost its contents (format key missing, marker file present)".into(),
                })
            }
            None => {
                let ours = [LOG_TREE, META_TREE, LARGE_RUN_TREE, CHUNK_TREE, INDEX_TREE];
                let foreign = self.db.tree_names().into_iter().find(|name| {
                    name.as_ref() != DEFAULT_TREE && !ours.iter().any(|ours| name.as_ref() == ours.as_bytes())
                });
                if let Some(name) = foreign {
                    return Err(StorageError::NotAStore {
                        path: self.path.display().to_string(),
                        reason: format!("it holds a foreign tree {:?}", String::from_utf8_lossy(&name)),
                    });
                }
                if !self.db.is_empty() {
                    return Err(StorageError::NotAStore {
                        path: self.path.display().to_string(),
                        reason: "it holds data in sled's default tree".into(),
                    });
                }
                let holds_data = [&self.log, &self.meta].iter().any(|t| !t.is_empty())
                    || [CHUNK_TREE, INDEX_TREE]
                        .iter()
                        .any(|name| self.holds_tree(name) && self.db.open_tree(name).is_ok_and(|t| !t.is_empty()));
                if holds_data {
                    return Err(StorageError::CorruptMeta {
                        key: FORMAT_KEY,
                        reason: "missing, yet the store holds data".into(),
                    });
                }
                self.meta.insert(FORMAT_KEY, FORMAT).map_err(io("open: writing the format"))?;
                self.flush_durably("open: flushing the format")?;
                false
            }
        };
        if !sidecar_current {
            // Written only once the format key is durable, so a sidecar
            // always means "this database held a store".
            durable::write_durably(&sidecar, FORMAT).map_err(fs_io("open: writing the marker file"))?;
        }
        Ok(snapshots_exist)
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

impl Source for SledStorage {
    fn epochs(&self) -> Result<(Epoch, Epoch), StorageError> {
        Ok((self.read_epoch(ACCEPTED_EPOCH)?, self.read_epoch(CURRENT_EPOCH)?))
    }

    fn snapshot_zxids(&self) -> Result<Vec<Zxid>, StorageError> {
        Ok(self.snapshot_zxid_list())
    }

    /// Reads chunks out of sled on this thread while another decodes them:
    /// at 1 M znodes each takes ~0.3-0.45 s, most of a restart, and
    /// overlapped a restart waits for the longer one only.
    fn load_snapshot(&self, zxid: Zxid) -> Result<TreeState, StorageError> {
        let corrupt = |source| StorageError::CorruptSnapshot { zxid, source };
        std::thread::scope(|scope| {
            let (chunks, decoded) = std::sync::mpsc::sync_channel::<IVec>(DECODE_AHEAD);
            let spawned =
                std::thread::Builder::new().name("snapshot-decode".into()).spawn_scoped(scope, move || decode(decoded));
            let Ok(decoder) = spawned else {
                // No thread to spare: decode here, one chunk after the other.
                let mut reader = Reader::new();
                self.read_snapshot(zxid, &mut |chunk| reader.feed(&chunk).map_err(corrupt))?;
                return reader.finish().map_err(corrupt);
            };
            let read = self.read_snapshot(zxid, &mut |chunk| {
                chunks.send(chunk).map_err(|_| StorageError::Invalid("the snapshot's decoder stopped".into()))
            });
            drop(chunks);
            let decoded = decoder.join().map_err(|payload| StorageError::Damaged {
                during: "decoding a snapshot",
                reason: panic_reason(payload.as_ref()),
            })?;
            match (read, decoded) {
                // A chunk the decoder refused is the finding, whatever the
                // reading met after it: recovery may then fall back on an
                // older snapshot, as it may for any snapshot fault.
                (_, Err(Decoded::BadChunk(e))) => Err(corrupt(e)),
                (Err(e), _) => Err(e),
                (Ok(()), Ok(state)) => Ok(state),
                (Ok(()), Err(Decoded::BadEnd(e))) => Err(corrupt(e)),
            }
        })
    }

    fn log_after(&self, zxid: Zxid) -> Result<Vec<Entry>, StorageError> {
        match zxid.0.checked_add(1) {
            Some(next) => {
                let mut out = Vec::new();
                self.scan_runs(Scan::From(Zxid(next)), &mut |entry| {
                    out.push(entry);
                    true
                })?;
                Ok(out)
            }
            None => Ok(Vec::new()),
        }
    }
}

/// Where decoding a snapshot failed.
enum Decoded {
    /// At a chunk: the decoder stopped there, and so did the reading.
    BadChunk(SnapshotError),
    /// At the end: the chunks were read whole but do not finish a snapshot.
    BadEnd(SnapshotError),
}

/// Decodes snapshot chunks as they arrive, until the sender hangs up.
fn decode(chunks: std::sync::mpsc::Receiver<IVec>) -> Result<TreeState, Decoded> {
    let mut reader = Reader::new();
    for chunk in chunks {
        // Returning drops the receiver, which stops the reading.
        reader.feed(&chunk).map_err(Decoded::BadChunk)?;
    }
    reader.finish().map_err(Decoded::BadEnd)
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

/// Runs `f`, turning a panic inside sled into an error.
///
/// sled 0.34 asserts on some damaged on-disk structures instead of returning
/// an error; a damaged directory must be reported, not crash the process.
/// The failed handle is dropped with the closure and never used again.
fn guarded<T>(during: &'static str, f: impl FnOnce() -> Result<T, StorageError>) -> Result<T, StorageError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(StorageError::Damaged { during, reason: panic_reason(payload.as_ref()) }),
    }
}

/// What a caught panic said.
fn panic_reason(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Rounds of [`reclaim_deferred_frees`]: each frees up to eight of the
/// collector's bags (~60 frees each), so this covers ~2 M frees, more than
/// a purge of 100 000 log entries and two 1 M-znode snapshots leaves (the
/// whole drain measured at most 14 ms).
const RECLAIM_ROUNDS: usize = 4096;

/// Runs now the frees sled deferred while removing data in bulk.
///
/// sled frees what a write replaced through crossbeam-epoch, whose collector
/// frees a few bags of garbage every 128 pins. A purge removes far more
/// than that, and the rest waited for later sled calls: after loading 1 M
/// znodes, the member that purged last held ~43 B per znode of garbage
/// (322 B of heap per znode against 279 B) until the next writes arrived,
/// which an idle ensemble may not send for a long time. Each round here
/// moves this thread's deferred frees to the collector and collects; it is
/// called off the write path: after a purge (on the snapshot thread), and
/// when the storage worker has been idle for a second (what the last writes
/// replaced; a snapshot installed by a sync). With nothing to free it takes
/// ~85 µs.
/// `crossbeam-epoch` resolves to the very crate sled uses (one 0.9 in the build).
fn reclaim_deferred_frees() {
    for _ in 0..RECLAIM_ROUNDS {
        crossbeam_epoch::pin().flush();
    }
}

/// Opens sled, waiting a little while its file lock is still held.
///
/// sled 0.34 releases a dropped database's lock only when its background
/// I/O threads let go of the file, shortly after the drop; a restart inside
/// one process (tests, the simulation) would otherwise fail at once. A lock
/// held by a live owner still fails, after [`LOCK_WAIT`].
///
/// An open that failed after sled took the lock (it takes it before reading
/// anything) is tried once more without the checkpoints sled left
/// unfinished, if there were any. Only then: a live owner, such as a
/// handle of this process still closing, may be writing one.
pub(crate) fn open_retrying(config: &sled::Config) -> Result<sled::Db, StorageError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut cleaned = false;
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if std::time::Instant::now() >= deadline {
                    return Err(StorageError::Io { during: "open", source: e.into() });
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(source) => {
                let removed = if cleaned {
                    0
                } else {
                    remove_torn_page_table_checkpoints(&config.get_path())
                        .map_err(fs_io("open: removing a torn checkpoint of sled's page table"))?
                };
                if removed == 0 {
                    return Err(StorageError::Io { during: "open", source: source.into() });
                }
                cleaned = true;
            }
        }
    }
}

/// Removes the `snap.*.generating` files in a sled database's directory.
///
/// sled 0.34 checkpoints its page table into `snap.<lsn>.generating`, then
/// renames it `snap.<lsn>`; it writes one at every close (the snapshot
/// database closes after each use). Killed before the rename, it leaves the
/// `.generating` file, and the next open takes it as the newest checkpoint
/// (the names sort after the finished one's) and fails: an empty or partial
/// one as `Corruption`. A checkpoint is only where recovery starts reading
/// the data file; sled goes on from the previous finished one (or from the
/// start) without it, so an unfinished one is dropped, never used. Returns
/// how many it removed.
fn remove_torn_page_table_checkpoints(dir: &Path) -> std::io::Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // A database not created yet has nothing to clean.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            tracing::warn!(file = %entry.path().display(), "removing an unfinished checkpoint sled left when it was stopped");
            std::fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The segment size sled recorded when it created the database in `dir`
/// (its `conf` file: text lines, then a checksum), None when there is none.
/// sled refuses to open a database with any other. A `conf` that does not
/// say, or is damaged, reads as sled's default, which sled then checks.
pub(crate) fn stored_segment_size(dir: &Path) -> Option<usize> {
    let conf = std::fs::read(dir.join("conf")).ok()?;
    let said = String::from_utf8_lossy(&conf)
        .lines()
        .find_map(|line| line.strip_prefix("segment_size: ").and_then(|n| n.trim().parse().ok()));
    Some(said.unwrap_or(SLED_DEFAULT_SEGMENT_BYTES))
}

/// A sled scan that checks keys strictly increase: sled 0.34 can revisit
/// the same keys forever when its tree pages are damaged.
struct Ordered<I> {
    inner: I,
    tree: &'static str,
    during: &'static str,
    prev: Option<IVec>,
    failed: bool,
}

fn ordered<I>(tree: &'static str, during: &'static str, inner: I) -> Ordered<I> {
    Ordered { inner, tree, during, prev: None, failed: false }
}

impl<I: Iterator<Item = sled::Result<(IVec, IVec)>>> Iterator for Ordered<I> {
    type Item = Result<(IVec, IVec), StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = match self.inner.next()? {
            Ok(item) => item,
            Err(source) => {
                self.failed = true;
                return Some(Err(StorageError::Io { during: self.during, source: source.into() }));
            }
        };
        if self.prev.as_ref().is_some_and(|prev| *prev >= item.0) {
            self.failed = true;
            return Some(Err(StorageError::CorruptKey {
                tree: self.tree,
                key: hex(&item.0),
                reason: "keys out of order: the tree's pages are damaged".into(),
            }));
        }
        self.prev = Some(item.0.clone());
        Some(Ok(item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zabkeeper_core::ids::SessionId;
    use zabkeeper_core::txn::{Txn, TxnBody};

    fn entry(counter: u32) -> Entry {
        let txn = Txn {
            session: SessionId(1),
            cxid: counter as i32,
            time_ms: 0,
            body: TxnBody::Error(zabkeeper_core::error::ErrorCode::Ok),
        };
        Entry { zxid: Zxid::new(1, counter), txn: Arc::new(txn) }
    }

    fn zxids(step: &Step<'_>) -> Vec<Zxid> {
        match step {
            Step::Append(entries) => entries.iter().map(|e| e.zxid).collect(),
            Step::Other(_) => Vec::new(),
        }
    }

    #[test]
    fn a_corrupt_chunk_early_in_a_long_snapshot_is_reported_as_what_the_decoder_found() {
        // The decoder runs beside the reader and stops it at the first bad
        // chunk: the error must be the snapshot's fault (so recovery may
        // fall back on an older one), not the reader's being stopped.
        use zabkeeper_core::tree::snapshot::{self, SnapshotError};
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SledStorage::open(dir.path().join("store")).expect("open a fresh store");
        let mut tree = zabkeeper_core::tree::DataTree::new();
        for i in 1..=400u32 {
            let body = TxnBody::Create {
                path: format!("/node-{i:06}"),
                data: zabkeeper_core::data::Data::from(Bytes::from(vec![7u8; 100])),
                acl: zabkeeper_core::acl::Acl::open_unsafe(),
                ephemeral_owner: 0,
                parent_cversion: i as i32,
            };
            tree.apply(Zxid::new(1, i), &Txn { session: SessionId(1), cxid: i as i32, time_ms: 0, body });
        }
        let zxid = Zxid::new(1, 400);
        let mut chunks = snapshot::Chunks::new(tree.state(), 512);
        let meta = store.save_snapshot_from(zxid, &mut chunks).expect("save the snapshot");
        assert!(meta.chunks as usize > 2 * DECODE_AHEAD, "more chunks than are read ahead: {}", meta.chunks);
        {
            let db = open_retrying(
                &sled::Config::new().path(dir.path().join("store").join(SNAPSHOT_DIR).join(snapshot_dir_name(zxid))),
            )
            .expect("open the snapshot's database");
            let chunk = db.open_tree(chunk_tree(1)).expect("chunk 1's tree");
            let mut bytes = chunk.get(CHUNK_KEY).expect("read").expect("chunk 1 is there").to_vec();
            // A chunk ends with a whole record: its last byte is one the
            // record's checksum covers, so the decoder fails right there.
            let last = bytes.len() - 1;
            bytes[last] ^= 0x5a;
            chunk.insert(CHUNK_KEY, bytes).expect("damage chunk 1");
            db.flush().expect("flush");
        }
        match store.load_snapshot(zxid) {
            Err(e @ StorageError::CorruptSnapshot { source: SnapshotError::Corrupt { .. }, .. }) => {
                assert!(e.is_snapshot_fault())
            }
            other => panic!("expected the decoder's finding, got {:?}", other.map(|s| s.node_count())),
        }
    }

    #[test]
    fn an_open_refused_by_a_live_owner_leaves_the_checkpoint_it_may_be_writing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = sled::Config::new().path(dir.path());
        let owner = open_retrying(&config).expect("the live owner");
        // The owner, closing, could be writing this one right now.
        let generating = dir.path().join("snap.00000000FFFFFFFF.generating");
        std::fs::write(&generating, b"").expect("a checkpoint being written");
        assert!(open_retrying(&config).is_err(), "the owner holds the lock");
        assert!(generating.exists(), "a live owner's checkpoint is not removed");
        drop(owner);
    }

    #[test]
    fn a_checkpoint_sled_did_not_finish_does_not_stop_the_store_from_opening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SledStorage::open(dir.path()).expect("create");
        store.apply(&[StorageOp::Append(vec![entry(1), entry(2)])]).expect("append");
        store.flush().expect("flush");
        let (chunks, _) =
            zabkeeper_core::tree::snapshot::to_chunks(&zabkeeper_core::tree::DataTree::new().snapshot(), 1024);
        store.save_snapshot(Zxid::new(1, 2), &chunks).expect("snapshot");
        drop(store);
        // What a kill -9 leaves while sled writes a checkpoint, in both databases.
        let snapshot_db = dir.path().join(SNAPSHOT_DIR).join(snapshot_dir_name(Zxid::new(1, 2)));
        for db in [dir.path().to_path_buf(), snapshot_db.clone()] {
            std::fs::write(db.join("snap.00000000FFFFFFFF.generating"), b"").expect("a torn checkpoint");
        }
        let store = SledStorage::open(dir.path()).expect("opens past the torn checkpoints");
        assert_eq!(store.recover().expect("recovers").last_zxid(), Zxid::new(1, 2));
        let snapshots: Vec<Zxid> = store.snapshots().expect("snapshots listed").iter().map(|m| m.zxid).collect();
        assert_eq!(snapshots, vec![Zxid::new(1, 2)]);
        store.read_chunk(Zxid::new(1, 2), 0).expect("the snapshot database opens and reads");
        assert!(!dir.path().join("snap.00000000FFFFFFFF.generating").exists());
        assert!(!snapshot_db.join("snap.00000000FFFFFFFF.generating").exists());
    }

    #[test]
    fn a_reclaim_runs_the_frees_deferred_before_it() {
        // What sled defers goes to the same collector as this.
        let freed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let flag = std::sync::Arc::clone(&freed);
            let guard = crossbeam_epoch::pin();
            guard.defer(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        }
        // Other tests' threads may hold the epoch back for a moment.
        for _ in 0..100 {
            reclaim_deferred_frees();
            if freed.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("a deferred free still waits after 100 reclaims");
    }

    #[test]
    fn adjacent_appends_merge_and_other_operations_keep_their_place() {
        let ops = vec![
            StorageOp::Append(vec![entry(1)]),
            StorageOp::Append(vec![entry(2), entry(3)]),
            StorageOp::SetCurrentEpoch(1),
            StorageOp::Append(vec![entry(4)]),
            StorageOp::Append(vec![entry(5)]),
        ];
        let merged = steps(&ops);
        assert_eq!(merged.len(), 3);
        assert_eq!(zxids(&merged[0]), (1..=3).map(|c| Zxid::new(1, c)).collect::<Vec<_>>());
        assert!(matches!(merged[1], Step::Other(StorageOp::SetCurrentEpoch(1))));
        assert_eq!(zxids(&merged[2]), (4..=5).map(|c| Zxid::new(1, c)).collect::<Vec<_>>());
    }
}
