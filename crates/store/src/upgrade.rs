//! Older layouts of the snapshots, upgraded in place at open into a sled
//! database per snapshot (format 4): formats 1 and 2 kept them in the log's
//! database, format 3 in one database of their own (`snapshots` itself),
//! which never gave purged snapshots' blob files back.

use super::snapshots::{Marker, SNAPSHOT_FORMAT_KEY};
use super::*;

/// The format-3 snapshot database's format marker (all snapshots in one
/// database, `snapshots` itself), upgraded at open.
const ONE_DATABASE_FORMAT: &[u8] = b"zabkeeper-storage/3";

/// The key of one chunk in the format-3 database (and formats 1 and 2).
pub(crate) fn chunk_key(zxid: Zxid, index: u32) -> [u8; 12] {
    let mut key = [0; 12];
    key[..8].copy_from_slice(&zxid.0.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

impl SledStorage {
    /// Upgrades format 3: every snapshot of the one database `snapshots`
    /// moves into a database of its own beside it, then the old database's
    /// files go (with whatever blob files it never gave back). Idempotent:
    /// until the old `conf` goes (first of its files), the next open copies
    /// what is not copied yet; after, it removes the rest of the old files.
    pub(super) fn split_one_database(&self) -> Result<(), StorageError> {
        let dir = self.snaps.path.clone();
        let moved = {
            let config = sled::Config::new().path(&dir).cache_capacity(CACHE_BYTES).flush_every_ms(None);
            let old = guarded("open: opening the old snapshot database", || open_retrying(&config))?;
            match old.get(SNAPSHOT_FORMAT_KEY).map_err(io("open: reading the old snapshot format"))? {
                Some(found) if found.as_ref() == ONE_DATABASE_FORMAT => {}
                found => {
                    return Err(StorageError::NotAStore {
                        path: dir.display().to_string(),
                        reason: format!(
                            "its snapshot database has format marker {:?}, expected {:?}",
                            found.as_deref().map(String::from_utf8_lossy),
                            String::from_utf8_lossy(ONE_DATABASE_FORMAT)
                        ),
                    })
                }
            }
            let chunks = old.open_tree(CHUNK_TREE).map_err(io("open: old snapshot tree"))?;
            let index = old.open_tree(INDEX_TREE).map_err(io("open: old snapshot index tree"))?;
            self.copy_out(&chunks, &index)?
        };
        // The old database's files go; `conf` first, which says it is there.
        for name in ["conf", "db", "blobs"] {
            let path = dir.join(name);
            let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
            match removed {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fs_io("open: removing the old snapshot database")(e)),
            }
        }
        durable::sync_dir(&dir).map_err(fs_io("open: removing the old snapshot database"))?;
        tracing::info!(snapshots = moved, dir = %dir.display(), "snapshots moved into a database each");
        Ok(())
    }

    /// Writes each complete snapshot of an older layout's trees (`chunks`:
    /// zxid ‖ index → chunk, `index`: zxid → marker) as a database of its
    /// own, unless one is already there. Returns how many it wrote.
    fn copy_out(&self, chunks: &sled::Tree, index: &sled::Tree) -> Result<usize, StorageError> {
        let mut moved = 0;
        for item in ordered(INDEX_TREE, "moving snapshots out", index.iter()) {
            let (key, value) = item?;
            let zxid = zxid_of(INDEX_TREE, &key)?;
            if self.snaps.dir_of(zxid).is_dir() {
                continue;
            }
            let marker = Marker::decode(zxid, &value)?;
            let mut parts = (0..marker.chunks).map(|i| match chunks.get(chunk_key(zxid, i)) {
                Ok(Some(chunk)) => Ok(Bytes::copy_from_slice(&chunk)),
                Ok(None) => Err(StorageError::IncompleteSnapshot {
                    zxid,
                    reason: format!("chunk {i} of {} is missing", marker.chunks),
                }),
                Err(source) => Err(StorageError::Io { during: "moving snapshots out", source: source.into() }),
            });
            self.snaps.write(zxid, &mut parts, marker.created_ms)?;
            moved += 1;
        }
        Ok(moved)
    }

    /// Moves the snapshots a store of format 1 or 2 kept in the log's
    /// database into databases of their own. Idempotent: a crash part way
    /// leaves the old trees, and the next open copies them again.
    pub(super) fn move_snapshots_out(&self) -> Result<(), StorageError> {
        if !self.holds_tree(CHUNK_TREE) && !self.holds_tree(INDEX_TREE) {
            return Ok(());
        }
        let dir = &self.snaps.path;
        std::fs::create_dir_all(dir).map_err(fs_io("open: creating the snapshot directory"))?;
        durable::sync_dir(&self.path).map_err(fs_io("open: creating the snapshot directory"))?;
        let old_chunks = self.db.open_tree(CHUNK_TREE).map_err(io("open: old snapshot tree"))?;
        let old_index = self.db.open_tree(INDEX_TREE).map_err(io("open: old snapshot index tree"))?;
        let moved = self.copy_out(&old_chunks, &old_index)?;
        drop((old_chunks, old_index));
        for name in [CHUNK_TREE, INDEX_TREE] {
            self.db.drop_tree(name).map_err(io("open: dropping an old snapshot tree"))?;
        }
        self.flush_durably("open: flushing")?;
        tracing::info!(snapshots = moved, dir = %dir.display(), "moved snapshots into databases of their own");
        Ok(())
    }

    /// Whether the log's database holds the tree `name` (asked by name:
    /// opening a tree sled lacks would create it).
    pub(super) fn holds_tree(&self, name: &str) -> bool {
        self.db.tree_names().iter().any(|n| n.as_ref() == name.as_bytes())
    }
}
