//! Snapshots in the sled store: one small sled database per snapshot, in
//! the store's `snapshots` directory, removed whole when it is purged.
//!
//! ```text
//! snapshots/
//!   000000010002a1f0/        the snapshot at zxid 0x10002a1f0: a sled database
//!   000000010003b2c4.new/    a snapshot being written (removed at open)
//!   000000010001903a.gone/   a purged snapshot being removed (removed at open)
//!   000000010002a1f0.old/    a snapshot being replaced by one at the same zxid
//!                            (removed at open, or put back if its successor
//!                            never took its name)
//! ```
//!
//! Why one database each. sled 0.34 deletes the file of a removed blob (a
//! value or page over ~128 KiB) only when the log segment that recorded the
//! removal is retired, and forgets the deferred deletion if the database
//! closes first. All snapshots in one database that wrote little else
//! (format 3) therefore never gave a purged snapshot's blob files back: a
//! member overwriting 1 MiB of data kept every snapshot it ever wrote,
//! ~27 MiB more per 100 000 writes. Removing a directory gives back exactly
//! what the snapshot held, at once.
//!
//! Why one tree per chunk. Chunks in one tree are values of the same leaf
//! pages, and sled rewrites a whole leaf (up to 16 values) as a new blob
//! each time it consolidates one: a 185 MB snapshot of 64 KiB chunks wrote
//! ~500 MB and left ~250 MB of files. A chunk alone in its tree is one
//! value written once: its own blob file, synced as soon as it is written
//! (so the device sees the snapshot as a trickle of 1 MiB flushes rather
//! than a burst at the end, which the log's fsync would queue behind).
//!
//! Why the databases are closed between uses: sled 0.34 keeps every page it
//! wrote in memory until its database closes, whatever its cache size says.
//!
//! A snapshot counts once its directory has its final name: it is written
//! under `<zxid>.new`, its files and the directory made durable, then
//! renamed. Each database also holds its completion marker (chunk count,
//! bytes, nodes, time), written after its chunks. A leader's snapshot (SNAP)
//! replaces the log too, which spans the log's database and this directory;
//! see [`SledStorage::install_snapshot`] for how a crash between them is
//! finished or undone at the next open.

use super::*;
use crate::clock::now_ms;
use std::collections::BTreeMap;
use zabkeeper_core::tree::snapshot;

/// The directory of the snapshot databases, inside the store's.
pub(crate) const SNAPSHOT_DIR: &str = "snapshots";
/// Meta key (main database): a leader's snapshot at this zxid is being installed.
pub(crate) const INSTALLING: &str = "installing";
/// Key, in a snapshot database's default tree, of its format marker.
pub(super) const SNAPSHOT_FORMAT_KEY: &str = "format";
/// The format of one snapshot's database.
const SNAPSHOT_FORMAT: &[u8] = b"zabkeeper-snapshot/1";
/// Key, in a snapshot database's default tree, of its completion marker.
pub(crate) const MARKER_KEY: &str = "marker";
/// Key of a chunk in its own tree.
pub(crate) const CHUNK_KEY: &str = "chunk";
/// Suffix of a snapshot directory being written.
const NEW_SUFFIX: &str = ".new";
/// Suffix of a purged snapshot's directory being removed.
const GONE_SUFFIX: &str = ".gone";
/// Suffix of a replaced snapshot's directory being removed.
const OLD_SUFFIX: &str = ".old";

/// The completion marker of a stored snapshot.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(super) struct Marker {
    pub(super) chunks: u32,
    pub(super) bytes: u64,
    /// Nodes in it, from its footer (0 in markers of the first format).
    pub(super) nodes: u64,
    /// When it was written, ms since the Unix epoch (0 in the first format).
    pub(super) created_ms: i64,
}

/// The marker as the store's first format wrote it.
#[derive(Deserialize)]
struct MarkerV1 {
    chunks: u32,
    bytes: u64,
}

impl Marker {
    fn new(meta: &SnapshotMeta) -> Marker {
        Marker { chunks: meta.chunks, bytes: meta.bytes, nodes: meta.nodes, created_ms: meta.created_ms }
    }

    /// Reads a marker of either format.
    pub(super) fn decode(zxid: Zxid, value: &[u8]) -> Result<Marker, StorageError> {
        // A first-format value is too short for the new fields, so it never
        // decodes as the new format.
        codec::decode_value::<Marker>(value)
            .or_else(|_| {
                codec::decode_value::<MarkerV1>(value).map(|m| Marker {
                    chunks: m.chunks,
                    bytes: m.bytes,
                    nodes: 0,
                    created_ms: 0,
                })
            })
            .map_err(|e| StorageError::IncompleteSnapshot { zxid, reason: format!("its marker is corrupt: {e}") })
    }

    pub(super) fn meta(&self, zxid: Zxid) -> SnapshotMeta {
        SnapshotMeta { zxid, bytes: self.bytes, chunks: self.chunks, nodes: self.nodes, created_ms: self.created_ms }
    }
}

/// A marker as stored, for tests that build older layouts.
#[cfg(test)]
pub(crate) fn encode_marker(meta: &SnapshotMeta) -> Vec<u8> {
    codec::encode_value(&Marker::new(meta))
}

/// The name of chunk `index`'s tree in a snapshot's database.
pub(crate) fn chunk_tree(index: u32) -> String {
    format!("chunk-{index:010}")
}

/// The directory name of the snapshot at `zxid`.
pub fn snapshot_dir_name(zxid: Zxid) -> String {
    format!("{:016x}", zxid.0)
}

/// What a name in the snapshot directory is.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// A complete snapshot.
    Done(Zxid),
    /// A write a crash cut short.
    New,
    /// A removal a crash cut short.
    Gone,
    /// A replacement a crash cut short: the replaced snapshot.
    Old(Zxid),
    /// A file of the format-3 database (`conf`, `db`, `blobs`, `snap.*`).
    OneDatabase,
    /// Something else.
    Foreign,
}

fn classify(name: &str) -> Entry {
    let zxid = |hex: &str| (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok()).flatten();
    if let Some(z) = zxid(name) {
        return Entry::Done(Zxid(z));
    }
    if name.strip_suffix(NEW_SUFFIX).and_then(zxid).is_some() {
        return Entry::New;
    }
    if name.strip_suffix(GONE_SUFFIX).and_then(zxid).is_some() {
        return Entry::Gone;
    }
    if let Some(z) = name.strip_suffix(OLD_SUFFIX).and_then(zxid) {
        return Entry::Old(Zxid(z));
    }
    if matches!(name, "conf" | "db" | "blobs") || name.starts_with("snap.") {
        return Entry::OneDatabase;
    }
    Entry::Foreign
}

/// One snapshot's open database.
pub(crate) struct SnapDb {
    db: sled::Db,
}

impl SnapDb {
    /// Chunk `index`, None if its tree is missing.
    fn chunk(&self, index: u32) -> Result<Option<IVec>, StorageError> {
        let name = chunk_tree(index);
        // Opening a tree sled lacks would create it, in a snapshot only read.
        if !self.db.tree_names().iter().any(|n| n.as_ref() == name.as_bytes()) {
            return Ok(None);
        }
        let tree = self.db.open_tree(&name).map_err(io("reading a snapshot chunk"))?;
        tree.get(CHUNK_KEY).map_err(io("reading a snapshot chunk"))
    }
}

/// What the store knows of one complete snapshot.
struct Known {
    /// Its marker as stored (decoded where used, so a damaged one is
    /// reported by what needs it; empty when the database had none).
    marker: IVec,
    /// Its database while a use holds it open.
    open: Option<Arc<SnapDb>>,
}

/// The snapshots the store knows.
#[derive(Default)]
struct Catalog {
    /// Every complete snapshot by zxid: every log append asks for the
    /// newest, and listing them must not open a database.
    done: BTreeMap<Zxid, Known>,
    /// Purged while a use held them open: no longer listed, still readable
    /// by that use, removed when it ends.
    doomed: BTreeMap<Zxid, (IVec, Arc<SnapDb>)>,
}

/// The snapshots of one store.
pub(crate) struct Snapshots {
    pub(super) path: PathBuf,
    catalog: Mutex<Catalog>,
}

/// One use of a snapshot's database. Its end closes the database unless
/// another use holds it or a reader asked it to [`Lease::linger`].
pub(crate) struct Lease<'a> {
    handle: Option<Arc<SnapDb>>,
    zxid: Zxid,
    owner: &'a Snapshots,
}

impl std::ops::Deref for Lease<'_> {
    type Target = SnapDb;

    fn deref(&self) -> &SnapDb {
        // Taken only by `linger` and `drop`, which consume the lease.
        self.handle.as_deref().expect("a lease holds its database until it ends")
    }
}

impl Lease<'_> {
    /// Ends this use but leaves the database open for the next (a reader
    /// going chunk by chunk through a snapshot).
    fn linger(mut self) {
        self.handle = None;
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(db) = self.handle.take() else { return };
        let mut catalog = lock(&self.owner.catalog);
        // This lease's handle and the catalog's: no other use is under way.
        let last = Arc::strong_count(&db) == 2;
        if let Some(known) = catalog.done.get_mut(&self.zxid) {
            if last && known.open.as_ref().is_some_and(|open| Arc::ptr_eq(open, &db)) {
                known.open = None;
            }
            // Dropped under the lock, so a next open waits for this close.
            drop(db);
            return;
        }
        let doomed = catalog.doomed.get(&self.zxid).is_some_and(|(_, open)| Arc::ptr_eq(open, &db));
        if !(last && doomed) {
            return;
        }
        catalog.doomed.remove(&self.zxid);
        drop(catalog);
        drop(db);
        if let Err(e) = self.owner.remove_dir(self.zxid) {
            tracing::warn!(zxid = %self.zxid, error = %e, "removing a purged snapshot failed; the next purge or open retries");
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section leaves its data whole at every step.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Opens one snapshot's sled database, creating it if missing.
fn open_db(path: &Path) -> Result<sled::Db, StorageError> {
    // Every write here is flushed by the operation that made it.
    let config = sled::Config::new().path(path).cache_capacity(CACHE_BYTES).flush_every_ms(None);
    guarded("opening a snapshot's database", || open_retrying(&config))
}

impl Snapshots {
    /// The snapshots of the store in `store_dir`, none known yet.
    pub(super) fn new(store_dir: &Path) -> Snapshots {
        Snapshots { path: store_dir.join(SNAPSHOT_DIR), catalog: Mutex::new(Catalog::default()) }
    }

    pub(super) fn dir_of(&self, zxid: Zxid) -> PathBuf {
        self.path.join(snapshot_dir_name(zxid))
    }

    /// A use of the snapshot at `zxid` (complete, or purged while a use
    /// still holds it), opening its database if no use holds it.
    pub(crate) fn lease(&self, zxid: Zxid) -> Result<Lease<'_>, StorageError> {
        let mut catalog = lock(&self.catalog);
        if let Some((_, db)) = catalog.doomed.get(&zxid) {
            return Ok(Lease { handle: Some(Arc::clone(db)), zxid, owner: self });
        }
        let known = catalog
            .done
            .get_mut(&zxid)
            .ok_or_else(|| StorageError::IncompleteSnapshot { zxid, reason: "it is no longer stored".into() })?;
        if let Some(db) = known.open.as_ref() {
            return Ok(Lease { handle: Some(Arc::clone(db)), zxid, owner: self });
        }
        let db = Arc::new(SnapDb { db: open_db(&self.dir_of(zxid))? });
        known.open = Some(Arc::clone(&db));
        Ok(Lease { handle: Some(db), zxid, owner: self })
    }

    /// `error` (a snapshot found incomplete) with what a check of that
    /// snapshot's blob files finds. Asked only once something is missing:
    /// sled reads a database's log only up to a torn blob, so one torn chunk
    /// takes the marker and the later chunks with it, and the file is the
    /// cause to name.
    pub(super) fn explain(&self, error: StorageError) -> StorageError {
        let StorageError::IncompleteSnapshot { zxid, reason } = error else { return error };
        let reason = match durable::check_blobs(&self.dir_of(zxid)) {
            Ok(Err(torn)) => format!("{reason}; its blob file {} is torn: {}", torn.path.display(), torn.reason),
            _ => reason,
        };
        StorageError::IncompleteSnapshot { zxid, reason }
    }

    /// Whether the database of the snapshot at `zxid` is open.
    #[cfg(test)]
    pub(crate) fn is_open(&self, zxid: Zxid) -> bool {
        let catalog = lock(&self.catalog);
        catalog.done.get(&zxid).is_some_and(|k| k.open.is_some()) || catalog.doomed.contains_key(&zxid)
    }

    /// Whether a complete snapshot is stored at `zxid`.
    fn has(&self, zxid: Zxid) -> bool {
        lock(&self.catalog).done.contains_key(&zxid)
    }

    /// Whether a use holds the complete snapshot at `zxid` open.
    fn in_use(&self, zxid: Zxid) -> bool {
        lock(&self.catalog).done.get(&zxid).is_some_and(|k| k.open.is_some())
    }

    fn newest(&self) -> Zxid {
        lock(&self.catalog).done.last_key_value().map_or(Zxid::ZERO, |(zxid, _)| *zxid)
    }

    fn above(&self, zxid: Zxid) -> Vec<Zxid> {
        lock(&self.catalog).done.range((Bound::Excluded(zxid), Bound::Unbounded)).map(|(z, _)| *z).collect()
    }

    /// The marker of the snapshot at `zxid`, a purged one still in use included.
    fn raw_marker(&self, zxid: Zxid) -> Option<IVec> {
        let catalog = lock(&self.catalog);
        catalog.done.get(&zxid).map(|k| k.marker.clone()).or_else(|| catalog.doomed.get(&zxid).map(|(m, _)| m.clone()))
    }

    fn raw_markers(&self) -> Vec<(Zxid, IVec)> {
        lock(&self.catalog).done.iter().map(|(z, k)| (*z, k.marker.clone())).collect()
    }

    /// Records a complete snapshot.
    fn insert(&self, zxid: Zxid, marker: IVec) {
        lock(&self.catalog).done.insert(zxid, Known { marker, open: None });
    }

    /// Forgets the snapshot at `zxid` and removes its directory: at once if
    /// no use holds it open, else when the last use ends.
    fn forget(&self, zxid: Zxid) -> Result<(), StorageError> {
        let mut catalog = lock(&self.catalog);
        let Some(known) = catalog.done.remove(&zxid) else { return Ok(()) };
        match known.open {
            Some(db) => {
                catalog.doomed.insert(zxid, (known.marker, db));
                Ok(())
            }
            None => {
                drop(catalog);
                self.remove_dir(zxid)
            }
        }
    }

    /// Removes the directory of the snapshot at `zxid`: renamed first (one
    /// durable step after which it no longer counts), then deleted.
    fn remove_dir(&self, zxid: Zxid) -> Result<(), StorageError> {
        let dir = self.dir_of(zxid);
        let gone = self.path.join(format!("{}{GONE_SUFFIX}", snapshot_dir_name(zxid)));
        match std::fs::rename(&dir, &gone) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(fs_io("removing a snapshot")(e)),
        }
        durable::sync_dir(&self.path).map_err(fs_io("removing a snapshot"))?;
        std::fs::remove_dir_all(&gone).map_err(fs_io("removing a snapshot"))
    }

    /// Writes a snapshot's database under `<zxid>.new`, makes it durable and
    /// renames it into place, replacing (when no use holds it) one already
    /// there. A chunk source that fails leaves nothing behind that counts.
    /// `created_ms` is its time (now, or the time of the snapshot an
    /// upgrade copies). Returns its marker as stored.
    pub(super) fn write(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Result<Bytes, StorageError>>,
        created_ms: i64,
    ) -> Result<(SnapshotMeta, IVec), StorageError> {
        let name = snapshot_dir_name(zxid);
        let new = self.path.join(format!("{name}{NEW_SUFFIX}"));
        if new.exists() {
            std::fs::remove_dir_all(&new).map_err(fs_io("writing a snapshot: removing a cut-short write"))?;
        }
        let db = open_db(&new)?;
        let mut blobs = durable::NewBlobs::new(&new);
        let filled = guarded("writing a snapshot", || fill(&db, &mut blobs, zxid, chunks, created_ms));
        let flushed = db.flush().map_err(io("flushing a snapshot"));
        drop(db);
        let (meta, sealed) = match filled.and_then(|done| flushed.map(|_| done)) {
            Ok(done) => done,
            Err(e) => {
                // Not renamed: it never counts, and open removes it if this fails.
                let _ = durable::wait_closed(&new).and_then(|()| std::fs::remove_dir_all(&new));
                return Err(e);
            }
        };
        durable::wait_closed(&new).map_err(fs_io("writing a snapshot: waiting for its database to close"))?;
        durable::seal(&new, &mut blobs).map_err(fs_io("writing a snapshot: syncing its files"))?;
        let dir = self.dir_of(zxid);
        let old = self.path.join(format!("{name}{OLD_SUFFIX}"));
        let replacing = {
            let mut catalog = lock(&self.catalog);
            if catalog.done.get(&zxid).is_some_and(|k| k.open.is_some()) {
                return Err(StorageError::Invalid(format!("the snapshot at {zxid:?} is being read; not replaced")));
            }
            catalog.done.remove(&zxid);
            dir.exists()
        };
        if replacing {
            // Until the new one takes the name, the old one is put back at open.
            std::fs::rename(&dir, &old).map_err(fs_io("writing a snapshot: moving the one it replaces"))?;
        }
        std::fs::rename(&new, &dir).map_err(fs_io("writing a snapshot: renaming it into place"))?;
        durable::sync_dir(&self.path).map_err(fs_io("writing a snapshot: syncing its directory"))?;
        if replacing {
            std::fs::remove_dir_all(&old).map_err(fs_io("writing a snapshot: removing the one it replaced"))?;
        }
        Ok((meta, sealed))
    }
}

/// Writes the chunks and then the marker of the snapshot at `zxid` into
/// `db`, syncing each chunk's blob file (`blobs`) as it goes.
fn fill(
    db: &sled::Db,
    blobs: &mut durable::NewBlobs,
    zxid: Zxid,
    chunks: &mut dyn Iterator<Item = Result<Bytes, StorageError>>,
    created_ms: i64,
) -> Result<(SnapshotMeta, IVec), StorageError> {
    db.insert(SNAPSHOT_FORMAT_KEY, SNAPSHOT_FORMAT).map_err(io("writing a snapshot"))?;
    let (mut count, mut bytes, mut last) = (0u32, 0u64, None);
    for chunk in chunks {
        let chunk = chunk?;
        let tree = db.open_tree(chunk_tree(count)).map_err(io("writing a snapshot"))?;
        tree.insert(CHUNK_KEY, chunk.as_ref()).map_err(io("writing a snapshot"))?;
        // sled wrote a chunk over its inline limit to a blob file of its own
        // during the insert; syncing it now spreads the snapshot's device
        // flushes over its writing.
        blobs.sync_new().map_err(fs_io("writing a snapshot: syncing a chunk"))?;
        count = count
            .checked_add(1)
            .ok_or_else(|| StorageError::Invalid(format!("snapshot at {zxid:?} has too many chunks")))?;
        bytes += chunk.len() as u64;
        last = Some(chunk);
    }
    let Some(last) = last else {
        return Err(StorageError::Invalid(format!("snapshot at {zxid:?} has no chunks")));
    };
    let nodes = snapshot::footer_counts(&last).map_or(0, |(nodes, _)| nodes);
    let meta = SnapshotMeta { zxid, bytes, chunks: count, nodes, created_ms };
    let sealed = IVec::from(codec::encode_value(&Marker::new(&meta)));
    db.insert(MARKER_KEY, sealed.clone()).map_err(io("writing a snapshot marker"))?;
    Ok((meta, sealed))
}

impl SledStorage {
    /// Reads the snapshots at open: upgrades the format-3 database, removes
    /// writes and removals a crash cut short, reads each snapshot's marker,
    /// and settles an install a crash interrupted. Leaves them closed.
    ///
    /// `existing` says the store is known to have had its snapshot
    /// directory: losing it is damage, not an empty store.
    pub(super) fn open_snapshots(&self, existing: bool) -> Result<(), StorageError> {
        let dir = &self.snaps.path;
        if !dir.is_dir() {
            if existing {
                return Err(StorageError::Damaged {
                    during: "open",
                    reason: format!("the snapshot directory {} is missing", dir.display()),
                });
            }
            std::fs::create_dir_all(dir).map_err(fs_io("open: creating the snapshot directory"))?;
            durable::sync_dir(&self.path).map_err(fs_io("open: creating the snapshot directory"))?;
        }
        let mut found = Vec::new();
        let mut leftovers = Vec::new();
        for item in std::fs::read_dir(dir).map_err(fs_io("open: listing the snapshots"))? {
            let item = item.map_err(fs_io("open: listing the snapshots"))?;
            let name = item.file_name().to_string_lossy().into_owned();
            match classify(&name) {
                Entry::Done(zxid) => found.push(zxid),
                Entry::New | Entry::Gone | Entry::OneDatabase => leftovers.push(item.path()),
                Entry::Old(zxid) if self.snaps.dir_of(zxid).exists() => leftovers.push(item.path()),
                Entry::Old(zxid) => {
                    // Its successor never took its name: it stays.
                    tracing::info!(%zxid, "putting back a snapshot whose replacement a crash cut short");
                    std::fs::rename(item.path(), self.snaps.dir_of(zxid))
                        .map_err(fs_io("open: putting back a replaced snapshot"))?;
                    durable::sync_dir(dir).map_err(fs_io("open: putting back a replaced snapshot"))?;
                    found.push(zxid);
                }
                Entry::Foreign => {
                    return Err(StorageError::NotAStore {
                        path: dir.display().to_string(),
                        reason: format!("it holds {name:?}, which is not a snapshot"),
                    })
                }
            }
        }
        for path in &leftovers {
            tracing::info!(path = %path.display(), "removing what a crash left of a snapshot write or removal");
            let removed = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
            removed.map_err(fs_io("open: removing a cut-short snapshot write"))?;
        }
        if !leftovers.is_empty() {
            durable::sync_dir(dir).map_err(fs_io("open: removing a cut-short snapshot write"))?;
        }
        for zxid in found {
            let marker = read_marker(&self.snaps.dir_of(zxid))?;
            self.snaps.insert(zxid, marker);
        }
        self.settle_install()
    }

    pub(super) fn lock_snapshots(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held leaves nothing inconsistent.
        self.snapshot_lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The zxid of the newest complete snapshot, zero when none.
    pub(super) fn newest_snapshot(&self) -> Zxid {
        self.snaps.newest()
    }

    /// The zxids of the stored snapshots, oldest first.
    pub(super) fn snapshot_zxid_list(&self) -> Vec<Zxid> {
        self.snaps.raw_markers().into_iter().map(|(zxid, _)| zxid).collect()
    }

    pub(super) fn marker(&self, zxid: Zxid) -> Result<Option<Marker>, StorageError> {
        let decoded = self.snaps.raw_marker(zxid).map(|value| Marker::decode(zxid, &value)).transpose();
        decoded.map_err(|e| self.snaps.explain(e))
    }

    pub(super) fn markers(&self) -> Result<Vec<(Zxid, Marker)>, StorageError> {
        self.snaps
            .raw_markers()
            .into_iter()
            .map(|(zxid, value)| Ok((zxid, Marker::decode(zxid, &value).map_err(|e| self.snaps.explain(e))?)))
            .collect()
    }

    /// Reads the snapshot at `zxid` chunk by chunk into `feed`, checking
    /// its chunks against its marker.
    pub(super) fn read_snapshot(
        &self,
        zxid: Zxid,
        feed: &mut dyn FnMut(IVec) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let incomplete = |reason: String| self.snaps.explain(StorageError::IncompleteSnapshot { zxid, reason });
        let marker = self.marker(zxid)?.ok_or_else(|| incomplete("its marker vanished".into()))?;
        let snap = self.snaps.lease(zxid)?;
        let mut bytes = 0u64;
        for i in 0..marker.chunks {
            let chunk =
                snap.chunk(i)?.ok_or_else(|| incomplete(format!("chunk {i} of {} is missing", marker.chunks)))?;
            bytes += chunk.len() as u64;
            feed(chunk)?;
        }
        if bytes != marker.bytes {
            return Err(incomplete(format!("chunks hold {bytes} bytes, the marker says {}", marker.bytes)));
        }
        Ok(())
    }

    /// Chunk `index` of the snapshot at `zxid`. The database stays open
    /// until the snapshot's last chunk is read, for a reader going through all.
    pub(super) fn read_chunk(&self, zxid: Zxid, index: u32) -> Result<Option<Bytes>, StorageError> {
        let Some(marker) = self.marker(zxid)? else { return Ok(None) };
        if index >= marker.chunks {
            return Ok(None);
        }
        let snap = self.snaps.lease(zxid)?;
        let chunk = snap.chunk(index)?;
        if index.saturating_add(1) < marker.chunks && chunk.is_some() {
            snap.linger();
        }
        Ok(chunk.map(|c| Bytes::copy_from_slice(&c)))
    }

    /// Installs a leader's snapshot (SNAP): it replaces the whole log and
    /// any snapshot above `zxid`.
    ///
    /// The log and the snapshots are in different databases, so this goes
    /// in three durable steps: note the install in the log's database,
    /// store the snapshot, then drop the newer snapshots and the log and
    /// the note. A crash after the second step is finished at open (the
    /// snapshot is there: the leader's state is stored); a crash before it
    /// is undone (the note goes, the log was never touched). A snapshot
    /// already at `zxid` is replaced (see `put_snapshot`).
    pub(super) fn install_snapshot(&self, zxid: Zxid, chunks: &[Bytes]) -> Result<SnapshotMeta, StorageError> {
        let _serialized = self.lock_snapshots();
        self.meta.insert(INSTALLING, &log_key(zxid)).map_err(io("noting an install"))?;
        self.flush_durably("noting an install")?;
        let meta = self.put_snapshot(zxid, &mut chunks.iter().cloned())?;
        self.finish_install(zxid)?;
        Ok(meta)
    }

    /// The last step of an install: snapshots above `zxid` and the log go.
    fn finish_install(&self, zxid: Zxid) -> Result<(), StorageError> {
        self.remove_snapshots(&self.snaps.above(zxid))?;
        let mut log_batch = Batch::default();
        for item in ordered(LOG_TREE, "clearing the log", self.log.iter()) {
            log_batch.remove(item?.0);
        }
        let mut unlisted = Batch::default();
        for item in ordered(LARGE_RUN_TREE, "clearing the log", self.large_runs.iter()) {
            unlisted.remove(item?.0);
        }
        self.large_pending.lock().unwrap_or_else(PoisonError::into_inner).clear();
        (&self.log, &self.meta, &self.large_runs)
            .transaction(|(log, meta, large_runs)| {
                log.apply_batch(&log_batch)?;
                large_runs.apply_batch(&unlisted)?;
                meta.remove(INSTALLING)?;
                Ok(())
            })
            .map_err(tx_err("installing a snapshot"))?;
        self.flush_durably("installing a snapshot")?;
        Ok(())
    }

    /// Finishes or undoes an install a crash interrupted (see
    /// [`SledStorage::install_snapshot`]).
    fn settle_install(&self) -> Result<(), StorageError> {
        let Some(value) = self.meta.get(INSTALLING).map_err(io("open: reading the install note"))? else {
            return Ok(());
        };
        let zxid = zxid_of(META_TREE, &value)?;
        if self.snaps.has(zxid) {
            tracing::info!(?zxid, "finishing the install of a leader's snapshot that a crash interrupted");
            self.finish_install(zxid)
        } else {
            tracing::info!(?zxid, "undoing the install of a leader's snapshot that a crash cut short");
            self.meta.remove(INSTALLING).map_err(io("open: removing the install note"))?;
            self.flush_durably("open: flushing")?;
            Ok(())
        }
    }

    /// Removes the snapshots at `zxids`, each durably gone on return (its
    /// files may outlive it while a reader still holds it open).
    fn remove_snapshots(&self, zxids: &[Zxid]) -> Result<(), StorageError> {
        for zxid in zxids {
            self.snaps.forget(*zxid)?;
        }
        Ok(())
    }

    /// Keeps the newest `keep` snapshots; see [`Storage::purge`].
    pub(super) fn purge_snapshots(&self, keep: usize) -> Result<PurgeReport, StorageError> {
        let _serialized = self.lock_snapshots();
        // A damaged marker fails here: never delete history while the store is damaged.
        let markers = self.markers()?;
        if markers.is_empty() {
            return Ok(PurgeReport::default());
        }
        let split = markers.len().saturating_sub(keep);
        let (old, kept) = markers.split_at(split);
        let oldest_kept = kept[0].0;
        let zxids: Vec<Zxid> = old.iter().map(|(zxid, _)| *zxid).collect();
        self.remove_snapshots(&zxids)?;
        // The snapshots kept are durable (a save syncs before it returns),
        // so the log they cover can go.
        let entries_removed = self.purge_runs_through(oldest_kept)?;
        Ok(PurgeReport { snapshots_removed: old.len(), entries_removed })
    }

    /// Stores a snapshot of this replica's own state, durably.
    pub(super) fn store_snapshot(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError> {
        let _serialized = self.lock_snapshots();
        self.put_snapshot(zxid, chunks)
    }

    /// Writes the snapshot at `zxid` and records it, replacing one already
    /// there; but one a reader holds open is kept (both hold the committed
    /// state at `zxid`) unless its marker is damaged.
    fn put_snapshot(&self, zxid: Zxid, chunks: &mut dyn Iterator<Item = Bytes>) -> Result<SnapshotMeta, StorageError> {
        if self.snaps.in_use(zxid) {
            if let Ok(Some(marker)) = self.marker(zxid) {
                return Ok(marker.meta(zxid));
            }
        }
        let (meta, sealed) = self.snaps.write(zxid, &mut chunks.map(Ok), now_ms())?;
        self.snaps.insert(zxid, sealed);
        Ok(meta)
    }
}

/// The marker of the complete snapshot in `dir`, as stored; empty (which no
/// marker decodes from) when its database has none or refuses to open, so
/// what reads the snapshot reports it as incomplete.
fn read_marker(dir: &Path) -> Result<IVec, StorageError> {
    let db = match open_db(dir) {
        Ok(db) => db,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "a snapshot's database does not open");
            return Ok(IVec::default());
        }
    };
    let format = db.get(SNAPSHOT_FORMAT_KEY).map_err(io("open: reading a snapshot's format"))?;
    match format {
        Some(found) if found.as_ref() == SNAPSHOT_FORMAT => {}
        Some(found) => {
            return Err(StorageError::NotAStore {
                path: dir.display().to_string(),
                reason: format!(
                    "snapshot format {:?}, this build reads {:?}",
                    String::from_utf8_lossy(&found),
                    String::from_utf8_lossy(SNAPSHOT_FORMAT)
                ),
            })
        }
        None => return Ok(IVec::default()),
    }
    Ok(db.get(MARKER_KEY).map_err(io("open: reading a snapshot's marker"))?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zabkeeper_core::storage::Storage;

    fn chunks(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| Bytes::from(vec![i as u8; 100])).collect()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_snapshots_database_is_open_only_while_used() {
        // sled keeps what it wrote in memory until closed: a member that
        // left it open held every snapshot it had saved.
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStorage::open(dir.path().join("store")).expect("open");
        store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
        store.save_snapshot(Zxid(9), &chunks(3)).expect("save");
        assert!(!store.snaps.is_open(Zxid(5)) && !store.snaps.is_open(Zxid(9)), "a save closes it");
        assert_eq!(store.snapshot_chunk(Zxid(5), 0).expect("read").as_deref(), Some(&[0u8; 100][..]));
        assert!(store.snaps.is_open(Zxid(5)), "a reader going chunk by chunk keeps it open");
        {
            let held = store.snaps.lease(Zxid(5)).expect("a second use");
            assert_eq!(store.snapshot_chunk(Zxid(5), 2).expect("read").as_deref(), Some(&[2u8; 100][..]));
            assert!(store.snaps.is_open(Zxid(5)), "not closed under another use");
            assert!(held.chunk(1).expect("read").is_some());
        }
        assert!(!store.snaps.is_open(Zxid(5)), "the last use closes it");
        assert_eq!(store.snapshot_chunk(Zxid(5), 7).expect("read"), None);
        assert!(!store.snaps.is_open(Zxid(5)), "reading past the end opens nothing");
        assert_eq!(store.purge(1).expect("purge").snapshots_removed, 1);
        assert_eq!(store.snapshots().expect("list").iter().map(|s| s.zxid).collect::<Vec<_>>(), [Zxid(9)]);
        assert_eq!(names(&dir.path().join("store").join(SNAPSHOT_DIR)), [snapshot_dir_name(Zxid(9))]);
    }

    #[test]
    fn a_purge_removes_the_snapshots_files_at_once_or_when_its_last_reader_ends() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStorage::open(dir.path().join("store")).expect("open");
        let snapshots = dir.path().join("store").join(SNAPSHOT_DIR);
        for z in [3, 5, 7] {
            store.save_snapshot(Zxid(z), &chunks(4)).expect("save");
        }
        // A follower's SNAP is half way through the oldest when a purge comes.
        assert!(store.snapshot_chunk(Zxid(3), 0).expect("read").is_some());
        assert_eq!(store.purge(1).expect("purge").snapshots_removed, 2);
        assert_eq!(store.snapshots().expect("list").len(), 1, "both purged ones stop counting at once");
        assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(3)), snapshot_dir_name(Zxid(7))]);
        assert!(store.snapshot_chunk(Zxid(3), 1).expect("read on").is_some(), "its reader goes on");
        assert!(store.snapshot_chunk(Zxid(3), 2).expect("read on").is_some());
        assert!(store.snapshot_chunk(Zxid(3), 3).expect("the last chunk").is_some());
        assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(7))], "gone when its last use ended");
    }

    #[test]
    fn what_a_crash_left_of_a_write_or_a_removal_goes_at_open_and_a_complete_snapshot_stays() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("store");
        let store = SledStorage::open(&path).expect("open");
        store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
        store.save_snapshot(Zxid(8), &chunks(3)).expect("save");
        drop(store);
        let snapshots = path.join(SNAPSHOT_DIR);
        // A write cut short before its rename, and a removal after its rename.
        let partial = snapshots.join(format!("{}{NEW_SUFFIX}", snapshot_dir_name(Zxid(9))));
        std::fs::create_dir(&partial).expect("mkdir");
        std::fs::write(partial.join("db"), b"half").expect("write");
        std::fs::rename(
            snapshots.join(snapshot_dir_name(Zxid(5))),
            snapshots.join(format!("{}{GONE_SUFFIX}", snapshot_dir_name(Zxid(5)))),
        )
        .expect("rename");
        let store = SledStorage::open(&path).expect("reopen");
        assert_eq!(store.snapshots().expect("list").iter().map(|s| s.zxid).collect::<Vec<_>>(), [Zxid(8)]);
        assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(8))]);
    }

    #[test]
    fn a_replacement_a_crash_cut_short_puts_the_old_snapshot_back_or_finishes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("store");
        let store = SledStorage::open(&path).expect("open");
        store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
        store.save_snapshot(Zxid(6), &chunks(2)).expect("save");
        drop(store);
        let snapshots = path.join(SNAPSHOT_DIR);
        let name = |z: u64, suffix: &str| snapshots.join(format!("{}{suffix}", snapshot_dir_name(Zxid(z))));
        // At 5: moved aside, its successor not yet renamed (a `.new` left).
        std::fs::rename(name(5, ""), name(5, OLD_SUFFIX)).expect("rename");
        std::fs::create_dir(name(5, NEW_SUFFIX)).expect("a cut-short write");
        // At 6: the successor took the name, the old one not yet removed.
        std::fs::create_dir(name(6, OLD_SUFFIX)).expect("the replaced one");
        let store = SledStorage::open(&path).expect("reopen");
        let metas = store.snapshots().expect("list");
        assert_eq!(metas.iter().map(|m| (m.zxid, m.chunks)).collect::<Vec<_>>(), [(Zxid(5), 3), (Zxid(6), 2)]);
        assert_eq!(names(&snapshots), [snapshot_dir_name(Zxid(5)), snapshot_dir_name(Zxid(6))]);
        assert_eq!(store.snapshot_chunk(Zxid(5), 2).expect("read").as_deref(), Some(&[2u8; 100][..]));
    }

    #[test]
    fn each_chunk_is_written_once_in_a_tree_of_its_own() {
        // In one tree, sled rewrote whole leaves of chunks as new blobs; a
        // chunk alone in its tree is one blob file of its own size.
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStorage::open(dir.path().join("store")).expect("open");
        let big: Vec<Bytes> = (0..6u8).map(|i| Bytes::from(vec![i; 1 << 20])).collect();
        store.save_snapshot(Zxid(4), &big).expect("save");
        let blobs = dir.path().join("store").join(SNAPSHOT_DIR).join(snapshot_dir_name(Zxid(4))).join("blobs");
        let sizes: Vec<u64> = std::fs::read_dir(&blobs)
            .expect("blob files")
            .map(|e| e.expect("entry").metadata().expect("size").len())
            .collect();
        assert_eq!(sizes.len(), 6, "one blob file per chunk: {sizes:?}");
        assert!(sizes.iter().all(|s| (1 << 20..(1 << 20) + 64).contains(s)), "each holds one chunk: {sizes:?}");
        for i in 0..6u8 {
            assert_eq!(store.snapshot_chunk(Zxid(4), u32::from(i)).expect("read"), Some(Bytes::from(vec![i; 1 << 20])));
        }
    }

    #[derive(Serialize)]
    struct FirstFormat {
        chunks: u32,
        bytes: u64,
    }

    #[test]
    fn markers_of_both_formats_decode() {
        let old = codec::encode_value(&FirstFormat { chunks: 3, bytes: 700 });
        let read = Marker::decode(Zxid(9), &old).expect("first format");
        assert_eq!((read.chunks, read.bytes, read.nodes, read.created_ms), (3, 700, 0, 0));
        let meta = SnapshotMeta { zxid: Zxid(9), bytes: 700, chunks: 3, nodes: 42, created_ms: 1_700_000_000_000 };
        let read = Marker::decode(Zxid(9), &codec::encode_value(&Marker::new(&meta))).expect("new format");
        assert_eq!((read.chunks, read.bytes, read.nodes, read.created_ms), (3, 700, 42, 1_700_000_000_000));
        assert!(Marker::decode(Zxid(9), b"garbage").is_err());
        assert!(Marker::decode(Zxid(9), b"").is_err(), "a missing marker reads as a damaged one");
    }

    #[test]
    fn names_in_the_snapshot_directory_are_told_apart() {
        assert_eq!(classify("000000010000002a"), Entry::Done(Zxid(0x1_0000_002a)));
        assert_eq!(classify("000000010000002a.new"), Entry::New);
        assert_eq!(classify("000000010000002a.gone"), Entry::Gone);
        assert_eq!(classify("000000010000002a.old"), Entry::Old(Zxid(0x1_0000_002a)));
        assert_eq!(classify("snap.00000000000001F0"), Entry::OneDatabase);
        assert_eq!(classify("conf"), Entry::OneDatabase);
        assert_eq!(classify("notes.txt"), Entry::Foreign);
        assert_eq!(classify("10000002a"), Entry::Foreign);
    }
}
