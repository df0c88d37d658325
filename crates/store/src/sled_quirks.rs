//! Using sled 0.34 safely: it asserts on some damaged structures instead
//! of returning an error, defers frees until later calls, holds a dropped
//! database's lock a little longer, leaves unfinished page-table checkpoints
//! that stop its next open, fixes a database's segment size when it creates
//! it, and can revisit keys forever when its pages are damaged. Each
//! workaround is here, so the store's own code reads as if sled did not.

use super::*;

/// How long open waits for a just-dropped handle to release the file lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// sled's default segment size, which every store before format 4 has.
const SLED_DEFAULT_SEGMENT_BYTES: usize = 512 << 10;

/// Runs `f`, turning a panic inside sled into an error.
///
/// sled 0.34 asserts on some damaged on-disk structures instead of returning
/// an error; a damaged directory must be reported, not crash the process.
/// The failed handle is dropped with the closure and never used again.
pub(crate) fn guarded<T>(during: &'static str, f: impl FnOnce() -> Result<T, StorageError>) -> Result<T, StorageError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            Err(StorageError::Damaged { during, reason: zabkeeper_core::panics::message(payload.as_ref()) })
        }
    }
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
pub(crate) fn reclaim_deferred_frees() {
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
pub(crate) struct Ordered<I> {
    inner: I,
    tree: &'static str,
    during: &'static str,
    prev: Option<IVec>,
    failed: bool,
}

pub(crate) fn ordered<I>(tree: &'static str, during: &'static str, inner: I) -> Ordered<I> {
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
