//! `zkctl export`: Apache ZooKeeper's snapshot of our tree, the way back
//! from a migration. The tree comes from a snapshot file saved from a
//! running member (`zkctl admin snapshot save`: committed state), or from
//! the newest snapshot of a stopped member's data directory; the file
//! written is what ZooKeeper 3.4-3.9 load from `version-2/snapshot.<zxid>`
//! (see `zabkeeper_core::zookeeper_files::export` for what goes back).

use super::offline::{self, OfflineError};
use std::path::{Path, PathBuf};
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::storage::recovery::Source as _;
use zabkeeper_core::storage::{Storage, StorageError};
use zabkeeper_core::tree::TreeState;
use zabkeeper_core::zookeeper_files::{export, snapshot};

/// Where the tree to export comes from.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// A snapshot file saved from a member (`zkctl admin snapshot save`).
    SnapshotFile(&'a Path),
    /// A stopped member's data directory: its newest snapshot.
    DataDir(&'a Path),
}

/// What went wrong exporting.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The source could not be read.
    #[error(transparent)]
    Offline(#[from] OfflineError),
    /// The stopped member's store failed.
    #[error("{path}: {source}")]
    Storage {
        /// The data directory.
        path: PathBuf,
        /// The store's error.
        source: StorageError,
    },
    /// The data directory holds no snapshot yet.
    #[error("{path}: no snapshot to export (start the member and take one: zkctl admin snapshot take)")]
    NoSnapshot {
        /// The data directory.
        path: PathBuf,
    },
    /// The file could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What was exported.
#[derive(Clone, Debug)]
pub struct ExportReport {
    /// The file written.
    pub file: PathBuf,
    /// The zxid of the exported state (the file's name carries it).
    pub zxid: Zxid,
    /// Nodes written.
    pub nodes: usize,
    /// Open sessions written.
    pub sessions: usize,
    /// A stopped member's logged transactions after the snapshot, which the
    /// export does not hold (their commitment is not known offline).
    pub later_entries: Option<(Zxid, Zxid)>,
}

/// Writes ZooKeeper's snapshot of the tree `from` holds to `to`: a file, or,
/// when `to` is a directory, `to/snapshot.<zxid>` (the name ZooKeeper reads
/// the zxid from). The file is synced before this returns.
pub fn export(from: Source<'_>, to: &Path) -> Result<ExportReport, ExportError> {
    let (state, later_entries) = match from {
        Source::SnapshotFile(file) => (offline::read_snapshot_state(file)?, None),
        Source::DataDir(dir) => newest_snapshot(dir)?,
    };
    let file = if to.is_dir() { to.join(export::file_name(&state)) } else { to.to_path_buf() };
    let bytes = snapshot::encode(&export::from_tree(&state));
    write_synced(&file, &bytes).map_err(|source| ExportError::Write { path: file.clone(), source })?;
    Ok(ExportReport {
        file,
        zxid: state.last_zxid(),
        nodes: state.node_count(),
        sessions: state.session_count(),
        later_entries,
    })
}

/// The newest snapshot's tree in a stopped member's data directory, and the
/// range of logged entries after it, if any.
fn newest_snapshot(dir: &Path) -> Result<(TreeState, Option<(Zxid, Zxid)>), ExportError> {
    let copy = offline::open_copy(dir)?;
    let storage_err = |source| ExportError::Storage { path: dir.to_path_buf(), source };
    let newest = copy.storage.snapshots().map_err(storage_err)?.last().copied();
    let Some(meta) = newest else { return Err(ExportError::NoSnapshot { path: dir.to_path_buf() }) };
    let state = copy.storage.load_snapshot(meta.zxid).map_err(storage_err)?;
    let later = copy.storage.log_bounds().map_err(storage_err)?.filter(|(_, last)| *last > meta.zxid);
    Ok((state, later.map(|(first, last)| (first.max(Zxid(meta.zxid.0 + 1)), last))))
}

/// Writes `bytes` to `file` and syncs it, so a ZooKeeper started right after
/// (or after a crash) finds it whole.
fn write_synced(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(file)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use zabkeeper_core::ids::SessionId;
    use zabkeeper_core::txn::{Txn, TxnBody};
    use zabkeeper_core::zookeeper_files::recover::Recovery;

    #[test]
    fn a_saved_snapshot_exports_to_a_file_zookeepers_reader_recovers() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut tree = zabkeeper_core::tree::DataTree::new();
        let session = TxnBody::CreateSession { timeout_ms: 6_000, password: bytes::Bytes::from_static(b"p") };
        tree.apply(Zxid::new(1, 1), &Txn { session: SessionId(0x77), cxid: 0, time_ms: 0, body: session });
        let digest = vec![zabkeeper_core::acl::Acl::new(31, "digest", "u:hash=")];
        let creates = [
            ("/a", Some(&b"x\0y"[..]), digest.clone(), 0),
            ("/a/null", None, digest, 0),
            ("/e", Some(&b""[..]), zabkeeper_core::acl::Acl::open_unsafe(), 0x77),
        ];
        for (i, (path, data, acl, owner)) in creates.into_iter().enumerate() {
            let data = data.map_or(zabkeeper_core::data::Data::from(None), |d| bytes::Bytes::copy_from_slice(d).into());
            let body = TxnBody::Create { path: path.into(), data, acl, ephemeral_owner: owner, parent_cversion: 1 };
            tree.apply(
                Zxid::new(2, i as u32 + 1),
                &Txn { session: SessionId(0x77), cxid: 1, time_ms: 1_700_000_000_000, body },
            );
        }
        let state = tree.state().clone();
        let saved = dir.path().join("saved.snap");
        let (chunks, _) = zabkeeper_core::tree::snapshot::to_chunks(&state, 4096);
        std::fs::write(&saved, chunks.concat()).expect("write the saved snapshot");
        let report = export(Source::SnapshotFile(&saved), dir.path()).expect("exported");
        assert_eq!(report.file, dir.path().join(format!("snapshot.{:x}", state.last_zxid().0)));
        assert_eq!(report.nodes, state.node_count());
        let bytes = std::fs::read(&report.file).expect("read back");
        let decoded = snapshot::decode("exported", &bytes).expect("ZooKeeper's format");
        let zxid = state.last_zxid().0 as i64;
        let (back, _) =
            Recovery::from_snapshot("exported", &decoded, zxid).and_then(Recovery::finish).expect("recovers");
        assert_eq!(back.node_count(), state.node_count());
        for (path, node) in state.nodes() {
            let other = back.node(path).unwrap_or_else(|| panic!("{path} is missing"));
            assert_eq!((other.persisted(), other.data(), other.acl()), (node.persisted(), node.data(), node.acl()));
        }
        assert_eq!(back.session(SessionId(0x77)).map(|r| r.timeout_ms), Some(6_000), "the session and its ephemeral");
    }

    #[test]
    fn a_data_directory_without_a_snapshot_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        drop(zabkeeper_store::SledStorage::open(&data).expect("a fresh store"));
        let refused = export(Source::DataDir(&data), dir.path()).expect_err("nothing to export");
        assert!(refused.to_string().contains("zkctl admin snapshot take"), "{refused}");
    }
}
