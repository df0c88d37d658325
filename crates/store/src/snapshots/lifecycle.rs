//! What the store does with its snapshots: reads them at open (finishing
//! or undoing what a crash cut short), reads them back, installs a
//! leader's (which replaces the log, in another database, so it goes in
//! durable steps), saves its own, and purges old ones with the log they
//! cover.

use super::catalog::read_marker;
use super::*;
use crate::clock::now_ms;

impl SledStorage {
    /// Reads the snapshots at open: upgrades the format-3 database, removes
    /// writes and removals a crash cut short, reads each snapshot's marker,
    /// and settles an install a crash interrupted. Leaves them closed.
    ///
    /// `existing` says the store is known to have had its snapshot
    /// directory: losing it is damage, not an empty store.
    pub(crate) fn open_snapshots(&self, existing: bool) -> Result<(), StorageError> {
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

    pub(crate) fn lock_snapshots(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held leaves nothing inconsistent.
        self.snapshot_lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The zxid of the newest complete snapshot, zero when none.
    pub(crate) fn newest_snapshot(&self) -> Zxid {
        self.snaps.newest()
    }

    /// The zxids of the stored snapshots, oldest first.
    pub(crate) fn snapshot_zxid_list(&self) -> Vec<Zxid> {
        self.snaps.raw_markers().into_iter().map(|(zxid, _)| zxid).collect()
    }

    pub(crate) fn marker(&self, zxid: Zxid) -> Result<Option<Marker>, StorageError> {
        let decoded = self.snaps.raw_marker(zxid).map(|value| Marker::decode(zxid, &value)).transpose();
        decoded.map_err(|e| self.snaps.explain(e))
    }

    pub(crate) fn markers(&self) -> Result<Vec<(Zxid, Marker)>, StorageError> {
        self.snaps
            .raw_markers()
            .into_iter()
            .map(|(zxid, value)| Ok((zxid, Marker::decode(zxid, &value).map_err(|e| self.snaps.explain(e))?)))
            .collect()
    }

    /// Reads the snapshot at `zxid` chunk by chunk into `feed`, checking
    /// its chunks against its marker.
    pub(crate) fn read_snapshot(
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
    pub(crate) fn read_chunk(&self, zxid: Zxid, index: u32) -> Result<Option<Bytes>, StorageError> {
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
    pub(crate) fn install_snapshot(&self, zxid: Zxid, chunks: &[Bytes]) -> Result<SnapshotMeta, StorageError> {
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
    pub(crate) fn purge_snapshots(&self, keep: usize) -> Result<PurgeReport, StorageError> {
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
    pub(crate) fn store_snapshot(
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
