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
//! sled 0.34's recovery is silent about blobs: it skips a record whose blob
//! file is missing and stops reading its log at one that fails its
//! checksum, as if the log ended there. [`check_blobs`] runs sled's own
//! check first, so a torn blob is an error that names the file.

use super::blob_watch::{BlobWatch, Changes};
use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use zabkeeper_core::storage::StorageError;

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

/// A blob file that fails the check sled makes when it reads one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TornBlob {
    /// The file.
    pub(crate) path: PathBuf,
    /// What is wrong with it.
    pub(crate) reason: String,
}

/// sled 0.34's blob header: a CRC32 (little-endian) of the kind byte and
/// the body, then the kind byte.
const BLOB_HEADER: usize = 5;

/// What a check of a database's blob files found, when nothing is damaged.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct BlobCheck {
    /// Blob files found whole.
    pub(crate) whole: usize,
    /// Torn blob files above the synced mark: a crash cut them short before
    /// the flush that would have synced them, so nothing acknowledged needs
    /// them, and sled drops them at recovery.
    pub(crate) unsynced: Vec<PathBuf>,
}

/// Checks every blob file of the sled database in `dir` as sled reads one:
/// its header, and its CRC32 over the kind byte and the body. Returns what
/// it found, or the first torn blob (lowest first) at or below the synced
/// mark. Without a mark (a store of a build before the mark, until its
/// first open here, or a snapshot's database), every torn blob counts.
pub(crate) fn check_blobs(dir: &Path) -> io::Result<Result<BlobCheck, TornBlob>> {
    let blob_dir = dir.join(BLOB_DIR);
    let mark = read_mark(dir)?;
    let mut names: Vec<OsString> = blob_names(&blob_dir)?.into_iter().collect();
    names.sort_by_key(|name| (name.len(), name.clone()));
    let mut found = BlobCheck::default();
    for name in &names {
        let path = blob_dir.join(name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Removed by sled since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let Some(reason) = blob_fault(&bytes) else {
            found.whole += 1;
            continue;
        };
        match (mark, lsn_of(name)) {
            (Some(mark), Some(lsn)) if lsn > mark => {
                tracing::warn!(path = %path.display(), %reason, mark, "a blob a crash cut short before it was synced, which nothing acknowledged needs");
                found.unsynced.push(path);
            }
            _ => return Ok(Err(TornBlob { path, reason })),
        }
    }
    Ok(Ok(found))
}

/// Refuses the sled database in `dir` if one of its blob files is torn at
/// or below its synced mark (sled would read its log only up to the record
/// that points at it). Returns the torn blobs above the mark, which a crash
/// left before the flush that would have synced them.
pub(crate) fn refuse_torn_blobs(dir: &Path) -> Result<Vec<PathBuf>, StorageError> {
    match check_blobs(dir)
        .map_err(|e| StorageError::Io { during: "open: checking the blob files", source: e.into() })?
    {
        Ok(found) => Ok(found.unsynced),
        Err(torn) => Err(StorageError::TornFile { path: torn.path.display().to_string(), reason: torn.reason }),
    }
}

/// Refuses a torn blob above the synced mark that sled kept when it opened
/// the database: sled drops one above its recovered log, so a blob it kept
/// is not a crash's leftover.
pub(crate) fn refuse_kept(unsynced: &[PathBuf]) -> Result<(), StorageError> {
    match unsynced.iter().find(|blob| blob.exists()) {
        Some(kept) => Err(StorageError::TornFile {
            path: kept.display().to_string(),
            reason: "it was written after the last synced blob and is torn, yet sled kept it".into(),
        }),
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

/// What is wrong with a blob file's `bytes`, if anything.
fn blob_fault(bytes: &[u8]) -> Option<String> {
    let Some((crc, rest)) = bytes.split_first_chunk::<4>() else {
        return Some(format!("{} bytes, shorter than a blob header ({BLOB_HEADER})", bytes.len()));
    };
    if rest.is_empty() {
        return Some(format!("{} bytes, shorter than a blob header ({BLOB_HEADER})", bytes.len()));
    }
    let expected = u32::from_le_bytes(*crc);
    let found = crc32fast::hash(rest);
    (expected != found)
        .then(|| format!("its checksum is {found:#010x} over {} bytes, its header says {expected:#010x}", rest.len()))
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
mod tests {
    use super::*;

    #[test]
    fn new_blob_files_are_synced_once_and_removed_ones_forgotten() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join(DATA_FILE), b"pages").expect("a data file");
        let durable = Durable::open(dir.path()).expect("open");
        durable.after_flush().expect("sync without a blob directory");
        assert_eq!(durable.synced_blob_count(), 0);
        let blobs = dir.path().join(BLOB_DIR);
        std::fs::create_dir(&blobs).expect("the blob directory");
        std::fs::write(blobs.join("17"), b"a large value").expect("a blob");
        std::fs::write(blobs.join("42"), b"another").expect("a blob");
        durable.before_flush().expect("sync two new blobs");
        assert_eq!(durable.synced_blob_count(), 2);
        std::fs::remove_file(blobs.join("17")).expect("remove a blob");
        durable.before_flush().expect("sync after a removal");
        assert_eq!(durable.synced_blob_count(), 1, "a removed blob is forgotten");
    }

    #[test]
    fn blob_files_present_at_open_are_covered_by_its_sync() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join(DATA_FILE), b"pages").expect("a data file");
        let blobs = dir.path().join(BLOB_DIR);
        std::fs::create_dir(&blobs).expect("the blob directory");
        for name in ["3", "5", "8"] {
            std::fs::write(blobs.join(name), b"left by an earlier run").expect("a blob");
        }
        let durable = Durable::open(dir.path()).expect("open");
        assert_eq!(durable.synced_blob_count(), 3, "the filesystem sync at open covers them");
        std::fs::write(blobs.join("13"), b"written since").expect("a new blob");
        durable.before_flush().expect("sync");
        assert_eq!(durable.synced_blob_count(), 4);
    }

    /// A temporary database directory with sled's blob directory in it.
    fn with_blob_dir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let blob_dir = dir.path().join(BLOB_DIR);
        std::fs::create_dir(&blob_dir).expect("the blob directory");
        (dir, blob_dir)
    }

    /// The durable half of a database in `dir` whose data file is written.
    fn opened(dir: &Path) -> Durable {
        std::fs::write(dir.join(DATA_FILE), b"pages").expect("a data file");
        Durable::open(dir).expect("open")
    }

    /// Blob files in `dir`'s blob directory: each written whole is synced by
    /// the next look, once; one still open for writing waits for the look
    /// after its close; a removed one is forgotten.
    fn looks_sync_each_closed_blob_once(dir: &Path, blobs: &mut NewBlobs) {
        let blob_dir = dir.join(BLOB_DIR);
        std::fs::write(blob_dir.join("17"), b"a large value").expect("a blob");
        assert_eq!(blobs.sync_new().expect("look"), Some(17));
        assert_eq!(blobs.sync_new().expect("look"), None, "synced once");
        let mut open = File::create(blob_dir.join("42")).expect("a blob being written");
        std::io::Write::write_all(&mut open, b"half of it").expect("write");
        std::fs::write(blob_dir.join("23"), b"whole").expect("a blob");
        let first = blobs.sync_new().expect("look");
        drop(open);
        let second = blobs.sync_new().expect("look");
        std::fs::remove_file(blob_dir.join("17")).expect("remove a blob");
        assert_eq!(blobs.sync_new().expect("look"), None);
        assert_eq!(blobs.synced.len(), 2, "a removed blob is forgotten: {:?}", blobs.synced);
        if blobs.watch.is_some() {
            assert_eq!((first, second), (Some(23), Some(42)), "the watch waits for the close");
        } else {
            // A listing cannot tell an open file: it syncs what is there.
            assert_eq!((first, second), (Some(42), None));
        }
    }

    #[test]
    fn a_watched_blob_directory_syncs_each_blob_once_after_its_close() {
        let (dir, _) = with_blob_dir();
        let mut blobs = NewBlobs::new(dir.path());
        assert!(blobs.watch.is_some(), "Linux watches the directory");
        assert_eq!(blobs.sync_new().expect("the first look lists"), None);
        looks_sync_each_closed_blob_once(dir.path(), &mut blobs);
    }

    #[test]
    fn without_a_watch_every_look_lists_the_blob_directory() {
        let (dir, _) = with_blob_dir();
        let mut blobs = NewBlobs { watch: None, ..NewBlobs::new(dir.path()) };
        looks_sync_each_closed_blob_once(dir.path(), &mut blobs);
    }

    #[test]
    fn a_blob_written_before_the_first_look_is_synced_by_it() {
        let (dir, blob_dir) = with_blob_dir();
        std::fs::write(blob_dir.join("5"), b"before the watch").expect("a blob");
        let mut blobs = NewBlobs::new(dir.path());
        std::fs::write(blob_dir.join("9"), b"after it").expect("a blob");
        assert_eq!(blobs.sync_new().expect("look"), Some(9));
        assert_eq!(blobs.synced.len(), 2);
        assert_eq!(blobs.sync_new().expect("look"), None, "the listing's look took in the watch's event too");
    }

    #[test]
    fn a_blob_listed_while_still_open_is_synced_again_once_closed() {
        let (dir, blob_dir) = with_blob_dir();
        let mut blobs = NewBlobs::new(dir.path());
        let mut open = File::create(blob_dir.join("11")).expect("a blob being written");
        std::io::Write::write_all(&mut open, b"the first half").expect("write");
        assert_eq!(blobs.sync_new().expect("the first look lists"), Some(11), "synced as far as written");
        std::io::Write::write_all(&mut open, b", the second").expect("write");
        drop(open);
        assert_eq!(blobs.sync_new().expect("look"), Some(11), "its close makes the next look sync it again");
        assert_eq!(blobs.sync_new().expect("look"), None);
    }

    #[test]
    fn a_removed_name_written_again_is_synced_again() {
        let (dir, blob_dir) = with_blob_dir();
        let mut blobs = NewBlobs::new(dir.path());
        assert_eq!(blobs.sync_new().expect("look"), None);
        std::fs::write(blob_dir.join("8"), b"first").expect("a blob");
        assert_eq!(blobs.sync_new().expect("look"), Some(8));
        std::fs::remove_file(blob_dir.join("8")).expect("remove");
        std::fs::write(blob_dir.join("8"), b"second").expect("the same name again");
        assert_eq!(blobs.sync_new().expect("look"), Some(8));
    }

    #[test]
    fn lost_events_make_the_look_list_the_directory() {
        let (dir, blob_dir) = with_blob_dir();
        let mut blobs = NewBlobs::new(dir.path());
        assert_eq!(blobs.sync_new().expect("look"), None);
        std::fs::write(blob_dir.join("6"), b"told").expect("a blob");
        std::fs::write(blob_dir.join("3"), b"its event dropped").expect("a blob");
        // What a watch whose queue overflowed tells: some names, and that it lost others.
        let seen = Changes { written: ["6".into()].into(), lost: true, ..Changes::default() };
        assert_eq!(blobs.sync_seen(Some(Ok(seen))).expect("look"), Some(6));
        assert_eq!(blobs.synced.len(), 2, "the listing found 3 too: {:?}", blobs.synced);
        assert!(blobs.watch.is_some(), "an overflow keeps the watch");
        let seen = Changes { written: ["6".into()].into(), ..Changes::default() };
        assert_eq!(blobs.sync_seen(Some(Ok(seen))).expect("look"), Some(6), "told again: synced again");
        assert!(!blobs.relist, "one listing per loss");
    }

    #[test]
    fn a_blob_closed_during_sled_s_flush_is_synced_before_the_data_file() {
        let (dir, blob_dir) = with_blob_dir();
        let durable = opened(dir.path());
        durable.before_flush().expect("before");
        // Written by another thread while sled's flush ran.
        std::fs::write(blob_dir.join("21"), b"a rewritten page").expect("a blob");
        durable.after_flush().expect("after");
        assert_eq!(durable.synced_blob_count(), 1);
        assert_eq!(read_mark(dir.path()).expect("the mark"), Some(21));
    }

    #[test]
    fn the_synced_mark_never_moves_down() {
        let (dir, blob_dir) = with_blob_dir();
        let durable = opened(dir.path());
        std::fs::write(blob_dir.join("100"), b"a higher blob").expect("a blob");
        durable.before_flush().expect("sync");
        assert_eq!(read_mark(dir.path()).expect("the mark"), Some(100));
        std::fs::write(blob_dir.join("90"), b"a lower one, closed later").expect("a blob");
        durable.before_flush().expect("sync");
        assert_eq!(durable.synced_blob_count(), 2);
        assert_eq!(read_mark(dir.path()).expect("the mark"), Some(100));
    }

    #[test]
    fn a_watch_that_ends_leaves_every_later_look_to_a_listing() {
        let (dir, blob_dir) = with_blob_dir();
        let mut blobs = NewBlobs::new(dir.path());
        assert_eq!(blobs.sync_new().expect("look"), None);
        // The watched directory replaced: its watch ends, with events unseen.
        std::fs::remove_dir(&blob_dir).expect("remove it");
        std::fs::create_dir(&blob_dir).expect("a new one");
        std::fs::write(blob_dir.join("3"), b"in the new directory").expect("a blob");
        assert_eq!(blobs.sync_new().expect("look"), Some(3), "a listing finds it");
        assert!(blobs.watch.is_none());
        std::fs::write(blob_dir.join("4"), b"later").expect("a blob");
        assert_eq!(blobs.sync_new().expect("look"), Some(4));
    }

    /// A blob file as sled 0.34 writes one.
    fn blob(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&[kind]);
        hasher.update(body);
        let mut out = hasher.finalize().to_le_bytes().to_vec();
        out.push(kind);
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn blob_files_are_checked_as_sled_reads_them_and_a_torn_one_is_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        assert_eq!(check_blobs(dir.path()).expect("no blob directory"), Ok(BlobCheck::default()));
        let blobs = dir.path().join(BLOB_DIR);
        std::fs::create_dir(&blobs).expect("the blob directory");
        std::fs::write(blobs.join("1200"), blob(3, b"a whole value")).expect("a blob");
        std::fs::write(blobs.join("900"), blob(4, &[])).expect("a blob with an empty body");
        assert_eq!(check_blobs(dir.path()).expect("check").map(|c| c.whole), Ok(2));

        let mut torn = blob(3, b"a value cut short by a crash");
        torn.truncate(torn.len() - 4);
        std::fs::write(blobs.join("77000"), &torn).expect("a torn blob");
        std::fs::write(blobs.join("88000"), &torn[..3]).expect("a blob cut inside its header");
        let found = check_blobs(dir.path()).expect("check").expect_err("two torn blobs");
        assert_eq!(found.path, blobs.join("77000"), "the lowest torn name is reported");
        assert!(found.reason.contains("checksum"), "{}", found.reason);
        std::fs::remove_file(blobs.join("77000")).expect("remove");
        let found = check_blobs(dir.path()).expect("check").expect_err("one torn blob");
        assert_eq!(found.path, blobs.join("88000"));
        assert!(found.reason.contains("3 bytes, shorter than a blob header"), "{}", found.reason);
    }

    #[test]
    fn a_torn_blob_above_the_synced_mark_is_a_crash_leftover_and_at_or_below_it_damage() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join(DATA_FILE), b"pages").expect("a data file");
        let blobs = dir.path().join(BLOB_DIR);
        std::fs::create_dir(&blobs).expect("the blob directory");
        std::fs::write(blobs.join("500"), blob(3, b"synced before its flush")).expect("a blob");
        let durable = Durable::open(dir.path()).expect("open");
        assert_eq!(read_mark(dir.path()).expect("mark"), Some(500), "what open found is synced");
        std::fs::write(blobs.join("900"), blob(3, b"written since")).expect("a new blob");
        durable.before_flush().expect("sync");
        assert_eq!(read_mark(dir.path()).expect("mark"), Some(900), "the mark moves past what a flush synced");

        // A crash cuts a blob written after the last flush: no acknowledged record points at it.
        std::fs::write(blobs.join("1300"), b"").expect("an empty blob, as delayed allocation leaves one");
        let found = check_blobs(dir.path()).expect("check").expect("a leftover, not damage");
        assert_eq!((found.whole, found.unsynced), (2, vec![blobs.join("1300")]));
        // A blob at or below the mark was durable once: torn now, it is damage.
        std::fs::write(blobs.join("900"), &blob(3, b"written since")[..6]).expect("tear a synced blob");
        let torn = check_blobs(dir.path()).expect("check").expect_err("damage");
        assert_eq!(torn.path, blobs.join("900"));
    }

    #[test]
    fn a_missing_data_file_is_an_error_not_a_silent_no_op() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let err = Durable::open(dir.path()).expect_err("no data file");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
