//! Which store a directory holds, checked at open: its format marker and
//! sidecar file, refusing a foreign or emptied database (sled 0.34 reads an
//! unreadable log as an empty one), and handing an older format to its
//! upgrade before anything else is written.

use super::*;

impl SledStorage {
    /// Checks the format marker, and that a store known to exist (its
    /// sidecar file says so) still has its contents: sled 0.34 treats an
    /// unreadable log as the end of the log, so a destroyed database would
    /// otherwise open as an empty one. Upgrades a store of an older format.
    /// Returns whether the store's snapshot database must already exist.
    pub(super) fn check_format(&self, has_sidecar: bool) -> Result<bool, StorageError> {
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
}
