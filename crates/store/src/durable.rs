//! What makes a sled flush durable.
//!
//! sled 0.34's flush is not an fsync. It writes its log buffer and waits
//! with `sync_file_range`, which neither flushes the drive's write cache nor
//! makes a grown file's new size durable, and it never syncs the blob files
//! it writes for values and pages over ~128 KiB, nor their directory. That
//! survives `kill -9` (the page cache does), not a power cut or a kernel
//! crash. So every flush of ours is wrapped: [`Durable::before_flush`]
//! syncs the blob files written since the last flush (sled writes a blob
//! when it serializes the value, before the flush that writes the record
//! pointing at it), and [`Durable::after_flush`] syncs those sled's other
//! threads wrote during the flush, then fdatasyncs the database file. An acknowledged write is
//! then on disk the way ZooKeeper's is after its `FileChannel.force`, and a
//! record that a flush made durable never points at a blob a power cut can
//! take back.
//!
//! The check of the blob files before sled opens a database, which sled's
//! own recovery would pass over in silence, is in `torn_blobs`.

mod torn_blobs;

use super::blob_watch::{BlobWatch, Changes};
use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
pub(crate) use torn_blobs::{check_blobs, refuse_kept, refuse_torn_blobs};

/// The file sled 0.34 keeps its log and pages in, inside its directory.
const DATA_FILE: &str = "db";
/// The directory of sled's blob files.
pub(crate) const BLOB_DIR: &str = "blobs";
/// The file, beside sled's, that holds the highest blob known synced (its
/// log sequence number, decimal). A blob above it may have been cut short
/// by a crash before the flush that would have synced it, which then
/// acknowledged nothing: sled drops such a blob at recovery. A torn blob at
/// or below it was durable once, so it is damage.
pub(crate) const SYNCED_MARK: &str = "blobs.synced";

/// The durability half of one sled database: its files, synced on demand.
#[derive(Debug)]
pub(crate) struct Durable {
    /// The database's directory (where the synced mark is kept).
    dir: PathBuf,
    /// sled's data file. fsync acts on the file, not the descriptor, so a
    /// descriptor of our own, read-only, syncs what sled's wrote.
    data: File,
    /// Its blob files, which of them are synced, and the synced mark.
    blobs: Mutex<Synced>,
}

/// What the flushes of one database synced.
#[derive(Debug)]
struct Synced {
    /// Its blob files, and which of them are synced.
    blobs: NewBlobs,
    /// The synced mark as written: it only moves up, so a blob synced late
    /// (one with a lower number, closed after a higher one) never lowers it.
    mark: Option<u64>,
}

/// The blob files of one sled database, and which of them are synced.
#[derive(Debug)]
pub(crate) struct NewBlobs {
    /// sled's blob directory.
    dir: PathBuf,
    /// Blob files already synced (and still present at the last look).
    synced: HashSet<OsString>,
    /// Tells which blob files were written since the last look, so that a
    /// flush need not list the directory. `None` where none could be set, or
    /// after it ended: then every look lists the directory.
    watch: Option<BlobWatch>,
    /// The next look lists the directory: nothing was looked at since the
    /// watch began, or the watch lost events.
    relist: bool,
}

impl NewBlobs {
    /// The blob files of the sled database in `db_dir`, none synced yet.
    pub(crate) fn new(db_dir: &Path) -> NewBlobs {
        let dir = db_dir.join(BLOB_DIR);
        let watch = watch(&dir);
        NewBlobs { dir, synced: HashSet::new(), watch, relist: true }
    }

    /// The blob files of the directory `dir`, `watch`ed since before it was
    /// listed as `synced` (all durable): the next look needs no listing
    /// unless there is no watch.
    fn listed(dir: PathBuf, watch: Option<BlobWatch>, synced: HashSet<OsString>) -> NewBlobs {
        NewBlobs { dir, synced, relist: watch.is_none(), watch }
    }

    /// Syncs the blob files written since the last look, then their
    /// directory, if any. The watch tells which were closed after writing
    /// since the last look; the directory is listed instead at the first
    /// look, without a watch, and after the watch lost events. Returns the
    /// highest blob (sled names a blob by the log sequence number of its
    /// record) it synced now, if any.
    pub(crate) fn sync_new(&mut self) -> io::Result<Option<u64>> {
        let seen = self.watch.as_mut().map(BlobWatch::changes);
        self.sync_seen(seen)
    }

    /// [`sync_new`](Self::sync_new) with what the watch saw (`None`: no watch).
    fn sync_seen(&mut self, seen: Option<io::Result<Changes>>) -> io::Result<Option<u64>> {
        let mut relist = std::mem::take(&mut self.relist) || seen.is_none();
        let mut written = HashSet::new();
        match seen {
            None => {}
            Some(Ok(changes)) => {
                relist |= changes.lost;
                if changes.ended {
                    tracing::warn!(dir = %self.dir.display(), "the blob directory's watch ended; listing it on every flush");
                    self.watch = None;
                }
                for name in &changes.removed {
                    self.synced.remove(name);
                }
                // Every one, synced before or not: a file closed after a
                // listing synced it may have been written since.
                written = changes.written;
            }
            Some(Err(e)) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "reading the blob directory's watch failed; listing it on every flush");
                self.watch = None;
                relist = true;
            }
        }
        if relist {
            let listing = blob_names(&self.dir)?;
            self.synced.retain(|name| listing.contains(name));
            written.extend(listing.into_iter().filter(|name| !self.synced.contains(name)));
        }
        let mut highest = None;
        let mut any_new = false;
        for name in written {
            match File::open(self.dir.join(&name)) {
                Ok(blob) => blob.sync_all()?,
                // Removed by sled since it was seen: nothing to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.synced.remove(&name);
                    continue;
                }
                Err(e) => return Err(e),
            }
            any_new = true;
            highest = highest.max(lsn_of(&name));
            self.synced.insert(name);
        }
        if any_new {
            sync_dir(&self.dir)?;
        }
        Ok(highest)
    }
}

/// A watch on the blob directory `dir`, or `None` (with a warning) where
/// none can be set: the directory is then listed on every flush.
fn watch(dir: &Path) -> Option<BlobWatch> {
    match BlobWatch::new(dir) {
        Ok(watch) => Some(watch),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "no watch on the blob directory; listing it on every flush");
            None
        }
    }
}

impl Durable {
    /// Opens the files of the sled database in `dir` (open it with sled
    /// first, and write nothing to it until this returns) and makes the
    /// database durable as found, so a database created just now, or
    /// whatever a crash left unsynced, survives a power cut before this
    /// process relies on it.
    ///
    /// On Linux one `syncfs` of the filesystem does that, not an fsync per
    /// file: at 1 M znodes a snapshot database holds ~2 000 blob files, and a
    /// clean file's fsync still flushes the drive's cache (~80 µs each here,
    /// 165 ms for them all, against a few ms for the `syncfs` on a quiet
    /// filesystem; it writes back whatever else is dirty there too). The
    /// data file's own fsync follows, because `syncfs` reports writeback
    /// errors only since Linux 5.8.
    pub(crate) fn open(dir: &Path) -> io::Result<Durable> {
        let data = File::open(dir.join(DATA_FILE))?;
        let blob_dir = dir.join(BLOB_DIR);
        // Watched before the listing, so a blob written meanwhile is told.
        let watch = watch(&blob_dir);
        // Listed before the sync, so each name counted synced is covered by it.
        let present = blob_names(&blob_dir)?;
        sync_everything(dir, &data, &present)?;
        data.sync_all()?;
        // Every blob present is durable now: the mark covers them all.
        let mut mark = read_mark(dir)?;
        if let Some(highest) = present.iter().filter_map(lsn_of).max() {
            if mark.is_none_or(|mark| mark < highest) {
                write_mark(dir, highest)?;
                mark = Some(highest);
            }
        }
        let blobs = NewBlobs::listed(blob_dir, watch, present);
        Ok(Durable { dir: dir.to_path_buf(), data, blobs: Mutex::new(Synced { blobs, mark }) })
    }

    /// Makes the blob files written since the last flush durable, then
    /// moves the synced mark past them: call before each sled flush, so the
    /// records it writes point at blobs already on disk.
    pub(crate) fn before_flush(&self) -> io::Result<()> {
        self.sync_blobs()
    }

    /// Makes everything sled has flushed durable: call after each sled
    /// flush. The storage thread's blobs were synced before it (it appends,
    /// and waits in the flush). Another thread's (sled's readers finish
    /// splits and merges, and rewrite pages) may have been written while it
    /// ran, for a record it flushed: sled's flush waits for every record it
    /// writes to be whole, and a record's blob is closed before that, so one
    /// more look finds them. Then the data file's fdatasync.
    pub(crate) fn after_flush(&self) -> io::Result<()> {
        self.sync_blobs()?;
        self.data.sync_data()
    }

    /// Syncs the blob files written since the last look, and moves the
    /// synced mark up past them.
    fn sync_blobs(&self) -> io::Result<()> {
        let mut synced = self.blobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match synced.blobs.sync_new()? {
            Some(highest) if synced.mark.is_none_or(|mark| mark < highest) => {
                write_mark(&self.dir, highest)?;
                synced.mark = Some(highest);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// How many blob files are known synced (for tests).
    #[cfg(test)]
    pub(crate) fn synced_blob_count(&self) -> usize {
        self.blobs.lock().map_or(0, |b| b.blobs.synced.len())
    }
}

/// Makes a sled database written once and closed durable: the blob files
/// `blobs` has not synced yet, every other file of its directory, the blob
/// directory and the directory itself (its entries).
pub(crate) fn seal(dir: &Path, blobs: &mut NewBlobs) -> io::Result<()> {
    blobs.sync_new()?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            File::open(entry.path())?.sync_all()?;
        }
    }
    if blobs.dir.is_dir() {
        sync_dir(&blobs.dir)?;
    }
    sync_dir(dir)
}

/// Waits until no process holds the sled database in `dir` open: sled
/// 0.34 lets go of its file (and the lock on it) only when its background
/// threads do, shortly after the last handle is dropped.
pub(crate) fn wait_closed(dir: &Path) -> io::Result<()> {
    let data = File::open(dir.join(DATA_FILE))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match rustix::fs::flock(&data, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            // Closing `data` releases it.
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Makes every file of the database in `dir` durable, and the entries of
/// its directories: one filesystem sync.
#[cfg(target_os = "linux")]
fn sync_everything(_dir: &Path, data: &File, _blobs: &HashSet<OsString>) -> io::Result<()> {
    rustix::fs::syncfs(data).map_err(io::Error::from)
}

/// Makes every file of the database in `dir` durable, and the entries of
/// its directories: file by file where there is no `syncfs`.
#[cfg(not(target_os = "linux"))]
fn sync_everything(dir: &Path, data: &File, blobs: &HashSet<OsString>) -> io::Result<()> {
    data.sync_all()?;
    for name in blobs {
        match File::open(dir.join(BLOB_DIR).join(name)) {
            Ok(blob) => blob.sync_all()?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if !blobs.is_empty() {
        sync_dir(&dir.join(BLOB_DIR))?;
    }
    sync_dir(dir)?;
    match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// The log sequence number a blob file is named by (sled names each by it).
fn lsn_of(name: &OsString) -> Option<u64> {
    name.to_str().and_then(|n| n.parse().ok())
}

/// The synced mark of the database in `dir`, if it has one.
pub(crate) fn read_mark(dir: &Path) -> io::Result<Option<u64>> {
    match std::fs::read_to_string(dir.join(SYNCED_MARK)) {
        Ok(text) => text.trim().parse().map(Some).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", dir.join(SYNCED_MARK).display()))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the synced mark durably (see [`write_durably`]).
fn write_mark(dir: &Path, highest: u64) -> io::Result<()> {
    write_durably(&dir.join(SYNCED_MARK), highest.to_string().as_bytes())
}

/// Writes a small file durably and whole: `<path>.new` written and synced,
/// renamed over `path`, and the directory synced, so a crash leaves the old
/// contents or the new, never part of them.
pub(crate) fn write_durably(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut new = path.as_os_str().to_owned();
    new.push(".new");
    let new = PathBuf::from(new);
    std::fs::write(&new, contents)?;
    File::open(&new)?.sync_all()?;
    std::fs::rename(&new, path)?;
    match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        Some(dir) => sync_dir(dir),
        None => sync_dir(Path::new(".")),
    }
}

/// The names in sled's blob directory (none while it does not exist).
fn blob_names(blob_dir: &Path) -> io::Result<HashSet<OsString>> {
    let listing = match std::fs::read_dir(blob_dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(e),
    };
    listing.map(|entry| entry.map(|e| e.file_name())).collect()
}

/// fsync of a directory: makes the entries created in it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
