//! The snapshots one store holds, each a sled database of its own: which
//! exist, and a database open only while a use holds it (sled 0.34 keeps
//! every page it wrote in memory until its database closes). A snapshot is
//! written under a temporary name and renamed into place, and removed by a
//! rename too, so a crash leaves nothing that counts half done.

use super::*;
use std::collections::BTreeMap;
use zabkeeper_core::tree::snapshot;

/// One snapshot's open database.
pub(crate) struct SnapDb {
    db: sled::Db,
}

impl SnapDb {
    /// Chunk `index`, None if its tree is missing.
    pub(super) fn chunk(&self, index: u32) -> Result<Option<IVec>, StorageError> {
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
    pub(crate) path: PathBuf,
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
    pub(super) fn linger(mut self) {
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
    pub(crate) fn new(store_dir: &Path) -> Snapshots {
        Snapshots { path: store_dir.join(SNAPSHOT_DIR), catalog: Mutex::new(Catalog::default()) }
    }

    pub(crate) fn dir_of(&self, zxid: Zxid) -> PathBuf {
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
    pub(crate) fn explain(&self, error: StorageError) -> StorageError {
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
    pub(super) fn has(&self, zxid: Zxid) -> bool {
        lock(&self.catalog).done.contains_key(&zxid)
    }

    /// Whether a use holds the complete snapshot at `zxid` open.
    pub(super) fn in_use(&self, zxid: Zxid) -> bool {
        lock(&self.catalog).done.get(&zxid).is_some_and(|k| k.open.is_some())
    }

    pub(super) fn newest(&self) -> Zxid {
        lock(&self.catalog).done.last_key_value().map_or(Zxid::ZERO, |(zxid, _)| *zxid)
    }

    pub(super) fn above(&self, zxid: Zxid) -> Vec<Zxid> {
        lock(&self.catalog).done.range((Bound::Excluded(zxid), Bound::Unbounded)).map(|(z, _)| *z).collect()
    }

    /// The marker of the snapshot at `zxid`, a purged one still in use included.
    pub(super) fn raw_marker(&self, zxid: Zxid) -> Option<IVec> {
        let catalog = lock(&self.catalog);
        catalog.done.get(&zxid).map(|k| k.marker.clone()).or_else(|| catalog.doomed.get(&zxid).map(|(m, _)| m.clone()))
    }

    pub(super) fn raw_markers(&self) -> Vec<(Zxid, IVec)> {
        lock(&self.catalog).done.iter().map(|(z, k)| (*z, k.marker.clone())).collect()
    }

    /// Records a complete snapshot.
    pub(super) fn insert(&self, zxid: Zxid, marker: IVec) {
        lock(&self.catalog).done.insert(zxid, Known { marker, open: None });
    }

    /// Forgets the snapshot at `zxid` and removes its directory: at once if
    /// no use holds it open, else when the last use ends.
    pub(super) fn forget(&self, zxid: Zxid) -> Result<(), StorageError> {
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
    pub(super) fn remove_dir(&self, zxid: Zxid) -> Result<(), StorageError> {
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
    pub(crate) fn write(
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

/// The marker of the complete snapshot in `dir`, as stored; empty (which no
/// marker decodes from) when its database has none or refuses to open, so
/// what reads the snapshot reports it as incomplete.
pub(super) fn read_marker(dir: &Path) -> Result<IVec, StorageError> {
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
