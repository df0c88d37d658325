//! What a member's data directory takes on disk, by what its files hold,
//! from the store's layout (see the module above): for `status`, `mntr`,
//! `dirs` and the metrics, read from file metadata alone, never from the
//! store, so it costs the write path nothing.

use std::path::Path;

/// What a data directory takes on disk, by what its files hold: bytes the
/// filesystem allocated (as `du` counts them, so sled's preallocated
/// segments count as the space they take), read from file metadata alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// The log's sled database: its data file and blob files.
    pub log: u64,
    /// The snapshots' sled databases (one per snapshot, and one being written).
    pub snapshots: u64,
    /// sled's own bookkeeping, in every database: its config and page-table
    /// checkpoints (`conf`, `snap.*`).
    pub sled: u64,
    /// Anything else (the store's marker file, files an operator left).
    pub other: u64,
}

impl DiskUsage {
    /// Every byte counted.
    pub fn total(&self) -> u64 {
        self.log + self.snapshots + self.sled + self.other
    }

    /// Each kind's bytes under its name (the metrics' `kind` label).
    pub fn by_kind(&self) -> [(&'static str, u64); 4] {
        [("log", self.log), ("snapshots", self.snapshots), ("sled", self.sled), ("other", self.other)]
    }
}

/// Which of [`DiskUsage`]'s kinds a file is, from where it lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Log,
    Snapshots,
    Sled,
    Other,
}

/// The disk usage of the data directory `dir` (zero for a missing one:
/// metrics and status report what is there, not an error).
pub fn usage(dir: &Path) -> DiskUsage {
    let mut total = DiskUsage::default();
    walk(dir, &mut |path, bytes| {
        let kind = kind_of(path.strip_prefix(dir).unwrap_or(path));
        let slot = match kind {
            Kind::Log => &mut total.log,
            Kind::Snapshots => &mut total.snapshots,
            Kind::Sled => &mut total.sled,
            Kind::Other => &mut total.other,
        };
        *slot = slot.saturating_add(bytes);
    });
    total
}

/// The kind of the file at `relative` (a path inside the data directory).
fn kind_of(relative: &Path) -> Kind {
    let parts: Vec<&str> = relative.iter().filter_map(|p| p.to_str()).collect();
    let name = parts.last().copied().unwrap_or("");
    let sled_own = name == "conf" || name.starts_with("snap.");
    match parts.as_slice() {
        // sled's checkpoints and config, at the top or in a snapshot's database.
        [_] | [super::SNAPSHOT_DIR, _, _] if sled_own => Kind::Sled,
        ["db"] | ["blobs", _] => Kind::Log,
        [super::SNAPSHOT_DIR, ..] => Kind::Snapshots,
        _ => Kind::Other,
    }
}

/// Calls `visit` with every file under `dir` and the bytes allocated to it.
fn walk(dir: &Path, visit: &mut dyn FnMut(&Path, u64)) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        match entry.metadata() {
            Ok(m) if m.is_dir() => walk(&path, visit),
            // st_blocks counts 512-byte units whatever the filesystem's block size.
            Ok(m) => visit(&path, m.blocks().saturating_mul(512)),
            // Removed since the listing (a purge, a checkpoint replaced).
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_sorts_files_by_what_they_hold() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let write = |rel: &str, len: usize| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(path, vec![1u8; len]).expect("write");
        };
        write("db", 64 << 10);
        write("blobs/17", 200 << 10);
        write("conf", 100);
        write("snap.0000000000001234", 8 << 10);
        write("ZABKEEPER", 19);
        write("snapshots/0000000100000005/db", 32 << 10);
        write("snapshots/0000000100000005/blobs/3", 300 << 10);
        write("snapshots/0000000100000005/conf", 100);
        write("snapshots/0000000100000005/snap.00000000000000aa", 4 << 10);
        write("snapshots/0000000100000009.new/db", 16 << 10);
        let u = usage(root);
        assert!(u.log >= (64 + 200) << 10 && u.log < (64 + 200 + 16) << 10, "{u:?}");
        assert!(u.snapshots >= (32 + 300 + 16) << 10 && u.snapshots < (32 + 300 + 16 + 16) << 10, "{u:?}");
        assert!(u.sled >= (8 + 4) << 10 && u.sled < 32 << 10, "{u:?}");
        assert!(u.other > 0 && u.other <= 16 << 10, "the marker file: {u:?}");
        assert_eq!(usage(&root.join("missing")), DiskUsage::default());
    }
}
