//! Snapshots in the sled store: a sled database of their own, in the
//! store's `snapshots` directory, open only while it is being used.
//!
//! Why apart: sled 0.34 keeps the pages it writes in memory, whatever its
//! cache size says, until the database is closed. Saving a 200 MB snapshot
//! into the log's database left ~230 MB resident for good (and ~560 MB
//! after three saves); the same saves into a database closed afterwards
//! left nothing. A member saves a snapshot every `snapshot_every` writes,
//! so with one database its memory grew with the snapshots it had written.
//! Apart, the log's group commits also no longer fsync snapshot chunks.
//!
//! Chunks are written before the completion marker that makes them count;
//! chunks without a marker are an unfinished write, removed at open. A
//! leader's snapshot (SNAP) replaces the log too, which now spans two
//! databases; see [`SledStorage::install_snapshot`] for how a crash
//! between them is finished or undone at the next open.

use super::*;
use crate::server::clock::now_ms;
use crate::tree::snapshot;
use std::collections::BTreeMap;

/// The directory of the snapshot database, inside the store's.
pub(crate) const SNAPSHOT_DIR: &str = "snapshots";
/// Meta key (main database): a leader's snapshot at this zxid is being installed.
pub(crate) const INSTALLING: &str = "installing";
/// Key, in the snapshot database's default tree, of its format marker.
const SNAPSHOT_FORMAT_KEY: &str = "format";

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
    fn decode(zxid: Zxid, value: &[u8]) -> Result<Marker, StorageError> {
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

/// The key of one snapshot chunk.
pub(crate) fn chunk_key(zxid: Zxid, index: u32) -> [u8; 12] {
    let mut key = [0; 12];
    key[..8].copy_from_slice(&zxid.0.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

pub(super) fn chunk_zxid(key: &[u8]) -> Result<Zxid, StorageError> {
    if key.len() != 12 {
        return Err(StorageError::CorruptKey {
            tree: CHUNK_TREE,
            key: hex(key),
            reason: format!("{} bytes, expected 12", key.len()),
        });
    }
    zxid_of(CHUNK_TREE, &key[..8])
}

/// A chunk's index in its key. Chunks are megabytes each, so a snapshot
/// would need petabytes to run out of 32 bits.
pub(super) fn chunk_index(i: usize) -> u32 {
    u32::try_from(i).expect("a snapshot has fewer than 2^32 chunks")
}

/// The open snapshot database and its two trees.
pub(crate) struct SnapDb {
    db: sled::Db,
    /// Makes what `db` flushes durable.
    durable: Arc<super::durable::Durable>,
    /// zxid ‖ chunk index → chunk.
    pub(crate) chunks: sled::Tree,
    /// zxid → completion marker.
    pub(crate) index: sled::Tree,
}

impl SnapDb {
    fn flush(&self, during: &'static str) -> Result<(), StorageError> {
        super::flush_durably(&self.db, &self.durable, during)
    }

    pub(super) fn chunk_keys(&self, zxid: Zxid) -> Result<Vec<IVec>, StorageError> {
        ordered(CHUNK_TREE, "listing snapshot chunks", self.chunks.scan_prefix(log_key(zxid)))
            .map(|item| item.map(|(key, _)| key))
            .collect()
    }
}

/// The snapshot database of one store: opened by the first use, closed by
/// the end of the last, so what sled holds of it lives only that long.
pub(crate) struct Snapshots {
    path: PathBuf,
    open: Mutex<Option<Arc<SnapDb>>>,
    /// What makes the database durable, kept from its first open to the
    /// store's end: the first open syncs the whole filesystem (everything a
    /// crash may have left unsynced), later ones only what sled touched
    /// while it opened. Which blob files are synced stays known while the
    /// database is closed: only an open handle writes it.
    durable: Mutex<Option<Arc<super::durable::Durable>>>,
    /// Every marker by zxid, as stored (decoded where used, so a damaged
    /// one is reported by what needs it): every log append asks for the
    /// newest, and listing them must not open the database.
    markers: Mutex<BTreeMap<Zxid, IVec>>,
}

/// One use of the snapshot database. Its end closes the database unless
/// another use holds it or a reader asked it to [`Lease::linger`].
pub(crate) struct Lease<'a> {
    handle: Option<Arc<SnapDb>>,
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
        let mut slot = lock(&self.owner.open);
        // This lease's handle and the slot's: no other use is under way.
        if Arc::strong_count(&db) == 2 {
            *slot = None;
        }
        // Dropped under the lock, so a next open waits for this close.
        drop(db);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section leaves its data whole at every step.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Snapshots {
    /// The snapshot database of the store in `store_dir`, not opened yet.
    pub(super) fn new(store_dir: &Path) -> Snapshots {
        Snapshots {
            path: store_dir.join(SNAPSHOT_DIR),
            open: Mutex::new(None),
            durable: Mutex::new(None),
            markers: Mutex::new(BTreeMap::new()),
        }
    }

    /// A use of the database, opening it if no use holds it.
    pub(crate) fn lease(&self) -> Result<Lease<'_>, StorageError> {
        let mut slot = lock(&self.open);
        if let Some(db) = slot.as_ref() {
            return Ok(Lease { handle: Some(Arc::clone(db)), owner: self });
        }
        let db = guarded("opening the snapshot database", || {
            // Every write here is flushed by the operation that made it.
            let config = sled::Config::new().path(&self.path).cache_capacity(CACHE_BYTES).flush_every_ms(None);
            let db = open_retrying(&config)?;
            let mut kept = lock(&self.durable);
            let durable = match kept.as_ref() {
                Some(durable) => {
                    // What sled did at this open (it may remove blobs, whose
                    // names can come back) made durable, and the blob files
                    // it removed forgotten before anything is written.
                    durable.sync().map_err(super::fs_io("opening the snapshot database: syncing it"))?;
                    Arc::clone(durable)
                }
                None => Arc::new(
                    super::durable::Durable::open(&self.path)
                        .map_err(super::fs_io("opening the snapshot database: syncing its files"))?,
                ),
            };
            *kept = Some(Arc::clone(&durable));
            drop(kept);
            Ok(SnapDb {
                chunks: db.open_tree(CHUNK_TREE).map_err(io("open: snapshot tree"))?,
                index: db.open_tree(INDEX_TREE).map_err(io("open: snapshot index tree"))?,
                db,
                durable,
            })
        })?;
        let db = Arc::new(db);
        *slot = Some(Arc::clone(&db));
        Ok(Lease { handle: Some(db), owner: self })
    }

    /// Whether the database is open.
    #[cfg(test)]
    fn is_open(&self) -> bool {
        lock(&self.open).is_some()
    }

    /// Whether a marker is stored at `zxid`.
    fn has(&self, zxid: Zxid) -> bool {
        lock(&self.markers).contains_key(&zxid)
    }

    fn newest(&self) -> Zxid {
        lock(&self.markers).last_key_value().map_or(Zxid::ZERO, |(zxid, _)| *zxid)
    }

    fn above(&self, zxid: Zxid) -> Vec<Zxid> {
        lock(&self.markers).range((Bound::Excluded(zxid), Bound::Unbounded)).map(|(z, _)| *z).collect()
    }

    fn raw_marker(&self, zxid: Zxid) -> Option<IVec> {
        lock(&self.markers).get(&zxid).cloned()
    }

    fn raw_markers(&self) -> Vec<(Zxid, IVec)> {
        lock(&self.markers).iter().map(|(z, v)| (*z, v.clone())).collect()
    }
}

impl SledStorage {
    /// Opens the snapshot database at open: checks it belongs to this store,
    /// moves snapshots an older format kept in the log's database into it,
    /// reads its markers, removes unfinished writes and settles an install a
    /// crash interrupted. Leaves it closed.
    pub(super) fn open_snapshots(&self, existing: bool) -> Result<(), StorageError> {
        let snap = self.snaps.lease()?;
        let format = snap.db.get(SNAPSHOT_FORMAT_KEY).map_err(io("open: reading the snapshot format"))?;
        match format {
            Some(found) if found.as_ref() == FORMAT => {}
            Some(found) => {
                return Err(StorageError::NotAStore {
                    path: self.snaps.path.display().to_string(),
                    reason: format!("unknown snapshot format marker {:?}", String::from_utf8_lossy(&found)),
                })
            }
            None if existing => {
                return Err(StorageError::Damaged {
                    during: "open",
                    reason: format!(
                        "the snapshot database {} has lost its contents (format key missing)",
                        self.snaps.path.display()
                    ),
                })
            }
            None => {
                snap.db.insert(SNAPSHOT_FORMAT_KEY, FORMAT).map_err(io("open: writing the snapshot format"))?;
                snap.flush("open: flushing the snapshot format")?;
            }
        }
        let mut markers = BTreeMap::new();
        for item in ordered(INDEX_TREE, "reading the snapshot index", snap.index.iter()) {
            let (key, value) = item?;
            markers.insert(zxid_of(INDEX_TREE, &key)?, value);
        }
        *lock(&self.snaps.markers) = markers;
        self.remove_unfinished_snapshots(&snap)?;
        drop(snap);
        self.settle_install()
    }

    /// Moves the snapshots a store of format 1 or 2 kept in the log's
    /// database into the snapshot database. Idempotent: a crash part way
    /// leaves the old trees, and the next open copies them again.
    pub(super) fn move_snapshots_out(&self) -> Result<(), StorageError> {
        if !self.holds_tree(CHUNK_TREE) && !self.holds_tree(INDEX_TREE) {
            return Ok(());
        }
        let old_chunks = self.db.open_tree(CHUNK_TREE).map_err(io("open: old snapshot tree"))?;
        let old_index = self.db.open_tree(INDEX_TREE).map_err(io("open: old snapshot index tree"))?;
        let snap = self.snaps.lease()?;
        let mut moved = 0usize;
        // Chunks before markers, as every snapshot write goes.
        for item in ordered(CHUNK_TREE, "moving snapshot chunks", old_chunks.iter()) {
            let (key, value) = item?;
            snap.chunks.insert(key, value).map_err(io("open: moving snapshot chunks"))?;
        }
        for item in ordered(INDEX_TREE, "moving snapshot markers", old_index.iter()) {
            let (key, value) = item?;
            snap.index.insert(key, value).map_err(io("open: moving snapshot markers"))?;
            moved += 1;
        }
        snap.db.insert(SNAPSHOT_FORMAT_KEY, FORMAT).map_err(io("open: writing the snapshot format"))?;
        snap.flush("open: flushing moved snapshots")?;
        drop((old_chunks, old_index));
        for name in [CHUNK_TREE, INDEX_TREE] {
            self.db.drop_tree(name).map_err(io("open: dropping an old snapshot tree"))?;
        }
        self.flush_durably("open: flushing")?;
        tracing::info!(snapshots = moved, dir = %self.snaps.path.display(), "moved snapshots into their own database");
        Ok(())
    }

    /// Whether the log's database holds the tree `name` (asked by name:
    /// opening a tree sled lacks would create it).
    pub(super) fn holds_tree(&self, name: &str) -> bool {
        self.db.tree_names().iter().any(|n| n.as_ref() == name.as_bytes())
    }

    /// Drops chunks that no marker covers: a snapshot write a crash cut short.
    /// Visits one chunk per stored zxid, not every chunk: snapshots are large.
    fn remove_unfinished_snapshots(&self, snap: &SnapDb) -> Result<(), StorageError> {
        let mut from = [0u8; 12];
        let mut removed = 0usize;
        loop {
            let first = snap.chunks.range(from..).next().transpose().map_err(io("open: scanning snapshot chunks"))?;
            let Some((key, _)) = first else { break };
            let zxid = chunk_zxid(&key)?;
            if !self.snaps.has(zxid) {
                let mut batch = Batch::default();
                for key in snap.chunk_keys(zxid)? {
                    batch.remove(key);
                    removed += 1;
                }
                snap.chunks.apply_batch(batch).map_err(io("open: removing unfinished snapshots"))?;
            }
            let Some(next) = zxid.0.checked_add(1) else { break };
            from = chunk_key(Zxid(next), 0);
        }
        if removed > 0 {
            tracing::info!(chunks = removed, "removed chunks of unfinished snapshot writes");
            snap.flush("open: flushing")?;
        }
        Ok(())
    }

    pub(super) fn lock_snapshots(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held leaves nothing inconsistent.
        self.snapshot_lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The zxid of the newest snapshot with a marker, zero when none.
    pub(super) fn newest_snapshot(&self) -> Zxid {
        self.snaps.newest()
    }

    /// The zxids of the stored snapshots, oldest first.
    pub(super) fn snapshot_zxid_list(&self) -> Vec<Zxid> {
        self.snaps.raw_markers().into_iter().map(|(zxid, _)| zxid).collect()
    }

    pub(super) fn marker(&self, zxid: Zxid) -> Result<Option<Marker>, StorageError> {
        self.snaps.raw_marker(zxid).map(|value| Marker::decode(zxid, &value)).transpose()
    }

    pub(super) fn markers(&self) -> Result<Vec<(Zxid, Marker)>, StorageError> {
        self.snaps.raw_markers().into_iter().map(|(zxid, value)| Ok((zxid, Marker::decode(zxid, &value)?))).collect()
    }

    /// Reads the snapshot at `zxid` chunk by chunk into `feed`, checking
    /// its chunks against its marker.
    pub(super) fn read_snapshot(
        &self,
        zxid: Zxid,
        feed: &mut dyn FnMut(IVec) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let incomplete = |reason: String| StorageError::IncompleteSnapshot { zxid, reason };
        let marker = self.marker(zxid)?.ok_or_else(|| incomplete("its marker vanished".into()))?;
        let snap = self.snaps.lease()?;
        let mut bytes = 0u64;
        for i in 0..marker.chunks {
            let chunk = snap
                .chunks
                .get(chunk_key(zxid, i))
                .map_err(io("reading a snapshot chunk"))?
                .ok_or_else(|| incomplete(format!("chunk {i} of {} is missing", marker.chunks)))?;
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
        let last = self.marker(zxid)?.is_none_or(|m| index.saturating_add(1) >= m.chunks);
        let snap = self.snaps.lease()?;
        let chunk = snap.chunks.get(chunk_key(zxid, index)).map_err(io("reading a snapshot chunk"))?;
        if !last && chunk.is_some() {
            snap.linger();
        }
        Ok(chunk.map(|c| Bytes::copy_from_slice(&c)))
    }

    /// Installs a leader's snapshot (SNAP): it replaces the whole log and
    /// any snapshot above `zxid`.
    ///
    /// The log and the snapshots are in two databases, so this goes in three
    /// durable steps: note the install in the log's database, store the
    /// snapshot and its marker, then drop the newer snapshots and the log
    /// and the note. A crash after the second step is finished at open (the
    /// marker is there: the leader's state is stored); a crash before it is
    /// undone (the note goes, the log was never touched). A marker already
    /// at `zxid` is replaced, and it held the same committed state anyway.
    pub(super) fn install_snapshot(&self, zxid: Zxid, chunks: &[Bytes]) -> Result<SnapshotMeta, StorageError> {
        let _serialized = self.lock_snapshots();
        self.meta.insert(INSTALLING, &log_key(zxid)).map_err(io("noting an install"))?;
        self.flush_durably("noting an install")?;
        let meta = self.replace_snapshot(zxid, chunks)?;
        self.finish_install(zxid)?;
        Ok(meta)
    }

    /// The last step of an install: snapshots above `zxid` and the log go.
    fn finish_install(&self, zxid: Zxid) -> Result<(), StorageError> {
        let above = self.snaps.above(zxid);
        if !above.is_empty() {
            let snap = self.snaps.lease()?;
            self.remove_snapshots(&snap, &above, "dropping snapshots a leader's replaces")?;
        }
        let mut log_batch = Batch::default();
        for item in ordered(LOG_TREE, "clearing the log", self.log.iter()) {
            log_batch.remove(item?.0);
        }
        (&self.log, &self.meta)
            .transaction(|(log, meta)| {
                log.apply_batch(&log_batch)?;
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

    /// Removes the snapshots at `zxids`, markers first (a crash between
    /// leaves unmarked chunks, which open removes), durably.
    fn remove_snapshots(&self, snap: &SnapDb, zxids: &[Zxid], during: &'static str) -> Result<(), StorageError> {
        let mut index_batch = Batch::default();
        let mut chunk_batch = Batch::default();
        for zxid in zxids {
            index_batch.remove(&log_key(*zxid));
            for key in snap.chunk_keys(*zxid)? {
                chunk_batch.remove(key);
            }
        }
        snap.index.apply_batch(index_batch).map_err(io(during))?;
        snap.chunks.apply_batch(chunk_batch).map_err(io(during))?;
        snap.flush(during)?;
        let mut markers = lock(&self.snaps.markers);
        for zxid in zxids {
            markers.remove(zxid);
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
        if !old.is_empty() {
            let snap = self.snaps.lease()?;
            let zxids: Vec<Zxid> = old.iter().map(|(zxid, _)| *zxid).collect();
            self.remove_snapshots(&snap, &zxids, "purging snapshots")?;
        }
        // The snapshots kept are durable (a save flushes before it returns),
        // so the log they cover can go.
        let entries_removed = self.purge_runs_through(oldest_kept)?;
        Ok(PurgeReport { snapshots_removed: old.len(), entries_removed })
    }

    /// Stores a snapshot of this replica's own state and its marker, durably.
    pub(super) fn store_snapshot(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError> {
        let _serialized = self.lock_snapshots();
        if self.snaps.has(zxid) {
            let chunks: Vec<Bytes> = chunks.collect();
            return self.replace_snapshot(zxid, &chunks);
        }
        let snap = self.snaps.lease()?;
        // Common case, the background snapshot: chunks without a marker are
        // ignored, so they need no atomicity and can be written as they are
        // serialized, one in memory at a time. Chunks already at this zxid
        // are the leftovers of a write a crash cut short.
        for key in snap.chunk_keys(zxid)? {
            snap.chunks.remove(key).map_err(io("writing a snapshot"))?;
        }
        let (mut count, mut bytes, mut last) = (0u32, 0u64, None);
        for chunk in chunks {
            snap.chunks.insert(chunk_key(zxid, count), chunk.as_ref()).map_err(io("writing a snapshot"))?;
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
        let meta = SnapshotMeta { zxid, bytes, chunks: count, nodes, created_ms: now_ms() };
        // Written last: sled recovers a prefix, so a durable marker implies
        // durable chunks.
        let sealed = codec::encode_value(&Marker::new(&meta));
        snap.index.insert(log_key(zxid), sealed.as_slice()).map_err(io("writing a snapshot marker"))?;
        snap.flush("flushing a snapshot")?;
        lock(&self.snaps.markers).insert(zxid, IVec::from(sealed));
        Ok(meta)
    }

    /// Replaces the snapshot at `zxid` (or stores it) in one transaction, durably.
    fn replace_snapshot(&self, zxid: Zxid, chunks: &[Bytes]) -> Result<SnapshotMeta, StorageError> {
        let count = u32::try_from(chunks.len())
            .map_err(|_| StorageError::Invalid(format!("snapshot at {zxid:?} has too many chunks")))?;
        if count == 0 {
            return Err(StorageError::Invalid(format!("snapshot at {zxid:?} has no chunks")));
        }
        let meta = SnapshotMeta::of(zxid, chunks, now_ms());
        let sealed = codec::encode_value(&Marker::new(&meta));
        let snap = self.snaps.lease()?;
        // Leftovers at this zxid beyond the new count must not survive.
        let stale: Vec<IVec> = snap
            .chunk_keys(zxid)?
            .into_iter()
            .filter(|key| key.len() == 12 && u32::from_be_bytes([key[8], key[9], key[10], key[11]]) >= count)
            .collect();
        let mut chunk_batch = Batch::default();
        for key in stale {
            chunk_batch.remove(key);
        }
        for (i, chunk) in chunks.iter().enumerate() {
            chunk_batch.insert(&chunk_key(zxid, chunk_index(i)), chunk.as_ref());
        }
        let mut index_batch = Batch::default();
        index_batch.insert(&log_key(zxid), sealed.as_slice());
        // Replacing a marked snapshot must be atomic: a half-replaced one
        // would mix two states under one marker.
        (&snap.chunks, &snap.index)
            .transaction(|(chunks, index)| {
                chunks.apply_batch(&chunk_batch)?;
                index.apply_batch(&index_batch)?;
                Ok(())
            })
            .map_err(tx_err("storing a snapshot"))?;
        snap.flush("flushing a snapshot")?;
        lock(&self.snaps.markers).insert(zxid, IVec::from(sealed));
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Storage;

    fn chunks(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| Bytes::from(vec![i as u8; 100])).collect()
    }

    #[test]
    fn the_snapshot_database_is_open_only_while_used() {
        // sled keeps what it wrote in memory until closed: a member that
        // left it open held every snapshot it had saved.
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStorage::open(dir.path().join("store")).expect("open");
        assert!(!store.snaps.is_open(), "open leaves it closed");
        store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
        store.save_snapshot(Zxid(9), &chunks(3)).expect("save");
        assert!(!store.snaps.is_open(), "a save closes it");
        assert_eq!(store.snapshot_chunk(Zxid(5), 0).expect("read").as_deref(), Some(&[0u8; 100][..]));
        assert!(store.snaps.is_open(), "a reader going chunk by chunk keeps it open");
        {
            let held = store.snaps.lease().expect("a second use");
            assert_eq!(store.snapshot_chunk(Zxid(5), 2).expect("read").as_deref(), Some(&[2u8; 100][..]));
            assert!(store.snaps.is_open(), "not closed under another use");
            assert_eq!(held.index.len(), 2);
        }
        assert!(!store.snaps.is_open(), "the last use closes it");
        assert_eq!(store.snapshot_chunk(Zxid(5), 7).expect("read"), None);
        assert!(!store.snaps.is_open(), "reading past the end closes it");
        assert_eq!(store.purge(1).expect("purge").snapshots_removed, 1);
        assert!(!store.snaps.is_open(), "a purge closes it");
        assert_eq!(store.snapshots().expect("list").iter().map(|s| s.zxid).collect::<Vec<_>>(), [Zxid(9)]);
        assert!(!store.snaps.is_open(), "listing needs no database");
    }

    #[test]
    fn the_snapshot_database_is_synced_whole_only_at_its_first_open() {
        // The first open syncs the whole database (~2 000 blob files at
        // 1 M znodes); a restart opens it twice, and each save once more.
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStorage::open(dir.path().join("store")).expect("open");
        let first = Arc::clone(&store.snaps.lease().expect("a use").durable);
        store.save_snapshot(Zxid(5), &chunks(3)).expect("save");
        assert!(!store.snaps.is_open(), "closed between uses");
        let later = Arc::clone(&store.snaps.lease().expect("another use").durable);
        assert!(Arc::ptr_eq(&first, &later), "the durable half of the first open is reused");
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
    }
}
