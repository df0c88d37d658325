//! Free space on the data directory's filesystem, watched against the
//! configured reserve so a filling disk is met by refusing writes while
//! there is still room, not by a failed fsync (which stops the member).

use std::path::PathBuf;

/// The data directory's free space and whether it is below the reserve.
#[derive(Debug)]
pub struct DiskWatch {
    dir: PathBuf,
    reserve: u64,
    free: Option<u64>,
    low: bool,
}

impl DiskWatch {
    /// Watches `dir` against `reserve` bytes (0: never low).
    pub fn new(dir: PathBuf, reserve: u64) -> DiskWatch {
        DiskWatch { dir, reserve, free: None, low: false }
    }

    /// Reads the free space again; returns the new state when it changed.
    /// Once low, space must come back past the reserve by a sixteenth of it
    /// before writes resume, so a disk hovering at the edge does not flap.
    pub fn check(&mut self) -> Option<bool> {
        let free = match free_bytes(&self.dir) {
            Ok(free) => free,
            Err(e) => {
                // Unknown is not low: the fsync path still stops the member
                // if the disk really fails.
                if self.free.take().is_some() {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the data directory's free space");
                }
                return None;
            }
        };
        self.free = Some(free);
        let low = if self.low { free < self.reserve.saturating_add(self.reserve / 16) } else { free < self.reserve };
        if low == self.low {
            return None;
        }
        self.low = low;
        if low {
            tracing::warn!(free, reserve = self.reserve, dir = %self.dir.display(),
                "data directory is below its free-space reserve: refusing writes that grow the state");
        } else {
            tracing::info!(free, reserve = self.reserve, "data directory has space again: accepting writes");
        }
        Some(low)
    }

    /// Free bytes at the last check (None before one succeeded).
    pub fn free(&self) -> Option<u64> {
        self.free
    }

    /// Whether the directory is below its reserve.
    pub fn is_low(&self) -> bool {
        self.low
    }
}

/// Bytes an unprivileged process may still write on `dir`'s filesystem.
pub fn free_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(dir)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_larger_than_any_disk_is_low_and_zero_never_is() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut never = DiskWatch::new(dir.path().into(), 0);
        assert_eq!(never.check(), None, "a zero reserve is never low");
        assert!(never.free().is_some_and(|f| f > 0));
        let mut always = DiskWatch::new(dir.path().into(), u64::MAX);
        assert_eq!(always.check(), Some(true));
        assert!(always.is_low());
        assert_eq!(always.check(), None, "only changes are reported");
    }

    #[test]
    fn a_missing_directory_is_not_low() {
        let mut watch = DiskWatch::new(PathBuf::from("/nonexistent/zabkeeper-disk-watch"), u64::MAX);
        assert_eq!(watch.check(), None);
        assert_eq!(watch.free(), None);
    }
}
