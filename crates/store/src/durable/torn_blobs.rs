//! sled 0.34's recovery is silent about blobs: it skips a record whose blob
//! file is missing and stops reading its log at one that fails its
//! checksum, as if the log ended there. [`check_blobs`] runs sled's own
//! check first, so a torn blob is an error that names the file; one a crash
//! cut short before any flush synced it (above the synced mark) is told
//! apart from damage.

use super::{blob_names, lsn_of, read_mark, BLOB_DIR};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use zabkeeper_core::storage::StorageError;

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
