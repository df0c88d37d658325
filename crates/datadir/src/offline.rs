//! Read-only access to a stopped member's data directory, and restoring a
//! member from a saved snapshot file.
//!
//! sled writes while it opens a store (recovery, format upgrade), so the
//! reader opens a copy in a temporary directory: the member's own files are
//! never touched, whatever the tool does.

use bytes::Bytes;
use std::io::Read;
use std::path::{Path, PathBuf};
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::storage::{Storage, StorageError};
use zabkeeper_core::tree::snapshot::{Reader, SnapshotError};
use zabkeeper_core::tree::TreeState;
use zabkeeper_core::zab::StorageOp;
use zabkeeper_store::SledStorage;

/// Chunk size when restoring from a file (the stream format lets records
/// straddle chunks, so any size works; the store's own size keeps them inline).
const RESTORE_CHUNK: usize = zabkeeper_store::SNAPSHOT_CHUNK_BYTES;

/// What went wrong reading a data directory or a snapshot file.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The store refused to open or read.
    #[error("{path}: {source}")]
    Storage {
        /// The data directory.
        path: PathBuf,
        /// The store's error.
        source: StorageError,
    },
    /// The snapshot file is not a complete, valid snapshot.
    #[error("{path} is not a valid snapshot: {source}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: SnapshotError,
    },
    /// Restoring would overwrite a member's data.
    #[error("{path} is not empty: restore writes a fresh data directory (move the old one aside first)")]
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> OfflineError + '_ {
    move |source| OfflineError::Io { path: path.to_path_buf(), source }
}

/// A stopped member's store, opened from a private copy.
pub struct Copy {
    /// The store (reads only are meant; writes would go to the copy).
    pub storage: SledStorage,
    // Dropped after the store: removes the copy.
    _dir: tempfile::TempDir,
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), OfflineError> {
    std::fs::create_dir_all(to).map_err(io_err(to))?;
    for item in std::fs::read_dir(from).map_err(io_err(from))? {
        let item = item.map_err(io_err(from))?;
        let (src, dst) = (item.path(), to.join(item.file_name()));
        if item.file_type().map_err(io_err(&src))?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(io_err(&src))?;
        }
    }
    Ok(())
}

/// Opens a copy of the store in `data_dir`, leaving `data_dir` untouched.
pub fn open_copy(data_dir: &Path) -> Result<Copy, OfflineError> {
    if !data_dir.is_dir() {
        return Err(OfflineError::Io {
            path: data_dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such data directory"),
        });
    }
    let dir = tempfile::Builder::new().prefix("zkctl-data-").tempdir().map_err(io_err(Path::new("$TMPDIR")))?;
    let copy = dir.path().join("data");
    copy_tree(data_dir, &copy)?;
    let storage =
        SledStorage::open(&copy).map_err(|source| OfflineError::Storage { path: data_dir.to_path_buf(), source })?;
    Ok(Copy { storage, _dir: dir })
}

/// Reads a saved snapshot file and checks it is a whole, consistent tree.
/// Returns its zxid, its chunks and its node count.
pub fn read_snapshot_file(file: &Path) -> Result<(Zxid, Vec<Bytes>, usize), OfflineError> {
    let (state, chunks) = read_snapshot(file)?;
    Ok((state.last_zxid(), chunks, state.node_count()))
}

/// The tree a saved snapshot file holds (checked whole and consistent).
pub fn read_snapshot_state(file: &Path) -> Result<TreeState, OfflineError> {
    read_snapshot(file).map(|(state, _)| state)
}

fn read_snapshot(file: &Path) -> Result<(TreeState, Vec<Bytes>), OfflineError> {
    let mut f = std::fs::File::open(file).map_err(io_err(file))?;
    let mut chunks = Vec::new();
    let mut reader = Reader::new();
    let bad = |source| OfflineError::Snapshot { path: file.to_path_buf(), source };
    loop {
        let mut chunk = Vec::with_capacity(RESTORE_CHUNK);
        let n = (&mut f).take(RESTORE_CHUNK as u64).read_to_end(&mut chunk).map_err(io_err(file))?;
        if n == 0 {
            break;
        }
        reader.feed(&chunk).map_err(bad)?;
        chunks.push(Bytes::from(chunk));
    }
    let state = reader.finish().map_err(bad)?;
    Ok((state, chunks))
}

/// Fails unless `data_dir` is absent or empty: a data directory is only
/// ever written fresh, never over a member's data.
pub fn ensure_empty(data_dir: &Path) -> Result<(), OfflineError> {
    if data_dir.exists() && std::fs::read_dir(data_dir).map_err(io_err(data_dir))?.next().is_some() {
        return Err(OfflineError::NotEmpty { path: data_dir.to_path_buf() });
    }
    Ok(())
}

/// Writes a fresh data directory holding the snapshot in `file` and nothing
/// else, as a member's starting point: on start it joins the ensemble and
/// the leader brings it up to date (DIFF or SNAP). Returns the snapshot's
/// zxid and node count.
pub fn restore(file: &Path, data_dir: &Path) -> Result<(Zxid, usize), OfflineError> {
    ensure_empty(data_dir)?;
    let (zxid, chunks, nodes) = read_snapshot_file(file)?;
    // The history up to `zxid` was committed in its epoch: the member has
    // seen that epoch, exactly as if it had synced to it.
    write_data_dir(data_dir, zxid, chunks, zxid.epoch())?;
    Ok((zxid, nodes))
}

/// Writes a fresh data directory (absent or empty, see [`ensure_empty`])
/// holding the snapshot `chunks` at `zxid` and nothing else, with `epoch`
/// (at least `zxid`'s) as the member's accepted and current epoch: the one
/// way both `snapshot restore` and `zkctl import` make a member's data, so
/// a member elected on it proposes in a later epoch, above every zxid in it.
pub fn write_data_dir(data_dir: &Path, zxid: Zxid, chunks: Vec<Bytes>, epoch: u32) -> Result<(), OfflineError> {
    ensure_empty(data_dir)?;
    std::fs::create_dir_all(data_dir).map_err(io_err(data_dir))?;
    let storage_err = |source| OfflineError::Storage { path: data_dir.to_path_buf(), source };
    let storage = SledStorage::open(data_dir).map_err(storage_err)?;
    let epoch = epoch.max(zxid.epoch());
    storage
        .apply(&[
            StorageOp::InstallSnapshot { zxid, chunks },
            StorageOp::SetAcceptedEpoch(epoch),
            StorageOp::SetCurrentEpoch(epoch),
        ])
        .and_then(|()| storage.flush())
        .map_err(storage_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zabkeeper_core::ids::SessionId;
    use zabkeeper_core::tree::{snapshot, DataTree};
    use zabkeeper_core::txn::{Entry, Txn, TxnBody};

    #[test]
    fn a_copy_reads_the_log_and_leaves_the_original_alone() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("m1");
        {
            let store = SledStorage::open(&data).unwrap();
            let txn = Txn { session: SessionId(1), cxid: 1, time_ms: 0, body: TxnBody::Delete { path: "/x".into() } };
            store.apply(&[StorageOp::Append(vec![Entry::new(Zxid::new(1, 1), txn)])]).unwrap();
            store.flush().unwrap();
        }
        let listing = |p: &Path| {
            let mut v: Vec<_> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).collect();
            v.sort();
            v
        };
        let before = listing(&data);
        let copy = open_copy(&data).unwrap();
        assert_eq!(copy.storage.log_bounds().unwrap(), Some((Zxid::new(1, 1), Zxid::new(1, 1))));
        drop(copy);
        assert_eq!(listing(&data), before);
        assert!(matches!(open_copy(&dir.path().join("absent")), Err(OfflineError::Io { .. })));
    }

    #[test]
    fn a_saved_snapshot_restores_into_an_empty_directory_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut tree = DataTree::new();
        tree.apply(
            Zxid::new(3, 7),
            &Txn {
                session: SessionId(1),
                cxid: 1,
                time_ms: 0,
                body: TxnBody::Create {
                    path: "/kept".into(),
                    data: bytes::Bytes::from_static(b"v").into(),
                    acl: zabkeeper_core::acl::Acl::open_unsafe(),
                    ephemeral_owner: 0,
                    parent_cversion: 1,
                },
            },
        );
        let (chunks, _) = snapshot::to_chunks(tree.state(), 100);
        let file = dir.path().join("snap.bin");
        std::fs::write(&file, chunks.concat()).unwrap();
        let data = dir.path().join("restored");
        let (zxid, nodes) = restore(&file, &data).unwrap();
        assert_eq!((zxid, nodes), (Zxid::new(3, 7), tree.state().node_count()));
        let recovered = SledStorage::open(&data).unwrap().recover().unwrap();
        assert_eq!((recovered.accepted_epoch, recovered.current_epoch), (3, 3));
        assert_eq!(recovered.snapshot.map(|s| s.digest()), Some(tree.state().digest()));
        assert!(matches!(restore(&file, &data), Err(OfflineError::NotEmpty { .. })));
        std::fs::write(&file, &chunks.concat()[..50]).unwrap();
        assert!(matches!(restore(&file, &dir.path().join("other")), Err(OfflineError::Snapshot { .. })));
    }
}
