//! Which blob files sled finished writing since the last look, from an
//! inotify watch on its blob directory: one non-blocking `read` per flush,
//! where listing the directory took an open, two `getdents` and a close (and
//! grew with the number of blobs, ~2 000 in a snapshot at 1 M znodes).
//!
//! A file counts once it is closed after writing (or renamed in), not when
//! it appears: sled writes a blob whole and closes it before the record that
//! points at it can be flushed, so a blob still being written belongs to no
//! write the flush acknowledges, and is synced by a later flush.
//!
//! The kernel drops events when its queue overflows, and a watch ends if the
//! directory is removed or moved: then the caller lists the directory again.
//! Where there is no inotify (not Linux), there is no watch, and every look
//! lists the directory.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::Path;
#[cfg(target_os = "linux")]
use {
    rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags},
    rustix::io::Errno,
    std::ffi::{CStr, OsStr},
    std::mem::MaybeUninit,
    std::os::fd::OwnedFd,
    std::os::unix::ffi::OsStrExt,
};

/// Bytes read from the watch at a time: room for many events, and at least
/// one with the longest name (an event's header and 256 bytes).
const READ_BUFFER: usize = 8192;

/// An inotify watch on one directory.
#[cfg(target_os = "linux")]
pub(crate) struct BlobWatch {
    fd: OwnedFd,
    buf: Vec<MaybeUninit<u8>>,
}

#[cfg(target_os = "linux")]
impl std::fmt::Debug for BlobWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobWatch").field("fd", &self.fd).finish_non_exhaustive()
    }
}

/// What the watch saw since the last look.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Files closed after writing, or moved in, and still there when seen.
    pub(crate) written: HashSet<OsString>,
    /// Files removed or moved out.
    pub(crate) removed: HashSet<OsString>,
    /// Events were lost (the kernel's queue overflowed) or the watch ended
    /// (the directory was removed or moved): only a listing tells now.
    pub(crate) lost: bool,
    /// The watch ended: no event will come from it again.
    pub(crate) ended: bool,
}

#[cfg(target_os = "linux")]
impl Changes {
    /// Takes in one event: its flags and the name it carries.
    pub(crate) fn take(&mut self, flags: ReadFlags, name: Option<&CStr>) {
        if flags.intersects(ReadFlags::QUEUE_OVERFLOW) {
            self.lost = true;
        }
        if flags.intersects(ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF | ReadFlags::UNMOUNT) {
            self.lost = true;
            self.ended = true;
        }
        let Some(name) = name.map(|n| OsStr::from_bytes(n.to_bytes()).to_owned()) else {
            return;
        };
        if flags.intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM) {
            self.written.remove(&name);
            self.removed.insert(name);
        } else if flags.intersects(ReadFlags::CLOSE_WRITE | ReadFlags::MOVED_TO) {
            self.removed.remove(&name);
            self.written.insert(name);
        }
    }
}

#[cfg(target_os = "linux")]
impl BlobWatch {
    /// Watches `dir` for files written, moved in, removed or moved out.
    pub(crate) fn new(dir: &Path) -> std::io::Result<BlobWatch> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        let events = WatchFlags::CLOSE_WRITE
            | WatchFlags::MOVED_TO
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        inotify::add_watch(&fd, dir, events)?;
        Ok(BlobWatch { fd, buf: vec![MaybeUninit::uninit(); READ_BUFFER] })
    }

    /// Everything the watch saw since the last call, without waiting.
    pub(crate) fn changes(&mut self) -> std::io::Result<Changes> {
        let mut changes = Changes::default();
        let mut reader = inotify::Reader::new(&self.fd, &mut self.buf);
        loop {
            match reader.next() {
                Ok(event) => changes.take(event.events(), event.file_name()),
                Err(Errno::AGAIN) => return Ok(changes),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// No watch where there is no inotify.
#[cfg(not(target_os = "linux"))]
#[derive(Debug)]
pub(crate) enum BlobWatch {}

#[cfg(not(target_os = "linux"))]
impl BlobWatch {
    /// Refused: the caller lists the directory instead.
    pub(crate) fn new(_dir: &Path) -> std::io::Result<BlobWatch> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "no inotify on this system"))
    }

    /// Never called: there is no watch.
    pub(crate) fn changes(&mut self) -> std::io::Result<Changes> {
        match *self {}
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;

    fn names(list: &[&str]) -> HashSet<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_file_counts_once_closed_after_writing_and_a_removed_one_is_told() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("1"), b"before the watch").expect("a file");
        let mut watch = BlobWatch::new(dir.path()).expect("a watch");
        assert_eq!(watch.changes().expect("look"), Changes::default(), "nothing since the watch began");
        let mut open = File::create(dir.path().join("2")).expect("create");
        open.write_all(b"half").expect("write");
        std::fs::write(dir.path().join("3"), b"whole").expect("a file");
        std::fs::remove_file(dir.path().join("1")).expect("remove");
        let seen = watch.changes().expect("look");
        assert_eq!(seen.written, names(&["3"]), "a file still open for writing does not count yet");
        assert_eq!(seen.removed, names(&["1"]));
        assert!(!seen.lost);
        drop(open);
        std::fs::rename(dir.path().join("3"), dir.path().join("4")).expect("rename");
        let seen = watch.changes().expect("look");
        assert_eq!(seen.written, names(&["2", "4"]));
        assert_eq!(seen.removed, names(&["3"]));
        assert_eq!(watch.changes().expect("look"), Changes::default(), "each event is told once");
    }

    #[test]
    fn a_file_written_then_removed_between_looks_is_only_removed() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut watch = BlobWatch::new(dir.path()).expect("a watch");
        std::fs::write(dir.path().join("7"), b"short-lived").expect("a file");
        std::fs::remove_file(dir.path().join("7")).expect("remove");
        let seen = watch.changes().expect("look");
        assert!(seen.written.is_empty());
        assert_eq!(seen.removed, names(&["7"]));
    }

    #[test]
    fn the_directory_removed_ends_the_watch_and_asks_for_a_listing() {
        let parent = tempfile::tempdir().expect("a temporary directory");
        let dir = parent.path().join("blobs");
        std::fs::create_dir(&dir).expect("a directory");
        let mut watch = BlobWatch::new(&dir).expect("a watch");
        std::fs::remove_dir(&dir).expect("remove it");
        let seen = watch.changes().expect("look");
        assert!(seen.lost && seen.ended, "{seen:?}");
    }

    #[test]
    fn an_overflowed_queue_asks_for_a_listing_and_keeps_the_watch() {
        let mut changes = Changes::default();
        changes.take(ReadFlags::CLOSE_WRITE, Some(c"5"));
        changes.take(ReadFlags::QUEUE_OVERFLOW, None);
        assert!(changes.lost && !changes.ended);
        assert_eq!(changes.written, names(&["5"]), "what was seen before the overflow stays");
    }

    #[test]
    fn a_watch_on_a_missing_directory_is_an_error() {
        let parent = tempfile::tempdir().expect("a temporary directory");
        assert!(BlobWatch::new(&parent.path().join("absent")).is_err());
    }
}
