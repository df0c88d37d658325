//! Snapshots in the sled store: one small sled database per snapshot, in
//! the store's `snapshots` directory, removed whole when it is purged.
//!
//! ```text
//! snapshots/
//!   000000010002a1f0/        the snapshot at zxid 0x10002a1f0: a sled database
//!   000000010003b2c4.new/    a snapshot being written (removed at open)
//!   000000010001903a.gone/   a purged snapshot being removed (removed at open)
//!   000000010002a1f0.old/    a snapshot being replaced by one at the same zxid
//!                            (removed at open, or put back if its successor
//!                            never took its name)
//! ```
//!
//! Why one database each. sled 0.34 deletes the file of a removed blob (a
//! value or page over ~128 KiB) only when the log segment that recorded the
//! removal is retired, and forgets the deferred deletion if the database
//! closes first. All snapshots in one database that wrote little else
//! (format 3) therefore never gave a purged snapshot's blob files back: a
//! member overwriting 1 MiB of data kept every snapshot it ever wrote,
//! ~27 MiB more per 100 000 writes. Removing a directory gives back exactly
//! what the snapshot held, at once.
//!
//! Why one tree per chunk. Chunks in one tree are values of the same leaf
//! pages, and sled rewrites a whole leaf (up to 16 values) as a new blob
//! each time it consolidates one: a 185 MB snapshot of 64 KiB chunks wrote
//! ~500 MB and left ~250 MB of files. A chunk alone in its tree is one
//! value written once: its own blob file, synced as soon as it is written
//! (so the device sees the snapshot as a trickle of 1 MiB flushes rather
//! than a burst at the end, which the log's fsync would queue behind).
//!
//! Why the databases are closed between uses: sled 0.34 keeps every page it
//! wrote in memory until its database closes, whatever its cache size says.
//!
//! A snapshot counts once its directory has its final name: it is written
//! under `<zxid>.new`, its files and the directory made durable, then
//! renamed. Each database also holds its completion marker (chunk count,
//! bytes, nodes, time), written after its chunks. A leader's snapshot (SNAP)
//! replaces the log too, which spans the log's database and this directory;
//! see [`SledStorage::install_snapshot`] for how a crash between them is
//! finished or undone at the next open.
//!
//! This file is the layout (names, keys, the marker); `catalog` holds the
//! snapshots' databases, `lifecycle` what the store does with them.

mod catalog;
mod lifecycle;

use super::*;
pub(crate) use catalog::Snapshots;

/// The directory of the snapshot databases, inside the store's.
pub(crate) const SNAPSHOT_DIR: &str = "snapshots";
/// Meta key (main database): a leader's snapshot at this zxid is being installed.
pub(crate) const INSTALLING: &str = "installing";
/// Key, in a snapshot database's default tree, of its format marker.
pub(super) const SNAPSHOT_FORMAT_KEY: &str = "format";
/// The format of one snapshot's database.
const SNAPSHOT_FORMAT: &[u8] = b"zabkeeper-snapshot/1";
/// Key, in a snapshot database's default tree, of its completion marker.
pub(crate) const MARKER_KEY: &str = "marker";
/// Key of a chunk in its own tree.
pub(crate) const CHUNK_KEY: &str = "chunk";
/// Suffix of a snapshot directory being written.
const NEW_SUFFIX: &str = ".new";
/// Suffix of a purged snapshot's directory being removed.
const GONE_SUFFIX: &str = ".gone";
/// Suffix of a replaced snapshot's directory being removed.
const OLD_SUFFIX: &str = ".old";

/// The completion marker of a stored snapshot.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(super) struct Marker {
    pub(super) chunks: u32,
    pub(super) bytes: u64,
    /// Nodes in it, from its footer (0 in markers of the first format).
    pub(super) nodes: u64,
    /// When it was written, ms since the Unix epoch (0 in the first format).
    pub(super) created_ms: i64,
}

/// The marker as the store's first format wrote it.
#[derive(Deserialize)]
struct MarkerV1 {
    chunks: u32,
    bytes: u64,
}

impl Marker {
    fn new(meta: &SnapshotMeta) -> Marker {
        Marker { chunks: meta.chunks, bytes: meta.bytes, nodes: meta.nodes, created_ms: meta.created_ms }
    }

    /// Reads a marker of either format.
    pub(super) fn decode(zxid: Zxid, value: &[u8]) -> Result<Marker, StorageError> {
        // A first-format value is too short for the new fields, so it never
        // decodes as the new format.
        codec::decode_value::<Marker>(value)
            .or_else(|_| {
                codec::decode_value::<MarkerV1>(value).map(|m| Marker {
                    chunks: m.chunks,
                    bytes: m.bytes,
                    nodes: 0,
                    created_ms: 0,
                })
            })
            .map_err(|e| StorageError::IncompleteSnapshot { zxid, reason: format!("its marker is corrupt: {e}") })
    }

    pub(super) fn meta(&self, zxid: Zxid) -> SnapshotMeta {
        SnapshotMeta { zxid, bytes: self.bytes, chunks: self.chunks, nodes: self.nodes, created_ms: self.created_ms }
    }
}

/// A marker as stored, for tests that build older layouts.
#[cfg(test)]
pub(crate) fn encode_marker(meta: &SnapshotMeta) -> Vec<u8> {
    codec::encode_value(&Marker::new(meta))
}

/// The name of chunk `index`'s tree in a snapshot's database.
pub(crate) fn chunk_tree(index: u32) -> String {
    format!("chunk-{index:010}")
}

/// The directory name of the snapshot at `zxid`.
pub fn snapshot_dir_name(zxid: Zxid) -> String {
    format!("{:016x}", zxid.0)
}

/// What a name in the snapshot directory is.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// A complete snapshot.
    Done(Zxid),
    /// A write a crash cut short.
    New,
    /// A removal a crash cut short.
    Gone,
    /// A replacement a crash cut short: the replaced snapshot.
    Old(Zxid),
    /// A file of the format-3 database (`conf`, `db`, `blobs`, `snap.*`).
    OneDatabase,
    /// Something else.
    Foreign,
}

fn classify(name: &str) -> Entry {
    let zxid = |hex: &str| (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok()).flatten();
    if let Some(z) = zxid(name) {
        return Entry::Done(Zxid(z));
    }
    if name.strip_suffix(NEW_SUFFIX).and_then(zxid).is_some() {
        return Entry::New;
    }
    if name.strip_suffix(GONE_SUFFIX).and_then(zxid).is_some() {
        return Entry::Gone;
    }
    if let Some(z) = name.strip_suffix(OLD_SUFFIX).and_then(zxid) {
        return Entry::Old(Zxid(z));
    }
    if matches!(name, "conf" | "db" | "blobs") || name.starts_with("snap.") {
        return Entry::OneDatabase;
    }
    Entry::Foreign
}

#[cfg(test)]
mod tests;
